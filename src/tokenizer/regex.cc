// PCRE2 wrapper: JIT-compiled, one match-data block and JIT stack per thread.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

namespace gb::tok {

namespace {
// Per-thread scratch: pcre2 match data and a JIT stack large enough for \s+(?!\S) on long
// whitespace runs.
struct ThreadScratch {
  pcre2_match_data* md = nullptr;
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* ctx = nullptr;
  ThreadScratch() {
    md = pcre2_match_data_create(4, nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
    ctx = pcre2_match_context_create(nullptr);
    pcre2_jit_stack_assign(ctx, nullptr, stack);
  }
  ~ThreadScratch() {
    pcre2_match_context_free(ctx);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(md);
  }
};
ThreadScratch& scratch() {
  thread_local ThreadScratch s;
  return s;
}
}  // namespace

Result<std::shared_ptr<const Regex>> Regex::compile(const std::string& pattern) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof(buf));
    return Status::error("invalid regex '" + pattern + "' at offset " + std::to_string(offset) + ": " +
                         reinterpret_cast<const char*>(buf));
  }
  std::shared_ptr<Regex> re(new Regex());
  re->pattern_ = pattern;
  re->code_ = code;
  re->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return std::shared_ptr<const Regex>(std::move(re));
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::find_all(std::string_view text, std::vector<Match>* out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  ThreadScratch& s = scratch();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    const int rc = jit_ ? pcre2_jit_match(code, subject, text.size(), start, 0, s.md, s.ctx)
                        : pcre2_match(code, subject, text.size(), start, 0, s.md, s.ctx);
    if (rc < 0) break;  // no match, or a resource limit: the rest stays one unmatched gap
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.md);
    const size_t b = ov[0], e = ov[1];
    if (e > b) {
      out->push_back({b, e});
      start = e;
    } else {
      // Empty match: step one character forward.
      if (b >= text.size()) break;
      start = b + 1;
      while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) ++start;
    }
  }
}

}  // namespace gb::tok
