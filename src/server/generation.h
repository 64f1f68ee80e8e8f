// One generation request in flight, from admission to its answer (or the client leaving): the
// per-choice text state, the loop that polls the engine's channels on the HTTP thread, failure
// classification, the audit row, usage, and the log line. Internal to gb_server; the answer is
// written by streaming.cc (SSE or one JSON body).
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "server/connection_watch.h"
#include "server/glass_api.h"
#include "server/openai_response.h"
#include "server/server.h"
#include "server/text_stream.h"

namespace httplib {
class DataSink;
}

namespace gb::server {

// Per-choice state of a generation request, owned by its HTTP thread.
struct ChoiceState {
  int32_t index = 0;  // the OpenAI choice index (prompt_index * n + i)
  size_t prompt_index = 0;
  std::shared_ptr<RequestChannel> channel = std::make_shared<RequestChannel>();
  ChoiceText text;
  std::string out_text;                    // non-streaming: the whole text
  std::vector<GeneratedToken> out_tokens;  // non-streaming: tokens for logprobs
  std::vector<TokenText> out_token_texts;  // ... and the text each one added
  int64_t text_offset = 0;                 // completions logprobs text_offset
  bool have_first_token = false;
  bool queue_observed = false;
  Clock::time_point last_token;
  std::shared_ptr<const GlassReport> glass_report;  // from the engine's last event (glass-box requests)
  std::vector<GeneratedToken> prompt_logprobs;      // the engine's scores of prompt tokens 1, 2, ...
  bool prompt_sent = false;                         // streaming: the echo / prompt_logprobs chunk went out
  RepetitionTracker repetition;                     // n-gram repetition of the generated tokens

  ChoiceState(int32_t idx, size_t prompt, std::unique_ptr<StreamDetokenizer> detok, std::vector<std::string> stops,
              int32_t ngram, int32_t window)
      : index(idx), prompt_index(prompt), text(std::move(detok), std::move(stops)), repetition(ngram, window) {}
};

struct Generation {
  enum Abort { kNoAbort = 0, kDrainAbort = 1, kTimeoutAbort = 2 };

  Server* server = nullptr;
  ParsedRequest req;
  ServedModel model;  // what req.model names: the base or a variant, and its metrics
  std::string route;  // the route alias the client sent, when one chose `model`
  GlassRequest glass;
  ResponseMeta meta;
  Caller caller;
  Clock::time_point arrival, submitted, deadline;
  std::vector<ChoiceState> choices;
  std::atomic<int> abort{kNoAbort};
  int status = 200;                 // what the log and metrics record (499: client went away)
  std::string error_message;        // for the log
  Clock::time_point first_token{};  // of any choice; for the log line
  bool streaming_started = false;
  bool finalized = false;
  std::optional<ConnectionWatch> connection;  // to notice a client that leaves while we generate
  Clock::time_point next_connection_check{};
  bool http11 = true;          // the request's HTTP version allows an interim (1xx) response
  bool probed = false;         // a FIN was seen and the client probed once
  bool probe_pending = false;  // streaming: the next stream step writes the probe
  bool client_gone = false;
  int64_t audit_id = 0;  // the request's audit row (0: none)
  bool audited = false;

  // One ChoiceState per (prompt, i < n), each with its detokenizer, stop strings and repetition tracker.
  void make_choices(const TextCodec& codec, int32_t default_ngram);
  bool all_finished() const;
  void cancel_unfinished();
  // The error this request ends with, if any choice failed or the request was aborted.
  std::optional<ApiError> failure() const;
  void on_event(size_t i, GenerationEvent& ev, Clock::time_point now, std::vector<std::pair<size_t, ChoiceDelta>>* out);
  // At admission, before the engine sees the request: the durable audit row of a request that
  // uses an intervention (status 0: admitted, outcome not yet known), so no steered token leaves
  // the server without one. An error (503) when the store does not accept it: the request must
  // not run.
  std::optional<ApiError> begin_audit();
  // Records the outcome in that row, once (before the end of the answer is written); a failure
  // is logged, the row stays at status 0.
  void audit();
  AuditRecord audit_record() const;
  // The choice's `glassbox` object, once it has finished. A choice ended here (stop string,
  // repetition) gets its report with the engine's last event, one step later.
  nlohmann::json glass_json(ChoiceState& c);
  // Collects what the engine produced, waiting up to `wait` for at least one event.
  void poll(std::chrono::milliseconds wait, std::vector<std::pair<size_t, ChoiceDelta>>* out);
  nlohmann::json logprobs_for(ChoiceState& c, const std::vector<GeneratedToken>& tokens,
                              const std::vector<TokenText>& texts);
  // The prompt as the choice's answer shows it: with echo its text (the prompt tokens' texts,
  // decoded from the start) and, with logprobs, its tokens' entries (the first token's logprob
  // null; advances the choice's text_offset); with prompt_logprobs vLLM's list (null, then per
  // token {id: {logprob, rank, decoded_token}} for the token and its alternatives).
  struct PromptPart {
    std::string text;
    nlohmann::json logprobs;         // completions shape; null unless echo and logprobs
    nlohmann::json prompt_logprobs;  // null unless prompt_logprobs
  };
  PromptPart prompt_part(ChoiceState& c);
  int64_t prompt_tokens() const;
  int64_t completion_tokens() const;
  // Each prompt counts once (n choices share it), with the cache hits of its first choice.
  Usage usage() const;
  // Answers g's request as an SSE stream (httplib pulls stream_step; finalize at the end). streaming.cc.
  static void start_stream(const std::shared_ptr<Generation>& g, httplib::Response& res);
  // One step of an SSE response; false ends the response (the client is gone). streaming.cc.
  bool stream_step(httplib::DataSink& sink);
  // Non-streaming: waits for every choice and writes the one JSON answer (or the error). streaming.cc.
  void answer_whole(httplib::Response& res);
  // Metrics, the log line and the admission slot; runs exactly once.
  void finalize();
};

}  // namespace gb::server
