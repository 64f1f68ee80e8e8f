// `glassbox eval`: an A/B between arms — the served model, a weight variant, a glass-box
// intervention, or a combination — on a dataset, through the OpenAI API of a server: one started
// in this process (--model, with --variant and --config as `serve` takes them) or any other
// (--url: ours, vLLM, llama-server), so the same table compares engines. Every request streams
// (TTFT and inter-token gaps are the client's), every sample is stored in DIR/samples.db as it
// finishes, and re-running the same command resumes; the report (DIR/report.{json,md} and the
// length and accuracy plots) is computed from the store alone, as `glassbox eval report DIR` does.
//
// Jobs run problem by problem, every arm of a (problem, sample) next to each other, so drift on
// a shared host hits the arms alike; the seed of a (problem, sample) is the same for every arm.
#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <tuple>

#include "cli/backend.h"
#include "cli/commands.h"
#include "cli/common_flags.h"
#include "cli/report_files.h"
#include "core/mapped_file.h"
#include "eval/dataset.h"
#include "eval/report.h"
#include "eval/store.h"
#include "server/audit.h"
#include "server/config.h"
#include "server/lifecycle.h"

namespace gb::cli {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct EvalOptions {
  std::string model, config_file, url, api_key, served_model, data, prompt_template, out;
  std::vector<std::string> variants, arms;
  int threads = 0;
  int64_t max_tokens = 256;
  int samples = 1;
  int concurrency = 4;
  int64_t seed = 0;
  int64_t limit = 0;
  bool token_ids = true;
  // Sampling, sent only when given (so a strict server sees only fields it knows).
  std::optional<double> temperature, top_p, min_p, presence_penalty, frequency_penalty, repetition_penalty;
  std::optional<int64_t> top_k;
  std::string report_path, report_out;
};

struct Arm {
  std::string name;
  json overlay = json::object();  // merged into every request body of the arm
};

// NAME, NAME=model:VARIANT, NAME=preset:PRESET, or NAME={JSON}: request fields merged into the
// body ("model", sampling fields, "max_tokens", "glassbox"), with "preset": P and
// "interventions": [...] as shorthands for the glassbox extension.
Result<Arm> parse_arm(const std::string& text) {
  Arm arm;
  const size_t eq = text.find('=');
  arm.name = text.substr(0, eq);
  if (!server::valid_model_name(arm.name))
    return Status::error("--arm '" + text + "': the name must be 1 to 64 letters, digits or . _ - :");
  if (eq == std::string::npos) return arm;
  const std::string spec = text.substr(eq + 1);
  json j;
  if (spec.rfind("model:", 0) == 0) {
    j = {{"model", spec.substr(6)}};
  } else if (spec.rfind("preset:", 0) == 0) {
    j = {{"preset", spec.substr(7)}};
  } else {
    j = json::parse(spec, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object())
      return Status::error("--arm '" + arm.name +
                           "': expected NAME, NAME=model:VARIANT, NAME=preset:PRESET or NAME={JSON}");
  }
  for (auto& [k, v] : j.items()) {
    if (k == "preset") {
      if (!v.is_string()) return Status::error("--arm '" + arm.name + "': \"preset\" must be a name");
      arm.overlay["glassbox"]["interventions"].push_back({{"preset", v}});
    } else if (k == "interventions") {
      if (!v.is_array()) return Status::error("--arm '" + arm.name + "': \"interventions\" must be a list");
      for (const json& i : v) arm.overlay["glassbox"]["interventions"].push_back(i);
    } else if (k == "glassbox") {
      if (!v.is_object()) return Status::error("--arm '" + arm.name + "': \"glassbox\" must be an object");
      arm.overlay["glassbox"].update(v);
    } else if (k == "messages" || k == "prompt" || k == "stream" || k == "n") {
      return Status::error("--arm '" + arm.name + "': \"" + k + "\" is set by eval, not by an arm");
    } else {
      arm.overlay[k] = v;
    }
  }
  return arm;
}

// The part of a URL httplib's Client takes ("http://host:port") and the path prefix before /v1.
struct Endpoint {
  std::string origin, prefix;
};

Result<Endpoint> parse_url(std::string url) {
  while (!url.empty() && url.back() == '/') url.pop_back();
  if (url.size() >= 3 && url.substr(url.size() - 3) == "/v1") url.resize(url.size() - 3);
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos || url.substr(0, scheme) != "http")
    return Status::error("--url '" + url + "': expected http://HOST:PORT[/PREFIX] (https is not supported)");
  const size_t path = url.find('/', scheme + 3);
  Endpoint e;
  e.origin = url.substr(0, path);
  if (path != std::string::npos) e.prefix = url.substr(path);
  return e;
}

