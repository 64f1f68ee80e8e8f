#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace gb {

namespace {

const char* file_kind(mode_t m) {
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

// Files at least this large are copied into huge pages (model weights); smaller ones (tokenizers,
// adapters, test fixtures) stay mapped.
constexpr size_t kInMemoryMinBytes = size_t{32} << 20;

// GLASSBOX_WEIGHTS=mmap keeps large files mapped from the page cache, as small ones are.
bool large_files_in_memory() {
  static const bool in_memory = [] {
    const char* v = std::getenv("GLASSBOX_WEIGHTS");
    return v == nullptr || std::strcmp(v, "mmap") != 0;
  }();
  return in_memory;
}

// The file's bytes in huge-page memory, read-only once filled; null when the memory cannot be
// had (the caller maps the file instead), or on a read error (*error says what).
std::unique_ptr<HugePages> read_into_huge_pages(int fd, size_t size, std::string* error) {
  std::unique_ptr<HugePages> mem = HugePages::allocate(size);
  if (mem == nullptr) return nullptr;
  uint8_t* out = mem->data();
  for (size_t off = 0; off < size;) {
    const ssize_t got = pread(fd, out + off, std::min(size - off, size_t{64} << 20), static_cast<off_t>(off));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      *error = got == 0 ? std::string("the file ended early") : std::string(std::strerror(errno));
      return nullptr;
    }
    off += static_cast<size_t>(got);
  }
  mem->make_read_only();
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);  // the copy is what is used: free the page cache
  return mem;
}

}  // namespace

Result<int> open_regular(const std::string& path, struct stat* st) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever. It does not
  // change how a regular file reads.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return Status::error("cannot open " + path + ": " + std::strerror(errno));
  if (fstat(fd, st) != 0) {
    const int err = errno;
    ::close(fd);
    return Status::error("cannot stat " + path + ": " + std::strerror(err));
  }
  if (!S_ISREG(st->st_mode)) {
    const char* kind = file_kind(st->st_mode);
    ::close(fd);
    return Status::error(path + " is not a regular file (it is " + std::string(kind) + "); give the path of a file");
  }
  return fd;
}

Result<std::shared_ptr<MappedFile>> MappedFile::open(const std::string& path) {
  struct stat st {};
  GB_ASSIGN_OR_RETURN(int fd, open_regular(path, &st));
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->stat_ = st;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ >= kInMemoryMinBytes && large_files_in_memory()) {
    std::string error;
    f->memory_ = read_into_huge_pages(fd, f->size_, &error);
    if (!error.empty()) {
      ::close(fd);
      return Status::error("cannot read " + path + ": " + error);
    }
    f->in_memory_ = f->memory_ != nullptr;
    if (f->in_memory_) f->data_ = f->memory_->data();
  }
  if (f->size_ > 0 && f->data_ == nullptr) {
    void* p = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return Status::error("cannot mmap " + path + ": " + std::strerror(err));
    }
    f->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return f;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr && memory_ == nullptr) munmap(const_cast<uint8_t*>(data_), size_);
}

bool MappedFile::release(const uint8_t* p, size_t n) const {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (p < data_ || p + n > data_ + size_) return false;
  const size_t begin = (static_cast<size_t>(p - data_) + page - 1) / page * page;
  const size_t end = (static_cast<size_t>(p - data_) + n) / page * page;
  if (end <= begin) return true;
  uint8_t* at = const_cast<uint8_t*>(data_) + begin;
  const size_t len = end - begin;
  if (!in_memory_) return madvise(at, len, MADV_DONTNEED) == 0;
  struct stat now {};
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool same = fstat(fd, &now) == 0 && now.st_ino == stat_.st_ino && now.st_dev == stat_.st_dev &&
                    now.st_size == stat_.st_size && now.st_mtim.tv_sec == stat_.st_mtim.tv_sec &&
                    now.st_mtim.tv_nsec == stat_.st_mtim.tv_nsec;
  // Mapped elsewhere first, then moved over the copy in one step: a failure leaves the copy.
  void* m = same ? mmap(nullptr, len, PROT_READ, MAP_PRIVATE, fd, static_cast<off_t>(begin)) : MAP_FAILED;
  ::close(fd);
  if (m == MAP_FAILED) return false;
  if (mremap(m, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, at) == MAP_FAILED) {
    munmap(m, len);
    return false;
  }
  return true;
}

void MappedFile::prefetch(const std::function<void(size_t)>& on_chunk) const {
  if (in_memory_) {  // read in full by open()
    if (on_chunk) on_chunk(size_);
    return;
  }
  constexpr size_t kChunk = size_t{32} << 20;
  const long page = sysconf(_SC_PAGESIZE);
  volatile uint8_t sink = 0;
  for (size_t off = 0; off < size_; off += kChunk) {
    const size_t len = std::min(kChunk, size_ - off);
    madvise(const_cast<uint8_t*>(data_) + off - off % page, len + off % page, MADV_WILLNEED);
    uint8_t acc = 0;
    for (size_t p = off; p < off + len; p += static_cast<size_t>(page)) acc ^= data_[p];
    sink = sink ^ acc;
    if (on_chunk) on_chunk(off + len);
  }
}

Result<std::string> read_file(const std::string& path) {
  struct stat st {};
  GB_ASSIGN_OR_RETURN(int fd, open_regular(path, &st));
  std::string out;
  out.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return Status::error("cannot read " + path + ": " + std::strerror(err));
    }
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

}  // namespace gb
