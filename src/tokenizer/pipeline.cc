// Normalizers, pre-tokenizers, decoders and added-token matching, following the semantics of
// Hugging Face tokenizers (normalizer.rs split behaviours, decoders' decode_chain).
#include "tokenizer/pipeline.h"

#include <algorithm>
#include <cstring>

#include "tokenizer/unicode.h"

namespace gb::tok {

namespace {

constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

const Regex& gpt2_regex() {
  static const std::shared_ptr<const Regex> re = Regex::compile(std::string(kGpt2Pattern)).value();
  return *re;
}

std::string replace_all(std::string_view text, const Pattern& p, std::string_view content) {
  thread_local std::vector<Regex::Match> m;
  m.clear();
  p.find_all(text, &m);
  if (m.empty()) return std::string(text);
  std::string out;
  size_t last = 0;
  for (const auto& x : m) {
    out.append(text.substr(last, x.begin - last));
    out.append(content);
    last = x.end;
  }
  out.append(text.substr(last));
  return out;
}

// Pieces of text as (span, is_match) covering all of it, then merged per behaviour (HF
// NormalizedString::split).
void split_spans(std::string_view text, const std::vector<Regex::Match>& matches, SplitBehavior behavior, bool invert,
                 std::vector<std::string_view>* out) {
  struct Span {
    size_t b, e;
    bool m;
  };
  thread_local std::vector<Span> spans;
  spans.clear();
  size_t last = 0;
  for (const auto& x : matches) {
    if (x.begin > last) spans.push_back({last, x.begin, invert});
    spans.push_back({x.begin, x.end, !invert});
    last = x.end;
  }
  if (last < text.size()) spans.push_back({last, text.size(), invert});
  auto emit = [&](size_t b, size_t e) {
    if (e > b) out->push_back(text.substr(b, e - b));
  };
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Span& s : spans) emit(s.b, s.e);
      break;
    case SplitBehavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.m) emit(s.b, s.e);
      }
      break;
    case SplitBehavior::kContiguous:
    case SplitBehavior::kMergedWithPrevious: {
      thread_local std::vector<Span> acc;
      acc.clear();
      bool prev = false;
      for (const Span& s : spans) {
        const bool merge = behavior == SplitBehavior::kContiguous ? (s.m == prev) : (s.m && !prev);
        if (merge && !acc.empty()) acc.back().e = s.e;
        else acc.push_back(s);
        prev = s.m;
      }
      for (const Span& s : acc) emit(s.b, s.e);
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      thread_local std::vector<Span> acc;
      acc.clear();
      bool prev = false;
      for (size_t k = spans.size(); k-- > 0;) {
        const Span& s = spans[k];
        if (s.m && !prev && !acc.empty()) acc.back().b = s.b;
        else acc.push_back(s);
        prev = s.m;
      }
      for (size_t k = acc.size(); k-- > 0;) emit(acc[k].b, acc[k].e);
      break;
    }
  }
}

// Start of the code point that ends at `end` (searching no further back than lo).
size_t prev_code_point_start(std::string_view s, size_t lo, size_t end) {
  size_t k = end - 1;
  while (k > lo && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
  return k;
}

// [b, e) without its leading / trailing whitespace: the new b / the new e.
size_t skip_leading_whitespace(std::string_view s, size_t b, size_t e) {
  while (b < e) {
    size_t i = b;
    if (!is_whitespace(next_code_point(s, &i))) break;
    b = i;
  }
  return b;
}
size_t skip_trailing_whitespace(std::string_view s, size_t b, size_t e) {
  while (e > b) {
    const size_t k = prev_code_point_start(s, b, e);
    size_t i = k;
    if (!is_whitespace(next_code_point(s, &i))) break;
    e = k;
  }
  return e;
}

}  // namespace

void Pattern::find_all(std::string_view text, std::vector<Regex::Match>* out) const {
  if (regex) {
    regex->find_all(text, out);
    return;
  }
  if (literal.empty()) return;
  size_t pos = 0;
  while ((pos = text.find(literal, pos)) != std::string_view::npos) {
    out->push_back({pos, pos + literal.size()});
    pos += literal.size();
  }
}

std::string Normalizer::apply(std::string_view text) const {
  std::string s(text);
  for (const NormalizerStep& st : steps) {
    switch (st.kind) {
      case NormalizerStep::Kind::kNfc: s = normalize(s, NormForm::kNfc); break;
      case NormalizerStep::Kind::kNfd: s = normalize(s, NormForm::kNfd); break;
      case NormalizerStep::Kind::kNfkc: s = normalize(s, NormForm::kNfkc); break;
      case NormalizerStep::Kind::kNfkd: s = normalize(s, NormForm::kNfkd); break;
      case NormalizerStep::Kind::kLowercase: s = to_lower(s); break;
      case NormalizerStep::Kind::kPrepend:
        if (!s.empty()) s = st.content + s;
        break;
      case NormalizerStep::Kind::kReplace: s = replace_all(s, st.pattern, st.content); break;
      case NormalizerStep::Kind::kStrip: {
        size_t b = 0, e = s.size();
        if (st.strip_left) b = skip_leading_whitespace(s, b, e);
        if (st.strip_right) e = skip_trailing_whitespace(s, b, e);
        s = s.substr(b, e - b);
        break;
      }
    }
  }
  return s;
}