// One streamed request: what came back and when.
struct Reply {
  int status = 0;
  std::string error;  // transport error or the server's error message
  std::string text, finish_reason;
  std::vector<int32_t> token_ids;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  double ttft_ms = -1, latency_ms = 0;
  std::vector<double> itl_ms;
};

class Client {
 public:
  Client(const Endpoint& e, std::string key) : endpoint_(e), key_(std::move(key)) {}

  Reply post(const std::string& path, const json& body) const {
    httplib::Client cli(endpoint_.origin);
    cli.set_read_timeout(3600, 0);
    cli.set_connection_timeout(30, 0);
    httplib::Request req;
    req.method = "POST";
    req.path = endpoint_.prefix + path;
    req.headers = {{"Content-Type", "application/json"}, {"Accept", "text/event-stream"}};
    if (!key_.empty()) req.headers.emplace("Authorization", "Bearer " + key_);
    req.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
    Reply r;
    std::string buffer, raw;
    const auto t0 = Clock::now();
    auto last = t0;
    bool done = false;
    const bool chat = path.find("chat") != std::string::npos;
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      const auto now = Clock::now();
      raw.append(data, std::min(n, size_t{1 << 16}));
      buffer.append(data, n);
      size_t end;
      while ((end = buffer.find("\n\n")) != std::string::npos) {
        const std::string event = buffer.substr(0, end);
        buffer.erase(0, end + 2);
        for (size_t pos = 0; pos < event.size();) {
          size_t nl = event.find('\n', pos);
          if (nl == std::string::npos) nl = event.size();
          std::string line = event.substr(pos, nl - pos);
          pos = nl + 1;
          if (!line.empty() && line.back() == '\r') line.pop_back();
          if (line.rfind("data:", 0) != 0) continue;
          std::string payload = line.substr(5);
          if (!payload.empty() && payload[0] == ' ') payload.erase(0, 1);
          if (payload == "[DONE]") {
            done = true;
            continue;
          }
          const json chunk = json::parse(payload, nullptr, false);
          if (!chunk.is_object()) continue;
          if (chunk.contains("error")) r.error = chunk["error"].value("message", chunk["error"].dump());
          if (chunk.contains("usage") && chunk["usage"].is_object()) {
            r.prompt_tokens = chunk["usage"].value("prompt_tokens", int64_t{0});
            r.completion_tokens = chunk["usage"].value("completion_tokens", int64_t{0});
          }
          if (!chunk.contains("choices") || !chunk["choices"].is_array() || chunk["choices"].empty()) continue;
          const json& c = chunk["choices"][0];
          const std::string piece =
              chat ? (c.contains("delta") && c["delta"].contains("content") && c["delta"]["content"].is_string()
                          ? c["delta"]["content"].get<std::string>()
                          : std::string())
                   : c.value("text", std::string());
          size_t ids_before = r.token_ids.size();
          if (c.contains("logprobs") && c["logprobs"].is_object()) {
            const json& lp = c["logprobs"];
            const json tokens = chat ? lp.value("content", json::array()) : lp.value("tokens", json::array());
            for (const json& t : tokens) {
              const json& name = chat ? (t.is_object() ? t.value("token", json()) : json()) : t;
              if (name.is_string() && name.get<std::string>().rfind("token_id:", 0) == 0)
                r.token_ids.push_back(std::atoi(name.get<std::string>().c_str() + 9));
            }
          }
          if (!piece.empty() || r.token_ids.size() > ids_before) {
            const double ms = std::chrono::duration<double, std::milli>(now - t0).count();
            if (r.ttft_ms < 0) r.ttft_ms = ms;
            else r.itl_ms.push_back(std::chrono::duration<double, std::milli>(now - last).count());
            last = now;
            r.text += piece;
          }
          if (c.contains("finish_reason") && c["finish_reason"].is_string()) r.finish_reason = c["finish_reason"];
        }
      }
      return true;
    };
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    const bool ok = cli.send(req, res, err);
    r.latency_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    r.status = res.status;
    if (!ok) {
      r.error = "cannot reach " + endpoint_.origin + ": " + httplib::to_string(err);
    } else if (res.status != 200) {
      const json e = json::parse(raw, nullptr, false);
      r.error =
          "HTTP " + std::to_string(res.status) + ": " +
          (e.is_object() && e.contains("error") && e["error"].is_object() ? e["error"].value("message", std::string())
                                                                          : raw.substr(0, 300));
    } else if (r.error.empty() && (!done || r.finish_reason.empty())) {
      r.error = "the stream ended before its last chunk";
    }
    if (r.ttft_ms < 0) r.ttft_ms = r.latency_ms;
    return r;
  }

  Result<json> get(const std::string& path) const {
    httplib::Client cli(endpoint_.origin);
    cli.set_connection_timeout(30, 0);
    httplib::Headers h;
    if (!key_.empty()) h.emplace("Authorization", "Bearer " + key_);
    auto res = cli.Get((endpoint_.prefix + path).c_str(), h);
    if (!res) return Status::error("cannot reach " + endpoint_.origin + ": " + httplib::to_string(res.error()));
    if (res->status != 200) return Status::error("GET " + path + ": HTTP " + std::to_string(res->status));
    json j = json::parse(res->body, nullptr, false);
    if (j.is_discarded()) return Status::error("GET " + path + ": not JSON");
    return j;
  }

 private:
  Endpoint endpoint_;
  std::string key_;
};

