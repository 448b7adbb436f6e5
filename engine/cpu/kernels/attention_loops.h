// The attention kernel's loops (attention.cpp).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "vectors.h"

// Built for a level with F16C (x86-64-v3 and v4), float16 K/V are widened by its instruction: GCC 12 widens a
// _Float16 vector one lane at a time, even where F16C could, and the portable integer steps took 1.5x as long
// over a decode step's keys and values.
#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace mlxchat {

constexpr int QUERY_BLOCK = 16;  // queries of one head group that share each key block
constexpr int KEY_BLOCK = 64;    // keys whose scores are live at once (per query row)
constexpr int KEY_SEGMENT = 512;  // keys of one work item: a longer row is split across the cores

// K or V as the slots store them (engine/kv/kv_types.py): float32, float16, bfloat16, or MLX's affine 8-bit
// format (bytes in dim order, a float32 scale and bias per group of dims).
enum class Kind { f32, f16, bf16, q8 };

struct Stored {
  Kind kind;
  const uint8_t* data;
  int64_t s[3];  // byte strides of (slot, head, token); the dims are contiguous
  const float* scales = nullptr;  // q8: (slot, head, token, group), biases alike
  const float* biases = nullptr;
  int64_t gs[3] = {};  // q8: element strides of the scales' and biases' first three axes
  int64_t group = 0;
};


// The rows of a matrix (K x N) as the loops below read them, eight columns at a time: float32 as it lies, or a
// stored K/V type widened in registers (exactly for the float types; q * scale + bias for q8), never copied.
struct Problem {
  const float* q;
  Stored k, v;
  const int32_t* rows;  // row b reads slot rows[b] of k and v
  const int32_t* lengths;
  float* out;
  int64_t B, H, Hkv, L, S, D, Dv, slots;
  int64_t qs[3];  // strides of the first three axes (the last is contiguous)
  float scale;
};

namespace {

template <Kind T>
struct Rows {
  const uint8_t* data;  // row k at data + k * ld bytes
  int64_t ld;
  const float* scales = nullptr;  // q8: row k's groups at scales + k * gld, biases alike
  const float* biases = nullptr;
  int64_t gld = 0, group_shift = 0;  // q8: a group of 2 ** group_shift dims

  static constexpr int64_t size = T == Kind::f32 ? 4 : T == Kind::q8 ? 1 : 2;

  // Rows from k on.
  Rows from(int64_t k) const { return {data + k * ld, ld, scales + k * gld, biases + k * gld, gld, group_shift}; }

  v8 load(int64_t k, int64_t n) const {
    const uint8_t* at = data + k * ld + n * size;
    if constexpr (T == Kind::f32) {
      return load8(reinterpret_cast<const float*>(at));
    } else if constexpr (T == Kind::q8) {
      // Each byte shifted down into a lane of its own (GCC widens an 8-byte vector one lane at a time).
      uint32_t q[2];
      std::memcpy(q, at, sizeof q);
      const v8u lanes = (v8u){q[0], q[0], q[0], q[0], q[1], q[1], q[1], q[1]} >> (v8u){0, 8, 16, 24, 0, 8, 16, 24};
      const int64_t g = k * gld + (n >> group_shift);  // (a group is a whole number of eights)
      return __builtin_convertvector((v8i)(lanes & 0xffu), v8) * scales[g] + biases[g];
    } else {
      v8s h;
      std::memcpy(&h, at, sizeof h);
#if defined(__F16C__)
      if constexpr (T == Kind::f16) return _mm256_cvtph_ps(reinterpret_cast<__m128i>(h));
#else
      if constexpr (T == Kind::f16) return widen_halves(h);
#endif
      return (v8)(__builtin_convertvector(h, v8u) << 16);
    }
  }

  float get(int64_t k, int64_t n) const {
    const uint8_t* at = data + k * ld + n * size;
    if constexpr (T == Kind::f32) {
      float x;
      std::memcpy(&x, at, 4);
      return x;
    } else if constexpr (T == Kind::q8) {
      const int64_t g = k * gld + (n >> group_shift);
      return static_cast<float>(*at) * scales[g] + biases[g];
    } else {
      uint16_t h;
      std::memcpy(&h, at, 2);
      if constexpr (T == Kind::f16) return widen_halves((v8s){h})[0];
      return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
    }
  }
};

// C (M x N) += A (M x K) . B (K x N), A and C row-major with leading dimensions: tiles of R rows x 8V outputs
// kept in registers (R x V vectors), so each loaded B vector serves R rows and the sums form R x V
// independent chains. Every output sums over k in order, whatever the tile: the same bits for any M.
template <int R, int V, class B>
__attribute__((always_inline)) inline void tile(const float* A, int64_t lda, const B& b_rows, int64_t n0, float* out,
                                                int64_t ldc, int64_t K) {
  v8 acc[R][V];
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) acc[r][v] = load8(out + r * ldc + 8 * v);
  }
  for (int64_t k = 0; k < K; ++k) {
    v8 b[V];
    for (int v = 0; v < V; ++v) b[v] = b_rows.load(k, n0 + 8 * v);
    for (int r = 0; r < R; ++r) {
      const float a = A[r * lda + k];
      for (int v = 0; v < V; ++v) acc[r][v] += a * b[v];
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) store8(out + r * ldc + 8 * v, acc[r][v]);
  }
}

