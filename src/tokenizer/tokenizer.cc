// Encode (added tokens -> normalize -> pre-tokenize -> BPE -> post-process), decode, the
// streaming decoder, and the shared part of loading (Builder::finish, Tokenizer::load).
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <atomic>
#include <filesystem>

#include "core/mapped_file.h"
#include "formats/gguf.h"
#include "tokenizer/builder.h"
#include "tokenizer/unicode.h"

namespace gb {

// A piece of input: either plain text or an already matched added token.
struct TextPiece {
  std::string_view text;
  int32_t id;  // -1 for text
  bool at_start;
};

void Tokenizer::split_added(std::string_view text, bool normalized_pass, std::vector<TextPiece>* out) const {
  const tok::AddedMatcher& m = normalized_pass ? normalized_matcher_ : raw_matcher_;
  thread_local std::vector<tok::AddedMatcher::Hit> hits;
  m.find_all(text, &hits);
  size_t last = 0;
  for (const auto& h : hits) {
    if (h.begin > last) out->push_back({text.substr(last, h.begin - last), -1, last == 0});
    out->push_back({{}, h.id, false});
    last = h.end;
  }
  if (last < text.size()) out->push_back({text.substr(last), -1, last == 0});
}

void Tokenizer::encode_segment(std::string_view text, bool at_start, std::vector<int32_t>* out) const {
  std::string normalized;
  if (!normalizer_.empty()) {
    normalized = normalizer_.apply(text);
    text = normalized;
  }
  std::vector<TextPiece> parts;
  if (!normalized_matcher_.empty()) {
    split_added(text, true, &parts);
  } else {
    parts.push_back({text, -1, true});
  }
  std::vector<std::string_view> words;
  std::deque<std::string> storage;
  for (const TextPiece& p : parts) {
    if (p.id >= 0) {
      out->push_back(p.id);
      continue;
    }
    pre_tokenizer_.apply(p.text, at_start && p.at_start, &words, &storage);
    for (std::string_view w : words) model_.encode_word(w, out);
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special) const {
  std::string fixed;
  if (!tok::is_valid_utf8(text)) {
    fixed = tok::to_valid_utf8(text);
    text = fixed;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special) ids.insert(ids.end(), prefix_ids_.begin(), prefix_ids_.end());
  std::vector<TextPiece> parts;
  split_added(text, false, &parts);
  for (const TextPiece& p : parts) {
    if (p.id >= 0) ids.push_back(p.id);
    else encode_segment(p.text, p.at_start, &ids);
  }
  if (add_special) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (skip_special && special_[id]) continue;
    tokens.push_back(pieces_[id]);
  }
  return decoder_.apply(std::move(tokens));
}

const std::string& Tokenizer::token_to_piece(int32_t id) const {
  static const std::string empty;
  return id >= 0 && id < vocab_size() ? pieces_[id] : empty;
}

int32_t Tokenizer::find_token(std::string_view piece) const { return piece_ids_.find(piece); }

bool Tokenizer::is_special(int32_t id) const { return id >= 0 && id < vocab_size() && special_[id] != 0; }

// --- StreamDecoder ---------------------------------------------------------------------------

namespace {
bool ends_with_replacement(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}
}  // namespace

void StreamDecoder::prime(std::span<const int32_t> context) {
  constexpr size_t kContext = 4;  // enough for any decoder's look-behind
  const size_t n = std::min(context.size(), kContext);
  ids_.assign(context.end() - static_cast<std::ptrdiff_t>(n), context.end());
  prefix_ = tokenizer_->decode(ids_, skip_special_);
  prefix_index_ = ids_.size();
}

std::string StreamDecoder::push(int32_t id) {
  ids_.push_back(id);
  std::string text = tokenizer_->decode(ids_, skip_special_);
  // An incomplete UTF-8 sequence decodes to U+FFFD at the end: wait for more bytes. A
  // character is at most 4 bytes, so after kMaxPending tokens without complete text the
  // U+FFFDs are real (invalid bytes) and are emitted; this also bounds the window, which
  // keeps a stream of garbage bytes or skipped specials linear instead of quadratic.
  constexpr size_t kMaxPending = 16;
  const bool force = ids_.size() - prefix_index_ >= kMaxPending;
  if (!force && (text.size() <= prefix_.size() || ends_with_replacement(text))) return {};
  if (text.size() < prefix_.size() || text.compare(0, prefix_.size(), prefix_) != 0) {
    // The context decoded differently once followed by more tokens: only when a forced emit
    // meets ByteFallback's all-or-nothing byte groups. Emit the pending tokens on their own
    // and make them the new context (best effort on garbage bytes).
    ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_index_));
    prefix_ = tokenizer_->decode(ids_, skip_special_);
    prefix_index_ = ids_.size();
    return prefix_;
  }
  std::string fresh = text.substr(prefix_.size());
  // Keep the just-emitted tokens as context for the next step (decoders that treat the first
  // token specially, e.g. stripping its leading space, then see it as already first).
  const size_t new_prefix_index = ids_.size() - prefix_index_;
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_index_));
  prefix_ = tokenizer_->decode(ids_, skip_special_);
  prefix_index_ = new_prefix_index;
  return fresh;
}

