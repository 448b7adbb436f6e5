// The matmul's int8 rows (an opt-in): each row is rounded to int8 in blocks of 32 values with a float scale
// per block, as llama.cpp rounds its rows, and multiplied by the 4- or 8-bit weights in integers, four products
// a lane at a time (AVX-512 VNNI's vpdpbusd), where the float rows widen and multiply every weight.
//
// A weight group g gives x . w = scale_g * sum(q * x) + bias_g * sum(x); with x ~ dx * xq, the first sum is
// integer products, exact. What every path computes, lane by lane (16 lanes a chunk of 64 weight bytes, each
// lane E values: E = 8 at 4 bits, 4 at 8 bits), is the same float arithmetic in the same order:
//   ints  = sum of the lane's E products q * xq (exact)
//   sums  = fma(float(ints), scale * dx, sums);  biases = fma(bias, dx * sum of the lane's E values of xq, biases)
// and a column's result is lanes_sum(sums + biases). So the vector path and the portable one give the same bits,
// and a row the same bits whatever rows share its call.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "matmul_tasks.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define MLXCHAT_VNNI 1
#endif

namespace mlxchat::matmul {

namespace {

constexpr int LANES = 16;
constexpr int64_t CHUNK_BYTES = 64;  // of packed weights, and of int8 rows (twice, even and odd, at 4 bits)
constexpr int ROWS = 8;              // rows sharing each chunk of weights read

constexpr int per_lane(Kind k) { return is_q4(k) ? 8 : 4; }
constexpr int64_t chunk_values(Kind k) { return LANES * per_lane(k); }

// The 16 lanes' sum, always in the same order (halves, then quarters...), as the vector path adds them.
inline float lanes_sum(const float* v) {
  float h[8], q[4];
  for (int i = 0; i < 8; ++i) h[i] = v[i] + v[i + 8];
  for (int i = 0; i < 4; ++i) q[i] = h[i] + h[i + 4];
  return (q[0] + q[2]) + (q[1] + q[3]);
}

// A chunk's scales or biases by lane: the value of the group of each lane's first value (0 past K's groups).
template <Float F>
inline void by_lane(const void* values, int64_t row_groups, int64_t groups, int group, int64_t first, int E,
                    float* out) {
  for (int i = 0; i < LANES; ++i) {
    const int64_t g = (first + E * i) / group;
    out[i] = g < groups ? scalar<F>(values, row_groups + g) : 0.0f;
  }
}

// The portable path: plain loops, in the order written above.
template <Kind KIND>
void column_portable(const Problem& p, const Matrix& w, const Rows8& rows, int64_t n, int64_t r0, int R,
                     float* y, int64_t ldy) {
  constexpr int E = per_lane(KIND);
  const int64_t groups = p.K / p.group_size, bytes = p.K * (is_q4(KIND) ? 4 : 8) / 8;
  const uint8_t* column = static_cast<const uint8_t*>(w.values) + n * bytes;
  float sums[ROWS][LANES] = {}, biases[ROWS][LANES] = {};
  for (int64_t c = 0; c < rows.chunks; ++c) {
    float s[LANES], b[LANES];
    by_lane<float_of(KIND)>(w.scales, n * groups, groups, p.group_size, c * chunk_values(KIND), E, s);
    by_lane<float_of(KIND)>(w.biases, n * groups, groups, p.group_size, c * chunk_values(KIND), E, b);
    int32_t q[LANES * E];  // the chunk's weights in the order of the rows' bytes
    for (int j = 0; j < CHUNK_BYTES; ++j) {
      const int64_t at = c * CHUNK_BYTES + j;
      const uint8_t byte = at < bytes ? column[at] : 0;
      if constexpr (is_q4(KIND)) {
        q[j] = byte & 15;
        q[CHUNK_BYTES + j] = byte >> 4;
      } else {
        q[j] = byte;
      }
    }
    for (int r = 0; r < R; ++r) {
      const int8_t* xq = rows.row(r0 + r, c);
      const float* dx = rows.scales(r0 + r, c);
      const float* xs = rows.sums(r0 + r, c);
      for (int i = 0; i < LANES; ++i) {
        int32_t ints = 0;
        for (int t = 0; t < 4; ++t) {
          ints += q[4 * i + t] * xq[4 * i + t];
          if constexpr (is_q4(KIND)) ints += q[CHUNK_BYTES + 4 * i + t] * xq[CHUNK_BYTES + 4 * i + t];
        }
        sums[r][i] = std::fma(static_cast<float>(ints), s[i] * dx[i], sums[r][i]);
        biases[r][i] = std::fma(b[i], xs[i], biases[r][i]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    float total[LANES];
    for (int i = 0; i < LANES; ++i) total[i] = sums[r][i] + biases[r][i];
    y[r * ldy] = lanes_sum(total);
  }
}

#if MLXCHAT_VNNI
#define MLXCHAT_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,f16c,fma")))

// A chunk's 4 (or fewer) groups' scales or biases as float32, lanes 0-3 of the register (0 past K's groups).
template <Float F>
MLXCHAT_VNNI_TARGET inline __m128 group_values(const void* values, int64_t at, int count) {
  const __mmask8 mask = static_cast<__mmask8>((1u << count) - 1);
  if constexpr (F == Float::f32) return _mm_maskz_loadu_ps(mask, static_cast<const float*>(values) + at);
  const __m128i halves = _mm_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(values) + at);
  if constexpr (F == Float::f16) return _mm_cvtph_ps(halves);
  return _mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(halves), 16));
}

MLXCHAT_VNNI_TARGET inline float lanes_sum(__m512 v) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  const __m128 pairs = _mm_add_ps(q, _mm_movehl_ps(q, q));  // q0 + q2, q1 + q3
  return _mm_cvtss_f32(_mm_add_ss(pairs, _mm_movehdup_ps(pairs)));
}

// Each lane's group among its chunk's (at most 4: a chunk is 128 values or 64, a group 32 or more), for a chunk that
// starts a group ([0]) and, where groups are longer than chunks, one that starts mid-group ([1]).
struct LaneGroups {
  __m512i pick[2];
  int64_t last[2];  // the last lane's
};

// C columns n.. for rows r0..r0 + R of the vector path.
template <Kind KIND, int R, int C>
MLXCHAT_VNNI_TARGET void columns_vnni(const Problem& p, const Matrix& w, const Rows8& rows, const LaneGroups& lanes,
                                      int64_t n, int64_t r0, float* y, int64_t ldy) {
  const int64_t groups = p.K / p.group_size, bytes = p.K * (is_q4(KIND) ? 4 : 8) / 8;
  const uint8_t* column[C];
  for (int j = 0; j < C; ++j) column[j] = static_cast<const uint8_t*>(w.values) + (n + j) * bytes;
  const int8_t* xq[R];
  const float* dx[R];  // and each lane's sum 16 floats on
  for (int r = 0; r < R; ++r) xq[r] = rows.row(r0 + r, 0), dx[r] = rows.scales(r0 + r, 0);
  __m512 sums[R][C], biases[R][C];
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C; ++j) sums[r][j] = biases[r][j] = _mm512_setzero_ps();
  }
  const __m512i low = _mm512_set1_epi8(15);
  // The chunk's first group and where in it the chunk starts, counted along (a division per chunk cost more than
  // the chunk's products).
  const int64_t G = p.group_size, values = chunk_values(KIND), step = values / G, rest = values % G;
  for (int64_t c = 0, g0 = 0, offset = 0; c < rows.chunks; ++c) {
    const int h = offset != 0;
    const int count = static_cast<int>(std::min(groups - g0, lanes.last[h] + 1));
    const int64_t left = bytes - c * CHUNK_BYTES;
    const __mmask64 valid = left >= CHUNK_BYTES ? ~0ull : (1ull << left) - 1;
    for (int j = 0; j < C; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(column[j] + AHEAD * bytes + c * CHUNK_BYTES), _MM_HINT_T0);
      const __m512i packed = _mm512_maskz_loadu_epi8(valid, column[j] + c * CHUNK_BYTES);
      const __m512 s = _mm512_permutexvar_ps(
          lanes.pick[h], _mm512_zextps128_ps512(group_values<float_of(KIND)>(w.scales, (n + j) * groups + g0, count)));
      const __m512 b = _mm512_permutexvar_ps(
          lanes.pick[h], _mm512_zextps128_ps512(group_values<float_of(KIND)>(w.biases, (n + j) * groups + g0, count)));
      __m512i lo, hi;
      if constexpr (is_q4(KIND)) {
        lo = _mm512_and_si512(packed, low);
        hi = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low);
      } else {
        lo = packed;
      }
      for (int r = 0; r < R; ++r) {
        const int8_t* x = xq[r] + c * (is_q4(KIND) ? 2 * CHUNK_BYTES : CHUNK_BYTES);
        __m512i ints = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(x));
        if constexpr (is_q4(KIND)) ints = _mm512_dpbusd_epi32(ints, hi, _mm512_loadu_si512(x + CHUNK_BYTES));
        const __m512 scale = _mm512_mul_ps(s, _mm512_loadu_ps(dx[r] + c * 32));
        sums[r][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ints), scale, sums[r][j]);
        biases[r][j] = _mm512_fmadd_ps(b, _mm512_loadu_ps(dx[r] + c * 32 + 16), biases[r][j]);
      }
    }
    g0 += step;
    offset += rest;
    if (offset >= G) offset -= G, ++g0;
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C; ++j) y[r * ldy + j] = lanes_sum(_mm512_add_ps(sums[r][j], biases[r][j]));
  }
}

