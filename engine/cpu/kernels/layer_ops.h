// A decoder layer's small operations as one primitive each (layer_ops.cpp): MLX's CPU backend runs
// its fast RMSNorm and RoPE as their fallbacks, some ten and thirty operations each, and a decode
// step's graph then held some 4,000 of them for SmolLM2's 30 layers.
#pragma once

#include "primitive.h"

namespace mlxchat {

// x (..., D) * rsqrt(mean(x ** 2) + eps) * weight, row by row; float32.
mx::array rms_norm(const mx::array& x, const mx::array& weight, float eps);

// Rotary position embedding of the rows x (B * L, heads * D) of B sequences of L tokens, sequence b's token
// i at position offsets[b] + i (offsets int32, (B,) or one for all): out (B, heads, L, D), as mx.fast.rope
// gives it for x as (B, heads, L, D). The first 2 * len(inverse) of each head's D are rotated (halves, or
// with `traditional` neighbouring pairs), pair f by the angle position * scale * inverse[f].
mx::array rope_rows(const mx::array& x, int batch, int heads, const mx::array& offsets, const mx::array& inverse,
                    bool traditional, float scale);

// silu(gate) * up = gate * up / (1 + exp(-gate)), float32.
mx::array swiglu(const mx::array& gate, const mx::array& up);

struct SwigluParams {
  static constexpr const char* name = "Swiglu";
  bool operator==(const SwigluParams&) const = default;
};
struct NormParams {
  static constexpr const char* name = "RmsNorm";
  float eps;
  bool operator==(const NormParams&) const = default;
};
struct RopeParams {
  static constexpr const char* name = "RopeRows";
  bool traditional;
  float scale;
  bool operator==(const RopeParams&) const = default;
};

using Swiglu = CpuPrimitive<SwigluParams>;
using RmsNorm = CpuPrimitive<NormParams>;
using RopeRows = CpuPrimitive<RopeParams>;

}  // namespace mlxchat
