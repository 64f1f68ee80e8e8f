// ChatTemplate: parsing once into a shared immutable program, rendering per request with a
// fresh interpreter, and the apply_chat_template convenience that builds the context.
#include "chat/chat_template.h"

#include "chat/ast.h"
#include "chat/interpreter.h"

namespace gb::chat {
namespace {

template <class Json>
Result<std::string> render_json(const Program& program, const Json& context, const RenderOptions& options) {
  if (!context.is_object()) return Status::error("chat template context must be a JSON object");
  RenderLimits limits;
  limits.max_output_bytes = options.max_output_bytes;
  limits.max_steps = options.max_steps;
  limits.max_depth = options.max_depth;
  Interpreter interpreter(limits, options.now);
  return interpreter.render(program, from_json(context));
}

}  // namespace

Result<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  GB_ASSIGN_OR_RETURN(std::unique_ptr<Program> program, parse_template(source));
  ChatTemplate t;
  t.source_ = std::make_shared<const std::string>(source);
  t.program_ = std::shared_ptr<const Program>(std::move(program));
  return t;
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
  return render_json(*program_, context, options);
}

Result<std::string> ChatTemplate::render(const nlohmann::json& context, const RenderOptions& options) const {
  return render_json(*program_, context, options);
}

Result<std::string> apply_chat_template(const ChatTemplate& tmpl, const nlohmann::ordered_json& messages,
                                        const ChatTemplateOptions& options) {
  if (!messages.is_array()) return Status::error("chat messages must be a JSON array");
  if (!options.kwargs.is_object() && !options.kwargs.is_null()) {
    return Status::error("chat template kwargs must be a JSON object");
  }
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  // Same variables, same order of precedence as transformers: kwargs cannot replace messages.
  if (options.kwargs.is_object()) {
    for (auto it = options.kwargs.begin(); it != options.kwargs.end(); ++it) context[it.key()] = it.value();
  }
  context["messages"] = messages;
  context["tools"] = options.tools;
  context["add_generation_prompt"] = options.add_generation_prompt;
  if (!context.contains("bos_token")) context["bos_token"] = options.bos_token;
  if (!context.contains("eos_token")) context["eos_token"] = options.eos_token;
  return tmpl.render(context, options.render);
}

}  // namespace gb::chat
