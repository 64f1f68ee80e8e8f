// Anonymous memory backed by transparent huge pages (2 MiB) where the kernel grants them: for
// the bytes every decode step streams (model weights, their packed copies, the KV cache). With
// 4 KiB pages the TLB misses cost about a quarter of the read bandwidth (26 vs 35.5 GB/s measured
// on Zen 4, 2 threads). THP in "madvise" mode (Debian's default) needs the MADV_HUGEPAGE this
// asks for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace gb {

class HugePages {
 public:
  // size bytes (rounded up to whole huge pages), zeroed and writable; null when the memory
  // cannot be mapped.
  static std::unique_ptr<HugePages> allocate(size_t size);
  ~HugePages();
  HugePages(const HugePages&) = delete;
  HugePages& operator=(const HugePages&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // Once filled: writes from then on fault instead of corrupting weights.
  void make_read_only();

 private:
  HugePages() = default;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace gb
