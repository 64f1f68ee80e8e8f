#include "engine/engine.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <future>
#include <string_view>

#include "ops/attention.h"

namespace gb {

int64_t kv_block_bytes(const ModelConfig& config, int32_t block_size, DType dtype) {
  const int64_t n_attn_layers = std::max<int64_t>(1, config.n_layers_of(LayerKind::kAttention));
  return int64_t{2} * n_attn_layers * config.kv_dim() * block_size * (dtype == DType::kF32 ? 4 : 2);
}

bool parse_kv_cache_dtype(std::string_view name, DType* out) {
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    if (name == dtype_name(d)) {
      *out = d;
      return true;
    }
  }
  return false;
}

Result<std::unique_ptr<Engine>> Engine::create(Model* model, const EngineConfig& config_in) {
  EngineConfig config = config_in;
  const ModelConfig& mc = model->config();
  if (config.max_model_len <= 0) config.max_model_len = mc.max_pos;
  if (config.max_model_len > mc.max_pos) {
    return Status::error("max_model_len " + std::to_string(config.max_model_len) +
                         " exceeds the model's context length " + std::to_string(mc.max_pos));
  }
  if (config.scheduler.max_num_seqs <= 0) return Status::error("max_num_seqs must be positive");
  if (config.scheduler.max_num_batched_tokens <= 0) return Status::error("max_num_batched_tokens must be positive");
  if (config.scheduler.max_num_batched_tokens > model->max_batch_tokens()) {
    return Status::error("max_num_batched_tokens " + std::to_string(config.scheduler.max_num_batched_tokens) +
                         " exceeds the model's activation buffers (" + std::to_string(model->max_batch_tokens()) +
                         " tokens); load the model with a larger max_batch_tokens");
  }
  if (config.block_size <= 0) return Status::error("block_size must be positive");
  if (!ops::kv_dtype_supported(config.kv_cache_dtype)) {
    return Status::error("kv_cache_dtype must be f32, bf16 or f16 (got " +
                         std::string(dtype_name(config.kv_cache_dtype)) + ")");
  }
  const int64_t bytes_per_block = kv_block_bytes(mc, config.block_size, config.kv_cache_dtype);
  config.scheduler.recurrent_state = mc.hybrid();
  int64_t n_blocks;
  if (config.kv_cache_bytes > 0) {
    n_blocks = config.kv_cache_bytes / bytes_per_block;
  } else {
    const int64_t per_seq = (config.max_model_len + config.block_size - 1) / config.block_size;
    n_blocks = std::min<int64_t>(per_seq * config.scheduler.max_num_seqs, kAutoKvCacheMaxBytes / bytes_per_block);
  }
  const int64_t min_blocks = (config.max_model_len + config.block_size - 1) / config.block_size;
  if (n_blocks < min_blocks) {
    return Status::error("KV cache of " + std::to_string(n_blocks) +
                         " blocks cannot hold one sequence of max_model_len " + std::to_string(config.max_model_len) +
                         " tokens (" + std::to_string(min_blocks) + " blocks of " + std::to_string(bytes_per_block) +
                         " bytes); raise the KV cache size or lower max_model_len");
  }
  GB_ASSIGN_OR_RETURN(auto cache, KvCache::create(mc, static_cast<int32_t>(n_blocks), config.block_size,
                                                  config.scheduler.max_num_seqs, config.kv_cache_dtype));
  cache->prefault();
  if (mc.hybrid()) {
    std::fprintf(stderr,
                 "glassbox: hybrid model (%d linear-attention layers): prefix caching is off (a cached KV block "
                 "does not carry the recurrent state at its end); %d recurrent state slots, %.1f MiB\n",
                 mc.n_layers_of(LayerKind::kLinearAttention), config.scheduler.max_num_seqs,
                 static_cast<double>(cache->state_bytes()) / (1 << 20));
  }
  return std::unique_ptr<Engine>(new Engine(model, config, std::move(cache)));
}

