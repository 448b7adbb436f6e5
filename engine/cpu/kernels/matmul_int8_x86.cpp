// The int8 rows' vector paths (matmul_int8.h): AVX-512 VNNI, 4 products a lane in one instruction (vpdpbusd),
// and AVX2, the same sums in a few (vpmaddubsw, vpmaddwd); both give the portable loops' bits.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "matmul_int8.h"

// Built into the x86-64-v3 and v4 modules; the portable one has neither path.
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && defined(__GNUC__)
#include <immintrin.h>

namespace mlxchat::matmul::int8 {

namespace {

#define MLXCHAT_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,f16c,fma")))
#define MLXCHAT_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))

// Each lane's group among its chunk's (at most 4: a chunk is 128 values or 64, a group 32 or more), for a chunk that
// starts a group ([0]) and, where groups are longer than chunks, one that starts mid-group ([1]).
struct LaneGroups {
  alignas(64) int32_t pick[2][LANES];
  LaneGroups(Kind kind, int64_t group) {
    for (int h = 0; h < 2; ++h) {
      for (int i = 0; i < LANES; ++i) {
        pick[h][i] = static_cast<int32_t>((h * chunk_values(kind) % group + per_lane(kind) * i) / group);
      }
    }
  }
};

// Walks a row's chunks: the first group of each, where in it the chunk starts, how many groups it has (counted
// along: a division per chunk cost more than the chunk's products).
struct Chunks {
  int64_t groups, group, values, step, rest, g0 = 0, offset = 0;
  Chunks(const Problem& p, Kind kind)
      : groups(p.K / p.group_size), group(p.group_size), values(chunk_values(kind)), step(values / group),
        rest(values % group) {}
  int half() const { return offset != 0; }
  int count(const LaneGroups& lanes) const {
    return static_cast<int>(std::min<int64_t>(groups - g0, lanes.pick[half()][LANES - 1] + 1));
  }
  void next() {
    g0 += step;
    offset += rest;
    if (offset >= group) offset -= group, ++g0;
  }
};

// The 16 lanes' sum, lanes 0-7 in `low` and 8-15 in `high`, in the portable lanes_sum's order (halves, then
// quarters, then q0 + q2 and q1 + q3): both paths end with it.
MLXCHAT_AVX2_TARGET inline float sum_lanes(__m256 low, __m256 high) {
  const __m256 h = _mm256_add_ps(low, high);
  const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  const __m128 pairs = _mm_add_ps(q, _mm_movehl_ps(q, q));
  return _mm_cvtss_f32(_mm_add_ss(pairs, _mm_movehdup_ps(pairs)));
}

// ---- AVX-512 VNNI: a chunk is one register.

// A chunk's groups' scales or biases as float32, lanes 0-3 (0 past `count`).
template <Float F>
MLXCHAT_VNNI_TARGET inline __m128 groups_vnni(const void* values, int64_t at, int count) {
  const __mmask8 mask = static_cast<__mmask8>((1u << count) - 1);
  if constexpr (F == Float::f32) return _mm_maskz_loadu_ps(mask, static_cast<const float*>(values) + at);
  const __m128i halves = _mm_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(values) + at);
  if constexpr (F == Float::f16) return _mm_cvtph_ps(halves);
  return _mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(halves), 16));
}

