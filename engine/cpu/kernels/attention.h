// The compiled attention primitive (attention.cpp) and the op that builds it.
#pragma once

#include "primitive.h"

namespace mlxchat {

// out[b, h, i] = softmax over keys j <= lengths[b] - L + i of (scale * q[b, h, i] . k[rows[b], h / G, j]) @ v:
// causal attention of each row's L new queries over the first lengths[b] keys of its slot, rows[b], of the
// K/V buffers (slots, kv_heads, capacity, dim), on the CPU; nothing of size L x S is stored. q is float32; K and V
// are one array each (float32, float16 or bfloat16), or MLX's 8-bit format each (values packed in uint32,
// float32 scales, float32 biases), read as stored and widened in registers.
mx::array slot_attention(const mx::array& q, const std::vector<mx::array>& k, const std::vector<mx::array>& v,
                         const mx::array& rows, const mx::array& lengths, float scale, int threads);

// slot_attention's work for one token a row, q (B, H, 1, D) row-major, over evaluated float K and V buffers (one
// array each), into out (B, H, 1, Dv): the layer stack's (layer_stack.cpp).
void attend_heads(const float* q, const mx::array& k, const mx::array& v, const int32_t* rows, const int32_t* lengths,
                  float* out, int64_t B, int64_t H, float scale, int threads);

struct AttentionParams {
  static constexpr const char* name = "SlotAttention";
  float scale;
  int threads;
  bool operator==(const AttentionParams&) const = default;
};

using SlotAttention = CpuPrimitive<AttentionParams>;

}  // namespace mlxchat