Engine::Engine(Model* model, const EngineConfig& config, std::unique_ptr<KvCache> cache)
    : model_(model),
      config_(config),
      blocks_(cache->n_blocks(), config.block_size, cache->n_state_slots()),
      scheduler_(config.scheduler, &blocks_),
      runner_(model, std::move(cache), config.scheduler.max_num_seqs, config.block_size, config.monitor),
      logprobs_(model->config().vocab),
      sample_scratch_(static_cast<size_t>(model->pool().size()) * static_cast<size_t>(model->config().vocab)),
      eos_ids_(model->config().eos_ids) {
  stats_.kv_blocks_total = blocks_.n_blocks();
  stats_.running_by_variant.assign(static_cast<size_t>(model->n_variants()) + 1, 0);
  stats_.waiting_by_variant.assign(static_cast<size_t>(model->n_variants()) + 1, 0);
  refresh_variants_locked();  // no other thread yet
  monitor_state_.reset(model->config().n_layers, config.monitor);
}

Engine::~Engine() { stop(); }

Status Engine::validate(const GenerationRequest& request) const {
  const int32_t vocab = model_->config().vocab;
  if (request.prompt.empty()) return Status::error("the prompt is empty");
  for (int32_t t : request.prompt) {
    if (t < 0 || t >= vocab)
      return Status::error("prompt token id " + std::to_string(t) + " is outside the vocabulary");
  }
  if (request.max_tokens < 0 || (request.max_tokens == 0 && request.prompt_logprobs < 0))
    return Status::error("max_tokens must be positive (0 only with prompt_logprobs: scoring the prompt)");
  if (request.prompt_logprobs < -1 || request.prompt_logprobs > vocab)
    return Status::error("prompt_logprobs must be -1 (off) or 0.." + std::to_string(vocab));
  if (request.top_logprobs < -1 || request.top_logprobs > vocab)
    return Status::error("top_logprobs must be -1 (off) or 0.." + std::to_string(vocab));
  const int64_t total = static_cast<int64_t>(request.prompt.size()) + request.max_tokens;
  if (total > config_.max_model_len) {
    return Status::error("prompt (" + std::to_string(request.prompt.size()) + " tokens) + max_tokens (" +
                         std::to_string(request.max_tokens) + ") = " + std::to_string(total) +
                         " exceeds the context length " + std::to_string(config_.max_model_len));
  }
  GB_RETURN_IF_ERROR(request.sampling.validate(vocab));
  if (request.glass != nullptr && !(request.glass->resolved_for == glass_shape(model_->config()))) {
    return Status::error("the glass spec was not resolved for this model (resolve_glass_spec with its config)");
  }
  return Status::ok();
}

Status Engine::submit(GenerationRequest request, std::shared_ptr<RequestChannel> channel, EngineErrorCode* code) {
  EngineErrorCode unused;
  if (code == nullptr) code = &unused;
  *code = EngineErrorCode::kInvalidRequest;
  GB_RETURN_IF_ERROR(validate(request));
  const int32_t vocab = model_->config().vocab;
  const int64_t total = static_cast<int64_t>(request.prompt.size()) + request.max_tokens;
  std::unique_ptr<GlassAccumulator> glass;
  bool skip_prefix_lookup = false;
  // A variant's KV differs from the base's for the same tokens: its blocks get their own hashes.
  if (request.variant != 0) {
    constexpr uint64_t kVariantSaltTag = 0x76617269616e7400ull;  // "variant\0"
    request.cache_salt =
        BlockManager::hash_block(request.cache_salt, {}, kVariantSaltTag ^ static_cast<uint64_t>(request.variant));
  }
  if (request.glass != nullptr) {
    const GlassSpec& g = *request.glass;
    const int32_t n_prompt = static_cast<int32_t>(request.prompt.size());
    // Blocks computed under an intervention never serve another request (or a plain one).
    if (const uint64_t salt = glass_kv_salt(g, n_prompt); salt != 0) {
      request.cache_salt = BlockManager::hash_block(request.cache_salt, {}, salt);
    }
    // Observing prompt tokens needs them computed, not taken from the prefix cache.
    const ObserveSpec& ob = g.observe;
    if (ob.enabled) {
      bool prompt_rows = ob.tokens.scope != TokenScope::kGenerated;
      if (ob.tokens.scope == TokenScope::kPositions) prompt_rows = ob.tokens.positions.front() < n_prompt;
      for (const CaptureRequest& cr : ob.captures) prompt_rows |= cr.position < n_prompt;
      skip_prefix_lookup = prompt_rows;
    }
    glass = std::make_unique<GlassAccumulator>(request.glass, model_->config());
  }
  auto seq = std::make_unique<Sequence>();
  seq->glass = std::move(glass);
  // Prompt logprobs need every prompt row computed, not taken from the prefix cache.
  seq->skip_prefix_lookup = skip_prefix_lookup || request.prompt_logprobs >= 0;
  seq->sampler = std::make_unique<Sampler>(request.sampling, vocab);
  seq->sampler->set_prompt(request.prompt);
  seq->tokens = request.prompt;
  seq->tokens.reserve(total);
  seq->n_prompt = static_cast<int32_t>(request.prompt.size());
  seq->arrival = Clock::now();
  seq->request = std::move(request);
  seq->channel = std::move(channel);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!accepting_) {
      *code = EngineErrorCode::kDraining;
      return Status::error("the engine is draining and accepts no new requests");
    }
    if (seq->request.variant != 0 && std::none_of(variants_.begin(), variants_.end(), [&](const VariantStatus& v) {
          return v.id == seq->request.variant;
        })) {
      return Status::error("variant " + std::to_string(seq->request.variant) + " is not loaded (0 is the base)");
    }
    if (static_cast<int64_t>(inbox_.size()) + stats_.waiting >= config_.max_queue) {
      *code = EngineErrorCode::kQueueFull;
      return Status::error("the request queue is full (" + std::to_string(config_.max_queue) + " waiting)");
    }
    if (seq->glass != nullptr) ++stats_.glass_requests;
    inbox_.push_back(std::move(seq));
  }
  *code = EngineErrorCode::kNone;
  wake_.notify_one();
  return Status::ok();
}

