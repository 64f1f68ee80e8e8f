// The text side of one choice, run on its HTTP thread: incremental detokenization, stop
// strings (never leaked, partial matches held back until resolved), token accounting.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/request.h"
#include "server/text_codec.h"

namespace gb::server {

// Holds back the end of the text while it could still become a stop string.
class StopStringFilter {
 public:
  explicit StopStringFilter(std::vector<std::string> stops);
  // Appends text and returns what is now safe to emit. When a stop string completes, returns
  // the text before it, sets *stopped, and drops everything from the stop string on.
  std::string push(std::string_view text, bool* stopped);
  // At the end of generation: the held-back text (it can no longer become a stop string).
  std::string flush();

 private:
  std::vector<std::string> stops_;
  std::string pending_;  // not yet emitted; a proper prefix of some stop string, or empty
};

// What one generated token put into a choice's text, for logprobs. The texts of a choice's
// tokens concatenate to exactly its text (a SentencePiece "▁upon" is " upon"; a token that ends
// mid-character adds "", the one completing it the whole character; text after a stop string
// is cut off). `top` is the text each alternative in GeneratedToken::top would have added there.
struct TokenText {
  std::string text;
  std::vector<std::string> top;
};

// One streaming update of a choice.
struct ChoiceDelta {
  std::string text;
  // Tokens whose text is in `text` (or in an earlier update), for logprobs; token_texts[i]
  // belongs to tokens[i]. A token whose text the stop-string filter holds back comes with the
  // update that releases that text.
  std::vector<GeneratedToken> tokens;
  std::vector<TokenText> token_texts;
  bool finished = false;
};

class ChoiceText {
 public:
  ChoiceText(std::unique_ptr<StreamDetokenizer> detok, std::vector<std::string> stops);

  // Consumes one engine event. After a stop string hits, the caller cancels the engine request
  // and ignores later events.
  ChoiceDelta on_event(GenerationEvent& event);

  bool finished() const { return finished_; }
  // "stop", "length" or, for engine-side failures, the engine's reason name.
  FinishReason finish_reason() const { return finish_; }
  bool stopped_by_string() const { return stopped_by_string_; }
  // Ends the choice now as if a stop had been generated (finish_reason stop), flushing held
  // text; the caller cancels the engine request. Used by glassbox.stop_on_repetition.
  ChoiceDelta stop_now();
  bool stopped_by_repetition() const { return stopped_by_repetition_; }
  const std::string& error() const { return error_; }
  // With finish_reason kError / kCancelled: the engine's code for it.
  EngineErrorCode error_code() const { return error_code_; }
  // Tokens the engine produced, up to and including the one that completed a stop string.
  int32_t completion_tokens() const { return completion_tokens_; }
  int32_t prompt_tokens() const { return prompt_tokens_; }
  int32_t cached_prompt_tokens() const { return cached_prompt_tokens_; }

 private:
  struct HeldToken {
    GeneratedToken token;
    TokenText text;
  };
  // Appends text to the delta and moves to it every held token whose text is now all emitted
  // (every held token when `all`, its text cut at the end of the emitted text).
  void emit(ChoiceDelta* delta, std::string text, bool all);

  std::unique_ptr<StreamDetokenizer> detok_;
  StopStringFilter filter_;
  std::vector<HeldToken> held_;  // tokens whose text is not all emitted yet, oldest first
  int64_t emitted_bytes_ = 0;    // bytes of text emitted so far
  int64_t released_bytes_ = 0;   // bytes of text of the tokens released so far
  bool finished_ = false;
  bool stopped_by_string_ = false;
  bool stopped_by_repetition_ = false;
  FinishReason finish_ = FinishReason::kNone;
  std::string error_;
  EngineErrorCode error_code_ = EngineErrorCode::kInternal;
  int32_t completion_tokens_ = 0;
  int32_t prompt_tokens_ = 0;
  int32_t cached_prompt_tokens_ = 0;
};

}  // namespace gb::server
