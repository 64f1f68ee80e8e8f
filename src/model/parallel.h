// parallel_for and parallel_items over the thread pool for the layer loops (internal to gb_model).
#pragma once

#include <atomic>
#include <cstdint>

#include "core/thread_pool.h"

namespace gb {

// Runs fn(begin, end, task) over [0, n) split across the pool when there is enough work to pay
// for the fork/join (a decode step is ~10 regions per layer), inline (task 0) otherwise. task <
// pool.size() indexes per-task scratch.
template <class F>
void parallel_for(ThreadPool& pool, int64_t n, int64_t work, F&& fn) {
  if (pool.size() == 1 || work < (1 << 15)) {
    fn(int64_t{0}, n, 0);
    return;
  }
  auto body = [&](int ti) {
    const Range r = split_range(n, ti, pool.size());
    if (r.begin < r.end) fn(r.begin, r.end, ti);
  };
  pool.run(body);
}

// Runs fn(item, task) for every item in [0, n), the items claimed one at a time in order from a
// shared counter: for few, large items (attention's tiles), so that a thread the host slows (a
// busy sibling core, a descheduling) takes fewer of them instead of holding the others at the
// join — a static split of AVX2 prefill attention at 4096 tokens measured one thread done at
// 494 ms and the other at 784 (docs/PERFORMANCE.md, twelfth pass). task < pool.size() indexes
// per-task scratch. Inline (task 0) when there is too little work to pay for the fork/join.
template <class F>
void parallel_items(ThreadPool& pool, int64_t n, int64_t work, F&& fn) {
  if (pool.size() == 1 || n <= 1 || work < (1 << 15)) {
    for (int64_t i = 0; i < n; ++i) fn(i, 0);
    return;
  }
  std::atomic<int64_t> next{0};
  pool.run([&](int ti) {
    for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n;) fn(i, ti);
  });
}

}  // namespace gb
