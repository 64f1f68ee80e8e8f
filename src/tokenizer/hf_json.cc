// Loads a Hugging Face tokenizer.json (+ tokenizer_config.json). Only the component types
// the supported model families use are accepted; any other type is an error naming it.
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "formats/json_nesting.h"
#include "tokenizer/builder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace gb {

namespace {

using nlohmann::json;
using tok::DecoderStep;
using tok::NormalizerStep;
using tok::PreTokenizerStep;

// Largest vocabulary accepted: keeps a corrupt id from allocating gigabytes.
constexpr int64_t kMaxVocab = 1 << 24;

Result<std::string> get_string(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return Status::error(where + ": '" + key + "' must be a string");
  return it->get<std::string>();
}

bool get_bool(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

Result<tok::Pattern> parse_pattern(const json& j, const std::string& where) {
  if (!j.is_object()) return Status::error(where + ": 'pattern' must be an object");
  tok::Pattern p;
  if (auto it = j.find("String"); it != j.end() && it->is_string()) {
    p.literal = it->get<std::string>();
    return p;
  }
  if (auto it = j.find("Regex"); it != j.end() && it->is_string()) {
    auto re = tok::Regex::compile(it->get<std::string>());
    if (!re) return re.status().with_context(where);
    p.regex = *re;
    return p;
  }
  return Status::error(where + ": 'pattern' needs a 'String' or 'Regex' string");
}

Status parse_normalizer(const json& j, tok::Normalizer* out) {
  if (j.is_null()) return Status::ok();
  if (!j.is_object()) return Status::error("normalizer must be an object");
  GB_ASSIGN_OR_RETURN(std::string type, get_string(j, "type", "normalizer"));
  const std::string where = "normalizer " + type;
  NormalizerStep st{};
  if (type == "Sequence") {
    auto it = j.find("normalizers");
    if (it == j.end() || !it->is_array()) return Status::error(where + ": 'normalizers' must be an array");
    for (const json& c : *it) GB_RETURN_IF_ERROR(parse_normalizer(c, out));
    return Status::ok();
  } else if (type == "NFC") {
    st.kind = NormalizerStep::Kind::kNfc;
  } else if (type == "NFD") {
    st.kind = NormalizerStep::Kind::kNfd;
  } else if (type == "NFKC") {
    st.kind = NormalizerStep::Kind::kNfkc;
  } else if (type == "NFKD") {
    st.kind = NormalizerStep::Kind::kNfkd;
  } else if (type == "Lowercase") {
    st.kind = NormalizerStep::Kind::kLowercase;
  } else if (type == "Strip") {
    st.kind = NormalizerStep::Kind::kStrip;
    st.strip_left = get_bool(j, "strip_left", true);
    st.strip_right = get_bool(j, "strip_right", true);
  } else if (type == "Prepend") {
    st.kind = NormalizerStep::Kind::kPrepend;
    GB_ASSIGN_OR_RETURN(st.content, get_string(j, "prepend", where));
  } else if (type == "Replace") {
    st.kind = NormalizerStep::Kind::kReplace;
    GB_ASSIGN_OR_RETURN(st.content, get_string(j, "content", where));
    auto it = j.find("pattern");
    if (it == j.end()) return Status::error(where + ": missing 'pattern'");
    GB_ASSIGN_OR_RETURN(st.pattern, parse_pattern(*it, where));
  } else {
    return Status::error("unsupported normalizer type '" + type + "'");
  }
  out->steps.push_back(std::move(st));
  return Status::ok();
}

Result<tok::SplitBehavior> parse_behavior(const json& j, const std::string& where) {
  auto it = j.find("behavior");
  if (it == j.end() || !it->is_string()) return Status::error(where + ": 'behavior' must be a string");
  const std::string b = it->get<std::string>();
  if (b == "Isolated") return tok::SplitBehavior::kIsolated;
  if (b == "Removed") return tok::SplitBehavior::kRemoved;
  if (b == "MergedWithPrevious") return tok::SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return tok::SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return tok::SplitBehavior::kContiguous;
  return Status::error(where + ": unsupported split behavior '" + b + "'");
}

Status parse_pre_tokenizer(const json& j, tok::PreTokenizer* out, bool* byte_level) {
  if (j.is_null()) return Status::ok();
  if (!j.is_object()) return Status::error("pre_tokenizer must be an object");
  GB_ASSIGN_OR_RETURN(std::string type, get_string(j, "type", "pre_tokenizer"));
  const std::string where = "pre_tokenizer " + type;
  PreTokenizerStep st{};
  if (type == "Sequence") {
    auto it = j.find("pretokenizers");
    if (it == j.end() || !it->is_array()) return Status::error(where + ": 'pretokenizers' must be an array");
    for (const json& c : *it) GB_RETURN_IF_ERROR(parse_pre_tokenizer(c, out, byte_level));
    return Status::ok();
  } else if (type == "ByteLevel") {
    st.kind = PreTokenizerStep::Kind::kByteLevel;
    st.add_prefix_space = get_bool(j, "add_prefix_space", true);
    st.use_regex = get_bool(j, "use_regex", true);
    *byte_level = true;
  } else if (type == "Split") {
    st.kind = PreTokenizerStep::Kind::kSplit;
    auto it = j.find("pattern");
    if (it == j.end()) return Status::error(where + ": missing 'pattern'");
    GB_ASSIGN_OR_RETURN(st.pattern, parse_pattern(*it, where));
    GB_ASSIGN_OR_RETURN(st.behavior, parse_behavior(j, where));
    st.invert = get_bool(j, "invert", false);
  } else if (type == "Metaspace") {
    st.kind = PreTokenizerStep::Kind::kMetaspace;
    auto it = j.find("replacement");
    st.replacement = it != j.end() && it->is_string() ? it->get<std::string>() : "\xE2\x96\x81";
    if (st.replacement.empty() ||
        static_cast<size_t>(tok::utf8_len(static_cast<unsigned char>(st.replacement[0]))) != st.replacement.size()) {
      return Status::error(where + ": 'replacement' must be one character");
    }
    st.split = get_bool(j, "split", true);
    auto ps = j.find("prepend_scheme");
    if (ps != j.end() && ps->is_string()) {
      const std::string s = ps->get<std::string>();
      if (s == "always") st.prepend = PreTokenizerStep::Prepend::kAlways;
      else if (s == "first") st.prepend = PreTokenizerStep::Prepend::kFirst;
      else if (s == "never") st.prepend = PreTokenizerStep::Prepend::kNever;
      else return Status::error(where + ": unsupported prepend_scheme '" + s + "'");
    } else {
      st.prepend = get_bool(j, "add_prefix_space", true) ? PreTokenizerStep::Prepend::kAlways
                                                         : PreTokenizerStep::Prepend::kNever;
    }
  } else if (type == "Digits") {
    st.kind = PreTokenizerStep::Kind::kDigits;
    st.individual_digits = get_bool(j, "individual_digits", false);
  } else if (type == "WhitespaceSplit") {
    st.kind = PreTokenizerStep::Kind::kWhitespaceSplit;
  } else {
    return Status::error("unsupported pre_tokenizer type '" + type + "'");
  }
  out->steps.push_back(std::move(st));
  return Status::ok();
}

Status parse_decoder(const json& j, tok::Decoder* out) {
  if (j.is_null()) return Status::ok();
  if (!j.is_object()) return Status::error("decoder must be an object");
  out->present = true;
  GB_ASSIGN_OR_RETURN(std::string type, get_string(j, "type", "decoder"));
  const std::string where = "decoder " + type;
  DecoderStep st{};
  if (type == "Sequence") {
    auto it = j.find("decoders");
    if (it == j.end() || !it->is_array()) return Status::error(where + ": 'decoders' must be an array");
    for (const json& c : *it) GB_RETURN_IF_ERROR(parse_decoder(c, out));
    return Status::ok();
  } else if (type == "ByteLevel") {
    st.kind = DecoderStep::Kind::kByteLevel;
  } else if (type == "ByteFallback") {
    st.kind = DecoderStep::Kind::kByteFallback;
  } else if (type == "Fuse") {
    st.kind = DecoderStep::Kind::kFuse;
  } else if (type == "Strip") {
    st.kind = DecoderStep::Kind::kStrip;
    GB_ASSIGN_OR_RETURN(st.content, get_string(j, "content", where));
    auto s = j.find("start"), e = j.find("stop");
    if (s == j.end() || !s->is_number_unsigned() || e == j.end() || !e->is_number_unsigned()) {
      return Status::error(where + ": 'start' and 'stop' must be non-negative integers");
    }
    st.start = std::min<uint64_t>(s->get<uint64_t>(), 1u << 20);
    st.stop = std::min<uint64_t>(e->get<uint64_t>(), 1u << 20);
  } else if (type == "Replace") {
    st.kind = DecoderStep::Kind::kReplace;
    GB_ASSIGN_OR_RETURN(st.content, get_string(j, "content", where));
    auto it = j.find("pattern");
    if (it == j.end()) return Status::error(where + ": missing 'pattern'");
    GB_ASSIGN_OR_RETURN(st.pattern, parse_pattern(*it, where));
  } else if (type == "Metaspace") {
    st.kind = DecoderStep::Kind::kMetaspace;
    auto it = j.find("replacement");
    st.content = it != j.end() && it->is_string() ? it->get<std::string>() : "\xE2\x96\x81";
    auto ps = j.find("prepend_scheme");
    if (ps != j.end() && ps->is_string()) st.prepend = ps->get<std::string>() != "never";
    else st.prepend = get_bool(j, "add_prefix_space", true);
  } else {
    return Status::error("unsupported decoder type '" + type + "'");
  }
  out->steps.push_back(std::move(st));
  return Status::ok();
}

// Post-processor -> the ids added before and after the text.
Status parse_post_processor(const json& j, const Tokenizer::Builder& b, std::vector<int32_t>* prefix,
                            std::vector<int32_t>* suffix) {
  if (j.is_null()) return Status::ok();
  if (!j.is_object()) return Status::error("post_processor must be an object");
  GB_ASSIGN_OR_RETURN(std::string type, get_string(j, "type", "post_processor"));
  const std::string where = "post_processor " + type;
  if (type == "Sequence") {
    auto it = j.find("processors");
    if (it == j.end() || !it->is_array()) return Status::error(where + ": 'processors' must be an array");
    for (const json& c : *it) GB_RETURN_IF_ERROR(parse_post_processor(c, b, prefix, suffix));
    return Status::ok();
  }
  if (type == "ByteLevel") return Status::ok();  // only adjusts offsets
  if (type == "TemplateProcessing") {
    auto single = j.find("single");
    auto specials = j.find("special_tokens");
    if (single == j.end() || !single->is_array()) return Status::error(where + ": 'single' must be an array");
    if (specials == j.end() || !specials->is_object())
      return Status::error(where + ": 'special_tokens' must be an object");
    prefix->clear();
    suffix->clear();
    bool seen_sequence = false;
    for (const json& item : *single) {
      if (!item.is_object()) return Status::error(where + ": template items must be objects");
      if (item.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      auto st = item.find("SpecialToken");
      if (st == item.end() || !st->is_object()) return Status::error(where + ": unknown template item");
      GB_ASSIGN_OR_RETURN(std::string name, get_string(*st, "id", where));
      auto def = specials->find(name);
      if (def == specials->end() || !def->is_object() || !def->contains("ids") || !(*def)["ids"].is_array()) {
        return Status::error(where + ": special token '" + name + "' has no 'ids'");
      }
      for (const json& id : (*def)["ids"]) {
        if (!id.is_number_integer()) return Status::error(where + ": ids of '" + name + "' must be integers");
        (seen_sequence ? suffix : prefix)->push_back(id.get<int32_t>());
      }
    }
    return Status::ok();
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    auto cls = j.find("cls"), sep = j.find("sep");
    if (cls == j.end() || sep == j.end() || !cls->is_array() || !sep->is_array() || cls->size() != 2 ||
        sep->size() != 2 || !(*cls)[1].is_number_integer() || !(*sep)[1].is_number_integer()) {
      return Status::error(where + ": 'cls' and 'sep' must be [token, id]");
    }
    prefix->assign(1, (*cls)[1].get<int32_t>());
    suffix->assign(1, (*sep)[1].get<int32_t>());
    return Status::ok();
  }
  return Status::error("unsupported post_processor type '" + type + "'");
}

// "bos_token": "<s>" or {"content": "<s>", ...}.
std::string token_string(const json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  return {};
}

// The model object must be a plain BPE (no subword prefix/suffix, no dropout).
Status check_bpe_model(const json& model) {
  std::string model_type = "BPE";
  if (auto it = model.find("type"); it != model.end()) {
    if (!it->is_string()) return Status::error("model: 'type' must be a string");
    model_type = it->get<std::string>();
  }
  if (model_type != "BPE") return Status::error("unsupported model type '" + model_type + "' (only BPE is supported)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = model.find(key);
    if (it != model.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty())) {
      return Status::error(std::string("model: '") + key + "' is not supported");
    }
  }
  if (auto it = model.find("dropout"); it != model.end() && !it->is_null()) {
    if (!it->is_number() || it->get<double>() != 0.0) return Status::error("model: BPE dropout is not supported");
  }
  return Status::ok();
}

// model.vocab {piece: id} into the builder; ids below id_limit, each used once.
Status read_vocab(const json& vocab, int64_t id_limit, Tokenizer::Builder& b) {
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer())
      return Status::error("model.vocab: id of '" + it.key() + "' must be an integer");
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id >= id_limit) {
      return Status::error("model.vocab: id " + std::to_string(id) + " of '" + it.key() +
                           "' is out of range (vocab has " + std::to_string(vocab.size()) + " entries)");
    }
    if (static_cast<size_t>(id) >= b.model_pieces.size()) {
      b.model_pieces.resize(id + 1);
      b.in_model.resize(id + 1, 0);
    }
    if (b.in_model[id]) return Status::error("model.vocab: id " + std::to_string(id) + " is used twice");
    b.model_pieces[id] = it.key();
    b.in_model[id] = 1;
  }
  return Status::ok();
}

