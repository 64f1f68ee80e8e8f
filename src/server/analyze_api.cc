// POST /v1/glassbox/analyze: the layer analyses of `glassbox scan`, `depth` and `lens`
// (src/analysis) over HTTP, for the dashboard and notebooks. The analysis's requests run on the
// serving engine like any request (the same step, hook points and glass box; no second model),
// on the base or a weight variant; the observation they hold counts against the same budgets as
// a request's `observe`. Observing needs a role in glassbox_policy.observe_roles; depth's skip
// runs intervene, so they need the intervention role and are audited like a steered request.
//
// Body: {"kind": "scan" | "depth" | "lens", "model"?: NAME, "prompt": P | "prompts": [P, ...]}
// (P: text, tokenized with the special tokens, or token ids), and per kind:
//   scan:  "points"?: [point, ...], "top_k"?: 1..16, "massive"?: {"min_abs", "min_ratio", "median",
//          "fire_on"} (the request rule's fields),
//          "heat_map"?: bool (each resid_post row's max/median of the first prompt),
//          "sinks"?: bool (the attention mass on the first token per full-attention layer)
//   depth: "skip"?: bool, "skip_block"?: 1..n_layers (default 4): also the prompts' perplexity with
//          each layer and the least-change block of 2..skip_block layers skipped (the `skip` op:
//          interventions, so the intervention role and an audit row committed before any run)
//   lens:  one prompt; "top_k"?: 1..20
// Answer: {"object": "glassbox.analysis", "id", "kind", "model", "usage": {"prompt_tokens"},
// "result": the same JSON the CLI writes (scan.json, depth.json, lens.json, less the file names)}.
#include <httplib.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>

#include "analysis/depth.h"
#include "analysis/lens.h"
#include "analysis/scan.h"
#include "server/audit.h"
#include "server/json_input.h"
#include "server/server.h"
#include "server/server_internal.h"