// Columns [n0, n0 + 8V) of C for every row: R rows at a time, then one by one.
template <int R, int V, class B>
__attribute__((always_inline)) inline void column_tiles(const float* A, int64_t lda, const B& b_rows, int64_t n0,
                                                        float* out, int64_t ldc, int64_t M, int64_t K) {
  int64_t m0 = 0;
  for (; m0 + R <= M; m0 += R) tile<R, V>(A + m0 * lda, lda, b_rows, n0, out + m0 * ldc, ldc, K);
  for (; m0 < M; ++m0) tile<1, V>(A + m0 * lda, lda, b_rows, n0, out + m0 * ldc, ldc, K);
}

template <class B>
__attribute__((always_inline)) inline void gemm_acc(const float* A, int64_t lda, const B& b_rows, float* out,
                                                    int64_t ldc, int64_t M, int64_t N, int64_t K) {
  int64_t n0 = 0;
  // A decode step's few rows (a head group's queries) in one tile, wide where its sums fit the registers: each
  // B vector is loaded (and widened, for a stored type) once; a prompt's many rows in tiles of four.
  switch (M) {
    case 1: for (; n0 + 32 <= N; n0 += 32) tile<1, 4>(A, lda, b_rows, n0, out + n0, ldc, K); break;
    case 2: for (; n0 + 32 <= N; n0 += 32) tile<2, 4>(A, lda, b_rows, n0, out + n0, ldc, K); break;
    case 3: for (; n0 + 32 <= N; n0 += 32) tile<3, 4>(A, lda, b_rows, n0, out + n0, ldc, K); break;
    case 4: for (; n0 + 16 <= N; n0 += 16) tile<4, 2>(A, lda, b_rows, n0, out + n0, ldc, K); break;
    case 5: for (; n0 + 16 <= N; n0 += 16) tile<5, 2>(A, lda, b_rows, n0, out + n0, ldc, K); break;
    case 6: for (; n0 + 16 <= N; n0 += 16) tile<6, 2>(A, lda, b_rows, n0, out + n0, ldc, K); break;
    case 7: for (; n0 + 16 <= N; n0 += 16) tile<7, 2>(A, lda, b_rows, n0, out + n0, ldc, K); break;
    case 8: for (; n0 + 16 <= N; n0 += 16) tile<8, 2>(A, lda, b_rows, n0, out + n0, ldc, K); break;
    default: for (; n0 + 16 <= N; n0 += 16) column_tiles<4, 2>(A, lda, b_rows, n0, out + n0, ldc, M, K);
  }
  for (; n0 + 8 <= N; n0 += 8) column_tiles<4, 1>(A, lda, b_rows, n0, out + n0, ldc, M, K);
  for (; n0 < N; ++n0)
    for (int64_t m = 0; m < M; ++m) {
      float sum = out[m * ldc + n0];
      for (int64_t k = 0; k < K; ++k) sum += A[m * lda + k] * b_rows.get(k, n0);
      out[m * ldc + n0] = sum;
    }
}

// The largest of start and x[0..n), NaNs passed over, eight lanes at a time.
__attribute__((always_inline)) inline float max_of(const float* x, int64_t n, float start) {
  v8 lanes = (v8){} + start;
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const v8 v = load8(x + j);
    lanes = lanes < v ? v : lanes;
  }
  float most = start;
  for (int i = 0; i < 8; ++i) most = std::max(most, lanes[i]);
  for (; j < n; ++j) most = std::max(most, x[j]);
  return most;
}

// x[j] = e**(x[j] - shift) for j < n; returns their sum (eight lanes, then the lanes in a fixed order, then the rest).
__attribute__((always_inline)) inline float exp_in_place(float* x, int64_t n, float shift) {
  v8 sums = {};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const v8 e = exp_poly8(load8(x + j) - shift);
    store8(x + j, e);
    sums += e;
  }
  float sum = sum8(sums);
  for (; j < n; ++j) sum += x[j] = exp_poly(x[j] - shift);
  return sum;
}

