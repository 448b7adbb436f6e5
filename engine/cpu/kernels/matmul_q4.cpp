// The matmul's tasks over 4-bit weights (float32, float16 or bfloat16 scales).
#include "matmul_tasks.h"

namespace mlxchat::matmul {

MLXCHAT_CLONES void run_q4(const Problem& p, const float* X, int64_t task, std::vector<float>& scratch) {
  run_kinds<false, Kind::q4, Kind::q4_f16, Kind::q4_bf16>(p, X, task, scratch);
}

#if MLXCHAT_V4_LOOPS
bool v4_runs() {
  static const bool runs = __builtin_cpu_supports("x86-64-v4");
  return runs;
}

// Built for x86-64-v4 (the permute of two registers is AVX-512VL): the inlined loops only, so no shared
// function is built here for a newer CPU than the one that calls it.
__attribute__((target("arch=x86-64-v4"))) void run_q4_v4(const Problem& p, const float* X, int64_t task,
                                                          std::vector<float>& scratch) {
  run_kinds<true, Kind::q4, Kind::q4_f16, Kind::q4_bf16>(p, X, task, scratch);
}
#endif

}  // namespace mlxchat::matmul
