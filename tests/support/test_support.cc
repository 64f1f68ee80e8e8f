#include "support/test_support.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

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

}  // namespace gb::test
