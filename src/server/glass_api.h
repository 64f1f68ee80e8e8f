// The glass box over HTTP: the `glassbox` extension of a request body (observation and
// interventions; the OpenAI SDKs send it through extra_body) turned into a resolved GlassSpec
// under the server's policy, the report turned back into JSON, and the state an admin changes at
// run time — policy, presets, the control-vector library, session sets and the versioned global
// default set.
//
// Request syntax (every field optional):
//   "glassbox": {
//     "observe": {"points": ["resid_post"] | "all", "layers": "all" | [0, 3] | {"from": 2, "to": 9},
//                 "tokens": "all" | "prompt" | "generated" | "first" | [positions], "top_k": 4,
//                 "stats": ["max_abs", "median_abs", "rms", "mean", "top_k"], "detect_massive": true,
//                 "capture": [{"point": "resid_post", "layer": 3, "token": 0}]},
//     "interventions": [
//       {"op": "scale", "point": "mlp_act", "layer": 14, "dims": [8949], "strength": -0.98},
//       {"op": "add", "point": "resid_post", "layers": {"from": 2, "to": 5}, "vector": [...] | "name", "strength": 4},
//       {"op": "clamp", "point": "resid_post", "layers": "all", "strength": 30 | "inf"},
//       {"op": "clip_massive", "point": "resid_post", "layer": 2, "threshold": 100, "strength": 0 | "mean": [...]},
//       {"control_vector": "happy", "strength": 0.8},
//       {"preset": "neuron-14-8949-low"}],
//     "massive": {"min_abs": 100, "min_ratio": 1000},
//     "stop_on_repetition": {"ngram": 4, "window": 64, "max_rate": 0.6}
//   }
// plus the session set named by the X-Glassbox-Session header and the global default set.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/control_vector.h"
#include "model/glass.h"
#include "server/auth.h"
#include "server/config.h"
#include "server/openai_request.h"

namespace gb::server {

// Everything the glass box serves from, as one immutable snapshot (copy on write: a request takes
// a shared_ptr and never waits for an admin change).
struct GlassState {
  bool interventions_enabled = false;
  GlassPolicyConfig policy;
  std::map<std::string, std::shared_ptr<const ControlVector>> vectors;  // the control-vector library
  std::map<std::string, nlohmann::json> sessions;  // session id -> list of interventions
  std::vector<nlohmann::json> defaults;            // the global default set, every version (1-based); may be empty
  int64_t default_version = 0;                     // the version in force (0: none)
};

// Stop a sequence whose generated text loops: over the last `window` n-grams, the fraction that
// already occurred earlier in the output.
struct RepetitionStop {
  int32_t ngram = 4;
  int32_t window = 64;
  double max_rate = 0.6;
};

// What a request's `glassbox` extension (+ session + default set) resolved to.
struct GlassRequest {
  std::shared_ptr<const GlassSpec> spec;  // null: the request uses nothing (runs as a plain one)
  bool intervenes = false;                // some intervention applies (the request is audited)
  nlohmann::json audit_spec;              // what was asked and what applied, for the audit row
  std::vector<std::string> stats;         // which statistics the report lists (empty: all)
  std::optional<RepetitionStop> stop_on_repetition;
};

class GlassService {
 public:
  // model may be null (an engine without a model, e.g. the test fake): every glass-box request
  // then gets a 400.
  GlassService(const ServerConfig& cfg, const ModelConfig* model);

  // Loads the configured control vectors and checks the presets against the model: a bad file
  // or preset stops the server at start, naming it.
  Status init();

  // Resolves a request: ext is body["glassbox"] (null if absent), session the X-Glassbox-Session
  // header (empty if absent). Errors: 400 for a malformed field (named), an unknown preset, vector
  // or session, or a strength over its cap (the cap named); 403 when interventions are off, the
  // caller's role may not observe or intervene, or a layer / point is outside the policy.
  std::optional<ApiError> resolve(const nlohmann::json* ext, const std::string& session, const Caller& caller,
                                  GlassRequest* out) const;

