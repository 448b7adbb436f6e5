// A decode pass's decoder layers, every one of them, as one primitive (layer_stack.cpp): the same work, in the
// same order, as the graph of each layer's operations (the q, k and v matmul with its RoPE, the K/V writes,
// attention, the o matmul, the residual add and norm, the gate and up matmul with its SwiGLU, the down matmul, the
// residual add and the next norm), so the same bits, without some three hundred MLX operations a step to queue.
#pragma once

#include <vector>

#include "matmul.h"

namespace mlxchat {

// {the final norm's output (M, hidden), then each layer's K and V} for a pass of M rows of one token each: h (M, hidden) float32 (the embedded
// tokens), row m of slot slots[m] at position starts[m] (int32), first_norm the first layer's norm weight. Each layer
// takes, in `layers`, its norm weight after attention, the norm weight after its MLP (the next layer's first norm or
// the model's final), its RoPE's inverse frequencies, its K and V buffers (slots, kv_heads, capacity, head_dim;
// float32, float16 or bfloat16), then the weights of its q, k and v, o, gate and up, and down products as
// weights_matmul takes them; `formats` holds (bits, group size, int8) of its four calls. Then each layer's K and V
// buffers, written in place at each row's position: the slots' buffers are the caller's alone (no other array may
// share their memory), and the caller holds these outputs as them from then on (evaluating them runs the pass).
struct StackParams {
  static constexpr const char* name = "LayerStack";
  int heads, kv_heads, head_dim;
  float eps, attention_scale;
  bool traditional;
  float rope_scale;
  int threads;
  std::vector<int> formats;  // (bits, group size, int8) for each layer's q/k/v, o, gate/up and down calls
  bool operator==(const StackParams&) const = default;
};

std::vector<mx::array> layer_stack(const mx::array& h, const mx::array& slots, const mx::array& starts, const mx::array& first_norm,
                      const std::vector<mx::array>& layers, const StackParams& params);

using LayerStack = CpuPrimitive<StackParams>;

}  // namespace mlxchat
