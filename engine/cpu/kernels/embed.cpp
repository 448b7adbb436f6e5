// A quantized embedding's rows (embed.h), each value as MLX's dequantize makes it: the scale's product rounded, then
// the bias added (two roundings, as its two operations; a fused multiply-add would round once).

#include "embed.h"

#include <bit>
#include <cstdint>
#include <stdexcept>

namespace mlxchat {

namespace {

float widened(const mx::array& a, int64_t i) {
  if (a.dtype() == mx::float32) return a.data<float>()[i];
  const uint16_t bits = a.data<uint16_t>()[i];
  if (a.dtype() == mx::bfloat16) return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
  return static_cast<float>(std::bit_cast<_Float16>(bits));
}

int64_t id_at(const mx::array& ids, int64_t i) {
  switch (ids.dtype()) {
    case mx::int32: return ids.data<int32_t>()[i];
    case mx::uint32: return ids.data<uint32_t>()[i];
    case mx::int64: return ids.data<int64_t>()[i];
    default: return static_cast<int64_t>(ids.data<uint64_t>()[i]);
  }
}

// q * scale + bias with the product rounded first: GCC contracts a * b + c into one fused multiply-add where the
// level has FMA, unless told not to here.
__attribute__((optimize("fp-contract=off"))) void dequantize_row(const uint32_t* packed, const mx::array& scales,
                                                                   const mx::array& biases, int64_t row, int64_t D,
                                                                   int group_size, int bits, float* out) {
  const int per_word = 32 / bits;
  const uint32_t mask = (1u << bits) - 1;
  const int64_t groups = D / group_size;
  for (int64_t g = 0; g < groups; ++g) {
    const float scale = widened(scales, row * groups + g), bias = widened(biases, row * groups + g);
    for (int64_t d = g * group_size; d < (g + 1) * group_size; ++d) {
      const float q = static_cast<float>(packed[d / per_word] >> (d % per_word * bits) & mask);
      const float product = q * scale;
      out[d] = product + bias;
    }
  }
}

}  // namespace

template <>
void EmbedRows::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  auto& encoder = begin(inputs, outputs);
  dispatch(encoder, "embedding rows", [inputs, out = outputs[0].data<float>(), params = params_]() {
    std::vector<uint32_t> weight_copy;
    const auto &ids = inputs[0], &weight = inputs[1];
    const int64_t V = weight.shape(0), words = weight.shape(1), D = words * 32 / params.bits;
    const uint32_t* packed = row_major(weight, weight_copy);
    for (int64_t i = 0; i < static_cast<int64_t>(ids.size()); ++i) {
      const int64_t id = id_at(ids, mx::elem_to_loc(static_cast<int>(i), ids));
      float* row = out + i * D;
      if (id < 0 || id >= V) {
        std::fill(row, row + D, 0.0f);
        continue;
      }
      dequantize_row(packed + id * words, inputs[2], inputs[3], id, D, params.group_size, params.bits, row);
    }
  });
}

mx::array embed_rows(const mx::array& ids, const mx::array& weight, const mx::array& scales, const mx::array& biases,
                     int group_size, int bits) {
  auto fail = [](const std::string& why) { throw std::invalid_argument("embed_rows: " + why); };
  if (ids.dtype() != mx::int32 && ids.dtype() != mx::uint32 && ids.dtype() != mx::int64 && ids.dtype() != mx::uint64) {
    fail("ids must be integers");
  }
  if (bits != 4 && bits != 8) fail("bits must be 4 or 8");
  if (weight.ndim() != 2 || weight.dtype() != mx::uint32 || weight.shape(0) < 1 || weight.shape(1) < 1) {
    fail("the weight must be (V, D * bits / 32) uint32");
  }
  const int D = weight.shape(1) * 32 / bits;
  if (group_size < 1 || D % group_size != 0) fail("the group size must divide the rows' width");
  if (scales.shape() != mx::Shape{weight.shape(0), D / group_size} || biases.shape() != scales.shape() ||
      biases.dtype() != scales.dtype() ||
      (scales.dtype() != mx::float32 && scales.dtype() != mx::float16 && scales.dtype() != mx::bfloat16)) {
    fail("scales and biases must be (V, D / group_size), float32, float16 or bfloat16, both alike");
  }
  auto stream = mx::default_stream(mx::Device::cpu);
  mx::Shape shape = ids.shape();
  shape.push_back(D);
  return mx::array(shape, mx::float32, std::make_shared<EmbedRows>(stream, EmbedParams{group_size, bits}),
                   {ids, weight, contiguous_input(scales, stream), contiguous_input(biases, stream)});
}

}  // namespace mlxchat