MLXCHAT_VNNI_TARGET inline float sum_vnni(__m512 v) {
  return sum_lanes(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
}

// C columns n.. for rows r0..r0 + R.
template <Kind KIND, int R, int C>
MLXCHAT_VNNI_TARGET void tile_vnni(const Problem& p, const Matrix& w, const Rows8& rows, const LaneGroups& lanes,
                                   int64_t n, int64_t r0, float* y, int64_t ldy) {
  const int64_t bytes = column_bytes(KIND, p.K);
  const uint8_t* column[C];
  for (int j = 0; j < C; ++j) column[j] = static_cast<const uint8_t*>(w.values) + (n + j) * bytes;
  __m512 sums[R][C];
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C; ++j) sums[r][j] = _mm512_setzero_ps();
  }
  const __m512i picks[2] = {_mm512_load_si512(lanes.pick[0]), _mm512_load_si512(lanes.pick[1])};
  const __m512i low = _mm512_set1_epi8(15);
  Chunks at(p, KIND);
  for (int64_t c = 0; c < rows.chunks; ++c, at.next()) {
    const int count = at.count(lanes);
    const int64_t left = bytes - c * CHUNK_BYTES;
    const __mmask64 valid = left >= CHUNK_BYTES ? ~0ull : (1ull << left) - 1;
    for (int j = 0; j < C; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(column[j] + AHEAD * bytes + c * CHUNK_BYTES), _MM_HINT_T0);
      const __m512i packed = _mm512_maskz_loadu_epi8(valid, column[j] + c * CHUNK_BYTES);
      const int64_t g = (n + j) * at.groups + at.g0;
      const __m512 s = _mm512_permutexvar_ps(picks[at.half()],
                                             _mm512_zextps128_ps512(groups_vnni<float_of(KIND)>(w.scales, g, count)));
      const __m512 b = _mm512_permutexvar_ps(picks[at.half()],
                                             _mm512_zextps128_ps512(groups_vnni<float_of(KIND)>(w.biases, g, count)));
      const __m512i lo = is_q4(KIND) ? _mm512_and_si512(packed, low) : packed;
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low);
      for (int r = 0; r < R; ++r) {
        const int8_t* x = rows.row(r0 + r, c);
        const float* dx = rows.scales(r0 + r, c);
        __m512i ints = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(x));
        if constexpr (is_q4(KIND)) ints = _mm512_dpbusd_epi32(ints, hi, _mm512_loadu_si512(x + CHUNK_BYTES));
        const __m512 scale = _mm512_mul_ps(s, _mm512_loadu_ps(dx));
        sums[r][j] = _mm512_fmadd_ps(b, _mm512_loadu_ps(dx + LANES),
                                     _mm512_fmadd_ps(_mm512_cvtepi32_ps(ints), scale, sums[r][j]));
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C; ++j) y[r * ldy + j] = sum_vnni(sums[r][j]);
  }
}

// ---- AVX2: a chunk is two registers, lanes 0-7 and 8-15.

// A chunk's groups' scales or biases as float32, lanes 0-3 (0 past `count`; no value past them is read).
template <Float F>
MLXCHAT_AVX2_TARGET inline __m128 groups_avx2(const void* values, int64_t at, int count) {
  // Loads of exactly the values' bytes, straight into the register (through memory, a narrow store then a wide
  // load stalled every chunk).
  if constexpr (F == Float::f32) {
    const float* v = static_cast<const float*>(values) + at;
    if (count == 4) return _mm_loadu_ps(v);
    if (count == 2) return _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(v)));
    if (count == 1) return _mm_load_ss(v);
    return _mm_setr_ps(v[0], v[1], v[2], 0.0f);
  } else {
    const uint16_t* v = static_cast<const uint16_t*>(values) + at;
    __m128i raw;
    if (count == 4) {
      raw = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(v));
    } else if (count == 2) {
      uint32_t two;
      std::memcpy(&two, v, sizeof two);
      raw = _mm_cvtsi32_si128(static_cast<int>(two));
    } else {
      raw = _mm_setr_epi16(static_cast<int16_t>(v[0]), static_cast<int16_t>(count > 1 ? v[1] : 0),
                           static_cast<int16_t>(count > 2 ? v[2] : 0), 0, 0, 0, 0, 0);
    }
    if constexpr (F == Float::f16) return _mm_cvtph_ps(raw);
    return _mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(raw), 16));
  }
}

