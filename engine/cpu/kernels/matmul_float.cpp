// The matmul's tasks over float16 and bfloat16 weights.
#include "matmul_tasks.h"

void mlxchat::matmul::run_float(const Problem& p, const float* X, int64_t task, std::vector<float>& scratch) {
  run_kinds<false, Kind::f16, Kind::bf16>(p, X, task, scratch);
}