std::string StreamDecoder::peek(int32_t id) const {
  std::vector<int32_t> ids = ids_;
  ids.push_back(id);
  const std::string text = tokenizer_->decode(ids, skip_special_);
  // What is already shown (the context and any pending tokens, as they decode now) is not part
  // of id's text; when pending bytes complete into a character with id, that character is.
  const std::string shown = tokenizer_->decode(ids_, skip_special_);
  if (text.size() >= shown.size() && text.compare(0, shown.size(), shown) == 0) return text.substr(shown.size());
  if (text.size() >= prefix_.size() && text.compare(0, prefix_.size(), prefix_) == 0)
    return text.substr(prefix_.size());
  return tokenizer_->decode(std::span<const int32_t>(&id, 1), skip_special_);
}

std::string StreamDecoder::flush() {
  std::string rest;
  if (ids_.size() > prefix_index_) {
    std::string text = tokenizer_->decode(ids_, skip_special_);
    if (text.size() > prefix_.size() && text.compare(0, prefix_.size(), prefix_) == 0)
      rest = text.substr(prefix_.size());
  }
  ids_.clear();
  prefix_.clear();
  prefix_index_ = 0;
  return rest;
}

// --- Builder ---------------------------------------------------------------------------------

void Tokenizer::Builder::build_piece_lookup() {
  piece_lookup = {};
  piece_lookup.reserve(model_pieces.size());
  for (size_t i = 0; i < model_pieces.size(); ++i) {
    if (in_model[i]) piece_lookup.insert(model_pieces[i], static_cast<int32_t>(i));
  }
}

