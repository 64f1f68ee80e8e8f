// The shared flag declarations (common_flags.h).
#include "cli/common_flags.h"

#include <climits>
#include <cstdlib>
#include <sstream>

namespace gb::cli {

CLI::Option* add_model_flag(CLI::App& cmd, std::string* model) {
  return cmd.add_option("-m,--model", *model, "model: Hugging Face directory or .gguf file");
}

CLI::Option* add_threads_flag(CLI::App& cmd, int* threads) {
  return cmd.add_option("-t,--threads", *threads, "compute threads (0: all CPUs)")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
}

CLI::Option* add_kv_cache_dtype_flag(CLI::App& cmd, std::string* dtype) {
  return cmd.add_option("--kv-cache-dtype", *dtype, "KV cache element type: f32, bf16 or f16 (half the KV memory)")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
}

CLI::Option* add_tokenizer_flag(CLI::App& cmd, std::string* path, const std::string& what) {
  return cmd.add_option("--tokenizer", *path, "tokenizer: model directory, tokenizer.json or .gguf file" + what);
}

void add_sampling_flags(CLI::App& cmd, SamplingFlags* s) {
  cmd.add_option("--temperature", s->temperature, "0 = greedy")->capture_default_str();
  cmd.add_option("--top-k", s->top_k, "0 = off")->capture_default_str();
  cmd.add_option("--top-p", s->top_p, "1 = off")->capture_default_str();
  cmd.add_option("--min-p", s->min_p, "0 = off")->capture_default_str();
  cmd.add_option("--repetition-penalty", s->repetition_penalty, "1 = off (Hugging Face rule)")->capture_default_str();
  cmd.add_option("--presence-penalty", s->presence_penalty, "0 = off (OpenAI rule)")->capture_default_str();
  cmd.add_option("--frequency-penalty", s->frequency_penalty, "0 = off (OpenAI rule)")->capture_default_str();
  cmd.add_option("--seed", s->seed, "random seed (same seed and settings: same tokens)");
}

Status parse_token_ids(const std::string& text, std::vector<int32_t>* ids) {
  std::string s = text;
  for (char& c : s) {
    if (c == ',') c = ' ';
  }
  std::istringstream in(s);
  std::string tok;
  while (in >> tok) {
    char* end = nullptr;
    const long v = std::strtol(tok.c_str(), &end, 10);
    if (end == tok.c_str() || *end != '\0' || v < 0 || v > INT32_MAX) {
      return Status::error("--prompt-ids: '" + tok + "' is not a token id");
    }
    ids->push_back(static_cast<int32_t>(v));
  }
  if (ids->empty()) return Status::error("--prompt-ids: no ids given");
  return Status::ok();
}

}  // namespace gb::cli