void Engine::refresh_variants_locked() {
  variants_.clear();
  const std::vector<VariantInfo>& vs = model_->variants();
  for (size_t i = 0; i < vs.size(); ++i) {
    const VariantInfo& v = vs[i];
    const int32_t id = static_cast<int32_t>(i + 1);
    if (!v.active || std::find(retiring_.begin(), retiring_.end(), id) != retiring_.end()) continue;
    VariantStatus s{id, v.name, v.source, v.path, v.version, v.sha256, v.bytes, v.n_edits, {}};
    for (const patch::GoldenPrompt& g : v.golden) s.golden.emplace_back(g.prompt, g.greedy);
    variants_.push_back(std::move(s));
  }
}

std::vector<VariantStatus> Engine::variants() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return variants_;
}

Result<int32_t> Engine::load_variant(const patch::Patch& patch, const std::string& name, double scale) {
  // The heavy part here, beside the running steps: it only reads the base weights.
  GB_ASSIGN_OR_RETURN(std::shared_ptr<PreparedVariant> prepared,
                      model_->prepare_variant(patch, name, static_cast<float>(scale)));
  auto commit = [this, prepared] {
    const int32_t id = model_->commit_variant(std::move(*prepared));
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.running_by_variant.resize(static_cast<size_t>(id) + 1, 0);
    stats_.waiting_by_variant.resize(static_cast<size_t>(id) + 1, 0);
    refresh_variants_locked();
    return id;
  };
  if (!thread_.joinable()) return commit();  // synchronous mode: no step runs now
  auto done = std::make_shared<std::promise<int32_t>>();
  std::future<int32_t> id = done->get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_) return Status::error("the engine has stopped");
    tasks_.push_back([done, commit] { done->set_value(commit()); });
  }
  wake_.notify_one();
  return id.get();
}

Status Engine::output_head(const float* x, int64_t n, float* logits) const {
  std::lock_guard<std::mutex> lock(head_mutex_);
  model_->output_head(x, n, logits, &head_pool_);
  return Status::ok();
}

Status Engine::unload_variant(int32_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (std::none_of(variants_.begin(), variants_.end(), [id](const VariantStatus& v) { return v.id == id; }))
    return Status::error("variant " + std::to_string(id) + " is not loaded");
  retiring_.push_back(id);
  refresh_variants_locked();  // submit refuses it from now on
  return Status::ok();
}

