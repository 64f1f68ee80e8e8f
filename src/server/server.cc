// The HTTP server: routing, admission (state, auth, rate limit, concurrency, queue), the
// per-request generation loop on the HTTP thread, streaming, metrics, logs and drain.
#include "server/server.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <random>

#include "server/connection_watch.h"
#include "server/openai_response.h"
#include "server/text_stream.h"

namespace gb::server {

using json = nlohmann::json;

namespace {

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

std::chrono::microseconds to_micros(double seconds) {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(seconds));
}

const char* endpoint_path(Endpoint e) { return e == Endpoint::kChat ? "/v1/chat/completions" : "/v1/completions"; }

// Bounded label values for the per-endpoint HTTP counter.
std::string route_label(const std::string& path) {
  static const char* kKnown[] = {"/v1/completions", "/v1/chat/completions", "/v1/models", "/health",
                                 "/ready",          "/metrics",             "/admin/config"};
  for (const char* k : kKnown) {
    if (path == k) return k;
  }
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  if (path.rfind("/admin/glassbox", 0) == 0) return "/admin/glassbox";
  if (path == "/admin/audit") return path;
  return "other";
}

ApiError make_error(int status, const std::string& type, const std::string& code, const std::string& message) {
  ApiError e;
  e.status = status;
  e.type = type;
  e.code = code;
  e.message = message;
  return e;
}

}  // namespace

// Per-choice state of a generation request, owned by its HTTP thread.
struct ChoiceState {
  int32_t index = 0;        // the OpenAI choice index (prompt_index * n + i)
  size_t prompt_index = 0;
  std::shared_ptr<RequestChannel> channel = std::make_shared<RequestChannel>();
  ChoiceText text;
  std::string out_text;                   // non-streaming: the whole text
  std::vector<GeneratedToken> out_tokens; // non-streaming: tokens for logprobs
  int64_t text_offset = 0;                // completions logprobs text_offset
  bool have_first_token = false;
  bool queue_observed = false;
  Clock::time_point last_token;
  std::shared_ptr<const GlassReport> glass_report;  // from the engine's last event (glass-box requests)
  RepetitionTracker repetition;                     // n-gram repetition of the generated tokens

  ChoiceState(int32_t idx, size_t prompt, std::unique_ptr<StreamDetokenizer> detok, std::vector<std::string> stops,
              int32_t ngram, int32_t window)
      : index(idx), prompt_index(prompt), text(std::move(detok), std::move(stops)), repetition(ngram, window) {}
};

// One generation request in flight: from admission to its answer (or the client leaving).
struct Generation {
  enum Abort { kNoAbort = 0, kDrainAbort = 1, kTimeoutAbort = 2 };

  Server* server = nullptr;
  ParsedRequest req;
  GlassRequest glass;
  ResponseMeta meta;
  Caller caller;
  Clock::time_point arrival, submitted, deadline;
  std::vector<ChoiceState> choices;
  std::atomic<int> abort{kNoAbort};
  int status = 200;           // what the log and metrics record (499: client went away)
  std::string error_message;  // for the log
  Clock::time_point first_token{};  // of any choice; for the log line
  bool streaming_started = false;
  bool finalized = false;
  std::optional<ConnectionWatch> connection;  // to notice a client that leaves while we generate
  Clock::time_point next_connection_check{};
  bool client_gone = false;

  bool all_finished() const {
    for (const ChoiceState& c : choices) {
      if (!c.text.finished()) return false;
    }
    return true;
  }

  void cancel_unfinished() {
    for (ChoiceState& c : choices) {
      if (!c.text.finished()) c.channel->cancel();
    }
  }

