// Loads the chat-template case fixtures (cases.json, conversations.json, templates/) and renders
// one case with our engine; shared by the case test and the cross-check.
#pragma once

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "chat/chat_template.h"

namespace gb::chat::testing {

using Json = nlohmann::ordered_json;

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Case {
  std::string name;
  Json spec;  // the cases.json entry
};

inline std::vector<Case> load_cases(const std::string& dir) {
  std::vector<Case> cases;
  const std::string text = read_file(dir + "/cases.json");
  if (text.empty()) return cases;
  Json manifest = Json::parse(text);
  for (const auto& c : manifest["cases"]) cases.push_back({c["name"].get<std::string>(), c});
  return cases;
}

// Renders one case; returns false with the error message in `out` on failure.
inline bool render_case(const std::string& dir, const Json& spec, std::string& out) {
  static const Json conversations = Json::parse(read_file(dir + "/conversations.json"));
  static const Json manifest = Json::parse(read_file(dir + "/cases.json"));
  const std::string source = read_file(dir + "/templates/" + spec["template"].get<std::string>() + ".jinja");
  auto tmpl = ChatTemplate::parse(source);
  if (!tmpl.is_ok()) {
    out = tmpl.message();
    return false;
  }
  const Json& conv = conversations[spec["conversation"].get<std::string>()];
  ChatTemplateOptions opts;
  opts.add_generation_prompt = spec["add_generation_prompt"].get<bool>();
  opts.bos_token = spec["bos_token"].get<std::string>();
  opts.eos_token = spec["eos_token"].get<std::string>();
  if (conv.contains("tools")) opts.tools = conv["tools"];
  if (spec.contains("kwargs")) opts.kwargs = spec["kwargs"];
  opts.render.now = manifest["now"].get<std::time_t>();
  auto r = apply_chat_template(*tmpl, conv["messages"], opts);
  if (!r.is_ok()) {
    out = r.message();
    return false;
  }
  out = *r;
  return true;
}

}  // namespace gb::chat::testing
