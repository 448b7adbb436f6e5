// x @ W.T on the CPU with W kept as stored (4- or 8-bit affine, float16 or bfloat16): the MLX
// primitive, its op, and the packing of the rows before the tasks (matmul_tasks.h) run on the pool.
//
// Decode rows pay one read of the packed weights for all rows, which is what makes small batches
// cheap. As in attention.cpp, the inner loops are GCC vector code, built for the module's x86 level.

#include "matmul.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "layer_ops.h"
#include "matmul_tasks.h"
#include "pool.h"

namespace mlxchat {

using namespace matmul;

namespace {

// X (M x K), a panel of up to FUSED_ROWS rows, for fused_columns: for each 8 k's, the rows' vectors side by side.
void pack_rows(const float* X, int64_t M, int64_t K, float* out) {
  for (int64_t r = 0; r < M; ++r) {
    for (int64_t k = 0; k < K; ++k) out[(k / 8 * M + r) * 8 + k % 8] = X[r * K + k];
  }
}

// Rows [m0, m0 + R) of X (M x K) for outer_tile, at out + m0 * K: row r's k = 8i + l at (l * K / 8 + i) * R + r.
void pack_lanes(const float* X, int64_t m0, int64_t R, int64_t K, float* out) {
  float* panel = out + m0 * K;
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t k = 0; k < K; ++k) panel[(k % 8 * (K / 8) + k / 8) * R + r] = X[(m0 + r) * K + k];
  }
}

// The int8 rows: rounded once, then every task over them on `path`.
void run_int8(const Problem& p, int threads, Int8Path path) {
  thread_local std::vector<int8_t> values;
  thread_local std::vector<float> scales;
  Rows8 rows{nullptr, nullptr, int8_chunks(p.kind, p.K), is_q4(p.kind) ? 128 : 64};
  values.resize(p.M * rows.chunks * rows.bytes);
  scales.resize(p.M * rows.chunks * 32);
  rows.q = values.data();
  rows.dx = scales.data();
  // A prompt's rows are rounded on every core (one by one, they took longer than a layer's products).
  constexpr int64_t ROUNDED = 8;
  parallel_for((p.M + ROUNDED - 1) / ROUNDED, p.M > ROUNDED ? threads : 1, [&p, &rows](int64_t block) {
    quantize_rows(p.x, block * ROUNDED, std::min(p.M, (block + 1) * ROUNDED), p.K, p.kind, rows);
  });
  parallel_for(p.first_task.back(), threads, [&p, &rows, path](int64_t task) {
    thread_local std::vector<float> scratch;
    int8_block(p, rows, task, scratch, path);
  });
}

// The products of p (its rows p.x set).
void run_rows(const Problem& p, int threads, int int8) {
  if (int8 != INT8_OFF && !is_float(p.kind)) {
    return run_int8(p, threads, int8_path(int8 == INT8_PORTABLE ? Int8Path::portable
                                          : int8 == INT8_AVX2   ? Int8Path::avx2
                                                                : Int8Path::fastest));
  }
  // Kept from call to call (the stream's one thread runs them in turn): a prompt's rows are megabytes,
  // and a fresh vector would zero them before they are written. The pool's threads get its address: by
  // name, each would read a thread_local of its own.
  thread_local std::vector<float> kept;
  kept.resize(p.M * p.K + 16);
  // On a cache line: the loops read X a vector (32 bytes) at a time, and one that straddles two lines costs two loads.
  float* X = kept.data() + (64 - reinterpret_cast<uintptr_t>(kept.data()) % 64) % 64 / sizeof(float);
  auto run_task = is_q4(p.kind) ? run_q4 : is_q8(p.kind) ? run_q8 : run_float;
  const bool v4 = MLXCHAT_V4_LOOPS && !is_float(p.kind);
  if (p.M <= fused_limit(v4, p.kind)) {
    for (int64_t m0 = 0; m0 < p.M; m0 += FUSED_ROWS) {
      pack_rows(p.x + m0 * p.K, std::min<int64_t>(FUSED_ROWS, p.M - m0), p.K, X + m0 * p.K);
    }
  } else {
    parallel_for((p.M + ROW_TILE - 1) / ROW_TILE, threads, [&p, X](int64_t panel) {
      const int64_t m0 = panel * ROW_TILE;
      pack_lanes(p.x, m0, std::min<int64_t>(ROW_TILE, p.M - m0), p.K, X);
    });
  }
  parallel_for(p.first_task.back(), threads, [&p, X, run_task](int64_t task) {
    thread_local std::vector<float> scratch;
    run_task(p, X, task, scratch);
  });
}

