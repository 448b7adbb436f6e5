// x @ W.T on the CPU with W kept as stored (4- or 8-bit affine, float16, bfloat16, float32).
//
// The output columns are cut into blocks of COLUMNS; each block is a task for the worker pool. A
// task widens its block of W to float32 once (in cache), then every row takes its dot products
// with it, 8 lanes at a time, in the same order whatever the number of rows: a row's result does
// not depend on the rows beside it. Decode rows pay one read of the packed weights for all rows,
// which is what makes small batches cheap. As in attention.cpp, the inner loops are GCC vector
// code, cloned per x86 level and picked at run time.

#include "matmul.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "mlx/backend/cpu/encoder.h"
#include "pool.h"
#include "vectors.h"

namespace mlxchat {

namespace {

constexpr int64_t COLUMNS = 32;  // output columns of one task
constexpr int ROW_TILE = 6;     // rows sharing each loaded weight vector
constexpr int FUSED_ROWS = 8;   // up to this many rows, weights are widened in registers, not to memory
constexpr int COLUMN_TILE = 2;  // columns sharing each loaded row vector

struct Matrix {
  const void* values;
  const void* scales;
  const void* biases;
  int64_t N;
  float* out;  // (M, N); for swiglu only the first matrix's is written
};

// How weights and, for quantized ones, their scales are held: known at compile time in the inner loops.
enum class Kind { q4, q4_f16, q4_bf16, q8, q8_f16, q8_bf16, f16, bf16, f32 };
enum class Float { f32, f16, bf16 };

constexpr bool is_q4(Kind k) { return k == Kind::q4 || k == Kind::q4_f16 || k == Kind::q4_bf16; }
constexpr bool is_q8(Kind k) { return k == Kind::q8 || k == Kind::q8_f16 || k == Kind::q8_bf16; }
constexpr bool is_quantized(Kind k) { return is_q4(k) || is_q8(k); }
// The float type of a quantized kind's scales and biases, or of a float kind's values.
constexpr Float float_of(Kind k) {
  if (k == Kind::q4_f16 || k == Kind::q8_f16 || k == Kind::f16) return Float::f16;
  if (k == Kind::q4_bf16 || k == Kind::q8_bf16 || k == Kind::bf16) return Float::bf16;
  return Float::f32;
}

struct Problem {
  const float* x;
  int64_t M, K;
  Kind kind;
  int group_size;
  bool swiglu;
  std::vector<Matrix> matrices;
  std::vector<int64_t> first_task;  // of each matrix, and the total at the end
};

template <Float F>
__attribute__((always_inline)) inline float scalar(const void* p, int64_t i) {
  if constexpr (F == Float::f32) return static_cast<const float*>(p)[i];
  const uint16_t bits = static_cast<const uint16_t*>(p)[i];
  if constexpr (F == Float::bf16) return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
  return static_cast<float>(std::bit_cast<_Float16>(bits));
}

// Eight weights k..k+7 of a row, widened to float32.
template <Kind KIND>
__attribute__((always_inline)) inline v8 widen(const void* row, int64_t k) {
  // k is a multiple of 8 (and never negative): shifts, not divisions, find its word.
  if constexpr (is_q4(KIND)) {
    const v8u shifts = {0, 4, 8, 12, 16, 20, 24, 28};
    const uint32_t word = static_cast<const uint32_t*>(row)[k >> 3];
    return __builtin_convertvector((v8i)(((v8u){} + word) >> shifts & 15u), v8);
  } else if constexpr (is_q8(KIND)) {
    // The 8 bytes in every quarter, then each byte moved to the bottom of its lane: in-lane moves, so GCC
    // makes them one broadcast and one byte shuffle.
    uint64_t bytes;
    std::memcpy(&bytes, static_cast<const uint8_t*>(row) + k, sizeof bytes);
    const v32b pick = {0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 20, 0, 0, 0, 21, 0, 0, 0, 22, 0, 0, 0, 23, 0, 0, 0};
    const v32b spread = __builtin_shuffle((v32b)(v4q){bytes, bytes, bytes, bytes}, pick);
    return __builtin_convertvector((v8i)((v8u)spread & 255u), v8);
  } else if constexpr (KIND == Kind::f32) {
    return load8(static_cast<const float*>(row) + k);
  } else {
    v8h h;
    std::memcpy(&h, static_cast<const uint16_t*>(row) + k, sizeof h);
    if constexpr (KIND == Kind::f16) return __builtin_convertvector(std::bit_cast<v8f16>(h), v8);
    // bfloat16: the upper half of a float32
    return std::bit_cast<v8>(__builtin_convertvector(h, v8u) << 16);
  }
}

// K rounded up to whole vectors; the padding holds zeros, which add nothing to a sum.
inline int64_t padded(int64_t K) { return (K + 7) / 8 * 8; }

// X (M x K) as panels of `height` rows (the last may have fewer): for each 8 k's, the panel's rows' vectors
// side by side, so that one pointer walks a panel. Panel m0 starts at m0 * padded(K).
void pack_rows(const float* X, int64_t M, int64_t K, int64_t height, float* out) {
  const int64_t Kp = padded(K);
  for (int64_t m0 = 0; m0 < M; m0 += height) {
    const int64_t R = std::min<int64_t>(height, M - m0);
    float* panel = out + m0 * Kp;
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t k = 0; k < Kp; ++k) panel[(k / 8 * R + r) * 8 + k % 8] = k < K ? X[(m0 + r) * K + k] : 0.0f;
    }
  }
}

