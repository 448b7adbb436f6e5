// The compiled matmul's work, shared by the files that compile it for each kind of weight
// (matmul_q4.cpp, matmul_q8.cpp, matmul_float.cpp for float16 and bfloat16: compiled apart, and in
// parallel) and by matmul.cpp,
// which packs the rows and hands the tasks to the worker pool.
//
// The output columns are cut into blocks of COLUMNS; each block is a task. Up to FUSED_ROWS rows, a
// task widens each weight vector in registers and every row uses it at once; more rows, it widens its
// block of W to float32 once (in cache) and tiles of rows x columns take outer products with it, as a
// BLAS does. Either way each (row, column) sums 8 lanes, each in the same order, and adds them in the
// same order, whatever the number of rows: a row's result does not depend on the rows beside it.
//
// The templates below take V4: whether the module is built for x86-64-v4 (MLXCHAT_V4_LOOPS). There a few rows take
// intrinsics loops (x86_columns) in AVX-512VL's 32 registers, and 4-bit weights are looked up in a table of their
// group's 16 values (AVX-512VL's permute of two registers) rather than converted and scaled one by one. The table
// holds q * scale + bias as the conversion computes it, so every path gives the same bits. Built for x86-64-v3, up to
// 4 rows of quantized weights take the same loops in AVX2's 16 registers, converting each weight (X86_COLUMNS).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "vectors.h"

#if defined(__AVX512VL__) && defined(__GNUC__) && !defined(__clang__)
#define MLXCHAT_V4_LOOPS 1
#else
#define MLXCHAT_V4_LOOPS 0
#endif
// Built for x86-64-v3 or v4: quantized weights take intrinsics loops (x86_columns) in either.
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && defined(__GNUC__) && !defined(__clang__)
#define MLXCHAT_X86_LOOPS 1
#include <immintrin.h>
#else
#define MLXCHAT_X86_LOOPS 0
#endif

