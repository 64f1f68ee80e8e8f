// Validation of OpenAI completions and chat request bodies, field by field.
#include "server/openai_request.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "server/json_input.h"

namespace gb::server {

ApiError invalid_field(const std::string& param, const std::string& message) {
  ApiError e;
  e.status = 400;
  e.param = param;
  e.message = message;
  return e;
}

namespace {

using json = nlohmann::json;
using MaybeError = std::optional<ApiError>;

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a decimal number";
    default: return "an integer";
  }
}

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

// Field readers: absent or null leaves *out untouched; a wrong type or range is an error
// that names the field.
class Fields {
 public:
  explicit Fields(const json& body) : body_(body) {}

  const json* find(const char* name) const {
    auto it = body_.find(name);
    if (it == body_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  MaybeError number(const char* name, double lo, double hi, bool lo_open, double* out) const {
    const json* v = find(name);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number()) return invalid_field(name, std::string(name) + ": expected a number, got " + type_name(*v));
    const double d = v->get<double>();
    if (!std::isfinite(d) || d > hi || (lo_open ? d <= lo : d < lo))
      return invalid_field(name, std::string(name) + ": must be in " + (lo_open ? "(" : "[") + num(lo) + ", " +
                                     num(hi) + "], got " + num(d));
    *out = d;
    return std::nullopt;
  }

  MaybeError integer(const char* name, int64_t lo, int64_t hi, int64_t* out) const {
    const json* v = find(name);
    if (v == nullptr) return std::nullopt;
    return integer_value(name, *v, lo, hi, out);
  }

  static MaybeError integer_value(const std::string& name, const json& v, int64_t lo, int64_t hi, int64_t* out) {
    int64_t i = 0;
    if (v.is_number_integer()) {
      if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return invalid_field(name, name + ": must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
      i = v.get<int64_t>();
    } else if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() &&
               std::fabs(v.get<double>()) < 9e15) {
      i = static_cast<int64_t>(v.get<double>());  // 2.0 from a client that only has doubles
    } else {
      return invalid_field(name, name + ": expected an integer, got " + type_name(v));
    }
    if (i < lo || i > hi)
      return invalid_field(name, name + ": must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                                     std::to_string(i));
    *out = i;
    return std::nullopt;
  }

  MaybeError boolean(const char* name, bool* out) const {
    const json* v = find(name);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean()) return invalid_field(name, std::string(name) + ": expected a boolean, got " + type_name(*v));
    *out = v->get<bool>();
    return std::nullopt;
  }

  MaybeError string(const char* name, std::string* out) const {
    const json* v = find(name);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) return invalid_field(name, std::string(name) + ": expected a string, got " + type_name(*v));
    *out = v->get<std::string>();
    return std::nullopt;
  }

 private:
  const json& body_;
};

#define GB_TRY(expr)                       \
  do {                                     \
    if (MaybeError e_ = (expr)) return e_; \
  } while (0)

