// Each subcommand of `glassbox` lives in its own <name>_cmd.cc and registers itself here.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace gb::cli {

// A subcommand's action; returns the process exit code.
using Action = std::function<int()>;

// Each register_* adds a subcommand to app and sets *action to run when it is chosen.
void register_tokenize(CLI::App& app, Action* action);
void register_generate(CLI::App& app, Action* action);
void register_bench(CLI::App& app, Action* action);
void register_dump(CLI::App& app, Action* action);
void register_serve(CLI::App& app, Action* action);
void register_audit(CLI::App& app, Action* action);
void register_score(CLI::App& app, Action* action);
void register_patch(CLI::App& app, Action* action);
void register_lens(CLI::App& app, Action* action);
void register_scan(CLI::App& app, Action* action);
void register_depth(CLI::App& app, Action* action);
void register_sweep(CLI::App& app, Action* action);
void register_eval(CLI::App& app, Action* action);

}  // namespace gb::cli
