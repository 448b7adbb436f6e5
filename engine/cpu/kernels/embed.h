// A quantized embedding's rows for a pass's tokens as one primitive (embed.cpp): MLX gathers the packed rows, their
// scales and biases, then dequantizes them in its CPU fallback, some 35 operations of every decode step's graph.
#pragma once

#include "primitive.h"

namespace mlxchat {

// The rows `ids` (any shape, integers) of an embedding stored as MLX's affine `bits` 4 or 8 (weight (V, D * bits / 32)
// uint32, scales and biases (V, D / group_size) float32, float16 or bfloat16): float32 (*ids.shape, D), as
// mx.dequantize of the gathered rows gives them with their scales and biases widened to float32 first (q * scale,
// rounded, then + bias). An id outside [0, V) gives a row of zeros.
mx::array embed_rows(const mx::array& ids, const mx::array& weight, const mx::array& scales, const mx::array& biases,
                     int group_size, int bits);

struct EmbedParams {
  static constexpr const char* name = "EmbedRows";
  int group_size;
  int bits;
  bool operator==(const EmbedParams&) const = default;
};

using EmbedRows = CpuPrimitive<EmbedParams>;

}  // namespace mlxchat