template <Kind KIND, int R, int C>
MLXCHAT_AVX2_TARGET void tile_avx2(const Problem& p, const Matrix& w, const Rows8& rows, const LaneGroups& lanes,
                                   int64_t n, int64_t r0, float* y, int64_t ldy) {
  const int64_t bytes = column_bytes(KIND, p.K);
  const uint8_t* column[C];
  for (int j = 0; j < C; ++j) column[j] = static_cast<const uint8_t*>(w.values) + (n + j) * bytes;
  __m256 sums[R][C][2];
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C; ++j) sums[r][j][0] = sums[r][j][1] = _mm256_setzero_ps();
  }
  const __m256i low = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
  Chunks at(p, KIND);
  alignas(32) uint8_t tail[CHUNK_BYTES] = {};  // a row's last chunk where it is cut short, then zeros
  for (int64_t c = 0; c < rows.chunks; ++c, at.next()) {
    const int count = at.count(lanes);
    const int64_t left = bytes - c * CHUNK_BYTES;
#pragma GCC unroll 4
    for (int j = 0; j < C; ++j) {
      const uint8_t* chunk = column[j] + c * CHUNK_BYTES;
      if (left < CHUNK_BYTES) chunk = static_cast<const uint8_t*>(std::memcpy(tail, chunk, left));
      _mm_prefetch(reinterpret_cast<const char*>(column[j] + AHEAD * bytes + c * CHUNK_BYTES), _MM_HINT_T0);
      const int64_t g = (n + j) * at.groups + at.g0;
      const __m256 s4 = _mm256_castps128_ps256(groups_avx2<float_of(KIND)>(w.scales, g, count));
      const __m256 b4 = _mm256_castps128_ps256(groups_avx2<float_of(KIND)>(w.biases, g, count));
#pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {
        const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk + 32 * half));
        // (the lanes' groups read from memory: in registers they left too few of AVX2's 16 for the sums)
        const __m256i pick = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes.pick[at.half()] + 8 * half));
        const __m256 s = _mm256_permutevar8x32_ps(s4, pick);
        const __m256 b = _mm256_permutevar8x32_ps(b4, pick);
        // 4 bits: nibbles times the row's bytes in pairs (vpmaddubsw, under 2**15), then fours (vpmaddwd). 8 bits:
        // bytes widened to 16 bits (255 * 127 * 2 is past vpmaddubsw's range), pairs (vpmaddwd), then fours (vphaddd,
        // whose order across the register's halves one permute puts back).
        const __m256i lo = is_q4(KIND) ? _mm256_and_si256(packed, low)
                                       : _mm256_cvtepu8_epi16(_mm256_castsi256_si128(packed));
        const __m256i hi = is_q4(KIND) ? _mm256_and_si256(_mm256_srli_epi16(packed, 4), low)
                                       : _mm256_cvtepu8_epi16(_mm256_extracti128_si256(packed, 1));
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          const int8_t* x = rows.row(r0 + r, c);
          const float* dx = rows.scales(r0 + r, c) + 8 * half;
          __m256i ints;
          if constexpr (is_q4(KIND)) {
            const __m256i even = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32 * half));
            const __m256i odd = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + CHUNK_BYTES + 32 * half));
            ints = _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo, even), _mm256_maddubs_epi16(hi, odd)),
                                     ones);
          } else {
            const __m128i* xs = reinterpret_cast<const __m128i*>(x + 32 * half);
            const __m256i first = _mm256_madd_epi16(lo, _mm256_cvtepi8_epi16(_mm_loadu_si128(xs)));
            const __m256i second = _mm256_madd_epi16(hi, _mm256_cvtepi8_epi16(_mm_loadu_si128(xs + 1)));
            ints = _mm256_permute4x64_epi64(_mm256_hadd_epi32(first, second), 0xD8);
          }
          const __m256 scale = _mm256_mul_ps(s, _mm256_loadu_ps(dx));
          sums[r][j][half] = _mm256_fmadd_ps(b, _mm256_loadu_ps(dx + LANES),
                                             _mm256_fmadd_ps(_mm256_cvtepi32_ps(ints), scale, sums[r][j][half]));
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C; ++j) y[r * ldy + j] = sum_lanes(sums[r][j][0], sums[r][j][1]);
  }
}