  // The error this request ends with, if any choice failed or the request was aborted.
  std::optional<ApiError> failure() const {
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
          return make_error(503, "service_unavailable", "cancelled", "the engine cancelled the request");
        default:
          return make_error(500, "server_error", "generation_failed",
                            "generation failed: " + (c.text.error().empty() ? std::string("unknown error")
                                                                            : c.text.error()));
      }
    }
    return std::nullopt;
  }

  void on_event(size_t i, GenerationEvent& ev, Clock::time_point now,
                std::vector<std::pair<size_t, ChoiceDelta>>* out) {
    ChoiceState& c = choices[i];
    HotMetrics& hot = server->hot_;
    // An event with neither tokens nor a finish marks the request leaving the engine's queue.
    if (!c.queue_observed && (!ev.tokens.empty() || ev.finish == FinishReason::kNone)) {
      c.queue_observed = true;
      if (ev.tokens.empty())
        hot.queue_time.observe(seconds_between(submitted, now));
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
    ChoiceDelta d = c.text.on_event(ev);
    for (const GeneratedToken& t : d.tokens) c.repetition.push(t.token);
    if (glass.stop_on_repetition && !c.text.finished() && c.repetition.ngrams() >= c.repetition.window() &&
        c.repetition.window_rate() > glass.stop_on_repetition->max_rate) {
      ChoiceDelta rest = c.text.stop_now();
      d.text += rest.text;
      d.finished = true;
    }
    // A stop decided here ends the engine's sequence at its next step.
    if (c.text.stopped_by_string() || c.text.stopped_by_repetition()) c.channel->cancel();
    out->emplace_back(i, std::move(d));
  }

  // Writes the audit row of a request that used an intervention: durable before the client sees
  // the end of the answer (so a crash after any answered request leaves its row). Runs once.
  // false: the store failed, and the request must not be answered as a success.
  bool audited = false;
  bool audit() {
    if (audited || !glass.intervenes || server->audit_ == nullptr) return true;
    audited = true;
    AuditRecord r;
    r.kind = "request";
    r.key_id = caller.key_id;
    r.request_id = meta.id;
    r.model = server->cfg_.served_model_name + "@" + server->cfg_.model;
    r.action = endpoint_path(req.endpoint);
    r.spec_json = glass.audit_spec.dump();
    r.status = status;
    r.prompt_tokens = prompt_tokens();
    r.completion_tokens = completion_tokens();
    for (const ChoiceState& c : choices) {
      if (!r.finish_reason.empty()) r.finish_reason += ",";
      r.finish_reason += c.text.finished() ? finish_reason_name(c.text.finish_reason()) : "cancelled";
      r.repetition_rate = std::max(r.repetition_rate, c.repetition.rate());
    }
    Status st = server->audit_->append(&r);
    if (!st.is_ok()) {
      spdlog::error("audit: cannot record request {}: {}", meta.id, st.message());
      status = 500;
      error_message = "the audit store failed: " + st.message();
      return false;
    }
    return true;
  }

  // The choice's `glassbox` object, once it has finished. A choice ended here (stop string,
  // repetition) gets its report with the engine's last event, one step later.
  json glass_json(ChoiceState& c) {
    if (glass.spec == nullptr) return nullptr;
    const Clock::time_point end = Clock::now() + std::chrono::seconds(2);
    GenerationEvent ev;
    while (c.glass_report == nullptr && Clock::now() < end) {
      if (c.channel->pop(&ev, std::chrono::milliseconds(20)) && ev.glass) c.glass_report = ev.glass;
    }
    if (c.glass_report == nullptr) return json{{"error", "the engine sent no glass-box report"}};
    return glass_choice_json(*c.glass_report, glass, c.repetition, c.text.stopped_by_repetition());
  }

  // Collects what the engine produced, waiting up to `wait` for at least one event.
  void poll(std::chrono::milliseconds wait, std::vector<std::pair<size_t, ChoiceDelta>>* out) {
    const Clock::time_point end = Clock::now() + wait;
    for (;;) {
      if (abort.load() != kNoAbort) {
        cancel_unfinished();
        return;
      }
      if (connection && Clock::now() >= next_connection_check) {
        next_connection_check = Clock::now() + std::chrono::milliseconds(100);
        if (connection->closed()) {
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

  nlohmann::json logprobs_for(ChoiceState& c, const std::vector<GeneratedToken>& tokens) {
    if (req.top_logprobs < 0) return nullptr;
    return logprobs_json(req.endpoint, tokens, *server->codec_, &c.text_offset);
  }

  int64_t prompt_tokens() const {
    int64_t n = 0;
    for (const ParsedPrompt& p : req.prompts) n += static_cast<int64_t>(p.tokens.size());
    return n;
  }

  int64_t completion_tokens() const {
    int64_t n = 0;
    for (const ChoiceState& c : choices) n += c.text.completion_tokens();
    return n;
  }

  // Each prompt counts once (n choices share it), with the cache hits of its first choice.
  Usage usage() const {
    Usage u{prompt_tokens(), completion_tokens(), 0};
    for (const ChoiceState& c : choices) {
      if (c.index % req.n == 0) u.cached_prompt += c.text.cached_prompt_tokens();
    }
    return u;
  }

  // One step of an SSE response; false ends the response (the client is gone).
  bool stream_step(httplib::DataSink& sink) {
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
    for (auto& [i, d] : deltas) {
      ChoiceState& c = choices[i];
      json lp = d.tokens.empty() ? json(nullptr) : logprobs_for(c, d.tokens);
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
      if (audit()) {
        if (req.include_usage) buf += sse_data(usage_chunk(meta, usage()));
      } else {
        buf += sse_data(error_body(make_error(500, "server_error", "audit_failed", error_message)));
      }
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

  // Metrics, the log line and the admission slot; runs exactly once.
  void finalize() {
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
    auto& m = server->metrics_;
    json reasons = json::array();
    for (const ChoiceState& c : choices) {
      const char* reason = c.text.finished() ? finish_reason_name(c.text.finish_reason()) : "cancelled";
      if (abort.load() == kDrainAbort && !c.text.finished()) reason = "abort";
      reasons.push_back(reason);
      m.counter("glassbox_request_finished_total", "Finished choices by finish_reason (truncation rate: length / all)",
                {{"finish_reason", reason}})
          .inc();
      server->hot_.generation_tokens.observe(c.text.completion_tokens());
      if (c.repetition.ngrams() > 0) server->hot_.repetition_rate.observe(c.repetition.rate());
    }
    const int64_t prompt = prompt_tokens(), completion = completion_tokens();
    server->hot_.prompt_tokens_total.inc(static_cast<double>(prompt));
    server->hot_.generation_tokens_total.inc(static_cast<double>(completion));
    for (const ParsedPrompt& p : req.prompts) server->hot_.prompt_tokens.observe(static_cast<double>(p.tokens.size()));
    if (status == 200) server->hot_.e2e.observe(seconds_between(arrival, now));

    json line = {{"event", "request"},
                 {"request_id", meta.id},
                 {"key_id", caller.key_id},
                 {"endpoint", endpoint_path(req.endpoint)},
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
      line["glassbox"] = {{"observe", glass.spec->observe.enabled},
                          {"interventions", glass.spec->interventions.size()}};
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
};

HotMetrics::HotMetrics(MetricsRegistry& r)
    : ttft(r.histogram("glassbox_time_to_first_token_seconds", "Time from arrival to the first generated token",
                       latency_buckets())),
      inter_token(r.histogram("glassbox_inter_token_latency_seconds", "Time between generated tokens",
                              token_latency_buckets())),
      e2e(r.histogram("glassbox_e2e_request_latency_seconds", "Time from arrival to the last token",
                      latency_buckets())),
      queue_time(r.histogram("glassbox_request_queue_time_seconds",
                             "Time from submission until the engine first schedules the request", latency_buckets())),
      generation_tokens(
          r.histogram("glassbox_request_generation_tokens", "Generated tokens per choice", token_count_buckets())),
      prompt_tokens(r.histogram("glassbox_request_prompt_tokens", "Prompt tokens per prompt", token_count_buckets())),
      repetition_rate(r.histogram("glassbox_request_repetition_rate",
                                  "Per choice: fraction of generated n-grams that repeat an earlier one (loops)",
                                  {0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0})),
      prompt_tokens_total(r.counter("glassbox_prompt_tokens_total", "Prompt tokens of accepted requests")),
      generation_tokens_total(r.counter("glassbox_generation_tokens_total", "Generated tokens")),
      in_flight(r.gauge("glassbox_requests_in_flight", "Generation requests being served")),
      ready(r.gauge("glassbox_server_ready", "1 when the server accepts generation requests")) {}

Server::Server(ServerConfig cfg, std::function<void(const std::string&)> request_log)
    : cfg_(std::move(cfg)),
      request_log_(std::move(request_log)),
      keys_(cfg_),
      rate_limiter_(cfg_.rate_limit_burst) {
  std::random_device rd;
  id_salt_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  if (!request_log_) {
    request_log_ = [](const std::string& line) {
      std::fwrite(line.data(), 1, line.size(), stdout);
      std::fputc('\n', stdout);
      std::fflush(stdout);
    };
  }
}

Server::~Server() { stop(); }

Status Server::start() {
  if (!cfg_.audit_db.empty()) {
    Result<std::unique_ptr<AuditStore>> store = AuditStore::open(cfg_.audit_db);
    if (!store.is_ok()) return store.status().with_context("audit_db");
    audit_ = std::move(store.value());
  }
  http_ = std::make_unique<httplib::Server>();
  const size_t threads = cfg_.http_threads > 0 ? static_cast<size_t>(cfg_.http_threads)
                                               : static_cast<size_t>(cfg_.max_concurrent_requests + 8);
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_read_timeout(to_micros(cfg_.read_timeout_s));
  http_->set_write_timeout(to_micros(cfg_.write_timeout_s));
  http_->set_payload_max_length(static_cast<size_t>(cfg_.max_body_bytes));
  http_->set_keep_alive_timeout(5);
  install_routes();
  if (cfg_.port == 0) {
    port_ = http_->bind_to_any_port(cfg_.host);
    if (port_ <= 0) return Status::error("cannot listen on " + cfg_.host + " (any port)");
  } else {
    if (!http_->bind_to_port(cfg_.host, static_cast<int>(cfg_.port)))
      return Status::error("cannot listen on " + cfg_.host + ":" + std::to_string(cfg_.port) +
                           " (in use, or not an address of this machine)");
    port_ = static_cast<int>(cfg_.port);
  }
  listen_thread_ = std::thread([this] {
    http_->listen_after_bind();
    listen_returned_.store(true);
  });
  // stop() is a no-op until the listen loop runs, so do not return before it does.
  while (!http_->is_running() && !listen_returned_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (listen_returned_.load()) {
    listen_thread_.join();
    return Status::error("cannot serve on " + cfg_.host + ":" + std::to_string(port_));
  }
  return Status::ok();
}

void Server::attach(EngineApi* engine, const TextCodec* codec, int32_t max_model_len) {
  engine_ = engine;
  codec_ = codec;
  max_model_len_ = max_model_len;
  glass_ = std::make_unique<GlassService>(cfg_, engine->model_config());
  monitor_thread_ = std::thread([this] { monitor_loop(); });
}

Status Server::init_glass() { return glass_->init(); }

void Server::monitor_loop() {
  std::unique_lock<std::mutex> lock(monitor_mutex_);
  while (!monitor_wake_.wait_for(lock, std::chrono::milliseconds(500), [this] { return monitor_stop_; })) {
    const MonitorSnapshot m = engine_->monitor();
    for (const MonitorSnapshot::Event& e : m.recent) {
      if (e.index <= monitor_logged_) continue;
      monitor_logged_ = e.index;
      const MassiveEvent& ev = e.event;
      write_log({{"event", "massive_activation"},
                 {"request_id", e.request_id},
                 {"layer", ev.layer},
                 {"point", std::string(hook_point_name(ev.point))},
                 {"token", ev.position},
                 {"dim", ev.dim},
                 {"value", ev.value},
                 {"median_abs", ev.median_abs},
                 {"ratio", std::isfinite(ev.ratio) ? json(ev.ratio) : json("inf")}});
    }
  }
}

Status Server::self_test(std::chrono::milliseconds timeout) {
  if (engine_ == nullptr || codec_ == nullptr) return Status::error("self-test: no engine attached");
  auto channel = std::make_shared<RequestChannel>();
  GenerationRequest r;
  r.id = "self-test";
  r.prompt = codec_->encode("Hello", /*add_special=*/true);
  if (r.prompt.empty()) r.prompt = {0};
  r.max_tokens = 1;
  r.sampling.temperature = 0;
  r.deadline = Clock::now() + timeout;
  GB_RETURN_IF_ERROR(engine_->submit(std::move(r), channel).with_context("self-test"));
  const Clock::time_point end = Clock::now() + timeout;
  GenerationEvent ev;
  while (Clock::now() < end) {
    if (!channel->pop(&ev, std::chrono::milliseconds(50))) continue;
    if (ev.finish == FinishReason::kNone) continue;
    if (ev.finish == FinishReason::kStop || ev.finish == FinishReason::kLength) return Status::ok();
    return Status::error(std::string("self-test: generation ended with ") + finish_reason_name(ev.finish) +
                         (ev.error.empty() ? "" : ": " + ev.error));
  }
  channel->cancel();
  return Status::error("self-test: no token within " + std::to_string(timeout.count()) + " ms");
}

void Server::set_ready() {
  State expected = State::kStarting;
  if (engine_ != nullptr && state_.compare_exchange_strong(expected, State::kReady))
    hot_.ready.set(1);
}

void Server::drain(std::chrono::milliseconds deadline) {
  State s = state_.load();
  if (s == State::kStopped) return;
  state_.store(State::kDraining, std::memory_order_release);
  hot_.ready.set(0);
  const Clock::time_point end = Clock::now() + deadline;
  while (in_flight_.load() > 0 && Clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (in_flight_.load() > 0) {
    spdlog::warn("drain: cancelling {} request(s) still running after {} ms", in_flight_.load(), deadline.count());
    std::lock_guard<std::mutex> lock(generations_mutex_);
    for (Generation* g : generations_) {
      g->abort.store(Generation::kDrainAbort);
      g->cancel_unfinished();
    }
  }
  // Handlers notice the abort within one poll interval; a stuck socket write is bounded by the
  // write timeout.
  const Clock::time_point hard_end =
      Clock::now() + std::chrono::seconds(1) + to_micros(cfg_.write_timeout_s);
  while (in_flight_.load() > 0 && Clock::now() < hard_end) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

void Server::stop() {
  if (http_) {
    http_->stop();
    if (listen_thread_.joinable()) listen_thread_.join();
  }
  {
    std::lock_guard<std::mutex> lock(monitor_mutex_);
    monitor_stop_ = true;
  }
  monitor_wake_.notify_all();
  if (monitor_thread_.joinable()) monitor_thread_.join();
  state_.store(State::kStopped, std::memory_order_release);
}

void Server::register_generation(Generation* g) {
  std::lock_guard<std::mutex> lock(generations_mutex_);
  generations_.insert(g);
}

void Server::unregister_generation(Generation* g) {
  std::lock_guard<std::mutex> lock(generations_mutex_);
  generations_.erase(g);
}

std::string Server::new_request_id(const char* prefix) {
  // Unique and unguessable enough for correlation; not a secret.
  uint64_t x = id_salt_ + 0x9E3779B97F4A7C15ull * (request_counter_.fetch_add(1) + 1);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%s%016" PRIx64, prefix, x);
  return buf;
}

void Server::write_log(const json& line) {
  try {
    const std::string text = line.dump(-1, ' ', false, json::error_handler_t::replace);
    std::lock_guard<std::mutex> lock(log_mutex_);
    request_log_(text);
  } catch (const std::exception& e) {
    spdlog::error("request log: {}", e.what());
  }
}

void Server::send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
  res.set_content(error_body(e).dump(), "application/json");
}

bool Server::authorize(const httplib::Request& req, Role min_role, Caller* caller, ApiError* err) {
  const std::string header = req.get_header_value("Authorization");
  switch (keys_.authenticate(header, caller)) {
    case AuthResult::kOk: break;
    case AuthResult::kMissing:
      *err = make_error(401, "authentication_error", "invalid_api_key",
                        "Missing API key: send it as 'Authorization: Bearer <key>'");
      return false;
    case AuthResult::kInvalid:
      *err = make_error(401, "authentication_error", "invalid_api_key", "Invalid API key");
      return false;
  }
  if (static_cast<int>(caller->role) < static_cast<int>(min_role)) {
    *err = make_error(403, "permission_error", "insufficient_role",
                      std::string("this endpoint needs role ") + role_name(min_role) + "; key '" + caller->key_id +
                          "' has role " + role_name(caller->role));
    return false;
  }
  return true;
}

void Server::refresh_engine_gauges() {
  if (engine_ == nullptr) return;
  const EngineStats s = engine_->stats();
  auto& m = metrics_;
  m.gauge("glassbox_num_requests_running", "Sequences in the running batch").set(static_cast<double>(s.running));
  m.gauge("glassbox_num_requests_waiting", "Sequences waiting to be scheduled").set(static_cast<double>(s.waiting));
  m.gauge("glassbox_kv_cache_blocks_total", "KV cache blocks").set(static_cast<double>(s.kv_blocks_total));
  m.gauge("glassbox_kv_cache_blocks_used", "KV cache blocks in use").set(static_cast<double>(s.kv_blocks_used));
  m.gauge("glassbox_kv_cache_blocks_free", "KV cache blocks free")
      .set(static_cast<double>(s.kv_blocks_total - s.kv_blocks_used));
  m.gauge("glassbox_kv_cache_usage_ratio", "Fraction of KV cache blocks in use")
      .set(s.kv_blocks_total > 0 ? static_cast<double>(s.kv_blocks_used) / static_cast<double>(s.kv_blocks_total) : 0);
  m.counter("glassbox_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache")
      .set(static_cast<double>(s.prefix_cache_queries));
  m.counter("glassbox_prefix_cache_hits_total", "Prompt tokens found in the prefix cache")
      .set(static_cast<double>(s.prefix_cache_hits));
  m.gauge("glassbox_prefix_cache_hit_rate", "Prefix cache hits / queries since start")
      .set(s.prefix_cache_queries > 0
               ? static_cast<double>(s.prefix_cache_hits) / static_cast<double>(s.prefix_cache_queries)
               : 0);
  m.counter("glassbox_num_preemptions_total", "Sequences preempted (recomputed) for lack of KV blocks")
      .set(static_cast<double>(s.preemptions));
  static const std::vector<double> kStepBounds(StepHistogram::kBounds.begin(), StepHistogram::kBounds.end());
  m.histogram("glassbox_engine_step_duration_seconds", "Duration of engine steps (one forward + sampling)", kStepBounds)
      .load(s.step_seconds.buckets, s.step_seconds.count, s.step_seconds.sum);

  const MonitorSnapshot mon = engine_->monitor();
  if (mon.config.enabled) {
    m.counter("glassbox_monitor_steps_total", "Engine steps the massive-activation monitor sampled")
        .set(static_cast<double>(mon.steps_sampled));
    static const std::vector<double> kRatioBounds(MonitorSnapshot::kRatioBounds.begin(), MonitorSnapshot::kRatioBounds.end());
    for (size_t l = 0; l < mon.events_per_layer.size(); ++l) {
      const Labels layer = {{"layer", std::to_string(l)}};
      m.counter("glassbox_massive_activation_events_total",
                "Massive activations seen by the monitor (|x| > min_abs and > min_ratio x the row's median |x|)", layer)
          .set(static_cast<double>(mon.events_per_layer[l]));
      m.histogram("glassbox_massive_activation_ratio",
                  "Per sampled step and layer: the largest max|x| / median|x| of a token row", kRatioBounds, layer)
          .load(mon.ratio_buckets[l], mon.ratio_count[l], mon.ratio_sum[l]);
    }
  }
}

void Server::handle_metrics(httplib::Response& res) {
  refresh_engine_gauges();
  res.set_content(metrics_.render(), "text/plain; version=0.0.4; charset=utf-8");
}

void Server::handle_models(const httplib::Request& req, httplib::Response& res, const std::string& id) {
  Caller caller;
  ApiError err;
  if (!authorize(req, Role::kUser, &caller, &err)) return send_error(res, err);
  const json model = {{"id", cfg_.served_model_name},
                      {"object", "model"},
                      {"created", 0},
                      {"owned_by", "glassbox"},
                      {"root", cfg_.model},
                      {"max_model_len", max_model_len_}};
  if (id.empty()) return res.set_content(json{{"object", "list"}, {"data", json::array({model})}}.dump(),
                                         "application/json");
  if (id != cfg_.served_model_name) {
    ApiError e = make_error(404, "not_found_error", "model_not_found", "The model '" + id + "' does not exist");
    e.param = "model";
    return send_error(res, e);
  }
  res.set_content(model.dump(), "application/json");
}

void Server::handle_admin_config(const httplib::Request& req, httplib::Response& res) {
  Caller caller;
  ApiError err;
  if (!authorize(req, Role::kAdmin, &caller, &err)) return send_error(res, err);
  res.set_content(config_to_json(cfg_).dump(2), "application/json");
}

void Server::handle_admin_glass(const httplib::Request& req, httplib::Response& res) {
  Caller caller;
  ApiError err;
  if (!authorize(req, Role::kAdmin, &caller, &err)) return send_error(res, err);
  if (req.method == "GET") return res.set_content(glass_->describe().dump(2), "application/json");
  json body = json::object();
  if (!req.body.empty()) {
    try {
      body = json::parse(req.body);
    } catch (const json::parse_error& e) {
      return send_error(res, invalid_field("", std::string("the request body is not valid JSON: ") + e.what()));
    }
  }
  json change;
  std::string kind;
  std::optional<ApiError> e;
  const bool del = req.method == "DELETE";
  if (req.path == "/admin/glassbox/policy") {
    kind = "policy";
    e = req.method == "PATCH" ? glass_->patch_policy(body, &change) : glass_->set_policy(body, &change);
  } else if (req.path == "/admin/glassbox/default") {
    kind = "default_set";
    e = glass_->put_default(body, &change);
  } else if (req.path == "/admin/glassbox/default/rollback") {
    kind = "default_set";
    e = glass_->rollback_default(&change);
  } else {
    const std::string what = req.matches[1].str(), name = req.matches[2].str();
    if (what == "presets") {
      kind = "preset";
      e = del ? glass_->delete_preset(name, &change) : glass_->put_preset(name, body, &change);
    } else if (what == "vectors") {
      kind = "vector";
      e = del ? glass_->delete_vector(name, &change) : glass_->put_vector(name, body, &change);
    } else {
      kind = "session";
      e = del ? glass_->delete_session(name, &change) : glass_->put_session(name, body, &change);
    }
  }
  if (e) return send_error(res, *e);
  const std::string action = req.method == "POST" ? "rollback" : del ? "delete" : req.method == "PATCH" ? "merge" : "set";
  write_log({{"event", "glassbox_change"}, {"kind", kind}, {"action", action}, {"key_id", caller.key_id}, {"change", change}});
  if (Status st = audit_change(caller, kind, action, change); !st.is_ok()) {
    return send_error(res, make_error(500, "server_error", "audit_failed",
                                      "the change is in effect but the audit store failed: " + st.message()));
  }
  res.set_content(json{{"ok", true}, {"kind", kind}, {"action", action}, {"change", change}}.dump(), "application/json");
}

Status Server::audit_change(const Caller& caller, const std::string& kind, const std::string& action, const json& change) {
  if (audit_ == nullptr) return Status::ok();
  AuditRecord r;
  r.kind = kind;
  r.key_id = caller.key_id;
  r.model = cfg_.served_model_name + "@" + cfg_.model;
  r.action = action;
  r.spec_json = change.dump();
  return audit_->append(&r);
}

void Server::handle_admin_audit(const httplib::Request& req, httplib::Response& res) {
  Caller caller;
  ApiError err;
  if (!authorize(req, Role::kAdmin, &caller, &err)) return send_error(res, err);
  if (audit_ == nullptr)
    return send_error(res, make_error(404, "not_found_error", "no_audit_store", "this server has no audit_db"));
  AuditQuery q;
  q.kind = req.get_param_value("kind");
  q.key_id = req.get_param_value("key_id");
  q.request_id = req.get_param_value("request_id");
  for (const char* name : {"since", "until"}) {
    if (!req.has_param(name)) continue;
    Result<int64_t> t = parse_time_ms(req.get_param_value(name));
    if (!t.is_ok()) return send_error(res, invalid_field(name, std::string(name) + ": " + t.message()));
    (std::string(name) == "since" ? q.since_ms : q.until_ms) = *t;
  }
  for (const char* name : {"after_id", "limit"}) {
    if (!req.has_param(name)) continue;
    const std::string v = req.get_param_value(name);
    char* end = nullptr;
    const long long x = std::strtoll(v.c_str(), &end, 10);
    if (end == v.c_str() || *end != '\0') return send_error(res, invalid_field(name, std::string(name) + ": expected an integer"));
    if (std::string(name) == "after_id") q.after_id = x;
    else q.limit = static_cast<int32_t>(std::clamp<long long>(x, -1, kMaxAuditLimit + 1));
  }
  Result<std::vector<AuditRecord>> rows = audit_->query(q);
  if (!rows.is_ok()) return send_error(res, invalid_field("", rows.message()));
  json data = json::array();
  for (const AuditRecord& r : *rows) data.push_back(audit_record_json(r));
  json out = {{"object", "list"}, {"data", data}};
  if (!rows->empty()) out["last_id"] = rows->back().id;
  res.set_content(out.dump(), "application/json");
}

void Server::handle_generate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
  const Clock::time_point arrival = Clock::now();
  const std::string request_id = new_request_id(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-");
  res.set_header("X-Request-Id", request_id);
  Caller caller{"-", Role::kUser, 0};
  auto reject = [&](const ApiError& e, const char* reason) {
    send_error(res, e);
    metrics_.counter("glassbox_requests_rejected_total", "Generation requests refused before reaching the engine",
                     {{"reason", reason}})
        .inc();
    write_log({{"event", "request"},
               {"request_id", request_id},
               {"key_id", caller.key_id},
               {"endpoint", endpoint_path(endpoint)},
               {"status", e.status},
               {"error", e.message},
               {"e2e_s", seconds_between(arrival, Clock::now())}});
  };

  const State state = state_.load(std::memory_order_acquire);
  if (state == State::kStarting) {
    ApiError e = make_error(503, "service_unavailable", "not_ready", "the model is still loading; retry shortly");
    e.retry_after_s = 5;
    return reject(e, "not_ready");
  }
  if (state != State::kReady)
    return reject(make_error(503, "service_unavailable", "draining", "the server is shutting down"), "draining");

  ApiError err;
  if (!authorize(req, Role::kUser, &caller, &err)) return reject(err, err.status == 401 ? "unauthenticated" : "forbidden");

  int retry_after = 0;
  if (!rate_limiter_.try_acquire(caller.key_id, caller.rate_limit_rpm, arrival, &retry_after)) {
    ApiError e = make_error(429, "rate_limit_error", "rate_limit_exceeded",
                            "rate limit of " + std::to_string(static_cast<int64_t>(caller.rate_limit_rpm)) +
                                " requests per minute exceeded for key '" + caller.key_id + "'");
    e.retry_after_s = retry_after;
    return reject(e, "rate_limited");
  }

  json body;
  try {
    body = json::parse(req.body);
  } catch (const json::parse_error& e) {
    return reject(invalid_field("", std::string("the request body is not valid JSON: ") + e.what()), "invalid");
  }
  RequestLimits limits;
  limits.served_model_name = cfg_.served_model_name;
  limits.max_model_len = max_model_len_;
  limits.max_n = static_cast<int32_t>(cfg_.max_n);
  limits.max_stop = static_cast<int32_t>(cfg_.max_stop);
  limits.max_logprobs = static_cast<int32_t>(cfg_.max_logprobs);
  auto g = std::make_shared<Generation>();
  if (std::optional<ApiError> e = parse_request(endpoint, body, limits, *codec_, &g->req))
    return reject(*e, e->status == 404 ? "unknown_model" : "invalid");
  const json* glass_ext = body.is_object() && body.contains("glassbox") ? &body["glassbox"] : nullptr;
  const int64_t n_sequences = static_cast<int64_t>(g->req.prompts.size()) * g->req.n;
  if (std::optional<ApiError> e =
          glass_->resolve(glass_ext, req.get_header_value("X-Glassbox-Session"), caller, n_sequences, &g->glass))
    return reject(*e, e->status == 403 ? "forbidden" : e->status == 429 ? "observation_budget" : "invalid");

  const EngineStats stats = engine_->stats();
  if (stats.waiting >= cfg_.max_queue_length) {
    ApiError e = make_error(429, "rate_limit_error", "queue_full",
                            "the request queue is full (" + std::to_string(stats.waiting) + " waiting); retry shortly");
    e.retry_after_s = 1;
    return reject(e, "queue_full");
  }
  // Admission: HTTP-level concurrency (the engine's queue was checked above).
  if (in_flight_.fetch_add(1) >= cfg_.max_concurrent_requests) {
    in_flight_.fetch_sub(1);
    ApiError e = make_error(429, "rate_limit_error", "too_many_concurrent_requests",
                            "the server is at max_concurrent_requests = " +
                                std::to_string(cfg_.max_concurrent_requests) + "; retry shortly");
    e.retry_after_s = 1;
    return reject(e, "concurrency");
  }
  hot_.in_flight.add(1);
  g->server = this;
  g->caller = caller;
  g->arrival = arrival;
  g->deadline = arrival + to_micros(cfg_.request_timeout_s);
  g->meta = ResponseMeta{endpoint, request_id,
                         std::chrono::duration_cast<std::chrono::seconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count(),
                         g->req.model};
  register_generation(g.get());  // from here on finalize() releases the slot

  const int32_t n = g->req.n;
  const auto& rep = g->glass.stop_on_repetition;
  const int32_t ngram = rep ? rep->ngram : static_cast<int32_t>(cfg_.repetition_ngram);
  const int32_t window = rep ? rep->window : 64;
  g->choices.reserve(g->req.prompts.size() * static_cast<size_t>(n));
  for (size_t p = 0; p < g->req.prompts.size(); ++p) {
    for (int32_t i = 0; i < n; ++i)
      g->choices.emplace_back(static_cast<int32_t>(p) * n + i, p, codec_->stream(g->req.prompts[p].tokens), g->req.stop,
                              ngram, window);
  }
  g->connection.emplace(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  g->submitted = Clock::now();
  for (ChoiceState& c : g->choices) {
    GenerationRequest r;
    r.id = request_id + "-" + std::to_string(c.index);
    r.prompt = g->req.prompts[c.prompt_index].tokens;
    r.sampling = g->req.sampling;
    // n > 1 with a seed: choice i draws from seed + i, so each choice is reproducible alone.
    if (r.sampling.has_seed) r.sampling.seed += static_cast<uint64_t>(c.index % n);
    r.max_tokens = g->req.prompts[c.prompt_index].max_tokens;
    r.ignore_eos = g->req.ignore_eos;
    r.top_logprobs = g->req.top_logprobs;
    r.glass = g->glass.spec;
    r.deadline = g->deadline;
    Status st = engine_->submit(std::move(r), c.channel);
    if (!st.is_ok()) {
      for (ChoiceState& other : g->choices) other.channel->cancel();
      // EngineApi::submit fails for a full queue (429) or a draining engine (503); anything
      // else is a request the engine finds invalid.
      const std::string& why = st.message();
      const bool draining = why.find("draining") != std::string::npos;
      const bool full = why.find("queue") != std::string::npos && why.find("full") != std::string::npos;
      ApiError e = draining ? make_error(503, "service_unavailable", "draining", "the server is shutting down")
                   : full   ? make_error(429, "rate_limit_error", "queue_full", "the engine refused the request: " + why)
                            : invalid_field("", "the engine refused the request: " + why);
      if (full) e.retry_after_s = 1;
      g->status = e.status;
      g->error_message = e.message;
      // Count the choices as finished so finalize() does not log a disconnect.
      g->finalized = true;
      unregister_generation(g.get());
      in_flight_.fetch_sub(1);
      hot_.in_flight.add(-1);
      return reject(e, draining ? "draining" : full ? "queue_full" : "invalid");
    }
  }

  if (g->req.stream) {
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
    return;
  }

  std::vector<std::pair<size_t, ChoiceDelta>> deltas;
  while (!g->all_finished() && !g->failure() && !g->client_gone) {
    deltas.clear();
    g->poll(std::chrono::milliseconds(100), &deltas);
    for (auto& [i, d] : deltas) {
      ChoiceState& c = g->choices[i];
      c.out_text += d.text;
      for (GeneratedToken& t : d.tokens) c.out_tokens.push_back(std::move(t));
    }
  }
  if (g->client_gone) {
    // Nobody to answer; finalize() logs the 499.
  } else if (std::optional<ApiError> e = g->failure()) {
    g->cancel_unfinished();
    g->status = e->status;
    g->error_message = e->message;
    send_error(res, *e);
  } else if (!g->audit()) {
    send_error(res, make_error(500, "server_error", "audit_failed", g->error_message));
  } else {
    std::vector<ChoiceOut> out;
    for (ChoiceState& c : g->choices) {
      out.push_back({c.index, c.out_text, g->logprobs_for(c, c.out_tokens), finish_reason_name(c.text.finish_reason()),
                     g->glass_json(c)});
    }
    res.set_content(full_response(g->meta, out, g->usage()).dump(-1, ' ', false,
                                                                                                  json::error_handler_t::replace),
                    "application/json");
  }
  g->finalize();
}

void Server::install_routes() {
  // No exception may cross a handler: each is wrapped, and the answer is a 500 error JSON.
  auto guard = [this](auto fn) {
    return [this, fn](const httplib::Request& req, httplib::Response& res) {
      try {
        fn(req, res);
      } catch (const std::exception& e) {
        spdlog::error("{} {}: {}", req.method, req.path, e.what());
        send_error(res, make_error(500, "server_error", "internal_error", std::string("internal error: ") + e.what()));
      } catch (...) {
        send_error(res, make_error(500, "server_error", "internal_error", "internal error"));
      }
    };
  };
  http_->Post("/v1/completions",
              guard([this](const httplib::Request& q, httplib::Response& r) { handle_generate(Endpoint::kCompletions, q, r); }));
  http_->Post("/v1/chat/completions",
              guard([this](const httplib::Request& q, httplib::Response& r) { handle_generate(Endpoint::kChat, q, r); }));
  http_->Get("/v1/models", guard([this](const httplib::Request& q, httplib::Response& r) { handle_models(q, r, ""); }));
  http_->Get(R"(/v1/models/(.+))", guard([this](const httplib::Request& q, httplib::Response& r) {
               handle_models(q, r, q.matches[1].str());
             }));
  http_->Get("/health", guard([](const httplib::Request&, httplib::Response& r) {
               r.set_content(R"({"status":"ok"})", "application/json");
             }));
  http_->Get("/ready", guard([this](const httplib::Request&, httplib::Response& r) {
               const State s = state();
               const char* name = s == State::kReady ? "ready" : s == State::kStarting ? "starting" : "draining";
               r.status = s == State::kReady ? 200 : 503;
               r.set_content(json{{"status", name}}.dump(), "application/json");
             }));
  http_->Get("/metrics", guard([this](const httplib::Request&, httplib::Response& r) { handle_metrics(r); }));
  http_->Get("/admin/config",
             guard([this](const httplib::Request& q, httplib::Response& r) { handle_admin_config(q, r); }));
  auto admin_glass = guard([this](const httplib::Request& q, httplib::Response& r) { handle_admin_glass(q, r); });
  http_->Get("/admin/glassbox", admin_glass);
  http_->Put("/admin/glassbox/policy", admin_glass);
  http_->Patch("/admin/glassbox/policy", admin_glass);
  http_->Put("/admin/glassbox/default", admin_glass);
  http_->Post("/admin/glassbox/default/rollback", admin_glass);
  http_->Put(R"(/admin/glassbox/(presets|vectors|sessions)/([^/]+))", admin_glass);
  http_->Delete(R"(/admin/glassbox/(presets|vectors|sessions)/([^/]+))", admin_glass);
  http_->Get("/admin/audit", guard([this](const httplib::Request& q, httplib::Response& r) { handle_admin_audit(q, r); }));

  // httplib's own errors (unknown route, body over max_body_bytes, malformed HTTP) get an
  // OpenAI error body; our handlers' errors already have one.
  http_->set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                     httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e;
    e.status = res.status;
    if (res.status == 404) {
      e = make_error(404, "not_found_error", "not_found", "no route for " + req.method + " " + req.path);
    } else if (res.status == 413) {
      e = make_error(413, "invalid_request_error", "request_too_large",
                     "the request body is larger than max_body_bytes = " + std::to_string(cfg_.max_body_bytes));
    } else if (res.status >= 500) {
      e = make_error(res.status, "server_error", "internal_error", "internal error");
    } else {
      e = make_error(res.status, "invalid_request_error", "", "malformed HTTP request");
    }
    send_error(res, e);
    return httplib::Server::HandlerResponse::Handled;
  }));
  http_->set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    send_error(res, make_error(500, "server_error", "internal_error", "internal error"));
  });
  http_->set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics_
        .counter("glassbox_http_requests_total", "HTTP requests by route and status code",
                 {{"endpoint", route_label(req.path)}, {"status", std::to_string(res.status)}})
        .inc();
  });
}

}  // namespace gb::server
