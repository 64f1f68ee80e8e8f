// The generation loop on the HTTP thread: polling the engine's channels, turning events into
// choice deltas (text, stop strings, repetition), failure classification, the audit row, usage
// and the request's log line and metrics.
#include "server/generation.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "server/server_internal.h"

namespace gb::server {

using json = nlohmann::json;

void Generation::make_choices(const TextCodec& codec, int32_t default_ngram) {
  const int32_t n = req.n;
  const auto& rep = glass.stop_on_repetition;
  const int32_t ngram = rep ? rep->ngram : default_ngram;
  const int32_t window = rep ? rep->window : 64;
  choices.reserve(req.prompts.size() * static_cast<size_t>(n));
  for (size_t p = 0; p < req.prompts.size(); ++p) {
    for (int32_t i = 0; i < n; ++i)
      choices.emplace_back(static_cast<int32_t>(p) * n + i, p, codec.stream(req.prompts[p].tokens), req.stop, ngram,
                           window);
  }
}

bool Generation::all_finished() const {
  for (const ChoiceState& c : choices) {
    if (!c.text.finished()) return false;
  }
  return true;
}

void Generation::cancel_unfinished() {
  for (ChoiceState& c : choices) {
    if (!c.text.finished()) c.channel->cancel();
  }
}

std::optional<ApiError> Generation::failure() const {
  const int a = abort.load();
  if (a == kDrainAbort)
    return make_error(503, "service_unavailable", "draining", "the server is shutting down; retry on another replica");
  if (a == kTimeoutAbort)
    return make_error(504, "timeout_error", "request_timeout",
                      "the request did not finish within request_timeout_s = " +
                          std::to_string(server->cfg_.request_timeout_s) + " s");
  for (const ChoiceState& c : choices) {
    if (!c.text.finished()) continue;
    switch (c.text.finish_reason()) {
      case FinishReason::kStop:
      case FinishReason::kLength: break;
      case FinishReason::kTimeout:
        return make_error(504, "timeout_error", "request_timeout",
                          "the request did not finish within request_timeout_s = " +
                              std::to_string(server->cfg_.request_timeout_s) + " s");
      case FinishReason::kCancelled:
        return engine_error(c.text.error_code() == EngineErrorCode::kDraining ? EngineErrorCode::kDraining
                                                                              : EngineErrorCode::kCancelled,
                            c.text.error());
      default:
        // Non-finite activations under the request's own interventions are the request's doing.
        if (c.text.error_code() == EngineErrorCode::kNonFinite && glass.spec != nullptr &&
            !glass.spec->interventions.empty()) {
          return make_error(400, "invalid_request_error", "non_finite_activations",
                            "the request's interventions made the model's activations non-finite (NaN or Inf); "
                            "lower their strengths: " +
                                c.text.error());
        }
        return engine_error(c.text.error_code(), c.text.error());
    }
  }
  return std::nullopt;
}

void Generation::on_event(size_t i, GenerationEvent& ev, Clock::time_point now,
                          std::vector<std::pair<size_t, ChoiceDelta>>* out) {
  ChoiceState& c = choices[i];
  ModelMetrics& hot = *model.metrics;
  // An event with neither tokens nor a finish marks the request leaving the engine's queue.
  if (!c.queue_observed && (!ev.tokens.empty() || ev.finish == FinishReason::kNone)) {
    c.queue_observed = true;
    if (ev.tokens.empty()) hot.queue_time.observe(seconds_between(submitted, now));
  }
  const size_t n_tokens = ev.tokens.size();
  if (n_tokens > 0) {
    if (!c.have_first_token) {
      c.have_first_token = true;
      if (first_token == Clock::time_point{}) first_token = now;
      hot.ttft.observe(seconds_between(arrival, now));
    } else {
      // Tokens that arrive together share the gap since the previous event.
      const double per = seconds_between(c.last_token, now) / static_cast<double>(n_tokens);
      for (size_t k = 0; k < n_tokens; ++k) hot.inter_token.observe(per);
    }
    c.last_token = now;
  }
  if (ev.glass) c.glass_report = ev.glass;
  for (GeneratedToken& t : ev.prompt_logprobs) c.prompt_logprobs.push_back(std::move(t));
  ChoiceDelta d = c.text.on_event(ev);
  for (const GeneratedToken& t : d.tokens) c.repetition.push(t.token);
  if (glass.stop_on_repetition && !c.text.finished() && c.repetition.ngrams() >= c.repetition.window() &&
      c.repetition.window_rate() > glass.stop_on_repetition->max_rate) {
    ChoiceDelta rest = c.text.stop_now();
    d.text += rest.text;
    for (size_t k = 0; k < rest.tokens.size(); ++k) {
      d.tokens.push_back(std::move(rest.tokens[k]));
      d.token_texts.push_back(std::move(rest.token_texts[k]));
    }
    d.finished = true;
  }
  // A stop decided here ends the engine's sequence at its next step.
  if (c.text.stopped_by_string() || c.text.stopped_by_repetition()) c.channel->cancel();
  out->emplace_back(i, std::move(d));
}

AuditRecord Generation::audit_record() const {
  AuditRecord r;
  r.id = audit_id;
  r.kind = "request";
  r.key_id = caller.key_id;
  r.request_id = meta.id;
  r.model = model.name + "@" + (model.variant == 0 ? server->cfg_.model : model.info.path);
  r.action = endpoint_path(req.endpoint);
  r.status = status;
  r.prompt_tokens = prompt_tokens();
  r.completion_tokens = completion_tokens();
  for (const ChoiceState& c : choices) {
    if (!r.finish_reason.empty()) r.finish_reason += ",";
    r.finish_reason += c.text.finished() ? finish_reason_name(c.text.finish_reason()) : "cancelled";
    r.repetition_rate = std::max(r.repetition_rate, c.repetition.rate());
  }
  return r;
}

std::optional<ApiError> Generation::begin_audit() {
  if (!glass.intervenes || server->audit_ == nullptr) return std::nullopt;
  AuditRecord r = audit_record();
  r.status = 0;  // admitted; the outcome is recorded at the end
  r.finish_reason.clear();
  r.completion_tokens = 0;
  r.spec_json = glass.audit_spec.dump(-1, ' ', false, json::error_handler_t::replace);
  if (Status st = server->audit_->append(&r); !st.is_ok()) {
    spdlog::error("audit: cannot record request {}: {}", meta.id, st.message());
    ApiError e =
        make_error(503, "service_unavailable", "audit_unavailable",
                   "the audit store cannot record this request, so its interventions do not run: " + st.message() +
                       " (requests without interventions are still served)");
    e.retry_after_s = 5;
    return e;
  }
  audit_id = r.id;
  return std::nullopt;
}

void Generation::audit() {
  if (audited || audit_id == 0 || server->audit_ == nullptr) return;
  audited = true;
  if (Status st = server->audit_->update_result(audit_record()); !st.is_ok())
    spdlog::error("audit: cannot record how request {} ended (its row {} stays at status 0): {}", meta.id, audit_id,
                  st.message());
}

json Generation::glass_json(ChoiceState& c) {
  if (glass.spec == nullptr) return nullptr;
  const Clock::time_point end = Clock::now() + std::chrono::seconds(2);
  GenerationEvent ev;
  while (c.glass_report == nullptr && Clock::now() < end) {
    if (c.channel->pop(&ev, std::chrono::milliseconds(20)) && ev.glass) c.glass_report = ev.glass;
  }
  if (c.glass_report == nullptr) return json{{"error", "the engine sent no glass-box report"}};
  return glass_choice_json(*c.glass_report, glass, c.repetition, c.text.stopped_by_repetition());
}

void Generation::poll(std::chrono::milliseconds wait, std::vector<std::pair<size_t, ChoiceDelta>>* out) {
  const Clock::time_point end = Clock::now() + wait;
  for (;;) {
    if (abort.load() != kNoAbort) {
      cancel_unfinished();
      return;
    }
    if (connection && Clock::now() >= next_connection_check) {
      next_connection_check = Clock::now() + std::chrono::milliseconds(100);
      const ConnectionWatch::State cs = connection->state();
      bool gone = cs == ConnectionWatch::State::kGone;
      if (cs == ConnectionWatch::State::kHalfClosed && !probed) {
        // The client sent FIN: it may only have half-closed. Probe; one that left resets.
        probed = true;
        if (req.stream) probe_pending = true;  // stream_step writes an SSE comment
        else if (http11) gone = !connection->write_raw("HTTP/1.1 100 Continue\r\n\r\n");
      }
      if (gone) {
        client_gone = true;
        status = 499;
        error_message = "client disconnected";
        cancel_unfinished();
        return;
      }
    }
    if (Clock::now() > deadline + std::chrono::seconds(2)) {
      // The engine should have timed the request out itself; do not wait on it forever.
      abort.store(kTimeoutAbort);
      cancel_unfinished();
      return;
    }
    GenerationEvent ev;
    size_t unfinished = 0, first_unfinished = 0;
    for (size_t i = 0; i < choices.size(); ++i) {
      while (!choices[i].text.finished() && choices[i].channel->pop(&ev, std::chrono::milliseconds(0)))
        on_event(i, ev, Clock::now(), out);
      if (!choices[i].text.finished() && unfinished++ == 0) first_unfinished = i;
    }
    if (!out->empty() || unfinished == 0) return;
    const Clock::time_point now = Clock::now();
    if (now >= end) return;
    // One choice: block on its channel. Several: short waits on one, then sweep them all.
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - now) + std::chrono::milliseconds(1);
    if (unfinished > 1) left = std::min(left, std::chrono::milliseconds(2));
    if (choices[first_unfinished].channel->pop(&ev, left)) on_event(first_unfinished, ev, Clock::now(), out);
    if (!out->empty()) return;
  }
}

