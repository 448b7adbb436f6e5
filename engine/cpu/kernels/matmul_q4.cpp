// The matmul's tasks over 4-bit weights (float32, float16 or bfloat16 scales).
#include "matmul_tasks.h"

namespace mlxchat::matmul {

MLXCHAT_CLONES void run_q4(const Problem& p, const float* X, int64_t task, std::vector<float>& scratch) {
  switch (p.kind) {
    case Kind::q4: return block<Kind::q4>(p, X, task, scratch);
    case Kind::q4_f16: return block<Kind::q4_f16>(p, X, task, scratch);
    case Kind::q4_bf16: return block<Kind::q4_bf16>(p, X, task, scratch);
    default: return;
  }
}

}  // namespace mlxchat::matmul
