// Builds a Tokenizer from GGUF tokenizer.ggml.* metadata, mirroring what llama.cpp does:
// "llama" = SentencePiece BPE merged by token score with byte fallback, "gpt2" = byte-level
// BPE with merges and a pre-tokenizer regex chosen by tokenizer.ggml.pre.
#include "formats/gguf.h"
#include "tokenizer/builder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

#include <algorithm>
#include <map>

namespace gb {

namespace {

using nlohmann::json;

// llama.cpp token types.
enum TokenType : int32_t {
  kUndefined = 0, kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6,
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

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::Builder::build_gguf(const GgufFile& g) {
  const json* model_v = g.find("tokenizer.ggml.model");
  if (model_v == nullptr) return Status::error("GGUF file has no tokenizer (tokenizer.ggml.model is missing)");
  if (!model_v->is_string()) return Status::error("GGUF vocabulary: tokenizer.ggml.model must be a string");
  const std::string model = model_v->get<std::string>();
  if (model != "llama" && model != "gpt2") {
    return Status::error("unsupported GGUF tokenizer model '" + model + "' (supported: llama, gpt2)");
  }
  GB_ASSIGN_OR_RETURN(const json* tokens, get_array(g, "tokenizer.ggml.tokens", SIZE_MAX, true));
  const size_t n = tokens->size();
  if (n == 0) return Status::error("GGUF vocabulary: tokenizer.ggml.tokens is empty");
  if (n > (1u << 24)) return Status::error("GGUF vocabulary: too many tokens");
  GB_ASSIGN_OR_RETURN(const json* types, get_array(g, "tokenizer.ggml.token_type", n, false));
  GB_ASSIGN_OR_RETURN(const json* scores, get_array(g, "tokenizer.ggml.scores", n, model == "llama"));

  Tokenizer::Builder b;
  Tokenizer& t = b.tk();
  b.model_pieces.resize(n);
  b.in_model.assign(n, 0);
  std::vector<int32_t> type(n, kNormal);
  for (size_t i = 0; i < n; ++i) {
    const json& tk = (*tokens)[i];
    if (!tk.is_string()) return Status::error("GGUF vocabulary: tokenizer.ggml.tokens[" + std::to_string(i) + "] is not a string");
    b.model_pieces[i] = tk.get<std::string>();
    if (types != nullptr) {
      if (!(*types)[i].is_number_integer()) return Status::error("GGUF vocabulary: token_type entries must be integers");
      type[i] = (*types)[i].get<int32_t>();
    }
    // Byte tokens and normal/user words take part in BPE; control tokens only match as text.
    b.in_model[i] = type[i] == kNormal || type[i] == kByte || type[i] == kUserDefined || type[i] == kUnused ||
                    type[i] == kUndefined;
  }
  GB_ASSIGN_OR_RETURN(int32_t bos, get_id(g, "tokenizer.ggml.bos_token_id", n));
  GB_ASSIGN_OR_RETURN(int32_t eos, get_id(g, "tokenizer.ggml.eos_token_id", n));
  GB_ASSIGN_OR_RETURN(int32_t eot, get_id(g, "tokenizer.ggml.eot_token_id", n));
  GB_ASSIGN_OR_RETURN(int32_t pad, get_id(g, "tokenizer.ggml.padding_token_id", n));
  GB_ASSIGN_OR_RETURN(int32_t unk, get_id(g, "tokenizer.ggml.unknown_token_id", n));

  // Control / user-defined / unknown tokens are matched in text before tokenization.
  for (size_t i = 0; i < n; ++i) {
    if (type[i] == kControl || type[i] == kUserDefined || type[i] == kUnknown) {
      AddedToken a;
      a.id = static_cast<int32_t>(i);
      a.content = b.model_pieces[i];
      a.special = type[i] != kUserDefined;
      t.added_.push_back(std::move(a));
    }
  }

  tok::BpeModel& m = t.model_;
  b.build_piece_lookup();
  std::optional<bool> add_bos, add_eos;
  if (model == "llama") {
    m.byte_fallback = true;
    m.fuse_unk = true;
    m.unk_id = unk;
    // SentencePiece BPE merges the adjacent pair whose merged piece scores highest (llama.cpp
    // llm_tokenizer_spm); as ranks: every split of a vocabulary piece into two vocabulary
    // pieces is a merge ranked by the piece's score, equal scores tied by position.
    std::vector<float> score(n);
    for (size_t i = 0; i < n; ++i) {
      if (!(*scores)[i].is_number()) return Status::error("GGUF vocabulary: scores entries must be numbers");
      score[i] = (*scores)[i].get<float>();
    }
    std::vector<float> sorted;
    for (size_t i = 0; i < n; ++i) {
      if (type[i] == kNormal || type[i] == kUserDefined) sorted.push_back(score[i]);
    }
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
    m.merges.reserve(n * 4);
    for (size_t i = 0; i < n; ++i) {
      if (type[i] != kNormal && type[i] != kUserDefined) continue;
      const std::string& p = b.model_pieces[i];
      const int32_t rank = static_cast<int32_t>(std::lower_bound(sorted.begin(), sorted.end(), score[i], std::greater<float>()) - sorted.begin());
      size_t k = 0;
      while (k < p.size()) {
        k += tok::utf8_len(static_cast<unsigned char>(p[k]));
        if (k >= p.size()) break;
        const int32_t l = b.piece_lookup.find(std::string_view(p).substr(0, k));
        const int32_t r = b.piece_lookup.find(std::string_view(p).substr(k));
        if (l >= 0 && r >= 0 && type[l] != kByte && type[r] != kByte) {
          m.merges.insert(l, r, {rank, static_cast<int32_t>(i)});
        }
      }
    }
    bool add_space_prefix = true;
    if (auto f = get_flag(g, "tokenizer.ggml.add_space_prefix")) add_space_prefix = *f;
    if (add_space_prefix) {
      tok::NormalizerStep prep{};
      prep.kind = tok::NormalizerStep::Kind::kPrepend;
      prep.content = kSpace;
      t.normalizer_.steps.push_back(prep);
    }
    tok::NormalizerStep rep{};
    rep.kind = tok::NormalizerStep::Kind::kReplace;
    rep.pattern.literal = " ";
    rep.content = kSpace;
    t.normalizer_.steps.push_back(rep);
    t.decoder_.present = true;
    tok::DecoderStep d{};
    d.kind = tok::DecoderStep::Kind::kReplace;
    d.pattern.literal = kSpace;
    d.content = " ";
    t.decoder_.steps.push_back(d);
    d = {};
    d.kind = tok::DecoderStep::Kind::kByteFallback;
    t.decoder_.steps.push_back(d);
    d.kind = tok::DecoderStep::Kind::kFuse;
    t.decoder_.steps.push_back(d);
    if (add_space_prefix) {
      d.kind = tok::DecoderStep::Kind::kStrip;
      d.content = " ";
      d.start = 1;
      d.stop = 0;
      t.decoder_.steps.push_back(d);
    }
    add_bos = true;
    add_eos = false;
  } else {
    m.byte_level = true;
    GB_ASSIGN_OR_RETURN(const json* merges, get_array(g, "tokenizer.ggml.merges", SIZE_MAX, true));
    m.merges.reserve(merges->size());
    int32_t rank = 0;
    for (const json& mg : *merges) {
      if (!mg.is_string()) return Status::error("GGUF vocabulary: tokenizer.ggml.merges entries must be strings");
      const std::string& s = mg.get_ref<const std::string&>();
      const size_t sp = s.find(' ', 1);
      if (sp == std::string::npos) return Status::error("GGUF vocabulary: merge '" + s + "' is not two tokens separated by a space");
      GB_RETURN_IF_ERROR(b.add_merge(std::string_view(s).substr(0, sp), std::string_view(s).substr(sp + 1), rank)
                             .with_context("GGUF vocabulary"));
      ++rank;
    }
    std::string pre = "default";
    if (const json* p = g.find("tokenizer.ggml.pre"); p != nullptr && p->is_string()) pre = p->get<std::string>();
    const char* regex = nullptr;
    if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") {
      regex = kLlama3Regex;
      m.ignore_merges = true;
      add_bos = true;
    } else if (pre == "qwen2" || pre == "qwen2.5") {
      regex = kQwen2Regex;
      // HF Qwen2 tokenizers NFC-normalize (llama.cpp skips it; the reference vectors are HF's).
      tok::NormalizerStep nfc{};
      nfc.kind = tok::NormalizerStep::Kind::kNfc;
      t.normalizer_.steps.push_back(nfc);
    } else if (pre == "gpt-2" || pre == "gpt2" || pre == "default") {
      regex = kGpt2Regex;
    } else {
      return Status::error("unsupported tokenizer.ggml.pre '" + pre + "' (supported: default, gpt-2, llama-bpe, llama3, qwen2)");
    }
    tok::PreTokenizerStep split{};
    split.kind = tok::PreTokenizerStep::Kind::kSplit;
    GB_ASSIGN_OR_RETURN(split.pattern.regex, tok::Regex::compile(regex));
    split.behavior = tok::SplitBehavior::kIsolated;
    t.pre_tokenizer_.steps.push_back(std::move(split));
    tok::PreTokenizerStep bl{};
    bl.kind = tok::PreTokenizerStep::Kind::kByteLevel;
    bl.add_prefix_space = false;
    bl.use_regex = false;
    t.pre_tokenizer_.steps.push_back(bl);
    t.decoder_.present = true;
    tok::DecoderStep d{};
    d.kind = tok::DecoderStep::Kind::kByteLevel;
    t.decoder_.steps.push_back(d);
  }
  t.bos_id_ = bos;
  t.eos_id_ = eos;
  t.eot_id_ = eot;
  t.pad_id_ = pad;
  t.unk_id_ = unk;
  if (const json* ct = g.find("tokenizer.chat_template"); ct != nullptr && ct->is_string()) t.chat_template_ = ct->get<std::string>();
  const std::string prefix = "tokenizer.chat_template.";
  for (auto it = g.metadata.lower_bound(prefix); it != g.metadata.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
    if (it->second.is_string()) t.chat_templates_[it->first.substr(prefix.size())] = it->second.get<std::string>();
  }
  if (auto f = get_flag(g, "tokenizer.ggml.add_bos_token")) add_bos = *f;
  if (auto f = get_flag(g, "tokenizer.ggml.add_eos_token")) add_eos = *f;
  GB_ASSIGN_OR_RETURN(auto tokenizer, b.finish());
  Tokenizer::Builder::apply_add_flags(*tokenizer, add_bos.value_or(false), add_eos.value_or(false));
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
