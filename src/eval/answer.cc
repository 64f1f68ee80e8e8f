// Answer extraction and grading: hand-written scanners for lm-eval's two GSM8K regexes, the
// \boxed{} finder and the MATH normalisation (the rules are listed in docs/ARCHITECTURE.md).
#include "eval/answer.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>

namespace gb::eval {
namespace {

constexpr double kRelativeTolerance = 1e-9;

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool has_digit(std::string_view s) { return std::any_of(s.begin(), s.end(), is_digit); }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out.append(to);
  }
  if (pos == 0) return;
  out.append(s, pos);
  s = std::move(out);
}

// Replaces the control word `cmd` (with its backslash) where it is not the start of a longer
// one: "\left(" goes, "\leftarrow" stays.
void replace_command(std::string& s, std::string_view cmd, std::string_view to) {
  std::string out;
  size_t pos = 0;
  bool changed = false;
  for (size_t hit = s.find(cmd); hit != std::string::npos; hit = s.find(cmd, hit + 1)) {
    size_t end = hit + cmd.size();
    if (end < s.size() && is_alpha(s[end])) continue;
    out.append(s, pos, hit - pos);
    out.append(to);
    pos = end;
    changed = true;
  }
  if (!changed) return;
  out.append(s, pos);
  s = std::move(out);
}

// The index of the '}' closing the '{' at `open`, or npos; escaped braces (\{ \}) do not count.
size_t matching_brace(std::string_view s, size_t open) {
  int depth = 0;
  for (size_t i = open; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;  // skip the escaped character (\{, \}, \\)
      continue;
    }
    if (s[i] == '{') ++depth;
    if (s[i] == '}' && --depth == 0) return i;
  }
  return std::string_view::npos;
}

// The last occurrence of the control word `cmd` in `text` (not followed by a letter), or npos.
size_t rfind_command(std::string_view text, std::string_view cmd) {
  for (size_t from = std::string_view::npos;;) {
    size_t hit = text.rfind(cmd, from);
    if (hit == std::string_view::npos) return hit;
    size_t end = hit + cmd.size();
    if (end >= text.size() || !is_alpha(text[end])) return hit;
    if (hit == 0) return std::string_view::npos;
    from = hit - 1;
  }
}

// A plain decimal: -?D+(.D+)? or -?.D+ (a trailing '.' is accepted: "5." is 5).
std::optional<double> parse_decimal(std::string_view s) {
  if (s.empty()) return std::nullopt;
  size_t i = s[0] == '-' ? 1 : 0;
  size_t digits = 0, dots = 0;
  for (size_t j = i; j < s.size(); ++j) {
    if (is_digit(s[j])) {
      ++digits;
    } else if (s[j] == '.') {
      if (++dots > 1) return std::nullopt;
    } else {
      return std::nullopt;
    }
  }
  if (digits == 0) return std::nullopt;
  double value = 0;
  std::string body(s.substr(i));
  if (body.front() == '.') body.insert(body.begin(), '0');
  if (body.back() == '.') body.pop_back();
  auto [ptr, ec] = std::from_chars(body.data(), body.data() + body.size(), value);
  if (ec != std::errc() || ptr != body.data() + body.size() || !std::isfinite(value)) return std::nullopt;
  return i == 1 ? -value : value;
}

// A normalised MATH number: a decimal, or [-]\frac{D}{D} of decimals (the numerator may carry
// its own sign). Anything else (symbols, tuples, roots) is not a number.
std::optional<double> parse_math_number(std::string_view s) {
  double sign = 1;
  if (!s.empty() && s[0] == '-' && s.substr(1, 5) == "\\frac") {
    sign = -1;
    s.remove_prefix(1);
  }
  if (s.substr(0, 6) != "\\frac{") return parse_decimal(s);
  size_t num_close = matching_brace(s, 5);
  if (num_close == std::string_view::npos || num_close + 1 >= s.size() || s[num_close + 1] != '{') return std::nullopt;
  size_t den_close = matching_brace(s, num_close + 1);
  if (den_close != s.size() - 1) return std::nullopt;
  auto num = parse_decimal(s.substr(6, num_close - 6));
  auto den = parse_decimal(s.substr(num_close + 2, den_close - num_close - 2));
  if (!num || !den || *den == 0) return std::nullopt;
  return sign * *num / *den;
}

bool numbers_equal(double a, double b) {
  return a == b || std::fabs(a - b) <= kRelativeTolerance * std::max(std::fabs(a), std::fabs(b));
}

