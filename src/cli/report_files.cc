// The analysis commands' shared I/O (report_files.h).
#include "cli/report_files.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/mapped_file.h"

namespace gb::cli {

Result<std::vector<std::string>> read_prompts(const std::string& prompt, const std::string& prompts_file) {
  std::vector<std::string> texts;
  if (!prompt.empty()) texts.push_back(prompt);
  if (!prompts_file.empty()) {
    GB_ASSIGN_OR_RETURN(std::string content, read_file(prompts_file));
    std::istringstream in(content);
    // One prompt per line, or JSONL: a line that is a JSON string, or an object with a string
    // "prompt" (or "text"), is that string (so prompts may hold newlines).
    int64_t n = 0;
    for (std::string line; std::getline(in, line);) {
      ++n;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) continue;
      if (line.front() == '{' || line.front() == '"') {
        const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (j.is_string()) {
          texts.push_back(j.get<std::string>());
          continue;
        }
        if (j.is_object()) {
          const char* key = j.contains("prompt") ? "prompt" : "text";
          if (!j.contains(key) || !j[key].is_string())
            return Status::error(prompts_file + ":" + std::to_string(n) +
                                 ": a JSONL line needs a string \"prompt\" (or \"text\")");
          texts.push_back(j[key].get<std::string>());
          continue;
        }
      }
      texts.push_back(line);
    }
  }
  if (texts.empty()) return Status::error("give a prompt: --prompt or --prompts FILE");
  return texts;
}

std::string json_text(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Status write_report_files(const std::string& command, const std::string& dir,
                          const std::vector<std::pair<std::string, std::string>>& files) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::error("cannot create " + dir + ": " + ec.message());
  for (const auto& [name, contents] : files) {
    const std::filesystem::path path = std::filesystem::path(dir) / name;
    std::ofstream out(path, std::ios::binary);
    out << contents;
    if (!out.good()) return Status::error("cannot write " + path.string());
  }
  // "DIR/scan.{json,md,svg}" when the names share a stem, else "DIR/{a.json,b.svg}".
  std::string stem = files.empty() ? "" : files[0].first.substr(0, files[0].first.rfind('.'));
  for (const auto& [name, contents] : files) {
    if (name.substr(0, name.rfind('.')) != stem) stem.clear();
  }
  std::string list;
  for (const auto& [name, contents] : files) {
    if (!list.empty()) list += ',';
    list += stem.empty() ? name : name.substr(name.rfind('.') + 1);
  }
  std::fflush(stdout);
  std::fprintf(stderr, "glassbox %s: wrote %s/%s{%s}\n", command.c_str(), dir.c_str(),
               stem.empty() ? "" : (stem + ".").c_str(), list.c_str());
  return Status::ok();
}

}  // namespace gb::cli
