// Template lexer. Whitespace control follows jinja2/lexer.py: "-" strips all whitespace on that
// side, trim_blocks drops the newline after a block or comment tag, lstrip_blocks drops spaces and
// tabs between the start of a line and a block or comment tag ("+" opts out of either).
#include "chat/lexer.h"

#include <cstring>

namespace gb::chat {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = 0xFFFD;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class Lexer {
 public:
  Lexer(std::string_view src, const LexOptions& options) : src_(src), options_(options) {}

  Result<std::vector<Token>> run() {
    if (!options_.keep_trailing_newline && !src_.empty() && src_.back() == '\n') {
      src_.remove_suffix(1);
      if (!src_.empty() && src_.back() == '\r') src_.remove_suffix(1);
    }
    size_t pos = 0;
    bool strip_next = false;  // the previous tag ended with "-"
    while (pos <= src_.size()) {
      const size_t tag = find_tag(pos);
      size_t text_begin = pos;
      size_t text_end = tag == std::string_view::npos ? src_.size() : tag;
      if (strip_next) {
        while (text_begin < text_end && is_space(src_[text_begin])) ++text_begin;
        strip_next = false;
      }
      if (tag == std::string_view::npos) {
        emit_text(text_begin, text_end);
        break;
      }
      const char kind = src_[tag + 1];
      const char modifier = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (modifier == '-') {
        while (text_end > text_begin && is_space(src_[text_end - 1])) --text_end;
      } else if (modifier != '+' && options_.lstrip_blocks && kind != '{') {
        size_t line_start = text_end;
        while (line_start > text_begin && (src_[line_start - 1] == ' ' || src_[line_start - 1] == '\t')) --line_start;
        const bool at_line_start = line_start == 0 || src_[line_start - 1] == '\n';
        if (at_line_start) text_end = line_start;
      }
      emit_text(text_begin, text_end);
      size_t p = tag + 2;
      if (modifier == '-' || modifier == '+') ++p;
      const int tag_line = line_at(tag);
      if (kind == '#') {
        const size_t close = src_.find("#}", p);
        if (close == std::string_view::npos) return error(tag_line, "unclosed comment '{#'");
        pos = close + 2;
        const bool minus = close > p && src_[close - 1] == '-';
        const bool plus = close > p && src_[close - 1] == '+';
        if (minus) strip_next = true;
        else if (!plus) pos = skip_trim_newline(pos);
        continue;
      }
      const bool is_var = kind == '{';
      const size_t before = tokens_.size();
      tokens_.push_back(Token{is_var ? TokenType::kVarBegin : TokenType::kBlockBegin, tag_line, {}});
      bool end_minus = false;
      bool end_plus = false;
      GB_ASSIGN_OR_RETURN(pos, lex_tag(p, is_var, tag_line, end_minus, end_plus));
      if (end_minus) strip_next = true;
      else if (!is_var && !end_plus) pos = skip_trim_newline(pos);
      // {% raw %}: everything up to {% endraw %} is text.
      if (!is_var && tokens_.size() == before + 3 && tokens_[before + 1].type == TokenType::kName &&
          tokens_[before + 1].value == "raw") {
        tokens_.resize(before);
        GB_ASSIGN_OR_RETURN(pos, lex_raw(pos, tag_line, strip_next));
      }
    }
    tokens_.push_back(Token{TokenType::kEof, line_at(src_.size()), {}});
    return std::move(tokens_);
  }

 private:
  Status error(int line, const std::string& what) {
    return Status::error("chat template syntax error at line " + std::to_string(line) + ": " + what);
  }

  // Position of the next "{{", "{%" or "{#" at or after pos, or npos.
  size_t find_tag(size_t pos) const {
    while (true) {
      const size_t b = src_.find('{', pos);
      if (b == std::string_view::npos || b + 1 >= src_.size()) return std::string_view::npos;
      const char c = src_[b + 1];
      if (c == '{' || c == '%' || c == '#') return b;
      pos = b + 1;
    }
  }

  int line_at(size_t pos) {
    // Lines are asked for in increasing order, so count incrementally.
    if (pos < line_pos_) {
      line_pos_ = 0;
      line_ = 1;
    }
    for (; line_pos_ < pos && line_pos_ < src_.size(); ++line_pos_) {
      if (src_[line_pos_] == '\n') ++line_;
    }
    return line_;
  }