// Calls use(i, vectors) for each 8 weights i * 8.. of rows n..n + C - 1 of W, widened to float32 (the last
// zero-padded): the one place weights are widened, so that every path multiplies by the same values.
template <Kind KIND, int C, class Use>
__attribute__((always_inline)) inline void each_vector(const Problem& p, const Matrix& w, int64_t n, Use use) {
  const int64_t K = p.K;
  v8 v[C];
  if constexpr (is_quantized(KIND)) {
    // K is a whole number of groups, and a group of vectors.
    const int64_t group = p.group_size, groups = K / group, words = K * (is_q4(KIND) ? 4 : 8) / 32;
    const uint32_t* rows[C];
    for (int c = 0; c < C; ++c) rows[c] = static_cast<const uint32_t*>(w.values) + (n + c) * words;
    for (int64_t g = 0; g < groups; ++g) {
      float s[C], b[C];
      for (int c = 0; c < C; ++c) {
        s[c] = scalar<float_of(KIND)>(w.scales, (n + c) * groups + g);
        b[c] = scalar<float_of(KIND)>(w.biases, (n + c) * groups + g);
      }
      for (int64_t k = g * group; k < (g + 1) * group; k += 8) {
        for (int c = 0; c < C; ++c) v[c] = widen<KIND>(rows[c], k) * s[c] + b[c];
        use(k >> 3, v);
      }
    }
  } else {
    const int64_t size = KIND == Kind::f32 ? 4 : 2;
    const char* rows[C];
    for (int c = 0; c < C; ++c) rows[c] = static_cast<const char*>(w.values) + (n + c) * K * size;
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
      for (int c = 0; c < C; ++c) v[c] = widen<KIND>(rows[c], k);
      use(k >> 3, v);
    }
    if (k < K) {
      for (int c = 0; c < C; ++c) {
        float tail[8] = {};
        for (int64_t j = k; j < K; ++j) tail[j - k] = scalar<float_of(KIND)>(rows[c], j);
        v[c] = load8(tail);
      }
      use(k >> 3, v);
    }
  }
}

// Row n of W as float32, as lane block `c` of a panel of C columns: vector i at (i * C + c) * 8.
template <Kind KIND>
__attribute__((always_inline)) inline void widen_row(const Problem& p, const Matrix& w, int64_t n, float* panel,
                                                     int C, int c) {
  each_vector<KIND, 1>(p, w, n, [&](int64_t i, const v8* v) { store8(panel + (i * C + c) * 8, v[0]); });
}

// y[r * ldy + c] = X[r] . W[n + c] for the R rows of one panel and C columns, each weight vector widened in
// registers and used at once by every row (few rows: widening to memory would cost more than the products).
// C columns at once give a few rows enough independent sums to hide the adds' latency. Each (row, column)
// sums as dot_tile does, so its result is the same bits either way.
template <Kind KIND, int R, int C>
__attribute__((always_inline)) inline void fused_columns(const Problem& p, const Matrix& w, int64_t n, const float* X,
                                                         float* y, int64_t ldy) {
  v8 acc[R][C] = {};
  each_vector<KIND, C>(p, w, n, [&](int64_t i, const v8* v) {
    const float* x = X + i * R * 8;
    for (int r = 0; r < R; ++r) {
      const v8 xv = load8(x + r * 8);
      for (int c = 0; c < C; ++c) acc[r][c] += xv * v[c];
    }
  });
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) y[r * ldy + c] = sum8(acc[r][c]);
  }
}

