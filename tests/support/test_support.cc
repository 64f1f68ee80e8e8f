#include "support/test_support.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <random>
#include <thread>

namespace gb::test {

std::string shared_path(const std::string& relative) {
  const char* env = std::getenv("GLASSBOX_SHARED");
  const std::string root = env != nullptr ? env : GB_SHARED_DIR;
  return root + "/" + relative;
}

namespace {
struct TempRoot {
  std::filesystem::path path;
  TempRoot() {
    path = std::filesystem::temp_directory_path() / ("glassbox-test-" + std::to_string(getpid()));
    std::filesystem::create_directories(path);
  }
  ~TempRoot() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};
}  // namespace

std::string temp_dir() {
  static TempRoot root;
  static int counter = 0;
  auto p = root.path / std::to_string(counter++);
  std::filesystem::create_directories(p);
  return p.string();
}

bool make_fifo(const std::string& path) { return mkfifo(path.c_str(), 0600) == 0; }

bool returns_within(const std::function<void()>& fn, std::chrono::milliseconds timeout, const std::string& fifo_path) {
  std::future<void> done = std::async(std::launch::async, fn);
  if (done.wait_for(timeout) == std::future_status::ready) {
    done.get();
    return true;
  }
  // A reader blocked in open() counts as a reader: a non-blocking writer's open then succeeds.
  while (done.wait_for(std::chrono::milliseconds(10)) != std::future_status::ready) {
    const int fd = ::open(fifo_path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) ::close(fd);
  }
  done.get();
  return false;
}

std::vector<float> random_vec(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

double max_rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::fabs(double(a[i]) - b[i]) / (1.0 + std::fabs(double(b[i]))));
  return m;
}

}  // namespace gb::test