namespace mlxchat::matmul {

constexpr int64_t COLUMNS = 32;  // output columns of one task
constexpr int AHEAD = 8;          // rows of W ahead of use that the widening prefetches
constexpr int FUSED_ROWS = 8;     // up to this many rows, weights are widened in registers, not to memory
// Built for x86-64-v4, up to this many rows are widened in registers too, in panels of FUSED_ROWS: 16 rows of SmolLM2's
// gate and up took 11.4 ms that way, 13.4-14.4 by outer products (Xeon, 2 vCPUs).
constexpr int FUSED_ROWS_V4 = 16;
// Built for x86-64-v3, quantized weights up to this many rows: 12 slots decoding took 34.1-36.7 ms a step that way,
// 39.8-44.1 by outer products; 16, 50.5-50.8 against 47.4-48.2 (SmolLM2, AVX2 forced, AMD EPYC Zen 4, 2 vCPUs).
constexpr int FUSED_ROWS_V3 = 12;
constexpr int ROW_TILE = 6;       // more rows: rows sharing each loaded weight vector of an outer product
constexpr int TILE_COLUMNS = 16;  // and columns sharing each row's weight (6 x 2 sums, 2 weights, 1 row: 15 registers)
// Columns at once for R rows in x86-64-v3's intrinsics loops (R x C sums, C scales and C biases in AVX2's 16
// registers); 0: GCC's vector code (fused_columns) serves R rows. Each (row, column) sum is a chain of multiply-adds
// that waits on the one before it (4-5 cycles): one row in two columns kept two chains, a multiply-add every 2-2.5
// cycles where the core takes two a cycle. SmolLM2's 30 layers with their weights in cache, AVX2 forced (AMD EPYC
// Zen 4, 2 vCPUs, two alternated runs): 1 row 8.9 / 8.0 ms against 6.1 / 5.6 with four columns, 2 rows 9.9 / 8.6
// against 7.5 / 6.7, 4 rows 13.5 / 9.5 against 9.3 / 9.4; from 5 rows on, one column a row, no faster.
constexpr int X86_COLUMNS[] = {0, 4, 4, 2, 2, 0, 0, 0, 0};

struct Matrix {
  const void* values;
  const void* scales;
  const void* biases;
  int64_t N;
  float* out;  // (M, N); for swiglu only the first matrix's is written
};

// How weights and, for quantized ones, their scales are held: known at compile time in the inner loops.
enum class Kind { q4, q4_f16, q4_bf16, q8, q8_f16, q8_bf16, f16, bf16 };
enum class Float { f32, f16, bf16 };

constexpr bool is_q4(Kind k) { return k == Kind::q4 || k == Kind::q4_f16 || k == Kind::q4_bf16; }
constexpr bool is_q8(Kind k) { return k == Kind::q8 || k == Kind::q8_f16 || k == Kind::q8_bf16; }
constexpr bool is_float(Kind k) { return k == Kind::f16 || k == Kind::bf16; }
// Up to how many rows weights of `kind` are widened in registers (`v4`: the x86-64-v4 loops serve them).
constexpr int64_t fused_limit(bool v4, Kind kind) {
  return v4 ? FUSED_ROWS_V4 : MLXCHAT_X86_LOOPS && !is_float(kind) ? FUSED_ROWS_V3 : FUSED_ROWS;
}
// The float type of a kind's scales and biases.
constexpr Float float_of(Kind k) {
  if (k == Kind::q4_f16 || k == Kind::q8_f16) return Float::f16;
  if (k == Kind::q4_bf16 || k == Kind::q8_bf16) return Float::bf16;
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
  if constexpr (is_float(KIND)) {
    v8s halves;
    std::memcpy(&halves, static_cast<const uint16_t*>(row) + k, sizeof halves);
    if constexpr (KIND == Kind::f16) return widen_halves(halves);
    return (v8)(__builtin_convertvector(halves, v8u) << 16);  // bfloat16 is float32's upper half
  } else if constexpr (is_q4(KIND)) {
    const v8u shifts = {0, 4, 8, 12, 16, 20, 24, 28};
    const uint32_t word = static_cast<const uint32_t*>(row)[k >> 3];
    return __builtin_convertvector((v8i)(((v8u){} + word) >> shifts & 15u), v8);
  } else {
    // The 8 bytes in every quarter, then each byte moved to the bottom of its lane: in-lane moves, so GCC
    // makes them one broadcast and one byte shuffle.
    uint64_t bytes;
    std::memcpy(&bytes, static_cast<const uint8_t*>(row) + k, sizeof bytes);
    const v32b pick = {0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 20, 0, 0, 0, 21, 0, 0, 0, 22, 0, 0, 0, 23, 0, 0, 0};
    const v32b spread = __builtin_shuffle((v32b)(v4q){bytes, bytes, bytes, bytes}, pick);
    return __builtin_convertvector((v8i)((v8u)spread & 255u), v8);
  }
}

// Calls use(i, vectors) for each 8 weights i * 8.. of rows n..n + C - 1 of W, widened to float32: the one
// place weights are widened, so that every path multiplies by the same values.
template <Kind KIND, bool V4, int C, class Use>
__attribute__((always_inline)) inline void each_vector(const Problem& p, const Matrix& w, int64_t n, Use use) {
  const int64_t K = p.K;
  v8 v[C];
  if constexpr (is_float(KIND)) {  // no groups, scales or biases: the values as they are
    const uint16_t* rows[C];
    for (int c = 0; c < C; ++c) rows[c] = static_cast<const uint16_t*>(w.values) + (n + c) * K;
    for (int64_t k = 0; k < K; k += 8) {
      if (k % 32 == 0) {
        for (int c = 0; c < C; ++c) __builtin_prefetch(rows[c] + AHEAD * K + k);
      }
      for (int c = 0; c < C; ++c) v[c] = widen<KIND>(rows[c], k);
      use(k >> 3, v);
    }
    return;
  }
  // K is a whole number of groups, and a group of vectors.
  const int64_t group = p.group_size, groups = K / group, words = K * (is_q4(KIND) ? 4 : 8) / 32;
  const uint32_t* rows[C];
  for (int c = 0; c < C; ++c) rows[c] = static_cast<const uint32_t*>(w.values) + (n + c) * words;
  for (int64_t g = 0; g < groups; ++g) {
    // The same group of a row AHEAD rows on, ahead of its use.
    for (int c = 0; c < C; ++c) __builtin_prefetch(rows[c] + AHEAD * words + g * group * (is_q4(KIND) ? 4 : 8) / 32);
    float s[C], b[C];
    for (int c = 0; c < C; ++c) {
      s[c] = scalar<float_of(KIND)>(w.scales, (n + c) * groups + g);
      b[c] = scalar<float_of(KIND)>(w.biases, (n + c) * groups + g);
    }
    if constexpr (V4 && is_q4(KIND)) {
      // Each lane's 4 bits pick one of 16 values; the permute reads the low 4 bits of each lane, so the word
      // needs only shifting. One permute stands for a conversion and a multiply-add: the shared cores' ports
      // that do both were what the one-row pass waited on.
      const v8 low = {0, 1, 2, 3, 4, 5, 6, 7};
      const v8u shifts = {0, 4, 8, 12, 16, 20, 24, 28};
      v8 lo[C], hi[C];
      for (int c = 0; c < C; ++c) {
        lo[c] = low * s[c] + b[c];
        hi[c] = (low + 8.0f) * s[c] + b[c];
      }
      for (int64_t k = g * group; k < (g + 1) * group; k += 8) {
        for (int c = 0; c < C; ++c) {
          const uint32_t word = rows[c][k >> 3];
          v[c] = __builtin_shuffle(lo[c], hi[c], (v8i)(((v8u){} + word) >> shifts));
        }
        use(k >> 3, v);
      }
    } else {
      for (int64_t k = g * group; k < (g + 1) * group; k += 8) {
        for (int c = 0; c < C; ++c) v[c] = widen<KIND>(rows[c], k) * s[c] + b[c];
        use(k >> 3, v);
      }
    }
  }
}

// y[r * ldy + c] = X[r] . W[n + c] for the R rows of one panel and C columns, each weight vector widened in
// registers and used at once by every row (few rows: widening to memory would cost more than the products).
// C columns at once give a few rows enough independent sums to hide the adds' latency. Each (row, column)
// sums as outer_tile does, so its result is the same bits either way. (Built for x86-64-v3 or v4, x86_columns serves.)
template <Kind KIND, int R, int C>
__attribute__((always_inline)) inline void fused_columns(const Problem& p, const Matrix& w, int64_t n, const float* X,
                                                         float* y, int64_t ldy) {
  v8 acc[R][C] = {};
  each_vector<KIND, false, C>(p, w, n, [&](int64_t i, const v8* v) {
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

#if MLXCHAT_X86_LOOPS
constexpr int64_t SCALE_CHUNK = 64;  // groups whose scales and biases x86_columns makes float32 ahead of their products

// n scales or biases from i on as float32, eight at a time (float16 by one F16C conversion each: widen's portable
// integer steps cost the one-row pass 12-15 %).
template <Float F>
__attribute__((always_inline)) inline void floats_of(const void* p, int64_t i, int64_t n,
                                                                             float* out) {
  if constexpr (F == Float::f32) {
    std::memcpy(out, static_cast<const float*>(p) + i, n * sizeof(float));
  } else {
    const uint16_t* halves = static_cast<const uint16_t*>(p) + i;
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(halves + j));
      _mm256_storeu_ps(out + j, F == Float::f16 ? _mm256_cvtph_ps(h)
                                               : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
    }
    for (; j < n; ++j) out[j] = scalar<F>(halves, j);
  }
}

// fused_columns for x86-64-v3 and v4 in intrinsics, the same bits. GCC's vector code spent about as many
// instructions on each group's scales and biases (a load, conversion and broadcast for each, spills) as on the
// group's products. Here the scales and biases of SCALE_CHUNK groups are made float32 a vector at a time, and a
// group's are two broadcast loads a column. With TABLE (AVX-512VL) 4-bit weights are looked up in their group's 16
// values; otherwise they are converted, scaled and offset as widen does. Every loop over rows or columns is unrolled
// whole, so that the sums stay in registers (8 rows otherwise stored and reloaded them at each group).
template <Kind KIND, bool TABLE, int R, int C>
void x86_columns(const Problem& p, const Matrix& w, int64_t n, const float* X, float* y, int64_t ldy) {
  const int64_t vectors = p.group_size / 8, groups = p.K / p.group_size, words = p.K * (is_q4(KIND) ? 4 : 8) / 32;
  const uint32_t* rows[C];
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) rows[c] = static_cast<const uint32_t*>(w.values) + (n + c) * words;
  const __m256 low = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7), high = _mm256_add_ps(low, _mm256_set1_ps(8.0f));
  const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  const __m256i tops = _mm256_setr_epi32(28, 24, 20, 16, 12, 8, 4, 0);
  __m256 acc[R][C];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  }
  alignas(32) float scales[C][SCALE_CHUNK], biases[C][SCALE_CHUNK];
  for (int64_t g0 = 0; g0 < groups; g0 += SCALE_CHUNK) {
    const int64_t chunk = std::min(SCALE_CHUNK, groups - g0);
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      floats_of<float_of(KIND)>(w.scales, (n + c) * groups + g0, chunk, scales[c]);
      floats_of<float_of(KIND)>(w.biases, (n + c) * groups + g0, chunk, biases[c]);
    }
    for (int64_t g = 0; g < chunk; ++g) {
      __m256 lo[C], hi[C];
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) {
        __builtin_prefetch(rows[c] + AHEAD * words + (g0 + g) * vectors * (is_q4(KIND) ? 1 : 2));
        const __m256 s = _mm256_broadcast_ss(&scales[c][g]), b = _mm256_broadcast_ss(&biases[c][g]);
        if constexpr (TABLE && is_q4(KIND)) {
          lo[c] = _mm256_fmadd_ps(low, s, b);  // q * scale + bias, as widen's values are made
          hi[c] = _mm256_fmadd_ps(high, s, b);
        } else {  // (the scale and the bias, for widened values)
          lo[c] = s;
          hi[c] = b;
        }
      }
      for (int64_t i = (g0 + g) * vectors; i < (g0 + g + 1) * vectors; ++i) {
        __m256 v[C];
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) {
          if constexpr (TABLE && is_q4(KIND)) {
#if MLXCHAT_V4_LOOPS
            // Each lane's 4 bits pick one of 16 values: the permute reads the low 4 bits of each lane.
            const __m256i index = _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int32_t>(rows[c][i])), shifts);
            v[c] = _mm256_permutex2var_ps(lo[c], index, hi[c]);
#endif
          } else if constexpr (is_q4(KIND)) {
            // Each lane's 4 bits moved to the top, then down: shifts, and no mask to hold in a register.
            const __m256i word = _mm256_set1_epi32(static_cast<int32_t>(rows[c][i]));
            const __m256i q = _mm256_srli_epi32(_mm256_sllv_epi32(word, tops), 28);
            v[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), lo[c], hi[c]);
          } else {
            const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(rows[c] + 2 * i));
            v[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes)), lo[c], hi[c]);
          }
        }
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          __m256 x = _mm256_loadu_ps(X + (i * R + r) * 8);
          asm("" : "+v"(x));  // loaded once for its C products (GCC folded a load into each)
