// Answer extraction and grading for `glassbox eval`, as lm-evaluation-harness does it: GSM8K's
// strict "#### N" and flexible last number, MATH's last \boxed{} with the hendrycks/minerva
// normalisation, and plain exact match. docs/ARCHITECTURE.md ("eval") lists every rule.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace gb::eval {

enum class TaskKind { kGsm8k, kMath, kExact };  // GSM8K rows, MATH(-500) rows, generic rows (exact match)
const char* task_kind_name(TaskKind k);         // "gsm8k", "math", "exact"

// The reference answer of a dataset row: GSM8K's `answer` field ends "#### N" -> N (commas and
// '$' removed, a trailing '.' dropped); MATH's `answer` as given (trimmed); exact: as given
// (trimmed). nullopt (with *why, when why is not null) when a GSM8K answer has no "####" or no
// number after it, or when the answer is empty.
std::optional<std::string> reference_answer(TaskKind k, std::string_view answer_field, std::string* why);

struct Verdict {
  bool found = false;         // the primary extraction found an answer
  std::string extracted;      // what it found (normalised form), "" if none
  bool correct = false;       // primary: GSM8K flexible-extract, MATH last \boxed{}, exact: trimmed equality
  bool strict_found = false;  // GSM8K only: strict "#### N" (lm-eval's strict-match); MATH/exact: same as primary
  std::string strict_extracted;
  bool strict_correct = false;
};
Verdict grade(TaskKind k, std::string_view output, std::string_view reference);

// Building blocks, exposed for tests and the docs:
// The content of the last \boxed{...} (or, when there is none, the last \fbox{...}), braces
// balanced and nested ok (escaped \{ \} do not count); "\boxed 5" gives the token "5". nullopt
// when there is none or the last one is not closed (a truncated output).
std::optional<std::string> last_boxed(std::string_view text);
std::string normalize_math(std::string_view answer);  // the MATH normalisation (docs/ARCHITECTURE.md)
// The first "#### N" (lm-eval regex "#### (\-?[0-9\.\,]+)"), commas removed, a trailing '.' dropped.
std::optional<std::string> gsm8k_strict(std::string_view text);
// The last number in the text (lm-eval "(-?[$0-9.,]{2,})|(-?[0-9]+)", matches without a digit
// skipped), '$' and commas removed, a trailing '.' dropped.
std::optional<std::string> gsm8k_flexible(std::string_view text);

// Whether two normalised MATH answers are the same: equal strings, or both simple numbers
// (integers, decimals, \frac{a}{b} of those, with a sign) within 1e-9 relative.
bool math_equivalent(std::string_view a, std::string_view b);

}  // namespace gb::eval
