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
constexpr int LAYER_ARRAYS = 5;  // the two norms, the inverse frequencies, K and V, before the weights

// Where each call's weights start among a layer's arrays, and (at [4]) how many arrays the layer takes, from its
// calls' formats.
std::array<size_t, 5> layer_split(const int* format) {
  std::array<size_t, 5> at{LAYER_ARRAYS};
  for (int c = 0; c < 4; ++c) at[c + 1] = at[c] + CALL_WEIGHTS[c] * arrays_per_weight(format[3 * c]);
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
  size_t at = 4, out = 1;
  for (size_t layer = 0; at < inputs.size(); ++layer) {
    outputs[out++].copy_shared_buffer(inputs[at + 3]);
    outputs[out++].copy_shared_buffer(inputs[at + 4]);
    at += layer_split(params_.formats.data() + 12 * layer)[4];
  }
  encoder.dispatch([inputs, out = outputs[0].data<float>(), params = params_]() {
    thread_local Scratch s;
    const int64_t M = inputs[0].shape(0), Dm = inputs[0].shape(1), H = params.heads, Hkv = params.kv_heads,
                  D = params.head_dim;
    const int32_t* slots = inputs[1].data<int32_t>();
    const int32_t* starts = inputs[2].data<int32_t>();
    // Each row sees its keys up to its new one (a position outside the buffer writes nothing, and attends to what
    // the buffer holds).
    std::vector<int32_t> lengths(M);
    for (int64_t m = 0; m < M; ++m) {
      lengths[m] = static_cast<int32_t>(std::clamp<int64_t>(int64_t{starts[m]} + 1, 0, inputs[7].shape(2)));
    }
    s.h.assign(inputs[0].data<float>(), inputs[0].data<float>() + M * Dm);
    s.normed.resize(M * Dm);
    s.q.resize(M * H * D);
    s.k.resize(M * Hkv * D);
    s.v.resize(M * Hkv * D);
    s.attended.resize(M * H * D);
    s.projected.resize(M * Dm);
    const float eps = params.eps;
    timed("rms norm", [&] { norm_rows(s.h.data(), inputs[3].data<float>(), s.normed.data(), M, Dm, eps); });
    auto add_norm = [&](const mx::array& weight) {
      timed("add + rms norm", [&] {
        add_rows(s.h.data(), s.projected.data(), s.h.data(), M * Dm);
        norm_rows(s.h.data(), weight.data<float>(), s.normed.data(), M, Dm, eps);
      });
    };
    size_t at = 4;
    for (size_t layer = 0; at < inputs.size(); ++layer) {
      const int* format = params.formats.data() + 12 * layer;
      const mx::array* arrays = inputs.data() + at;
      const mx::array &post_norm = arrays[0], &next_norm = arrays[1], &inverse = arrays[2], &keys = arrays[3],
                      &values = arrays[4];
      const auto split = layer_split(format);
      const mx::array* weights[4] = {arrays + split[0], arrays + split[1], arrays + split[2], arrays + split[3]};
      at += split[4];
      // Call c's products of rows x (M, K), then `after` (timed with it, as the matmul's own epilogue is).
      auto matmul = [&](int c, const float* x, int64_t K, bool swiglu, float* const* outs, auto after) {
        const int bits = format[3 * c], int8 = format[3 * c + 2];
        int64_t columns = 0;
        for (int i = 0; i < CALL_WEIGHTS[c]; ++i) columns += weights[c][arrays_per_weight(bits) * i].shape(0);
        const int threads = M * K * columns >= THREADED_MATMUL ? params.threads : 1;
        timed(matmul_part({bits, format[3 * c + 1]}, int8), [&] {
          matmul_rows(x, M, K, weights[c], CALL_WEIGHTS[c], {bits, format[3 * c + 1]}, swiglu, outs, threads, int8);
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
                         count[i], D, params.traditional, params.rope_scale);
        }
      });
      timed("K/V write", [&] { write_heads_in_place(keys, s.k.data(), slots, starts, M); });
      timed("K/V write", [&] { write_heads_in_place(values, s.v.data(), slots, starts, M); });
      timed("attention", [&] {
        int64_t seen = 0;
        for (int64_t m = 0; m < M; ++m) seen += lengths[m];
        const int threads = H * seen * D >= THREADED_ATTENTION ? params.threads : 1;
        attend_heads(s.q.data(), keys, values, slots, lengths.data(), s.attended.data(), M, H, params.attention_scale,
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

std::vector<mx::array> layer_stack(const mx::array& h, const mx::array& slots, const mx::array& starts, const mx::array& first_norm,
                      const std::vector<mx::array>& layers, const StackParams& params) {
  auto fail = [](const std::string& why) { throw std::invalid_argument("layer_stack: " + why); };
  if (h.ndim() != 2 || h.dtype() != mx::float32 || h.shape(0) < 1 || h.shape(1) < 1) fail("h must be (M, hidden) float32");
  const int M = h.shape(0), Dm = h.shape(1);
  if (slots.ndim() != 1 || starts.ndim() != 1 || slots.shape(0) != M || starts.shape(0) != M ||
      slots.dtype() != mx::int32 || starts.dtype() != mx::int32) {
    fail("slots and starts are (M,) int32");
  }
  if (params.heads < 1 || params.kv_heads < 1 || params.head_dim < 1 || params.heads % params.kv_heads != 0) {
    fail("heads a multiple of kv_heads, both and the head dim at least 1");
  }
  if (first_norm.ndim() != 1 || first_norm.shape(0) != Dm || first_norm.dtype() != mx::float32) {
    fail("first_norm is (hidden,) float32");
  }
  if (params.formats.empty() || params.formats.size() % 12 != 0) fail("formats: (bits, group size, int8) x 4 a layer");
  const size_t count = params.formats.size() / 12;
  const int H = params.heads, Hkv = params.kv_heads, D = params.head_dim;
  auto stream = mx::default_stream(mx::Device::cpu);
  std::vector<mx::array> inputs = {contiguous_input(h, stream), contiguous_input(slots, stream),
                                   contiguous_input(starts, stream), contiguous_input(first_norm, stream)};
  std::vector<mx::Shape> shapes = {{M, Dm}};
  std::vector<mx::Dtype> dtypes = {mx::float32};
  size_t at = 0;
  for (size_t layer = 0; layer < count; ++layer) {
    const int* format = params.formats.data() + 12 * layer;
    const auto split = layer_split(format);
    if (at + split[4] > layers.size()) fail("fewer arrays than the formats name");
    const mx::array* arrays = layers.data() + at;
    for (int n = 0; n < 2; ++n) {
      if (arrays[n].ndim() != 1 || arrays[n].shape(0) != Dm || arrays[n].dtype() != mx::float32) {
        fail("norm weights are (hidden,) float32");
      }
    }
    const auto& inverse = arrays[2];
    if (inverse.dtype() != mx::float32 || inverse.ndim() != 1 || inverse.size() == 0 ||
        2 * static_cast<int>(inverse.size()) > D) {
      fail("inverse frequencies (pairs,) float32, two per pair within a head");
    }
    for (int n = 3; n < 5; ++n) {
      const auto& buffer = arrays[n];
      if (buffer.ndim() != 4 || buffer.shape(1) != Hkv || buffer.shape(3) != D ||
          (buffer.dtype() != mx::float32 && buffer.dtype() != mx::float16 && buffer.dtype() != mx::bfloat16) ||
          buffer.shape() != arrays[3].shape() || buffer.dtype() != arrays[3].dtype() ||
          (layer > 0 && buffer.shape() != shapes[1])) {
        fail("K and V are (slots, kv_heads, capacity, head_dim) float32, float16 or bfloat16, alike in every layer");
      }
      shapes.push_back(buffer.shape());
      dtypes.push_back(buffer.dtype());
    }
    for (int n = 0; n < LAYER_ARRAYS; ++n) inputs.push_back(n < 3 ? contiguous_input(arrays[n], stream) : arrays[n]);
    // Each call's weights checked as weights_matmul checks them, on rows of the width it takes.
    int64_t inner = 0;
    for (int c = 0; c < 4; ++c) {
      const int bits = format[3 * c];
      if (bits != 4 && bits != 8 && bits != 16) fail("bits must be 4, 8 or 16");
      const std::vector<mx::array> weights(arrays + split[c], arrays + split[c + 1]);
      const int64_t width = c == 0 || c == 2 ? Dm : c == 1 ? H * D : inner;
      const auto outs = checked_weights(width, weights, {bits, format[3 * c + 1]}, c == 2, format[3 * c + 2]);
      if (c == 0 && outs != std::vector<int64_t>{H * D, Hkv * D, Hkv * D}) {
        fail("q, k and v give heads x head_dim, kv_heads x head_dim and kv_heads x head_dim");
      }
      if ((c == 1 || c == 3) && outs[0] != Dm) fail("o and down give rows of the hidden width");
      inner = c == 2 ? outs[0] : inner;
      for (const auto& a : weights) inputs.push_back(contiguous_input(a, stream));
    }
    at += split[4];
  }
  if (at != layers.size()) fail("more arrays than the formats name");
  return mx::array::make_arrays(std::move(shapes), std::move(dtypes), std::make_shared<LayerStack>(stream, params),
                                std::move(inputs));
}

}  // namespace mlxchat