template <Kind KIND, int R>
MLXCHAT_VNNI_TARGET void block_vnni(const Problem& p, const Matrix& w, const Rows8& rows, int64_t n0, int64_t n1,
                                    int64_t r0, float* Y, int64_t ldy) {
  constexpr int E = per_lane(KIND);
  const int64_t G = p.group_size, values = chunk_values(KIND);
  alignas(64) int32_t pick[2][LANES];
  for (int h = 0; h < 2; ++h) {
    for (int i = 0; i < LANES; ++i) pick[h][i] = static_cast<int32_t>((h * values % G + E * i) / G);
  }
  const LaneGroups lanes{{_mm512_load_si512(pick[0]), _mm512_load_si512(pick[1])}, {pick[0][15], pick[1][15]}};
  // Columns side by side give the few-row pass sums to work on while each waits on the one before.
  constexpr int C = R <= 2 ? 4 : R <= 4 ? 2 : 1;
  int64_t n = n0;
  for (; n + C <= n1; n += C) columns_vnni<KIND, R, C>(p, w, rows, lanes, n, r0, Y + (n - n0), ldy);
  for (; n < n1; ++n) columns_vnni<KIND, R, 1>(p, w, rows, lanes, n, r0, Y + (n - n0), ldy);
}

bool vnni_runs() {
  static const bool runs = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return runs;
}
#endif

