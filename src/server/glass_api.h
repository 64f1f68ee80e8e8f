// The glass box over HTTP: who may use it (roles, the interventions switch, session access), the
// state an admin changes at run time — policy, presets, the control-vector library, session sets
// and the versioned global default set, each set stored resolved when it is PUT — and the
// observation memory budgets. Parsing, resolution, the limits and the report JSON are the glass
// module's (glass/codec.h, glass/limits.h); the request syntax is documented there.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "glass/codec.h"
#include "glass/control_vector.h"
#include "glass/glass.h"
#include "glass/limits.h"
#include "glass/repetition.h"
#include "model/config.h"
#include "server/auth.h"
#include "server/config.h"
#include "server/openai_request.h"

namespace gb::server {

// A stored session set and who may use it (X-Glassbox-Session).
struct GlassSession {
  std::shared_ptr<const InterventionSet> set;
  bool restricted = false;        // false: open to the roles in glassbox_policy.intervention_roles
  std::vector<Role> roles;        // restricted: these roles ...
  std::vector<std::string> keys;  // ... and these key ids
};

// Everything the glass box serves from, as one immutable snapshot (copy on write: a request takes
// a shared_ptr and never waits for an admin change). Sets are shared between snapshots.
struct GlassState {
  bool interventions_enabled = false;
  GlassPolicyConfig policy;  // roles, caps, layers, points, files; policy.presets: each preset's items
  GlassLimits limits;        // the policy's bounds, as the glass module takes them
  std::map<std::string, std::shared_ptr<const InterventionSet>> presets;
  std::map<std::string, std::shared_ptr<const ControlVector>> vectors;  // the control-vector library
  std::map<std::string, GlassSession> sessions;
  std::vector<std::shared_ptr<const InterventionSet>> defaults;  // the global default set, every version (1-based)
  int64_t default_version = 0;                                   // the version in force (0: none)

  GlassCatalog catalog() const { return {&presets, &vectors}; }
};

// What a request's `glassbox` extension (+ session + default set) resolved to.
struct GlassRequest {
  std::shared_ptr<const GlassSpec> spec;  // null: the request uses nothing (runs as a plain one)
  bool intervenes = false;                // some intervention applies (the request is audited)
  nlohmann::json audit_spec;              // what was asked (canonical, bounded) and which sets applied
  std::vector<std::string> stats;         // which statistics the report lists (empty: all)
  std::optional<RepetitionStop> stop_on_repetition;
  std::shared_ptr<const void> observation;  // its share of max_observation_bytes, given back when dropped
  int64_t observation_bytes = 0;
};

class GlassService {
 public:
  // model may be null (an engine without a model, e.g. the test fake): every glass-box request
  // then gets a 400.
  GlassService(const ServerConfig& cfg, const ModelConfig* model);

  // Loads the configured control vectors and resolves the configured presets against the model:
  // a bad file or preset stops the server at start, naming it.
  Status init();

  // Resolves a request: ext is body["glassbox"] (null if absent), session the X-Glassbox-Session
  // header (empty if absent), n_sequences the request's prompts × n. Errors: 400 for a malformed
  // field (named), an unknown preset, vector or session, a strength or a stack of items over a cap
  // (the cap named), too many interventions, or observation over max_request_observation_bytes;
  // 403 when interventions are off, the caller's role may not observe or intervene, the session is
  // not open to the caller, or a layer / point is outside the policy; 429 when the observation of
  // the requests in flight fills max_observation_bytes.
  std::optional<ApiError> resolve(const nlohmann::json* ext, const std::string& session, const Caller& caller,
                                  int64_t n_sequences, GlassRequest* out) const;