void run(Problem p, const mx::array& x, int threads, int int8) {
  std::vector<float> gathered;
  p.x = row_major(x, gathered);
  run_rows(p, threads, int8);
}

// `dtype`: of the values for float weights, else of the scales and biases.
Kind kind_of(WeightFormat format, mx::Dtype dtype) {
  if (format.bits == 16) return dtype == mx::float16 ? Kind::f16 : Kind::bf16;
  const int f = dtype == mx::float16 ? 1 : dtype == mx::bfloat16 ? 2 : 0;
  return format.bits == 4 ? std::array{Kind::q4, Kind::q4_f16, Kind::q4_bf16}[f]
                          : std::array{Kind::q8, Kind::q8_f16, Kind::q8_bf16}[f];
}

// The problem of rows (M, K) times `count` weights as stored (weights[per * i...]), product i into outs[i] (for
// swiglu, the gate's output alone; null outs: set later).
Problem problem_of(int64_t M, int64_t K, const mx::array* weights, size_t count, WeightFormat format, bool swiglu,
                   float* const* outs) {
  const size_t per = arrays_per_weight(format.bits);
  Problem p{nullptr, M, K, kind_of(format, weights[per == 1 ? 0 : 1].dtype()), format.group_size, swiglu, {}, {0}};
  for (size_t i = 0; i < count; ++i) {
    const auto& values = weights[per * i];
    const void* scales = per == 3 ? weights[per * i + 1].data<void>() : nullptr;
    const void* biases = per == 3 ? weights[per * i + 2].data<void>() : nullptr;
    p.matrices.push_back({values.data<void>(), scales, biases, values.shape(0), outs ? outs[i] : nullptr});
    if (swiglu && i == 1) break;  // the up projection shares the gate's tasks
    p.first_task.push_back(p.first_task.back() + (values.shape(0) + COLUMNS - 1) / COLUMNS);
  }
  return p;
}

}  // namespace

const char* matmul_part(WeightFormat format, int int8) {
  if (int8 != INT8_OFF && format.bits != 16) return "matmul, int8 rows";
  return format.bits == 4 ? "matmul, 4-bit weights" : format.bits == 8 ? "matmul, 8-bit weights" : "matmul, 16-bit weights";
}

void matmul_rows(const float* x, int64_t M, int64_t K, const mx::array* weights, size_t count, WeightFormat format,
                 bool swiglu, float* const* outs, int threads, int int8) {
  Problem p = problem_of(M, K, weights, count, format, swiglu, outs);
  p.x = x;
  run_rows(p, threads, int8);
}

