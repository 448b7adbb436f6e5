// What the kernels' inner loops are written in: GCC's vector extension (one AVX register, two SSE
// or NEON ones), and the attribute that clones a function per x86 level, picked at run time.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MLXCHAT_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MLXCHAT_CLONES
#endif

namespace mlxchat {

typedef float v8 __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));
typedef uint8_t v32b __attribute__((vector_size(32)));
typedef uint64_t v4q __attribute__((vector_size(32)));

__attribute__((always_inline)) inline v8 load8(const float* p) {
  v8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

__attribute__((always_inline)) inline void store8(float* p, v8 v) { std::memcpy(p, &v, sizeof v); }

// The lanes' sum, always in the same order.
__attribute__((always_inline)) inline float sum8(v8 v) {
  return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

}  // namespace mlxchat
