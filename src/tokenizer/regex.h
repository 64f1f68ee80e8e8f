// A compiled PCRE2 (JIT) regex for Split pre-tokenizers and Replace normalizers/decoders.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace gb::tok {

class Regex {
 public:
  // Unicode-aware (\s, \p{L}, (?i:...) follow Unicode, like Oniguruma in HF tokenizers).
  static Result<std::shared_ptr<const Regex>> compile(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  struct Match {
    size_t begin, end;
  };
  // All non-overlapping matches, left to right (empty matches skipped). Thread-safe.
  void find_all(std::string_view text, std::vector<Match>* out) const;
  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

}  // namespace gb::tok
