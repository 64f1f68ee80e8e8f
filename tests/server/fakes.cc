// FakeCodec and FakeEngine.
#include "server/fakes.h"

namespace gb::server::test {

namespace {

class FakeDetokenizer : public StreamDetokenizer {
 public:
  std::string push(int32_t id) override {
    if (id < FakeCodec::kByte0) return "";
    pending_ += static_cast<char>(id - FakeCodec::kByte0);
    return take_complete();
  }
  std::string flush() override {
    std::string out;
    out.swap(pending_);
    return out;
  }
  std::string peek(int32_t id) const override {
    if (id < FakeCodec::kByte0) return "";
    FakeDetokenizer copy = *this;
    std::string text = copy.push(id);
    return text.empty() ? "\xEF\xBF\xBD" : text;  // an incomplete character, as StreamDecoder shows it
  }

 private:
  // Emits the longest prefix of pending_ that ends on a UTF-8 character boundary.
  std::string take_complete() {
    size_t i = 0, complete = 0;
    while (i < pending_.size()) {
      const unsigned char c = static_cast<unsigned char>(pending_[i]);
      const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
      if (i + len > pending_.size()) break;
      i += len;
      complete = i;
    }
    std::string out = pending_.substr(0, complete);
    pending_.erase(0, complete);
    return out;
  }
  std::string pending_;
};

}  // namespace

std::vector<int32_t> FakeCodec::encode(std::string_view text, bool add_special) const {
  std::vector<int32_t> ids;
  if (add_special) ids.push_back(kBos);
  for (unsigned char c : text) ids.push_back(kByte0 + c);
  return ids;
}

std::unique_ptr<StreamDetokenizer> FakeCodec::stream(std::span<const int32_t>) const {
  return std::make_unique<FakeDetokenizer>();
}

Result<std::string> FakeCodec::render_chat(const nlohmann::json& messages, bool add_generation_prompt) const {
  std::string out;
  for (const auto& m : messages) {
    const std::string content = m.value("content", "");
    if (content == "{% raise %}") return Status::error("template raised: bad message");
    out += "<|" + m.value("role", "") + "|>" + content + "\n";
  }
  if (add_generation_prompt) out += "<|assistant|>";
  return out;
}

FakeEngine::FakeEngine(FakeEngineOptions options)
    : options_(std::move(options)), queue_full_(options_.queue_full), waiting_(options_.waiting) {
  thread_ = std::thread([this] { loop(); });
}

FakeEngine::~FakeEngine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Status FakeEngine::submit(GenerationRequest request, std::shared_ptr<RequestChannel> channel, EngineErrorCode* code) {
  if (code != nullptr) *code = queue_full_.load() ? EngineErrorCode::kQueueFull : EngineErrorCode::kNone;
  if (queue_full_.load()) return Status::error("queue full");
  auto a = std::make_unique<Active>();
  a->rng.seed(request.sampling.has_seed ? request.sampling.seed : std::random_device{}());
  a->request = request;
  a->channel = std::move(channel);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    submitted_.push_back(std::move(request));
    active_.push_back(std::move(a));
  }
  cv_.notify_all();
  return Status::ok();
}

EngineStats FakeEngine::stats() const {
  EngineStats s;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    s.running = static_cast<int64_t>(active_.size());
  }
  s.waiting = waiting_.load();
  s.kv_blocks_total = 100;
  s.kv_blocks_used = s.running * 2;
  s.prefix_cache_queries = 10;
  s.prefix_cache_hits = 4;
  s.step_seconds.observe(0.002);
  s.step_seconds.observe(0.3);
  return s;
}

std::vector<GenerationRequest> FakeEngine::submitted() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return submitted_;
}

int FakeEngine::active_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int>(active_.size());
}

bool FakeEngine::wait_cancelled(int n, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mutex_);
  return cv_.wait_for(lock, timeout, [&] { return cancelled_.load() >= n; });
}

