// A decode pass's new keys and values written into the slots' K/V buffers, in place, in their stored type
// (kv_write.cpp): one operation for K and one for V where MLX's slice, cast, reshapes and scatter took five each.
#pragma once

#include <bit>
#include <cstdint>
#include <vector>

#include "primitive.h"

namespace mlxchat {

// buffer: (slots, heads, capacity, dim) K or V, float32, float16 or bfloat16; rows: (B, heads, 1, dim) float32;
// at: (B, heads) int32, the flat (slot, head, position) row each new row goes to. Returns the buffer with those
// rows replaced, rounded to nearest as MLX's astype rounds (in the input buffer's memory where nothing else holds
// it). A row outside the buffer is not written.
mx::array kv_write(const mx::array& buffer, const mx::array& rows, const mx::array& at);

// The layer stack's write (layer_stack.cpp): rows (B, heads, dim) float32 into an evaluated buffer's own memory at
// (slots[b], head, positions[b]), as kv_write rounds them; rows outside the buffer are not written. Unlike kv_write,
// it writes there even where another array shares that memory: the slots' buffers are the store's alone (what it
// keeps of a slot, engine.kv.regions.save, is a copy).
void write_heads_in_place(const mx::array& buffer, const float* rows, const int32_t* slots, const int32_t* positions,
                          int64_t B);

struct KVWriteParams {
  static constexpr const char* name = "KVWrite";
  bool operator==(const KVWriteParams&) const = default;
};

using KVWrite = CpuPrimitive<KVWriteParams>;


}  // namespace mlxchat
