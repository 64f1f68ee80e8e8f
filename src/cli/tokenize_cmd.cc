// `glassbox tokenize`: encode text to ids and pieces, or decode ids, with any tokenizer the
// library loads (model directory, tokenizer.json, .gguf).
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "tokenizer/tokenizer.h"

namespace gb::cli {

namespace {

struct TokenizeOptions {
  std::string tokenizer_path;
  std::string text;
  std::string decode_ids;
  bool json = false;
  bool add_special = true;
  bool skip_special = false;
};

// "1 2 3", "1,2,3" or "[1, 2, 3]".
bool parse_ids(const std::string& s, std::vector<int32_t>* out, std::string* error) {
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == ' ' || c == ',' || c == '\t' || c == '\n' || c == '[' || c == ']') {
      ++i;
      continue;
    }
    size_t end = i;
    if (s[end] == '-') ++end;
    while (end < s.size() && s[end] >= '0' && s[end] <= '9') ++end;
    if (end == i || (end == i + 1 && s[i] == '-')) {
      *error = "not a token id at '" + s.substr(i, 12) + "'";
      return false;
    }
    try {
      out->push_back(static_cast<int32_t>(std::stol(s.substr(i, end - i))));
    } catch (const std::exception&) {
      *error = "token id out of range: " + s.substr(i, end - i);
      return false;
    }
    i = end;
  }
  return true;
}

std::string dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

int run(const TokenizeOptions& o) {
  auto loaded = Tokenizer::load(o.tokenizer_path);
  if (!loaded.is_ok()) {
    std::fprintf(stderr, "glassbox tokenize: %s\n", loaded.message().c_str());
    return 1;
  }
  const Tokenizer& tok = **loaded;
  if (!o.decode_ids.empty()) {
    std::vector<int32_t> ids;
    std::string error;
    if (!parse_ids(o.decode_ids, &ids, &error)) {
      std::fprintf(stderr, "glassbox tokenize: --decode: %s\n", error.c_str());
      return 2;
    }
    for (int32_t id : ids) {
      if (id < 0 || id >= tok.vocab_size()) {
        std::fprintf(stderr, "glassbox tokenize: --decode: id %d is outside the vocabulary (0..%d)\n", id,
                     tok.vocab_size() - 1);
        return 2;
      }
    }
    const std::string text = tok.decode(ids, o.skip_special);
    if (o.json) std::printf("%s\n", dump({{"text", text}}).c_str());
    else std::printf("%s\n", text.c_str());
    return 0;
  }
  std::string text = o.text;
  if (text.empty()) {
    // No TEXT argument: read standard input (lets whole files be tokenized).
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  const std::vector<int32_t> ids = tok.encode(text, o.add_special);
  nlohmann::json pieces = nlohmann::json::array();
  for (int32_t id : ids) pieces.push_back(tok.token_to_piece(id));
  if (o.json) {
    std::printf("%s\n", dump({{"ids", ids}, {"pieces", pieces}}).c_str());
    return 0;
  }
  std::printf("%zu tokens\n", ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    // Pieces printed as JSON strings so spaces, newlines and control bytes stay visible.
    std::printf("%8d  %s\n", ids[i], dump(pieces[i]).c_str());
  }
  return 0;
}

}  // namespace

void register_tokenize(CLI::App& app, Action* action) {
  auto opts = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Encode text to token ids and pieces, or decode ids to text");
  cmd->add_option("--tokenizer,-t", opts->tokenizer_path,
                  "Model directory (tokenizer.json + tokenizer_config.json), tokenizer.json, or .gguf file")
      ->required();
  cmd->add_option("text", opts->text, "Text to encode (read from standard input when omitted)");
  cmd->add_option("--decode,-d", opts->decode_ids, "Decode these ids instead (\"1 2 3\" or \"1,2,3\")");
  cmd->add_flag("--json", opts->json, "Print one JSON object: {\"ids\": [...], \"pieces\": [...]} ({\"text\": ...} with --decode)");
  cmd->add_flag("--add-special,!--no-add-special", opts->add_special,
                "Add BOS/EOS as the tokenizer's post-processor says (default: add, like Hugging Face)");
  cmd->add_flag("--skip-special", opts->skip_special, "With --decode: drop special tokens from the text");
  cmd->callback([opts, action] { *action = [opts] { return run(*opts); }; });
}

}  // namespace gb::cli
