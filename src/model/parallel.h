// parallel_for over the thread pool for the layer loops (internal to gb_model).
#pragma once

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

}  // namespace gb