template <>
void WeightsMatmul::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  auto& encoder = begin(inputs, outputs);
  const auto& x = inputs[0];
  const MatmulParams& params = params_;
  const WeightFormat format = params.format;
  const bool swiglu = params.swiglu;
  const size_t per = arrays_per_weight(format.bits);
  const size_t weights_end = inputs.size() - (params.batch > 0 ? 2 : 0);  // (then the offsets and inverse frequencies)
  const int64_t K = static_cast<int64_t>(x.size()) / x.shape(0);  // (x may be heads of one token: its rows)
  std::vector<float*> outs;
  for (auto& out : outputs) outs.push_back(params.batch == 0 ? out.data<float>() : nullptr);
  outs.resize((weights_end - 1) / per, nullptr);
  Problem p = problem_of(x.shape(0), K, inputs.data() + 1, (weights_end - 1) / per, format, swiglu, outs.data());
  const char* part = matmul_part(format, params.int8);
  if (params.batch > 0) {
    // The products go to memory of the stream's own, then to the outputs as heads, turned or only moved.
    outs.clear();
    for (auto& out : outputs) outs.push_back(out.data<float>());
    dispatch(encoder, part, [p = std::move(p), x, offsets = inputs[weights_end], inverse = inputs[weights_end + 1],
                             outs, params]() mutable {
      thread_local std::vector<float> products;  // kept from call to call, as run()'s rows are
      int64_t columns = 0;
      for (const auto& m : p.matrices) columns += m.N;
      products.resize(p.M * columns);
      float* at = products.data();
      for (auto& m : p.matrices) {
        m.out = at;
        at += p.M * m.N;
      }
      run(p, x, params.threads, params.int8);
      const int64_t pairs = static_cast<int64_t>(inverse.size()), L = p.M / params.batch;
      for (size_t i = 0; i < outs.size(); ++i) {
        const Matrix& m = p.matrices[i];
        rope_rows_into(m.out, offsets.data<int32_t>(), offsets.size() == 1, inverse.data<float>(),
                       static_cast<int>(i) < params.rotated ? 2 * pairs : 0, outs[i], params.batch, L,
                       m.N / params.head_dim, params.head_dim, params.traditional, params.scale);
      }
    });
  } else {
    dispatch(encoder, part, [p = std::move(p), x, params]() { run(p, x, params.threads, params.int8); });
  }
}

namespace {

[[noreturn]] void fail(const std::string& why) { throw std::invalid_argument("weights_matmul: " + why); }

}  // namespace

void checked_int8(int int8) {
  if (int8 < INT8_OFF || int8 > INT8_AVX2) fail("int8 must be 0, 1, 2 or 3");
  if (int8 == INT8_AVX2 && int8_path(Int8Path::fastest) == Int8Path::portable) fail("int8 3 needs the kernels built for AVX2 (x86-64-v3 or v4)");
}

std::vector<int64_t> checked_weights(int64_t K, const std::vector<mx::array>& weights, WeightFormat format, bool swiglu,
                                     int int8) {
  if (format.bits != 4 && format.bits != 8 && format.bits != 16) fail("bits must be 4, 8 or 16");
  const size_t per = arrays_per_weight(format.bits);
  if (per == 1 && K % 8 != 0) fail("float weights need K a multiple of 8");
  if (per == 3 && (format.group_size % 8 != 0 || format.group_size <= 0 || K % format.group_size != 0)) {
    fail("the group size must be a multiple of 8 that divides K");
  }
  checked_int8(int8);
  if (weights.empty()) fail("no weights given");
  if (weights.size() % per != 0) fail("quantized weights come as (values, scales, biases) for each");
  const size_t count = weights.size() / per;
  if (swiglu && (count != 2 || weights[0].shape(0) != weights[per].shape(0))) fail("swiglu takes gate and up alike");
  std::vector<int64_t> widths;
  for (size_t i = 0; i < count; ++i) {
    const auto& values = weights[per * i];
    if (values.ndim() < 1 || values.shape(0) < 1) fail("each weight must have rows (N >= 1)");
    const int64_t N = values.shape(0);
    if (per == 1) {
      if (values.ndim() != 2 || values.shape(1) != K || values.dtype() != weights[0].dtype() ||
          (values.dtype() != mx::float16 && values.dtype() != mx::bfloat16)) {
        fail("float weights must be (N, K), all float16 or all bfloat16");
      }
    } else {
      const auto &scales = weights[per * i + 1], &biases = weights[per * i + 2];
      if (values.ndim() != 2 || values.dtype() != mx::uint32 || values.shape(1) * 32 != K * format.bits) {
        fail("packed weights do not match K");
      }
      if (scales.shape() != mx::Shape{static_cast<int>(N), static_cast<int>(K / format.group_size)} ||
          biases.shape() != scales.shape() || biases.dtype() != scales.dtype() || scales.dtype() != weights[1].dtype() ||
          (scales.dtype() != mx::float32 && scales.dtype() != mx::float16 && scales.dtype() != mx::bfloat16)) {
        fail("scales and biases must be (N, K / group_size), all float32, float16 or bfloat16");
      }
    }
    if (!swiglu || i == 0) widths.push_back(N);
  }
  return widths;
}

