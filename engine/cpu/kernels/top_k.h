// The k largest logits of each row and where they are (top_k.cpp): what sampling with top_k needs, without
// MLX's argpartition of the whole vocabulary (0.56 ms a row of 49,152 on a CPU).
#pragma once

#include <vector>

#include "primitive.h"

namespace mlxchat {

// For x (B, V) float32 and 0 < k <= V: values (B, k) float32 and indices (B, k) uint32 of each row's k largest,
// largest first; of equal values the lower index comes first. NaNs are never picked while k others remain.
std::vector<mx::array> top_k(const mx::array& x, int k, int threads);

struct TopKParams {
  static constexpr const char* name = "TopK";
  int k;
  int threads;
  bool operator==(const TopKParams&) const = default;
};

using TopK = CpuPrimitive<TopKParams>;

}  // namespace mlxchat
