// The compiled matmul over weights as they are stored (quantized, float16, bfloat16; matmul.cpp) and the op that
// builds it.
#pragma once

#include <vector>

#include "primitive.h"

namespace mlxchat {

// How a weight matrix W (N, K) is held, as MLX stores it: affine quantized with `bits` 4 or 8,
// W[n, k] = scales[n, g] * q + biases[n, g] for g = k / group_size, the q packed little-endian into
// uint32 words (N, K * bits / 32), scales and biases float32, float16 or bfloat16; or with `bits` 16,
// W itself in float16 or bfloat16 (group_size unused).
struct WeightFormat {
  int bits;
  int group_size;
  bool operator==(const WeightFormat&) const = default;
};

// For each weight i, x (M, K) @ W_i.T -> (M, N_i) in float32 (x may also be heads (M, heads, 1, dim): the rows
// (M, heads * dim) of one token a sequence), all in one pass over the cores, W_i given as
// weights[3i] (packed values), weights[3i + 1] and weights[3i + 2] (scales and biases), or for 16 bits as
// weights[i] alone. A row's result is
// the same bits whatever other rows share the call. With `swiglu`, the two weights (gate, up) give one
// output, silu(x @ gate.T) * (x @ up.T). With `int8` INT8_ON, 4- and 8-bit weights multiply x rounded to int8 in
// blocks of 32 (matmul_int8.cpp): faster, and no longer the float32 product. INT8_PORTABLE and INT8_AVX2 do the same
// on those loops whatever else the CPU has, which the tests compare with the fastest path's bits.
enum Int8Rows { INT8_OFF = 0, INT8_ON = 1, INT8_PORTABLE = 2, INT8_AVX2 = 3 };
std::vector<mx::array> weights_matmul(const mx::array& x, const std::vector<mx::array>& weights, WeightFormat format,
                                      bool swiglu, int threads, int int8 = INT8_OFF);

// x @ W_i.T for weights as weights_matmul takes them (x: B sequences' L tokens as rows, (B * L, K)), each product's
// rows then as heads (B, N_i / head_dim, L, head_dim), the first `rotated` by RoPE as rope_rows turns them (offsets,
// inverse, traditional, scale): a layer's q, k and v projections and their RoPE as one operation, the same bits as
// the two apart.
std::vector<mx::array> weights_matmul_rope(const mx::array& x, const std::vector<mx::array>& weights,
                                           WeightFormat format, int threads, int int8, int batch, int head_dim,
                                           int rotated, const mx::array& offsets, const mx::array& inverse,
                                           bool traditional, float scale);

// How many arrays each weight of `bits` comes as: W itself (16 bits), or packed values, scales and biases.
inline size_t arrays_per_weight(int bits) { return bits == 16 ? 1 : 3; }

// What the profile calls a matmul's time over weights in `format` (rows rounded to int8 or not).
const char* matmul_part(WeightFormat format, int int8);

// weights_matmul's work on rows x (M, K) and evaluated weights (`count` of them, as weights_matmul takes them), product
// i into outs[i] (M, N_i): the layer stack's (layer_stack.cpp).
void matmul_rows(const float* x, int64_t M, int64_t K, const mx::array* weights, size_t count, WeightFormat format,
                 bool swiglu, float* const* outs, int threads, int int8);

// weights_matmul's check of its int8 (std::invalid_argument where it fails).
void checked_int8(int int8);

// weights_matmul's checks of `weights` for rows of width K (std::invalid_argument where they fail); the widths N_i
// of its products (one for swiglu).
std::vector<int64_t> checked_weights(int64_t K, const std::vector<mx::array>& weights, WeightFormat format, bool swiglu,
                                     int int8);

struct MatmulParams {
  static constexpr const char* name = "WeightsMatmul";
  WeightFormat format;
  bool swiglu;
  int threads;
  int int8;
  // weights_matmul_rope (a batch of 0: not): the offsets and inverse frequencies follow the weights in the inputs
  int batch = 0;
  int head_dim = 0;
  int rotated = 0;
  bool traditional = false;
  float scale = 1.0f;
  bool operator==(const MatmulParams&) const = default;
};

using WeightsMatmul = CpuPrimitive<MatmulParams>;

}  // namespace mlxchat
