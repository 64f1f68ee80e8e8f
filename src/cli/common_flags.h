// Flags that several subcommands share, declared once so each means the same everywhere:
// -m/--model, -t/--threads, --tokenizer and the sampling settings. (`serve` takes its flags from
// the ServerConfig field table and gets the same short names through kServeShortFlags.)
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace gb::cli {

// -m, --model: a Hugging Face model directory or a .gguf file.
CLI::Option* add_model_flag(CLI::App& cmd, std::string* model);
// -t, --threads: compute threads, 0 = all CPUs.
CLI::Option* add_threads_flag(CLI::App& cmd, int* threads);
// --kv-cache-dtype: the KV cache's element type, f32 | bf16 | f16 (the engine setting
// EngineConfig::kv_cache_dtype; `serve` has it as the kv_cache_dtype field).
CLI::Option* add_kv_cache_dtype_flag(CLI::App& cmd, std::string* dtype);
// --tokenizer: a model directory, a tokenizer.json or a .gguf file; `what` finishes the help line.
CLI::Option* add_tokenizer_flag(CLI::App& cmd, std::string* path, const std::string& what);

// The `serve` fields that take the short names above (field name -> short flag).
inline const std::map<std::string, std::string> kServeShortFlags = {{"model", "-m"}, {"threads", "-t"}};

// Sampling settings of the command line (llama.cpp-like defaults; the HTTP API's defaults are
// OpenAI's and live in the server).
struct SamplingFlags {
  float temperature = 0.8f;
  int top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int64_t seed = -1;  // < 0: a random seed
};
// --temperature, --top-k, --top-p, --min-p, --repetition-penalty, --presence-penalty,
// --frequency-penalty, --seed.
void add_sampling_flags(CLI::App& cmd, SamplingFlags* s);

// --prompt-ids: token ids separated by spaces or commas ("1 2 3"); an error names a bad one.
Status parse_token_ids(const std::string& text, std::vector<int32_t>* ids);

}  // namespace gb::cli
