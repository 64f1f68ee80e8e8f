// Chat prompts: which template a model uses (an override, the tokenizer's own, or the
// documented default for models without one) and rendering messages into prompt text.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "chat/chat_template.h"
#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace gb {

class ChatPrompter {
 public:
  // template_source empty: the tokenizer's chat_template, else chat::kDefaultChatTemplate.
  static Result<ChatPrompter> create(const Tokenizer& tokenizer, const std::string& template_source = {});

  // Renders messages ([{role, content, ...}]) as transformers' apply_chat_template would.
  // extra: template variables such as enable_thinking; tools: the request's tools or null.
  Result<std::string> render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                             const nlohmann::ordered_json& tools = nullptr,
                             const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

  bool is_default() const { return is_default_; }

 private:
  chat::ChatTemplate template_;
  std::string bos_token_, eos_token_;
  bool is_default_ = false;
};

}  // namespace gb
