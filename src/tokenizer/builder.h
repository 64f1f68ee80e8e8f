// Internal to the loaders: fills a Tokenizer's private fields and derives the lookup tables.
#pragma once

#include "tokenizer/tokenizer.h"

namespace gb {

struct Tokenizer::Builder {
  std::unique_ptr<Tokenizer> t{new Tokenizer()};
  // The model's own vocabulary: id -> vocabulary string (as written in the file). Added
  // tokens may extend it.
  std::vector<std::string> model_pieces;
  std::vector<uint8_t> in_model;  // [model_pieces.size()] 1 where the id is a model token

  // Model piece string -> id, built on demand for merges.
  tok::StringTable piece_lookup;
  void build_piece_lookup();
  // Adds one merge given as two vocabulary strings; rank = order in the file.
  Status add_merge(std::string_view a, std::string_view b, int32_t rank);

  // Derives the lookup tables, byte tables, matchers and special ids. bos/eos strings may be
  // empty (then derived from the post-processor or common names).
  Result<std::unique_ptr<Tokenizer>> finish();
  Tokenizer& tk() { return *t; }
  // The loaders (hf_json.cc, gguf_vocab.cc).
  static Result<std::unique_ptr<Tokenizer>> parse_hf(std::string_view tokenizer_json, std::string_view config_json);
  static Result<std::unique_ptr<Tokenizer>> build_gguf(const GgufFile& g);
  // add_bos_token / add_eos_token (tokenizer_config.json or GGUF) replace what the
  // post-processor adds; an absent flag keeps it.
  static void apply_add_flags(Tokenizer& k, std::optional<bool> add_bos, std::optional<bool> add_eos);
};

}  // namespace gb
