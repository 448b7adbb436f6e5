// RMSNorm, RoPE and SwiGLU over a pass's rows on the CPU, each one primitive (layer_ops.h). Rows are
// independent: a row's result does not depend on the rows beside it.

#include "layer_ops.h"

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "vectors.h"

namespace mlxchat {

void norm_rows(const float* x, const float* weight, float* out, int64_t rows, int64_t D, float eps) {
  for (int64_t r = 0; r < rows; ++r, x += D, out += D) {
    // Eight lanes in a fixed order: an `omp simd` reduction summed in the order of the vector width and of the
    // alignment the compiler peeled for, so the AVX-512 and AVX2 modules, or two buffers, parted in the last bit.
    v8 lanes = {};
    int64_t d = 0;
    for (; d + 8 <= D; d += 8) lanes += load8(x + d) * load8(x + d);
    float sum = sum8(lanes);
    for (; d < D; ++d) sum += x[d] * x[d];
    const float inv = 1.0f / std::sqrt(sum / static_cast<float>(D) + eps);
#pragma omp simd
    for (int64_t d = 0; d < D; ++d) out[d] = x[d] * inv * weight[d];
  }
}

void add_rows(const float* h, const float* delta, float* out, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = h[i] + delta[i];
}

namespace {

void swiglu_run(const float* gate, const float* up, float* out, int64_t n) {
  swiglu_span(gate, up, out, n);
}

struct Rope {
  const float* x;          // (B * L, heads * D)
  const int32_t* offsets;  // (B,), or one for all
  const float* inverse;    // (dims / 2,) inverse frequencies
  float* out;              // (B, heads, L, D)
  int64_t B, L, heads, D, dims;
  bool one_offset, traditional;
  float scale;
};

void rope_rows_run(const Rope& p) {
  const int64_t half = p.dims / 2;
  std::vector<float> cosines(half), sines(half);
  for (int64_t b = 0; b < p.B; ++b) {
    for (int64_t i = 0; i < p.L; ++i) {
      const float position = static_cast<float>(p.offsets[p.one_offset ? 0 : b] + i) * p.scale;
      for (int64_t f = 0; f < half; ++f) {
        const float theta = position * p.inverse[f];
        cosines[f] = std::cos(theta);
        sines[f] = std::sin(theta);
      }
      const float* row = p.x + (b * p.L + i) * p.heads * p.D;
      for (int64_t h = 0; h < p.heads; ++h) {
        const float* src = row + h * p.D;
        float* dst = p.out + ((b * p.heads + h) * p.L + i) * p.D;
        if (p.traditional) {
          for (int64_t f = 0; f < half; ++f) {
            const float a = src[2 * f], c = src[2 * f + 1];
            dst[2 * f] = a * cosines[f] - c * sines[f];
            dst[2 * f + 1] = a * sines[f] + c * cosines[f];
          }
        } else {
#pragma omp simd
          for (int64_t f = 0; f < half; ++f) {
            const float a = src[f], c = src[f + half];
            dst[f] = a * cosines[f] - c * sines[f];
            dst[f + half] = a * sines[f] + c * cosines[f];
          }
        }
        for (int64_t d = p.dims; d < p.D; ++d) dst[d] = src[d];
      }
    }
  }
}

mx::Stream cpu_stream() { return mx::default_stream(mx::Device::cpu); }

}  // namespace

void rope_rows_into(const float* x, const int32_t* offsets, bool one_offset, const float* inverse, int64_t dims,
                    float* out, int64_t B, int64_t L, int64_t heads, int64_t D, bool traditional, float scale) {
  rope_rows_run({x, offsets, inverse, out, B, L, heads, D, dims, one_offset, traditional, scale});
}

template <>
void Swiglu::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  const auto &gate = inputs[0], &up = inputs[1];
  auto& encoder = begin(inputs, outputs);  // (first: the captures read the outputs' memory)
  dispatch(encoder, "swiglu", [gate, up, o = outputs[0].data<float>()]() {
    std::vector<float> gate_copy, up_copy;
    swiglu_run(row_major(gate, gate_copy), row_major(up, up_copy), o, static_cast<int64_t>(gate.size()));
  });
}

mx::array swiglu(const mx::array& gate, const mx::array& up) {
  if (gate.dtype() != mx::float32 || up.dtype() != mx::float32 || gate.shape() != up.shape()) {
    throw std::invalid_argument("swiglu: gate and up of one shape, float32");
  }
  return mx::array(gate.shape(), mx::float32, std::make_shared<Swiglu>(cpu_stream(), SwigluParams{}), {gate, up});
}

template <>
void RmsNorm::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  const auto &x = inputs[0], &weight = inputs[1];
  auto& encoder = begin(inputs, outputs);  // (first: the captures read the outputs' memory)
  dispatch(encoder, "rms norm", [x, w = weight.data<float>(), o = outputs[0].data<float>(), eps = params_.eps]() {
    std::vector<float> copy;
    const int64_t D = x.shape(-1);
    norm_rows(row_major(x, copy), w, o, x.size() / D, D, eps);
  });
}