// lm-eval's gsm8k exact_match ignores "," and "$" and a trailing "." (regexes_to_ignore).
std::string clean_gsm8k(std::string_view s) {
  std::string out;
  for (char c : trim(s)) {
    if (c != ',' && c != '$') out.push_back(c);
  }
  if (!out.empty() && out.back() == '.') out.pop_back();
  return out;
}

bool gsm8k_equal(std::string_view a, std::string_view b) {
  if (a == b) return true;
  auto x = parse_decimal(a), y = parse_decimal(b);
  return x && y && numbers_equal(*x, *y);
}

bool in_flexible_set(char c) { return is_digit(c) || c == '$' || c == '.' || c == ','; }
bool in_strict_set(char c) { return is_digit(c) || c == '.' || c == ','; }

// --- the MATH normalisation, step by step (the order matters; see docs/ARCHITECTURE.md) ---

// \text{X}, \textbf{X}, ... -> X, innermost first by repetition.
void unwrap_text_commands(std::string& s) {
  static constexpr std::array<std::string_view, 6> kWrappers = {"\\text{",   "\\textbf{", "\\textrm{",
                                                                "\\textit{", "\\mathrm{", "\\mbox{"};
  for (bool changed = true; changed;) {
    changed = false;
    for (std::string_view w : kWrappers) {
      size_t hit = s.find(w);
      if (hit == std::string::npos) continue;
      size_t open = hit + w.size() - 1;
      size_t close = matching_brace(s, open);
      if (close == std::string::npos) continue;
      s = s.substr(0, hit) + s.substr(open + 1, close - open - 1) + s.substr(close + 1);
      changed = true;
    }
  }
}

// Minerva's "\text{and}" -> "," (with any spaces inside the braces).
void replace_text_and(std::string& s) {
  std::string out;
  size_t pos = 0;
  for (size_t hit = s.find("\\text{"); hit != std::string::npos; hit = s.find("\\text{", hit + 1)) {
    size_t close = matching_brace(s, hit + 5);
    if (close == std::string::npos) break;
    if (trim(std::string_view(s).substr(hit + 6, close - hit - 6)) != "and") continue;
    out.append(s, pos, hit - pos);
    out.push_back(',');
    pos = close + 1;
  }
  if (pos == 0) return;
  out.append(s, pos);
  s = std::move(out);
}

// Minerva's removed unit words (Lewkowycz et al. 2022, appendix D) and their singulars, removed
// only as trailing words after the answer (minerva deletes them anywhere, which mangles "\left").
constexpr std::string_view kUnitWords[] = {"square",   "ways",     "way",
                                           "integers", "integer",  "dollars",
                                           "dollar",   "mph",      "inches",
                                           "inch",     "ft",       "hours",
                                           "hour",     "km",       "units",
                                           "unit",     "sue",      "points",
                                           "point",    "feet",     "foot",
                                           "minutes",  "minute",   "digits",
                                           "digit",    "cents",    "cent",
                                           "degrees",  "degree",   "cm",
                                           "gm",       "pounds",   "pound",
                                           "meters",   "meter",    "meals",
                                           "edges",    "students", "childrentickets",
                                           "multiples"};

// The length of a unit word (optionally squared or cubed) ending `s` at a word boundary, or 0.
size_t trailing_unit_length(std::string_view s) {
  size_t power = 0;
  for (std::string_view p : {"^{2}", "^{3}", "^2", "^3"}) {
    if (ends_with(s, p)) {
      power = p.size();
      break;
    }
  }
  for (size_t attempt = 0; attempt < 2; ++attempt) {
    size_t extra = attempt == 0 ? power : 0;
    if (attempt == 1 && power == 0) break;
    std::string_view body = s.substr(0, s.size() - extra);
    for (std::string_view w : kUnitWords) {
      if (body.size() <= w.size() || !ends_with(body, w)) continue;
      char before = body[body.size() - w.size() - 1];
      if (is_alpha(before)) continue;  // part of a longer word
      if (before == '\\') continue;    // a control word such as \cm
      return w.size() + extra;
    }
  }
  return 0;
}

void strip_trailing_units(std::string& s) {
  for (;;) {
    std::string_view t = trim(s);
    if (!t.empty() && t.back() == '.') t.remove_suffix(1);
    size_t n = trailing_unit_length(t);
    if (n == 0 || n >= t.size()) return;
    std::string_view rest = trim(t.substr(0, t.size() - n));
    if (rest.empty()) return;
    s = std::string(rest);
  }
}