#pragma GCC unroll 16
          for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(x, v[c], acc[r][c]);
        }
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) y[r * ldy + c] = sum8(static_cast<v8>(acc[r][c]));
  }
}
#endif

// Columns [n0, n1) for the R rows of one panel: C at a time, then one by one.
template <Kind KIND, bool V4, int R>
__attribute__((always_inline)) inline void fused_block(const Problem& p, const Matrix& w, int64_t n0, int64_t n1,
                                                       const float* X, float* Y, int64_t ldy) {
  int64_t n = n0;
  if constexpr (V4 || (MLXCHAT_X86_LOOPS && !is_float(KIND) && X86_COLUMNS[R] > 0)) {
#if MLXCHAT_X86_LOOPS
    // AVX-512's 32 registers hold more columns: gate and up of SmolLM2's 30 layers at 4 rows took 3.4 ms against
    // 4.2-4.7 with two columns, at 8 rows 6.3-7.2 against 7.4-8.3 with one (Xeon, 2 vCPUs). AVX2's 16: X86_COLUMNS.
    constexpr int C = V4 ? (R <= 4 ? 4 : 2) : X86_COLUMNS[R];
    for (; n + C <= n1; n += C) x86_columns<KIND, V4, R, C>(p, w, n, X, Y + (n - n0), ldy);
    for (; n < n1; ++n) x86_columns<KIND, V4, R, 1>(p, w, n, X, Y + (n - n0), ldy);
#endif
  } else {
    // R x C sums, and C widened vectors with their scales, fit in 16 registers. Four columns at 1 or 2 rows
    // spilled the scales: the step's matmuls took 10.7-10.9 ms at 1 row and 13.5-13.9 at 2, against 9.7
    // and 11.1-11.8 with two (SmolLM2, AMD EPYC, 2 cores).
    constexpr int C = R <= 4 ? 2 : 1;
    for (; n + C <= n1; n += C) fused_columns<KIND, R, C>(p, w, n, X, Y + (n - n0), ldy);
    for (; n < n1; ++n) fused_columns<KIND, R, 1>(p, w, n, X, Y + (n - n0), ldy);
  }
}

