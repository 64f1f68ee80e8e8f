// What a weight file gives the loader: named tensors viewed in place in a mapped file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"

namespace gb {

struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // row-major, outermost first (HF order; GGUF ne[] reversed)
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  std::shared_ptr<MappedFile> file;  // keeps the mapping alive

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  std::string shape_str() const;
};

}  // namespace gb