std::string file_sha256(const std::string& path) {
  Result<std::string> text = read_file(path);
  return text.is_ok() ? server::sha256_hex(*text) : std::string();
}

// A progress line: on a terminal rewritten in place; otherwise a line at each tenth.
class Progress {
 public:
  Progress(size_t total, std::vector<std::string> arms) : total_(total), arms_(std::move(arms)), tty_(isatty(2)) {
    for (const auto& a : arms_) per_arm_[a];
  }
  void add(const eval::Sample& s) {
    std::lock_guard<std::mutex> lock(mu_);
    ++done_;
    auto& [n, graded, correct] = per_arm_[s.arm];
    ++n;
    graded += s.graded;
    correct += s.graded && s.correct;
    const auto now = Clock::now();
    if (tty_ ? now - last_ < std::chrono::milliseconds(200) && done_ < total_ : done_ * 10 / total_ == tenth_) return;
    last_ = now;
    tenth_ = done_ * 10 / total_;
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double eta = done_ > 0 ? secs / static_cast<double>(done_) * static_cast<double>(total_ - done_) : 0;
    std::string line = "eval: " + std::to_string(done_) + "/" + std::to_string(total_) + " samples, ETA " +
                       std::to_string(static_cast<int64_t>(eta)) + " s";
    for (const auto& a : arms_) {
      const auto& [an, ag, ac] = per_arm_[a];
      char buf[96];
      if (ag > 0)
        std::snprintf(buf, sizeof buf, " | %s %.1f%% of %lld", a.c_str(), 100.0 * ac / ag, static_cast<long long>(ag));
      else std::snprintf(buf, sizeof buf, " | %s %lld", a.c_str(), static_cast<long long>(an));
      line += buf;
    }
    std::fprintf(stderr, tty_ ? "\r%s\033[K" : "%s\n", line.c_str());
    if (tty_ && done_ == total_) std::fprintf(stderr, "\n");
  }

