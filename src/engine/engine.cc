#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace gb {

int64_t kv_block_bytes(const ModelConfig& config, int32_t block_size) {
  const int64_t n_attn_layers = std::max<int64_t>(1, config.n_layers_of(LayerKind::kAttention));
  return int64_t{2} * n_attn_layers * config.kv_dim() * block_size * 4;
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
  const int64_t bytes_per_block = kv_block_bytes(mc, config.block_size);
  config.scheduler.recurrent_state = mc.hybrid();
  int64_t n_blocks;
  if (config.kv_cache_bytes > 0) {
    n_blocks = config.kv_cache_bytes / bytes_per_block;
  } else {
    const int64_t per_seq = (config.max_model_len + config.block_size - 1) / config.block_size;
    n_blocks = std::min<int64_t>(per_seq * config.scheduler.max_num_seqs, (int64_t{4} << 30) / bytes_per_block);
  }
  const int64_t min_blocks = (config.max_model_len + config.block_size - 1) / config.block_size;
  if (n_blocks < min_blocks) {
    return Status::error("KV cache of " + std::to_string(n_blocks) + " blocks cannot hold one sequence of max_model_len " +
                         std::to_string(config.max_model_len) + " tokens (" + std::to_string(min_blocks) +
                         " blocks of " + std::to_string(bytes_per_block) + " bytes); raise the KV cache size or lower max_model_len");
  }
  GB_ASSIGN_OR_RETURN(auto cache, KvCache::create(mc, static_cast<int32_t>(n_blocks), config.block_size,
                                                  config.scheduler.max_num_seqs));
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
      cache_(std::move(cache)),
      blocks_(cache_->n_blocks(), config.block_size),
      scheduler_(config.scheduler, &blocks_),
      logits_(static_cast<size_t>(config.scheduler.max_num_seqs) * model->config().vocab),
      logprobs_(model->config().vocab),
      eos_ids_(model->config().eos_ids),
      glass_step_(model->config()),
      hooks_(model->config().n_layers) {
  stats_.kv_blocks_total = cache_->n_blocks();
  const size_t n_layers = static_cast<size_t>(model->config().n_layers);
  monitor_state_.events_per_layer.assign(n_layers, 0);
  monitor_state_.last_max_ratio.assign(n_layers, 0.0f);
  monitor_state_.last_max_abs.assign(n_layers, 0.0f);
  monitor_state_.peak_max_ratio.assign(n_layers, 0.0f);
  monitor_state_.ratio_buckets.assign(n_layers, {});
  monitor_state_.ratio_count.assign(n_layers, 0);
  monitor_state_.ratio_sum.assign(n_layers, 0.0);
  monitor_state_.config = config.monitor;
  monitor_config_ = config.monitor;
  monitor_step_.reset(model->config().n_layers);
}

Engine::~Engine() { stop(); }

namespace {

// A request submit() refuses: its channel gets one last event carrying the code; the caller gets
// the Status.
Status refuse(RequestChannel* channel, EngineErrorCode code, std::string message) {
  if (channel != nullptr) {
    GenerationEvent ev;
    ev.finish = FinishReason::kError;
    ev.error = message;
    ev.error_code = code;
    channel->push(std::move(ev));
  }
  return Status::error(std::move(message));
}

}  // namespace

Status Engine::submit(GenerationRequest request, std::shared_ptr<RequestChannel> channel) {
  const int32_t vocab = model_->config().vocab;
  if (request.prompt.empty())
    return refuse(channel.get(), EngineErrorCode::kInvalidRequest, "the prompt is empty");
  for (int32_t t : request.prompt) {
    if (t < 0 || t >= vocab)
      return refuse(channel.get(), EngineErrorCode::kInvalidRequest,
                    "prompt token id " + std::to_string(t) + " is outside the vocabulary");
  }
  if (request.max_tokens <= 0)
    return refuse(channel.get(), EngineErrorCode::kInvalidRequest, "max_tokens must be positive");
  const int64_t total = static_cast<int64_t>(request.prompt.size()) + request.max_tokens;
  if (total > config_.max_model_len) {
    return refuse(channel.get(), EngineErrorCode::kInvalidRequest,
                  "prompt (" + std::to_string(request.prompt.size()) + " tokens) + max_tokens (" +
                      std::to_string(request.max_tokens) + ") = " + std::to_string(total) +
                      " exceeds the context length " + std::to_string(config_.max_model_len));
  }
  if (Status st = request.sampling.validate(vocab); !st.is_ok())
    return refuse(channel.get(), EngineErrorCode::kInvalidRequest, st.message());
  std::unique_ptr<GlassAccumulator> glass;
  bool skip_prefix_lookup = false;
  if (request.glass != nullptr) {
    const GlassSpec& g = *request.glass;
    if (!(g.resolved_for == glass_shape(model_->config()))) {
      return refuse(channel.get(), EngineErrorCode::kInvalidRequest,
                    "the glass spec was not resolved for this model (resolve_glass_spec with its config)");
    }
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
  seq->skip_prefix_lookup = skip_prefix_lookup;
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
    if (!accepting_)
      return refuse(seq->channel.get(), EngineErrorCode::kDraining, "the engine is draining and accepts no new requests");
    if (static_cast<int64_t>(inbox_.size()) + stats_.waiting >= config_.max_queue) {
      return refuse(seq->channel.get(), EngineErrorCode::kQueueFull,
                    "the request queue is full (" + std::to_string(config_.max_queue) + " waiting)");
    }
    if (seq->glass != nullptr) ++stats_.glass_requests;
    inbox_.push_back(std::move(seq));
  }
  wake_.notify_one();
  return Status::ok();
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
  MonitorSnapshot& m = monitor_state_;
  ++m.steps_sampled;
  m.rows_checked += monitor_step_.rows;
  m.events_dropped += monitor_step_.events_dropped;
  for (size_t l = 0; l < m.last_max_ratio.size(); ++l) {
    m.last_max_ratio[l] = monitor_step_.max_ratio[l];
    m.last_max_abs[l] = monitor_step_.max_abs[l];
    m.peak_max_ratio[l] = std::max(m.peak_max_ratio[l], monitor_step_.max_ratio[l]);
    const double r = monitor_step_.max_ratio[l];
    size_t b = 0;
    while (b < MonitorSnapshot::kRatioBounds.size() && r > MonitorSnapshot::kRatioBounds[b]) ++b;
    ++m.ratio_buckets[l][b];
    ++m.ratio_count[l];
    m.ratio_sum[l] += r;
  }
  for (const MonitorEvent& e : monitor_step_.events) {
    ++m.events_total;
    ++m.events_per_layer[static_cast<size_t>(e.event.layer)];
    if (m.recent.size() == MonitorSnapshot::kRecent) m.recent.erase(m.recent.begin());
    m.recent.push_back({static_cast<uint64_t>(m.events_total), scheduled[e.seq_index].seq->request.id, e.event});
  }
  m.events_total += monitor_step_.events_dropped;
}

void Engine::take_inbox() {
  std::vector<std::unique_ptr<Sequence>> incoming;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    incoming.swap(inbox_);
  }
  for (auto& s : incoming) scheduler_.add(std::move(s));
}

