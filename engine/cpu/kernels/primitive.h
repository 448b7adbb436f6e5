// What the kernels' MLX primitives share: they run on the CPU only.
#pragma once

#include <string>
#include <vector>

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

}  // namespace mlxchat
