// The matmul's tasks over 8-bit weights (float32, float16 or bfloat16 scales).
#include "matmul_tasks.h"

namespace mlxchat::matmul {

MLXCHAT_CLONES void run_q8(const Problem& p, const float* X, int64_t task, std::vector<float>& scratch) {
  switch (p.kind) {
    case Kind::q8: return block<Kind::q8>(p, X, task, scratch);
    case Kind::q8_f16: return block<Kind::q8_f16>(p, X, task, scratch);
    case Kind::q8_bf16: return block<Kind::q8_bf16>(p, X, task, scratch);
    default: return;
  }
}

}  // namespace mlxchat::matmul