GeneratedToken FakeEngine::next_token(Active& a) {
  GeneratedToken t;
  const GenerationRequest& r = a.request;
  const std::string& script = options_.script;
  // The script unless a seeded sampled request asks for "random" text (seed determinism tests).
  if (r.sampling.temperature <= 0.0f || !r.sampling.has_seed || script.empty()) {
    const size_t pos = static_cast<size_t>(a.produced);
    if (pos < script.size()) {
      t.token = FakeCodec::kByte0 + static_cast<unsigned char>(script[pos]);
    } else if (!r.ignore_eos) {
      t.token = FakeCodec::kEos;
    } else {
      t.token = FakeCodec::kByte0 + static_cast<unsigned char>(script[pos % script.size()]);
    }
  } else {
    // Sampled: lowercase letters and spaces from the request's own generator (seed -> same text).
    const int v = static_cast<int>(a.rng() % 27);
    t.token = FakeCodec::kByte0 + (v == 26 ? ' ' : 'a' + v);
  }
  t.logprob = -0.25f;
  for (int k = 0; k < std::max(0, r.top_logprobs); ++k)
    t.top.push_back({FakeCodec::kByte0 + 'a' + k, -1.0f - static_cast<float>(k)});
  return t;
}

void FakeEngine::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    if (active_.empty()) {
      cv_.wait(lock, [&] { return stop_ || !active_.empty(); });
      continue;
    }
    // One "step": every active sequence advances; nothing here waits on a consumer.
    for (size_t i = 0; i < active_.size();) {
      Active& a = *active_[i];
      GenerationEvent ev;
      ev.prompt_tokens = static_cast<int32_t>(a.request.prompt.size());
      bool done = false;
      if (a.channel->cancelled()) {
        ev.finish = FinishReason::kCancelled;
        ev.error_code = EngineErrorCode::kCancelled;
        cancelled_.fetch_add(1);
        done = true;
      } else if (Clock::now() > a.request.deadline) {
        ev.finish = FinishReason::kTimeout;
        done = true;
      } else if (!options_.fail_with.empty()) {
        ev.finish = FinishReason::kError;
        ev.error = options_.fail_with;
        ev.error_code = options_.fail_code;
        done = true;
      } else if (!a.announced) {
        a.announced = true;  // leaving the queue: an empty event
      } else {
        for (int k = 0; k < options_.tokens_per_event && !done; ++k) {
          GeneratedToken t = next_token(a);
          ++a.produced;
          const bool eos = t.token == FakeCodec::kEos;
          ev.tokens.push_back(std::move(t));
          if (eos) {
            ev.finish = FinishReason::kStop;
            done = true;
          } else if (a.produced >= a.request.max_tokens) {
            ev.finish = FinishReason::kLength;
            done = true;
          }
        }
      }
      if (done && a.request.glass != nullptr) {
        // A glass-box request's last event carries its report: here, the interventions as resolved.
        auto report = std::make_shared<GlassReport>();
        for (const Intervention& iv : a.request.glass->interventions)
          report->applied.push_back(applied_intervention(iv));
        const ObserveSpec& ob = a.request.glass->observe;
        if (ob.enabled && ob.sink_tokens > 0) {
          report->sink_tokens = ob.sink_tokens;
          for (int32_t l : ob.sink_layers) {
            SinkStats s;
            s.layer = l;
            s.n_tokens = static_cast<int64_t>(a.request.prompt.size());
            for (int32_t h = 0; h < options_.model.n_heads; ++h) {
              s.mean.push_back(1.0f / static_cast<float>(2 + h));
              s.max.push_back(1.0f);
              s.max_position.push_back(0);
            }
            report->sinks.push_back(std::move(s));
          }
        }
        ev.glass = std::move(report);
      }
      a.channel->push(std::move(ev));
      if (done) {
        active_.erase(active_.begin() + static_cast<std::ptrdiff_t>(i));
        cv_.notify_all();
      } else {
        ++i;
      }
    }
    cv_.wait_for(lock, options_.token_delay, [&] { return stop_; });
  }
}

}  // namespace gb::server::test