// v[i]'s lanes summed, for i = 0..7, as one vector (lane i: v[i]'s sum): pairs of lanes, then fours, then halves.
__attribute__((always_inline)) inline v8 lane_sums(const v8 (&v)[8]) {
  v8 t[4], u[2];
  for (int i = 0; i < 4; ++i) {
    t[i] = __builtin_shuffle(v[2 * i], v[2 * i + 1], (v8i){0, 8, 2, 10, 4, 12, 6, 14}) +
           __builtin_shuffle(v[2 * i], v[2 * i + 1], (v8i){1, 9, 3, 11, 5, 13, 7, 15});
  }
  for (int i = 0; i < 2; ++i) {
    u[i] = __builtin_shuffle(t[2 * i], t[2 * i + 1], (v8i){0, 1, 8, 9, 4, 5, 12, 13}) +
           __builtin_shuffle(t[2 * i], t[2 * i + 1], (v8i){2, 3, 10, 11, 6, 7, 14, 15});
  }
  return __builtin_shuffle(u[0], u[1], (v8i){0, 1, 2, 3, 8, 9, 10, 11}) +
         __builtin_shuffle(u[0], u[1], (v8i){4, 5, 6, 7, 12, 13, 14, 15});
}

// scores[r * KEY_BLOCK + j] = Q[r] . K[j0 + j] for R rows and keys j < nj (D a multiple of 8): each key's row read
// once for the R rows and widened in registers, its products summed across lanes eight keys at a time. A decode
// step's few rows are served this way: transposing each block of keys cost more than their scores.
template <int R, class B>
__attribute__((always_inline)) inline void dot_scores(const float* Q, int64_t D, const B& keys, int64_t j0, int64_t nj,
                                                      float* scores) {
  int64_t j = 0;
  for (; j + 8 <= nj; j += 8) {
    v8 acc[R][8] = {};
    for (int64_t d = 0; d < D; d += 8) {
      v8 q[R];
      for (int r = 0; r < R; ++r) q[r] = load8(Q + r * D + d);
      for (int i = 0; i < 8; ++i) {
        const v8 k = keys.load(j0 + j + i, d);
        for (int r = 0; r < R; ++r) acc[r][i] += q[r] * k;
      }
    }
    for (int r = 0; r < R; ++r) store8(scores + r * KEY_BLOCK + j, lane_sums(acc[r]));
  }
  for (; j < nj; ++j) {
    v8 acc[R] = {};
    for (int64_t d = 0; d < D; d += 8) {
      const v8 k = keys.load(j0 + j, d);
      for (int r = 0; r < R; ++r) acc[r] += load8(Q + r * D + d) * k;
    }
    for (int r = 0; r < R; ++r) scores[r * KEY_BLOCK + j] = sum8(acc[r]);
  }
}

// The tokens of slot `slot`, head `head` of a stored K or V, as rows.
template <Kind T>
Rows<T> rows_of(const Stored& st, int64_t slot, int64_t head) {
  const int64_t g = slot * st.gs[0] + head * st.gs[1];
  return {st.data + slot * st.s[0] + head * st.s[1], st.s[2], st.scales + g, st.biases + g, st.gs[2],
          std::countr_zero(static_cast<uint64_t>(std::max<int64_t>(st.group, 1)))};
}

