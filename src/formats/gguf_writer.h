// GGUF v3 writer: benchmark models, control-vector files and test fixtures made by Glassbox
// itself. Metadata types follow llama.cpp's conventions (u32 counts, f32 floats, string arrays).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace gb {

class GgufWriter {
 public:
  // JSON values map to GGUF types: string, bool, unsigned -> u32 (u64 if larger), signed -> i32
  // (i64 if larger), float -> f32, arrays of one of those (one element type for the whole array:
  // the narrowest that holds every element; mixing strings, bools and numbers is an error).
  void set(const std::string& key, nlohmann::json value);

  // Adds a tensor; shape is outermost first (written to GGUF as ne = reversed shape). The bytes
  // are referenced, not copied: they must stay alive until write() returns.
  void add_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data, size_t nbytes);

  Status write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    const void* data;
    size_t nbytes;
  };
  std::vector<std::pair<std::string, nlohmann::json>> metadata_;
  std::vector<Tensor> tensors_;
};

}  // namespace gb
