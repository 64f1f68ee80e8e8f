// Writing the answer: the SSE stream step by step, or the whole JSON body once every choice has
// finished. Errors after the stream started go out as an error chunk, then [DONE].
#include <httplib.h>

#include "server/generation.h"
#include "server/server_internal.h"

namespace gb::server {

using json = nlohmann::json;

void Generation::start_stream(const std::shared_ptr<Generation>& g, httplib::Response& res) {
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [g](size_t, httplib::DataSink& sink) -> bool {
        try {
          return g->stream_step(sink);
        } catch (const std::exception& e) {
          g->status = 500;
          g->error_message = std::string("internal error while streaming: ") + e.what();
          g->cancel_unfinished();
          return false;
        }
      },
      [g](bool) {
        try {
          g->finalize();
        } catch (...) {
          // A release callback must not throw; the slot is released before anything can fail.
        }
      });
}

bool Generation::stream_step(httplib::DataSink& sink) {
  std::string buf;
  const bool chat = req.endpoint == Endpoint::kChat;
  if (!streaming_started) {
    streaming_started = true;
    // Chat streams open each choice with the assistant role, as OpenAI does.
    if (chat) {
      for (const ChoiceState& c : choices)
        buf += sse_data(stream_chunk(meta, c.index, true, "", nullptr, "", req.include_usage));
    }
  }
  std::vector<std::pair<size_t, ChoiceDelta>> deltas;
  if (buf.empty()) poll(std::chrono::milliseconds(50), &deltas);
  if (client_gone) return false;
  if (probe_pending) {
    probe_pending = false;
    buf += ": \n\n";  // an SSE comment: a client that left answers it with a reset
  }
  for (auto& [i, d] : deltas) {
    ChoiceState& c = choices[i];
    // The prompt part first (its scores all arrive before the first token): the echoed prompt
    // and its logprobs, vLLM's prompt_logprobs.
    if (!c.prompt_sent && (req.echo || req.prompt_logprobs >= 0) &&
        (!d.text.empty() || !d.tokens.empty() || d.finished)) {
      c.prompt_sent = true;
      PromptPart pp = prompt_part(c);
      json chunk = stream_chunk(meta, c.index, false, pp.text, pp.logprobs, "", req.include_usage);
      if (!pp.prompt_logprobs.is_null()) chunk["choices"][0]["prompt_logprobs"] = std::move(pp.prompt_logprobs);
      buf += sse_data(chunk);
    }
    json lp = d.tokens.empty() ? json(nullptr) : logprobs_for(c, d.tokens, d.token_texts);
    if (!d.text.empty() || !lp.is_null())
      buf += sse_data(stream_chunk(meta, c.index, false, d.text, lp, "", req.include_usage));
    const FinishReason r = c.text.finish_reason();
    if (d.finished && (r == FinishReason::kStop || r == FinishReason::kLength)) {
      json last = stream_chunk(meta, c.index, false, "", nullptr, finish_reason_name(r), req.include_usage);
      if (glass.spec != nullptr) last["choices"][0]["glassbox"] = glass_json(c);
      buf += sse_data(last);
    }
  }
  bool end = false;
  if (std::optional<ApiError> err = failure()) {
    cancel_unfinished();
    status = err->status;
    error_message = err->message;
    buf += sse_data(error_body(*err));
    buf += kSseDone;
    end = true;
  } else if (all_finished()) {
    audit();
    if (req.include_usage) buf += sse_data(usage_chunk(meta, usage()));
    buf += kSseDone;
    end = true;
  }
  if (!buf.empty() && !sink.write(buf.data(), buf.size())) {
    status = 499;
    error_message = "client disconnected";
    cancel_unfinished();
    return false;
  }
  if (end) sink.done();
  return true;
}

void Generation::answer_whole(httplib::Response& res) {
  std::vector<std::pair<size_t, ChoiceDelta>> deltas;
  while (!all_finished() && !failure() && !client_gone) {
    deltas.clear();
    poll(std::chrono::milliseconds(100), &deltas);
    for (auto& [i, d] : deltas) {
      ChoiceState& c = choices[i];
      c.out_text += d.text;
      for (GeneratedToken& t : d.tokens) c.out_tokens.push_back(std::move(t));
      for (TokenText& t : d.token_texts) c.out_token_texts.push_back(std::move(t));
    }
  }
  if (client_gone) {
    // Nobody to answer; finalize() logs the 499.
  } else if (std::optional<ApiError> e = failure()) {
    cancel_unfinished();
    status = e->status;
    error_message = e->message;
    server->send_error(res, *e);
  } else {
    audit();
    std::vector<ChoiceOut> out;
    for (ChoiceState& c : choices) {
      PromptPart pp = prompt_part(c);  // first: it advances the text offsets
      json lp = logprobs_for(c, c.out_tokens, c.out_token_texts);
      if (!pp.logprobs.is_null()) {
        for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
          for (json& v : lp[k]) pp.logprobs[k].push_back(std::move(v));
        }
        lp = std::move(pp.logprobs);
      }
      out.push_back({c.index, pp.text + c.out_text, std::move(lp), finish_reason_name(c.text.finish_reason()),
                     glass_json(c), std::move(pp.prompt_logprobs)});
    }
    res.set_content(full_response(meta, out, usage()).dump(-1, ' ', false, json::error_handler_t::replace),
                    "application/json");
  }
}

}  // namespace gb::server
