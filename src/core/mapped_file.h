// A read-only memory-mapped file: model weights are used in place, never copied.
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/status.h"

namespace gb {

class MappedFile {
 public:
  static Result<std::shared_ptr<MappedFile>> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Pulls the whole mapping into the page cache now (instead of page faults during the first
  // forward), reporting progress after each chunk: on_chunk(bytes_done_so_far).
  void prefetch(const std::function<void(size_t)>& on_chunk) const;

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// Opens path for reading if it is a regular file, without blocking on a FIFO (O_NONBLOCK), and
// fills *st; anything else (FIFO, directory, device, socket) is an error naming the path and what
// it is. The caller closes the descriptor. Every loader of files named by a config or an admin
// request opens through this (MappedFile::open, read_file).
Result<int> open_regular(const std::string& path, struct stat* st);

// Reads a whole (small) regular file into a string.
Result<std::string> read_file(const std::string& path);

}  // namespace gb
