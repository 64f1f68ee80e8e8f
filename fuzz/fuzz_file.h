// Fuzz input as a file: the readers take a mapped file (or a path), so each input is written to
// one memfd and reopened through /proc/self/fd — no disk, no temporary names to clean up.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "core/mapped_file.h"

namespace gb::fuzz {

class MemFile {
 public:
  MemFile() : fd_(memfd_create("gb-fuzz", MFD_CLOEXEC)) {
    if (fd_ < 0) std::abort();
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;

  // Replaces the file's contents with data[0, size) and returns its path.
  const std::string& write(const uint8_t* data, size_t size) {
    if (ftruncate(fd_, 0) != 0) std::abort();
    for (size_t done = 0; done < size;) {
      const ssize_t n = pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (n <= 0) std::abort();
      done += static_cast<size_t>(n);
    }
    return path_;
  }

  // Writes the input and maps it as the readers see a file.
  std::shared_ptr<MappedFile> map(const uint8_t* data, size_t size) {
    auto f = MappedFile::open(write(data, size));
    if (!f.is_ok()) std::abort();
    return std::move(f).value();
  }

 private:
  int fd_;
  std::string path_;
};

}  // namespace gb::fuzz