// Columns [n0, n1) for the R rows of one panel: C at a time, then one by one.
template <Kind KIND, int R>
__attribute__((always_inline)) inline void fused_block(const Problem& p, const Matrix& w, int64_t n0, int64_t n1,
                                                       const float* X, float* Y, int64_t ldy) {
  constexpr int C = R <= 2 ? 4 : R <= 4 ? 2 : 1;  // R x C sums, and C widened vectors, fit in 16 registers
  int64_t n = n0;
  for (; n + C <= n1; n += C) fused_columns<KIND, R, C>(p, w, n, X, Y + (n - n0), ldy);
  for (; n < n1; ++n) fused_columns<KIND, R, 1>(p, w, n, X, Y + (n - n0), ldy);
}

// Rows [n0, n1) of W as float32 panels of COLUMN_TILE columns (the last may have one), panel j at j * 2 * padded(K).
template <Kind KIND>
__attribute__((always_inline)) inline const float* widen_block(const Problem& p, const Matrix& w, int64_t n0, int64_t n1,
                                                               float* out) {
  const int64_t Kp = padded(p.K);
  for (int64_t n = n0; n < n1; ++n) {
    const int64_t first = n0 + (n - n0) / COLUMN_TILE * COLUMN_TILE;
    const int C = static_cast<int>(std::min<int64_t>(COLUMN_TILE, n1 - first));
    widen_row<KIND>(p, w, n, out + (first - n0) * Kp, C, static_cast<int>(n - first));
  }
  return out;
}

// Y[r, c] = X[r] . W[c] for a panel of R rows and one of C columns: each loaded weight vector serves R rows,
// each row vector C columns. Every (r, c) sums in the same order for any R and C: a row's result does not
// depend on the rows that share its panel.
template <int R, int C>
__attribute__((always_inline)) inline void dot_tile(const float* X, const float* W, int64_t vectors, float* Y,
                                                    int64_t ldy) {
  v8 acc[R][C] = {};
  for (int64_t i = 0; i < vectors; ++i, X += R * 8, W += C * 8) {
    v8 w[C];
    for (int c = 0; c < C; ++c) w[c] = load8(W + c * 8);
    for (int r = 0; r < R; ++r) {
      const v8 xv = load8(X + r * 8);
      for (int c = 0; c < C; ++c) acc[r][c] += xv * w[c];
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) Y[r * ldy + c] = sum8(acc[r][c]);
  }
}

template <int R>
__attribute__((always_inline)) inline void dot_panel(const float* X, int64_t Kp, const float* W, int64_t columns,
                                                     float* Y, int64_t ldy) {
  int64_t c = 0;
  for (; c + COLUMN_TILE <= columns; c += COLUMN_TILE) dot_tile<R, COLUMN_TILE>(X, W + c * Kp, Kp / 8, Y + c, ldy);
  if (c < columns) dot_tile<R, 1>(X, W + c * Kp, Kp / 8, Y + c, ldy);
}

// Y (M x columns, leading dimension ldy) = X . W.T, from pack_rows' and widen_block's panels: each panel of
// rows sweeps the block of W while it stays in the nearest cache.
__attribute__((always_inline)) inline void dots(const float* X, int64_t M, int64_t Kp, const float* W, int64_t columns,
                                                float* Y, int64_t ldy) {
  for (int64_t m = 0; m < M; m += ROW_TILE) {
    const float* panel = X + m * Kp;
    float* y = Y + m * ldy;
    switch (std::min<int64_t>(ROW_TILE, M - m)) {
      case 6: dot_panel<6>(panel, Kp, W, columns, y, ldy); break;
      case 5: dot_panel<5>(panel, Kp, W, columns, y, ldy); break;
      case 4: dot_panel<4>(panel, Kp, W, columns, y, ldy); break;
      case 3: dot_panel<3>(panel, Kp, W, columns, y, ldy); break;
      case 2: dot_panel<2>(panel, Kp, W, columns, y, ldy); break;
      default: dot_panel<1>(panel, Kp, W, columns, y, ldy); break;
    }
  }
}