void Engine::run_control() {
  std::vector<std::function<void()>> tasks;
  std::vector<int32_t> retiring;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks.swap(tasks_);
    retiring = retiring_;
  }
  for (auto& t : tasks) t();
  if (retiring.empty()) return;
  std::vector<int32_t> freed;
  for (int32_t id : retiring) {
    auto on_it = [id](const std::unique_ptr<Sequence>& s) { return s->request.variant == id; };
    if (std::any_of(scheduler_.running().begin(), scheduler_.running().end(), on_it) ||
        std::any_of(scheduler_.waiting().begin(), scheduler_.waiting().end(), on_it))
      continue;
    if (model_->remove_variant(id).is_ok()) freed.push_back(id);
  }
  if (freed.empty()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  std::erase_if(retiring_, [&](int32_t id) { return std::find(freed.begin(), freed.end(), id) != freed.end(); });
  refresh_variants_locked();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

MonitorSnapshot Engine::monitor() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return monitor_state_;
}

void Engine::set_monitor(const MonitorConfig& config) {
  std::lock_guard<std::mutex> lock(mutex_);
  monitor_state_.config = config;
  monitor_changed_ = true;
}

void Engine::record_monitor(const std::vector<ScheduledSeq>& scheduled) {
  std::lock_guard<std::mutex> lock(mutex_);
  monitor_state_.record(runner_.monitor_step(),
                        [&](int32_t seq_index) -> const std::string& { return scheduled[seq_index].seq->request.id; });
}

void Engine::take_inbox() {
  std::vector<std::unique_ptr<Sequence>> incoming;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    incoming.swap(inbox_);
  }
  for (auto& s : incoming) scheduler_.add(std::move(s));
}

void Engine::finish(Sequence* seq, FinishReason reason, EngineErrorCode code, const std::string& error) {
  GenerationEvent ev;
  ev.finish = reason;
  ev.error = error;
  ev.error_code = code;
  ev.prompt_tokens = seq->n_prompt;
  ev.cached_prompt_tokens = seq->n_cached_prompt;
  if (seq->glass != nullptr) ev.glass = std::make_shared<GlassReport>(seq->glass->report());
  seq->channel->push(std::move(ev));
  scheduler_.finish(seq);
}

void Engine::reap_cancelled() {
  const Clock::time_point now = Clock::now();
  bool draining_past_deadline;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    draining_past_deadline = !accepting_ && now >= drain_deadline_;
  }
  auto& done = done_;
  done.clear();
  auto check = [&](Sequence* s) {
    if (s->channel->cancelled()) done.push_back({s, FinishReason::kCancelled, EngineErrorCode::kCancelled});
    else if (draining_past_deadline) done.push_back({s, FinishReason::kCancelled, EngineErrorCode::kDraining});
    else if (now >= s->request.deadline) done.push_back({s, FinishReason::kTimeout, EngineErrorCode::kTimeout});
  };
  for (const auto& s : scheduler_.running()) check(s.get());
  for (const auto& s : scheduler_.waiting()) check(s.get());
  for (const Done& d : done) finish(d.seq, d.reason, d.code);
}

Result<bool> Engine::step() {
  take_inbox();
  run_control();
  reap_cancelled();
  const auto& scheduled = schedule();
  if (scheduled.empty()) {
    publish_stats(-1);
    return false;
  }
  const Clock::time_point t0 = Clock::now();
  const Status st = runner_.run(scheduled);
  if (st.is_ok() && runner_.monitored()) record_monitor(scheduled);
  post_process(scheduled, st);
  publish_stats(std::chrono::duration<double>(Clock::now() - t0).count());
  return true;
}

const std::vector<ScheduledSeq>& Engine::schedule() {
  const auto& scheduled = scheduler_.schedule();
  if (scheduled.empty()) return scheduled;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (monitor_changed_) {
      runner_.set_monitor(monitor_state_.config);
      monitor_changed_ = false;
    }
  }
  for (const ScheduledSeq& s : scheduled) {
    if (!s.first_admission) continue;
    // An empty event marks the end of the queue wait (the server's queue-time metric).
    GenerationEvent ev;
    ev.prompt_tokens = s.seq->n_prompt;
    ev.cached_prompt_tokens = s.seq->n_cached_prompt;
    s.seq->channel->push(std::move(ev));
  }
  return scheduled;
}