Generation::PromptPart Generation::prompt_part(ChoiceState& c) {
  PromptPart out;
  const bool echo_lp = req.echo && req.top_logprobs >= 0;
  if (!req.echo && req.prompt_logprobs < 0) return out;
  const std::vector<int32_t>& ids = req.prompts[c.prompt_index].tokens;
  std::unique_ptr<StreamDetokenizer> detok = server->codec_->stream({});
  std::vector<GeneratedToken> toks;
  std::vector<TokenText> texts;
  json vllm = json::array();
  for (size_t p = 0; p < ids.size(); ++p) {
    const GeneratedToken* lp = p >= 1 && p - 1 < c.prompt_logprobs.size() ? &c.prompt_logprobs[p - 1] : nullptr;
    TokenText tt;
    json entry = nullptr;
    if (lp != nullptr) {
      entry = json::object();
      const size_t k_echo = std::min(lp->top.size(), static_cast<size_t>(std::max(req.top_logprobs, 0)));
      const size_t k_prompt = std::min(lp->top.size(), static_cast<size_t>(std::max(req.prompt_logprobs, 0)));
      for (size_t k = 0; k < lp->top.size(); ++k) {
        const std::string alt = detok->peek(lp->top[k].token);
        if (k < k_echo) tt.top.push_back(alt);
        if (k < k_prompt) {
          entry[std::to_string(lp->top[k].token)] = {
              {"logprob", lp->top[k].logprob}, {"rank", k + 1}, {"decoded_token", valid_utf8(alt)}};
        }
      }
      entry[std::to_string(ids[p])] = {
          {"logprob", lp->logprob}, {"rank", lp->rank}, {"decoded_token", valid_utf8(detok->peek(ids[p]))}};
      GeneratedToken t = *lp;
      t.top.resize(k_echo);
      toks.push_back(std::move(t));
    } else {
      toks.push_back({ids[p], 0.0f, {}, 0});
    }
    tt.text = detok->push(ids[p]);
    out.text += tt.text;
    texts.push_back(std::move(tt));
    vllm.push_back(std::move(entry));
  }
  const std::string tail = detok->flush();
  out.text += tail;
  if (!texts.empty()) texts.back().text += tail;
  if (req.prompt_logprobs >= 0) out.prompt_logprobs = std::move(vllm);
  if (!req.echo) {
    out.text.clear();
  } else if (echo_lp) {
    out.logprobs = logprobs_json(req.endpoint, toks, texts, &c.text_offset, req.return_tokens_as_token_ids);
    // The first token has no logprob: nothing came before it.
    if (!toks.empty()) {
      out.logprobs["token_logprobs"][0] = nullptr;
      out.logprobs["top_logprobs"][0] = nullptr;
    }
  }
  return out;
}

