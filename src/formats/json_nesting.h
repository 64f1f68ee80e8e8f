// Nesting bound for JSON read from model files (config.json, tokenizer.json). nlohmann parses
// and destroys without recursion, but copying or dumping a value recurses once per level: a
// document nested 100,000 deep overflows the stack. Loaders check the bound right after parsing.
#pragma once

#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

namespace gb {

constexpr int kMaxJsonNesting = 64;  // real configs and tokenizers nest fewer than 10 levels

// True when arrays/objects nest deeper than max_depth (a scalar is depth 0, [] depth 1).
// Iterative, so it is safe on any parsed document.
inline bool json_nesting_exceeds(const nlohmann::json& j, int max_depth = kMaxJsonNesting) {
  std::vector<std::pair<const nlohmann::json*, int>> stack{{&j, 0}};
  while (!stack.empty()) {
    const auto [v, depth] = stack.back();
    stack.pop_back();
    if (!v->is_structured()) continue;
    if (depth + 1 > max_depth) return true;
    for (const nlohmann::json& child : *v) stack.emplace_back(&child, depth + 1);
  }
  return false;
}

}  // namespace gb
