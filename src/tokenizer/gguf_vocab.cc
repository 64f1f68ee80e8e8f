// Builds a Tokenizer from GGUF tokenizer.ggml.* metadata, mirroring what llama.cpp does:
// "llama" = SentencePiece BPE merged by token score with byte fallback, "gpt2" = byte-level
// BPE with merges and a pre-tokenizer regex chosen by tokenizer.ggml.pre.
#include "formats/gguf.h"
#include "tokenizer/builder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>

namespace gb {

namespace {

using nlohmann::json;

// llama.cpp token types.
enum TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kSpace = "\xE2\x96\x81";  // ▁

Result<const json*> get_array(const GgufFile& g, const std::string& key, size_t n, bool required) {
  const json* v = g.find(key);
  if (v == nullptr) {
    if (required) return Status::error("GGUF vocabulary: missing " + key);
    return static_cast<const json*>(nullptr);
  }
  if (!v->is_array()) return Status::error("GGUF vocabulary: " + key + " must be an array");
  if (n != SIZE_MAX && v->size() != n) {
    return Status::error("GGUF vocabulary: " + key + " has " + std::to_string(v->size()) + " entries, tokens has " +
                         std::to_string(n));
  }
  return v;
}

Result<int32_t> get_id(const GgufFile& g, const std::string& key, size_t n_vocab) {
  const json* v = g.find(key);
  if (v == nullptr) return -1;
  if (!v->is_number_integer()) return Status::error("GGUF vocabulary: " + key + " must be an integer");
  const int64_t id = v->get<int64_t>();
  // Some converters write -1 (or UINT32_MAX) for "none".
  if (id == -1 || id == 0xFFFFFFFFll) return -1;
  if (id < 0 || static_cast<size_t>(id) >= n_vocab) {
    return Status::error("GGUF vocabulary: " + key + " = " + std::to_string(id) + " is out of range (vocab has " +
                         std::to_string(n_vocab) + " tokens)");
  }
  return static_cast<int32_t>(id);
}

std::optional<bool> get_flag(const GgufFile& g, const std::string& key) {
  const json* v = g.find(key);
  if (v == nullptr || !v->is_boolean()) return std::nullopt;
  return v->get<bool>();
}

// tokenizer.ggml.model: "llama" or "gpt2".
Result<std::string> read_model_kind(const GgufFile& g) {
  const json* model_v = g.find("tokenizer.ggml.model");
  if (model_v == nullptr) return Status::error("GGUF file has no tokenizer (tokenizer.ggml.model is missing)");
  if (!model_v->is_string()) return Status::error("GGUF vocabulary: tokenizer.ggml.model must be a string");
  std::string model = model_v->get<std::string>();
  if (model != "llama" && model != "gpt2") {
    return Status::error("unsupported GGUF tokenizer model '" + model + "' (supported: llama, gpt2)");
  }
  return model;
}

// The token strings into the builder and their llama.cpp types into `type` (kNormal when the
// file has none). Byte tokens and normal/user words take part in BPE; control tokens only match
// as text.
Status read_pieces(const json& tokens, const json* types, Tokenizer::Builder& b, std::vector<int32_t>* type) {
  const size_t n = tokens.size();
  b.model_pieces.resize(n);
  b.in_model.assign(n, 0);
  type->assign(n, kNormal);
  for (size_t i = 0; i < n; ++i) {
    const json& tk = tokens[i];
    if (!tk.is_string())
      return Status::error("GGUF vocabulary: tokenizer.ggml.tokens[" + std::to_string(i) + "] is not a string");
    b.model_pieces[i] = tk.get<std::string>();
    int32_t& ty = (*type)[i];
    if (types != nullptr) {
      if (!(*types)[i].is_number_integer())
        return Status::error("GGUF vocabulary: token_type entries must be integers");
      ty = (*types)[i].get<int32_t>();
    }
    b.in_model[i] = ty == kNormal || ty == kByte || ty == kUserDefined || ty == kUnused || ty == kUndefined;
  }
  return Status::ok();
}

struct SpecialIds {
  int32_t bos = -1, eos = -1, eot = -1, pad = -1, unk = -1;
};

Result<SpecialIds> read_special_ids(const GgufFile& g, size_t n) {
  SpecialIds s;
  GB_ASSIGN_OR_RETURN(s.bos, get_id(g, "tokenizer.ggml.bos_token_id", n));
  GB_ASSIGN_OR_RETURN(s.eos, get_id(g, "tokenizer.ggml.eos_token_id", n));
  GB_ASSIGN_OR_RETURN(s.eot, get_id(g, "tokenizer.ggml.eot_token_id", n));
  GB_ASSIGN_OR_RETURN(s.pad, get_id(g, "tokenizer.ggml.padding_token_id", n));
  GB_ASSIGN_OR_RETURN(s.unk, get_id(g, "tokenizer.ggml.unknown_token_id", n));
  return s;
}

// Control / user-defined / unknown tokens are matched in text before tokenization.
void add_text_matched_tokens(const std::vector<std::string>& pieces, const std::vector<int32_t>& type,
                             std::vector<AddedToken>* added) {
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (type[i] == kControl || type[i] == kUserDefined || type[i] == kUnknown) {
      AddedToken a;
      a.id = static_cast<int32_t>(i);
      a.content = pieces[i];
      a.special = type[i] != kUserDefined;
      added->push_back(std::move(a));
    }
  }
}

// SentencePiece BPE merges the adjacent pair whose merged piece scores highest (llama.cpp
// llm_tokenizer_spm); as ranks: every split of a vocabulary piece into two vocabulary pieces
// is a merge ranked by the piece's score, equal scores tied by position.
Status add_score_merges(const Tokenizer::Builder& b, const std::vector<int32_t>& type, const json& scores,
                        tok::BpeModel* m) {
  const size_t n = b.model_pieces.size();
  std::vector<float> score(n);
  for (size_t i = 0; i < n; ++i) {
    if (!scores[i].is_number()) return Status::error("GGUF vocabulary: scores entries must be numbers");
    score[i] = scores[i].get<float>();
  }
  std::vector<float> sorted;
  for (size_t i = 0; i < n; ++i) {
    if (type[i] == kNormal || type[i] == kUserDefined) sorted.push_back(score[i]);
  }
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  m->merges.reserve(n * 4);
  for (size_t i = 0; i < n; ++i) {
    if (type[i] != kNormal && type[i] != kUserDefined) continue;
    const std::string& p = b.model_pieces[i];
    const int32_t rank = static_cast<int32_t>(
        std::lower_bound(sorted.begin(), sorted.end(), score[i], std::greater<float>()) - sorted.begin());
    size_t k = 0;
    while (k < p.size()) {
      k += tok::utf8_len(static_cast<unsigned char>(p[k]));
      if (k >= p.size()) break;
      const int32_t l = b.piece_lookup.find(std::string_view(p).substr(0, k));
      const int32_t r = b.piece_lookup.find(std::string_view(p).substr(k));
      if (l >= 0 && r >= 0 && type[l] != kByte && type[r] != kByte) {
        m->merges.insert(l, r, {rank, static_cast<int32_t>(i)});
      }
    }
  }
  return Status::ok();
}

// SentencePiece text handling: spaces become ▁ (and a ▁ is prepended when add_space_prefix);
// decoding turns ▁ back into spaces, fuses byte tokens and strips the prepended space.
void add_sentencepiece_steps(bool add_space_prefix, tok::Normalizer* normalizer, tok::Decoder* decoder) {
  if (add_space_prefix) {
    tok::NormalizerStep prep{};
    prep.kind = tok::NormalizerStep::Kind::kPrepend;
    prep.content = kSpace;
    normalizer->steps.push_back(prep);
  }
  tok::NormalizerStep rep{};
  rep.kind = tok::NormalizerStep::Kind::kReplace;
  rep.pattern.literal = " ";
  rep.content = kSpace;
  normalizer->steps.push_back(rep);
  decoder->present = true;
  tok::DecoderStep d{};
  d.kind = tok::DecoderStep::Kind::kReplace;
  d.pattern.literal = kSpace;
  d.content = " ";
  decoder->steps.push_back(d);
  d = {};
  d.kind = tok::DecoderStep::Kind::kByteFallback;
  decoder->steps.push_back(d);
  d.kind = tok::DecoderStep::Kind::kFuse;
  decoder->steps.push_back(d);
  if (add_space_prefix) {
    d.kind = tok::DecoderStep::Kind::kStrip;
    d.content = " ";
    d.start = 1;
    d.stop = 0;
    decoder->steps.push_back(d);
  }
}

// tokenizer.ggml.merges: "a b" strings; rank = position.
Status add_listed_merges(const json& merges, Tokenizer::Builder& b, tok::BpeModel* m) {
  m->merges.reserve(merges.size());
  int32_t rank = 0;
  for (const json& mg : merges) {
    if (!mg.is_string()) return Status::error("GGUF vocabulary: tokenizer.ggml.merges entries must be strings");
    const std::string& s = mg.get_ref<const std::string&>();
    const size_t sp = s.find(' ', 1);
    if (sp == std::string::npos)
      return Status::error("GGUF vocabulary: merge '" + s + "' is not two tokens separated by a space");
    GB_RETURN_IF_ERROR(b.add_merge(std::string_view(s).substr(0, sp), std::string_view(s).substr(sp + 1), rank)
                           .with_context("GGUF vocabulary"));
    ++rank;
  }
  return Status::ok();
}

// What tokenizer.ggml.pre selects for a byte-level BPE model.
struct PreTokenizerChoice {
  const char* regex = nullptr;
  bool ignore_merges = false;  // llama3: whole words in the vocabulary skip merging
  bool add_bos = false;
  bool nfc = false;  // HF Qwen2 tokenizers NFC-normalize (llama.cpp skips it; the reference vectors are HF's)
};

Result<PreTokenizerChoice> choose_pre_tokenizer(const GgufFile& g) {
  std::string pre = "default";
  if (const json* p = g.find("tokenizer.ggml.pre"); p != nullptr && p->is_string()) pre = p->get<std::string>();
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3")
    return PreTokenizerChoice{kLlama3Regex, true, true, false};
  if (pre == "qwen2" || pre == "qwen2.5") return PreTokenizerChoice{kQwen2Regex, false, false, true};
  if (pre == "gpt-2" || pre == "gpt2" || pre == "default") return PreTokenizerChoice{kGpt2Regex};
  return Status::error("unsupported tokenizer.ggml.pre '" + pre +
                       "' (supported: default, gpt-2, llama-bpe, llama3, qwen2)");
}

// Byte-level text handling: the chosen regex split, then bytes mapped to their vocabulary
// characters; decoding maps them back.
Status add_byte_level_steps(const PreTokenizerChoice& choice, tok::Normalizer* normalizer,
                            tok::PreTokenizer* pre_tokenizer, tok::Decoder* decoder) {
  if (choice.nfc) {
    tok::NormalizerStep nfc{};
    nfc.kind = tok::NormalizerStep::Kind::kNfc;
    normalizer->steps.push_back(nfc);
  }
  tok::PreTokenizerStep split{};
  split.kind = tok::PreTokenizerStep::Kind::kSplit;
  GB_ASSIGN_OR_RETURN(split.pattern.regex, tok::Regex::compile(choice.regex));
  split.behavior = tok::SplitBehavior::kIsolated;
  pre_tokenizer->steps.push_back(std::move(split));
  tok::PreTokenizerStep bl{};
  bl.kind = tok::PreTokenizerStep::Kind::kByteLevel;
  bl.add_prefix_space = false;
  bl.use_regex = false;
  pre_tokenizer->steps.push_back(bl);
  decoder->present = true;
  tok::DecoderStep d{};
  d.kind = tok::DecoderStep::Kind::kByteLevel;
  decoder->steps.push_back(d);
  return Status::ok();
}

// tokenizer.chat_template and the named tokenizer.chat_template.<name> ones.
void read_chat_templates(const GgufFile& g, std::string* default_template,
                         std::unordered_map<std::string, std::string>* named) {
  if (const json* ct = g.find("tokenizer.chat_template"); ct != nullptr && ct->is_string())
    *default_template = ct->get<std::string>();
  const std::string prefix = "tokenizer.chat_template.";
  for (auto it = g.metadata.lower_bound(prefix);
       it != g.metadata.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
    if (it->second.is_string()) (*named)[it->first.substr(prefix.size())] = it->second.get<std::string>();
  }
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::Builder::build_gguf(const GgufFile& g) {
  GB_ASSIGN_OR_RETURN(const std::string model, read_model_kind(g));
  GB_ASSIGN_OR_RETURN(const json* tokens, get_array(g, "tokenizer.ggml.tokens", SIZE_MAX, true));
  const size_t n = tokens->size();
  if (n == 0) return Status::error("GGUF vocabulary: tokenizer.ggml.tokens is empty");
  if (n > (1u << 24)) return Status::error("GGUF vocabulary: too many tokens");
  GB_ASSIGN_OR_RETURN(const json* types, get_array(g, "tokenizer.ggml.token_type", n, false));
  GB_ASSIGN_OR_RETURN(const json* scores, get_array(g, "tokenizer.ggml.scores", n, model == "llama"));

  Tokenizer::Builder b;
  Tokenizer& t = b.tk();
  std::vector<int32_t> type;
  GB_RETURN_IF_ERROR(read_pieces(*tokens, types, b, &type));
  GB_ASSIGN_OR_RETURN(const SpecialIds ids, read_special_ids(g, n));
  add_text_matched_tokens(b.model_pieces, type, &t.added_);

  tok::BpeModel& m = t.model_;
  b.build_piece_lookup();
  bool add_bos = false;
  if (model == "llama") {
    m.byte_fallback = true;
    m.fuse_unk = true;
    m.unk_id = ids.unk;
    GB_RETURN_IF_ERROR(add_score_merges(b, type, *scores, &m));
    add_sentencepiece_steps(get_flag(g, "tokenizer.ggml.add_space_prefix").value_or(true), &t.normalizer_, &t.decoder_);
    add_bos = true;
  } else {
    m.byte_level = true;
    GB_ASSIGN_OR_RETURN(const json* merges, get_array(g, "tokenizer.ggml.merges", SIZE_MAX, true));
    GB_RETURN_IF_ERROR(add_listed_merges(*merges, b, &m));
    GB_ASSIGN_OR_RETURN(const PreTokenizerChoice pre, choose_pre_tokenizer(g));
    if (pre.ignore_merges) m.ignore_merges = true;
    add_bos = pre.add_bos;
    GB_RETURN_IF_ERROR(add_byte_level_steps(pre, &t.normalizer_, &t.pre_tokenizer_, &t.decoder_));
  }
  t.bos_id_ = ids.bos;
  t.eos_id_ = ids.eos;
  t.eot_id_ = ids.eot;
  t.pad_id_ = ids.pad;
  t.unk_id_ = ids.unk;
  read_chat_templates(g, &t.chat_template_, &t.chat_templates_);
  add_bos = get_flag(g, "tokenizer.ggml.add_bos_token").value_or(add_bos);
  const bool add_eos = get_flag(g, "tokenizer.ggml.add_eos_token").value_or(false);
  GB_ASSIGN_OR_RETURN(auto tokenizer, b.finish());
  Tokenizer::Builder::apply_add_flags(*tokenizer, add_bos, add_eos);
  return tokenizer;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const GgufFile& gguf) {
  try {
    return Builder::build_gguf(gguf);
  } catch (const std::exception& e) {
    return Status::error(std::string("GGUF vocabulary: ") + e.what());
  }
}

}  // namespace gb
