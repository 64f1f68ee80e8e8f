// `glassbox dump`: runs a prompt through a model and writes the chosen hook-point tensors to a
// safetensors file (keys layers.{l}.{point}, embed, final_norm, logits; F32 [n_tokens, width]) —
// the debugging tool and the basis of reference comparisons. --stats prints per-point statistics.
// The prompt runs as one request through the engine step that `serve` runs, its tensors taken by
// the glass box's captures (capture.h) and its statistics by ops::row_stats.
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/capture.h"
#include "cli/commands.h"
#include "cli/common_flags.h"
#include "cli/glass_flags.h"
#include "formats/safetensors.h"
#include "ops/steer.h"

#if __has_include("tokenizer/tokenizer.h")
#include "tokenizer/tokenizer.h"
#define GB_DUMP_HAS_TOKENIZER 1
#endif

namespace gb::cli {

namespace {

struct DumpOptions {
  std::string model;
  std::string prompt_ids;
  std::string prompt;
  std::string points = "all";
  std::string layers = "all";
  std::string out;
  int threads = 0;
  bool stats = false;
  GlassFlags glass;
};

// "all" or a comma list of hook point names.
Status parse_points(const std::string& text, std::vector<HookPoint>* points) {
  if (text == "all") {
    for (int p = 0; p < kNumHookPoints; ++p) points->push_back(static_cast<HookPoint>(p));
    return Status::ok();
  }
  std::istringstream in(text);
  std::string name;
  while (std::getline(in, name, ',')) {
    auto p = parse_hook_point(name);
    if (!p) {
      return Status::error("--points: unknown hook point '" + name + "' (" + hook_point_list(false) + ", all)");
    }
    points->push_back(*p);
  }
  if (points->empty()) return Status::error("--points: none given");
  return Status::ok();
}

// "all", or a comma list of layers and inclusive ranges: "0,2", "1-3", "0,4-6".
Status parse_layers(const std::string& text, int32_t n_layers, std::set<int32_t>* layers) {
  if (text == "all") {
    for (int32_t l = 0; l < n_layers; ++l) layers->insert(l);
    return Status::ok();
  }
  std::istringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    int a = 0, b = 0;
    char dash = 0, extra = 0;
    const int n = std::sscanf(item.c_str(), "%d%c%d%c", &a, &dash, &b, &extra);
    if (n == 1) {
      b = a;
    } else if (n != 3 || dash != '-') {
      return Status::error("--layers: '" + item + "' is not a layer or a range like 1-3");
    }
    if (a < 0 || b < a || b >= n_layers) {
      return Status::error("--layers: '" + item + "' is outside the model's layers 0-" + std::to_string(n_layers - 1));
    }
    for (int l = a; l <= b; ++l) layers->insert(l);
  }
  return Status::ok();
}

int fail(const Status& st) {
  std::fprintf(stderr, "glassbox dump: %s\n", st.message().c_str());
  return 1;
}

int run_dump(const DumpOptions& o) {
  std::vector<int32_t> ids;
  if (!o.prompt_ids.empty()) {
    if (Status st = parse_token_ids(o.prompt_ids, &ids); !st) return fail(st);
  } else {
#ifdef GB_DUMP_HAS_TOKENIZER
    auto tok = Tokenizer::load(o.model);
    if (!tok.is_ok()) return fail(tok.status());
    ids = (*tok)->encode(o.prompt, /*add_special=*/true);
    if (ids.empty()) return fail(Status::error("--prompt encodes to no tokens"));
#else
    return fail(Status::error("--prompt needs the tokenizer library, which this build lacks; use --prompt-ids"));
#endif
  }
  std::vector<HookPoint> points;
  if (Status st = parse_points(o.points, &points); !st) return fail(st);

  auto model = load_model(
      o.model, {.max_batch_tokens = static_cast<int32_t>(std::min<size_t>(ids.size(), 512)), .n_threads = o.threads});
  if (!model.is_ok()) return fail(model.status());
  const ModelConfig& c = (*model)->config();
  std::set<int32_t> layers;
  if (Status st = parse_layers(o.layers, c.n_layers, &layers); !st) return fail(st);

  std::vector<std::pair<HookPoint, int32_t>> keys;
  for (HookPoint p : points) {
    if (!is_layer_point(p)) keys.emplace_back(p, -1);
    for (int32_t l : layers) {
      if (is_layer_point(p)) keys.emplace_back(p, l);
    }
  }
  auto steer = load_glass_interventions(o.glass, c);
  if (!steer.is_ok()) return fail(steer.status());
  auto captured = capture_hidden_states(**model, ids, keys, *steer);
  if (!captured.is_ok()) return fail(captured.status());
  const std::map<std::string, CapturedTensor>& tensors = *captured;
  const int32_t n = static_cast<int32_t>(ids.size());
  std::vector<SafetensorsEntry> entries;
  entries.push_back({"ids", DType::kI32, {static_cast<int64_t>(ids.size())}, ids.data()});
  for (const auto& [key, t] : tensors) entries.push_back({key, DType::kF32, {n, t.width}, t.data.data()});
  const std::map<std::string, std::string> meta = {{"model", o.model}, {"producer", "glassbox dump"}};
  if (Status st = write_safetensors(o.out, entries, meta); !st) return fail(st);
  std::fprintf(stderr, "glassbox dump: %s\nglassbox dump: %zu tokens, %zu tensors -> %s\n",
               (*model)->describe().c_str(), ids.size(), entries.size() - 1, o.out.c_str());

  if (o.stats) {
    // Per (point, layer): the token holding the largest |x|, and the median / RMS of that token.
    std::printf("%-22s %5s %5s %12s %12s %12s %10s\n", "point", "token", "dim", "max_abs", "median_abs", "rms",
                "max/median");
    struct Best {
      std::string key;
      int32_t position = 0;
      ops::RowStats stats;
      float rms = 0;
    };
    std::map<std::pair<int32_t, int>, Best> best;
    for (const auto& [key, t] : tensors) {
      Best* b = nullptr;
      for (int32_t pos = 0; pos < n; ++pos) {
        const ops::RowStats st = ops::row_stats(t.data.data() + pos * t.width, t.width);
        if (b == nullptr || st.max_abs > b->stats.max_abs) {
          b = &best[{t.layer, static_cast<int>(t.point)}];
          *b = {key, pos, st, static_cast<float>(std::sqrt(st.sum_sq / static_cast<double>(t.width)))};
        }
      }
    }
    for (const auto& [order, b] : best) {
      const double ratio = b.stats.median_abs > 0 ? b.stats.max_abs / b.stats.median_abs : 0.0;
      std::printf("%-22s %5d %5d %12.5g %12.5g %12.5g %10.1f\n", b.key.c_str(), b.position, b.stats.max_dim,
                  b.stats.max_abs, b.stats.median_abs, b.rms, ratio);
    }
  }
  return 0;
}

}  // namespace