 private:
  std::mutex mu_;
  size_t total_, done_ = 0, tenth_ = 0;
  std::vector<std::string> arms_;
  std::map<std::string, std::tuple<int64_t, int64_t, int64_t>> per_arm_;
  bool tty_;
  Clock::time_point start_ = Clock::now(), last_;
};

int write_report(const eval::EvalStore& store, const std::string& out_dir) {
  Result<std::vector<eval::Sample>> samples = store.samples();
  if (!samples.is_ok()) {
    std::fprintf(stderr, "glassbox eval: %s\n", samples.message().c_str());
    return 1;
  }
  const json report = eval::build_report(store.settings(), *samples);
  const std::string md = eval::report_markdown(report);
  std::fputs(md.c_str(), stdout);
  Status st = write_report_files("eval", out_dir,
                                 {{"report.json", report.dump(2, ' ', false, json::error_handler_t::replace) + "\n"},
                                  {"report.md", md},
                                  {"lengths.svg", eval::lengths_svg(report)},
                                  {"accuracy.svg", eval::accuracy_svg(report)}});
  if (!st.is_ok()) {
    std::fprintf(stderr, "glassbox eval: %s\n", st.message().c_str());
    return 1;
  }
  return 0;
}

int run_eval(const EvalOptions& o) {
  auto fail = [](const std::string& why, int code = 2) {
    std::fprintf(stderr, "glassbox eval: %s\n", why.c_str());
    return code;
  };
  if (o.model.empty() == o.url.empty()) return fail("give --model (run in this process) or --url (a server), not both");
  if (!o.url.empty() && (!o.variants.empty() || !o.config_file.empty()))
    return fail("--variant and --config configure the in-process server; with --url the server has its own");
  if (o.data.empty()) return fail("--data FILE is required");
  if (o.out.empty()) return fail("--out DIR is required");
  if (o.arms.empty()) return fail("give at least one --arm NAME[=SPEC]");
  if (o.samples < 1 || o.concurrency < 1 || o.max_tokens < 1)
    return fail("--samples, --concurrency and --max-tokens must be at least 1");

  Result<std::vector<eval::Problem>> loaded = eval::load_dataset(o.data, o.prompt_template);
  if (!loaded.is_ok()) return fail(loaded.message());
  std::vector<eval::Problem> problems = std::move(loaded).value();
  if (o.limit > 0 && static_cast<int64_t>(problems.size()) > o.limit) problems.resize(static_cast<size_t>(o.limit));
  std::vector<Arm> arms;
  for (const std::string& a : o.arms) {
    Result<Arm> arm = parse_arm(a);
    if (!arm.is_ok()) return fail(arm.message());
    for (const Arm& b : arms) {
      if (b.name == arm->name) return fail("--arm '" + b.name + "' is given twice");
    }
    arms.push_back(std::move(arm).value());
  }

  // The server: in this process, or the one at --url.
  std::unique_ptr<server::LocalServer> local;
  Endpoint endpoint;
  std::string key = o.api_key;
  std::string served = o.served_model;
  std::filesystem::create_directories(o.out);
  if (!o.model.empty()) {
    server::ConfigOverrides flags = {{"model", o.model}, {"host", "127.0.0.1"}, {"port", "0"}};
    if (o.threads > 0) flags["threads"] = std::to_string(o.threads);
    if (!o.variants.empty()) {
      std::string v;
      for (const std::string& s : o.variants) {
        if (!v.empty()) v += '\n';
        v += s;
      }
      flags["variants"] = v;
    }
    std::mt19937_64 rng(std::random_device{}());
    key = "sk-eval-" + std::to_string(rng());
    flags["api_key"] = key;
    flags["log_level"] = "warn";
    if (!served.empty()) flags["served_model_name"] = served;
    // Steering arms need interventions on; every steered sample is then audited beside the samples.
    bool steers = false;
    for (const Arm& a : arms) steers = steers || a.overlay.contains("glassbox");
    if (steers) {
      flags["interventions"] = "true";
      flags["audit_db"] = (std::filesystem::path(o.out) / "audit.db").string();
    }
    auto cfg = server::load_config(o.config_file, server::process_env(), flags);
    if (!cfg.is_ok()) return fail("server config: " + cfg.message());
    served = cfg->served_model_name;
    auto started = server::LocalServer::start(*cfg, make_backend, [](const std::string&) {});
    if (!started.is_ok()) return fail(started.message(), 1);
    local = std::move(started).value();
    endpoint.origin = "http://127.0.0.1:" + std::to_string(local->port());
  } else {
    Result<Endpoint> e = parse_url(o.url);
    if (!e.is_ok()) return fail(e.message());
    endpoint = *e;
    if (key.empty()) {
      for (const char* var : {"GLASSBOX_API_KEY", "OPENAI_API_KEY"}) {
        if (const char* v = std::getenv(var); v != nullptr && *v != '\0' && key.empty()) key = v;
      }
    }
  }
  const Client client(endpoint, key);
  if (served.empty()) {
    Result<json> models = client.get("/v1/models");
    if (!models.is_ok()) return fail(models.message(), 1);
    if (!(*models).contains("data") || (*models)["data"].empty() || !(*models)["data"][0].contains("id"))
      return fail("/v1/models names no model; give --served-model", 1);
    served = (*models)["data"][0]["id"].get<std::string>();
  }

  // What the samples depend on: a store with other settings is refused, not mixed.
  std::string task = problems.empty() ? "" : eval::task_kind_name(problems[0].kind);
  for (const eval::Problem& p : problems) {
    if (eval::task_kind_name(p.kind) != task) task = "mixed";
  }
  json sampling = json::object();
  auto opt = [&sampling](const char* k, const auto& v) {
    if (v) sampling[k] = *v;
  };
  opt("temperature", o.temperature);
  opt("top_p", o.top_p);
  opt("top_k", o.top_k);
  opt("min_p", o.min_p);
  opt("presence_penalty", o.presence_penalty);
  opt("frequency_penalty", o.frequency_penalty);
  opt("repetition_penalty", o.repetition_penalty);
  json arm_settings = json::array();
  for (const Arm& a : arms) {
    arm_settings.push_back({{"name", a.name},
                            {"spec", a.overlay},
                            {"model", a.overlay.value("model", served)},
                            {"max_tokens", a.overlay.value("max_tokens", o.max_tokens)}});
  }
  json problem_ids = json::array();
  for (const eval::Problem& p : problems) problem_ids.push_back(p.id);
  const json settings = {{"data", o.data},
                         {"data_sha256", file_sha256(o.data)},
                         {"problems", problems.size()},
                         {"problem_ids", problem_ids},
                         {"task", task},
                         {"prompt_template", o.prompt_template},
                         {"server", o.url.empty() ? "in-process " + o.model : o.url},
                         {"samples_per_problem", o.samples},
                         {"seed", o.seed},
                         {"max_tokens", o.max_tokens},
                         {"sampling", sampling},
                         {"token_ids", o.token_ids},
                         {"arms", arm_settings},
                         {"expected_samples", static_cast<int64_t>(problems.size() * arms.size()) * o.samples}};
  Result<std::unique_ptr<eval::EvalStore>> opened =
      eval::EvalStore::open((std::filesystem::path(o.out) / "samples.db").string(), settings);
  if (!opened.is_ok()) return fail(opened.message());
  eval::EvalStore& store = **opened;

  struct Job {
    size_t problem, arm;
    int32_t sample;
  };
  std::vector<Job> jobs;
  size_t stored = 0;
  for (size_t p = 0; p < problems.size(); ++p) {
    for (int32_t s = 0; s < o.samples; ++s) {
      for (size_t a = 0; a < arms.size(); ++a) {
        Result<bool> has = store.has(arms[a].name, problems[p].id, s);
        if (!has.is_ok()) return fail(has.message(), 1);
        if (*has) ++stored;
        else jobs.push_back({p, a, s});
      }
    }
  }
  if (stored > 0)
    std::fprintf(stderr, "glassbox eval: resuming %s: %zu samples stored, %zu to run\n", o.out.c_str(), stored,
                 jobs.size());
  std::vector<std::string> arm_names;
  for (const Arm& a : arms) arm_names.push_back(a.name);
  Progress progress(std::max<size_t>(jobs.size(), 1), arm_names);
  std::atomic<size_t> next{0}, finished{0};
  std::atomic<bool> stop{false};
  std::mutex err_mu;
  std::string first_error;
  auto worker = [&] {
    while (!stop) {
      const size_t j = next++;
      if (j >= jobs.size()) return;
      const Job& job = jobs[j];
      const eval::Problem& p = problems[job.problem];
      const Arm& arm = arms[job.arm];
      const int64_t seed = o.seed + static_cast<int64_t>(job.problem) * o.samples + job.sample;
      json body = {{"model", served},
                   {"max_tokens", o.max_tokens},
                   {"seed", seed},
                   {"stream", true},
                   {"stream_options", {{"include_usage", true}}}};
      body.update(sampling);
      if (p.chat) body["messages"] = p.messages;
      else body["prompt"] = p.prompt;
      if (o.token_ids) {
        body["return_tokens_as_token_ids"] = true;
        if (p.chat) body["logprobs"] = true, body["top_logprobs"] = 0;
        else body["logprobs"] = 0;
      }
      body.update(arm.overlay);
      const Reply r = client.post(p.chat ? "/v1/chat/completions" : "/v1/completions", body);
      if (!r.error.empty()) {
        std::lock_guard<std::mutex> lock(err_mu);
        if (first_error.empty()) first_error = "arm '" + arm.name + "', problem '" + p.id + "': " + r.error;
        stop = true;
        return;
      }
      eval::Sample s;
      s.arm = arm.name;
      s.problem_id = p.id;
      s.sample = job.sample;
      s.seed = seed;
      s.text = r.text;
      s.token_ids = r.token_ids;
      s.prompt_tokens = r.prompt_tokens;
      s.completion_tokens = r.completion_tokens > 0 ? r.completion_tokens : static_cast<int64_t>(r.token_ids.size());
      s.finish_reason = r.finish_reason;
      s.ttft_ms = r.ttft_ms;
      s.latency_ms = r.latency_ms;
      s.itl_ms = r.itl_ms;
      if (p.reference) {
        const eval::Verdict v = eval::grade(p.kind, r.text, *p.reference);
        s.graded = true;
        s.extracted = v.extracted;
        s.correct = v.correct;
        s.strict_extracted = v.strict_extracted;
        s.strict_correct = v.strict_correct;
      }
      if (Status st = store.insert(s); !st.is_ok()) {
        std::lock_guard<std::mutex> lock(err_mu);
        if (first_error.empty()) first_error = st.message();
        stop = true;
        return;
      }
      ++finished;
      progress.add(s);
    }
  };
  std::vector<std::thread> pool;
  for (int i = 0; i < o.concurrency; ++i) pool.emplace_back(worker);
  for (std::thread& t : pool) t.join();
  // A run that stored nothing (refused at its first request) has no report to write.
  const int rc = stored + finished > 0 || first_error.empty() ? write_report(store, o.out) : 0;
  if (!first_error.empty()) {
    return fail("stopped: " + first_error +
                    " (every finished sample is stored; fix the cause and re-run the same command to resume)",
                1);
  }
  return rc;
}

