#include "core/thread_pool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace gb {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// Spin this many rounds for the next job before sleeping; yield every kYieldEvery rounds so a
// spinning thread does not starve the one it waits for when the host is oversubscribed. On a KVM
// guest a pause is ~18 ns and sched_yield ~1.2 µs (Zen 5): yielding every 64 rounds spent half
// the wait in the syscall, blind to a new job; every 1024 rounds (~19 µs) Qwen3-0.6B decode at
// 2 threads ran +4% (q4_k_m tg64, median of 5 interleaved pairs, +0.2 … +8.4%), and no slower
// beside a busy loop on one of the two cores (pp128 +6 … +12%, tg32 −1 … +11%).
constexpr int kSpinRounds = 1 << 14;
constexpr int kYieldEvery = 1024;

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::thread::hardware_concurrency());
  if (n_threads <= 0) n_threads = 1;
  n_threads_ = n_threads;
  workers_.reserve(n_threads_ - 1);
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    published_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::participate(uint32_t gen) {
  uint64_t t = ticket_.load(std::memory_order_acquire);
  for (;;) {
    if (static_cast<uint32_t>(t >> 32) != gen) return;
    const uint32_t task = static_cast<uint32_t>(t);
    if (task >= static_cast<uint32_t>(n_threads_)) return;
    if (ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
      // The claim succeeded while gen was current, so run() cannot return (and job_ cannot
      // change) before this task reports done.
      (*job_)(static_cast<int>(task));
      done_.fetch_add(1, std::memory_order_release);
      t = ticket_.load(std::memory_order_acquire);
    }
  }
}

void ThreadPool::run(JobRef fn) {
  if (n_threads_ == 1) {
    fn(0);
    return;
  }
  job_ = &fn;
  done_.store(0, std::memory_order_relaxed);
  const uint32_t gen = ++generation_;
  ticket_.store(static_cast<uint64_t>(gen) << 32, std::memory_order_release);
  published_.store(gen, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    wake_.notify_all();
  }
  participate(gen);
  for (int spin = 0; done_.load(std::memory_order_acquire) < n_threads_; ++spin) {
    if (spin % kYieldEvery == kYieldEvery - 1) {
      std::this_thread::yield();
    } else {
      cpu_relax();
    }
  }
  job_ = nullptr;
}

void ThreadPool::worker_loop() {
  uint32_t seen = 0;
  for (;;) {
    uint32_t gen = published_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kSpinRounds; ++spin) {
      if (spin % kYieldEvery == kYieldEvery - 1) {
        std::this_thread::yield();
      } else {
        cpu_relax();
      }
      gen = published_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      wake_.wait(lock, [&] { return published_.load(std::memory_order_seq_cst) != seen; });
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
      gen = published_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load()) return;
    participate(gen);
  }
}

}  // namespace gb