// Y (M x (n1 - n0), leading dimension ldy) = rows . W[n0:n1].T, ROWS rows at a time.
template <Kind KIND>
void int8_columns(const Problem& p, const Matrix& w, const Rows8& rows, int64_t n0, int64_t n1, float* Y,
                  int64_t ldy, bool vector) {
  for (int64_t r0 = 0; r0 < p.M; r0 += ROWS) {
    const int R = static_cast<int>(std::min<int64_t>(ROWS, p.M - r0));
    float* y = Y + r0 * ldy;
#if MLXCHAT_VNNI
    if (vector) {
      switch (R) {
        case 8: block_vnni<KIND, 8>(p, w, rows, n0, n1, r0, y, ldy); continue;
        case 7: block_vnni<KIND, 7>(p, w, rows, n0, n1, r0, y, ldy); continue;
        case 6: block_vnni<KIND, 6>(p, w, rows, n0, n1, r0, y, ldy); continue;
        case 5: block_vnni<KIND, 5>(p, w, rows, n0, n1, r0, y, ldy); continue;
        case 4: block_vnni<KIND, 4>(p, w, rows, n0, n1, r0, y, ldy); continue;
        case 3: block_vnni<KIND, 3>(p, w, rows, n0, n1, r0, y, ldy); continue;
        case 2: block_vnni<KIND, 2>(p, w, rows, n0, n1, r0, y, ldy); continue;
        default: block_vnni<KIND, 1>(p, w, rows, n0, n1, r0, y, ldy); continue;
      }
    }
#endif
    for (int64_t n = n0; n < n1; ++n) column_portable<KIND>(p, w, rows, n, r0, R, y + (n - n0), ldy);
  }
}

