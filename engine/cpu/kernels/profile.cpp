// The kernels' profile (`mlxchat bench --profile`): wall time and calls by part, counted while asked for.
#include "profile.h"

#include <atomic>
#include <map>
#include <mutex>

namespace mlxchat {

namespace {

std::atomic<bool> on{false};
std::mutex guard;
std::map<std::string, std::pair<int64_t, int64_t>> parts;  // part -> (ns, calls)

}  // namespace

bool profiling() { return on.load(std::memory_order_relaxed); }

void profile_add(const char* part, int64_t ns) {
  std::lock_guard<std::mutex> lock(guard);
  auto& [total, calls] = parts[part];
  total += ns;
  calls += 1;
}

void profile_start() {
  std::lock_guard<std::mutex> lock(guard);
  parts.clear();
  on = true;
}

std::vector<std::tuple<std::string, int64_t, int64_t>> profile_read() {
  std::lock_guard<std::mutex> lock(guard);
  on = false;
  std::vector<std::tuple<std::string, int64_t, int64_t>> out;
  for (const auto& [part, counted] : parts) out.emplace_back(part, counted.first, counted.second);
  return out;
}

}  // namespace mlxchat
