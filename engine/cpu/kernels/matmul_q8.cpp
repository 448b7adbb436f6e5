// The matmul's tasks over 8-bit weights (float32, float16 or bfloat16 scales).
#include "matmul_tasks.h"

MLXCHAT_CLONES void mlxchat::matmul::run_q8(const Problem& p, const float* X, int64_t task, std::vector<float>& scratch) {
  run_kinds<false, Kind::q8, Kind::q8_f16, Kind::q8_bf16>(p, X, task, scratch);
}

#if MLXCHAT_V4_LOOPS
// Built for x86-64-v4: the inlined loops only, so no shared function is built here for a newer CPU than the one
// that calls it.
__attribute__((target("arch=x86-64-v4"))) void mlxchat::matmul::run_q8_v4(const Problem& p, const float* X,
                                                                          int64_t task, std::vector<float>& scratch) {
  run_kinds<true, Kind::q8, Kind::q8_f16, Kind::q8_bf16>(p, X, task, scratch);
}
#endif
