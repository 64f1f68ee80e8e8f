// Public API of the chat-template engine: parse a Hugging Face chat_template (a Jinja subset)
// once, render it per request. README.md "Chat templates" lists the supported constructs.
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace gb::chat {

struct Program;
struct RenderLimits;
class Value;

// Used when a model ships no chat template (e.g. stories260K): one "role: content" line per
// message, then "assistant:" when a generation prompt is asked for. No special tokens.
inline constexpr std::string_view kDefaultChatTemplate =
    "{% for message in messages %}"
    "{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}";

struct RenderOptions {
  // Overrides the clock behind strftime_now (seconds since the epoch); tests pin it.
  std::optional<std::time_t> now;
  size_t max_output_bytes = size_t{64} << 20;
  int64_t max_steps = 20'000'000;
  int max_depth = 400;
};

// A parsed template. Immutable and cheap to copy; render() may run on many threads at once.
class ChatTemplate {
 public:
  // Fails with a message naming the line and construct on syntax errors and on unknown tags,
  // filters, tests or methods.
  static Result<ChatTemplate> parse(std::string_view source);

  // Renders with `context` as the template's variables (messages, tools, bos_token, ...).
  // ordered_json keeps the caller's key order, which `tojson` output reproduces.
  Result<std::string> render(const nlohmann::ordered_json& context, const RenderOptions& options = {}) const;
  Result<std::string> render(const nlohmann::json& context, const RenderOptions& options = {}) const;

  const std::string& source() const { return *source_; }

  // Renders with an already-converted context (a dict Value); what apply_chat_template uses.
  Result<std::string> render_values(const Value& context, const RenderOptions& options) const;

 private:
  std::shared_ptr<const std::string> source_;
  std::shared_ptr<const Program> program_;
};

struct ChatTemplateOptions {
  bool add_generation_prompt = false;
  std::string bos_token;
  std::string eos_token;
  nlohmann::ordered_json tools;                                      // null: `tools` is None, as transformers passes it
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();  // extra variables, e.g. enable_thinking
  RenderOptions render;
};

// What transformers' apply_chat_template(messages, tools=..., add_generation_prompt=..., **kwargs)
// passes to the template.
Result<std::string> apply_chat_template(const ChatTemplate& tmpl, const nlohmann::ordered_json& messages,
                                        const ChatTemplateOptions& options);

// The chat_template of a parsed tokenizer_config.json: either a string, or a list of
// {"name": ..., "template": ...} entries from which `name` is chosen ("default" unless the
// caller wants e.g. "tool_use"). Fails when the config has none.
Result<std::string> chat_template_from_config(const nlohmann::json& tokenizer_config,
                                              std::string_view name = "default");

// A special token (bos_token, eos_token, ...) of a tokenizer_config.json, given either as a
// string or as an AddedToken object {"content": ...}; empty when absent or null.
std::string special_token_from_config(const nlohmann::json& tokenizer_config, std::string_view key);

}  // namespace gb::chat
