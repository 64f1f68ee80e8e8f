// safetensors reader (hand-written: no Debian package parses it). Format: u64 little-endian
// header length N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, ...,
// "__metadata__": {...}}, then the data; offsets are relative to the end of the header.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "formats/tensor_file.h"

namespace gb {

struct SafetensorsFile {
  std::vector<TensorView> tensors;              // in file order
  std::map<std::string, std::string> metadata;  // "__metadata__"
};

// Validates the header completely (dtypes, shapes against byte ranges, ranges inside the file,
// no overlaps) so a truncated or corrupt file is rejected before any tensor is used.
Result<SafetensorsFile> read_safetensors(const std::string& path);
Result<SafetensorsFile> parse_safetensors(std::shared_ptr<MappedFile> file);

// Writes F32 / F16 / BF16 / I8 / I32 / I64 tensors (`glassbox dump`, benchmark models, patches, tests).
struct SafetensorsEntry {
  std::string name;
  DType dtype;  // kF32, kF16, kBF16, kI8, kI32 or kI64
  std::vector<int64_t> shape;
  const void* data;
};
Status write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace gb
