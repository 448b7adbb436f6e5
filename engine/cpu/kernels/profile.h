// The kernels' profile (`mlxchat bench --profile`): each call's wall time, by part, while profiling. Off, a call
// pays one relaxed load.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace mlxchat {

bool profiling();
void profile_add(const char* part, int64_t ns);
// Clears the counts and starts counting.
void profile_start();
// Stops counting; (part, nanoseconds, calls) for each part called since profile_start().
std::vector<std::tuple<std::string, int64_t, int64_t>> profile_read();

// Runs `work`, its wall time counted as `part` while profiling.
template <class F>
void timed(const char* part, F&& work) {
  if (!profiling()) return work();
  const auto started = std::chrono::steady_clock::now();
  work();
  profile_add(part, (std::chrono::steady_clock::now() - started).count());
}

}  // namespace mlxchat
