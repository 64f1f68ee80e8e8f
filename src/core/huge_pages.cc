#include "core/huge_pages.h"

#include <sys/mman.h>

namespace gb {

namespace {
constexpr size_t kHugePage = size_t{2} << 20;
}  // namespace

std::unique_ptr<HugePages> HugePages::allocate(size_t size) {
  const size_t cap = (size + kHugePage - 1) / kHugePage * kHugePage;
  if (cap == 0) return nullptr;
  void* p = mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  madvise(p, cap, MADV_HUGEPAGE);  // best effort: without THP the memory still works
  std::unique_ptr<HugePages> h(new HugePages());
  h->data_ = static_cast<uint8_t*>(p);
  h->size_ = cap;
  return h;
}

HugePages::~HugePages() {
  if (data_ != nullptr) munmap(data_, size_);
}

void HugePages::make_read_only() { mprotect(data_, size_, PROT_READ); }

}  // namespace gb
