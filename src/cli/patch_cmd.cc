// `glassbox patch diff | apply | verify | info`: weight patches (src/patch) from the command line.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/table.h"
#include "patch/patch.h"

namespace gb::cli {

namespace {

struct PatchOptions {
  std::string base, edited, out, patch;
  patch::DiffOptions diff;
  bool json = false;
};

int fail(const char* sub, const std::string& m) {
  std::fprintf(stderr, "glassbox patch %s: %s\n", sub, m.c_str());
  return 1;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::string detail(const patch::Edit& e) {
  char buf[96];
  switch (e.kind) {
    case patch::EditKind::kLowRank:
      std::snprintf(buf, sizeof buf, "rank %lld, scale %g", (long long)e.rank, e.scale);
      break;
    case patch::EditKind::kColumns: std::snprintf(buf, sizeof buf, "%zu columns", e.indices.size()); break;
    case patch::EditKind::kRows: std::snprintf(buf, sizeof buf, "%zu rows", e.indices.size()); break;
    case patch::EditKind::kSparse: std::snprintf(buf, sizeof buf, "%zu elements", e.indices.size()); break;
    case patch::EditKind::kFull: std::snprintf(buf, sizeof buf, "whole tensor"); break;
  }
  return buf;
}

void print_info(const patch::Patch& p) {
  std::printf("%s %s (%s)\n", p.name.c_str(), p.version.empty() ? "-" : p.version.c_str(),
              patch::patch_source_name(p.source));
  if (!p.description.empty()) std::printf("description: %s\n", p.description.c_str());
  std::printf("base model: %s\n", p.base_model.empty() ? "-" : p.base_model.c_str());
  if (!p.manifest_sha256.empty()) std::printf("manifest sha256: %s\n", p.manifest_sha256.c_str());
  int64_t weights = 0, low_rank = 0;
  for (const auto& e : p.edits) {
    weights += e.weights_changed;
    low_rank += e.kind == patch::EditKind::kLowRank;
  }
  std::printf("%zu edits (%lld low-rank), %lld weights replaced, %lld bytes stored\n", p.edits.size(),
              (long long)low_rank, (long long)weights, (long long)p.stored_bytes());
  std::vector<std::vector<std::string>> cells = {{"tensor", "kind", "shape", "what", "bytes"}};
  for (const auto& e : p.edits) {
    cells.push_back(
        {e.tensor, patch::edit_kind_name(e.kind), shape_str(e.shape), detail(e), std::to_string(e.stored_bytes())});
  }
  print_columns(cells, "  ");
}

int run_diff(const PatchOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  auto st = patch::diff_checkpoints(o.base, o.edited, o.out, o.diff);
  if (!st.is_ok()) return fail("diff", st.message());
  for (const auto& f : st->other_files_differing) {
    std::fprintf(stderr,
                 "glassbox patch diff: warning: %s differs between the checkpoints and is not part of the patch\n",
                 f.c_str());
  }
  std::printf("%lld of %lld tensors changed, %lld weights, %lld bytes stored; applying it reproduces %s (%.2f s)\n",
              (long long)st->tensors_changed, (long long)st->tensors_compared, (long long)st->weights_changed,
              (long long)st->bytes_stored, o.edited.c_str(), seconds_since(t0));
  return 0;
}

int run_apply(const PatchOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  auto p = patch::load_patch(o.patch);
  if (!p.is_ok()) return fail("apply", p.message());
  Status st = patch::apply_patch(o.base, *p, o.out);
  if (!st.is_ok()) return fail("apply", st.message());
  std::printf("wrote %s: %s + %zu edits%s (%.2f s)\n", o.out.c_str(), o.base.c_str(), p->edits.size(),
              p->source == patch::PatchSource::kArtifact ? ", every file's SHA-256 as the manifest says" : "",
              seconds_since(t0));
  return 0;
}

int run_verify(const PatchOptions& o) {
  auto p = patch::load_patch(o.patch);
  if (!p.is_ok()) return fail("verify", p.message());
  if (!o.base.empty()) {
    Status st = patch::verify_patch(*p, o.base);
    if (!st.is_ok()) return fail("verify", st.message());
  }
  std::printf("%s: OK (%zu edit files%s)\n", o.patch.c_str(), p->edits.size(),
              o.base.empty() ? "" : ", every touched base tensor");
  return 0;
}

int run_info(const PatchOptions& o) {
  auto p = patch::load_patch(o.patch);
  if (!p.is_ok()) return fail("info", p.message());
  print_info(*p);
  return 0;
}

}  // namespace

void register_patch(CLI::App& app, Action* action) {
  auto o = std::make_shared<PatchOptions>();
  CLI::App* cmd = app.add_subcommand("patch", "Weight patches: diff two checkpoints, apply, verify, describe");
  cmd->require_subcommand(1);

  CLI::App* diff = cmd->add_subcommand("diff", "Store what changed between two checkpoints as a patch");
  diff->add_option("--base", o->base, "Base Hugging Face checkpoint directory")->required();
  diff->add_option("--edited", o->edited, "Edited checkpoint directory (same tensors, some values changed)")
      ->required();
  diff->add_option("-o,--out", o->out, "Patch directory to write (new or empty)")->required();
  diff->add_option("--name", o->diff.name, "Patch name (default: the edited directory's name)");
  diff->add_option("--version", o->diff.version, "Patch version (default 1)");
  diff->add_option("--description", o->diff.description, "What the edit does");
  diff->add_option("--base-name", o->diff.base_name, "Base model name (default: the base directory's name)");
  diff->callback([o, action]() { *action = [o]() { return run_diff(*o); }; });

  CLI::App* apply = cmd->add_subcommand("apply", "Write base + patch as a new checkpoint (bit-exact for patches)");
  apply->add_option("--base", o->base, "Base Hugging Face checkpoint directory")->required();
  apply->add_option("patch", o->patch, "Patch directory, PEFT adapter directory or LoRA GGUF")->required();
  apply->add_option("-o,--out", o->out, "Output directory (new or empty)")->required();
  apply->callback([o, action]() { *action = [o]() { return run_apply(*o); }; });

  CLI::App* verify = cmd->add_subcommand("verify", "Check every hash of a patch (and of the base tensors it edits)");
  verify->add_option("patch", o->patch, "Patch directory, PEFT adapter directory or LoRA GGUF")->required();
  verify->add_option("--base", o->base, "Base checkpoint whose edited tensors must match the manifest");
  verify->callback([o, action]() { *action = [o]() { return run_verify(*o); }; });

  CLI::App* info = cmd->add_subcommand("info", "Print a patch's manifest summary");
  info->add_option("patch", o->patch, "Patch directory, PEFT adapter directory or LoRA GGUF")->required();
  info->callback([o, action]() { *action = [o]() { return run_info(*o); }; });
}

}  // namespace gb::cli
