// A decoder layer's small operations as one primitive each (layer_ops.cpp): MLX's CPU backend runs
// its fast RMSNorm and RoPE as their fallbacks, some ten and thirty operations each, and a decode
// step's graph then held some 4,000 of them for SmolLM2's 30 layers.
#pragma once

#include "primitive.h"

namespace mlxchat {

// x (..., D) * rsqrt(mean(x ** 2) + eps) * weight, row by row; float32.
mx::array rms_norm(const mx::array& x, const mx::array& weight, float eps);

// {h + delta, rms_norm(h + delta, weight, eps)}: a layer's residual add and the next norm as one operation, the
// same bits as the two apart. h and delta of one shape (..., D), float32.
std::vector<mx::array> add_rms_norm(const mx::array& h, const mx::array& delta, const mx::array& weight, float eps);

// Rotary position embedding of the rows xs[i] (B * L, heads[i] * D) of B sequences of L tokens, sequence b's
// token j at position offsets[b] + j (offsets int32, (B,) or one for all): out[i] (B, heads[i], L, D), as
// mx.fast.rope gives it for xs[i] as (B, heads[i], L, D). The first 2 * len(inverse) of each head's D are rotated
// (halves, or with `traditional` neighbouring pairs), pair f by the angle position * scale * inverse[f]. Several
// inputs (a layer's queries and keys) make one operation.
std::vector<mx::array> rope_rows(const std::vector<mx::array>& xs, int batch, const std::vector<int>& heads,
                                 const mx::array& offsets, const mx::array& inverse, bool traditional, float scale);

// rope_rows' work for one input's rows x (B * L, heads * D) into out (B, heads, L, D): the first `dims` of each head
// rotated (0: the rows only moved), offsets (B,) or with `one_offset` one for all, inverse (dims / 2,).
void rope_rows_into(const float* x, const int32_t* offsets, bool one_offset, const float* inverse, int64_t dims,
                    float* out, int64_t B, int64_t L, int64_t heads, int64_t D, bool traditional, float scale);

// rms_norm's and add_rms_norm's work on rows: out (rows, D) from x, and out[i] = h[i] + delta[i].
void norm_rows(const float* x, const float* weight, float* out, int64_t rows, int64_t D, float eps);
void add_rows(const float* h, const float* delta, float* out, int64_t n);

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
struct AddNormParams {
  static constexpr const char* name = "AddRmsNorm";
  float eps;
  bool operator==(const AddNormParams&) const = default;
};
struct RopeParams {
  static constexpr const char* name = "RopeRows";
  bool traditional;
  float scale;
  bool operator==(const RopeParams&) const = default;
};

using Swiglu = CpuPrimitive<SwigluParams>;
using RmsNorm = CpuPrimitive<NormParams>;
using AddRmsNorm = CpuPrimitive<AddNormParams>;
using RopeRows = CpuPrimitive<RopeParams>;

}  // namespace mlxchat