template <Kind... KINDS>
void int8_kinds(const Problem& p, const Matrix& w, const Rows8& rows, int64_t n0, int64_t n1, float* Y, int64_t ldy,
                bool vector) {
  ((p.kind == KINDS ? int8_columns<KINDS>(p, w, rows, n0, n1, Y, ldy, vector) : void()), ...);
}

}  // namespace

bool int8_vector_runs() {
#if MLXCHAT_VNNI
  return vnni_runs();
#else
  return false;
#endif
}

int64_t int8_chunks(Kind kind, int64_t K) { return (K + chunk_values(kind) - 1) / chunk_values(kind); }

MLXCHAT_CLONES void quantize_rows(const float* X, int64_t M, int64_t K, Kind kind, Rows8& rows) {
  const int E = per_lane(kind);
  const int64_t values = chunk_values(kind);
  for (int64_t m = 0; m < M; ++m) {
    const float* x = X + m * K;
    for (int64_t c = 0; c < rows.chunks; ++c) {
      int8_t* xq = rows.row(m, c);
      float* dx = rows.scales(m, c);
      float* xs = rows.sums(m, c);
      // Blocks of 32 values: the chunk's (two at 8 bits, four at 4), rounded with a scale each.
      for (int64_t block = 0; block < values / 32; ++block) {
        const int64_t k0 = c * values + block * 32;
        float amax = 0.0f;
        bool finite = true;
        for (int64_t k = k0; k < std::min(k0 + 32, K); ++k) {
          amax = std::max(amax, std::fabs(x[k]));
          finite = finite && std::isfinite(x[k]);
        }
        // Not finite: the rows' integers 0 and the scale NaN, so that the outputs are NaN as a float row's would be.
        const float d = finite ? amax / 127.0f : NAN, inverse = finite && amax > 0.0f ? 127.0f / amax : 0.0f;
        for (int64_t t = 0; t < 32; ++t) {
          const int64_t k = k0 + t, at = k - c * values;
          const int8_t q = k < K ? static_cast<int8_t>(std::clamp(std::nearbyint(x[k] * inverse), -127.0f, 127.0f)) : 0;
          // At 4 bits a chunk's even values come first, then its odd ones (the weights' low and high nibbles).
          xq[E == 8 ? at % 2 * CHUNK_BYTES + at / 2 : at] = q;
        }
        for (int64_t i = block * 32 / E; i < (block + 1) * 32 / E; ++i) dx[i] = k0 < K ? d : 0.0f;
      }
      // The rounded values' sum, not x's own: the rounding errors of q * xq and of the bias's share then cancel
      // as they do in w * xq (affine weights' q * scale is far from centred; w is not). llama.cpp's Q8_1 does so.
      for (int i = 0; i < LANES; ++i) {
        int32_t sum = 0;
        for (int t = 0; t < E; ++t) sum += xq[E == 8 ? t % 2 * CHUNK_BYTES + (E * i + t) / 2 : E * i + t];
        xs[i] = dx[i] * static_cast<float>(sum);
      }
    }
  }
}

// Cloned per x86 level as run_q4 is: its SwiGLU then rounds as the float rows' does, and the portable loops vectorize.
MLXCHAT_CLONES void int8_block(const Problem& p, const Rows8& rows, int64_t task, std::vector<float>& scratch,
                               bool vector) {
  const int64_t index = std::upper_bound(p.first_task.begin(), p.first_task.end(), task) - p.first_task.begin() - 1;
  const Matrix& w = p.matrices[index];
  const int64_t n0 = (task - p.first_task[index]) * COLUMNS, n1 = std::min(n0 + COLUMNS, w.N);
  auto columns = [&](const Matrix& m, float* Y, int64_t ldy) {
    int8_kinds<Kind::q4, Kind::q4_f16, Kind::q4_bf16, Kind::q8, Kind::q8_f16, Kind::q8_bf16>(p, m, rows, n0, n1, Y,
                                                                                            ldy, vector);
  };
  if (!p.swiglu) return columns(w, w.out + n0, w.N);
  scratch.resize(2 * p.M * COLUMNS);
  columns(w, scratch.data(), COLUMNS);
  columns(p.matrices[1], scratch.data() + p.M * COLUMNS, COLUMNS);
  swiglu_columns(p, w, n0, n1, scratch.data(), scratch.data() + p.M * COLUMNS);
}

}  // namespace mlxchat::matmul