// "x = 5" -> "5": exactly one '=', the left side a variable name (a letter and at most one more
// letter or digit, or a control word such as \theta).
void drop_leading_variable(std::string& s) {
  size_t eq = s.find('=');
  if (eq == std::string::npos || s.find('=', eq + 1) != std::string::npos) return;
  std::string_view lhs = trim(std::string_view(s).substr(0, eq));
  std::string_view rhs = trim(std::string_view(s).substr(eq + 1));
  if (lhs.empty() || rhs.empty()) return;
  bool name = false;
  if (lhs.size() <= 2 && is_alpha(lhs[0]) && (lhs.size() == 1 || is_alpha(lhs[1]) || is_digit(lhs[1]))) name = true;
  if (lhs.size() >= 2 && lhs[0] == '\\' && std::all_of(lhs.begin() + 1, lhs.end(), is_alpha)) name = true;
  if (name) s = std::string(rhs);
}

// One argument of \frac or \sqrt at `pos` in braces: "{...}" kept, a control word "\pi" or one
// character wrapped. Returns the end position, or npos when there is none.
size_t brace_argument(std::string_view s, size_t pos, std::string* out) {
  if (pos >= s.size()) return std::string_view::npos;
  if (s[pos] == '{') {
    size_t close = matching_brace(s, pos);
    if (close == std::string_view::npos) return close;
    out->append(s.substr(pos, close - pos + 1));
    return close + 1;
  }
  if (s[pos] == '}' || s[pos] == '[') return std::string_view::npos;
  size_t end = pos + 1;
  if (s[pos] == '\\') {
    while (end < s.size() && is_alpha(s[end])) ++end;
    if (end == pos + 1) return std::string_view::npos;
  }
  out->push_back('{');
  out->append(s.substr(pos, end - pos));
  out->push_back('}');
  return end;
}

// \frac12 -> \frac{1}{2}, \frac1{72} -> \frac{1}{72}, \frac\pi2 -> \frac{\pi}{2}, \sqrt3 -> \sqrt{3};
// rewritten in place and scanned on inside the arguments, so nested shorthand is fixed too.
void brace_shorthand(std::string& s, std::string_view cmd, int n_args) {
  size_t from = 0;
  for (size_t hit; (hit = s.find(cmd, from)) != std::string::npos;) {
    size_t end = hit + cmd.size();
    from = hit + 1;
    if (end < s.size() && is_alpha(s[end])) continue;
    std::string args;
    size_t p = end;
    for (int a = 0; a < n_args && p != std::string::npos; ++a) p = brace_argument(s, p, &args);
    if (p == std::string::npos) continue;  // incomplete or \sqrt[n]: leave as written
    s.replace(end, p - end, args);
    from = end;
  }
}

// "1,000" / "-12,345.5" -> commas removed, only when the whole answer is one grouped number
// (so the list "1,2" is left alone).
void remove_thousands_commas(std::string& s) {
  std::string_view t = s;
  if (!t.empty() && t[0] == '-') t.remove_prefix(1);
  size_t i = 0;
  while (i < t.size() && is_digit(t[i])) ++i;
  if (i < 1 || i > 3 || i >= t.size() || t[i] != ',') return;
  while (i < t.size() && t[i] == ',') {
    if (i + 4 > t.size() || !is_digit(t[i + 1]) || !is_digit(t[i + 2]) || !is_digit(t[i + 3])) return;
    i += 4;
  }
  if (i < t.size()) {
    if (t[i] != '.' || i + 1 >= t.size()) return;
    for (size_t j = i + 1; j < t.size(); ++j) {
      if (!is_digit(t[j])) return;
    }
  }
  s.erase(std::remove(s.begin(), s.end(), ','), s.end());
}

// ".5" -> "0.5" where the '.' starts a number (at the start, or after a non-digit such as '-', '{', '(', ',').
void insert_leading_zeros(std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '.' && i + 1 < s.size() && is_digit(s[i + 1]) && (i == 0 || (!is_digit(s[i - 1]) && s[i - 1] != '.'))) {
      out.push_back('0');
    }
    out.push_back(s[i]);
  }
  s = std::move(out);
}