namespace {

void check_norm(const mx::array& x, const mx::array& weight) {
  if (x.dtype() != mx::float32 || weight.dtype() != mx::float32 || x.ndim() < 1 || weight.ndim() != 1 ||
      weight.shape(0) != x.shape(-1)) {
    throw std::invalid_argument("rms_norm: x (..., D) and weight (D,) float32");
  }
  if (x.shape(-1) < 1) throw std::invalid_argument("rms_norm: D must be at least 1 (the mean of no values)");
}

}  // namespace

mx::array rms_norm(const mx::array& x, const mx::array& weight, float eps) {
  check_norm(x, weight);
  auto s = cpu_stream();
  return mx::array(x.shape(), mx::float32, std::make_shared<RmsNorm>(s, NormParams{eps}), {x, contiguous_input(weight, s)});
}

template <>
void AddRmsNorm::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  const auto &h = inputs[0], &delta = inputs[1], &weight = inputs[2];
  auto& encoder = begin(inputs, outputs);  // (first: the captures read the outputs' memory)
  dispatch(encoder, "add + rms norm", [h, delta, w = weight.data<float>(), sum = outputs[0].data<float>(),
                                   normed = outputs[1].data<float>(), eps = params_.eps]() {
    std::vector<float> h_copy, delta_copy;
    const int64_t D = h.shape(-1), n = static_cast<int64_t>(h.size());
    add_rows(row_major(h, h_copy), row_major(delta, delta_copy), sum, n);
    norm_rows(sum, w, normed, n / D, D, eps);
  });
}

std::vector<mx::array> add_rms_norm(const mx::array& h, const mx::array& delta, const mx::array& weight, float eps) {
  if (h.shape() != delta.shape() || delta.dtype() != mx::float32) {
    throw std::invalid_argument("add_rms_norm: h and delta of one shape, float32");
  }
  check_norm(h, weight);
  auto s = cpu_stream();
  return mx::array::make_arrays({h.shape(), h.shape()}, {mx::float32, mx::float32},
                                std::make_shared<AddRmsNorm>(s, AddNormParams{eps}),
                                {h, delta, contiguous_input(weight, s)});
}

template <>
void RopeRows::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  // inputs: offsets, inverse, then the rows of each output
  const auto &offsets = inputs[0], &inverse = inputs[1];
  auto& encoder = begin(inputs, outputs);
  std::vector<Rope> each;
  for (auto& out : outputs) {
    each.push_back({nullptr, offsets.data<int32_t>(), inverse.data<float>(), out.data<float>(), out.shape(0),
                    out.shape(2), out.shape(1), out.shape(3), 2 * static_cast<int64_t>(inverse.size()),
                    offsets.size() == 1, params_.traditional, params_.scale});
  }
  dispatch(encoder, "rope", [each, inputs]() mutable {
    std::vector<float> copy;
    for (size_t i = 0; i < each.size(); ++i) {
      each[i].x = row_major(inputs[i + 2], copy);
      rope_rows_run(each[i]);
    }
  });
}

std::vector<mx::array> rope_rows(const std::vector<mx::array>& xs, int batch, const std::vector<int>& heads,
                                 const mx::array& offsets, const mx::array& inverse, bool traditional, float scale) {
  if (xs.empty() || xs.size() != heads.size()) {
    throw std::invalid_argument("rope_rows: one number of heads for each of one or more inputs");
  }
  std::vector<mx::Shape> shapes;
  for (size_t i = 0; i < xs.size(); ++i) {
    const auto& x = xs[i];
    if (x.dtype() != mx::float32 || x.ndim() != 2 || batch <= 0 || heads[i] <= 0 || x.shape(0) % batch != 0 ||
        x.shape(1) % heads[i] != 0 || x.shape(0) != xs[0].shape(0) || x.shape(1) / heads[i] != xs[0].shape(1) / heads[0]) {
      throw std::invalid_argument("rope_rows: x (batch * length, heads * dim) float32, one length and dim for all");
    }
    shapes.push_back({batch, heads[i], x.shape(0) / batch, x.shape(1) / heads[i]});
  }
  const int D = xs[0].shape(1) / heads[0];
  if (inverse.dtype() != mx::float32 || inverse.ndim() != 1 || inverse.size() == 0 ||
      2 * static_cast<int>(inverse.size()) > D) {
    throw std::invalid_argument("rope_rows: inverse frequencies (pairs,) float32, two per pair within a head");
  }
  if (offsets.dtype() != mx::int32 || (offsets.size() != 1 && offsets.size() != static_cast<size_t>(batch))) {
    throw std::invalid_argument("rope_rows: int32 offsets, one or one per sequence");
  }
  auto s = cpu_stream();
  std::vector<mx::array> inputs = {contiguous_input(offsets, s), contiguous_input(inverse, s)};
  inputs.insert(inputs.end(), xs.begin(), xs.end());
  return mx::array::make_arrays(std::move(shapes), std::vector<mx::Dtype>(xs.size(), mx::float32),
                                std::make_shared<RopeRows>(s, RopeParams{traditional, scale}), inputs);
}

}  // namespace mlxchat