  // 403 unless the caller's role may observe (glassbox_policy.observe_roles); param names the field.
  std::optional<ApiError> may_observe(const Caller& caller, const std::string& param) const;
  // 403 unless interventions are on and the caller's role may intervene (intervention_roles).
  std::optional<ApiError> may_intervene(const Caller& caller, const std::string& param) const;
  // Reserves per_sequence × n_sequences bytes of observation under max_request_observation_bytes
  // (400, naming param) and max_observation_bytes (429); *reservation gives them back when dropped.
  std::optional<ApiError> reserve_observation(int64_t per_sequence, int64_t n_sequences, const std::string& param,
                                              std::shared_ptr<const void>* reservation,
                                              int64_t* reserved = nullptr) const;

  // ---- admin changes; each returns the change as JSON for the audit log, or an error ----
  // PUT replaces the whole policy (absent keys take their defaults, presets included; the change
  // lists what it removed); PATCH merges (RFC 7396: a key set to null returns to its default,
  // `caps` and `presets` merge by name, null deleting one). A policy under which a stored set
  // (preset, session, default set) would be refused is itself refused (409, every conflict listed).
  std::optional<ApiError> set_policy(const nlohmann::json& body, nlohmann::json* change);
  std::optional<ApiError> patch_policy(const nlohmann::json& body, nlohmann::json* change);
  std::optional<ApiError> put_preset(const std::string& name, const nlohmann::json& body, nlohmann::json* change);
  std::optional<ApiError> delete_preset(const std::string& name, nlohmann::json* change);
  // body: {"path": GGUF} (a file on the server) or {"directions": {"<layer>": [n_embd floats], ...}}
  std::optional<ApiError> put_vector(const std::string& name, const nlohmann::json& body, nlohmann::json* change);
  std::optional<ApiError> delete_vector(const std::string& name, nlohmann::json* change);
  // body: {"interventions": [...], "roles": [...], "keys": [...]}; without roles and keys the
  // session is open to glassbox_policy.intervention_roles.
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
  // Puts back a snapshot taken by state() (of this service or one made from the same config and
  // model), unchecked and unaudited: for tests and fuzzing, never an admin route.
  void restore(std::shared_ptr<const GlassState> snapshot) {
    std::lock_guard<std::mutex> lock(mutex_);
    state_ = std::move(snapshot);
  }
  bool available() const { return model_ != nullptr; }
  // Observation bytes held by the requests in flight (max_observation_bytes bounds it).
  int64_t observation_in_use() const { return observation_used_->load(); }

 private:
  // Applies fn to a copy of the state and swaps it in if fn succeeds.
  template <class F>
  std::optional<ApiError> update(F&& fn);
  // A PUT defining a set ({"interventions": [...]} + extra keys): parsed and resolved against the
  // candidate state, checked alone, then store(state, set) keeps it.
  template <class F>
  std::optional<ApiError> put_set(const nlohmann::json& body, const std::vector<std::string>& extra_keys,
                                  bool allow_presets, F&& store);
  // Shared by PUT and PATCH: st.policy and st.limits are the candidate; presets (name -> items or
  // null) replace or delete the named presets.
  std::optional<ApiError> apply_policy(GlassState& st, const nlohmann::json& presets, bool replace_presets,
                                       nlohmann::json* change) const;

  const ModelConfig* model_;
  nlohmann::json presets_source_;  // the config file's presets, resolved by init()
  int64_t max_request_observation_bytes_, max_observation_bytes_;
  std::shared_ptr<std::atomic<int64_t>> observation_used_;
  mutable std::mutex mutex_;  // guards state_ (the pointer, not the snapshot)
  std::shared_ptr<const GlassState> state_;
  CommitHook commit_hook_;
};

// The glass module's limits for a policy.
GlassLimits glass_limits(const GlassPolicyConfig& p);

// The per-choice `glassbox` object of a response: the report (glass_report_json), the choice's
// repetition rate and, when stop_on_repetition ended it, "stopped_by": "repetition" and
// "stopped": {"by", "window_rate", "max_rate", "ngram", "window"}.
nlohmann::json glass_choice_json(const GlassReport& r, const GlassRequest& g, const RepetitionTracker& repetition,
                                 bool stopped_by_repetition);

}  // namespace gb::server
