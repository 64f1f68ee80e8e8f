// Counts heap allocations through a replaced global operator new, for the "nothing allocates in
// the step" tests. Replacing operator new is per program: include this header in exactly one
// source file of a test executable. Replacing the new/delete pair with malloc/free is correct;
// GCC 12's heuristic flags the pairing wherever the replaced delete is inlined into
// std::allocator, hence the pragma.
#pragma once
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <atomic>
#include <cstdlib>
#include <new>

namespace gb::test {

inline std::atomic<bool> g_count_allocs{false};
inline std::atomic<long> g_allocs{0};

// Counts the allocations made while it lives (on any thread).
class AllocCounter {
 public:
  AllocCounter() {
    g_allocs = 0;
    g_count_allocs = true;
  }
  ~AllocCounter() { g_count_allocs = false; }
  // Allocations so far; stops counting.
  long stop() {
    g_count_allocs = false;
    return g_allocs.load();
  }
};

}  // namespace gb::test

void* operator new(size_t n) {
  if (gb::test::g_count_allocs.load(std::memory_order_relaxed))
    gb::test::g_allocs.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
