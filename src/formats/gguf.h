// GGUF v2/v3 reader (hand-written: no Debian package parses GGUF). Metadata values become JSON
// values (arrays of strings for vocabularies, numbers keep integer vs float); tensors are
// viewed in place. Shared by the tokenizer (vocabulary-only files) and the model loader.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "formats/tensor_file.h"

namespace gb {

struct GgufFile {
  uint32_t version = 0;
  std::map<std::string, nlohmann::json> metadata;
  std::vector<TensorView> tensors;  // shape outermost first: GGUF ne = {cols, rows} -> {rows, cols}
  std::shared_ptr<MappedFile> file;

  const nlohmann::json* find(const std::string& key) const {
    auto it = metadata.find(key);
    return it == metadata.end() ? nullptr : &it->second;
  }
  const TensorView* find_tensor(const std::string& name) const;
};

// Every length, count, type and offset is checked against the file before use: a truncated or
// corrupt file gives an error naming what was being read, never an out-of-bounds read.
Result<GgufFile> read_gguf(const std::string& path);
Result<GgufFile> parse_gguf(std::shared_ptr<MappedFile> file);

// Maps a GGML type id to ours; false for types Glassbox does not support.
bool gguf_type_to_dtype(uint32_t ggml_type, DType* out);
uint32_t dtype_to_gguf_type(DType t);

}  // namespace gb
