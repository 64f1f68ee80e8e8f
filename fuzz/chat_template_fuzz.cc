// libFuzzer target: fuzz bytes parsed as a chat template and rendered against a fixed
// conversation (with tools and a tool call), under tight budgets so hangs show up as failures.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "chat/chat_template.h"

namespace {

const nlohmann::ordered_json& context() {
  static const nlohmann::ordered_json kContext = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "What is the weather in Paris?"},
      {"role": "assistant", "content": "<think>\nneed tool\n</think>\n\n", "reasoning_content": null,
       "tool_calls": [{"id": "call12345", "type": "function",
                       "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": [1, 2.5]}}}]},
      {"role": "tool", "tool_call_id": "call12345", "content": "{\"temp\": 21}"},
      {"role": "assistant", "content": "It is 21 \u00b0C."},
      {"role": "user", "content": [{"type": "text", "text": "thanks"}, {"type": "image"}]}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
    "add_generation_prompt": true,
    "enable_thinking": false,
    "bos_token": "<s>",
    "eos_token": "</s>"
  })");
  return kContext;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  auto tmpl = gb::chat::ChatTemplate::parse(source);
  if (!tmpl.is_ok()) return 0;
  gb::chat::RenderOptions options;
  options.now = 1721995200;
  options.max_steps = 200'000;
  options.max_output_bytes = 1 << 20;
  options.max_depth = 200;
  auto out = tmpl->render(context(), options);
  (void)out;
  return 0;
}