// Y (M x (n1 - n0), leading dimension ldy) = X . W[n0:n1].T: few rows widen in registers, more widen the
// block once into `buffer` for all their panels.
template <Kind KIND>
__attribute__((always_inline)) inline void columns(const Problem& p, const Matrix& w, int64_t n0, int64_t n1,
                                                   const float* X, float* Y, int64_t ldy, float* buffer) {
  if (p.M > FUSED_ROWS) {
    dots(X, p.M, padded(p.K), widen_block<KIND>(p, w, n0, n1, buffer), n1 - n0, Y, ldy);
    return;
  }
  switch (p.M) {
    case 8: return fused_block<KIND, 8>(p, w, n0, n1, X, Y, ldy);
    case 7: return fused_block<KIND, 7>(p, w, n0, n1, X, Y, ldy);
    case 6: return fused_block<KIND, 6>(p, w, n0, n1, X, Y, ldy);
    case 5: return fused_block<KIND, 5>(p, w, n0, n1, X, Y, ldy);
    case 4: return fused_block<KIND, 4>(p, w, n0, n1, X, Y, ldy);
    case 3: return fused_block<KIND, 3>(p, w, n0, n1, X, Y, ldy);
    case 2: return fused_block<KIND, 2>(p, w, n0, n1, X, Y, ldy);
    default: return fused_block<KIND, 1>(p, w, n0, n1, X, Y, ldy);
  }
}

template <Kind KIND>
__attribute__((always_inline)) inline void block(const Problem& p, const float* X, int64_t task,
                                                 std::vector<float>& scratch) {
  const int64_t index = std::upper_bound(p.first_task.begin(), p.first_task.end(), task) - p.first_task.begin() - 1;
  const Matrix& w = p.matrices[index];
  const int64_t n0 = (task - p.first_task[index]) * COLUMNS, n1 = std::min(n0 + COLUMNS, w.N), width = n1 - n0;
  const int64_t panel = p.M > FUSED_ROWS ? COLUMNS * padded(p.K) : 0;
  if (!p.swiglu) {
    scratch.resize(panel);
    columns<KIND>(p, w, n0, n1, X, w.out + n0, w.N, scratch.data());
    return;
  }
  // silu(x . gate) * (x . up), for the same columns of both.
  scratch.resize(panel + 2 * p.M * COLUMNS);
  float* gate = scratch.data() + panel;
  float* up = gate + p.M * COLUMNS;
  columns<KIND>(p, w, n0, n1, X, gate, COLUMNS, scratch.data());
  columns<KIND>(p, p.matrices[1], n0, n1, X, up, COLUMNS, scratch.data());
  for (int64_t m = 0; m < p.M; ++m) {
    for (int64_t c = 0; c < width; ++c) {
      const float g = gate[m * COLUMNS + c];
      w.out[m * w.N + n0 + c] = g / (1.0f + std::exp(-g)) * up[m * COLUMNS + c];
    }
  }
}

MLXCHAT_CLONES void run_task(const Problem& p, const float* X, int64_t task, std::vector<float>& scratch) {
  switch (p.kind) {
    case Kind::q4: return block<Kind::q4>(p, X, task, scratch);
    case Kind::q4_f16: return block<Kind::q4_f16>(p, X, task, scratch);
    case Kind::q4_bf16: return block<Kind::q4_bf16>(p, X, task, scratch);
    case Kind::q8: return block<Kind::q8>(p, X, task, scratch);
    case Kind::q8_f16: return block<Kind::q8_f16>(p, X, task, scratch);
    case Kind::q8_bf16: return block<Kind::q8_bf16>(p, X, task, scratch);
    case Kind::f16: return block<Kind::f16>(p, X, task, scratch);
    case Kind::bf16: return block<Kind::bf16>(p, X, task, scratch);
    case Kind::f32: return block<Kind::f32>(p, X, task, scratch);
  }
}

void run(const Problem& p, int threads) {
  std::vector<float> X(p.M * padded(p.K));
  pack_rows(p.x, p.M, p.K, p.M > FUSED_ROWS ? ROW_TILE : p.M, X.data());
  parallel_for(p.first_task.back(), threads, [&p, &X](int64_t task) {
    thread_local std::vector<float> scratch;
    run_task(p, X.data(), task, scratch);
  });
}

int per_matrix(WeightFormat format) { return format.bits == 0 ? 1 : 3; }

// `type`: the dtype of the scales (quantized) or of the values (float).
Kind kind_of(WeightFormat format, mx::Dtype type) {
  const int f = type == mx::float16 ? 1 : type == mx::bfloat16 ? 2 : 0;
  if (format.bits == 4) return std::array{Kind::q4, Kind::q4_f16, Kind::q4_bf16}[f];
  if (format.bits == 8) return std::array{Kind::q8, Kind::q8_f16, Kind::q8_bf16}[f];
  return std::array{Kind::f32, Kind::f16, Kind::bf16}[f];
}

}  // namespace