// model.merges: "a b" strings or ["a", "b"] pairs; rank = position.
Status read_merges(const json& model, Tokenizer::Builder& b, tok::BpeModel* m) {
  auto merges_it = model.find("merges");
  if (merges_it == model.end() || merges_it->is_null()) return Status::ok();
  if (!merges_it->is_array()) return Status::error("model: 'merges' must be an array");
  m->merges.reserve(merges_it->size());
  int32_t rank = 0;
  for (const json& mg : *merges_it) {
    std::string a, c;
    if (mg.is_string()) {
      const std::string& s = mg.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        return Status::error("model.merges[" + std::to_string(rank) + "]: '" + s +
                             "' is not two tokens separated by a space");
      }
      a = s.substr(0, sp);
      c = s.substr(sp + 1);
    } else if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string()) {
      a = mg[0].get<std::string>();
      c = mg[1].get<std::string>();
    } else {
      return Status::error("model.merges[" + std::to_string(rank) + "] must be a string \"a b\" or a pair [a, b]");
    }
    GB_RETURN_IF_ERROR(b.add_merge(a, c, rank).with_context("model.merges"));
    ++rank;
  }
  return Status::ok();
}

// added_tokens, with the ids HF gives them (see below); duplicates after the first are dropped.
Status read_added_tokens(const json& added, int64_t id_limit, const Tokenizer::Builder& b,
                         std::vector<AddedToken>* out) {
  int32_t max_added = -1;
  std::unordered_set<std::string> seen;
  for (const json& a : added) {
    if (!a.is_object()) return Status::error("added_tokens: entries must be objects");
    AddedToken tk;
    auto id = a.find("id");
    if (id == a.end() || !id->is_number_integer()) return Status::error("added_tokens: 'id' must be an integer");
    const int64_t v = id->get<int64_t>();
    if (v < 0 || v >= id_limit) return Status::error("added_tokens: id " + std::to_string(v) + " is out of range");
    GB_ASSIGN_OR_RETURN(tk.content, get_string(a, "content", "added_tokens"));
    // HF ignores the written id: an added token takes its model id when the model has the
    // string, else the next id after the vocabulary and the previous added tokens.
    if (const int32_t model_id = b.piece_lookup.find(tk.content); model_id >= 0) {
      tk.id = model_id;
    } else {
      const int32_t n_model = static_cast<int32_t>(b.piece_lookup.size());
      tk.id = max_added >= n_model ? max_added + 1 : n_model;
    }
    if (!seen.insert(tk.content).second) continue;  // HF keeps the first of duplicates
    max_added = std::max(max_added, tk.id);
    tk.special = get_bool(a, "special", false);
    tk.lstrip = get_bool(a, "lstrip", false);
    tk.rstrip = get_bool(a, "rstrip", false);
    tk.single_word = get_bool(a, "single_word", false);
    tk.normalized = get_bool(a, "normalized", !tk.special);
    out->push_back(std::move(tk));
  }
  return Status::ok();
}

