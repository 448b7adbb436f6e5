// The matmul's tasks over 4-bit weights (float32, float16 or bfloat16 scales); in the x86-64-v4
// module, its AVX-512VL loops.
#include "matmul_tasks.h"

void mlxchat::matmul::run_q4(const Problem& p, const float* X, int64_t task, std::vector<float>& scratch) {
  run_kinds<MLXCHAT_V4_LOOPS, Kind::q4, Kind::q4_f16, Kind::q4_bf16>(p, X, task, scratch);
}
