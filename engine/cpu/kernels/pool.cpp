// The kernels' worker threads: started on first use, they wait briefly spinning (the next call of
// a decode step usually comes within microseconds), then sleep. On Linux a worker runs each call at its
// caller's nice value: the workers start from whichever thread calls first (the self-test, a model's load,
// at the UI's priority), and must then give way to the UI as the engine's own threads do.

#include "pool.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sys/resource.h>
#endif

namespace mlxchat {

namespace {

constexpr int MAX_HELPERS = 63;
#ifndef MLXCHAT_SPIN_US
#define MLXCHAT_SPIN_US 2000
#endif
constexpr auto SPIN = std::chrono::microseconds(MLXCHAT_SPIN_US);  // how long an idle worker watches for the next call

#if defined(__linux__)
// A thread's nice value, read once per calling thread: the engine sets its own before its first MLX call,
// and MLX's stream threads, the kernels' callers, start from it.
int caller_nice() {
  thread_local const int nice = [] {
    errno = 0;
    const int value = getpriority(PRIO_PROCESS, 0);  // (0: the calling thread, on Linux)
    return errno ? 0 : value;
  }();
  return nice;
}

// Moves the calling worker to `nice`; a value it may not take (below its own, unprivileged) it keeps trying
// no further: it stays lower, as the threads of a lower caller do.
void follow(int nice) {
  thread_local int current = caller_nice();  // (a worker reads its own at its first call)
  if (nice != current) {
    setpriority(PRIO_PROCESS, 0, nice);
    current = nice;
  }
}
#else
int caller_nice() { return 0; }
void follow(int) {}
#endif

inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// The tasks are cut into one contiguous span per thread, each walked in order from its start: a thread then
// reads the weights of neighbouring tasks one after another, which the hardware prefetcher follows (tasks
// handed out in turn made each thread skip every other block: 3.6 GB/s read from memory, not 10). A thread
// done with its span takes what is left of the others'.
struct Job {
  struct Span {
    alignas(64) std::atomic<int64_t> next{0};
    int64_t end = 0;
  };

  const std::function<void(int64_t)>* task;
  int64_t tasks;
  int helpers;  // workers with a lower index join this job
  int nice = caller_nice();  // the caller's priority, which the workers take for it
  std::unique_ptr<Span[]> spans;
  std::atomic<int64_t> done{0};

  Job(const std::function<void(int64_t)>* task, int64_t tasks, int helpers)
      : task(task), tasks(tasks), helpers(helpers), spans(new Span[helpers + 1]) {
    for (int i = 0; i <= helpers; ++i) {
      spans[i].next.store(tasks * i / (helpers + 1), std::memory_order_relaxed);
      spans[i].end = tasks * (i + 1) / (helpers + 1);
    }
  }

  // The work of thread `own` (0: the caller; worker i: i + 1): its span, then the others'.
  void work(int own) {
    for (int k = 0; k <= helpers; ++k) {
      Span& span = spans[(own + k) % (helpers + 1)];
      for (int64_t i; (i = span.next.fetch_add(1, std::memory_order_relaxed)) < span.end;) {
        (*task)(i);
        done.fetch_add(1, std::memory_order_release);
      }
    }
  }
};

class Pool {
 public:
  void run(int64_t tasks, int threads, const std::function<void(int64_t)>& task) {
    const int helpers = static_cast<int>(std::min<int64_t>({threads, tasks, MAX_HELPERS + 1})) - 1;
    std::unique_lock busy(running_, std::try_to_lock);
    if (helpers <= 0 || !busy.owns_lock()) {
      for (int64_t i = 0; i < tasks; ++i) task(i);
      return;
    }
    while (static_cast<int>(workers_.size()) < helpers) {
      const int index = static_cast<int>(workers_.size());
      workers_.emplace_back([this, index] { loop(index); });
    }
    auto job = std::make_shared<Job>(&task, tasks, helpers);
    {
      std::lock_guard lock(mutex_);
      job_ = job;
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    job->work(0);
    // A task a worker took is finished before `task` goes out of scope; one that found none left never calls it.
    while (job->done.load(std::memory_order_acquire) < tasks) relax();
    std::lock_guard lock(mutex_);
    job_.reset();
  }

 private:
  void loop(int index) {
    uint64_t seen = generation_.load(std::memory_order_acquire);
    for (;;) {
      const auto until = std::chrono::steady_clock::now() + SPIN;
      // Yielding, not pausing: a thread with work (an MLX stream) takes the core at once.
      while (generation_.load(std::memory_order_acquire) == seen && std::chrono::steady_clock::now() < until) {
        std::this_thread::yield();
      }
      std::shared_ptr<Job> job;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
        seen = generation_.load(std::memory_order_acquire);
        job = job_;
      }
      if (job && index < job->helpers) {
        follow(job->nice);
        job->work(index + 1);
      }
    }
  }

  std::mutex running_;  // one job at a time
  std::mutex mutex_;    // guards job_
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::shared_ptr<Job> job_;
  std::vector<std::thread> workers_;
};

}  // namespace

void parallel_for(int64_t tasks, int threads, const std::function<void(int64_t)>& task) {
  // Never destroyed: its workers end with the process, with nothing to join at exit.
  static Pool* pool = new Pool;
  pool->run(tasks, threads, task);
}

}  // namespace mlxchat
