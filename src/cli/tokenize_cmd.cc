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
#include "cli/common_flags.h"
#include "core/mapped_file.h"
#include "engine/chat_prompt.h"
#include "tokenizer/tokenizer.h"

namespace gb::cli {

namespace {

struct TokenizeOptions {
  std::string tokenizer_path;  // --tokenizer
  std::string model;           // -m/--model: the model's own tokenizer
  std::string old_t;           // -t: the old spelling of --tokenizer, refused with a hint
  std::string text;
  std::string decode_ids;
  std::string chat_file;
  std::string chat_template_file;
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

// --chat FILE.json: a messages array, or {"messages": [...], "add_generation_prompt": bool,
// "tools": [...], any other template variables}. Prints the rendered prompt (with --json also
// its ids, encoded without added special tokens as transformers' apply_chat_template does).
int run_chat(const Tokenizer& tok, const TokenizeOptions& o) {
  auto fail = [](const std::string& m) {
    std::fprintf(stderr, "glassbox tokenize: --chat: %s\n", m.c_str());
    return 2;
  };
  auto src = read_file(o.chat_file);
  if (!src.is_ok()) return fail(src.message());
  nlohmann::ordered_json doc = nlohmann::ordered_json::parse(*src, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return fail(o.chat_file + " is not valid JSON");
  nlohmann::ordered_json messages, tools, extra = nlohmann::ordered_json::object();
  bool add_generation_prompt = true;
  if (doc.is_array()) {
    messages = doc;
  } else if (doc.is_object() && doc.contains("messages") && doc["messages"].is_array()) {
    for (auto it = doc.begin(); it != doc.end(); ++it) {
      if (it.key() == "messages") messages = it.value();
      else if (it.key() == "tools") tools = it.value();
      else if (it.key() == "add_generation_prompt" && it.value().is_boolean())
        add_generation_prompt = it.value().get<bool>();
      else extra[it.key()] = it.value();
    }
  } else {
    return fail(o.chat_file + ": expected a messages array or an object with \"messages\"");
  }
  std::string tmpl;
  if (!o.chat_template_file.empty()) {
    auto t = read_file(o.chat_template_file);
    if (!t.is_ok()) return fail(t.message());
    tmpl = *t;
  }
  auto prompter = ChatPrompter::create(tok, tmpl);
  if (!prompter.is_ok()) return fail(prompter.message());
  auto prompt = prompter->render(messages, add_generation_prompt, tools, extra);
  if (!prompt.is_ok()) return fail(prompt.message());
  if (o.json) {
    std::printf("%s\n", dump({{"prompt", *prompt}, {"ids", tok.encode(*prompt, /*add_special=*/false)}}).c_str());
  } else {
    std::fwrite(prompt->data(), 1, prompt->size(), stdout);
    if (prompt->empty() || prompt->back() != '\n') std::printf("\n");
  }
  return 0;
}

int run(const TokenizeOptions& o) {
  auto loaded = Tokenizer::load(o.tokenizer_path.empty() ? o.model : o.tokenizer_path);
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
  if (!o.chat_file.empty()) return run_chat(tok, o);
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
  auto* tokenizer =
      add_tokenizer_flag(*cmd, &opts->tokenizer_path, " (a directory: tokenizer.json + tokenizer_config.json)");
  auto* model = add_model_flag(*cmd, &opts->model);
  model->excludes(tokenizer);
  // -t means --threads in every other subcommand; tokenizing has no threads. Named here only to
  // tell a user of the old spelling what to write instead.
  auto* old_t = cmd->add_option("-t", opts->old_t)->group("");
  cmd->add_option("text", opts->text, "Text to encode (read from standard input when omitted)");
  cmd->add_option("--decode,-d", opts->decode_ids, "Decode these ids instead (\"1 2 3\" or \"1,2,3\")");
  cmd->add_flag("--json", opts->json,
                "Print one JSON object: {\"ids\": [...], \"pieces\": [...]} ({\"text\": ...} with --decode)");
  cmd->add_flag("--add-special,!--no-add-special", opts->add_special,
                "Add BOS/EOS as the tokenizer's post-processor says (default: add, like Hugging Face)");
  cmd->add_flag("--skip-special", opts->skip_special, "With --decode: drop special tokens from the text");
  cmd->add_option(
      "--chat", opts->chat_file,
      "Render this JSON chat (messages array, or {\"messages\", \"tools\", \"add_generation_prompt\", ...}) "
      "with the tokenizer's chat template and print the prompt");
  cmd->add_option("--chat-template", opts->chat_template_file, "With --chat: a Jinja template file to use instead");
  cmd->callback([opts, action, tokenizer, model, old_t] {
    if (old_t->count() > 0) {
      throw CLI::ValidationError("-t",
                                 "tokenize takes the tokenizer as --tokenizer PATH or the model as -m PATH (-t is "
                                 "--threads in the other subcommands)");
    }
    if (tokenizer->count() == 0 && model->count() == 0) throw CLI::RequiredError("--tokenizer PATH or -m MODEL");
    *action = [opts] { return run(*opts); };
  });
}

}  // namespace gb::cli
