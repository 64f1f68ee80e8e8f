// Plain-text tables for the subcommands that list things (audit, patch info): columns padded to
// their widest cell, two spaces apart.
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace gb::cli {

// Prints rows (the first usually a header) with each line prefixed by indent.
inline void print_columns(const std::vector<std::vector<std::string>>& rows, const char* indent = "") {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 2, ' ');
    }
    std::printf("%s%s\n", indent, line.c_str());
  }
}

}  // namespace gb::cli
