// What the int8 rows' paths share (matmul_int8.cpp: rounding, the portable loops, the choice of path;
// matmul_int8_x86.cpp: AVX-512 VNNI and AVX2).
//
// A weight group g gives x . w = scale_g * sum(q * x) + bias_g * sum(x); with x ~ dx * xq, the first sum is
// integer products, exact. What every path computes, lane by lane (16 lanes a chunk of 64 weight bytes, each
// lane E values: E = 8 at 4 bits, 4 at 8 bits), is the same float arithmetic in the same order:
//   ints = sum of the lane's E products q * xq (exact)
//   sums = fma(bias, dx * sum of the lane's E values of xq, fma(float(ints), scale * dx, sums))
// and a column's result is the lanes' sum in lanes_sum's order. So every path gives the same bits, and a row the
// same bits whatever rows share its call.
#pragma once

#include <cstdint>

#include "matmul_tasks.h"

namespace mlxchat::matmul::int8 {

constexpr int LANES = 16;
constexpr int64_t CHUNK_BYTES = 64;  // of packed weights, and of int8 rows (twice, even and odd, at 4 bits)

constexpr int per_lane(Kind k) { return is_q4(k) ? 8 : 4; }
constexpr int64_t chunk_values(Kind k) { return LANES * per_lane(k); }
// The packed bytes of one column of K weights.
constexpr int64_t column_bytes(Kind k, int64_t K) { return K * (is_q4(k) ? 4 : 8) / 8; }

// Y (M x (n1 - n0), leading dimension ldy) = rows . W[n0:n1].T for p's kind, on each vector path: where
// vnni_runs() / avx2_runs() only.
void columns_vnni(const Problem& p, const Matrix& w, const Rows8& rows, int64_t n0, int64_t n1, float* Y, int64_t ldy);
void columns_avx2(const Problem& p, const Matrix& w, const Rows8& rows, int64_t n0, int64_t n1, float* Y, int64_t ldy);
bool vnni_runs();
bool avx2_runs();

}  // namespace mlxchat::matmul::int8