void Engine::finish(Sequence* seq, FinishReason reason, const std::string& error, EngineErrorCode code) {
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
    if (s->channel->cancelled() || draining_past_deadline) done.emplace_back(s, FinishReason::kCancelled);
    else if (now >= s->request.deadline) done.emplace_back(s, FinishReason::kTimeout);
  };
  for (const auto& s : scheduler_.running()) check(s.get());
  for (const auto& s : scheduler_.waiting()) check(s.get());
  const EngineErrorCode why = draining_past_deadline ? EngineErrorCode::kDraining : EngineErrorCode::kCancelled;
  for (auto [s, r] : done) finish(s, r, {}, r == FinishReason::kCancelled ? why : EngineErrorCode::kInternal);
}

Result<bool> Engine::step() {
  take_inbox();
  reap_cancelled();
  const auto& scheduled = scheduler_.schedule();
  if (scheduled.empty()) {
    publish_stats(-1);
    return false;
  }
  const Clock::time_point t0 = Clock::now();

  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (monitor_changed_) {
      monitor_config_ = monitor_state_.config;
      monitor_counter_ = 0;
      monitor_changed_ = false;
    }
  }

  batch_.clear();
  glass_step_.clear();
  bool glass = false;
  for (const ScheduledSeq& s : scheduled) {
    if (s.seq->glass != nullptr) {
      glass_step_.add_sequence(static_cast<int32_t>(batch_.n_tokens()), s.n_tokens, s.start, s.seq->n_prompt,
                               s.seq->glass.get());
      glass = true;
    }
    if (s.first_admission) {
      // An empty event marks the end of the queue wait (the server's queue-time metric).
      GenerationEvent ev;
      ev.prompt_tokens = s.seq->n_prompt;
      ev.cached_prompt_tokens = s.seq->n_cached_prompt;
      s.seq->channel->push(std::move(ev));
    }
    const std::span<const int32_t> ids(s.seq->tokens.data() + s.start, s.n_tokens);
    batch_.add_sequence(ids, s.start, s.seq->block_table, config_.block_size, /*all_logits=*/false, s.seq->state_slot);
    if (!s.samples) batch_.output_rows.pop_back();  // a prefill chunk short of the end: no logits
  }
  const bool monitored =
      monitor_config_.enabled && monitor_counter_++ % std::max<int32_t>(1, monitor_config_.every_steps) == 0;
  if (monitored) glass_step_.set_monitor(monitor_config_, &monitor_step_);
  // Without glass work the step is exactly a plain one: no hooks at all.
  const Hooks* hooks = nullptr;
  if (glass || monitored) {
    glass_step_.finalize();
    hooks_.set_glass(&glass_step_);
    hooks = &hooks_;
  }
  const Status st = model_->forward(batch_, *cache_, hooks, logits_.data());
  if (st.is_ok() && monitored) record_monitor(scheduled);
  if (!st.is_ok()) {
    // A failed step fails the requests in it, never the process.
    auto& failed = done_;
    failed.clear();
    for (const ScheduledSeq& s : scheduled) failed.emplace_back(s.seq, FinishReason::kError);
    scheduler_.commit();
    for (auto [s, r] : failed) finish(s, r, st.message(), EngineErrorCode::kInternal);
    return true;
  }

  // Sample where a sequence reached the end of its known tokens, in output-row order.
  const int32_t vocab = model_->config().vocab;
  auto& done = done_;
  done.clear();
  int32_t row = 0;
  for (const ScheduledSeq& s : scheduled) {
    if (!s.samples) continue;
    Sequence* seq = s.seq;
    float* logits = logits_.data() + static_cast<size_t>(row++) * vocab;
    GeneratedToken gen{};
    if (seq->request.top_logprobs >= 0) log_softmax({logits, static_cast<size_t>(vocab)}, logprobs_);
    gen.token = seq->sampler->sample(logits);
    if (seq->request.top_logprobs >= 0) {
      gen.logprob = logprobs_[gen.token];
      // The k most likely tokens by insertion into a short sorted list (k <= 20): one pass, no sort of the vocabulary.
      const int32_t k = std::min(seq->request.top_logprobs, vocab);
      gen.top.reserve(k + 1);
      for (int32_t i = 0; i < vocab && k > 0; ++i) {
        const float lp = logprobs_[i];
        if (static_cast<int32_t>(gen.top.size()) == k && lp <= gen.top.back().logprob) continue;
        auto pos = std::find_if(gen.top.begin(), gen.top.end(), [&](const TokenLogprob& t) { return lp > t.logprob; });
        gen.top.insert(pos, {i, lp});
        if (static_cast<int32_t>(gen.top.size()) > k) gen.top.pop_back();
      }
    }
    seq->tokens.push_back(gen.token);
    if (seq->n_generated() == 1) seq->first_token_time = Clock::now();

    FinishReason reason = FinishReason::kNone;
    const auto& stop_ids = seq->request.stop_token_ids;
    if ((!seq->request.ignore_eos && std::find(eos_ids_.begin(), eos_ids_.end(), gen.token) != eos_ids_.end()) ||
        std::find(stop_ids.begin(), stop_ids.end(), gen.token) != stop_ids.end()) {
      reason = FinishReason::kStop;
    } else if (seq->n_generated() >= seq->request.max_tokens ||
               static_cast<int32_t>(seq->tokens.size()) >= config_.max_model_len) {
      reason = FinishReason::kLength;
    }
    GenerationEvent ev;
    ev.tokens.push_back(std::move(gen));
    ev.prompt_tokens = seq->n_prompt;
    ev.cached_prompt_tokens = seq->n_cached_prompt;
    seq->channel->push(std::move(ev));
    if (reason != FinishReason::kNone) done.emplace_back(seq, reason);
  }
  scheduler_.commit();
  for (auto [s, r] : done) finish(s, r);

  publish_stats(std::chrono::duration<double>(Clock::now() - t0).count());
  return true;
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
      wake_.wait_for(lock, std::chrono::milliseconds(50), [&] { return stop_ || !inbox_.empty(); });
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
}

void Engine::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    accepting_ = false;
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace gb
