#include "formats/safetensors.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

namespace gb {

std::string TensorView::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

namespace {

bool parse_st_dtype(const std::string& s, DType* out) {
  static const std::pair<const char*, DType> kMap[] = {
      {"F32", DType::kF32}, {"F16", DType::kF16}, {"BF16", DType::kBF16},
      {"I8", DType::kI8},   {"I32", DType::kI32}, {"I64", DType::kI64},
  };
  for (const auto& [name, t] : kMap) {
    if (s == name) {
      *out = t;
      return true;
    }
  }
  return false;
}

const char* st_dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kI8: return "I8";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    default: return nullptr;
  }
}

}  // namespace

Result<SafetensorsFile> read_safetensors(const std::string& path) {
  GB_ASSIGN_OR_RETURN(auto file, MappedFile::open(path));
  return parse_safetensors(std::move(file));
}

Result<SafetensorsFile> parse_safetensors(std::shared_ptr<MappedFile> file) {
  const std::string& path = file->path();
  const size_t size = file->size();
  if (size < 8) return Status::error(path + ": not a safetensors file (shorter than its 8-byte header length)");
  uint64_t header_len;
  std::memcpy(&header_len, file->data(), 8);
  if (header_len > size - 8) {
    return Status::error(path + ": header length " + std::to_string(header_len) + " exceeds the file size " +
                         std::to_string(size) + " (truncated or not a safetensors file)");
  }
  const char* hbegin = reinterpret_cast<const char*>(file->data() + 8);
  nlohmann::json header = nlohmann::json::parse(hbegin, hbegin + header_len, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return Status::error(path + ": header is not a JSON object (corrupt safetensors file)");
  }
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = size - data_start;

  SafetensorsFile out;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return Status::error(path + ": __metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (m.value().is_string()) out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = path + ": tensor '" + name + "'";
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets")) {
      return Status::error(where + ": entry needs dtype, shape and data_offsets");
    }
    if (!v["dtype"].is_string()) return Status::error(where + ": dtype is not a string");
    TensorView t;
    t.name = name;
    const std::string dt = v["dtype"].get<std::string>();
    if (!parse_st_dtype(dt, &t.dtype)) {
      return Status::error(where + ": unsupported dtype " + dt + " (supported: F32, F16, BF16, I8, I32, I64)");
    }
    if (!v["shape"].is_array()) return Status::error(where + ": shape is not an array");
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) return Status::error(where + ": shape has a non-integer or negative dimension");
      const uint64_t dim = d.get<uint64_t>();
      if (dim > (1ull << 40) || (dim != 0 && numel > (1ull << 48) / dim)) {
        return Status::error(where + ": shape is implausibly large");
      }
      numel *= dim;
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    const auto& offs = v["data_offsets"];
    if (!offs.is_array() || offs.size() != 2 || !offs[0].is_number_unsigned() || !offs[1].is_number_unsigned()) {
      return Status::error(where + ": data_offsets must be two non-negative integers");
    }
    const uint64_t b = offs[0].get<uint64_t>(), e = offs[1].get<uint64_t>();
    if (b > e || e > data_size) {
      return Status::error(where + ": data_offsets [" + std::to_string(b) + ", " + std::to_string(e) +
                           "] fall outside the " + std::to_string(data_size) + " data bytes (truncated file?)");
    }
    const uint64_t want = numel * static_cast<uint64_t>(dtype_info(t.dtype).block_bytes);
    if (e - b != want) {
      return Status::error(where + ": shape " + t.shape_str() + " of " + dt + " needs " + std::to_string(want) +
                           " bytes but data_offsets span " + std::to_string(e - b));
    }
    t.data = file->data() + data_start + b;
    t.nbytes = e - b;
    t.file = file;
    ranges.emplace_back(b, e);
    out.tensors.push_back(std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) return Status::error(path + ": tensor data ranges overlap");
  }
  return out;
}

Status write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                         const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::vector<uint64_t> sizes;
  for (const auto& e : entries) {
    const char* dt = st_dtype_name(e.dtype);
    if (dt == nullptr) return Status::error("write_safetensors: unsupported dtype for " + e.name);
    uint64_t n = 1;
    for (int64_t d : e.shape) n *= static_cast<uint64_t>(d);
    const uint64_t bytes = n * static_cast<uint64_t>(dtype_info(e.dtype).block_bytes);
    header[e.name] = {{"dtype", dt}, {"shape", e.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    sizes.push_back(bytes);
  }
  std::string h = header.dump();
  while ((h.size() + 8) % 8 != 0) h.push_back(' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::error("cannot create " + path + ": " + std::strerror(errno));
  const uint64_t hl = h.size();
  out.write(reinterpret_cast<const char*>(&hl), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (size_t i = 0; i < entries.size(); ++i) {
    out.write(static_cast<const char*>(entries[i].data), static_cast<std::streamsize>(sizes[i]));
  }
  out.flush();
  if (!out) return Status::error("cannot write " + path + ": " + std::strerror(errno));
  return Status::ok();
}

}  // namespace gb