int run_report(const EvalOptions& o) {
  std::string path = o.report_path;
  if (std::filesystem::is_directory(path)) path = (std::filesystem::path(path) / "samples.db").string();
  if (!std::filesystem::exists(path)) {
    std::fprintf(stderr, "glassbox eval report: %s: no such store (give the --out DIR of a run or its samples.db)\n",
                 path.c_str());
    return 2;
  }
  Result<std::unique_ptr<eval::EvalStore>> store = eval::EvalStore::open_existing(path);
  if (!store.is_ok()) {
    std::fprintf(stderr, "glassbox eval report: %s\n", store.message().c_str());
    return 1;
  }
  const std::string out = !o.report_out.empty() ? o.report_out : std::filesystem::path(path).parent_path().string();
  return write_report(**store, out.empty() ? "." : out);
}

}  // namespace

void register_eval(CLI::App& app, Action* action) {
  auto o = std::make_shared<EvalOptions>();
  CLI::App* cmd = app.add_subcommand(
      "eval", "A/B arms (model, variant, intervention) on a dataset: accuracy, truncation, length, latency");
  add_model_flag(*cmd, &o->model)->description("run a server in this process on this model (or --url)");
  cmd->add_option("--variant", o->variants, "in-process: a weight variant NAME=PATH (repeatable), as serve takes it");
  cmd->add_option("--config", o->config_file, "in-process: a serve config file (presets, policy, variants)");
  add_threads_flag(*cmd, &o->threads);
  cmd->add_option("--url", o->url, "an OpenAI-compatible server instead (http://HOST:PORT)");
  cmd->add_option("--api-key", o->api_key, "--url's key (default: $GLASSBOX_API_KEY, else $OPENAI_API_KEY)");
  cmd->add_option("--served-model", o->served_model, "the `model` the arms default to (default: the server's first)");
  cmd->add_option("--data", o->data, "JSONL: GSM8K, MATH or {prompt|messages, expected?} rows");
  cmd->add_option("--arm", o->arms,
                  "NAME, NAME=model:VARIANT, NAME=preset:PRESET or NAME={JSON request fields} (repeatable)");
  cmd->add_option("--prompt-template", o->prompt_template, "for GSM8K/MATH rows; {question} is replaced");
  cmd->add_option("--max-tokens", o->max_tokens, "max_tokens of every request (an arm may set its own)")
      ->capture_default_str();
  cmd->add_option("--samples", o->samples, "samples per problem and arm")->capture_default_str();
  cmd->add_option("--concurrency", o->concurrency, "requests in flight")->capture_default_str();
  cmd->add_option("--seed", o->seed, "base seed: a (problem, sample) gets seed + index, the same in every arm")
      ->capture_default_str();
  cmd->add_option("--limit", o->limit, "only the first N problems");
  cmd->add_option("--temperature", o->temperature, "sampling temperature (default: the server's)");
  cmd->add_option("--top-p", o->top_p, "top_p");
  cmd->add_option("--top-k", o->top_k, "top_k (vLLM and Glassbox extension)");
  cmd->add_option("--min-p", o->min_p, "min_p");
  cmd->add_option("--presence-penalty", o->presence_penalty, "presence_penalty");
  cmd->add_option("--frequency-penalty", o->frequency_penalty, "frequency_penalty");
  cmd->add_option("--repetition-penalty", o->repetition_penalty, "repetition_penalty");
  cmd->add_flag("!--no-token-ids", o->token_ids,
                "do not ask for token ids (a server without return_tokens_as_token_ids)");
  cmd->add_option("--out,-o", o->out, "directory: samples.db, report.json, report.md, lengths.svg, accuracy.svg");
  CLI::App* report = cmd->add_subcommand("report", "Rebuild the report of a stored run");
  report->add_option("store", o->report_path, "the run's --out DIR or its samples.db")->required();
  report->add_option("--out,-o", o->report_out, "where the report goes (default: beside the store)");
  cmd->callback(
      [action, o, report] { *action = [o, report] { return report->parsed() ? run_report(*o) : run_eval(*o); }; });
}

}  // namespace gb::cli
