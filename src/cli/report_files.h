// What the analysis commands (scan, depth, sweep, lens) share around their numbers: prompts from
// --prompt / --prompts FILE, JSON text that never throws on bad UTF-8, and the files --out DIR gets.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace gb::cli {

// The prompt (if any) and the prompts of the file (if any): one per non-empty line, or JSONL (a
// line that is a JSON string, or an object with a string "prompt" or "text"); an error when there
// are none.
Result<std::vector<std::string>> read_prompts(const std::string& prompt, const std::string& prompts_file);

// One line of JSON, invalid UTF-8 replaced.
std::string json_text(const nlohmann::json& j);

// Writes each (file name, contents) into dir (created if needed), then says so on stderr
// ("glassbox CMD: wrote DIR/cmd.{json,md,svg}", or DIR/{a.json,b.svg} for names with different
// stems, after flushing stdout); the error names what failed.
Status write_report_files(const std::string& command, const std::string& dir,
                          const std::vector<std::pair<std::string, std::string>>& files);

}  // namespace gb::cli