namespace {

// The inputs of a call (x, then each weight's arrays), checked, and its products' shapes (M, N_i).
std::pair<std::vector<mx::array>, std::vector<mx::Shape>> checked(const mx::array& x,
                                                                  const std::vector<mx::array>& weights,
                                                                  WeightFormat format, bool swiglu, int int8,
                                                                  mx::Stream stream) {
  // Attention's output for one token a sequence, (M, heads, 1, dim), is its rows (M, heads * dim) in row-major
  // order: taken as they are, without a reshape in every layer of a step's graph.
  const bool heads = x.ndim() == 4 && x.shape(2) == 1;
  if ((x.ndim() != 2 && !heads) || x.dtype() != mx::float32) {
    fail("x must be (M, K) float32, or heads of one token (M, heads, 1, dim)");
  }
  // (M = 0 once sent one row's work into an empty output: a heap overflow under ASan)
  if (x.shape(0) < 1 || x.size() < 1) fail("x must have rows and columns (M, K >= 1)");
  const int64_t K = static_cast<int64_t>(x.size()) / x.shape(0);
  std::vector<mx::array> inputs{x};
  std::vector<mx::Shape> shapes;
  for (const int64_t N : checked_weights(K, weights, format, swiglu, int8)) shapes.push_back({x.shape(0), static_cast<int>(N)});
  for (const auto& a : weights) inputs.push_back(contiguous_input(a, stream));
  return {std::move(inputs), std::move(shapes)};
}

std::vector<mx::array> made(std::vector<mx::Shape> shapes, std::vector<mx::array> inputs, MatmulParams params,
                            mx::Stream stream) {
  const std::vector<mx::Dtype> dtypes(shapes.size(), mx::float32);
  return mx::array::make_arrays(std::move(shapes), dtypes, std::make_shared<WeightsMatmul>(stream, params),
                                std::move(inputs));
}

}  // namespace

std::vector<mx::array> weights_matmul(const mx::array& x, const std::vector<mx::array>& weights, WeightFormat format,
                                      bool swiglu, int threads, int int8) {
  auto stream = mx::default_stream(mx::Device::cpu);
  auto [inputs, shapes] = checked(x, weights, format, swiglu, int8, stream);
  return made(std::move(shapes), std::move(inputs), {format, swiglu, threads, int8}, stream);
}

std::vector<mx::array> weights_matmul_rope(const mx::array& x, const std::vector<mx::array>& weights,
                                           WeightFormat format, int threads, int int8, int batch, int head_dim,
                                           int rotated, const mx::array& offsets, const mx::array& inverse,
                                           bool traditional, float scale) {
  auto stream = mx::default_stream(mx::Device::cpu);
  auto [inputs, shapes] = checked(x, weights, format, false, int8, stream);
  const int M = x.shape(0);
  if (batch < 1 || M % batch != 0) fail("rope: the rows must be batch sequences of one length");
  if (head_dim < 1 || rotated < 0 || rotated > static_cast<int>(shapes.size())) {
    fail("rope: a head dim of at least 1, and no more weights rotated than given");
  }
  if (inverse.dtype() != mx::float32 || inverse.ndim() != 1 || inverse.size() == 0 ||
      2 * static_cast<int>(inverse.size()) > head_dim) {
    fail("rope: inverse frequencies (pairs,) float32, two per pair within a head");
  }
  if (offsets.dtype() != mx::int32 || (offsets.size() != 1 && offsets.size() != static_cast<size_t>(batch))) {
    fail("rope: int32 offsets, one or one per sequence");
  }
  for (auto& shape : shapes) {
    if (shape[1] % head_dim != 0) fail("rope: each weight's outputs must be whole heads");
    shape = {batch, shape[1] / head_dim, M / batch, head_dim};
  }
  inputs.push_back(contiguous_input(offsets, stream));
  inputs.push_back(contiguous_input(inverse, stream));
  return made(std::move(shapes), std::move(inputs),
              {.format = format, .swiglu = false, .threads = threads, .int8 = int8, .batch = batch,
               .head_dim = head_dim, .rotated = rotated, .traditional = traditional, .scale = scale},
              stream);
}

}  // namespace mlxchat
