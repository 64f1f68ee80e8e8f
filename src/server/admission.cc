// Admission of a generation request: state, auth, rate limit, body parsing and validation, the
// glass-box extension, queue and concurrency limits; then one engine request per choice, and the
// answer handed to the streaming or the whole-body writer.
#include <httplib.h>

#include <random>
#include "server/generation.h"
#include "server/http_transport.h"

#include "server/json_input.h"
#include "server/server_internal.h"

namespace gb::server {

using json = nlohmann::json;

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

void Server::log_rejected(Endpoint endpoint, const std::string& request_id, const std::string& key_id,
                          Clock::time_point arrival, const ApiError& e, const char* reason) {
  metrics_
      .counter("glassbox_requests_rejected_total", "Generation requests refused before reaching the engine",
               {{"reason", reason}})
      .inc();
  write_log({{"event", "request"},
             {"request_id", request_id},
             {"key_id", key_id},
             {"endpoint", endpoint_path(endpoint)},
             {"status", e.status},
             {"error", e.message},
             {"e2e_s", seconds_between(arrival, Clock::now())}});
}

void Server::handle_generate(Endpoint endpoint, const httplib::Request& req, const std::string& body_text,
                             httplib::Response& res) {
  const Clock::time_point arrival = Clock::now();
  const std::string request_id = new_request_id(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-");
  res.set_header("X-Request-Id", request_id);
  auto g = std::make_shared<Generation>();
  g->caller = Caller{"-", Role::kUser, 0};
  auto reject = [&](const Refusal& r) {
    send_error(res, r.error);
    log_rejected(endpoint, request_id, g->caller.key_id, arrival, r.error, r.reason);
  };
  // From resolving `model` to submitting: a variant is not unloaded under a request that named it.
  std::shared_lock<std::shared_mutex> routing(routes_mutex_);
  if (std::optional<Refusal> r = admit(endpoint, req, body_text, arrival, g.get())) return reject(*r);
  // Admitted: the request holds a slot of max_concurrent_requests from here.
  hot_.in_flight.add(1);
  g->server = this;
  g->arrival = arrival;
  g->deadline = arrival + to_micros(cfg_.request_timeout_s);
  g->meta = ResponseMeta{
      endpoint, request_id,
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count(),
      g->req.model};
  if (std::optional<ApiError> e = g->begin_audit()) {
    in_flight_.fetch_sub(1);
    hot_.in_flight.add(-1);
    return reject({*e, "audit_unavailable"});
  }
  register_generation(g.get());  // from here on finalize() releases the slot
  g->make_choices(*codec_, static_cast<int32_t>(cfg_.repetition_ngram));
  g->connection.emplace(current_connection() != nullptr ? current_connection()->fd : -1);
  g->http11 = req.version == "HTTP/1.1";
  if (std::optional<Refusal> r = submit_choices(g.get())) return reject(*r);
  routing.unlock();
  maybe_shadow(*g);
  if (g->req.stream) return Generation::start_stream(g, res);
  g->answer_whole(res);
  g->finalize();
}

std::optional<Server::Refusal> Server::admit(Endpoint endpoint, const httplib::Request& req,
                                             const std::string& body_text, Clock::time_point arrival, Generation* g) {
  const State state = state_.load(std::memory_order_acquire);
  if (state == State::kStarting) {
    ApiError e = make_error(503, "service_unavailable", "not_ready", "the model is still loading; retry shortly");
    e.retry_after_s = 5;
    return Refusal{e, "not_ready"};
  }
  if (state != State::kReady)
    return Refusal{make_error(503, "service_unavailable", "draining", "the server is shutting down"), "draining"};
  Caller& caller = g->caller;
  ApiError err;
  if (!authorize(req, Role::kUser, &caller, &err))
    return Refusal{err, err.status == 401 ? "unauthenticated" : "forbidden"};
  if (std::optional<ApiError> e = take_rate(caller, arrival)) return Refusal{*e, "rate_limited"};

  json body;
  if (std::optional<ApiError> e = parse_json_body(body_text, &body)) return Refusal{*e, "invalid"};
  RequestLimits limits;
  limits.served_model_name = cfg_.served_model_name;
  for (const ServedModel& m : models()) {
    if (m.variant != 0) limits.other_models.push_back(m.name);
  }
  for (const auto& [alias, arms] : routes()) limits.other_models.push_back(alias);
  limits.max_model_len = max_model_len_;
  limits.max_n = static_cast<int32_t>(cfg_.max_n);
  limits.max_stop = static_cast<int32_t>(cfg_.max_stop);
  limits.max_logprobs = static_cast<int32_t>(cfg_.max_logprobs);
  if (std::optional<ApiError> e = parse_request(endpoint, body, limits, *codec_, &g->req))
    return Refusal{*e, e->status == 404 ? "unknown_model" : "invalid"};
  // A route alias: the arm this client lands on serves it, and the answer names that arm.
  if (std::vector<RouteArm> arms; find_route(g->req.model, &arms)) {
    const std::string session = req.get_header_value("X-Glassbox-Session");
    const std::string& key = !g->req.user.empty() ? g->req.user : session;
    const size_t arm = pick_arm(arms, g->req.model, key, std::random_device{}() * 0x9e3779b97f4a7c15ull);
    g->route = g->req.model;
    g->req.model = arms[arm].model;
    metrics_
        .counter("glassbox_route_requests_total", "Requests sent to a route alias, by the arm that served them",
                 {{"route", g->route}, {"model", g->req.model}})
        .inc();
  }
  if (!find_model(g->req.model, &g->model)) {  // unloaded since the request was parsed
    ApiError e = make_error(404, "not_found_error", "model_not_found",
                            "The model " + quote_input(g->req.model) + " is no longer served");
    e.param = "model";
    return Refusal{e, "unknown_model"};
  }
  const json* glass_ext = body.is_object() && body.contains("glassbox") ? &body["glassbox"] : nullptr;
  const int64_t n_sequences = static_cast<int64_t>(g->req.prompts.size()) * g->req.n;
  if (std::optional<ApiError> e =
          glass_->resolve(glass_ext, req.get_header_value("X-Glassbox-Session"), caller, n_sequences, &g->glass))
    return Refusal{*e, e->status == 403 ? "forbidden" : e->status == 429 ? "observation_budget" : "invalid"};

  const EngineStats stats = engine_->stats();
  if (stats.waiting >= cfg_.max_queue_length) {
    ApiError e = make_error(429, "rate_limit_error", "queue_full",
                            "the request queue is full (" + std::to_string(stats.waiting) + " waiting); retry shortly");
    e.retry_after_s = 1;
    return Refusal{e, "queue_full"};
  }
  // HTTP-level concurrency (the engine's queue was checked above).
  if (std::optional<ApiError> e = take_slot()) return Refusal{*e, "concurrency"};
  // Steering as it runs, by op and point (each resolved item once per request): at admission,
  // never in the engine step.
  if (g->glass.intervenes && g->glass.spec != nullptr) {
    for (const Intervention& iv : g->glass.spec->interventions) {
      metrics_
          .counter("glassbox_interventions_total",
                   "Interventions of admitted requests by op, point and model (presets, vectors, sessions and the "
                   "default set resolved; each item once per request)",
                   {{"model", g->model.name},
                    {"op", std::string(intervention_op_name(iv.op))},
                    {"point", std::string(hook_point_name(iv.point))}})
          .inc();
    }
  }
  return std::nullopt;
}

std::optional<ApiError> Server::take_rate(const Caller& caller, Clock::time_point arrival) {
  int retry_after = 0;
  if (rate_limiter_.try_acquire(caller.key_id, caller.rate_limit_rpm, arrival, &retry_after)) return std::nullopt;
  ApiError e = make_error(429, "rate_limit_error", "rate_limit_exceeded",
                          "rate limit of " + std::to_string(static_cast<int64_t>(caller.rate_limit_rpm)) +
                              " requests per minute exceeded for key '" + caller.key_id + "'");
  e.retry_after_s = retry_after;
  return e;
}

std::optional<ApiError> Server::take_slot() {
  if (in_flight_.fetch_add(1) < cfg_.max_concurrent_requests) return std::nullopt;
  in_flight_.fetch_sub(1);
  ApiError e = make_error(
      429, "rate_limit_error", "too_many_concurrent_requests",
      "the server is at max_concurrent_requests = " + std::to_string(cfg_.max_concurrent_requests) + "; retry shortly");
  e.retry_after_s = 1;
  return e;
}

void Server::maybe_shadow(const Generation& g) {
  const std::string& asked = g.route.empty() ? g.req.model : g.route;
  ShadowConfig shadow;
  if (g.glass.spec != nullptr || !find_shadow(asked, &shadow)) return;  // steered or observed requests are not copied
  thread_local std::mt19937_64 rng{std::random_device{}()};
  if (std::uniform_real_distribution<double>(0, 1)(rng) >= shadow.share) return;
  ServedModel target;
  if (!find_model(shadow.model, &target)) return;
  const ParsedPrompt& p = g.req.prompts[0];
  GenerationRequest r;
  r.id = g.meta.id + "-shadow";
  r.prompt = p.tokens;
  r.sampling = g.req.sampling;
  r.max_tokens = p.max_tokens;
  r.ignore_eos = g.req.ignore_eos;
  r.variant = target.variant;
  r.deadline = g.deadline;
  auto channel = std::make_shared<RequestChannel>();
  if (!engine_->submit(std::move(r), channel).is_ok()) return;  // a full queue drops the copy, never the request
  metrics_
      .counter("glassbox_shadow_requests_total", "Requests copied onto a shadow model (answers never returned)",
               {{"model", g.model.name}, {"shadow", target.name}})
      .inc();
  std::lock_guard<std::mutex> lock(shadow_mutex_);
  shadows_.push_back({g.meta.id, g.model.name, target.name, std::move(channel), {}, Clock::now()});
}

void Server::drain_shadows(bool cancel) {
  {
    std::lock_guard<std::mutex> lock(shadow_mutex_);
    for (size_t i = 0; i < shadows_.size();) {
      ShadowRun& s = shadows_[i];
      if (cancel) s.channel->cancel();
      GenerationEvent ev;
      bool done = false;
      while (!done && s.channel->pop(&ev, std::chrono::milliseconds(0))) {
        for (const GeneratedToken& t : ev.tokens) s.tokens.push_back(t.token);
        if (ev.finish != FinishReason::kNone) {
          done = true;
          json line = {{"event", "shadow"},
                       {"request_id", s.request_id},
                       {"model", s.model},
                       {"shadow_model", s.shadow_model},
                       {"finish_reason", finish_reason_name(ev.finish)},
                       {"completion_tokens", s.tokens.size()},
                       {"token_ids", s.tokens},
                       {"e2e_s", seconds_between(s.start, Clock::now())}};
          if (!ev.error.empty()) line["error"] = ev.error;
          write_log(line);
        }
      }
      if (done || cancel) {
        shadows_.erase(shadows_.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
  }
}

std::optional<Server::Refusal> Server::submit_choices(Generation* g) {
  g->submitted = Clock::now();
  const int32_t n = g->req.n;
  for (ChoiceState& c : g->choices) {
    GenerationRequest r;
    r.id = g->meta.id + "-" + std::to_string(c.index);
    r.prompt = g->req.prompts[c.prompt_index].tokens;
    r.sampling = g->req.sampling;
    // n > 1 with a seed: choice i draws from seed + i, so each choice is reproducible alone.
    if (r.sampling.has_seed) r.sampling.seed += static_cast<uint64_t>(c.index % n);
    r.max_tokens = g->req.prompts[c.prompt_index].max_tokens;
    r.ignore_eos = g->req.ignore_eos;
    r.top_logprobs = g->req.top_logprobs;
    // The engine scores the prompt with as many alternatives as echo's logprobs or
    // prompt_logprobs ask for; each answer takes its own share.
    r.prompt_logprobs = std::max(g->req.prompt_logprobs, g->req.echo ? g->req.top_logprobs : -1);
    r.glass = g->glass.spec;
    r.variant = g->model.variant;
    r.deadline = g->deadline;
    // The engine's code says why it refused (queue full: 429, draining: 503, else invalid: 400).
    EngineErrorCode code = EngineErrorCode::kNone;
    Status st = engine_->submit(std::move(r), c.channel, &code);
    if (st.is_ok()) continue;
    for (ChoiceState& other : g->choices) other.channel->cancel();
    const ApiError e = engine_error(code, st.message());
    g->status = e.status;
    g->error_message = e.message;
    g->audit();
    // Count the choices as finished so finalize() does not log a disconnect.
    g->finalized = true;
    unregister_generation(g);
    in_flight_.fetch_sub(1);
    hot_.in_flight.add(-1);
    return Refusal{e, code == EngineErrorCode::kDraining    ? "draining"
                      : code == EngineErrorCode::kQueueFull ? "queue_full"
                                                            : "invalid"};
  }
  return std::nullopt;
}

}  // namespace gb::server