void PreTokenizer::apply(std::string_view text, bool at_text_start, std::vector<std::string_view>* words,
                         std::deque<std::string>* storage) const {
  words->clear();
  if (text.empty()) return;
  words->push_back(text);
  thread_local std::vector<std::string_view> next;
  thread_local std::vector<Regex::Match> matches;
  for (const PreTokenizerStep& st : steps) {
    next.clear();
    for (size_t wi = 0; wi < words->size(); ++wi) {
      std::string_view w = (*words)[wi];
      matches.clear();
      switch (st.kind) {
        case PreTokenizerStep::Kind::kSplit:
          st.pattern.find_all(w, &matches);
          split_spans(w, matches, st.behavior, st.invert, &next);
          break;
        case PreTokenizerStep::Kind::kByteLevel:
          // The byte -> unicode mapping itself is implicit: the model works on raw bytes.
          if (st.add_prefix_space && w[0] != ' ') {
            std::string& s = storage->emplace_back(1, ' ');
            s.append(w.data(), w.size());
            w = s;
          }
          if (st.use_regex) {
            gpt2_regex().find_all(w, &matches);
            split_spans(w, matches, SplitBehavior::kIsolated, false, &next);
          } else {
            next.push_back(w);
          }
          break;
        case PreTokenizerStep::Kind::kMetaspace: {
          std::string s;
          const bool first = at_text_start && wi == 0;
          const bool starts = w.substr(0, st.replacement.size()) == st.replacement;
          if (!starts && (st.prepend == PreTokenizerStep::Prepend::kAlways ||
                          (st.prepend == PreTokenizerStep::Prepend::kFirst && first))) {
            // Checked before replacing spaces, as HF does after its replace: a leading space
            // becomes the replacement and so counts as already prepended.
            if (w[0] != ' ') s = st.replacement;
          }
          for (char c : w) {
            if (c == ' ') s += st.replacement;
            else s.push_back(c);
          }
          storage->push_back(std::move(s));
          const std::string& owned = storage->back();
          if (st.split) {
            Pattern p;
            p.literal = st.replacement;
            p.find_all(owned, &matches);
            split_spans(owned, matches, SplitBehavior::kMergedWithNext, false, &next);
          } else if (!owned.empty()) {
            next.push_back(owned);
          }
          break;
        }
        case PreTokenizerStep::Kind::kDigits: {
          size_t i = 0;
          while (i < w.size()) {
            const size_t b = i;
            const bool digit = is_number(next_code_point(w, &i));
            if (digit) matches.push_back({b, i});
          }
          split_spans(w, matches, st.individual_digits ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, false,
                      &next);
          break;
        }
        case PreTokenizerStep::Kind::kWhitespaceSplit: {
          size_t i = 0;
          while (i < w.size()) {
            const size_t b = i;
            if (is_whitespace(next_code_point(w, &i))) matches.push_back({b, i});
          }
          split_spans(w, matches, SplitBehavior::kRemoved, false, &next);
          break;
        }
      }
    }
    words->swap(next);
  }
}

