// `glassbox generate`: load a model, run one prompt through the engine and stream the text as
// it is produced, then report token counts and prefill / decode speed.
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "cli/common_flags.h"
#include "cli/glass_flags.h"
#include "core/mapped_file.h"
#include "core/progress.h"
#include "engine/chat_prompt.h"
#include "engine/engine.h"
#include "glass/repetition.h"
#include "tokenizer/tokenizer.h"

namespace gb::cli {
namespace {

struct GenerateOptions {
  std::string model, tokenizer, prompt, system, chat_template_file;
  bool chat = false, ignore_eos = false, show_ids = false, convert_q8 = false;
  int max_tokens = 128, threads = 0;
  std::string kv_cache_dtype = "f32";
  SamplingFlags sampling;
  GlassFlags glass;
  std::string glass_report;  // --glassbox-report FILE (default: stderr)
};

int fail(const std::string& msg) {
  std::fprintf(stderr, "glassbox generate: %s\n", msg.c_str());
  return 1;
}

int run_generate(const GenerateOptions& o) {
  using clock = std::chrono::steady_clock;
  const auto t_load = clock::now();
  auto tok = Tokenizer::load(o.tokenizer.empty() ? o.model : o.tokenizer);
  if (!tok.is_ok()) return fail(tok.message());
  LoadOptions lo;
  lo.n_threads = o.threads;
  lo.convert_to_q8 = o.convert_q8;
  auto model = load_model(o.model, lo);
  if (!model.is_ok()) return fail(model.message());
  Model& m = **model;
  {
    size_t total = 0;
    for (const auto& f : m.files()) total += f->size();
    ProgressBar bar("loading " + o.model, total);
    size_t before = 0;
    for (const auto& f : m.files()) {
      f->prefetch([&](size_t done) { bar.update(before + done); });
      before += f->size();
    }
  }
  const double load_s = std::chrono::duration<double>(clock::now() - t_load).count();

  std::string text = o.prompt;
  bool add_special = true;
  if (o.chat) {
    std::string tmpl;
    if (!o.chat_template_file.empty()) {
      auto src = read_file(o.chat_template_file);
      if (!src.is_ok()) return fail(src.message());
      tmpl = *src;
    }
    auto prompter = ChatPrompter::create(**tok, tmpl);
    if (!prompter.is_ok()) return fail(prompter.message());
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (!o.system.empty()) messages.push_back({{"role", "system"}, {"content", o.system}});
    messages.push_back({{"role", "user"}, {"content", o.prompt}});
    auto rendered = prompter->render(messages, /*add_generation_prompt=*/true);
    if (!rendered.is_ok()) return fail(rendered.message());
    text = *rendered;
    add_special = false;  // the template places BOS itself, as transformers' apply_chat_template
  }

  GenerationRequest req;
  req.id = "cli";
  req.prompt = (*tok)->encode(text, add_special);
  req.max_tokens = o.max_tokens;
  req.ignore_eos = o.ignore_eos;
  const SamplingFlags& sf = o.sampling;
  req.sampling.temperature = sf.temperature;
  req.sampling.top_k = sf.top_k;
  req.sampling.top_p = sf.top_p;
  req.sampling.min_p = sf.min_p;
  req.sampling.repetition_penalty = sf.repetition_penalty;
  req.sampling.presence_penalty = sf.presence_penalty;
  req.sampling.frequency_penalty = sf.frequency_penalty;
  if (sf.seed >= 0) {
    req.sampling.seed = static_cast<uint64_t>(sf.seed);
    req.sampling.has_seed = true;
  }
  if (req.prompt.empty()) return fail("the prompt encodes to no tokens");
  auto glass = load_glass_flags(o.glass, m.config());
  if (!glass.is_ok()) return fail(glass.message());
  req.glass = glass->spec;
  std::optional<RepetitionTracker> repetition;
  if (glass->stop_on_repetition)
    repetition.emplace(glass->stop_on_repetition->ngram, glass->stop_on_repetition->window);
  std::shared_ptr<const GlassReport> report;
  bool stopped_by_repetition = false;

  EngineConfig ec;
  ec.scheduler.max_num_seqs = 1;
  ec.scheduler.max_num_batched_tokens = m.max_batch_tokens();
  ec.max_model_len = static_cast<int32_t>(
      std::min<int64_t>(m.config().max_pos, static_cast<int64_t>(req.prompt.size()) + o.max_tokens));
  parse_kv_cache_dtype(o.kv_cache_dtype, &ec.kv_cache_dtype);  // checked by the flag
  auto engine = Engine::create(&m, ec);
  if (!engine.is_ok()) return fail(engine.message());
  auto channel = std::make_shared<RequestChannel>();
  const int32_t n_prompt = static_cast<int32_t>(req.prompt.size());
  const std::vector<int32_t> prompt_ids = req.prompt;
  const Status submitted = (*engine)->submit(std::move(req), channel);
  if (!submitted.is_ok()) return fail(submitted.message());

  StreamDecoder decoder(**tok, /*skip_special=*/true);
  decoder.prime(prompt_ids);
  const auto t0 = clock::now();
  clock::time_point t_first{};
  int32_t n_gen = 0;
  FinishReason finish = FinishReason::kNone;
  while (finish == FinishReason::kNone) {
    auto worked = (*engine)->step();
    if (!worked.is_ok()) return fail(worked.message());
    GenerationEvent ev;
    while (channel->pop(&ev, std::chrono::milliseconds(0))) {
      if (ev.glass != nullptr) report = ev.glass;
      for (const auto& t : ev.tokens) {
        if (repetition && !stopped_by_repetition) {
          repetition->push(t.token);
          if (repetition->should_stop(*glass->stop_on_repetition)) {
            stopped_by_repetition = true;
            channel->cancel();  // the engine ends the sequence at its next step
          }
        }
        if (n_gen++ == 0) t_first = clock::now();
        const std::string piece = o.show_ids ? "[" + std::to_string(t.token) + "]" : decoder.push(t.token);
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      }
      if (ev.finish != FinishReason::kNone) {
        finish = stopped_by_repetition ? FinishReason::kStop : ev.finish;
        if (finish == FinishReason::kError) return fail(ev.error);
      }
    }
  }
  const std::string rest = o.show_ids ? "" : decoder.flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::printf("\n");
  std::fflush(stdout);
  if (report != nullptr) {
    nlohmann::json g = glass_report_json(*report, glass->stats);
    if (stopped_by_repetition) g["stopped_by"] = "repetition";
    const std::string text = g.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    if (o.glass_report.empty()) {
      std::fprintf(stderr, "glassbox: %s", text.c_str());
    } else if (FILE* f = std::fopen(o.glass_report.c_str(), "w"); f != nullptr) {
      std::fwrite(text.data(), 1, text.size(), f);
      std::fclose(f);
    } else {
      return fail("cannot write " + o.glass_report);
    }
  }
  const auto t_end = clock::now();
  const double prefill_s = std::chrono::duration<double>(t_first - t0).count();
  const double decode_s = std::chrono::duration<double>(t_end - t_first).count();
  std::fprintf(stderr,
               "\n%s\nload %.2f s | prompt %d tokens, prefill %.1f t/s | generated %d tokens (%s), decode %.1f t/s\n",
               m.describe().c_str(), load_s, n_prompt, n_prompt / std::max(prefill_s, 1e-9), n_gen,
               finish_reason_name(finish), n_gen > 1 ? (n_gen - 1) / std::max(decode_s, 1e-9) : 0.0);
  return 0;
}

}  // namespace

void register_generate(CLI::App& app, Action* action) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt, streamed as it is produced");
  add_model_flag(*cmd, &o->model)->required();
  cmd->add_option("--prompt,-p", o->prompt, "prompt text")->required();
  add_tokenizer_flag(*cmd, &o->tokenizer, " (default: the model's own)");
  add_glass_flags(*cmd, &o->glass);
  cmd->add_option("--glassbox-report", o->glass_report, "write the glass-box report (JSON) here (default: stderr)");
  cmd->add_flag("--chat", o->chat, "render the prompt as a user message with the model's chat template");
  cmd->add_option("--system", o->system, "system message (with --chat)");
  cmd->add_option("--chat-template", o->chat_template_file, "Jinja chat template file overriding the model's");
  cmd->add_option("--max-tokens,-n", o->max_tokens, "tokens to generate at most")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  add_sampling_flags(*cmd, &o->sampling);
  add_threads_flag(*cmd, &o->threads);
  add_kv_cache_dtype_flag(*cmd, &o->kv_cache_dtype);
  cmd->add_flag("--ignore-eos", o->ignore_eos, "keep generating past end-of-sequence tokens");
  cmd->add_flag("--show-ids", o->show_ids, "print token ids instead of text");
  cmd->add_flag("--convert-q8", o->convert_q8, "convert f32/f16/bf16 matrices to Q8_0 at load (faster decode)");
  cmd->callback([action, o] { *action = [o] { return run_generate(*o); }; });
}

}  // namespace gb::cli
