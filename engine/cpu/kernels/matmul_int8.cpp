// The matmul's int8 rows (an opt-in): each row is rounded to int8 in blocks of 32 values with a float scale
// per block, as llama.cpp rounds its rows, and multiplied by the 4- or 8-bit weights in integers, several
// products a lane at a time, where the float rows widen and multiply every weight. This file rounds the rows,
// holds the portable loops and picks the path; matmul_int8.h says what every path computes.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "matmul_int8.h"

namespace mlxchat::matmul {

using namespace int8;

namespace {

// The 16 lanes' sum, always in the same order (halves, then quarters...), as the vector paths add them.
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

// Column n for every row on the portable path: plain loops, in the order matmul_int8.h gives.
template <Kind KIND>
void column_portable(const Problem& p, const Matrix& w, const Rows8& rows, int64_t n, float* y, int64_t ldy) {
  constexpr int E = per_lane(KIND);
  const int64_t groups = p.K / p.group_size, bytes = column_bytes(KIND, p.K);
  const uint8_t* column = static_cast<const uint8_t*>(w.values) + n * bytes;
  constexpr int ROWS = 8;
  for (int64_t t0 = 0; t0 < p.M; t0 += ROWS) {
    const int T = static_cast<int>(std::min<int64_t>(ROWS, p.M - t0));
    float sums[ROWS][LANES] = {};
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
      for (int r = 0; r < T; ++r) {
        const int8_t* xq = rows.row(t0 + r, c);
        const float* dx = rows.scales(t0 + r, c);
        const float* xs = rows.sums(t0 + r, c);
        for (int i = 0; i < LANES; ++i) {
          int32_t ints = 0;
          for (int t = 0; t < 4; ++t) {
            ints += q[4 * i + t] * xq[4 * i + t];
            if constexpr (is_q4(KIND)) ints += q[CHUNK_BYTES + 4 * i + t] * xq[CHUNK_BYTES + 4 * i + t];
          }
          sums[r][i] = std::fma(b[i], xs[i], std::fma(static_cast<float>(ints), s[i] * dx[i], sums[r][i]));
        }
      }
    }
    for (int r = 0; r < T; ++r) y[(t0 + r) * ldy] = lanes_sum(sums[r]);
  }
}

template <Kind... KINDS>
void columns_portable(const Problem& p, const Matrix& w, const Rows8& rows, int64_t n0, int64_t n1, float* Y,
                      int64_t ldy) {
  auto one = [&](auto kind) {
    for (int64_t n = n0; n < n1; ++n) column_portable<decltype(kind)::value>(p, w, rows, n, Y + (n - n0), ldy);
  };
  ((p.kind == KINDS ? one(std::integral_constant<Kind, KINDS>{}) : void()), ...);
}

}  // namespace

Int8Path int8_path(Int8Path asked) {
  if (asked == Int8Path::fastest) {
    return vnni_runs() ? Int8Path::vnni : avx2_runs() ? Int8Path::avx2 : Int8Path::portable;
  }
  return asked;
}

int64_t int8_chunks(Kind kind, int64_t K) { return (K + chunk_values(kind) - 1) / chunk_values(kind); }

void quantize_rows(const float* X, int64_t m0, int64_t m1, int64_t K, Kind kind, Rows8& rows) {
  const int E = per_lane(kind);
  const int64_t values = chunk_values(kind);
  for (int64_t m = m0; m < m1; ++m) {
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
          // (a NaN or infinite x times 0 is NaN, whose conversion to an integer is undefined: such blocks are 0)
          const int8_t q = k < K && finite
                               ? static_cast<int8_t>(std::clamp(std::nearbyint(x[k] * inverse), -127.0f, 127.0f))
                               : 0;
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
void int8_block(const Problem& p, const Rows8& rows, int64_t task, std::vector<float>& scratch,
                               Int8Path path) {
  const int64_t index = std::upper_bound(p.first_task.begin(), p.first_task.end(), task) - p.first_task.begin() - 1;
  const Matrix& w = p.matrices[index];
  const int64_t n0 = (task - p.first_task[index]) * COLUMNS, n1 = std::min(n0 + COLUMNS, w.N);
  auto columns = [&](const Matrix& m, float* Y, int64_t ldy) {
    if (path == Int8Path::vnni) return columns_vnni(p, m, rows, n0, n1, Y, ldy);
    if (path == Int8Path::avx2) return columns_avx2(p, m, rows, n0, n1, Y, ldy);
    columns_portable<Kind::q4, Kind::q4_f16, Kind::q4_bf16, Kind::q8, Kind::q8_f16, Kind::q8_bf16>(p, m, rows, n0, n1,
                                                                                                  Y, ldy);
  };
  if (!p.swiglu) return columns(w, w.out + n0, w.N);
  scratch.resize(2 * p.M * COLUMNS);
  columns(w, scratch.data(), COLUMNS);
  columns(p.matrices[1], scratch.data() + p.M * COLUMNS, COLUMNS);
  swiglu_columns(p, w, n0, n1, scratch.data(), scratch.data() + p.M * COLUMNS);
}

}  // namespace mlxchat::matmul
