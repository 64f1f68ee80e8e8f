// --glassbox FILE and --control-vector NAME=PATH, for the subcommands that run requests locally
// (generate, score; and dump, scan, depth, lens, sweep, which take its interventions): the server's `glassbox` request
// object from a JSON file, applied without a server, keys or audit store — the CLI is the researcher's own process, so
// no policy applies.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "glass/codec.h"
#include "model/config.h"

namespace gb::cli {

struct GlassFlags {
  std::string file;                          // JSON: the `glassbox` object of a request
  std::vector<std::string> control_vectors;  // NAME=PATH (llama.cpp control-vector GGUFs)
};
void add_glass_flags(CLI::App& cmd, GlassFlags* flags);
// The parsed, resolved spec (LocalGlass::spec null without --glassbox). Errors name the file
// and the field.
Result<LocalGlass> load_glass_flags(const GlassFlags& flags, const ModelConfig& config);
// For the analyses (dump, scan, depth, lens, sweep), which observe what they need themselves: the
// file's interventions, added to every request they run (null without --glassbox; an error when
// the file has none).
Result<std::shared_ptr<const GlassSpec>> load_glass_interventions(const GlassFlags& flags, const ModelConfig& config);

}  // namespace gb::cli
