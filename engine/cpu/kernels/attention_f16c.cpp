// The attention loops over float16 K/V built for AVX2, FMA and F16C (x86-64-v3), where one instruction widens
// eight values (the portable widening took 1.5x as long over a decode step's keys and values). attention.cpp
// calls it where the CPU has them. Everything included before the target pragma is built for the baseline, so
// no shared inline function (std::vector's, say) is built here for a newer CPU than the one that links it.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "vectors.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#pragma GCC target("arch=x86-64-v3")
#define MLXCHAT_F16C_UNIT 1  // (the pragma does not define __F16C__)

#include "attention_loops.h"

namespace mlxchat {

void attend_block_f16c(const Problem& p, int64_t b, int64_t kh, int64_t q0, int64_t k0, int64_t k1, float* partial,
                       std::vector<float>& scratch) {
  attend_typed<Kind::f16>(p, b, kh, q0, k0, k1, partial, scratch);
}

}  // namespace mlxchat
#endif
