// A decode pass's decoder layers as one primitive (layer_stack.h). Each step is the function the layer's own
// primitive runs (matmul.cpp, layer_ops.cpp, kv_write.cpp, attention.cpp), called in the order the layer's graph
// would run them, on the memory of the stream's thread: a row's bits are those of the operations apart.

#include "layer_stack.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>
#include <string>

#include "attention.h"
#include "kv_write.h"
#include "layer_ops.h"

namespace mlxchat {

namespace {

// Below these a second thread costs more than it saves (engine/cpu/stored.py and attention.py say the same).
constexpr int64_t THREADED_MATMUL = int64_t{1} << 18;
constexpr int64_t THREADED_ATTENTION = int64_t{1} << 16;

// The matrices of each call of a layer, in order: q, k and v; o; gate and up; down.
constexpr int CALL_WEIGHTS[4] = {3, 1, 2, 1};
constexpr int LAYER_ARRAYS = 3;  // the two norms and the inverse frequencies, before the weights
constexpr int PASS_INPUTS = 3;   // h, slots and starts, before each layer's K and V

// Where each call's weights start among a layer's arrays, and (at [4]) how many arrays the layer takes, from its
// calls' formats.
std::array<size_t, 5> layer_split(const int* format) {
  std::array<size_t, 5> at{LAYER_ARRAYS};
  for (int c = 0; c < 4; ++c) at[c + 1] = at[c] + CALL_WEIGHTS[c] * arrays_per_weight(format[2 * c]);
  return at;
}

// The stream thread's memory for the pass's intermediate rows, kept from call to call.
struct Scratch {
  std::vector<float> h, normed, products, q, k, v, attended, projected, hidden;
};

}  // namespace

template <>
void LayerStack::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  // The final norm's output in memory of its own; each layer's K and V as its input buffer, written in place (the
  // slots' buffers are the store's alone: engine/kv/regions.py), which the store then holds as the pass's outputs.
  auto& encoder = mx::cpu::get_command_encoder(stream());
  outputs[0].set_data(mx::allocator::malloc(outputs[0].nbytes()));
  for (size_t i = 1; i < outputs.size(); ++i) outputs[i].copy_shared_buffer(inputs[PASS_INPUTS + i - 1]);
  encoder.dispatch([inputs, out = outputs[0].data<float>(), params = params_]() {
    thread_local Scratch s;
    const StackWeights& W = *params.weights;
    const int64_t M = inputs[0].shape(0), Dm = inputs[0].shape(1), H = W.heads, Hkv = W.kv_heads, D = W.head_dim;
    const int32_t* slots = inputs[1].data<int32_t>();
    const int32_t* starts = inputs[2].data<int32_t>();
    // Each row sees its keys up to its new one (a position outside the buffer writes nothing, and attends to what
    // the buffer holds).
    std::vector<int32_t> lengths(M);
    for (int64_t m = 0; m < M; ++m) {
      lengths[m] = static_cast<int32_t>(std::clamp<int64_t>(int64_t{starts[m]} + 1, 0, inputs[PASS_INPUTS].shape(2)));
    }
    s.h.assign(inputs[0].data<float>(), inputs[0].data<float>() + M * Dm);
    s.normed.resize(M * Dm);
    s.q.resize(M * H * D);
    s.k.resize(M * Hkv * D);
    s.v.resize(M * Hkv * D);
    s.attended.resize(M * H * D);
    s.projected.resize(M * Dm);
    const float eps = W.eps;
    timed("rms norm", [&] { norm_rows(s.h.data(), W.first_norm.data<float>(), s.normed.data(), M, Dm, eps); });
    auto add_norm = [&](const mx::array& weight) {
      timed("add + rms norm", [&] {
        add_rows(s.h.data(), s.projected.data(), s.h.data(), M * Dm);
        norm_rows(s.h.data(), weight.data<float>(), s.normed.data(), M, Dm, eps);
      });
    };
    for (size_t layer = 0; layer + 1 < W.layer_at.size(); ++layer) {
      const int* format = W.formats.data() + 8 * layer;
      const int* int8s = params.int8.data() + 4 * layer;
      const mx::array* arrays = W.arrays.data() + W.layer_at[layer];
      const mx::array &post_norm = arrays[0], &next_norm = arrays[1], &inverse = arrays[2];
      const mx::array &keys = inputs[PASS_INPUTS + 2 * layer], &values = inputs[PASS_INPUTS + 2 * layer + 1];
      const auto split = layer_split(format);
      const mx::array* weights[4] = {arrays + split[0], arrays + split[1], arrays + split[2], arrays + split[3]};
      // Call c's products of rows x (M, K), then `after` (timed with it, as the matmul's own epilogue is).
      auto matmul = [&](int c, const float* x, int64_t K, bool swiglu, float* const* outs, auto after) {
        const WeightFormat how{format[2 * c], format[2 * c + 1]};
        int64_t columns = 0;
        for (int i = 0; i < CALL_WEIGHTS[c]; ++i) columns += weights[c][arrays_per_weight(how.bits) * i].shape(0);
        const int threads = M * K * columns >= THREADED_MATMUL ? params.threads : 1;
        timed(matmul_part(how, int8s[c]), [&] {
          matmul_rows(x, M, K, weights[c], CALL_WEIGHTS[c], how, swiglu, outs, threads, int8s[c]);
          after();
        });
      };
      auto nothing = [] {};
      // q, k and v, each turned by RoPE (v only moved) into heads of one token: (M, heads, 1, D).
      s.products.resize(M * (H + 2 * Hkv) * D);
      float* products[3] = {s.products.data(), s.products.data() + M * H * D, s.products.data() + M * (H + Hkv) * D};
      matmul(0, s.normed.data(), Dm, false, products, [&] {
        const int64_t pairs = static_cast<int64_t>(inverse.size());
        float* heads_of[3] = {s.q.data(), s.k.data(), s.v.data()};
        const int64_t count[3] = {H, Hkv, Hkv};
        for (int i = 0; i < 3; ++i) {
          rope_rows_into(products[i], starts, M == 1, inverse.data<float>(), i < 2 ? 2 * pairs : 0, heads_of[i], M, 1,
                         count[i], D, W.traditional, W.rope_scale);
        }
      });
      timed("K/V write", [&] { write_heads_in_place(keys, s.k.data(), slots, starts, M); });
      timed("K/V write", [&] { write_heads_in_place(values, s.v.data(), slots, starts, M); });
      timed("attention", [&] {
        int64_t seen = 0;
        for (int64_t m = 0; m < M; ++m) seen += lengths[m];
        const int threads = H * seen * D >= THREADED_ATTENTION ? params.threads : 1;
        attend_heads(s.q.data(), keys, values, slots, lengths.data(), s.attended.data(), M, H, W.attention_scale,
                     threads);
      });
      float* projected[1] = {s.projected.data()};
      matmul(1, s.attended.data(), H * D, false, projected, nothing);
      add_norm(post_norm);
      const int64_t inner = weights[2][0].shape(0);
      s.hidden.resize(M * inner);
      float* hidden[2] = {s.hidden.data(), nullptr};
      matmul(2, s.normed.data(), Dm, true, hidden, nothing);
      matmul(3, s.hidden.data(), inner, false, projected, nothing);
      add_norm(next_norm);
    }
    std::memcpy(out, s.normed.data(), sizeof(float) * M * Dm);
  });
}

