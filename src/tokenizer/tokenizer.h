// The tokenizer: text <-> token ids for Hugging Face tokenizer.json and GGUF vocabularies
// (byte-level BPE and SentencePiece-style BPE with byte fallback), plus a streaming decoder.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pipeline.h"

namespace gb {

struct GgufFile;
struct TextPiece;

// A token the tokenizer matches in raw text before normalization / pre-tokenization
// (HF "added tokens": special tokens like <|im_start|> and user-added words).
struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;       // swallow whitespace to the left of the match
  bool rstrip = false;       // swallow whitespace to the right of the match
  bool single_word = false;  // only match when not inside a word
  bool normalized = false;   // match against normalized text instead of raw text
};

class Tokenizer {
 public:
  // path: a model directory (tokenizer.json [+ tokenizer_config.json]), a tokenizer.json, or
  // a .gguf file.
  static Result<std::unique_ptr<Tokenizer>> load(const std::string& path);
  // tokenizer_config_json may be empty; it supplies the chat template, bos/eos strings and
  // add_bos_token / add_eos_token overrides.
  static Result<std::unique_ptr<Tokenizer>> from_hf_json(std::string_view tokenizer_json,
                                                         std::string_view tokenizer_config_json = {});
  static Result<std::unique_ptr<Tokenizer>> from_gguf(const GgufFile& gguf);

  // Thread-safe: encode and decode only read the tokenizer (the word cache is per thread).
  // Invalid UTF-8 in text is replaced by U+FFFD first. add_special adds BOS/EOS as the
  // post-processor (or add_bos/add_eos) says; special-token text is matched either way.
  std::vector<int32_t> encode(std::string_view text, bool add_special) const;
  // Ids out of range decode to nothing. skip_special drops special tokens (BOS, EOS, ...).
  std::string decode(std::span<const int32_t> ids, bool skip_special) const;

  // The vocabulary string of a token (e.g. "Ġhello", "▁the", "<0x0A>"); empty if out of range.
  const std::string& token_to_piece(int32_t id) const;
  // The id of a vocabulary string (added tokens included), or -1.
  int32_t find_token(std::string_view piece) const;
  int32_t vocab_size() const { return static_cast<int32_t>(pieces_.size()); }
  bool is_special(int32_t id) const;

  // Special ids, -1 when the tokenizer has none.
  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  int32_t eot_id() const { return eot_id_; }
  int32_t pad_id() const { return pad_id_; }
  int32_t unk_id() const { return unk_id_; }
  // Ids that end generation (eos, eot and e.g. <|im_end|>, <|eot_id|> when present).
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }

  // The default chat template (tokenizer_config.json "chat_template" or GGUF
  // tokenizer.chat_template), empty when none; named ones (list form / GGUF
  // tokenizer.chat_template.<name>) in chat_templates().
  const std::string& chat_template() const { return chat_template_; }
  const std::unordered_map<std::string, std::string>& chat_templates() const { return chat_templates_; }

  // Internal: the loaders fill a Tokenizer through this.
  struct Builder;

 private:
  friend struct Builder;
  friend class StreamDecoder;
  Tokenizer() = default;

  // Encodes one segment of text between added tokens (normalize, pre-tokenize, BPE).
  void encode_segment(std::string_view text, bool at_start, std::vector<int32_t>* out) const;
  void split_added(std::string_view text, bool normalized_pass, std::vector<TextPiece>* out) const;

  std::vector<std::string> pieces_;  // [vocab_size] id -> vocabulary string
  tok::StringTable piece_ids_;       // vocabulary string -> id
  std::vector<uint8_t> special_;     // [vocab_size] 1 for special added tokens
  std::vector<AddedToken> added_;
  tok::AddedMatcher raw_matcher_;         // added tokens with normalized = false
  tok::AddedMatcher normalized_matcher_;  // added tokens with normalized = true

  tok::Normalizer normalizer_;
  tok::PreTokenizer pre_tokenizer_;
  tok::Decoder decoder_;
  tok::BpeModel model_;

  std::vector<int32_t> prefix_ids_;  // post-processor ids before the text (BOS)
  std::vector<int32_t> suffix_ids_;  // ... and after it (EOS)

  int32_t bos_id_ = -1, eos_id_ = -1, eot_id_ = -1, pad_id_ = -1, unk_id_ = -1;
  std::vector<int32_t> stop_ids_;
  std::string bos_token_, eos_token_;
  bool add_bos_ = false, add_eos_ = false;
  std::string chat_template_;
  std::unordered_map<std::string, std::string> chat_templates_;
};

// Turns a stream of generated ids into text without ever emitting half a UTF-8 character:
// push() returns the text that became complete with this id (often empty), flush() what is
// left at the end (an incomplete character becomes U+FFFD). Works for every decoder the
// Tokenizer supports because it decodes a small sliding window with the Tokenizer itself
// (the Hugging Face DecodeStream scheme), so streamed text always equals decode() of all ids.
// Not thread-safe: one per sequence.
class StreamDecoder {
 public:
  StreamDecoder(const Tokenizer& tokenizer, bool skip_special) : tokenizer_(&tokenizer), skip_special_(skip_special) {}
  // Sets the tokens already shown (e.g. the end of the prompt) as context without emitting
  // them, so the first generated token decodes as it would inside the whole text (a
  // SentencePiece "▁word" keeps its space after a prompt, and is stripped only after BOS).
  void prime(std::span<const int32_t> context);
  std::string push(int32_t id);
  std::string flush();
  // The text id would add if it came next, without taking it (logprobs' alternatives): decoded
  // in context like push, but never held back (an incomplete character shows as U+FFFD).
  std::string peek(int32_t id) const;

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::vector<int32_t> ids_;  // window: context tokens then not yet emitted tokens
  std::string prefix_;        // decode of the context part of the window
  size_t prefix_index_ = 0;   // ids_[prefix_index_:] are not yet emitted
};

}  // namespace gb
