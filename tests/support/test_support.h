// Helpers shared by all tests: where ../shared is, and reading its files.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace gb::test {

// Absolute path of a file under ../shared (GLASSBOX_SHARED overrides the build-time default).
std::string shared_path(const std::string& relative);

// A fresh empty directory under the system temp dir, removed when the process exits.
std::string temp_dir();

// A FIFO (named pipe) at path; false if it cannot be made.
bool make_fifo(const std::string& path);

// Runs fn on its own thread and waits for it at most `timeout`. When it has not returned by then
// (e.g. it is blocked opening the FIFO at fifo_path for reading, which waits for a writer), the
// FIFO is opened for writing and closed, so fn sees an empty file and returns, and the answer is
// false: the test fails instead of hanging.
bool returns_within(const std::function<void()>& fn, std::chrono::milliseconds timeout, const std::string& fifo_path);

// n values drawn from N(0, scale²) with a fixed seed.
std::vector<float> random_vec(size_t n, uint32_t seed, float scale = 1.0f);

// max_i |a_i − b_i| / (1 + |b_i|): an error that is absolute near zero and relative elsewhere.
double max_rel_err(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace gb::test
