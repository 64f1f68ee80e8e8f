#include "eval/dataset.h"

#include <fstream>
#include <set>

namespace gb::eval {

namespace {

std::string fill_template(std::string_view tmpl, const std::string& question) {
  const size_t at = tmpl.find("{question}");
  std::string out(tmpl.substr(0, at));
  out += question;
  out += tmpl.substr(at + std::string_view("{question}").size());
  return out;
}

std::string text_field(const nlohmann::json& row, const char* key) {
  const auto it = row.find(key);
  return it != row.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

Result<Problem> parse_row(const nlohmann::json& row, size_t line, std::string_view prompt_template) {
  const std::string where = "line " + std::to_string(line);
  if (!row.is_object()) return Status::error(where + ": expected a JSON object per line");
  Problem p;
  p.id = std::to_string(line);
  if (const auto id = row.find("id"); id != row.end()) {
    if (id->is_string() && !id->get<std::string>().empty() && id->get<std::string>().size() <= 256) {
      p.id = id->get<std::string>();
    } else if (id->is_number_integer()) {
      p.id = id->dump();
    } else {
      return Status::error(where + ": \"id\" must be a non-empty string (at most 256 bytes) or an integer");
    }
  }
  auto require_text = [&](const char* key) -> Result<std::string> {
    const auto it = row.find(key);
    if (it == row.end() || !it->is_string() || it->get<std::string>().empty())
      return Status::error(where + ": \"" + key + "\" must be a non-empty string");
    return it->get<std::string>();
  };
  const bool gsm8k = row.contains("question"), math = row.contains("problem");
  if (gsm8k || math) {
    if (gsm8k && math) return Status::error(where + ": a row has \"question\" (GSM8K) or \"problem\" (MATH), not both");
    p.kind = gsm8k ? TaskKind::kGsm8k : TaskKind::kMath;
    GB_ASSIGN_OR_RETURN(const std::string question, require_text(gsm8k ? "question" : "problem"));
    GB_ASSIGN_OR_RETURN(const std::string answer, require_text("answer"));
    std::string why;
    p.reference = reference_answer(p.kind, answer, &why);
    if (!p.reference) return Status::error(where + ": \"answer\": " + why);
    p.chat = true;
    p.messages = nlohmann::json::array({{{"role", "user"}, {"content", fill_template(prompt_template, question)}}});
    return p;
  }
  if (row.contains("prompt") == row.contains("messages"))
    return Status::error(where +
                         ": expected GSM8K {question, answer}, MATH {problem, answer}, or {prompt | messages, "
                         "expected?}");
  p.kind = TaskKind::kExact;
  if (row.contains("prompt")) {
    GB_ASSIGN_OR_RETURN(p.prompt, require_text("prompt"));
  } else {
    const nlohmann::json& m = row["messages"];
    if (!m.is_array() || m.empty()) return Status::error(where + ": \"messages\" must be a non-empty list");
    for (const auto& msg : m) {
      if (!msg.is_object() || text_field(msg, "role").empty() || !msg.contains("content"))
        return Status::error(where + ": each message needs a \"role\" and a \"content\"");
    }
    p.chat = true;
    p.messages = m;
  }
  if (const auto e = row.find("expected"); e != row.end()) {
    if (!e->is_string()) return Status::error(where + ": \"expected\" must be a string");
    p.reference = e->get<std::string>();
  }
  return p;
}

Result<std::vector<Problem>> load_dataset(const std::string& path, const std::string& prompt_template) {
  const std::string tmpl = prompt_template.empty() ? std::string(kDefaultMathTemplate) : prompt_template;
  if (tmpl.find("{question}") == std::string::npos) return Status::error("--prompt-template must contain {question}");
  std::ifstream in(path);
  if (!in) return Status::error(path + ": cannot open the dataset");
  std::vector<Problem> out;
  std::set<std::string> ids;
  std::string text;
  for (size_t line = 1; std::getline(in, text); ++line) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json row = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (row.is_discarded()) return Status::error(path + ": line " + std::to_string(line) + ": not valid JSON");
    Result<Problem> p = parse_row(row, line, tmpl);
    if (!p.is_ok()) return Status::error(path + ": " + p.message());
    if (!ids.insert(p->id).second)
      return Status::error(path + ": line " + std::to_string(line) + ": id '" + p->id + "' is used twice");
    out.push_back(std::move(p).value());
  }
  if (in.bad()) return Status::error(path + ": read error");
  if (out.empty()) return Status::error(path + ": no rows (one JSON object per line)");
  return out;
}

}  // namespace gb::eval
