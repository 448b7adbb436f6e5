// What the kernels' MLX primitives share: they run on the CPU only.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "mlx/backend/common/utils.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/mlx.h"
#include "mlx/primitives.h"
#include "profile.h"

namespace mx = mlx::core;

namespace mlxchat {

// A primitive of the CPU only, its parameters one struct `Params` (compared whole; one struct per primitive,
// which names it). Each primitive is this template over its Params, its eval_cpu a specialization
// written beside the op that builds it.
template <class Params>
class CpuPrimitive : public mx::Primitive {
 public:
  CpuPrimitive(mx::Stream stream, Params params) : mx::Primitive(stream), params_(params) {}
  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  const char* name() const override { return Params::name; }
  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error(std::string(name()) + " runs on the CPU only");
  }
  bool is_equivalent(const mx::Primitive& other) const override {
    return params_ == static_cast<const CpuPrimitive&>(other).params_;
  }

 protected:
  // What every eval_cpu starts with: fresh memory for each output, the arrays registered with the stream's
  // encoder, which is returned for the work to be dispatched on.
  mx::cpu::CommandEncoder& begin(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
    auto& encoder = mx::cpu::get_command_encoder(stream());
    for (const auto& a : inputs) encoder.set_input_array(a);
    for (auto& out : outputs) {
      out.set_data(mx::allocator::malloc(out.nbytes()));
      encoder.set_output_array(out);
    }
    return encoder;
  }

  // Queues `work` on the stream, timed as `part` while profiling.
  template <class F>
  void dispatch(mx::cpu::CommandEncoder& encoder, const char* part, F&& work) {
    encoder.dispatch([part, work = std::forward<F>(work)]() mutable { timed(part, work); });
  }

  Params params_;
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