// In every decimal number: trailing zeros after the point go, and the point with them when
// nothing is left ("72.0" -> "72", "2.50" -> "2.5"). A run like "1.2.3" is not a number; left alone.
void strip_trailing_zeros(std::string& s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    if (!is_digit(s[i]) || (i > 0 && s[i - 1] == '.')) {
      out.push_back(s[i++]);
      continue;
    }
    size_t j = i;
    while (j < s.size() && is_digit(s[j])) ++j;
    if (j + 1 < s.size() && s[j] == '.' && is_digit(s[j + 1])) {
      size_t k = j + 1;
      while (k < s.size() && is_digit(s[k])) ++k;
      if (k < s.size() && s[k] == '.') {  // "1.2.3": copy as written
        out.append(s, i, k - i);
        i = k;
        continue;
      }
      size_t last = k;
      while (last > j + 1 && s[last - 1] == '0') --last;
      out.append(s, i, j - i);
      if (last > j + 1) out.append(s, j, last - j);
      i = k;
      continue;
    }
    out.append(s, i, j - i);
    i = j;
  }
  s = std::move(out);
}

}  // namespace

const char* task_kind_name(TaskKind k) {
  switch (k) {
    case TaskKind::kGsm8k: return "gsm8k";
    case TaskKind::kMath: return "math";
    case TaskKind::kExact: return "exact";
  }
  return "exact";
}

std::optional<std::string> reference_answer(TaskKind k, std::string_view answer_field, std::string* why) {
  auto fail = [&](std::string message) -> std::optional<std::string> {
    if (why) *why = std::move(message);
    return std::nullopt;
  };
  if (k == TaskKind::kGsm8k) {
    size_t hash = answer_field.rfind("####");
    if (hash == std::string_view::npos) {
      return fail("a GSM8K answer must end with \"#### N\" (the final number); this one has no \"####\"");
    }
    std::string n = clean_gsm8k(answer_field.substr(hash + 4));
    if (n.empty()) return fail("a GSM8K answer must end with \"#### N\"; nothing follows its \"####\"");
    return n;
  }
  std::string_view t = trim(answer_field);
  if (t.empty()) return fail("the reference answer is empty");
  return std::string(t);
}

std::optional<std::string> last_boxed(std::string_view text) {
  size_t hit = rfind_command(text, "\\boxed");
  size_t len = 6;
  if (hit == std::string_view::npos) {
    hit = rfind_command(text, "\\fbox");
    len = 5;
  }
  if (hit == std::string_view::npos) return std::nullopt;
  size_t pos = hit + len;
  while (pos < text.size() && is_space(text[pos])) ++pos;
  if (pos >= text.size()) return std::nullopt;
  if (text[pos] == '{') {
    size_t close = matching_brace(text, pos);
    if (close == std::string_view::npos) return std::nullopt;
    return std::string(text.substr(pos + 1, close - pos - 1));
  }
  // "\boxed 5": one token, up to whitespace or a closing '$'.
  size_t end = pos;
  while (end < text.size() && !is_space(text[end]) && text[end] != '$') ++end;
  if (end == pos) return std::nullopt;
  return std::string(text.substr(pos, end - pos));
}

std::string normalize_math(std::string_view answer) {
  std::string s(answer);
  for (char& c : s) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  replace_all(s, "\\\\", "\\");
  // Spacing commands.
  for (std::string_view cmd : {"\\!", "\\,", "\\;", "\\:", "\\ "}) replace_all(s, cmd, " ");
  replace_command(s, "\\quad", " ");
  replace_command(s, "\\qquad", " ");
  replace_command(s, "\\displaystyle", "");
  replace_command(s, "\\left", "");
  replace_command(s, "\\right", "");
  replace_command(s, "\\dfrac", "\\frac");
  replace_command(s, "\\tfrac", "\\frac");
  // Degrees, percent, dollars; then the math delimiters.
  for (std::string_view d : {"^{\\circ}", "^\\circ", "\xC2\xB0", "\\%", "%", "\\$"}) replace_all(s, d, "");
  replace_all(s, "$", "");
  // Minerva's "\text{and}" -> ","; then units written as text on the right ("5\text{ cm}":
  // hendrycks' remove_right_units).
  replace_text_and(s);
  if (size_t hit = s.find("\\text{ "); hit != std::string::npos && !trim(std::string_view(s).substr(0, hit)).empty()) {
    s.resize(hit);
  }
  unwrap_text_commands(s);
  drop_leading_variable(s);
  strip_trailing_units(s);
  s.erase(std::remove_if(s.begin(), s.end(), is_space), s.end());
  replace_all(s, "{,}", ",");
  replace_all(s, ",,", ",");  // "1, \text{and} 2"
  if (s.size() > 1 && s.back() == '.') s.pop_back();
  brace_shorthand(s, "\\frac", 2);
  brace_shorthand(s, "\\sqrt", 1);
  // "(C)" -> "C": a multiple-choice letter in parentheses.
  if (s.size() == 3 && s[0] == '(' && is_alpha(s[1]) && s[2] == ')') s = std::string(1, s[1]);
  // a/b of integers -> \frac{a}{b} (the whole answer only).
  if (size_t slash = s.find('/'); slash != std::string::npos && s.find('/', slash + 1) == std::string::npos) {
    std::string_view num = std::string_view(s).substr(0, slash), den = std::string_view(s).substr(slash + 1);
    bool negative = !num.empty() && num[0] == '-';
    if (negative) num.remove_prefix(1);
    if (!num.empty() && !den.empty() && std::all_of(num.begin(), num.end(), is_digit) &&
        std::all_of(den.begin(), den.end(), is_digit)) {
      s = std::string(negative ? "-" : "") + "\\frac{" + std::string(num) + "}{" + std::string(den) + "}";
    }
  }
  remove_thousands_commas(s);
  insert_leading_zeros(s);
  strip_trailing_zeros(s);
  return s;
}