MaybeError parse_sampling(const Fields& f, const RequestLimits& limits, int32_t vocab, ParsedRequest* out) {
  SamplingParams& s = out->sampling;
  double d = 0;
  int64_t i = 0;
  if (f.find("temperature")) {
    GB_TRY(f.number("temperature", 0, 100, false, &d));
    s.temperature = static_cast<float>(d);
  }
  if (f.find("top_p")) {
    GB_TRY(f.number("top_p", 0, 1, true, &d));
    s.top_p = static_cast<float>(d);
  }
  if (f.find("min_p")) {
    GB_TRY(f.number("min_p", 0, 1, false, &d));
    s.min_p = static_cast<float>(d);
  }
  if (f.find("top_k")) {
    GB_TRY(f.integer("top_k", -1, std::numeric_limits<int32_t>::max(), &i));
    s.top_k = static_cast<int32_t>(i);
  }
  if (f.find("presence_penalty")) {
    GB_TRY(f.number("presence_penalty", -2, 2, false, &d));
    s.presence_penalty = static_cast<float>(d);
  }
  if (f.find("frequency_penalty")) {
    GB_TRY(f.number("frequency_penalty", -2, 2, false, &d));
    s.frequency_penalty = static_cast<float>(d);
  }
  if (f.find("repetition_penalty")) {
    GB_TRY(f.number("repetition_penalty", 0, 100, true, &d));
    s.repetition_penalty = static_cast<float>(d);
  }
  if (f.find("seed")) {
    GB_TRY(f.integer("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), &i));
    s.seed = static_cast<uint64_t>(i);
    s.has_seed = true;
  }
  if (const json* bias = f.find("logit_bias")) {
    if (!bias->is_object())
      return invalid_field("logit_bias",
                           std::string("logit_bias: expected an object of token id -> bias, got ") + type_name(*bias));
    for (const auto& [key, value] : bias->items()) {
      int64_t id = 0;
      size_t used = 0;
      try {
        id = std::stoll(key, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != key.size())
        return invalid_field("logit_bias", "logit_bias: key '" + key + "' is not a token id");
      if (id < 0 || id >= vocab)
        return invalid_field("logit_bias", "logit_bias: token id " + key + " is outside the vocabulary [0, " +
                                               std::to_string(vocab) + ")");
      if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < -100 ||
          value.get<double>() > 100)
        return invalid_field("logit_bias", "logit_bias: the bias of token " + key + " must be a number in [-100, 100]");
      s.logit_bias[static_cast<int32_t>(id)] = value.get<float>();
    }
  }
  // The sampler's own check is the last word on ranges (it is what the engine will enforce).
  if (Status st = s.validate(vocab); !st.is_ok()) {
    const std::string& m = st.message();
    return invalid_field(m.substr(0, m.find(' ')), m);
  }

  if (const json* stop = f.find("stop")) {
    if (stop->is_string()) {
      out->stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const json& item : *stop) {
        if (!item.is_string()) return invalid_field("stop", "stop: expected a string or a list of strings");
        out->stop.push_back(item.get<std::string>());
      }
    } else {
      return invalid_field("stop",
                           std::string("stop: expected a string or a list of strings, got ") + type_name(*stop));
    }
    if (static_cast<int64_t>(out->stop.size()) > limits.max_stop)
      return invalid_field("stop", "stop: at most " + std::to_string(limits.max_stop) + " stop strings, got " +
                                       std::to_string(out->stop.size()));
    for (const std::string& s : out->stop) {
      if (s.empty()) return invalid_field("stop", "stop: stop strings must not be empty");
    }
  }
  GB_TRY(f.boolean("ignore_eos", &out->ignore_eos));
  GB_TRY(f.boolean("return_tokens_as_token_ids", &out->return_tokens_as_token_ids));
  GB_TRY(f.string("user", &out->user));

  GB_TRY(f.integer("n", 1, limits.max_n, &i));
  if (f.find("n")) out->n = static_cast<int32_t>(i);
  GB_TRY(f.boolean("stream", &out->stream));
  if (const json* so = f.find("stream_options")) {
    if (!out->stream) return invalid_field("stream_options", "stream_options: only allowed when stream is true");
    if (!so->is_object()) return invalid_field("stream_options", "stream_options: expected an object");
    Fields sf(*so);
    if (MaybeError e = sf.boolean("include_usage", &out->include_usage)) {
      e->param = "stream_options.include_usage";
      e->message = "stream_options." + e->message;
      return e;
    }
  }
  return std::nullopt;
}

// Whether obj[key] is the string want. (json::value(key, "") throws when the key holds another
// type: a 500 for `"type": true`, found by server_request_fuzz.)
bool is_string_equal(const json& obj, const char* key, const char* want) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() && it->get_ref<const std::string&>() == want;
}

// Chat message content: a string, or a list of {type: "text", text} parts (joined).
MaybeError message_content(const json& msg, size_t index, std::string* out) {
  const std::string where = "messages[" + std::to_string(index) + "].content";
  auto it = msg.find("content");
  if (it == msg.end() || it->is_null()) {
    const std::string role = msg.value("role", "");
    if (role == "assistant") return std::nullopt;  // e.g. a tool-call turn with no text
    return invalid_field(where, where + ": required");
  }
  if (it->is_string()) {
    *out = it->get<std::string>();
    return std::nullopt;
  }
  if (!it->is_array()) return invalid_field(where, where + ": expected a string or a list of content parts");
  for (size_t j = 0; j < it->size(); ++j) {
    const json& part = (*it)[j];
    const std::string pw = where + "[" + std::to_string(j) + "]";
    if (!part.is_object() || !is_string_equal(part, "type", "text"))
      return invalid_field(pw + ".type", pw + ".type: only text content parts are supported");
    auto text = part.find("text");
    if (text == part.end() || !text->is_string()) return invalid_field(pw + ".text", pw + ".text: expected a string");
    *out += text->get<std::string>();
  }
  return std::nullopt;
}