// One (row, kv head, block of queries) over the keys [k0, k1) of its visible range: its G heads x up to
// QUERY_BLOCK queries attend together. With `partial` null the block covers every visible key and
// writes its output; else it writes its running max, sum and unnormalized output there, for `merge`.
template <Kind T>
__attribute__((always_inline)) inline void attend_typed(const Problem& p, int64_t b, int64_t kh, int64_t q0, int64_t k0,
                                                        int64_t k1, float* partial, std::vector<float>& scratch) {
  const int64_t G = p.H / p.Hkv, D = p.D, Dv = p.Dv;
  const int64_t q1 = std::min(q0 + QUERY_BLOCK, p.L);
  const int64_t rows = G * (q1 - q0);
  // Bad indices (the Python side checks them) read nothing rather than out of bounds.
  const bool valid_row = p.rows[b] >= 0 && p.rows[b] < p.slots;
  const int64_t length = valid_row ? std::clamp<int64_t>(p.lengths[b], 0, p.S) : 0;
  const int64_t first = length - p.L;  // position of query 0
  scratch.resize(rows * (D + Dv + KEY_BLOCK + 2) + D * KEY_BLOCK);
  float* Kt = scratch.data();
  float* Q = Kt + D * KEY_BLOCK;
  float* acc = Q + rows * D;
  float* s = acc + rows * Dv;
  float* m = s + rows * KEY_BLOCK;
  float* l = m + rows;
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t i = q0; i < q1; ++i) {
      const int64_t r = g * (q1 - q0) + (i - q0);
      const float* src = p.q + b * p.qs[0] + (kh * G + g) * p.qs[1] + i * p.qs[2];
      for (int64_t d = 0; d < D; ++d) Q[r * D + d] = src[d] * p.scale;
      std::fill(acc + r * Dv, acc + (r + 1) * Dv, 0.0f);
      m[r] = -std::numeric_limits<float>::infinity();
      l[r] = 0.0f;
    }
  }
  const int64_t slot = valid_row ? p.rows[b] : 0;
  const Rows<T> K = rows_of<T>(p.k, slot, kh), V = rows_of<T>(p.v, slot, kh);
  const Rows<Kind::f32> scores_of{reinterpret_cast<const uint8_t*>(Kt), 4 * KEY_BLOCK};
  const int64_t key_end = std::min(k1, std::max<int64_t>(0, first + q1));  // the last query sees keys < first + q1
  for (int64_t j0 = k0; j0 < key_end; j0 += KEY_BLOCK) {
    const int64_t j1 = std::min(j0 + KEY_BLOCK, key_end), nj = j1 - j0;
    if (p.L == 1 && D % 8 == 0) {
      // One query a row (a decode step): its head group's G rows, three at a time, take dot products.
      int64_t r = 0;
      for (; r + 3 <= rows; r += 3) dot_scores<3>(Q + r * D, D, K, j0, nj, s + r * KEY_BLOCK);
      for (; r < rows; ++r) dot_scores<1>(Q + r * D, D, K, j0, nj, s + r * KEY_BLOCK);
    } else {
      // The block's keys transposed (D x KEY_BLOCK): a row's scores are then sums of whole vectors, and
      // many rows share each loaded vector. Eight keys by eight dimensions at a time in registers.
      int64_t j = 0;
      for (; D % 8 == 0 && j + 8 <= nj; j += 8) {
        for (int64_t d = 0; d < D; d += 8) {
          v8 t[8];
          for (int i = 0; i < 8; ++i) t[i] = K.load(j0 + j + i, d);
          transpose8(t);
          for (int i = 0; i < 8; ++i) store8(Kt + (d + i) * KEY_BLOCK + j, t[i]);
        }
      }
      for (; j < nj; ++j) {
        for (int64_t d = 0; d < D; ++d) Kt[d * KEY_BLOCK + j] = K.get(j0 + j, d);
      }
      // Scores of every row against the block's keys, as one small matrix product.
      std::fill(s, s + rows * KEY_BLOCK, 0.0f);
      gemm_acc(Q, D, scores_of, s, KEY_BLOCK, rows, KEY_BLOCK, D);
    }
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t limit = first + q0 + (r % (q1 - q0)) + 1;  // keys < limit are visible to row r
      float* sr = s + r * KEY_BLOCK;
      std::fill(sr + std::clamp<int64_t>(limit - j0, 0, nj), sr + nj, -std::numeric_limits<float>::infinity());
      const float block_max = max_of(sr, nj, m[r]);
      if (block_max == -std::numeric_limits<float>::infinity()) {  // nothing visible to this row yet
        std::fill(sr, sr + nj, 0.0f);
        continue;
      }
      const float correction = exp_poly(m[r] - block_max);
      m[r] = block_max;
      l[r] = l[r] * correction + exp_in_place(sr, nj, block_max);
      float* ar = acc + r * Dv;
#pragma omp simd
      for (int64_t d = 0; d < Dv; ++d) ar[d] *= correction;
    }
    // The block's values weighted by the rows' probabilities, added to their outputs.
    gemm_acc(s, KEY_BLOCK, V.from(j0), acc, Dv, rows, Dv, nj);
  }
  if (partial != nullptr) {  // rows x (max, sum, Dv outputs)
    for (int64_t r = 0; r < rows; ++r) {
      partial[r * (Dv + 2)] = m[r];
      partial[r * (Dv + 2) + 1] = l[r];
      std::copy(acc + r * Dv, acc + (r + 1) * Dv, partial + r * (Dv + 2) + 2);
    }
    return;
  }
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t i = q0; i < q1; ++i) {
      const int64_t r = g * (q1 - q0) + (i - q0);
      float* dst = p.out + ((b * p.H + kh * G + g) * p.L + i) * Dv;
      const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
      for (int64_t d = 0; d < Dv; ++d) dst[d] = acc[r * Dv + d] * inv;
    }
  }
}

}  // namespace

}  // namespace mlxchat