void WeightsMatmul::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  auto& encoder = mx::cpu::get_command_encoder(stream());
  const auto& x = inputs[0];
  for (const auto& a : inputs) encoder.set_input_array(a);
  Problem p{x.data<float>(), x.shape(0), x.shape(1), kind_of(format_, inputs[format_.bits ? 2 : 1].dtype()), format_.group_size, swiglu_,
            {}, {0}};
  const int per = per_matrix(format_);
  for (size_t i = 0; i * per + 1 < inputs.size(); ++i) {
    const auto& values = inputs[1 + i * per];
    const bool quantized = per == 3;
    float* out = nullptr;
    if (i < outputs.size()) {
      outputs[i].set_data(mx::allocator::malloc(outputs[i].nbytes()));
      encoder.set_output_array(outputs[i]);
      out = outputs[i].data<float>();
    }
    p.matrices.push_back({values.data<void>(), quantized ? inputs[2 + i * per].data<void>() : nullptr,
                          quantized ? inputs[3 + i * per].data<void>() : nullptr,
                          values.shape(0), out});
    if (swiglu_ && i == 1) break;  // the up projection shares the gate's tasks
    p.first_task.push_back(p.first_task.back() + (values.shape(0) + COLUMNS - 1) / COLUMNS);
  }
  encoder.dispatch([p = std::move(p), threads = threads_]() { run(p, threads); });
}

bool WeightsMatmul::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const WeightsMatmul&>(other);
  return format_.bits == o.format_.bits && format_.group_size == o.format_.group_size && swiglu_ == o.swiglu_ &&
         threads_ == o.threads_;
}

std::vector<mx::array> weights_matmul(const mx::array& x, const std::vector<mx::array>& weights, WeightFormat format,
                                      bool swiglu, int threads) {
  auto fail = [](const std::string& why) { throw std::invalid_argument("weights_matmul: " + why); };
  if (x.ndim() != 2 || x.dtype() != mx::float32) fail("x must be (M, K) float32");
  const int64_t K = x.shape(1);
  const int per = per_matrix(format);
  const bool quantized = per == 3;
  if (format.bits != 0 && format.bits != 4 && format.bits != 8) fail("bits must be 4 or 8 (quantized) or 0 (float)");
  if (quantized && (format.group_size % 8 != 0 || format.group_size <= 0 || K % format.group_size != 0)) {
    fail("the group size must be a multiple of 8 that divides K");
  }
  if (weights.empty() || weights.size() % per != 0) fail("weights come as (values, scales, biases) or values");
  const size_t count = weights.size() / per;
  if (swiglu && (count != 2 || weights[0].shape(0) != weights[per].shape(0))) fail("swiglu takes gate and up alike");
  auto stream = mx::default_stream(mx::Device::cpu);
  std::vector<mx::array> inputs{mx::contiguous(x, false, stream)};
  std::vector<mx::Shape> shapes;
  for (size_t i = 0; i < count; ++i) {
    const auto& values = weights[i * per];
    const int64_t N = values.shape(0);
    if (values.ndim() != 2) fail("weights are 2-D");
    if (quantized) {
      const auto &scales = weights[i * per + 1], &biases = weights[i * per + 2];
      if (values.dtype() != mx::uint32 || values.shape(1) * 32 != K * format.bits) fail("packed weights do not match K");
      if (scales.shape() != mx::Shape{static_cast<int>(N), static_cast<int>(K / format.group_size)} ||
          biases.shape() != scales.shape() || biases.dtype() != scales.dtype() ||
          scales.dtype() != weights[1].dtype() ||
          (scales.dtype() != mx::float32 && scales.dtype() != mx::float16 && scales.dtype() != mx::bfloat16)) {
        fail("scales and biases must be (N, K / group_size), all float32, float16 or bfloat16");
      }
      inputs.push_back(mx::contiguous(values, false, stream));
      inputs.push_back(mx::contiguous(scales, false, stream));
      inputs.push_back(mx::contiguous(biases, false, stream));
    } else {
      const auto type = values.dtype();
      if ((type != mx::float32 && type != mx::float16 && type != mx::bfloat16) || type != weights[0].dtype() ||
          values.shape(1) != K) {
        fail("float weights must be (N, K), all float32, float16 or bfloat16");
      }
      inputs.push_back(mx::contiguous(values, false, stream));
    }
    if (!swiglu || i == 0) shapes.push_back({x.shape(0), static_cast<int>(N)});
  }
  return mx::array::make_arrays(std::move(shapes), std::vector<mx::Dtype>(shapes.size(), mx::float32),
                                std::make_shared<WeightsMatmul>(stream, format, swiglu, threads), inputs);
}

}  // namespace mlxchat
