// Each row's k largest values (top_k.h): one pass over the row against the k-th largest so far, eight
// values to a comparison, a small heap taking the few that beat it. Rows are independent.

#include "top_k.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <utility>

#include "pool.h"
#include "vectors.h"

namespace mlxchat {

namespace {

// (value, index): `a` ranks above `b` (larger, or as large and earlier). NaN ranks below everything.
inline bool above(const std::pair<float, uint32_t>& a, const std::pair<float, uint32_t>& b) {
  if (std::isnan(a.first) || std::isnan(b.first)) return !std::isnan(a.first) && std::isnan(b.first);
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

void top_row(const float* x, int64_t V, int k, float* values, uint32_t* indices) {
  // A heap with the lowest-ranked kept value on top: what a newcomer must beat.
  std::vector<std::pair<float, uint32_t>> heap;
  heap.reserve(k);
  for (int i = 0; i < k; ++i) heap.emplace_back(x[i], static_cast<uint32_t>(i));
  std::make_heap(heap.begin(), heap.end(), above);
  float bar = heap.front().first;
  const auto offer = [&](int64_t i) {
    // Later indices lose ties, so only a strictly larger value (or any value over a NaN) gets in.
    if (!(x[i] > bar) && !(std::isnan(bar) && !std::isnan(x[i]))) return;
    std::pop_heap(heap.begin(), heap.end(), above);
    heap.back() = {x[i], static_cast<uint32_t>(i)};
    std::push_heap(heap.begin(), heap.end(), above);
    bar = heap.front().first;
  };
  int64_t i = k;
  for (; i < V && (i % 8 != 0); ++i) offer(i);
  for (; i + 8 <= V; i += 8) {
    const v8 lanes = load8(x + i);
    bool any = std::isnan(bar);
    for (int l = 0; l < 8; ++l) any |= lanes[l] > bar;
    if (any) {
      for (int l = 0; l < 8; ++l) offer(i + l);
    }
  }
  for (; i < V; ++i) offer(i);
  std::sort_heap(heap.begin(), heap.end(), above);  // highest-ranked first
  for (int j = 0; j < k; ++j) {
    values[j] = heap[j].first;
    indices[j] = heap[j].second;
  }
}

}  // namespace

template <>
void TopK::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  const auto& x = inputs[0];
  auto& encoder = begin(inputs, outputs);
  dispatch(encoder, "top-k (sampler)", [x, values = outputs[0].data<float>(), indices = outputs[1].data<uint32_t>(), k = params_.k,
                    threads = params_.threads]() {
    std::vector<float> copy;
    const float* rows = row_major(x, copy);
    const int64_t B = x.shape(0), V = x.shape(1);
    parallel_for(B, threads, [&](int64_t b) { top_row(rows + b * V, V, k, values + b * k, indices + b * k); });
  });
}

std::vector<mx::array> top_k(const mx::array& x, int k, int threads) {
  if (x.dtype() != mx::float32 || x.ndim() != 2) throw std::invalid_argument("top_k: x must be (B, V) float32");
  if (k <= 0 || k > x.shape(1)) throw std::invalid_argument("top_k: k must be in 1..V");
  const int B = x.shape(0);
  return mx::array::make_arrays({{B, k}, {B, k}}, {mx::float32, mx::uint32},
                                std::make_shared<TopK>(mx::default_stream(mx::Device::cpu), TopKParams{k, threads}),
                                {x});
}

}  // namespace mlxchat
