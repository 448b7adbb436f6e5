// The matmul's tasks over 4-bit weights (float32, float16 or bfloat16 scales).
#include "matmul_tasks.h"

MLXCHAT_CLONES void mlxchat::matmul::run_q4(const Problem& p, const float* X, int64_t task, std::vector<float>& scratch) {
  run_kinds<Kind::q4, Kind::q4_f16, Kind::q4_bf16>(p, X, task, scratch);
}
