// ChatTemplate: parsing once into a shared immutable program, rendering per request with a
// fresh interpreter, and the apply_chat_template convenience that builds the context.
#include "chat/chat_template.h"

#include "chat/ast.h"
#include "chat/interpreter.h"

namespace gb::chat {
namespace {

template <class Json>
Result<std::string> render_json(const ChatTemplate& tmpl, const Json& context, const RenderOptions& options) {
  if (!context.is_object()) return Status::error("chat template context must be a JSON object");
  return tmpl.render_values(from_json(context), options);
}

}  // namespace

Result<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  GB_ASSIGN_OR_RETURN(std::unique_ptr<Program> program, parse_template(source));
  ChatTemplate t;
  t.source_ = std::make_shared<const std::string>(source);
  t.program_ = std::shared_ptr<const Program>(std::move(program));
  return t;
}

Result<std::string> ChatTemplate::render_values(const Value& context, const RenderOptions& options) const {
  RenderLimits limits;
  limits.max_output_bytes = options.max_output_bytes;
  limits.max_steps = options.max_steps;
  limits.max_depth = options.max_depth;
  Interpreter interpreter(limits, options.now);
  return interpreter.render(*program_, context);
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
  return render_json(*this, context, options);
}

Result<std::string> ChatTemplate::render(const nlohmann::json& context, const RenderOptions& options) const {
  return render_json(*this, context, options);
}

Result<std::string> apply_chat_template(const ChatTemplate& tmpl, const nlohmann::ordered_json& messages,
                                        const ChatTemplateOptions& options) {
  if (!messages.is_array()) return Status::error("chat messages must be a JSON array");
  if (!options.kwargs.is_object() && !options.kwargs.is_null()) {
    return Status::error("chat template kwargs must be a JSON object");
  }
  // The variables transformers passes; kwargs cannot replace messages, tools or the flag.
  // Built as Values directly: no intermediate copy of the (possibly long) conversation.
  auto ctx = std::make_shared<ValueDict>();
  if (options.kwargs.is_object()) {
    for (auto it = options.kwargs.begin(); it != options.kwargs.end(); ++it) ctx->set(it.key(), from_json(it.value()));
  }
  ctx->set("messages", from_json(messages));
  ctx->set("tools", from_json(options.tools));
  ctx->set("add_generation_prompt", Value(options.add_generation_prompt));
  if (ctx->find("bos_token") == nullptr) ctx->set("bos_token", Value(options.bos_token));
  if (ctx->find("eos_token") == nullptr) ctx->set("eos_token", Value(options.eos_token));
  return tmpl.render_values(Value(std::move(ctx)), options.render);
}

Result<std::string> chat_template_from_config(const nlohmann::json& config, std::string_view name) {
  if (!config.is_object() || !config.contains("chat_template") || config["chat_template"].is_null()) {
    return Status::error("tokenizer_config.json has no chat_template");
  }
  const auto& t = config["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array()) {
    std::string available;
    for (const auto& entry : t) {
      if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") || !entry["name"].is_string() ||
          !entry["template"].is_string()) {
        return Status::error("tokenizer_config.json: chat_template list entries need string 'name' and 'template'");
      }
      if (entry["name"].get<std::string>() == name) return entry["template"].get<std::string>();
      available += (available.empty() ? "" : ", ") + entry["name"].get<std::string>();
    }
    return Status::error("tokenizer_config.json has no chat template named '" + std::string(name) +
                         "' (available: " + available + ")");
  }
  return Status::error("tokenizer_config.json: chat_template must be a string or a list");
}

std::string special_token_from_config(const nlohmann::json& config, std::string_view key) {
  if (!config.is_object()) return "";
  const auto it = config.find(std::string(key));
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  return "";
}

}  // namespace gb::chat
