// A decode pass's decoder layers, every one of them, as one primitive (layer_stack.cpp): the same work, in the
// same order, as the graph of each layer's operations (the q, k and v matmul with its RoPE, the K/V writes,
// attention, the o matmul, the residual add and norm, the gate and up matmul with its SwiGLU, the down matmul, the
// residual add and the next norm), so the same bits, without some three hundred MLX operations a step to queue.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "matmul.h"

namespace mlxchat {

// A model's stack of layers as the kernel multiplies by it (layer_stack_weights): first_norm the first layer's norm
// weight; each layer's arrays, in `arrays` from layer_at[layer] on: its norm weight after attention, the norm weight
// after its MLP (the next layer's first norm or the model's final), its RoPE's inverse frequencies, then the weights
// of its q, k and v, o, gate and up, and down products as weights_matmul takes them; `formats` holds (bits, group
// size) of its four calls. Checked once and held by every pass's primitive, not its inputs: an MLX operation's every
// output holds all its inputs, and seven hundred arrays in each of 61 outputs cost a step more than its attention.
// The arrays must be evaluated and row-contiguous (a model's loaded weights), and are not changed after.
// (enable_shared_from_this: nanobind then hands a pass the C++ owner itself, not a new owner whose last release, on
// MLX's stream thread once the pass ran, would take Python's GIL.)
struct StackWeights : std::enable_shared_from_this<StackWeights> {
  StackWeights(int hidden, int heads, int kv_heads, int head_dim, float eps, float attention_scale, bool traditional,
               float rope_scale, mx::array first_norm, std::vector<int> formats)
      : hidden(hidden), heads(heads), kv_heads(kv_heads), head_dim(head_dim), eps(eps),
        attention_scale(attention_scale), traditional(traditional), rope_scale(rope_scale),
        first_norm(std::move(first_norm)), formats(std::move(formats)) {}
  int hidden, heads, kv_heads, head_dim;
  float eps, attention_scale;
  bool traditional;
  float rope_scale;
  mx::array first_norm;
  std::vector<mx::array> arrays;
  std::vector<int> formats;      // (bits, group size) for each layer's q/k/v, o, gate/up and down calls
  std::vector<size_t> layer_at;  // where each layer's arrays start, and (last) their count
};

std::shared_ptr<StackWeights> layer_stack_weights(const mx::array& first_norm, const std::vector<mx::array>& arrays,
                                                  int heads, int kv_heads, int head_dim, float eps,
                                                  float attention_scale, bool traditional, float rope_scale,
                                                  const std::vector<int>& formats);

// {the final norm's output (M, hidden), then each layer's K and V} for a pass of M rows of one token each: h
// (M, hidden) float32 (the embedded tokens), row m of slot slots[m] at position starts[m] (int32); `kv` each layer's
// K and V buffers in turn (slots, kv_heads, capacity, head_dim; float32, float16 or bfloat16), `int8` how each call
// multiplies its rows (weights_matmul's int8; four a layer). The K and V buffers are written in place at each row's
// position: the slots' buffers are the caller's alone (no other array may share their memory), and the caller holds
// the outputs as them from then on (evaluating them runs the pass).
struct StackParams {
  static constexpr const char* name = "LayerStack";
  std::shared_ptr<const StackWeights> weights;  // (compared as the same object)
  int threads;
  std::vector<int> int8;
  bool operator==(const StackParams&) const = default;
};

std::vector<mx::array> layer_stack(const mx::array& h, const mx::array& slots, const mx::array& starts,
                                   const std::shared_ptr<StackWeights>& weights, const std::vector<mx::array>& kv,
                                   const std::vector<int>& int8, int threads);

using LayerStack = CpuPrimitive<StackParams>;

}  // namespace mlxchat