nlohmann::json Generation::logprobs_for(ChoiceState& c, const std::vector<GeneratedToken>& tokens,
                                        const std::vector<TokenText>& texts) {
  if (req.top_logprobs < 0) return nullptr;
  return logprobs_json(req.endpoint, tokens, texts, &c.text_offset, req.return_tokens_as_token_ids);
}

int64_t Generation::prompt_tokens() const {
  int64_t n = 0;
  for (const ParsedPrompt& p : req.prompts) n += static_cast<int64_t>(p.tokens.size());
  return n;
}

int64_t Generation::completion_tokens() const {
  int64_t n = 0;
  for (const ChoiceState& c : choices) n += c.text.completion_tokens();
  return n;
}

Usage Generation::usage() const {
  Usage u{prompt_tokens(), completion_tokens(), 0};
  for (const ChoiceState& c : choices) {
    if (c.index % req.n == 0) u.cached_prompt += c.text.cached_prompt_tokens();
  }
  return u;
}

void Generation::finalize() {
  if (finalized) return;
  finalized = true;
  if (!all_finished()) {
    cancel_unfinished();
    if (status == 200) {
      status = 499;
      error_message = "client disconnected";
    }
  }
  audit();  // a request that ended early (disconnect, error) used its interventions too
  const Clock::time_point now = Clock::now();
  json reasons = json::array();
  for (const ChoiceState& c : choices) {
    const char* reason = c.text.finished() ? finish_reason_name(c.text.finish_reason()) : "cancelled";
    if (abort.load() == kDrainAbort && !c.text.finished()) reason = "abort";
    reasons.push_back(reason);
    model.metrics->finished(reason).inc();
    model.metrics->generation_tokens.observe(c.text.completion_tokens());
    if (c.repetition.ngrams() > 0) model.metrics->repetition_rate.observe(c.repetition.rate());
  }
  const int64_t prompt = prompt_tokens(), completion = completion_tokens();
  model.metrics->prompt_tokens_total.inc(static_cast<double>(prompt));
  model.metrics->generation_tokens_total.inc(static_cast<double>(completion));
  for (const ParsedPrompt& p : req.prompts) model.metrics->prompt_tokens.observe(static_cast<double>(p.tokens.size()));
  if (status == 200) model.metrics->e2e.observe(seconds_between(arrival, now));

  json line = {{"event", "request"},
               {"request_id", meta.id},
               {"key_id", caller.key_id},
               {"endpoint", endpoint_path(req.endpoint)},
               {"model", model.name},
               {"route", route.empty() ? json(nullptr) : json(route)},
               {"status", status},
               {"stream", req.stream},
               {"n", req.n},
               {"prompts", req.prompts.size()},
               {"prompt_tokens", prompt},
               {"cached_prompt_tokens", usage().cached_prompt},
               {"completion_tokens", completion},
               {"finish_reasons", reasons},
               {"e2e_s", seconds_between(arrival, now)}};
  if (first_token != Clock::time_point{}) line["ttft_s"] = seconds_between(arrival, first_token);
  if (!req.user.empty()) line["user"] = req.user;
  json repetition = json::array();
  for (const ChoiceState& c : choices) repetition.push_back(c.repetition.rate());
  line["repetition_rates"] = repetition;
  if (glass.spec != nullptr) {
    line["glassbox"] = {{"observe", glass.spec->observe.enabled}, {"interventions", glass.spec->interventions.size()}};
  }
  if (!error_message.empty()) line["error"] = error_message;
  if (server->cfg_.log_prompts) {
    json prompts = json::array();
    for (const ParsedPrompt& p : req.prompts) prompts.push_back(p.text);
    line["prompt"] = prompts;
  }
  server->write_log(line);
  server->unregister_generation(this);
  server->in_flight_.fetch_sub(1);
  server->hot_.in_flight.add(-1);
}

}  // namespace gb::server