  size_t skip_trim_newline(size_t pos) const {
    if (!options_.trim_blocks) return pos;
    if (pos < src_.size() && src_[pos] == '\n') return pos + 1;
    if (pos + 1 < src_.size() && src_[pos] == '\r' && src_[pos + 1] == '\n') return pos + 2;
    return pos;
  }

  // Jinja normalizes "\r\n" and "\r" to "\n" in template text and string literals.
  static std::string normalize_newlines(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] != '\r') {
        out += s[i];
        continue;
      }
      out += '\n';
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    }
    return out;
  }

  void emit_text(size_t begin, size_t end) {
    if (end <= begin) return;
    const std::string_view text = src_.substr(begin, end - begin);
    Token t{TokenType::kText, line_at(begin),
            text.find('\r') == std::string_view::npos ? std::string(text) : normalize_newlines(text)};
    tokens_.push_back(std::move(t));
  }

  // Lexes expression tokens inside a tag until its closing "}}" / "%}" at bracket depth 0.
  Result<size_t> lex_tag(size_t p, bool is_var, int tag_line, bool& end_minus, bool& end_plus) {
    const char close = is_var ? '}' : '%';
    int depth = 0;
    while (true) {
      while (p < src_.size() && is_space(src_[p])) ++p;
      if (p >= src_.size()) {
        return error(tag_line, std::string("unclosed tag '") + (is_var ? "{{" : "{%") + "' (expected '" +
                                   (is_var ? "}}" : "%}") + "')");
      }
      const char c = src_[p];
      if (depth == 0) {
        if ((c == '-' || c == '+') && p + 2 < src_.size() + 0 && src_[p + 1] == close && src_[p + 2] == '}') {
          if (c == '-') end_minus = true;
          else if (!is_var) end_plus = true;
          else return error(line_at(p), "unexpected '+'");
          tokens_.push_back(Token{is_var ? TokenType::kVarEnd : TokenType::kBlockEnd, line_at(p), {}});
          return p + 3;
        }
        if (c == close && p + 1 < src_.size() && src_[p + 1] == '}') {
          tokens_.push_back(Token{is_var ? TokenType::kVarEnd : TokenType::kBlockEnd, line_at(p), {}});
          return p + 2;
        }
      }
      const int line = line_at(p);
      if (is_name_start(c)) {
        size_t e = p;
        while (e < src_.size() && is_name_char(src_[e])) ++e;
        tokens_.push_back(Token{TokenType::kName, line, std::string(src_.substr(p, e - p))});
        p = e;
      } else if (is_digit(c)) {
        GB_ASSIGN_OR_RETURN(p, lex_number(p, line));
      } else if (c == '\'' || c == '"') {
        GB_ASSIGN_OR_RETURN(p, lex_string(p, line));
      } else {
        static const char* const kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (const char* two : kTwo) {
          if (src_.substr(p, 2) == two) op = two;
        }
        if (op.empty()) {
          if (std::strchr("+-*/%~<>=()[]{},.:|", c) == nullptr || c == '\0') {
            return error(line, "unexpected character '" + std::string(1, c) + "'");
          }
          op = std::string(1, c);
          if (c == '(' || c == '[' || c == '{') ++depth;
          if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
        }
        tokens_.push_back(Token{TokenType::kOp, line, op});
        p += op.size();
      }
    }
  }

  Result<size_t> lex_number(size_t p, int line) {
    const size_t start = p;
    auto digits = [&]() {
      while (p < src_.size() && (is_digit(src_[p]) || (src_[p] == '_' && p + 1 < src_.size() && is_digit(src_[p + 1]))))
        ++p;
    };
    digits();
    bool is_float = false;
    if (p + 1 < src_.size() && src_[p] == '.' && is_digit(src_[p + 1])) {
      is_float = true;
      ++p;
      digits();
    }
    if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
      size_t q = p + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && is_digit(src_[q])) {
        is_float = true;
        p = q;
        digits();
      }
    }
    std::string text;
    for (size_t i = start; i < p; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    Token t{is_float ? TokenType::kFloat : TokenType::kInt, line, text};
    if (is_float) {
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      int64_t v = 0;
      for (char d : text) {
        if (v > (INT64_MAX - (d - '0')) / 10) return error(line, "integer literal too large: " + text);
        v = v * 10 + (d - '0');
      }
      t.int_value = v;
    }
    tokens_.push_back(std::move(t));
    return p;
  }

  // Python string escapes, as Jinja decodes literals with "unicode-escape".
  Result<size_t> lex_string(size_t p, int line) {
    const char quote = src_[p++];
    std::string out;
    while (true) {
      if (p >= src_.size()) return error(line, "unterminated string literal");
      const char c = src_[p];
      if (c == quote) {
        ++p;
        break;
      }
      if (c == '\r') {  // a raw newline inside the literal, normalized like template text
        out += '\n';
        p += (p + 1 < src_.size() && src_[p + 1] == '\n') ? 2 : 1;
        continue;
      }
      if (c != '\\' || p + 1 >= src_.size()) {
        out += c;
        ++p;
        continue;
      }
      const char e = src_[p + 1];
      p += 2;
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case 'a': out += '\a'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          const int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t cp = 0;
          for (int i = 0; i < n; ++i) {
            const int h = p + i < src_.size() ? hex_value(src_[p + i]) : -1;
            if (h < 0) return error(line, std::string("truncated \\") + e + " escape in string literal");
            cp = cp * 16 + static_cast<uint32_t>(h);
          }
          p += n;
          append_utf8(cp, out);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int i = 0; i < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++i)
              cp = cp * 8 + (src_[p++] - '0');
            append_utf8(cp, out);
          } else {
            out += '\\';  // unknown escapes stay as written, like Python
            out += e;
          }
      }
    }
    tokens_.push_back(Token{TokenType::kString, line, std::move(out)});
    return p;
  }

  // After {% raw %}: text up to the matching {% endraw %}, honouring its whitespace control.
  Result<size_t> lex_raw(size_t pos, int line, bool& strip_next) {
    size_t search = pos;
    while (true) {
      const size_t b = src_.find("{%", search);
      if (b == std::string_view::npos) return error(line, "unclosed 'raw' block (expected 'endraw')");
      size_t q = b + 2;
      const bool minus = q < src_.size() && src_[q] == '-';
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) ++q;
      while (q < src_.size() && is_space(src_[q])) ++q;
      if (src_.substr(q, 6) != "endraw") {
        search = b + 2;
        continue;
      }
      q += 6;
      while (q < src_.size() && is_space(src_[q])) ++q;
      bool end_minus = false;
      bool end_plus = false;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) {
        end_minus = src_[q] == '-';
        end_plus = src_[q] == '+';
        ++q;
      }
      if (src_.substr(q, 2) != "%}") {
        search = b + 2;
        continue;
      }
      size_t text_begin = pos;
      size_t text_end = b;
      if (strip_next) {
        while (text_begin < text_end && is_space(src_[text_begin])) ++text_begin;
        strip_next = false;
      }
      if (minus) {
        while (text_end > text_begin && is_space(src_[text_end - 1])) --text_end;
      }
      emit_text(text_begin, text_end);
      size_t after = q + 2;
      if (end_minus) strip_next = true;
      else if (!end_plus) after = skip_trim_newline(after);
      return after;
    }
  }

  std::string_view src_;
  LexOptions options_;
  std::vector<Token> tokens_;
  size_t line_pos_ = 0;
  int line_ = 1;
};

}  // namespace

const char* token_type_name(TokenType t) {
  switch (t) {
    case TokenType::kText: return "text";
    case TokenType::kVarBegin: return "'{{'";
    case TokenType::kVarEnd: return "'}}'";
    case TokenType::kBlockBegin: return "'{%'";
    case TokenType::kBlockEnd: return "'%}'";
    case TokenType::kName: return "name";
    case TokenType::kString: return "string";
    case TokenType::kInt: return "integer";
    case TokenType::kFloat: return "float";
    case TokenType::kOp: return "operator";
    case TokenType::kEof: return "end of template";
  }
  return "?";
}

Result<std::vector<Token>> tokenize(std::string_view source, const LexOptions& options) {
  return Lexer(source, options).run();
}

}  // namespace gb::chat