// Rows [n0, n1) of W as float32 for outer_tile, in tiles of TILE_COLUMNS columns (the last padded with zeros):
// tile t at t * TILE_COLUMNS * K holds weight 8i + l of its column c at (l * K / 8 + i) * TILE_COLUMNS + c.
// Eight columns at a time, their vectors transposed in registers, so that a lane's 8 columns go out in one store.
template <Kind KIND, bool V4>
__attribute__((always_inline)) inline const float* widen_lanes(const Problem& p, const Matrix& w, int64_t n0,
                                                               int64_t n1, float* out) {
  const int64_t K = p.K, vectors = K / 8, width = n1 - n0;
  if (width % TILE_COLUMNS) std::fill_n(out + width / TILE_COLUMNS * TILE_COLUMNS * K, TILE_COLUMNS * K, 0.0f);
  int64_t n = n0;
  for (; n + 8 <= n1; n += 8) {
    float* tile = out + (n - n0) / TILE_COLUMNS * TILE_COLUMNS * K + (n - n0) % TILE_COLUMNS;
    each_vector<KIND, V4, 8>(p, w, n, [&](int64_t i, const v8* v) {
      v8 lanes[8];
      std::copy_n(v, 8, lanes);
      transpose8(lanes);
      for (int l = 0; l < 8; ++l) store8(tile + (l * vectors + i) * TILE_COLUMNS, lanes[l]);
    });
  }
  for (; n < n1; ++n) {
    float* tile = out + (n - n0) / TILE_COLUMNS * TILE_COLUMNS * K + (n - n0) % TILE_COLUMNS;
    each_vector<KIND, V4, 1>(p, w, n, [&](int64_t i, const v8* v) {
      for (int l = 0; l < 8; ++l) tile[(l * vectors + i) * TILE_COLUMNS] = v[0][l];
    });
  }
  return out;
}

