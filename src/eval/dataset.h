// Evaluation datasets (JSONL, one problem per line), as `glassbox eval --data FILE` reads them:
//   GSM8K     {"question": ..., "answer": "... #### 72"}    graded by the number after ####
//   MATH(-500) {"problem": ..., "answer": "\\frac{1}{2}"}    graded by the last \boxed{...}
//   generic   {"prompt": "..."} or {"messages": [...]}, optional "expected" (exact match after
//             trimming whitespace; without it the row is not graded, only measured)
// Every row may carry "id" (a string or integer); otherwise its 1-based line number names it.
// GSM8K and MATH questions go through --prompt-template (its {question} replaced) and the chat
// template; a generic "prompt" is sent as it is to /v1/completions, "messages" to /v1/chat/completions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "eval/answer.h"

namespace gb::eval {

// What math rows are asked with by default (Qwen's and DeepSeek's recommended math prompt).
inline constexpr std::string_view kDefaultMathTemplate =
    "{question}\nPlease reason step by step, and put your final answer within \\boxed{}.";

struct Problem {
  std::string id;
  TaskKind kind = TaskKind::kExact;
  bool chat = false;                     // messages (chat endpoint) or prompt (completions)
  nlohmann::json messages;               // chat: the messages to send
  std::string prompt;                    // completions: the prompt text
  std::optional<std::string> reference;  // the answer it is graded against; nullopt: not graded
};

// Reads the whole file; every malformed line is an error naming the file, its line and what is
// wrong (nothing is skipped silently). Ids must be unique. prompt_template must contain
// "{question}" (empty: kDefaultMathTemplate).
Result<std::vector<Problem>> load_dataset(const std::string& path, const std::string& prompt_template = "");

// One row (a parsed JSON line), for tests: line is 1-based.
Result<Problem> parse_row(const nlohmann::json& row, size_t line, std::string_view prompt_template);

}  // namespace gb::eval