namespace {

// ByteLevel: every token's characters back to the bytes they stand for, as one valid UTF-8 string.
void decode_byte_level(std::vector<std::string>* tokens) {
  std::string bytes, tmp;
  for (const std::string& t : *tokens) {
    if (byte_level_decode(t, &tmp)) bytes += tmp;
    else bytes += t;
  }
  tokens->assign(1, to_valid_utf8(bytes));
}

// The byte a "<0xAB>" token stands for, or -1.
int byte_token_value(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi >= 0 && lo >= 0 ? hi * 16 + lo : -1;
}

// ByteFallback: runs of byte tokens become their UTF-8 text, or one U+FFFD per byte when the
// run is not valid UTF-8.
void decode_byte_fallback(std::vector<std::string>* tokens) {
  std::vector<std::string> out;
  std::string pending;
  size_t pending_n = 0;
  auto flush = [&] {
    if (pending_n == 0) return;
    if (is_valid_utf8(pending)) {
      out.push_back(pending);
    } else {
      std::string r;
      for (size_t k = 0; k < pending_n; ++k) r += "\xEF\xBF\xBD";
      out.push_back(r);
    }
    pending.clear();
    pending_n = 0;
  };
  for (std::string& t : *tokens) {
    const int byte = byte_token_value(t);
    if (byte >= 0) {
      pending.push_back(static_cast<char>(byte));
      ++pending_n;
    } else {
      flush();
      out.push_back(std::move(t));
    }
  }
  flush();
  tokens->swap(out);
}

// Strip: up to `start` / `stop` copies of one character from each token's ends.
void strip_each(const DecoderStep& st, std::vector<std::string>* tokens) {
  for (std::string& t : *tokens) {
    size_t b = 0, e = t.size();
    const std::string& c = st.content;
    for (size_t k = 0; k < st.start && !c.empty() && t.compare(b, c.size(), c) == 0 && b + c.size() <= e; ++k) {
      b += c.size();
    }
    for (size_t k = 0; k < st.stop && !c.empty() && e >= b + c.size() && t.compare(e - c.size(), c.size(), c) == 0;
         ++k) {
      e -= c.size();
    }
    t = t.substr(b, e - b);
  }
}

// Metaspace: the replacement character back to a space (dropped at the very start when prepended).
void decode_metaspace(const DecoderStep& st, std::vector<std::string>* tokens) {
  for (size_t i = 0; i < tokens->size(); ++i) {
    std::string r;
    std::string_view t = (*tokens)[i];
    size_t pos = 0;
    while (pos < t.size()) {
      if (!st.content.empty() && t.compare(pos, st.content.size(), st.content) == 0) {
        if (!(i == 0 && st.prepend)) r.push_back(' ');
        pos += st.content.size();
      } else {
        r.push_back(t[pos++]);
      }
    }
    (*tokens)[i] = std::move(r);
  }
}

}  // namespace

std::string Decoder::apply(std::vector<std::string> tokens) const {
  if (!present) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) out.push_back(' ');
      out += tokens[i];
    }
    return out;
  }
  for (const DecoderStep& st : steps) {
    switch (st.kind) {
      case DecoderStep::Kind::kByteLevel: decode_byte_level(&tokens); break;
      case DecoderStep::Kind::kByteFallback: decode_byte_fallback(&tokens); break;
      case DecoderStep::Kind::kFuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case DecoderStep::Kind::kStrip: strip_each(st, &tokens); break;
      case DecoderStep::Kind::kReplace:
        for (std::string& t : tokens) t = replace_all(t, st.pattern, st.content);
        break;
      case DecoderStep::Kind::kMetaspace: decode_metaspace(st, &tokens); break;
    }
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

void AddedMatcher::add(AddedTokenRef token) {
  if (!token.content.empty()) tokens_.push_back(std::move(token));
}

void AddedMatcher::finish() {
  std::stable_sort(tokens_.begin(), tokens_.end(), [](const AddedTokenRef& a, const AddedTokenRef& b) {
    const auto fa = static_cast<unsigned char>(a.content[0]), fb = static_cast<unsigned char>(b.content[0]);
    if (fa != fb) return fa < fb;
    return a.content.size() > b.content.size();
  });
  size_t k = 0;
  for (int c = 0; c <= 256; ++c) {
    while (k < tokens_.size() && static_cast<unsigned char>(tokens_[k].content[0]) < c) ++k;
    first_[c] = static_cast<uint32_t>(k);
  }
}

namespace {
bool is_word_char(uint32_t cp) { return cp == '_' || is_letter(cp) || is_number(cp); }
}  // namespace

void AddedMatcher::find_all(std::string_view text, std::vector<Hit>* out) const {
  out->clear();
  if (tokens_.empty()) return;
  size_t start_offset = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const auto c = static_cast<unsigned char>(text[pos]);
    const AddedTokenRef* found = nullptr;
    for (uint32_t k = first_[c]; k < first_[c + 1]; ++k) {
      const AddedTokenRef& t = tokens_[k];
      if (text.size() - pos >= t.content.size() &&
          std::memcmp(text.data() + pos, t.content.data(), t.content.size()) == 0) {
        found = &t;
        break;
      }
    }
    if (found == nullptr) {
      ++pos;
      continue;
    }
    size_t b = pos, e = pos + found->content.size();
    pos = e;
    if (found->single_word) {
      bool start_ok = true, stop_ok = true;
      if (b > 0) {
        size_t i = prev_code_point_start(text, 0, b);
        start_ok = !is_word_char(next_code_point(text, &i));
      }
      if (e < text.size()) {
        size_t i = e;
        stop_ok = !is_word_char(next_code_point(text, &i));
      }
      if (!start_ok || !stop_ok) continue;
    }
    if (found->lstrip) b = skip_trailing_whitespace(text, start_offset, b);
    if (found->rstrip) {
      e = skip_leading_whitespace(text, e, text.size());
      pos = e;
    }
    out->push_back({b, e, found->id});
    start_offset = e;
  }
}

}  // namespace gb::tok