bool math_equivalent(std::string_view a, std::string_view b) {
  if (a == b) return true;
  auto x = parse_math_number(a), y = parse_math_number(b);
  return x && y && numbers_equal(*x, *y);
}

std::optional<std::string> gsm8k_strict(std::string_view text) {
  for (size_t hit = text.find("#### "); hit != std::string_view::npos; hit = text.find("#### ", hit + 1)) {
    size_t start = hit + 5, end = start;
    if (end < text.size() && text[end] == '-' && end + 1 < text.size() && in_strict_set(text[end + 1])) ++end;
    while (end < text.size() && in_strict_set(text[end])) ++end;
    std::string_view match = text.substr(start, end - start);
    if (!has_digit(match)) continue;
    return clean_gsm8k(match);
  }
  return std::nullopt;
}

std::optional<std::string> gsm8k_flexible(std::string_view text) {
  std::string_view last;
  size_t i = 0;
  while (i < text.size()) {
    // Alternative 1: -?[$0-9.,]{2,} (greedy); alternative 2: -?[0-9]+.
    size_t j = i + (text[i] == '-' ? 1 : 0);
    size_t run = j;
    while (run < text.size() && in_flexible_set(text[run])) ++run;
    size_t end = 0;
    if (run - j >= 2) {
      end = run;
    } else if (j < text.size() && is_digit(text[j])) {
      end = j + 1;  // the run is one character here, so alternative 2 matches one digit
    }
    if (end == 0) {
      ++i;
      continue;
    }
    std::string_view match = text.substr(i, end - i);
    if (has_digit(match)) last = match;
    i = end;
  }
  if (last.empty()) return std::nullopt;
  return clean_gsm8k(last);
}

Verdict grade(TaskKind k, std::string_view output, std::string_view reference) {
  Verdict v;
  switch (k) {
    case TaskKind::kGsm8k: {
      std::string ref = clean_gsm8k(reference);
      if (auto flexible = gsm8k_flexible(output)) {
        v.found = true;
        v.extracted = *flexible;
        v.correct = !ref.empty() && gsm8k_equal(v.extracted, ref);
      }
      if (auto strict = gsm8k_strict(output)) {
        v.strict_found = true;
        v.strict_extracted = *strict;
        v.strict_correct = !ref.empty() && gsm8k_equal(v.strict_extracted, ref);
      }
      return v;
    }
    case TaskKind::kMath: {
      if (auto boxed = last_boxed(output)) {
        std::string answer = normalize_math(*boxed);
        if (!answer.empty()) {
          std::string ref = normalize_math(reference);
          v.found = true;
          v.extracted = std::move(answer);
          v.correct = !ref.empty() && math_equivalent(v.extracted, ref);
        }
      }
      break;
    }
    case TaskKind::kExact: {
      std::string_view answer = trim(output);
      if (!answer.empty()) {
        v.found = true;
        v.extracted = std::string(answer);
        v.correct = answer == trim(reference);
      }
      break;
    }
  }
  v.strict_found = v.found;
  v.strict_extracted = v.extracted;
  v.strict_correct = v.correct;
  return v;
}

}  // namespace gb::eval