MaybeError parse_messages(const json& body, const TextCodec& codec, ParsedRequest* out) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) return invalid_field("messages", "messages: required");
  if (!it->is_array() || it->empty())
    return invalid_field("messages", "messages: expected a non-empty list of {role, content}");
  static const std::set<std::string> kRoles = {"system", "developer", "user", "assistant", "tool"};
  json normalized = json::array();
  for (size_t i = 0; i < it->size(); ++i) {
    const json& msg = (*it)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object()) return invalid_field(where, where + ": expected an object with role and content");
    auto role = msg.find("role");
    if (role == msg.end() || !role->is_string() || !kRoles.count(role->get<std::string>()))
      return invalid_field(where + ".role", where + ".role: must be one of system, developer, user, assistant, tool");
    std::string content;
    GB_TRY(message_content(msg, i, &content));
    json m = {{"role", role->get<std::string>()}, {"content", content}};
    if (auto name = msg.find("name"); name != msg.end() && name->is_string()) m["name"] = *name;
    normalized.push_back(std::move(m));
  }
  bool add_generation_prompt = true;
  GB_TRY(Fields(body).boolean("add_generation_prompt", &add_generation_prompt));
  Result<std::string> rendered = codec.render_chat(normalized, add_generation_prompt);
  if (!rendered.is_ok()) return invalid_field("messages", "messages: chat template failed: " + rendered.message());
  ParsedPrompt p;
  p.text = std::move(rendered.value());
  p.tokens = codec.encode(p.text, /*add_special=*/false);
  p.max_tokens = 0;
  out->prompts.push_back(std::move(p));
  return std::nullopt;
}

