// `glassbox bench`: prefill and decode tokens/s on synthetic token ids, like llama.cpp's
// llama-bench (pp = one prompt of N tokens, tg = N single-token steps from an empty cache, or
// with --depth D after a D-token context, timed from the first decode step: llama-bench -d D),
// so the two can be run side by side on one GGUF file. Both run as requests through the engine
// step that `serve` runs (scheduler, model runner, greedy sampling, events), stepped on this thread.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/commands.h"
#include "cli/common_flags.h"
#include "core/read_bytes.h"
#include "engine/engine.h"
#include "model/model.h"
#include "ops/cpu_features.h"

namespace gb::cli {
namespace {

struct BenchOptions {
  std::string model;
  int prompt_tokens = 512;
  int gen_tokens = 128;
  int threads = 0;
  int reps = 3;
  int batch = 512;
  int depth = 0;
  double bandwidth_gbs = 0;
  bool read = false;
  bool json = false;
  bool convert_q8 = false;
  bool no_pack = false;
  std::string kv_cache_dtype = "f32";
};

struct Stats {
  double median = 0, min = 0, max = 0;
};

Stats summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  Stats s;
  if (v.empty()) return s;
  s.min = v.front();
  s.max = v.back();
  s.median = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  return s;
}

int64_t code_bytes(const ops::Weight& w) { return w.data != nullptr ? w.rows * row_bytes(w.dtype, w.cols) : 0; }
int64_t mins_bytes(const ops::Weight& w) { return w.mins != nullptr ? w.rows * (w.cols / 32) * 2 : 0; }
int64_t weight_bytes(const ops::Weight& w) { return code_bytes(w) + mins_bytes(w); }

// Bytes of weights one decode step streams from memory: every layer matrix and the lm_head
// (the embedding lookup reads a single row).
int64_t decode_weight_bytes(const ModelWeights& w) {
  int64_t total = weight_bytes(w.output);
  for (const auto& l : w.layers) {
    for (const ops::Weight* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &l.lin_qkv, &l.lin_z,
                                 &l.lin_b, &l.lin_a, &l.lin_out}) {
      total += weight_bytes(*m);
    }
  }
  return total;
}

using Pieces = std::vector<std::pair<const uint8_t*, int64_t>>;

// The bytes a decode step's matmuls read (the packed copy where there is one), in pieces of at
// most 1 MiB, so a plain read of them splits evenly over the threads.
Pieces decode_weight_pieces(const ModelWeights& w) {
  Pieces pieces;
  auto add_run = [&](const uint8_t* p, int64_t bytes) {
    const int64_t n = bytes / 64 * 64;
    for (int64_t o = 0; p != nullptr && o < n; o += int64_t{1} << 20)
      pieces.emplace_back(p + o, std::min<int64_t>(int64_t{1} << 20, n - o));
  };
  auto add = [&](const ops::Weight& m) {
    add_run(m.packed != nullptr ? m.packed : m.data, code_bytes(m));
    add_run(reinterpret_cast<const uint8_t*>(m.mins), mins_bytes(m));  // Q4_1 / Q5_1's offsets
  };
  add(w.output);
  for (const auto& l : w.layers) {
    for (const ops::Weight* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &l.lin_qkv, &l.lin_z,
                                 &l.lin_b, &l.lin_a, &l.lin_out}) {
      add(*m);
    }
  }
  return pieces;
}

