// A one-line progress bar on stderr for long waits (loading a large model); silent when stderr
// is not a terminal, so logs and pipes stay clean.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <string>

namespace gb {

class ProgressBar {
 public:
  ProgressBar(std::string label, size_t total) : label_(std::move(label)), total_(total), tty_(isatty(2) != 0) {}
  ~ProgressBar() { done(); }

  void update(size_t current) {
    if (!tty_ || total_ == 0) return;
    const int pct = static_cast<int>(100.0 * static_cast<double>(current) / static_cast<double>(total_));
    if (pct == last_pct_) return;
    last_pct_ = pct;
    const int width = 30, filled = pct * width / 100;
    std::fprintf(stderr, "\r%s [%s%s] %3d%% (%.0f / %.0f MB)", label_.c_str(), std::string(filled, '#').c_str(),
                 std::string(width - filled, ' ').c_str(), pct, static_cast<double>(current) / 1e6,
                 static_cast<double>(total_) / 1e6);
    std::fflush(stderr);
  }

  void done() {
    if (tty_ && last_pct_ >= 0) std::fprintf(stderr, "\n");
    last_pct_ = -1;
    tty_ = false;
  }

 private:
  std::string label_;
  size_t total_;
  bool tty_;
  int last_pct_ = -1;
};

}  // namespace gb