namespace gb::server {

using json = nlohmann::json;

namespace {

ApiError bad(const std::string& param, const std::string& message) { return invalid_field(param, message); }

// The prompts of the body: texts (tokenized) or token-id arrays.
std::optional<ApiError> parse_prompts(const json& body, const TextCodec& codec, int32_t max_prompts, int32_t max_tokens,
                                      std::vector<std::vector<int32_t>>* prompts, std::vector<std::string>* texts) {
  const bool one = body.contains("prompt"), many = body.contains("prompts");
  if (one == many) return bad("prompts", "give the prompt (\"prompt\") or the prompts (\"prompts\": [...]), not both");
  std::vector<const json*> items;
  std::string where = "prompt";
  if (one) {
    items.push_back(&body["prompt"]);
  } else {
    const json& arr = body["prompts"];
    where = "prompts";
    if (!arr.is_array() || arr.empty())
      return bad("prompts", "prompts: expected a non-empty array of texts or token-id arrays");
    if (arr.size() > static_cast<size_t>(max_prompts))
      return bad("prompts", "prompts: " + std::to_string(arr.size()) + " prompts, at most " +
                                std::to_string(max_prompts) + (max_prompts == 1 ? " (lens takes one)" : " (max_n)"));
    for (const json& p : arr) items.push_back(&p);
  }
  const int64_t vocab = codec.vocab_size();
  for (size_t i = 0; i < items.size(); ++i) {
    const json& p = *items[i];
    const std::string w = many ? where + "[" + std::to_string(i) + "]" : where;
    std::vector<int32_t> ids;
    if (p.is_string()) {
      if (p.get<std::string>().empty()) return bad(w, w + ": the prompt is empty");
      ids = codec.encode(p.get<std::string>(), /*add_special=*/true);
      texts->push_back(p.get<std::string>());
    } else if (p.is_array()) {
      for (size_t k = 0; k < p.size(); ++k) {
        int64_t id = 0;
        if (!json_integer(p[k], 0, vocab - 1, &id))
          return bad(w, w + "[" + std::to_string(k) + "]: expected a token id in [0, " + std::to_string(vocab) + ")");
        ids.push_back(static_cast<int32_t>(id));
      }
      std::string t;
      for (int32_t id : ids) {
        if (!t.empty()) t += ' ';
        t += std::to_string(id);
      }
      texts->push_back(t);
    } else {
      return bad(w, w + ": expected a text or an array of token ids");
    }
    if (ids.empty()) return bad(w, w + ": the prompt has no tokens");
    if (static_cast<int64_t>(ids.size()) > max_tokens)
      return bad(w, w + ": " + std::to_string(ids.size()) + " tokens, at most " + std::to_string(max_tokens) +
                        " (max_model_len − 1)");
    prompts->push_back(std::move(ids));
  }
  return std::nullopt;
}

std::optional<ApiError> parse_top_k(const json& body, int64_t hi, int32_t* out) {
  if (!body.contains("top_k")) return std::nullopt;
  int64_t k = 0;
  if (!json_integer(body["top_k"], 1, hi, &k))
    return bad("top_k", "top_k: expected an integer in 1.." + std::to_string(hi));
  *out = static_cast<int32_t>(k);
  return std::nullopt;
}

std::optional<ApiError> parse_scan(const json& body, analysis::ScanParams* p) {
  if (body.contains("points")) {
    const json& pts = body["points"];
    if (!pts.is_array() || pts.empty()) return bad("points", "points: expected a non-empty array of point names");
    std::string list;
    for (const json& v : pts) {
      if (!v.is_string()) return bad("points", "points: expected point names");
      if (!list.empty()) list += ',';
      list += v.get<std::string>();
    }
    auto parsed = analysis::parse_points(list);
    if (!parsed.is_ok()) return bad("points", "points: " + quote_input(parsed.message(), 200));
    p->points = *parsed;
  }
  if (auto e = parse_top_k(body, kMaxTopK, &p->top_k)) return e;
  if (body.contains("massive")) {
    const json& m = body["massive"];
    if (!m.is_object()) return bad("massive", "massive: expected {min_abs, min_ratio, median, fire_on}");
    for (const auto& [k, v] : m.items()) {
      if (k == "median" || k == "fire_on") {
        const std::string name = v.is_string() ? v.get<std::string>() : "";
        const auto med = parse_massive_median(name);
        const auto fire = parse_massive_fire(name);
        if (k == "median" ? !med : !fire)
          return bad("massive." + k, k == "median"
                                         ? "massive.median: expected \"layer\" or \"token\""
                                         : "massive.fire_on: expected \"both\", \"abs\", \"ratio\" or \"either\"");
        if (k == "median") p->rule.median = *med;
        else p->rule.fire_on = *fire;
        continue;
      }
      if (k != "min_abs" && k != "min_ratio")
        return bad("massive",
                   "massive." + quote_input(k, 40) + ": unknown field (min_abs, min_ratio, median, fire_on)");
      if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
        return bad("massive." + k, "massive." + k + ": expected a finite number >= 0");
      (k == "min_abs" ? p->rule.min_abs : p->rule.min_ratio) = v.get<float>();
    }
  }
  if (body.contains("sinks")) {
    if (!body["sinks"].is_boolean()) return bad("sinks", "sinks: expected true or false");
    p->sinks = body["sinks"].get<bool>();
  }
  if (body.contains("heat_map")) {
    if (!body["heat_map"].is_boolean()) return bad("heat_map", "heat_map: expected true or false");
    p->heat_map = body["heat_map"].get<bool>();
  }
  return std::nullopt;
}

}  // namespace

void Server::handle_analyze(const httplib::Request& req, const std::string& body_text, httplib::Response& res) {
  const Clock::time_point arrival = Clock::now();
  const std::string request_id = new_request_id("analysis-");
  res.set_header("X-Request-Id", request_id);
  const State state = state_.load(std::memory_order_acquire);
  if (state != State::kReady) {
    ApiError e = state == State::kStarting
                     ? make_error(503, "service_unavailable", "not_ready", "the model is still loading; retry shortly")
                     : make_error(503, "service_unavailable", "draining", "the server is shutting down");
    return send_error(res, e);
  }
  Caller caller;
  ApiError err;
  if (!authorize(req, Role::kUser, &caller, &err)) return send_error(res, err);
  if (auto e = take_rate(caller, arrival)) return send_error(res, *e);
  const ModelConfig* mc = engine_->model_config();
  if (mc == nullptr || !glass_->available())
    return send_error(res, bad("kind", "this server's engine does not support the glass box"));
  if (auto e = glass_->may_observe(caller, "kind")) return send_error(res, *e);

  json body;
  if (auto e = parse_json_body(body_text, &body)) return send_error(res, *e);
  if (!body.is_object()) return send_error(res, bad("", "the body must be a JSON object"));
  static const std::set<std::string> kKeys = {"kind",    "model",    "prompt", "prompts", "points",    "top_k",
                                              "massive", "heat_map", "sinks",  "skip",    "skip_block"};
  for (const auto& [k, v] : body.items()) {
    if (!kKeys.count(k))
      return send_error(
          res, bad(k, quote_input(k, 40) + ": unknown field (kind, model, prompt, prompts, points, top_k, massive, "
                                           "heat_map)"));
  }
  const std::string kind = body.contains("kind") && body["kind"].is_string() ? body["kind"].get<std::string>() : "";
  if (kind != "scan" && kind != "depth" && kind != "lens")
    return send_error(res, bad("kind", "kind: expected \"scan\", \"depth\" or \"lens\""));
  for (const char* k : {"points", "massive", "heat_map", "sinks"}) {
    if (kind != "scan" && body.contains(k)) return send_error(res, bad(k, std::string(k) + ": only for kind \"scan\""));
  }
  if (kind == "depth" && body.contains("top_k")) return send_error(res, bad("top_k", "top_k: not for kind \"depth\""));
  for (const char* k : {"skip", "skip_block"}) {
    if (kind != "depth" && body.contains(k))
      return send_error(res, bad(k, std::string(k) + ": only for kind \"depth\""));
  }
  bool skip = false;
  int64_t skip_block = 4;
  if (body.contains("skip")) {
    if (!body["skip"].is_boolean()) return send_error(res, bad("skip", "skip: expected true or false"));
    skip = body["skip"].get<bool>();
  }
  if (body.contains("skip_block")) {
    if (!skip) return send_error(res, bad("skip_block", "skip_block: only with \"skip\": true"));
    if (!json_integer(body["skip_block"], 1, mc->n_layers, &skip_block))
      return send_error(res,
                        bad("skip_block", "skip_block: expected an integer in 1.." + std::to_string(mc->n_layers)));
  }
  if (skip) {
    if (auto e = glass_->may_intervene(caller, "skip")) return send_error(res, *e);
  }

  std::string model_name = cfg_.served_model_name;
  if (body.contains("model")) {
    if (!body["model"].is_string()) return send_error(res, bad("model", "model: expected a string"));
    model_name = body["model"].get<std::string>();
  }
  std::shared_lock<std::shared_mutex> routing(routes_mutex_);  // the variant stays loaded while analysed
  ServedModel served;
  if (!find_model(model_name, &served)) {
    ApiError e = make_error(404, "not_found_error", "model_not_found",
                            "The model " + quote_input(model_name) + " is not served here (GET /v1/models)");
    e.param = "model";
    return send_error(res, e);
  }

  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> texts;
  if (auto e = parse_prompts(body, *codec_, kind == "lens" ? 1 : static_cast<int32_t>(cfg_.max_n), max_model_len_ - 1,
                             &prompts, &texts))
    return send_error(res, *e);

  // HTTP-level concurrency, as for a generation request.
  if (auto e = take_slot()) return send_error(res, *e);
  hot_.in_flight.add(1);
  struct Slot {
    Server* s;
    ~Slot() {
      s->in_flight_.fetch_sub(1);
      s->hot_.in_flight.add(-1);
    }
  } slot{this};

  // The analysis's requests run on the serving engine; each batch of them holds its observation
  // (captures included) in the server's budget until the answer is written.
  const Clock::time_point deadline = arrival + to_micros(cfg_.request_timeout_s);
  std::vector<std::shared_ptr<const void>> reservations;
  std::optional<ApiError> refusal;
  int64_t n_run = 0;
  const analysis::Runner run = [&](std::vector<GenerationRequest> reqs) -> Result<std::vector<analysis::RunOutput>> {
    int64_t bytes = 0;
    for (const GenerationRequest& r : reqs) bytes += r.glass != nullptr ? observation_bytes(*r.glass, *mc) : 0;
    std::shared_ptr<const void> held;
    if (auto e = glass_->reserve_observation(bytes, 1, kind == "lens" ? "prompt" : "prompts", &held)) {
      refusal = e;
      return Status::error(e->message);
    }
    reservations.push_back(std::move(held));
    std::vector<std::shared_ptr<RequestChannel>> channels;
    for (GenerationRequest& r : reqs) {
      r.id = request_id + "-" + std::to_string(n_run++);
      r.variant = served.variant;
      r.deadline = deadline;
      channels.push_back(std::make_shared<RequestChannel>());
      EngineErrorCode code = EngineErrorCode::kNone;
      if (Status st = engine_->submit(std::move(r), channels.back(), &code); !st.is_ok()) {
        for (auto& c : channels) c->cancel();
        refusal = engine_error(code, st.message());
        return st;
      }
    }
    std::vector<analysis::RunOutput> outs(channels.size());
    Status failed = Status::ok();
    for (size_t i = 0; i < channels.size(); ++i) {
      while (outs[i].finish == FinishReason::kNone) {
        GenerationEvent ev;
        if (!channels[i]->pop(&ev, std::chrono::milliseconds(200))) continue;  // the engine's deadline ends it
        if (Status st = analysis::absorb_event(std::move(ev), &outs[i]); !st.is_ok() && failed.is_ok()) failed = st;
      }
    }
    if (!failed.is_ok()) return failed;
    return outs;
  };

  // Skip runs intervene: their audit row is committed before any of them runs (and gets the
  // answer's status at the end).
  AuditRecord row;
  if (skip) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      if (prompts[i].size() < 2)
        return send_error(res, bad("prompts", "skip: every prompt needs at least 2 tokens to have a perplexity"));
    }
    if (audit_ == nullptr)
      return send_error(res, make_error(503, "service_unavailable", "audit_unavailable",
                                        "skip: interventions need the audit store (audit_db)"));
    json skips = json::array();
    for (int32_t l = 0; l < mc->n_layers; ++l) skips.push_back({{"op", "skip"}, {"layer", l}});
    row.kind = "request";
    row.key_id = caller.key_id;
    row.request_id = request_id;
    row.model = served.name;
    row.action = "/v1/glassbox/analyze";
    row.spec_json = json{{"analysis", {{"kind", "depth"}, {"skip", true}, {"skip_block", skip_block}}},
                         {"interventions", skips},
                         {"blocks", "the least-change block of each length 2..skip_block (the answer names them)"}}
                        .dump();
    int64_t tokens = 0;
    for (const auto& p : prompts) tokens += static_cast<int64_t>(p.size());
    row.prompt_tokens = tokens;
    if (Status st = audit_->append(&row); !st.is_ok()) {
      ApiError e =
          make_error(503, "service_unavailable", "audit_unavailable",
                     "the audit store cannot record this analysis, so its skip runs do not run: " + st.message());
      e.retry_after_s = 5;
      return send_error(res, e);
    }
  }
  const ModelConfig& c = *mc;
  json result;
  int64_t prompt_tokens = 0;
  for (const auto& p : prompts) prompt_tokens += static_cast<int64_t>(p.size());
  Status failed = Status::ok();
  if (kind == "scan") {
    analysis::ScanParams params;
    if (auto e = parse_scan(body, &params)) return send_error(res, *e);
    auto r = analysis::run_scan(run, params, c, prompts);
    if (r.is_ok()) {
      auto text = [&](int32_t p, int32_t pos) {
        return codec_->token_text(prompts[static_cast<size_t>(p)][static_cast<size_t>(pos)]);
      };
      result = analysis::scan_report(params, texts, *r, text).json;
      if (params.heat_map) result["heat_map"] = r->heat;
    } else {
      failed = r.status();
    }
  } else if (kind == "depth") {
    auto d = analysis::run_depth(run, c, prompts);
    if (d.is_ok()) {
      result = analysis::depth_json(*d);
      result["n_prompts"] = prompts.size();
      if (skip) {
        auto t = analysis::skip_perplexities(run, c, prompts, *d, static_cast<int32_t>(skip_block));
        if (t.is_ok()) {
          result["skip"] = std::move(t->json);
        } else {
          failed = t.status();
        }
      }
    } else {
      failed = d.status();
    }
  } else {
    int32_t top_k = 3;
    if (auto e = parse_top_k(body, 20, &top_k)) return send_error(res, *e);
    auto head = [&](const float* x, int64_t n, float* logits) { return engine_->output_head(x, n, logits); };
    auto g = analysis::run_lens(run, c, prompts[0], head, top_k);
    if (g.is_ok()) {
      auto text = [&](int32_t id) { return codec_->token_text(id); };
      result = analysis::lens_json(*g, prompts[0], text);
      result["top_k"] = top_k;
    } else {
      failed = g.status();
    }
  }
  routing.unlock();
  json line = {{"event", "analysis"},
               {"request_id", request_id},
               {"key_id", caller.key_id},
               {"kind", kind},
               {"model", served.name},
               {"prompts", prompts.size()},
               {"prompt_tokens", prompt_tokens},
               {"e2e_s", seconds_between(arrival, Clock::now())}};
  metrics_
      .counter("glassbox_analysis_requests_total", "POST /v1/glassbox/analyze requests, by kind and outcome",
               {{"kind", kind},
                {"outcome", refusal          ? "refused"
                            : failed.is_ok() ? "ok"
                                             : "error"}})
      .inc();
  auto record = [&](int status) {
    if (row.id == 0) return;
    row.status = status;
    if (Status st = audit_->update_result(row); !st.is_ok())
      spdlog::error("audit: cannot record how analysis {} ended (its row {} stays at status 0): {}", request_id, row.id,
                    st.message());
  };
  if (!failed.is_ok()) {
    const ApiError e = refusal ? *refusal
                               : make_error(500, "server_error", "analysis_failed",
                                            "the analysis failed: " + quote_input(failed.message(), 300));
    line["status"] = e.status;
    line["error"] = e.message;
    write_log(line);
    record(e.status);
    return send_error(res, e);
  }
  record(200);
  line["status"] = 200;
  write_log(line);
  json answer = {{"object", "glassbox.analysis"},
                 {"id", request_id},
                 {"kind", kind},
                 {"model", served.name},
                 {"usage", {{"prompt_tokens", prompt_tokens}}},
                 {"result", std::move(result)}};
  res.set_content(answer.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

}  // namespace gb::server