// Y (M x width, leading dimension ldy) = X . W.T from pack_lanes' panels of X and widen_lanes' tiles of W,
// by outer products (matmul_tiles.cpp: it does not depend on the kind of weights, so it is compiled once).
void outer_products(const float* X, int64_t M, int64_t K, const float* W, int64_t width, float* Y, int64_t ldy);

// Y (M x (n1 - n0), leading dimension ldy) = X . W[n0:n1].T: few rows widen in registers, more widen the
// block once into `buffer` for all their panels.
template <Kind KIND, bool V4>
__attribute__((always_inline)) inline void columns(const Problem& p, const Matrix& w, int64_t n0, int64_t n1,
                                                   const float* X, float* Y, int64_t ldy, float* buffer) {
  if (p.M > fused_limit(V4, KIND)) {
    outer_products(X, p.M, p.K, widen_lanes<KIND, V4>(p, w, n0, n1, buffer), n1 - n0, Y, ldy);
    return;
  }
  for (int64_t m0 = 0; m0 < p.M; m0 += FUSED_ROWS) {  // panels of up to FUSED_ROWS rows (pack_rows each)
    const float* panel = X + m0 * p.K;
    float* out = Y + m0 * ldy;
    switch (std::min<int64_t>(FUSED_ROWS, p.M - m0)) {
      case 8: fused_block<KIND, V4, 8>(p, w, n0, n1, panel, out, ldy); break;
      case 7: fused_block<KIND, V4, 7>(p, w, n0, n1, panel, out, ldy); break;
      case 6: fused_block<KIND, V4, 6>(p, w, n0, n1, panel, out, ldy); break;
      case 5: fused_block<KIND, V4, 5>(p, w, n0, n1, panel, out, ldy); break;
      case 4: fused_block<KIND, V4, 4>(p, w, n0, n1, panel, out, ldy); break;
      case 3: fused_block<KIND, V4, 3>(p, w, n0, n1, panel, out, ldy); break;
      case 2: fused_block<KIND, V4, 2>(p, w, n0, n1, panel, out, ldy); break;
      default: fused_block<KIND, V4, 1>(p, w, n0, n1, panel, out, ldy);
    }
  }
}

