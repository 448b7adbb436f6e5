// What the kernels' MLX primitives share: they run on the CPU only.
#pragma once

#include <string>
#include <vector>

#include "mlx/backend/common/utils.h"
#include "mlx/mlx.h"
#include "mlx/primitives.h"

namespace mx = mlx::core;

namespace mlxchat {

class CpuPrimitive : public mx::Primitive {
 public:
  using mx::Primitive::Primitive;
  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error(std::string(name()) + " runs on the CPU only");
  }
};

// An input's elements in row-major order: its own data where it is row-contiguous, else gathered into
// `copy`. The ops pass their inputs as they are: a contiguous() per input would be one more operation
// in every step's graph, where the inputs are already contiguous (fresh outputs, stored weights).
template <class T>
const T* row_major(const mx::array& a, std::vector<T>& copy) {
  if (a.flags().row_contiguous) return a.data<T>();
  copy.resize(a.size());
  for (size_t i = 0; i < a.size(); ++i) copy[i] = a.data<T>()[mx::elem_to_loc(static_cast<int>(i), a)];
  return copy.data();
}

// An evaluated, row-contiguous array as it is; anything else through contiguous().
inline mx::array contiguous_input(const mx::array& a, mx::Stream s) {
  return a.is_available() && a.flags().row_contiguous ? a : mx::contiguous(a, false, s);
}

}  // namespace mlxchat
