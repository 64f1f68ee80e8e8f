#include "engine/chat_prompt.h"

namespace gb {

Result<ChatPrompter> ChatPrompter::create(const Tokenizer& tokenizer, const std::string& template_source) {
  ChatPrompter p;
  std::string source = template_source;
  if (source.empty()) source = tokenizer.chat_template();
  if (source.empty()) {
    source = std::string(chat::kDefaultChatTemplate);
    p.is_default_ = true;
  }
  auto parsed = chat::ChatTemplate::parse(source);
  if (!parsed.is_ok()) return parsed.status().with_context("chat template");
  p.template_ = std::move(parsed).value();
  p.bos_token_ = tokenizer.bos_token();
  p.eos_token_ = tokenizer.eos_token();
  return p;
}

Result<std::string> ChatPrompter::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                         const nlohmann::ordered_json& tools,
                                         const nlohmann::ordered_json& extra) const {
  chat::ChatTemplateOptions o;
  o.add_generation_prompt = add_generation_prompt;
  o.bos_token = bos_token_;
  o.eos_token = eos_token_;
  o.tools = tools;
  o.kwargs = extra;
  return chat::apply_chat_template(template_, messages, o);
}

}  // namespace gb