// Every column n0..n1 for every row, ROWS at a time, several columns at a time for few rows (sums to work on while
// each waits on the one before).
template <Kind KIND, int ROWS, template <Kind, int, int> class Tile>
void columns_of(const Problem& p, const Matrix& w, const Rows8& rows, int64_t n0, int64_t n1, float* Y, int64_t ldy) {
  const LaneGroups lanes(KIND, p.group_size);
  auto run = [&]<int R>(std::integral_constant<int, R>, int64_t r0) {
    constexpr int C = Tile<KIND, R, 1>::columns;
    int64_t n = n0;
    for (; n + C <= n1; n += C) Tile<KIND, R, C>::run(p, w, rows, lanes, n, r0, Y + r0 * ldy + (n - n0), ldy);
    for (; n < n1; ++n) Tile<KIND, R, 1>::run(p, w, rows, lanes, n, r0, Y + r0 * ldy + (n - n0), ldy);
  };
  for (int64_t r0 = 0; r0 < p.M; r0 += ROWS) {
    switch (std::min<int64_t>(ROWS, p.M - r0)) {
      case 8: if constexpr (ROWS >= 8) { run(std::integral_constant<int, 8>{}, r0); break; } [[fallthrough]];
      case 7: if constexpr (ROWS >= 7) { run(std::integral_constant<int, 7>{}, r0); break; } [[fallthrough]];
      case 6: if constexpr (ROWS >= 6) { run(std::integral_constant<int, 6>{}, r0); break; } [[fallthrough]];
      case 5: if constexpr (ROWS >= 5) { run(std::integral_constant<int, 5>{}, r0); break; } [[fallthrough]];
      case 4: run(std::integral_constant<int, 4>{}, r0); break;
      case 3: run(std::integral_constant<int, 3>{}, r0); break;
      case 2: run(std::integral_constant<int, 2>{}, r0); break;
      default: run(std::integral_constant<int, 1>{}, r0); break;
    }
  }
}

// The tiles: rows R and columns C of each call. AVX-512's 32 registers hold 8 sums of 16 lanes and a chunk's weights;
// AVX2's 16 registers hold half as many sums, each two registers.
template <Kind KIND, int R, int C>
struct Vnni {
  static constexpr int columns = R <= 2 ? 4 : R <= 4 ? 2 : 1;
  static void run(const Problem& p, const Matrix& w, const Rows8& rows, const LaneGroups& lanes, int64_t n, int64_t r0,
                  float* y, int64_t ldy) {
    tile_vnni<KIND, R, C>(p, w, rows, lanes, n, r0, y, ldy);
  }
};

template <Kind KIND, int R, int C>
struct Avx2 {
  static constexpr int columns = R == 1 ? 2 : 1;
  static void run(const Problem& p, const Matrix& w, const Rows8& rows, const LaneGroups& lanes, int64_t n, int64_t r0,
                  float* y, int64_t ldy) {
    tile_avx2<KIND, R, C>(p, w, rows, lanes, n, r0, y, ldy);
  }
};

template <int ROWS, template <Kind, int, int> class Tile, Kind... KINDS>
void each_kind(const Problem& p, const Matrix& w, const Rows8& rows, int64_t n0, int64_t n1, float* Y, int64_t ldy) {
  ((p.kind == KINDS ? columns_of<KINDS, ROWS, Tile>(p, w, rows, n0, n1, Y, ldy) : void()), ...);
}

}  // namespace

void columns_vnni(const Problem& p, const Matrix& w, const Rows8& rows, int64_t n0, int64_t n1, float* Y, int64_t ldy) {
  each_kind<8, Vnni, Kind::q4, Kind::q4_f16, Kind::q4_bf16, Kind::q8, Kind::q8_f16, Kind::q8_bf16>(p, w, rows, n0, n1,
                                                                                                    Y, ldy);
}

void columns_avx2(const Problem& p, const Matrix& w, const Rows8& rows, int64_t n0, int64_t n1, float* Y, int64_t ldy) {
  each_kind<4, Avx2, Kind::q4, Kind::q4_f16, Kind::q4_bf16, Kind::q8, Kind::q8_f16, Kind::q8_bf16>(p, w, rows, n0, n1,
                                                                                                    Y, ldy);
}

// VNNI is not part of x86-64-v4: the x86-64-v4 module asks the CPU. The x86-64-v3 module never takes it.
bool vnni_runs() {
#if defined(__AVX512VL__)
  static const bool runs = __builtin_cpu_supports("avx512vnni");
  return runs;
#else
  return false;
#endif
}

bool avx2_runs() { return true; }  // (the module is built for a level with AVX2, FMA and F16C)

}  // namespace mlxchat::matmul::int8

#else

namespace mlxchat::matmul::int8 {

void columns_vnni(const Problem&, const Matrix&, const Rows8&, int64_t, int64_t, float*, int64_t) {}
void columns_avx2(const Problem&, const Matrix&, const Rows8&, int64_t, int64_t, float*, int64_t) {}
bool vnni_runs() { return false; }
bool avx2_runs() { return false; }

}  // namespace mlxchat::matmul::int8

#endif