void register_dump(CLI::App& app, Action* action) {
  auto o = std::make_shared<DumpOptions>();
  CLI::App* cmd = app.add_subcommand("dump", "Run a prompt and write hook-point tensors to a safetensors file");
  add_model_flag(*cmd, &o->model)->required();
  add_glass_flags(*cmd, &o->glass);
  auto* ids = cmd->add_option("--prompt-ids", o->prompt_ids, "Token ids, e.g. \"1 2 3\"");
  auto* text = cmd->add_option("--prompt,-p", o->prompt, "Prompt text (tokenized with the model's tokenizer)");
  ids->excludes(text);
  cmd->add_option("--points", o->points, "Comma list of hook points or 'all' (" + hook_point_list(false) + ")")
      ->capture_default_str();
  cmd->add_option("--layers", o->layers, "'all', or layers and ranges: 0,2 or 1-3")->capture_default_str();
  cmd->add_option("--output,-o", o->out, "Output .safetensors file")->required();
  add_threads_flag(*cmd, &o->threads);
  cmd->add_flag("--stats", o->stats, "Print per-point statistics: max |x| (token, dim), median |x|, RMS");
  cmd->callback([o, action, ids, text] {
    if (ids->count() == 0 && text->count() == 0) throw CLI::RequiredError("--prompt-ids or --prompt");
    *action = [o] { return run_dump(*o); };
  });
}

}  // namespace gb::cli