// tokenizer_config.json "chat_template": one string, or a list of {name, template} where
// "default" (if present) is the default one.
Status read_chat_template(const json& config, std::string* default_template,
                          std::unordered_map<std::string, std::string>* named) {
  auto ct = config.find("chat_template");
  if (ct == config.end()) return Status::ok();
  if (ct->is_string()) {
    *default_template = ct->get<std::string>();
  } else if (ct->is_array()) {
    for (const json& e : *ct) {
      if (e.is_object() && e.contains("name") && e.contains("template") && e["name"].is_string() &&
          e["template"].is_string()) {
        (*named)[e["name"].get<std::string>()] = e["template"].get<std::string>();
      }
    }
    if (auto d = named->find("default"); d != named->end()) *default_template = d->second;
  } else if (!ct->is_null()) {
    return Status::error("tokenizer_config.json: 'chat_template' must be a string or a list of {name, template}");
  }
  return Status::ok();
}

// A boolean key of tokenizer_config.json; anything else counts as absent.
std::optional<bool> optional_flag(const json& config, const char* key) {
  if (config.contains(key) && config[key].is_boolean()) return config[key].get<bool>();
  return std::nullopt;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::Builder::parse_hf(std::string_view tokenizer_json,
                                                                std::string_view config_json) {
  json j = json::parse(tokenizer_json.begin(), tokenizer_json.end(), nullptr, false);
  if (j.is_discarded()) return Status::error("tokenizer.json is not valid JSON");
  if (!j.is_object()) return Status::error("tokenizer.json must be a JSON object");
  // The component parsers recurse into Sequence entries (and j.value() copies): bound the depth.
  if (json_nesting_exceeds(j))
    return Status::error("tokenizer.json: nested deeper than " + std::to_string(kMaxJsonNesting) + " levels");
  json config;
  if (!config_json.empty()) {
    config = json::parse(config_json.begin(), config_json.end(), nullptr, false);
    if (config.is_discarded() || !config.is_object())
      return Status::error("tokenizer_config.json is not a JSON object");
    if (json_nesting_exceeds(config)) {
      return Status::error("tokenizer_config.json: nested deeper than " + std::to_string(kMaxJsonNesting) + " levels");
    }
  }

  Tokenizer::Builder b;
  Tokenizer& t = b.tk();
  auto model_it = j.find("model");
  if (model_it == j.end() || !model_it->is_object()) return Status::error("tokenizer.json has no 'model' object");
  const json& model = *model_it;
  GB_RETURN_IF_ERROR(check_bpe_model(model));

  auto vocab_it = model.find("vocab");
  if (vocab_it == model.end() || !vocab_it->is_object()) return Status::error("model: 'vocab' must be an object");
  auto added_it = j.find("added_tokens");
  if (added_it != j.end() && !added_it->is_null() && !added_it->is_array()) {
    return Status::error("'added_tokens' must be an array");
  }
  const size_t n_added = added_it != j.end() && added_it->is_array() ? added_it->size() : 0;
  // Ids may leave gaps (some files reserve ranges), but not so large that a corrupt id makes
  // the id -> piece table allocate gigabytes.
  const int64_t entries = static_cast<int64_t>(vocab_it->size() + n_added);
  const int64_t id_limit = std::min<int64_t>(kMaxVocab, std::max<int64_t>(2 * entries, entries + 65536));
  GB_RETURN_IF_ERROR(read_vocab(*vocab_it, id_limit, b));

  tok::BpeModel& m = t.model_;
  m.byte_fallback = get_bool(model, "byte_fallback", false);
  m.fuse_unk = get_bool(model, "fuse_unk", false);
  m.ignore_merges = get_bool(model, "ignore_merges", false);
  b.build_piece_lookup();
  if (auto unk = model.find("unk_token"); unk != model.end() && unk->is_string()) {
    m.unk_id = b.piece_lookup.find(unk->get<std::string>());
    if (m.unk_id < 0)
      return Status::error("model: unk_token '" + unk->get<std::string>() + "' is not in the vocabulary");
  }
  GB_RETURN_IF_ERROR(read_merges(model, b, &m));
  if (n_added > 0) GB_RETURN_IF_ERROR(read_added_tokens(*added_it, id_limit, b, &t.added_));

  bool byte_level = false;
  GB_RETURN_IF_ERROR(parse_normalizer(j.value("normalizer", json()), &t.normalizer_));
  GB_RETURN_IF_ERROR(parse_pre_tokenizer(j.value("pre_tokenizer", json()), &t.pre_tokenizer_, &byte_level));
  GB_RETURN_IF_ERROR(parse_decoder(j.value("decoder", json()), &t.decoder_));
  GB_RETURN_IF_ERROR(parse_post_processor(j.value("post_processor", json()), b, &t.prefix_ids_, &t.suffix_ids_));
  m.byte_level = byte_level;

  // tokenizer_config.json: special token strings, add_bos/add_eos overrides, chat template.
  if (config.is_object()) {
    t.bos_token_ = token_string(config, "bos_token");
    t.eos_token_ = token_string(config, "eos_token");
    GB_RETURN_IF_ERROR(read_chat_template(config, &t.chat_template_, &t.chat_templates_));
  }
  GB_ASSIGN_OR_RETURN(auto tokenizer, b.finish());
  if (config.is_object()) {
    // transformers rebuilds the post-processor from these flags (LlamaTokenizerFast).
    Tokenizer::Builder::apply_add_flags(*tokenizer, optional_flag(config, "add_bos_token"),
                                        optional_flag(config, "add_eos_token"));
  }
  return tokenizer;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_hf_json(std::string_view tokenizer_json,
                                                           std::string_view tokenizer_config_json) {
  // nlohmann::json throws on a few paths we do not pre-check (e.g. number conversions);
  // nothing may escape the library, so any exception becomes an error.
  try {
    return Builder::parse_hf(tokenizer_json, tokenizer_config_json);
  } catch (const std::exception& e) {
    return Status::error(std::string("tokenizer.json: ") + e.what());
  }
}

}  // namespace gb
