#include "server/allocator.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace gb::server {

namespace {

int64_t resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  long pages = 0, resident = 0;
  if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  std::fclose(f);
  return static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE);
}

}  // namespace

void configure_allocator() {
#if defined(__GLIBC__)
  if (std::getenv("MALLOC_ARENA_MAX") != nullptr) return;
  if (const char* t = std::getenv("GLIBC_TUNABLES");
      t != nullptr && std::strstr(t, "glibc.malloc.arena_max") != nullptr)
    return;
  mallopt(M_ARENA_MAX, kMallocArenaMax);
#endif
}

int64_t release_free_memory() {
#if defined(__GLIBC__)
  const int64_t before = resident_bytes();
  malloc_trim(0);
  const int64_t after = resident_bytes();
  return before > after ? before - after : 0;
#else
  return 0;
#endif
}

}  // namespace gb::server