namespace {

[[noreturn]] void fail(const std::string& why) { throw std::invalid_argument("layer_stack: " + why); }

// An array the stack holds rather than takes as an input: it must be there as it is, in row order.
const mx::array& held(const mx::array& a) {
  if (!a.is_available() || !a.flags().row_contiguous) fail("the weights must be evaluated, row-contiguous arrays");
  return a;
}

}  // namespace

std::shared_ptr<StackWeights> layer_stack_weights(const mx::array& first_norm, const std::vector<mx::array>& arrays,
                                                  int heads, int kv_heads, int head_dim, float eps,
                                                  float attention_scale, bool traditional, float rope_scale,
                                                  const std::vector<int>& formats) {
  if (heads < 1 || kv_heads < 1 || head_dim < 1 || heads % kv_heads != 0) {
    fail("heads a multiple of kv_heads, both and the head dim at least 1");
  }
  if (first_norm.ndim() != 1 || first_norm.shape(0) < 1 || first_norm.dtype() != mx::float32) {
    fail("first_norm is (hidden,) float32");
  }
  if (formats.empty() || formats.size() % 8 != 0) fail("formats: (bits, group size) x 4 a layer");
  const int Dm = first_norm.shape(0), H = heads, Hkv = kv_heads, D = head_dim;
  auto W = std::make_shared<StackWeights>(Dm, heads, kv_heads, head_dim, eps, attention_scale, traditional, rope_scale,
                                          held(first_norm), formats);
  size_t at = 0;
  for (size_t layer = 0; layer < formats.size() / 8; ++layer) {
    const int* format = formats.data() + 8 * layer;
    for (int c = 0; c < 4; ++c) {
      if (format[2 * c] != 4 && format[2 * c] != 8 && format[2 * c] != 16) fail("bits must be 4, 8 or 16");
    }
    const auto split = layer_split(format);
    if (at + split[4] > arrays.size()) fail("fewer arrays than the formats name");
    const mx::array* layer_arrays = arrays.data() + at;
    for (int n = 0; n < 2; ++n) {
      if (layer_arrays[n].ndim() != 1 || layer_arrays[n].shape(0) != Dm || layer_arrays[n].dtype() != mx::float32) {
        fail("norm weights are (hidden,) float32");
      }
    }
    const auto& inverse = layer_arrays[2];
    if (inverse.dtype() != mx::float32 || inverse.ndim() != 1 || inverse.size() == 0 ||
        2 * static_cast<int>(inverse.size()) > D) {
      fail("inverse frequencies (pairs,) float32, two per pair within a head");
    }
    // Each call's weights checked as weights_matmul checks them, on rows of the width it takes.
    int64_t inner = 0;
    for (int c = 0; c < 4; ++c) {
      const std::vector<mx::array> weights(layer_arrays + split[c], layer_arrays + split[c + 1]);
      const int64_t width = c == 0 || c == 2 ? Dm : c == 1 ? H * D : inner;
      const auto outs = checked_weights(width, weights, {format[2 * c], format[2 * c + 1]}, c == 2, 0);
      if (c == 0 && outs != std::vector<int64_t>{H * D, Hkv * D, Hkv * D}) {
        fail("q, k and v give heads x head_dim, kv_heads x head_dim and kv_heads x head_dim");
      }
      if ((c == 1 || c == 3) && outs[0] != Dm) fail("o and down give rows of the hidden width");
      inner = c == 2 ? outs[0] : inner;
    }
    W->layer_at.push_back(at);
    for (size_t n = 0; n < split[4]; ++n) W->arrays.push_back(held(layer_arrays[n]));
    at += split[4];
  }
  if (at != arrays.size()) fail("more arrays than the formats name");
  W->layer_at.push_back(at);
  return W;
}