void Engine::post_process(const std::vector<ScheduledSeq>& scheduled, const Status& forward) {
  auto& done = done_;
  done.clear();
  if (!forward.is_ok()) {
    // A failed step fails the requests in it, never the process.
    for (const ScheduledSeq& s : scheduled) done.push_back({s.seq, FinishReason::kError, EngineErrorCode::kInternal});
    scheduler_.commit();
    for (const Done& d : done) finish(d.seq, d.reason, d.code, forward.message());
    return;
  }
  sample_step(scheduled);
  // Per sequence: its prompt logprobs, then its sample where it reached the end of its known tokens.
  const int32_t vocab = model_->config().vocab;
  size_t job = 0;
  bool non_finite = false;
  for (size_t i = 0; i < scheduled.size(); ++i) {
    const ScheduledSeq& s = scheduled[i];
    Sequence* seq = s.seq;
    GenerationEvent ev;
    const PromptLogprobRange pr = prompt_logprob_range(*seq, s.start, s.n_tokens);
    bool failed = false;
    for (int32_t j = 0; j < pr.size() && !failed; ++j) {
      const float* logits = runner_.prompt_logits(static_cast<int32_t>(i), j);
      failed = !all_finite(logits, vocab);
      if (failed) break;
      const int32_t target = seq->tokens[static_cast<size_t>(pr.begin + j + 1)];
      log_softmax(std::span<const float>(logits, static_cast<size_t>(vocab)), logprobs_);
      GeneratedToken t{target, logprobs_[static_cast<size_t>(target)], {}, 1};
      for (float lp : logprobs_) t.rank += lp > t.logprob;
      top_logprobs(logprobs_, seq->request.prompt_logprobs, &t.top);
      ev.prompt_logprobs.push_back(std::move(t));
    }
    if (pr.size() > 0 && !failed) seq->next_prompt_logprob = pr.end + 1;
    if (!s.samples || failed) {
      if (failed) {
        done.push_back({seq, FinishReason::kError, EngineErrorCode::kNonFinite});
        non_finite = true;
      } else if (!ev.prompt_logprobs.empty()) {
        seq->channel->push(std::move(ev));
      }
      if (s.samples) ++job;
      continue;
    }
    SampleJob& sj = sample_jobs_[job++];
    FinishReason reason = FinishReason::kNone;
    if (seq->request.max_tokens == 0) {
      reason = FinishReason::kLength;  // scoring only: the prompt is done
    } else if (!sj.finite) {
      // Never a token sampled from NaN: the request fails (where it happened is found below).
      done.push_back({seq, FinishReason::kError, EngineErrorCode::kNonFinite});
      non_finite = true;
      continue;
    } else {
      GeneratedToken gen = std::move(sj.gen);
      seq->tokens.push_back(gen.token);
      if (seq->n_generated() == 1) seq->first_token_time = Clock::now();
      const auto& stop_ids = seq->request.stop_token_ids;
      if ((!seq->request.ignore_eos && std::find(eos_ids_.begin(), eos_ids_.end(), gen.token) != eos_ids_.end()) ||
          std::find(stop_ids.begin(), stop_ids.end(), gen.token) != stop_ids.end()) {
        reason = FinishReason::kStop;
      } else if (seq->n_generated() >= seq->request.max_tokens ||
                 static_cast<int32_t>(seq->tokens.size()) >= config_.max_model_len) {
        reason = FinishReason::kLength;
      }
      ev.tokens.push_back(std::move(gen));
    }
    ev.prompt_tokens = seq->n_prompt;
    ev.cached_prompt_tokens = seq->n_cached_prompt;
    seq->channel->push(std::move(ev));
    if (reason != FinishReason::kNone) done.push_back({seq, reason});
  }
  scheduler_.commit();
  if (non_finite) {
    for (Done& d : done) {
      if (d.code == EngineErrorCode::kNonFinite) d.error = non_finite_error(d.seq);
    }
  }
  for (const Done& d : done) finish(d.seq, d.reason, d.code, d.error);
}

