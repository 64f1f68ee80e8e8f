// Helpers shared by all tests: where ../shared is, and reading its files.
#pragma once

#include <string>

namespace gb::test {

// Absolute path of a file under ../shared (GLASSBOX_SHARED overrides the build-time default).
std::string shared_path(const std::string& relative);

// A fresh empty directory under the system temp dir, removed when the process exits.
std::string temp_dir();

}  // namespace gb::test
