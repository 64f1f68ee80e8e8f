// A read-only file in memory. Files of 32 MiB and more (model weights) are read once into
// anonymous memory backed by transparent huge pages: a decode step streams every weight byte, and
// with 4 KiB page-cache pages the TLB misses cost about a quarter of the read bandwidth (26 vs
// 35.5 GB/s measured on Zen 4, 2 threads). GLASSBOX_WEIGHTS=mmap keeps them mapped from the page
// cache instead (no copy: less memory when several processes share a model). Smaller files are
// always mapped.
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/huge_pages.h"
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
  // Whether the bytes were copied into (huge-page) memory rather than mapped.
  bool in_memory() const { return in_memory_; }

  // Returns the in-memory copy's pages under [p, p + n) (whole 4 KiB pages inside it) and maps
  // the file's own bytes there instead: the same bytes at the same addresses, read from the page
  // cache on demand. For bytes only the rare reader needs once the loader holds another copy
  // (weights packed at load). A mapped file drops its resident pages of the range. False, with
  // nothing changed, when the file on disk is no longer the one read (size, mtime or inode
  // differ) or the mapping fails.
  bool release(const uint8_t* p, size_t n) const;

  // Pulls the whole mapping into the page cache now (instead of page faults during the first
  // forward), reporting progress after each chunk: on_chunk(bytes_done_so_far). A file read into
  // memory reports it is done at once.
  void prefetch(const std::function<void(size_t)>& on_chunk) const;

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::unique_ptr<HugePages> memory_;  // the copy in huge pages, or null when mapped
  bool in_memory_ = false;
  std::string path_;
  struct stat stat_ {};  // the file as read, for release's check
};

// Opens path for reading if it is a regular file, without blocking on a FIFO (O_NONBLOCK), and
// fills *st; anything else (FIFO, directory, device, socket) is an error naming the path and what
// it is. The caller closes the descriptor. Every loader of files named by a config or an admin
// request opens through this (MappedFile::open, read_file).
Result<int> open_regular(const std::string& path, struct stat* st);

// Reads a whole (small) regular file into a string.
Result<std::string> read_file(const std::string& path);

}  // namespace gb
