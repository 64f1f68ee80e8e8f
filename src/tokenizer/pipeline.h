// The stages around the BPE model, as Hugging Face tokenizers defines them: added-token
// matching, normalizers, pre-tokenizers and decoders. Each is plain data (a list of steps)
// built once by a loader and applied by const functions, so encoding is thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace gb::tok {

// A literal string or a regex (HF `pattern: {"String": ...}` / `{"Regex": ...}`).
struct Pattern {
  std::string literal;
  std::shared_ptr<const Regex> regex;  // set for regex patterns
  // Spans of the matches in text, left to right, non-overlapping, none empty.
  void find_all(std::string_view text, std::vector<Regex::Match>* out) const;
};

struct NormalizerStep {
  enum class Kind { kNfc, kNfd, kNfkc, kNfkd, kLowercase, kStrip, kPrepend, kReplace };
  Kind kind;
  bool strip_left = false, strip_right = false;  // kStrip
  std::string content;                           // kPrepend text, kReplace replacement
  Pattern pattern;                               // kReplace
};

struct Normalizer {
  std::vector<NormalizerStep> steps;
  bool empty() const { return steps.empty(); }
  std::string apply(std::string_view text) const;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreTokenizerStep {
  enum class Kind { kSplit, kByteLevel, kMetaspace, kDigits, kWhitespaceSplit };
  Kind kind;
  Pattern pattern;                                                            // kSplit
  SplitBehavior behavior = SplitBehavior::kIsolated;                          // kSplit
  bool invert = false;                                                        // kSplit
  bool add_prefix_space = false;                                              // kByteLevel
  bool use_regex = true;                                                      // kByteLevel
  std::string replacement;                                                    // kMetaspace, usually "▁"
  enum class Prepend { kAlways, kFirst, kNever } prepend = Prepend::kAlways;  // kMetaspace
  bool split = true;                                                          // kMetaspace
  bool individual_digits = false;                                             // kDigits
};

struct PreTokenizer {
  std::vector<PreTokenizerStep> steps;
  // Words of text (views into text or into storage). at_text_start: this segment begins the
  // whole input (Metaspace prepend_scheme "first").
  void apply(std::string_view text, bool at_text_start, std::vector<std::string_view>* words,
             std::deque<std::string>* storage) const;
};

struct DecoderStep {
  enum class Kind { kByteLevel, kByteFallback, kFuse, kStrip, kReplace, kMetaspace };
  Kind kind;
  std::string content;         // kStrip: the char to strip; kReplace: replacement; kMetaspace: replacement char
  size_t start = 0, stop = 0;  // kStrip
  Pattern pattern;             // kReplace
  bool prepend = true;         // kMetaspace: prepend_scheme != never
};

struct Decoder {
  bool present = false;  // without a decoder tokens are joined with spaces (HF behaviour)
  std::vector<DecoderStep> steps;
  std::string apply(std::vector<std::string> tokens) const;
};

struct AddedTokenRef {
  std::string content;
  int32_t id;
  bool lstrip, rstrip, single_word;
};

// Leftmost-longest matcher for added tokens (what HF does with aho-corasick).
class AddedMatcher {
 public:
  void add(AddedTokenRef token);
  void finish();  // call after the last add
  bool empty() const { return tokens_.empty(); }
  struct Hit {
    size_t begin, end;  // span including stripped whitespace
    int32_t id;
  };
  void find_all(std::string_view text, std::vector<Hit>* out) const;

 private:
  std::vector<AddedTokenRef> tokens_;  // sorted by first byte, then longest first
  uint32_t first_[257] = {};           // tokens_ range per first byte
};

}  // namespace gb::tok