// Columns [n0, n1) of the SwiGLU's output, from the gate's and the up projection's (COLUMNS apart per row).
__attribute__((always_inline)) inline void swiglu_columns(const Problem& p, const Matrix& w, int64_t n0, int64_t n1,
                                                          const float* gate, const float* up) {
  for (int64_t m = 0; m < p.M; ++m) swiglu_span(gate + m * COLUMNS, up + m * COLUMNS, w.out + m * w.N + n0, n1 - n0);
}

template <Kind KIND, bool V4>
__attribute__((always_inline)) inline void block(const Problem& p, const float* X, int64_t task,
                                                 std::vector<float>& scratch) {
  const int64_t index = std::upper_bound(p.first_task.begin(), p.first_task.end(), task) - p.first_task.begin() - 1;
  const Matrix& w = p.matrices[index];
  const int64_t n0 = (task - p.first_task[index]) * COLUMNS, n1 = std::min(n0 + COLUMNS, w.N);
  const int64_t panel = p.M > fused_limit(V4, KIND) ? COLUMNS * p.K : 0;
  if (!p.swiglu) {
    scratch.resize(panel);
    columns<KIND, V4>(p, w, n0, n1, X, w.out + n0, w.N, scratch.data());
    return;
  }
  // silu(x . gate) * (x . up), for the same columns of both.
  scratch.resize(panel + 2 * p.M * COLUMNS);
  float* gate = scratch.data() + panel;
  float* up = gate + p.M * COLUMNS;
  columns<KIND, V4>(p, w, n0, n1, X, gate, COLUMNS, scratch.data());
  columns<KIND, V4>(p, p.matrices[1], n0, n1, X, up, COLUMNS, scratch.data());
  swiglu_columns(p, w, n0, n1, gate, up);
}

// Task `task` of `p`, for whichever of KINDS p holds: the body of each file's runner.
template <bool V4, Kind... KINDS>
__attribute__((always_inline)) inline void run_kinds(const Problem& p, const float* X, int64_t task,
                                                     std::vector<float>& scratch) {
  ((p.kind == KINDS ? block<KINDS, V4>(p, X, task, scratch) : void()), ...);
}

// The task runners, one per family of kinds (each file compiled apart: they build in parallel).
void run_q4(const Problem& p, const float* X, int64_t task, std::vector<float>& scratch);
void run_q8(const Problem& p, const float* X, int64_t task, std::vector<float>& scratch);
void run_float(const Problem& p, const float* X, int64_t task, std::vector<float>& scratch);

// Rows rounded to int8 for the int8 path (matmul_int8.cpp), by chunks of 64 weight bytes: a chunk's 64 values at 8
// bits, its 128 at 4 bits (its even values, then its odd ones: the weights' low and high nibbles), and for each
// of its 16 lanes the scale dx of the lane's block of 32 and dx times the sum of the lane's rounded values.
struct Rows8 {
  int8_t* q;
  float* dx;  // (M, chunks, 16), and xs after it
  int64_t chunks;
  int bytes;  // of one row's chunk: 64, or 128 at 4 bits
  int8_t* row(int64_t m, int64_t c) const { return q + (m * chunks + c) * bytes; }
  float* scales(int64_t m, int64_t c) const { return dx + (m * chunks + c) * 32; }
  float* sums(int64_t m, int64_t c) const { return dx + (m * chunks + c) * 32 + 16; }
};
int64_t int8_chunks(Kind kind, int64_t K);
// Rows m0..m1 of X (M x K) rounded into `rows`.
void quantize_rows(const float* X, int64_t m0, int64_t m1, int64_t K, Kind kind, Rows8& rows);
// Which loops multiply int8 rows: every path gives the same bits (matmul_int8.h). `fastest`: AVX-512 VNNI's where the
// CPU has it, else AVX2's, else the portable ones; int8_path() says which that is.
enum class Int8Path { fastest, portable, avx2, vnni };
Int8Path int8_path(Int8Path asked);
// Task `task` of p over int8 rows, on `path` (not fastest: int8_path's answer).
void int8_block(const Problem& p, const Rows8& rows, int64_t task, std::vector<float>& scratch, Int8Path path);

}  // namespace mlxchat::matmul