Status Tokenizer::Builder::add_merge(std::string_view a, std::string_view b, int32_t rank) {
  const int32_t ia = piece_lookup.find(a);
  const int32_t ib = piece_lookup.find(b);
  if (ia < 0 || ib < 0) {
    return Status::error("merge " + std::to_string(rank) + " ('" + std::string(a) + " " + std::string(b) +
                         "') uses a token that is not in the vocabulary");
  }
  thread_local std::string ab;
  ab.assign(a);
  ab.append(b);
  const int32_t iab = piece_lookup.find(ab);
  if (iab < 0) {
    return Status::error("merge " + std::to_string(rank) + " ('" + std::string(a) + " " + std::string(b) +
                         "') gives '" + ab + "', which is not in the vocabulary");
  }
  t->model_.merges.insert(ia, ib, {rank, iab});
  return Status::ok();
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::Builder::finish() {
  Tokenizer& k = *t;
  tok::BpeModel& m = k.model_;
  // Vocabulary: model pieces, overlaid by added tokens.
  size_t n = model_pieces.size();
  for (const AddedToken& a : k.added_) n = std::max(n, static_cast<size_t>(a.id) + 1);
  k.pieces_.assign(n, std::string());
  k.special_.assign(n, 0);
  for (size_t i = 0; i < model_pieces.size(); ++i) k.pieces_[i] = model_pieces[i];
  for (const AddedToken& a : k.added_) {
    k.pieces_[a.id] = a.content;
    if (a.special) k.special_[a.id] = 1;
  }
  // Added tokens first: the table keeps the first id for a string, and an added token wins.
  k.piece_ids_.reserve(n);
  for (const AddedToken& a : k.added_) k.piece_ids_.insert(a.content, a.id);
  for (size_t i = 0; i < n; ++i) {
    if (i < in_model.size() && in_model[i]) k.piece_ids_.insert(k.pieces_[i], static_cast<int32_t>(i));
  }

  // The model's lookup table is keyed like the symbols it sees: raw bytes for byte-level BPE.
  std::string raw;
  m.vocab.reserve(model_pieces.size());
  for (size_t i = 0; i < model_pieces.size(); ++i) {
    if (!in_model[i]) continue;
    if (m.byte_level && tok::byte_level_decode(model_pieces[i], &raw)) m.vocab.insert(raw, static_cast<int32_t>(i));
    else m.vocab.insert(model_pieces[i], static_cast<int32_t>(i));
  }
  m.byte_ids.fill(-1);
  for (int b = 0; b < 256; ++b) {
    std::string key;
    if (m.byte_level) {
      key.assign(1, static_cast<char>(b));
    } else if (m.byte_fallback) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
      key = buf;
    } else {
      break;
    }
    m.byte_ids[b] = m.vocab.find(key);
  }
  m.cache = std::make_shared<tok::WordCache>();

  for (const AddedToken& a : k.added_) {
    tok::AddedTokenRef ref{a.content, a.id, a.lstrip, a.rstrip, a.single_word};
    (a.normalized && !k.normalizer_.empty() ? k.normalized_matcher_ : k.raw_matcher_).add(std::move(ref));
  }
  k.raw_matcher_.finish();
  k.normalized_matcher_.finish();

  // Special ids: from the named strings, else from common names.
  auto id_of = [&](const std::string& s) { return s.empty() ? -1 : k.find_token(s); };
  auto first_present = [&](std::initializer_list<const char*> names) {
    for (const char* s : names) {
      const int32_t id = k.find_token(s);
      if (id >= 0) return id;
    }
    return -1;
  };
  if (k.bos_id_ < 0) k.bos_id_ = id_of(k.bos_token_);
  if (k.bos_id_ < 0 && !k.prefix_ids_.empty()) k.bos_id_ = k.prefix_ids_.front();
  if (k.bos_id_ < 0) k.bos_id_ = first_present({"<s>", "<|begin_of_text|>", "<bos>"});
  if (k.eos_id_ < 0) k.eos_id_ = id_of(k.eos_token_);
  if (k.eos_id_ < 0 && !k.suffix_ids_.empty()) k.eos_id_ = k.suffix_ids_.back();
  if (k.eos_id_ < 0) k.eos_id_ = first_present({"</s>", "<|end_of_text|>", "<|endoftext|>", "<eos>"});
  if (k.eot_id_ < 0) k.eot_id_ = first_present({"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>"});
  if (k.unk_id_ < 0) k.unk_id_ = m.unk_id;
  if (k.bos_id_ >= 0 && k.bos_token_.empty()) k.bos_token_ = k.pieces_[k.bos_id_];
  if (k.eos_id_ >= 0 && k.eos_token_.empty()) k.eos_token_ = k.pieces_[k.eos_id_];
  for (int32_t id : {k.eos_id_, k.eot_id_}) {
    if (id >= 0 && std::find(k.stop_ids_.begin(), k.stop_ids_.end(), id) == k.stop_ids_.end())
      k.stop_ids_.push_back(id);
  }
  k.add_bos_ =
      k.bos_id_ >= 0 && std::find(k.prefix_ids_.begin(), k.prefix_ids_.end(), k.bos_id_) != k.prefix_ids_.end();
  k.add_eos_ =
      k.eos_id_ >= 0 && std::find(k.suffix_ids_.begin(), k.suffix_ids_.end(), k.eos_id_) != k.suffix_ids_.end();
  for (int32_t id : k.prefix_ids_) {
    if (id < 0 || id >= k.vocab_size())
      return Status::error("post-processor token id " + std::to_string(id) + " out of range");
  }
  for (int32_t id : k.suffix_ids_) {
    if (id < 0 || id >= k.vocab_size())
      return Status::error("post-processor token id " + std::to_string(id) + " out of range");
  }
  return std::move(t);
}

void Tokenizer::Builder::apply_add_flags(Tokenizer& k, std::optional<bool> add_bos, std::optional<bool> add_eos) {
  if (add_bos.has_value()) {
    k.prefix_ids_.clear();
    if (*add_bos && k.bos_id_ >= 0) k.prefix_ids_.push_back(k.bos_id_);
    k.add_bos_ = !k.prefix_ids_.empty();
  }
  if (add_eos.has_value()) {
    k.suffix_ids_.clear();
    if (*add_eos && k.eos_id_ >= 0) k.suffix_ids_.push_back(k.eos_id_);
    k.add_eos_ = !k.suffix_ids_.empty();
  }
}

// --- load ------------------------------------------------------------------------------------

Result<std::unique_ptr<Tokenizer>> Tokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const std::string json_path = (fs::path(path) / "tokenizer.json").string();
    if (fs::exists(json_path, ec)) return load(json_path);
    for (const auto& entry : fs::directory_iterator(path, ec)) {
      if (entry.path().extension() == ".gguf") return load(entry.path().string());
    }
    return Status::error(path + ": no tokenizer.json or .gguf file in this directory");
  }
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".gguf") == 0) {
    GB_ASSIGN_OR_RETURN(GgufFile gguf, read_gguf(path));
    auto r = from_gguf(gguf);
    if (!r) return r.status().with_context(path);
    return r;
  }
  GB_ASSIGN_OR_RETURN(std::string json, read_file(path));
  std::string config;
  const fs::path config_path = fs::path(path).parent_path() / "tokenizer_config.json";
  if (fs::exists(config_path, ec)) {
    GB_ASSIGN_OR_RETURN(config, read_file(config_path.string()));
  }
  auto r = from_hf_json(json, config);
  if (!r) return r.status().with_context(path);
  return r;
}

}  // namespace gb
