// TextCodec: what the server needs of a tokenizer and a chat template, so the HTTP side can be
// built and tested before (and independently of) gb_tokenizer and gb_chat. The serve command
// adapts the real Tokenizer / chat template to it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace gb::server {

// Turns generated ids into text incrementally; never emits half a UTF-8 character. One per
// sequence, used only by the HTTP thread that serves it.
class StreamDetokenizer {
 public:
  virtual ~StreamDetokenizer() = default;
  // Text that became complete with this id (often empty). Special tokens (EOS) give no text.
  virtual std::string push(int32_t id) = 0;
  // Whatever is left at the end of the sequence.
  virtual std::string flush() = 0;
  // The text id would add if it came next, without taking it (the alternatives in logprobs).
  virtual std::string peek(int32_t id) const = 0;
};

// Must be safe to call from many HTTP threads at once (all methods const).
class TextCodec {
 public:
  virtual ~TextCodec() = default;
  // add_special: BOS/EOS as the tokenizer's post-processor says (completions prompts: true;
  // rendered chat templates: false, the template writes its own BOS).
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special) const = 0;
  // A detokenizer for the continuation of `prompt`: the prompt's last tokens give the decoder
  // its context, so the first generated token keeps its leading space ("a time" + " there").
  virtual std::unique_ptr<StreamDetokenizer> stream(std::span<const int32_t> prompt) const = 0;
  // Renders the chat template; messages is an array of {role, content: string}. An error
  // (e.g. the template raised) is answered 400 with its message.
  virtual Result<std::string> render_chat(const nlohmann::json& messages, bool add_generation_prompt) const = 0;
  virtual int32_t vocab_size() const = 0;
  // One token's text on its own, special tokens included ("<s>"): the labels of the analyses,
  // the same as the CLI's (Tokenizer::decode of that id with skip_special false).
  virtual std::string token_text(int32_t id) const { return stream({})->peek(id); }
};

}  // namespace gb::server
