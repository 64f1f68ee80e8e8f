// A fixed pool of worker threads for data-parallel kernels. The calling thread takes part, so
// a pool of n threads starts n-1 workers. Workers spin briefly between jobs (a decode step
// issues hundreds of small parallel regions) and then sleep, so an idle server costs nothing.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace gb {

class ThreadPool {
 public:
  // n_threads <= 0 picks the number of online CPUs.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(thread_index) once on each of the size() threads and waits for all of them.
  // fn must split its work by thread_index itself (see split_range). Not re-entrant.
  void run(const std::function<void(int)>& fn);

 private:
  void worker_loop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
};

// The half-open range [begin, end) of n items that thread `index` of `n_threads` owns, with
// boundaries rounded to multiples of `align` (except the last).
struct Range {
  int64_t begin, end;
};
inline Range split_range(int64_t n, int index, int n_threads, int64_t align = 1) {
  const int64_t n_blocks = (n + align - 1) / align;
  const int64_t b0 = n_blocks * index / n_threads;
  const int64_t b1 = n_blocks * (index + 1) / n_threads;
  Range r{b0 * align, b1 * align};
  if (r.end > n) r.end = n;
  if (r.begin > n) r.begin = n;
  return r;
}

}  // namespace gb