std::vector<mx::array> layer_stack(const mx::array& h, const mx::array& slots, const mx::array& starts,
                                   const std::shared_ptr<StackWeights>& weights, const std::vector<mx::array>& kv,
                                   const std::vector<int>& int8, int threads) {
  if (!weights) fail("no weights given");
  const StackWeights& W = *weights;
  const size_t layers = W.layer_at.size() - 1;
  if (h.ndim() != 2 || h.dtype() != mx::float32 || h.shape(0) < 1 || h.shape(1) != W.hidden) {
    fail("h must be (M, hidden) float32");
  }
  const int M = h.shape(0);
  if (slots.ndim() != 1 || starts.ndim() != 1 || slots.shape(0) != M || starts.shape(0) != M ||
      slots.dtype() != mx::int32 || starts.dtype() != mx::int32) {
    fail("slots and starts are (M,) int32");
  }
  if (kv.size() != 2 * layers) fail("a K and a V buffer for each layer");
  if (int8.size() != 4 * layers) fail("int8: one for each layer's four calls");
  for (const int each : int8) checked_int8(each);
  auto stream = mx::default_stream(mx::Device::cpu);
  std::vector<mx::array> inputs = {contiguous_input(h, stream), contiguous_input(slots, stream),
                                   contiguous_input(starts, stream)};
  std::vector<mx::Shape> shapes = {{M, W.hidden}};
  std::vector<mx::Dtype> dtypes = {mx::float32};
  for (const auto& buffer : kv) {
    if (buffer.ndim() != 4 || buffer.shape(1) != W.kv_heads || buffer.shape(3) != W.head_dim ||
        (buffer.dtype() != mx::float32 && buffer.dtype() != mx::float16 && buffer.dtype() != mx::bfloat16) ||
        buffer.shape() != kv[0].shape() || buffer.dtype() != kv[0].dtype()) {
      fail("K and V are (slots, kv_heads, capacity, head_dim) float32, float16 or bfloat16, alike in every layer");
    }
    inputs.push_back(buffer);
    shapes.push_back(buffer.shape());
    dtypes.push_back(buffer.dtype());
  }
  return mx::array::make_arrays(std::move(shapes), std::move(dtypes),
                                std::make_shared<LayerStack>(stream, StackParams{weights, threads, int8}),
                                std::move(inputs));
}

}  // namespace mlxchat
