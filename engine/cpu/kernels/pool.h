// Worker threads kept between kernel calls: a decode step makes a few hundred of them, and starting
// threads for each would cost more than some of the calls themselves.
#pragma once

#include <cstdint>
#include <functional>

namespace mlxchat {

// Runs task(i) for every i in [0, tasks) on up to `threads` threads, the caller's among them, and
// returns when all are done. Which thread runs a task never changes what it computes. A call made
// while another is running (from another MLX stream) runs its tasks on the calling thread alone.
void parallel_for(int64_t tasks, int threads, const std::function<void(int64_t)>& task);

}  // namespace mlxchat
