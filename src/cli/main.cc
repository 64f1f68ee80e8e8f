// glassbox: command-line entry point.
#include <cstdio>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"Glassbox: an LLM inference server whose insides are observable and steerable per request"};
  app.require_subcommand(1);
  gb::cli::Action action;
#ifdef GB_HAVE_CMD_TOKENIZE
  gb::cli::register_tokenize(app, &action);
#endif
#ifdef GB_HAVE_CMD_GENERATE
  gb::cli::register_generate(app, &action);
#endif
#ifdef GB_HAVE_CMD_BENCH
  gb::cli::register_bench(app, &action);
#endif
#ifdef GB_HAVE_CMD_DUMP
  gb::cli::register_dump(app, &action);
#endif
#ifdef GB_HAVE_CMD_SERVE
  gb::cli::register_serve(app, &action);
#endif
#ifdef GB_HAVE_CMD_AUDIT
  gb::cli::register_audit(app, &action);
#endif
#ifdef GB_HAVE_CMD_SCORE
  gb::cli::register_score(app, &action);
#endif
#ifdef GB_HAVE_CMD_PATCH
  gb::cli::register_patch(app, &action);
#endif
#ifdef GB_HAVE_CMD_LENS
  gb::cli::register_lens(app, &action);
#endif
#ifdef GB_HAVE_CMD_SCAN
  gb::cli::register_scan(app, &action);
#endif
#ifdef GB_HAVE_CMD_DEPTH
  gb::cli::register_depth(app, &action);
#endif
#ifdef GB_HAVE_CMD_SWEEP
  gb::cli::register_sweep(app, &action);
#endif
#if defined(GB_HAVE_CMD_EVAL) && defined(GB_HAVE_CMD_SERVE)
  gb::cli::register_eval(app, &action);
#endif
  CLI11_PARSE(app, argc, argv);
  if (!action) {
    std::fprintf(stderr, "glassbox: no command chosen (see --help)\n");
    return 2;
  }
  return action();
}
