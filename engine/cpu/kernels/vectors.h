// What the kernels' inner loops are written in: GCC's vector extension (one AVX register, two SSE
// or NEON ones). On x86 the whole module is built once per level (CMakeLists.txt: -march=x86-64-v4, -v3 or
// the baseline), and Python loads the one this CPU runs (__init__.py), so these compile to that level's code.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace mlxchat {

typedef float v8 __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));
typedef uint8_t v32b __attribute__((vector_size(32)));
typedef uint64_t v4q __attribute__((vector_size(32)));
typedef uint16_t v8s __attribute__((vector_size(16)));

// e**x (0 below -88, finite above 88) in each lane: MLX's own polynomial, in vector operations without branches
// (MLX's CPU exp runs one element at a time, and GCC left the scalar form's clamp and floor unvectorized).
__attribute__((always_inline)) inline v8 exp_poly8(v8 x) {
  x = x < -88.0f ? -88.0f : x;
  x = (88.0f < x ? 88.0f : x) * 1.442695f;
  const v8 y = x + 0.5f;
  // floor(y), |y| < 128: truncated toward zero, less one where that rounded up. A NaN stays NaN (through f and p)
  // with a finite exponent: it is converted as 0.
  const v8 t = __builtin_convertvector(__builtin_convertvector(y == y ? y : 0.0f, v8i), v8);
  const v8 n = t > y ? t - 1.0f : t, f = x - n;
  v8 p = (v8){} + 1.535336188319500e-4f;
  p = p * f + 1.339887440266574e-3f;
  p = p * f + 9.618437357674640e-3f;
  p = p * f + 5.550332471162809e-2f;
  p = p * f + 2.402264791363012e-1f;
  p = p * f + 6.931472028550421e-1f;
  p = p * f + 1.0f;
  return (v8)(((v8u)__builtin_convertvector(n, v8i) + 127u) << 23) * p;
}

// The same for one value (lane 0 of the vector form: one definition, the same bits).
__attribute__((always_inline)) inline float exp_poly(float x) { return exp_poly8((v8){} + x)[0]; }

// silu(g) * u: SwiGLU's one formula, for the op of its own (layer_ops.cpp) and the one fused into the matmul.
__attribute__((always_inline)) inline v8 swiglu8(v8 g, v8 u) { return g * u / (1.0f + exp_poly8(-g)); }
__attribute__((always_inline)) inline float swiglu_of(float g, float u) { return swiglu8((v8){} + g, (v8){} + u)[0]; }

__attribute__((always_inline)) inline v8 load8(const float* p) {
  v8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

__attribute__((always_inline)) inline void store8(float* p, v8 v) { std::memcpy(p, &v, sizeof v); }

// out[i] = swiglu_of(gate[i], up[i]) for i < n, eight at a time: the op of its own and the matmul's fused columns.
__attribute__((always_inline)) inline void swiglu_span(const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) store8(out + i, swiglu8(load8(gate + i), load8(up + i)));
  for (; i < n; ++i) out[i] = swiglu_of(gate[i], up[i]);
}

// v[c][l] becomes v[l][c]: three rounds of in-lane and cross-lane shuffles, as AVX transposes 8 x 8.
__attribute__((always_inline)) inline void transpose8(v8 (&v)[8]) {
  v8 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = __builtin_shuffle(v[i], v[i + 1], (v8i){0, 8, 1, 9, 4, 12, 5, 13});
    t[i + 1] = __builtin_shuffle(v[i], v[i + 1], (v8i){2, 10, 3, 11, 6, 14, 7, 15});
  }
  for (int i = 0; i < 8; i += 4) {
    for (int j = 0; j < 2; ++j) {
      u[i + 2 * j] = __builtin_shuffle(t[i + j], t[i + j + 2], (v8i){0, 1, 8, 9, 4, 5, 12, 13});
      u[i + 2 * j + 1] = __builtin_shuffle(t[i + j], t[i + j + 2], (v8i){2, 3, 10, 11, 6, 7, 14, 15});
    }
  }
  for (int i = 0; i < 4; ++i) {
    v[i] = __builtin_shuffle(u[i], u[i + 4], (v8i){0, 1, 2, 3, 8, 9, 10, 11});
    v[i + 4] = __builtin_shuffle(u[i], u[i + 4], (v8i){4, 5, 6, 7, 12, 13, 14, 15});
  }
}

// Eight float16 values widened exactly to float32 in integer steps that vectorize on any CPU (GCC converts
// a _Float16 vector one lane at a time: float16 weights took 4.6x as long as bfloat16 ones at one row).
// Subnormals are renormalized by a float subtraction that is exact: 2**-14 (1 + m / 1024) - 2**-14.
__attribute__((always_inline)) inline v8 widen_halves(v8s halves) {
  const v8u h = __builtin_convertvector(halves, v8u);
  const v8u body = (h & 0x7fffu) << 13;  // exponent and mantissa at float32's places
  const v8u exponent = body & 0x0f800000u;
  v8u bits = body + 0x38000000u;  // the exponent's bias, 15 to 127
  bits = exponent == 0x0f800000u ? bits + 0x38000000u : bits;  // infinity and NaN: all ones
  const v8 subnormal = (v8)(bits + 0x00800000u) - (v8)((v8u){} + 0x38800000u);
  const v8 value = exponent == 0u ? subnormal : (v8)bits;
  return (v8)((v8u)value | (h & 0x8000u) << 16);
}

// The lanes' sum, always in the same order.
__attribute__((always_inline)) inline float sum8(v8 v) {
  return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

}  // namespace mlxchat