// Each sequence's Sampler owns its state (seeded generator, penalty counts over its own tokens),
// so the step's sequences are sampled on the pool in any order with the same tokens as one by
// one. A step of 16 sequences at temperature 1 with top_p is tens of ms of serial work on the
// engine thread otherwise (docs/PERFORMANCE.md). Sequences that sample this step: job i is
// logits row i, in schedule order.
void Engine::sample_step(const std::vector<ScheduledSeq>& scheduled) {
  const int32_t vocab = model_->config().vocab;
  sample_jobs_.clear();
  int32_t row = 0;
  for (const ScheduledSeq& s : scheduled)
    if (s.samples) sample_jobs_.push_back({s.seq, runner_.logits(row++)});
  auto draw = [&](size_t i, int task) {
    SampleJob& j = sample_jobs_[i];
    if (j.seq->request.max_tokens == 0) return;
    j.finite = all_finite(j.logits, vocab);
    if (!j.finite) return;
    const std::span<float> scratch(sample_scratch_.data() + static_cast<size_t>(task) * vocab,
                                   static_cast<size_t>(vocab));
    j.gen = j.seq->sampler->sample(j.logits, j.seq->request.top_logprobs, scratch);
  };
  ThreadPool& pool = model_->pool();
  if (sample_jobs_.size() < 2 || pool.size() == 1) {
    for (size_t i = 0; i < sample_jobs_.size(); ++i) draw(i, 0);
    return;
  }
  // Dynamic claiming: a greedy sequence costs microseconds, a top_p one milliseconds.
  std::atomic<size_t> next{0};
  pool.run([&](int task) {
    for (size_t i = next.fetch_add(1, std::memory_order_relaxed); i < sample_jobs_.size();
         i = next.fetch_add(1, std::memory_order_relaxed))
      draw(i, task);
  });
}

std::string Engine::non_finite_error(Sequence* seq) {
  // After commit: n_computed covers this step's tokens.
  auto site = runner_.locate_non_finite(*seq, seq->n_computed);
  if (!site.is_ok()) return "non-finite logits (NaN or Inf); locating them failed: " + site.message();
  return non_finite_message(*site, seq->request.glass.get());
}

void Engine::publish_stats(double step_seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.running = static_cast<int64_t>(scheduler_.running().size());
  stats_.waiting = static_cast<int64_t>(scheduler_.waiting().size());
  stats_.kv_blocks_used = blocks_.n_used();
  stats_.prefix_cache_queries = scheduler_.prefix_queries();
  stats_.prefix_cache_hits = scheduler_.prefix_hits();
  stats_.preemptions = scheduler_.preemptions();
  stats_.monitor_steps = monitor_state_.steps_sampled;
  stats_.massive_events = monitor_state_.events_total;
  stats_.state_slots_used = scheduler_.state_slots_used();
  std::fill(stats_.running_by_variant.begin(), stats_.running_by_variant.end(), 0);
  std::fill(stats_.waiting_by_variant.begin(), stats_.waiting_by_variant.end(), 0);
  for (const auto& s : scheduler_.running()) ++stats_.running_by_variant[static_cast<size_t>(s->request.variant)];
  for (const auto& s : scheduler_.waiting()) ++stats_.waiting_by_variant[static_cast<size_t>(s->request.variant)];
  if (step_seconds >= 0) stats_.step_seconds.observe(step_seconds);
}

Status Engine::run_until_idle() {
  for (;;) {
    GB_ASSIGN_OR_RETURN(bool worked, step());
    if (!worked) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (inbox_.empty() && scheduler_.idle()) return Status::ok();
    }
  }
}

void Engine::loop() {
  for (;;) {
    auto worked = step();
    std::unique_lock<std::mutex> lock(mutex_);
    if (stop_ || (!accepting_ && inbox_.empty() && scheduler_.idle())) return;
    if (worked.is_ok() && !worked.value() && inbox_.empty()) {
      // Idle: sleep until a request arrives (or a timeout, to notice deadlines and drain).
      wake_.wait_for(lock, std::chrono::milliseconds(50), [&] { return stop_ || !inbox_.empty() || !tasks_.empty(); });
    }
  }
}

void Engine::start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
}

void Engine::drain(Clock::time_point deadline) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    accepting_ = false;
    drain_deadline_ = deadline;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  run_control();  // a load queued as the thread exited: committed now, so its caller returns
}

void Engine::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    accepting_ = false;
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  run_control();  // a load queued as the thread exited: committed now, so its caller returns
}

}  // namespace gb
