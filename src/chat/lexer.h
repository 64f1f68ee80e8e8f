// Template lexer: splits source into text and tag tokens, applying Jinja whitespace control
// ({%- -%}, {%+ +%}) with trim_blocks and lstrip_blocks on, as Hugging Face renders chat templates.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace gb::chat {

enum class TokenType : uint8_t {
  kText,        // literal template text (value)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,        // identifier (value)
  kString,      // string literal, escapes resolved (value)
  kInt,
  kFloat,
  kOp,  // operator or punctuation (value)
  kEof,
};

struct Token {
  TokenType type;
  int line;
  std::string value;
  int64_t int_value = 0;
  double float_value = 0;
};

const char* token_type_name(TokenType t);

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

Result<std::vector<Token>> tokenize(std::string_view source, const LexOptions& options = {});

}  // namespace gb::chat