MaybeError token_list(const json& list, const std::string& where, int32_t vocab, std::vector<int32_t>* out) {
  for (const json& t : list) {
    if (!t.is_number_integer()) return invalid_field("prompt", where + ": expected token ids (integers)");
    int64_t id = 0;
    if (!json_integer(t, 0, vocab - 1, &id))
      return invalid_field(
          "prompt", where + ": token id " + t.dump() + " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    out->push_back(static_cast<int32_t>(id));
  }
  return std::nullopt;
}

MaybeError parse_prompt(const json& body, const TextCodec& codec, ParsedRequest* out) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return invalid_field("prompt", "prompt: required");
  const json& p = *it;
  const int32_t vocab = codec.vocab_size();
  auto add_text = [&](const std::string& text) {
    ParsedPrompt pp;
    pp.text = text;
    pp.tokens = codec.encode(text, /*add_special=*/true);
    pp.max_tokens = 0;
    out->prompts.push_back(std::move(pp));
  };
  const char* kShape = "prompt: expected a string, a list of strings, a list of token ids or a list of token-id lists";
  if (p.is_string()) {
    add_text(p.get<std::string>());
  } else if (p.is_array()) {
    if (p.empty()) return invalid_field("prompt", "prompt: must not be an empty list");
    // A flat list of token ids is one prompt; only lists of prompts count against kMaxPrompts.
    if (!p[0].is_number() && p.size() > kMaxPrompts)
      return invalid_field("prompt", "prompt: at most " + std::to_string(kMaxPrompts) + " prompts per request");
    if (p[0].is_string()) {
      for (const json& s : p) {
        if (!s.is_string()) return invalid_field("prompt", kShape);
        add_text(s.get<std::string>());
      }
    } else if (p[0].is_number()) {
      ParsedPrompt pp;
      GB_TRY(token_list(p, "prompt", vocab, &pp.tokens));
      out->prompts.push_back(std::move(pp));
    } else if (p[0].is_array()) {
      for (size_t i = 0; i < p.size(); ++i) {
        if (!p[i].is_array()) return invalid_field("prompt", kShape);
        ParsedPrompt pp;
        GB_TRY(token_list(p[i], "prompt[" + std::to_string(i) + "]", vocab, &pp.tokens));
        out->prompts.push_back(std::move(pp));
      }
    } else {
      return invalid_field("prompt", kShape);
    }
  } else {
    return invalid_field("prompt", kShape);
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_request(Endpoint endpoint, const nlohmann::json& body, const RequestLimits& limits,
                                      const TextCodec& codec, ParsedRequest* out) {
  *out = ParsedRequest{};
  out->endpoint = endpoint;
  if (!body.is_object()) return invalid_field("", "the request body must be a JSON object");
  const Fields f(body);

  GB_TRY(f.string("model", &out->model));
  const auto& variants = limits.other_models;
  if (!out->model.empty() && out->model != limits.served_model_name &&
      std::find(variants.begin(), variants.end(), out->model) == variants.end()) {
    ApiError e;
    e.status = 404;
    e.type = "not_found_error";
    e.param = "model";
    e.code = "model_not_found";
    std::string served = "'" + limits.served_model_name + "'";
    for (size_t i = 0; i < variants.size() && i < 8; ++i) served += ", '" + variants[i] + "'";
    if (variants.size() > 8) served += " and " + std::to_string(variants.size() - 8) + " more (GET /v1/models)";
    e.message = "The model " + quote_input(out->model) + " does not exist; this server serves " + served;
    return e;
  }
  if (out->model.empty()) out->model = limits.served_model_name;

  GB_TRY(parse_sampling(f, limits, codec.vocab_size(), out));

  // Fields we know but do not implement: refuse them rather than silently ignore.
  std::optional<int64_t> max_tokens;
  int64_t i = 0;
  if (endpoint == Endpoint::kCompletions) {
    GB_TRY(f.boolean("echo", &out->echo));
    if (const json* suffix = f.find("suffix"); suffix && !(suffix->is_string() && suffix->get<std::string>().empty()))
      return invalid_field("suffix", "suffix: not supported");
    if (f.find("best_of")) {
      GB_TRY(f.integer("best_of", 1, limits.max_n, &i));
      if (i != out->n) return invalid_field("best_of", "best_of: only best_of equal to n is supported");
    }
    if (f.find("logprobs")) {
      GB_TRY(f.integer("logprobs", 0, limits.max_logprobs, &i));
      out->top_logprobs = static_cast<int32_t>(i);
    }
    // With echo, max_tokens 0 scores the prompt without generating (OpenAI's legacy recipe).
    if (f.find("max_tokens")) {
      GB_TRY(f.integer("max_tokens", out->echo ? 0 : 1, std::numeric_limits<int32_t>::max(), &i));
      max_tokens = i;
    }
    GB_TRY(parse_prompt(body, codec, out));
  } else {
    for (const char* name : {"tools", "functions"}) {
      if (const json* v = f.find(name); v && !(v->is_array() && v->empty()))
        return invalid_field(name, std::string(name) + ": tool calling is not supported");
    }
    if (const json* rf = f.find("response_format"); rf && !(rf->is_object() && is_string_equal(*rf, "type", "text")))
      return invalid_field("response_format", "response_format: only {\"type\": \"text\"} is supported");
    bool logprobs = false;
    GB_TRY(f.boolean("logprobs", &logprobs));
    if (f.find("top_logprobs")) {
      GB_TRY(f.integer("top_logprobs", 0, limits.max_logprobs, &i));
      if (!logprobs) return invalid_field("top_logprobs", "top_logprobs: requires logprobs to be true");
      out->top_logprobs = static_cast<int32_t>(i);
    } else if (logprobs) {
      out->top_logprobs = 0;
    }
    // max_completion_tokens replaces the deprecated max_tokens; when both are given it wins.
    if (f.find("max_tokens")) {
      GB_TRY(f.integer("max_tokens", 1, std::numeric_limits<int32_t>::max(), &i));
      max_tokens = i;
    }
    if (f.find("max_completion_tokens")) {
      GB_TRY(f.integer("max_completion_tokens", 1, std::numeric_limits<int32_t>::max(), &i));
      max_tokens = i;
    }
    GB_TRY(parse_messages(body, codec, out));
  }

  if (f.find("prompt_logprobs")) {
    GB_TRY(f.integer("prompt_logprobs", 0, limits.max_logprobs, &i));
    out->prompt_logprobs = static_cast<int32_t>(i);
  }

  const int64_t ctx = limits.max_model_len;
  const char* prompt_field = endpoint == Endpoint::kChat ? "messages" : "prompt";
  for (ParsedPrompt& p : out->prompts) {
    const int64_t n_prompt = static_cast<int64_t>(p.tokens.size());
    if (n_prompt == 0) return invalid_field(prompt_field, std::string(prompt_field) + ": the prompt is empty");
    if (max_tokens) {
      if (n_prompt + *max_tokens > ctx) {
        ApiError e = invalid_field(
            "max_tokens", "This model's maximum context length is " + std::to_string(ctx) +
                              " tokens. However, you requested " + std::to_string(n_prompt + *max_tokens) +
                              " tokens (" + std::to_string(n_prompt) + " in the " + prompt_field + ", " +
                              std::to_string(*max_tokens) + " in the completion). Please reduce the length of the " +
                              prompt_field + " or the completion.");
        e.code = "context_length_exceeded";
        return e;
      }
      p.max_tokens = static_cast<int32_t>(*max_tokens);
    } else {
      if (n_prompt >= ctx) {
        ApiError e = invalid_field(prompt_field, "This model's maximum context length is " + std::to_string(ctx) +
                                                     " tokens. However, your " + prompt_field + " has " +
                                                     std::to_string(n_prompt) +
                                                     " tokens, which leaves no room for a completion.");
        e.code = "context_length_exceeded";
        return e;
      }
      p.max_tokens = static_cast<int32_t>(ctx - n_prompt);
    }
  }
  return std::nullopt;
}

}  // namespace gb::server
