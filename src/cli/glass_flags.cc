// The local glass-box flags (glass_flags.h).
#include "cli/glass_flags.h"

#include <map>
#include <memory>

#include "core/mapped_file.h"
#include "formats/json_nesting.h"

namespace gb::cli {

void add_glass_flags(CLI::App& cmd, GlassFlags* flags) {
  cmd.add_option("--glassbox", flags->file,
                 "JSON file with a request's `glassbox` object (observe, interventions, massive, stop_on_repetition)")
      ->check(CLI::ExistingFile);
  cmd.add_option("--control-vector", flags->control_vectors,
                 "NAME=PATH: a control-vector GGUF the --glassbox file may name (repeatable)");
}

Result<LocalGlass> load_glass_flags(const GlassFlags& flags, const ModelConfig& config) {
  if (flags.file.empty()) {
    if (!flags.control_vectors.empty()) return Status::error("--control-vector needs --glassbox to use it");
    return LocalGlass{};
  }
  std::map<std::string, std::shared_ptr<const ControlVector>> vectors;
  for (const std::string& nv : flags.control_vectors) {
    const size_t eq = nv.find('=');
    if (eq == 0 || eq == std::string::npos || eq + 1 == nv.size())
      return Status::error("--control-vector " + nv + ": expected NAME=PATH");
    const std::string name = nv.substr(0, eq);
    GB_ASSIGN_OR_RETURN(ControlVector cv, load_control_vector(nv.substr(eq + 1), config, name));
    vectors[name] = std::make_shared<const ControlVector>(std::move(cv));
  }
  GB_ASSIGN_OR_RETURN(std::string text, read_file(flags.file));
  nlohmann::json ext = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (ext.is_discarded()) return Status::error(flags.file + ": not valid JSON");
  if (json_nesting_exceeds(ext))
    return Status::error(flags.file + ": JSON nested deeper than " + std::to_string(kMaxJsonNesting) + " levels");
  // The file may hold the `glassbox` object itself or a request body around it.
  if (ext.is_object() && ext.contains("glassbox")) ext = ext["glassbox"];
  auto parsed = parse_local_glass(ext, config, &vectors);
  if (!parsed.is_ok()) return parsed.status().with_context(flags.file);
  return parsed;
}

Result<std::shared_ptr<const GlassSpec>> load_glass_interventions(const GlassFlags& flags, const ModelConfig& config) {
  GB_ASSIGN_OR_RETURN(LocalGlass glass, load_glass_flags(flags, config));
  if (flags.file.empty()) return std::shared_ptr<const GlassSpec>();
  if (glass.spec == nullptr || glass.spec->interventions.empty())
    return Status::error(flags.file +
                         ": no interventions (here --glassbox steers the model the analysis runs; the analysis "
                         "observes what it needs itself)");
  return glass.spec;
}

}  // namespace gb::cli
