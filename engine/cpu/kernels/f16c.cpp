// The kernels' float16 loops built for AVX2, FMA and F16C (x86-64-v3), where one instruction widens or narrows
// eight values: attention over float16 K/V (the portable widening took 1.5x as long over a decode step's keys
// and values) and the new K/V rows written in float16. attention.cpp and kv_write.cpp call them where the CPU
// has F16C. Everything included before the target pragma is built for the baseline, so
// no shared inline function (std::vector's, say) is built here for a newer CPU than the one that links it.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kv_write.h"  // (MLX's headers too: built for the baseline, before the pragma)
#include "vectors.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>

namespace mlxchat {

bool f16c_unit_runs() {  // (before the pragma: built for any x86)
  static const bool runs = __builtin_cpu_supports("x86-64-v3");
  return runs;
}

}  // namespace mlxchat

#pragma GCC target("arch=x86-64-v3")
#define MLXCHAT_F16C_UNIT 1  // (the pragma does not define __F16C__)

#include "attention_loops.h"

namespace mlxchat {

void attend_block_f16c(const Problem& p, int64_t b, int64_t kh, int64_t q0, int64_t k0, int64_t k1, float* partial,
                       std::vector<float>& scratch) {
  attend_typed<Kind::f16>(p, b, kh, q0, k0, k1, partial, scratch);
}

void halves_f16c(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(src + i);
    const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
    std::memcpy(dst + i, &h, sizeof h);
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0) {
      for (int64_t j = i; j < i + 8; ++j) dst[j] = std::isnan(src[j]) ? half_nan(src[j]) : dst[j];
    }
  }
  for (; i < n; ++i) dst[i] = std::isnan(src[i]) ? half_nan(src[i]) : _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}

}  // namespace mlxchat
#endif
