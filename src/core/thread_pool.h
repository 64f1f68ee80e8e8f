// A fixed pool of worker threads for data-parallel kernels. run(fn) executes the tasks
// fn(0) .. fn(size() - 1), each exactly once, on whichever threads claim them first; the
// calling thread claims tasks too. On a shared host a descheduled worker therefore delays a
// step by at most the task it already holds, never by a task it has not started: tasks it did
// not claim are run by the others. Workers spin briefly between jobs (a decode step issues
// hundreds of small parallel regions) and then sleep, so an idle server costs nothing.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace gb {

// A non-owning reference to a callable `void(int)`. ThreadPool::run is synchronous, so the
// callable outlives the call; unlike std::function, wrapping a lambda with many captures never
// allocates (a decode step issues hundreds of parallel regions and must not touch the heap).
class JobRef {
 public:
  template <class F>
  requires(!std::is_same_v<std::decay_t<F>, JobRef> && std::is_invocable_v<F&, int>)
      JobRef(F&& f)  // NOLINT: implicit by design, pool.run([&](int i) { ... })
      : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* obj, int i) { (*static_cast<std::remove_reference_t<F>*>(obj))(i); }) {}
  void operator()(int i) const { call_(obj_, i); }

 private:
  void* obj_;
  void (*call_)(void*, int);
};

class ThreadPool {
 public:
  // n_threads <= 0 picks the number of online CPUs.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(i) for every task index i in [0, size()) and returns when all have finished. Task i
  // is a share of the work (see split_range), not a thread identity: two tasks may run one after
  // the other on the same thread, never two at once on different threads with the same i.
  // Not re-entrant.
  void run(JobRef fn);

 private:
  void worker_loop();
  // Claims and runs tasks of generation gen until none is left.
  void participate(uint32_t gen);

  int n_threads_;
  std::vector<std::thread> workers_;
  const JobRef* job_ = nullptr;
  uint32_t generation_ = 0;             // of the job being run (caller thread only)
  std::atomic<uint64_t> ticket_{0};     // (generation << 32) | next task index to claim
  std::atomic<int> done_{0};            // tasks of the current generation finished
  std::atomic<uint32_t> published_{0};  // generation workers should join
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
};

// The half-open range [begin, end) of n items that share `index` of `n_shares` owns, with
// boundaries rounded to multiples of `align` (except the last).
struct Range {
  int64_t begin, end;
};
inline Range split_range(int64_t n, int index, int n_shares, int64_t align = 1) {
  const int64_t n_blocks = (n + align - 1) / align;
  const int64_t b0 = n_blocks * index / n_shares;
  const int64_t b1 = n_blocks * (index + 1) / n_shares;
  Range r{b0 * align, b1 * align};
  if (r.end > n) r.end = n;
  if (r.begin > n) r.begin = n;
  return r;
}

}  // namespace gb
