// The serving process's heap policy (issue 11.3). glibc gives threads their own malloc arenas (up
// to 8 per core) and returns freed memory to the OS only from the top of each arena's heap, so the
// transient memory of large answers (observation captures: megabytes of JSON per request) stayed
// resident after the requests were gone, in whichever arenas their workers had used. The server
// therefore caps the arenas at start and trims the heap when it goes idle (Server::monitor_loop,
// never on the engine's thread). Figures: docs/PERFORMANCE.md, "Heap retention".
#pragma once

#include <cstdint>

namespace gb::server {

// The arena cap configure_allocator() sets.
inline constexpr int kMallocArenaMax = 2;

// Caps glibc's malloc arenas at kMallocArenaMax, unless the environment already chose
// (MALLOC_ARENA_MAX, or GLIBC_TUNABLES naming glibc.malloc.arena_max). Call before the server's
// threads start. A no-op on other C libraries.
void configure_allocator();

// Returns the heap's free pages to the OS (malloc_trim(0)); the resident bytes it released
// (0 when RSS did not shrink, or on other C libraries).
int64_t release_free_memory();

}  // namespace gb::server