int run_bench(const BenchOptions& o) {
  if (o.read && (o.depth > 0 || o.gen_tokens == 0)) {
    std::fprintf(stderr,
                 "glassbox bench: --read compares decode's weight reads with a plain read of them; it needs "
                 "decode (-n > 0) from an empty cache (no --depth: the KV cache's reads would come on top)\n");
    return 1;
  }
  LoadOptions lo;
  lo.n_threads = o.threads;
  lo.max_batch_tokens = o.batch;
  lo.convert_to_q8 = o.convert_q8;
  lo.pack_weights = !o.no_pack;
  auto model = load_model(o.model, lo);
  if (!model.is_ok()) {
    std::fprintf(stderr, "glassbox bench: %s\n", model.message().c_str());
    return 1;
  }
  Model& m = **model;
  const ModelConfig& cfg = m.config();
  const int32_t ctx = std::max(o.depth + o.prompt_tokens, o.depth + o.gen_tokens) + 1;
  if (ctx > cfg.max_pos) {
    std::fprintf(stderr, "glassbox bench: %d tokens exceed the model's context of %d\n", ctx, cfg.max_pos);
    return 1;
  }
  EngineConfig ec;
  if (o.depth > 0 && o.prompt_tokens > 0) {
    // pp at depth finds the context in the prefix cache: whole KV blocks, and a model that has one.
    if (cfg.hybrid()) {
      std::fprintf(stderr,
                   "glassbox bench: pp after --depth needs the prefix cache, which a hybrid model does not keep (its "
                   "recurrent state is not cached); run tg at depth with -p 0\n");
      return 1;
    }
    if (o.depth % ec.block_size != 0) {
      std::fprintf(stderr,
                   "glassbox bench: pp after --depth %d: the depth must be a multiple of the KV block size (%d)\n",
                   o.depth, ec.block_size);
      return 1;
    }
  }
  ec.scheduler.max_num_seqs = 1;
  ec.scheduler.max_num_batched_tokens = o.batch;  // the prefill's tokens per forward
  ec.max_model_len = ctx;
  parse_kv_cache_dtype(o.kv_cache_dtype, &ec.kv_cache_dtype);  // checked by the flag
  auto engine = Engine::create(&m, ec);
  if (!engine.is_ok()) {
    std::fprintf(stderr, "glassbox bench: %s\n", engine.message().c_str());
    return 1;
  }
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> pick(0, cfg.vocab - 1);
  std::vector<int32_t> context(o.depth), prompt(o.prompt_tokens);
  for (auto& t : context) t = pick(rng);
  for (auto& t : prompt) t = pick(rng);

  using clock = std::chrono::steady_clock;
  auto fail = [](const std::string& message) {
    std::fprintf(stderr, "glassbox bench: %s\n", message.c_str());
    return 1;
  };
  uint64_t salt = 0;
  // Runs one greedy request to its end on this thread, stepping the engine. *seconds: from submit
  // to the last token, or with from_first_token from the step that produced the first token (the
  // prompt's) to the last: the decode steps alone.
  auto run = [&](std::vector<int32_t> ids, int32_t max_tokens, bool from_first_token, uint64_t request_salt,
                 double* seconds, int32_t* cached_prompt_tokens) -> Status {
    GenerationRequest r;
    r.id = "bench";
    r.prompt = std::move(ids);
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0;
    r.ignore_eos = true;
    r.cache_salt = request_salt;  // a new salt per round: no prefix-cache hits from earlier rounds
    auto channel = std::make_shared<RequestChannel>();
    auto t0 = clock::now();
    GB_RETURN_IF_ERROR((*engine)->submit(std::move(r), channel));
    int32_t n = 0;
    for (bool finished = false; !finished;) {
      GB_ASSIGN_OR_RETURN(bool worked, (*engine)->step());
      const auto now = clock::now();
      GenerationEvent ev;
      while (channel->pop(&ev, std::chrono::milliseconds(0))) {
        if (ev.finish == FinishReason::kError) return Status::error(ev.error);
        if (n == 0 && !ev.tokens.empty() && from_first_token) t0 = now;
        if (cached_prompt_tokens != nullptr && ev.prompt_tokens > 0) *cached_prompt_tokens = ev.cached_prompt_tokens;
        n += static_cast<int32_t>(ev.tokens.size());
        if (ev.finish != FinishReason::kNone) finished = true;
      }
      if (!worked && !finished) return Status::error("the engine stopped before the request finished");
    }
    *seconds = std::chrono::duration<double>(clock::now() - t0).count();
    if (n != max_tokens)
      return Status::error("the engine produced " + std::to_string(n) + " of " + std::to_string(max_tokens) +
                           " tokens");
    return Status::ok();
  };
  // --read: after every decode round, the same weight bytes read plainly by the same threads
  // (pieces claimed in order from a counter), so decode is compared with what the memory gave
  // at that moment rather than with a bandwidth measured minutes apart on a shared host.
  const Pieces pieces = o.read ? decode_weight_pieces(m.weights()) : Pieces{};
  std::vector<uint64_t> sink(m.pool().size());
  auto read_weights = [&]() {
    std::atomic<size_t> next{0};
    const auto t0 = clock::now();
    m.pool().run([&](int ti) {
      for (size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < pieces.size();)
        sink[ti] += read_bytes(pieces[i].first, pieces[i].second);
    });
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  int64_t read_total = 0;
  for (const auto& pc : pieces) read_total += pc.second;
  std::vector<double> pp, tg, read_gbs, of_read;
  // One warm-up round (page faults, caches), then reps measured rounds.
  for (int rep = -1; rep < o.reps; ++rep) {
    double dt = 0;
    if (o.prompt_tokens > 0) {
      // The prompt in forwards of --batch tokens, then its one sampled token. After --depth
      // tokens of context: the context is run first, and the prompt's request (context +
      // prompt, same salt) finds it in the prefix cache, so only the prompt is computed.
      std::vector<int32_t> ids = context;
      ids.insert(ids.end(), prompt.begin(), prompt.end());
      const uint64_t request_salt = ++salt;
      if (o.depth > 0) {
        if (Status st = run(context, 1, false, request_salt, &dt, nullptr); !st) return fail(st.message());
      }
      int32_t cached = 0;
      if (Status st = run(ids, 1, false, request_salt, &dt, &cached); !st) return fail(st.message());
      if (cached != o.depth) {
        return fail("the prompt after --depth " + std::to_string(o.depth) + " found " + std::to_string(cached) +
                    " of its tokens in the prefix cache");
      }
      if (rep >= 0) pp.push_back(o.prompt_tokens / dt);
    }
    if (o.gen_tokens > 0) {
      if (o.depth == 0) {
        // A one-token prompt and gen_tokens - 1 decode steps: gen_tokens single-token forwards.
        if (Status st = run({prompt.empty() ? 1 : prompt[0]}, o.gen_tokens, false, ++salt, &dt, nullptr); !st)
          return fail(st.message());
      } else {
        // The context's prefill yields the first token; then gen_tokens decode steps, timed.
        if (Status st = run(context, o.gen_tokens + 1, true, ++salt, &dt, nullptr); !st) return fail(st.message());
      }
      if (rep >= 0) tg.push_back(o.gen_tokens / dt);
      if (o.read) {
        const double gbs = read_total / read_weights() / 1e9;
        if (rep >= 0) {
          read_gbs.push_back(gbs);
          of_read.push_back(tg.back() * decode_weight_bytes(m.weights()) / 1e9 / gbs);
        }
      }
    }
  }
  const Stats pps = summarize(pp), tgs = summarize(tg), reads = summarize(read_gbs), ofs = summarize(of_read);
  const int64_t bytes = decode_weight_bytes(m.weights());
  // The weights-only limit; at depth the KV cache's reads come on top, so none is given there.
  const double limit = o.bandwidth_gbs > 0 && o.depth == 0 ? o.bandwidth_gbs * 1e9 / static_cast<double>(bytes) : 0;
  if (o.json) {
    nlohmann::json j = {{"model", o.model},
                        {"describe", m.describe()},
                        {"threads", m.pool().size()},
                        {"isa", std::string(ops::isa_name(ops::active_isa()))},
                        {"reps", o.reps},
                        {"depth", o.depth},
                        {"decode_weight_bytes", bytes}};
    if (o.prompt_tokens > 0)
      j["pp"] = {{"n_tokens", o.prompt_tokens}, {"tps_median", pps.median}, {"tps_min", pps.min}, {"tps_max", pps.max}};
    if (o.gen_tokens > 0)
      j["tg"] = {{"n_tokens", o.gen_tokens}, {"tps_median", tgs.median}, {"tps_min", tgs.min}, {"tps_max", tgs.max}};
    if (!read_gbs.empty()) {
      j["read"] = {{"gbs_median", reads.median},      {"gbs_min", reads.min},      {"gbs_max", reads.max},
                   {"tg_of_read_median", ofs.median}, {"tg_of_read_min", ofs.min}, {"tg_of_read_max", ofs.max}};
    }
    if (limit > 0) {
      j["bandwidth_gbs"] = o.bandwidth_gbs;
      j["tg_limit_tps"] = limit;
      j["tg_fraction_of_limit"] = tgs.median / limit;
    }
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("model: %s\n", m.describe().c_str());
  std::printf("threads: %d, kernels: %s, reps: %d (median [min, max])\n", m.pool().size(),
              std::string(ops::isa_name(ops::active_isa())).c_str(), o.reps);
  const std::string at = o.depth > 0 ? " @ d" + std::to_string(o.depth) : "";
  if (o.prompt_tokens > 0) {
    const std::string name = "pp" + std::to_string(o.prompt_tokens) + at;
    std::printf("%-14s %9.2f t/s  [%.2f, %.2f]\n", name.c_str(), pps.median, pps.min, pps.max);
  }
  if (o.gen_tokens > 0) {
    const std::string name = "tg" + std::to_string(o.gen_tokens) + at;
    std::printf("%-14s %9.2f t/s  [%.2f, %.2f]\n", name.c_str(), tgs.median, tgs.min, tgs.max);
  }
  std::printf("weights read per decode token: %.1f MB\n", bytes / 1e6);
  if (!read_gbs.empty()) {
    std::printf(
        "plain read of those bytes after each decode round: %.1f GB/s [%.1f, %.1f]; decode weight GB/s as "
        "a share of it, per round: %.0f%% [%.0f%%, %.0f%%]\n",
        reads.median, reads.min, reads.max, 100 * ofs.median, 100 * ofs.min, 100 * ofs.max);
  }
  if (limit > 0) {
    std::printf("decode limit at %.1f GB/s: %.2f t/s; measured %.0f%% of it\n", o.bandwidth_gbs, limit,
                100.0 * tgs.median / limit);
  }
  return 0;
}

}  // namespace

void register_bench(CLI::App& app, Action* action) {
  auto opts = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "Prefill and decode tokens/s on synthetic token ids (like llama-bench)");
  add_model_flag(*cmd, &opts->model)->required();
  cmd->add_option("--prompt-tokens,-p", opts->prompt_tokens, "prompt length for the prefill test (0: skip)")
      ->capture_default_str();
  cmd->add_option("--gen-tokens,-n", opts->gen_tokens, "tokens for the decode test (0: skip)")->capture_default_str();
  add_threads_flag(*cmd, &opts->threads);
  add_kv_cache_dtype_flag(*cmd, &opts->kv_cache_dtype);
  cmd->add_option("--reps,-r", opts->reps, "measured repetitions (after one warm-up)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--batch,-b", opts->batch, "tokens per forward during prefill")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--depth,-d", opts->depth,
                  "tokens of context before each test (like llama-bench -d): pp then times its prompt after a "
                  "cached context of this many tokens (a multiple of the KV block size, 16; not on a hybrid model), tg "
                  "its decode steps after it")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--bandwidth", opts->bandwidth_gbs,
                  "measured memory bandwidth in GB/s, to report decode as a fraction of its limit");
  cmd->add_flag("--read", opts->read,
                "after every decode round, time a plain read of the same weight bytes with the same threads and "
                "report decode as a share of it, round by round");
  cmd->add_flag("--json", opts->json, "print one JSON object");
  cmd->add_flag("--convert-q8", opts->convert_q8, "convert f32/f16/bf16 matrices to Q8_0 at load (faster decode)");
  cmd->add_flag("--no-pack", opts->no_pack,
                "keep the weights in the file's row-major layout (no load-time repacking; for A/B runs)");
  cmd->callback([action, opts] { *action = [opts] { return run_bench(*opts); }; });
}

}  // namespace gb::cli