  // ---- admin changes; each returns the change as JSON for the audit log, or an error ----
  std::optional<ApiError> set_policy(const nlohmann::json& body, nlohmann::json* change);
  std::optional<ApiError> put_preset(const std::string& name, const nlohmann::json& body, nlohmann::json* change);
  std::optional<ApiError> delete_preset(const std::string& name, nlohmann::json* change);
  // body: {"path": GGUF} (a file on the server) or {"directions": {"<layer>": [n_embd floats], ...}}
  std::optional<ApiError> put_vector(const std::string& name, const nlohmann::json& body, nlohmann::json* change);
  std::optional<ApiError> delete_vector(const std::string& name, nlohmann::json* change);
  std::optional<ApiError> put_session(const std::string& id, const nlohmann::json& body, nlohmann::json* change);
  std::optional<ApiError> delete_session(const std::string& id, nlohmann::json* change);
  // body: {"interventions": [...]} becomes the next version; rollback returns to the previous one.
  std::optional<ApiError> put_default(const nlohmann::json& body, nlohmann::json* change);
  std::optional<ApiError> rollback_default(nlohmann::json* change);

  // Runs after an admin change validated and before it takes effect, under the state lock; an
  // error cancels the change and is returned. The server appends the change's audit row here, so
  // no change takes effect before its row is committed. Null: none.
  using CommitHook = std::function<std::optional<ApiError>()>;
  void set_commit_hook(CommitHook hook) {
    std::lock_guard<std::mutex> lock(mutex_);
    commit_hook_ = std::move(hook);
  }

  // GET /admin/glassbox: the policy, presets, vectors (name, layers, norms), sessions, default set.
  nlohmann::json describe() const;

  std::shared_ptr<const GlassState> state() const;
  bool available() const { return model_ != nullptr; }

 private:
  // Parses a list of interventions (request syntax). policy: check roles' caps, layers, points
  // (request-supplied and admin-defined sets alike are checked against caps, layers and points).
  std::optional<ApiError> parse_interventions(const nlohmann::json& list, const std::string& where,
                                              const GlassState& st, bool allow_presets,
                                              std::vector<Intervention>* out) const;
  std::optional<ApiError> parse_one(const nlohmann::json& item, const std::string& where, const GlassState& st,
                                    bool allow_presets, std::vector<Intervention>* out) const;
  std::optional<ApiError> check_policy(const std::vector<Intervention>& ivs, const std::string& where,
                                       const GlassState& st) const;
  // A PUT defining a set ({"interventions": [...]}): validated against the candidate state, then
  // store(state, list) keeps it.
  template <class F>
  std::optional<ApiError> put_set(const nlohmann::json& body, bool allow_presets, F&& store);
  // Applies fn to a copy of the state and swaps it in if fn succeeds.
  template <class F>
  std::optional<ApiError> update(F&& fn);

  const ModelConfig* model_;
  mutable std::mutex mutex_;  // guards state_ (the pointer, not the snapshot)
  std::shared_ptr<const GlassState> state_;
  CommitHook commit_hook_;
};

// The per-choice `glassbox` object of a response: report (stats per layer and point), events,
// captures and applied. stats filters the report's fields (empty: all).
nlohmann::json glass_report_json(const GlassReport& r, const std::vector<std::string>& stats);

// The n-gram repetition rate of a token sequence, incrementally: the fraction of its n-grams that
// already occurred earlier in it, overall and over the last `window` n-grams.
class RepetitionTracker {
 public:
  explicit RepetitionTracker(int32_t n, int32_t window = 64);
  void push(int32_t token);
  double rate() const { return total_ > 0 ? static_cast<double>(repeated_) / static_cast<double>(total_) : 0.0; }
  double window_rate() const;
  int64_t ngrams() const { return total_; }
  int32_t window() const { return window_; }

 private:
  int32_t n_, window_;
  std::vector<int32_t> last_;            // the last n tokens
  std::unordered_set<uint64_t> seen_;    // hashes of the n-grams so far
  std::vector<uint8_t> recent_;          // ring of the last `window` n-grams: 1 = repeated
  int64_t recent_sum_ = 0;
  int64_t total_ = 0, repeated_ = 0;
};

}  // namespace gb::server
