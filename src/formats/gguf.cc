#include "formats/gguf.h"

#include <cstring>

namespace gb {

const TensorView* GgufFile::find_tensor(const std::string& name) const {
  for (const auto& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

bool gguf_type_to_dtype(uint32_t ggml_type, DType* out) {
  switch (ggml_type) {
    case 0: *out = DType::kF32; return true;
    case 1: *out = DType::kF16; return true;
    case 2: *out = DType::kQ4_0; return true;
    case 3: *out = DType::kQ4_1; return true;
    case 6: *out = DType::kQ5_0; return true;
    case 7: *out = DType::kQ5_1; return true;
    case 8: *out = DType::kQ8_0; return true;
    case 10: *out = DType::kQ2_K; return true;
    case 11: *out = DType::kQ3_K; return true;
    case 12: *out = DType::kQ4_K; return true;
    case 20: *out = DType::kIQ4_NL; return true;
    case 13: *out = DType::kQ5_K; return true;
    case 14: *out = DType::kQ6_K; return true;
    case 23: *out = DType::kIQ4_XS; return true;
    case 24: *out = DType::kI8; return true;
    case 26: *out = DType::kI32; return true;
    case 27: *out = DType::kI64; return true;
    case 30: *out = DType::kBF16; return true;
    default: return false;
  }
}

uint32_t dtype_to_gguf_type(DType t) {
  switch (t) {
    case DType::kF32: return 0;
    case DType::kF16: return 1;
    case DType::kQ4_0: return 2;
    case DType::kQ4_1: return 3;
    case DType::kQ5_0: return 6;
    case DType::kQ5_1: return 7;
    case DType::kQ8_0: return 8;
    case DType::kQ2_K: return 10;
    case DType::kQ3_K: return 11;
    case DType::kQ4_K: return 12;
    case DType::kIQ4_NL: return 20;
    case DType::kQ5_K: return 13;
    case DType::kQ6_K: return 14;
    case DType::kIQ4_XS: return 23;
    case DType::kI8: return 24;
    case DType::kI32: return 26;
    case DType::kI64: return 27;
    case DType::kBF16: return 30;
  }
  return 0;
}

namespace {

enum GgufValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const std::string& path) : p_(data), end_(data + size), path_(path) {}

  size_t offset(const uint8_t* base) const { return static_cast<size_t>(p_ - base); }

  template <class T>
  Status read(T* out, const char* what) {
    if (static_cast<size_t>(end_ - p_) < sizeof(T)) return truncated(what);
    std::memcpy(out, p_, sizeof(T));
    p_ += sizeof(T);
    return Status::ok();
  }

  Status read_string(std::string* out, const char* what) {
    uint64_t n = 0;
    GB_RETURN_IF_ERROR(read(&n, what));
    if (n > static_cast<uint64_t>(end_ - p_)) return truncated(what);
    out->assign(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return Status::ok();
  }

  template <class T>
  Status scalar(nlohmann::json* out, const char* what) {
    T v{};
    GB_RETURN_IF_ERROR(read(&v, what));
    *out = v;
    return Status::ok();
  }

  Status read_value(uint32_t type, nlohmann::json* out, const std::string& key, int depth) {
    switch (type) {
      case kU8: return scalar<uint8_t>(out, "u8 value");
      case kI8: return scalar<int8_t>(out, "i8 value");
      case kU16: return scalar<uint16_t>(out, "u16 value");
      case kI16: return scalar<int16_t>(out, "i16 value");
      case kU32: return scalar<uint32_t>(out, "u32 value");
      case kI32: return scalar<int32_t>(out, "i32 value");
      case kF32: return scalar<float>(out, "f32 value");
      case kBool: {
        uint8_t v = 0;
        GB_RETURN_IF_ERROR(read(&v, "bool value"));
        *out = v != 0;
        return Status::ok();
      }
      case kU64: return scalar<uint64_t>(out, "u64 value");
      case kI64: return scalar<int64_t>(out, "i64 value");
      case kF64: return scalar<double>(out, "f64 value");
      case kString: {
        std::string s;
        GB_RETURN_IF_ERROR(read_string(&s, "string value"));
        *out = std::move(s);
        return Status::ok();
      }
      case kArray: {
        if (depth > 2) return Status::error(path_ + ": metadata '" + key + "' nests arrays too deeply");
        uint32_t elem_type = 0;
        uint64_t n = 0;
        GB_RETURN_IF_ERROR(read(&elem_type, "array element type"));
        GB_RETURN_IF_ERROR(read(&n, "array length"));
        // Every element takes at least one byte: a count beyond the remaining bytes is corrupt.
        if (n > static_cast<uint64_t>(end_ - p_)) return truncated("array elements");
        *out = nlohmann::json::array();
        auto& arr = out->get_ref<nlohmann::json::array_t&>();
        arr.reserve(n);
        for (uint64_t i = 0; i < n; ++i) {
          nlohmann::json v;
          GB_RETURN_IF_ERROR(read_value(elem_type, &v, key, depth + 1));
          arr.push_back(std::move(v));
        }
        return Status::ok();
      }
      default: return Status::error(path_ + ": metadata '" + key + "' has unknown value type " + std::to_string(type));
    }
  }

 private:
  Status truncated(const char* what) const {
    return Status::error(path_ + ": file ends while reading " + what + " (truncated or not a GGUF file)");
  }
  const uint8_t* p_;
  const uint8_t* end_;
  const std::string& path_;
};

}  // namespace

Result<GgufFile> read_gguf(const std::string& path) {
  GB_ASSIGN_OR_RETURN(auto file, MappedFile::open(path));
  return parse_gguf(std::move(file));
}

namespace {

// A tensor info as the file states it, before it is checked against the data.
struct RawTensor {
  std::string name;
  std::vector<int64_t> ne;  // GGML order: ne[0] is the row length
  uint32_t type = 0;
  uint64_t offset;
};

Status read_metadata(Reader& r, uint64_t n_kv, GgufFile* g) {
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key;
    uint32_t type = 0;
    GB_RETURN_IF_ERROR(r.read_string(&key, "metadata key"));
    GB_RETURN_IF_ERROR(r.read(&type, "metadata value type"));
    nlohmann::json v;
    GB_RETURN_IF_ERROR(r.read_value(type, &v, key, 0));
    g->metadata[key] = std::move(v);
  }
  return Status::ok();
}

Result<uint64_t> read_alignment(const GgufFile& g, const std::string& path) {
  uint64_t alignment = 32;
  if (const auto* a = g.find("general.alignment")) {
    if (!a->is_number_unsigned() || a->get<uint64_t>() == 0 || (a->get<uint64_t>() & (a->get<uint64_t>() - 1))) {
      return Status::error(path + ": general.alignment must be a power of two");
    }
    alignment = a->get<uint64_t>();
  }
  return alignment;
}

Status read_tensor_infos(Reader& r, const std::string& path, std::vector<RawTensor>* raws) {
  for (auto& t : *raws) {
    GB_RETURN_IF_ERROR(r.read_string(&t.name, "tensor name"));
    uint32_t n_dims = 0;
    GB_RETURN_IF_ERROR(r.read(&n_dims, "tensor rank"));
    if (n_dims == 0 || n_dims > 4)
      return Status::error(path + ": tensor '" + t.name + "' has rank " + std::to_string(n_dims));
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = 0;
      GB_RETURN_IF_ERROR(r.read(&ne, "tensor dimension"));
      if (ne > (1ull << 40)) return Status::error(path + ": tensor '" + t.name + "' has an implausible dimension");
      t.ne.push_back(static_cast<int64_t>(ne));
    }
    GB_RETURN_IF_ERROR(r.read(&t.type, "tensor type"));
    GB_RETURN_IF_ERROR(r.read(&t.offset, "tensor offset"));
  }
  return Status::ok();
}

// The view of one tensor's data, after its type, shape and byte range are checked.
Result<TensorView> view_tensor(const RawTensor& raw, const std::shared_ptr<MappedFile>& file, uint64_t data_start,
                               uint64_t alignment) {
  const std::string& path = file->path();
  TensorView t;
  t.name = raw.name;
  if (!gguf_type_to_dtype(raw.type, &t.dtype)) {
    return Status::error(path + ": tensor '" + raw.name + "' has GGML type " + std::to_string(raw.type) +
                         ", which Glassbox does not support (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, "
                         "Q3_K, Q4_K, Q5_K, Q6_K)");
  }
  t.shape.assign(raw.ne.rbegin(), raw.ne.rend());
  const DTypeInfo info = dtype_info(t.dtype);
  if (raw.ne[0] % info.block_elems != 0) {
    return Status::error(path + ": tensor '" + raw.name + "' row length " + std::to_string(raw.ne[0]) +
                         " is not a multiple of the " + std::string(info.name) + " block size");
  }
  uint64_t numel = 1;
  for (int64_t d : raw.ne) {
    if (d != 0 && numel > (1ull << 48) / static_cast<uint64_t>(d))
      return Status::error(path + ": tensor '" + raw.name + "' is implausibly large");
    numel *= static_cast<uint64_t>(d);
  }
  const uint64_t nbytes = numel / info.block_elems * info.block_bytes;
  if (raw.offset % alignment != 0) return Status::error(path + ": tensor '" + raw.name + "' data is not aligned");
  if (raw.offset > file->size() - data_start || nbytes > file->size() - data_start - raw.offset) {
    return Status::error(path + ": tensor '" + raw.name + "' data lies beyond the end of the file (truncated)");
  }
  t.data = file->data() + data_start + raw.offset;
  t.nbytes = nbytes;
  t.file = file;
  return t;
}

}  // namespace

Result<GgufFile> parse_gguf(std::shared_ptr<MappedFile> file) {
  const std::string& path = file->path();
  Reader r(file->data(), file->size(), path);
  uint32_t magic = 0;
  GB_RETURN_IF_ERROR(r.read(&magic, "magic"));
  if (magic != 0x46554747u) return Status::error(path + ": not a GGUF file (bad magic)");
  GgufFile g;
  g.file = file;
  GB_RETURN_IF_ERROR(r.read(&g.version, "version"));
  if (g.version < 2 || g.version > 3) {
    return Status::error(path + ": GGUF version " + std::to_string(g.version) + " is not supported (2 or 3)");
  }
  uint64_t n_tensors = 0, n_kv = 0;
  GB_RETURN_IF_ERROR(r.read(&n_tensors, "tensor count"));
  GB_RETURN_IF_ERROR(r.read(&n_kv, "metadata count"));
  if (n_tensors > file->size() || n_kv > file->size())
    return Status::error(path + ": implausible tensor/metadata counts");
  GB_RETURN_IF_ERROR(read_metadata(r, n_kv, &g));
  GB_ASSIGN_OR_RETURN(const uint64_t alignment, read_alignment(g, path));

  std::vector<RawTensor> raws(n_tensors);
  GB_RETURN_IF_ERROR(read_tensor_infos(r, path, &raws));
  const uint64_t data_start = (r.offset(file->data()) + alignment - 1) / alignment * alignment;
  if (n_tensors > 0 && data_start > file->size())
    return Status::error(path + ": file ends before the tensor data (truncated)");
  for (const RawTensor& raw : raws) {
    GB_ASSIGN_OR_RETURN(TensorView t, view_tensor(raw, file, data_start, alignment));
    g.tensors.push_back(std::move(t));
  }
  return g;
}

}  // namespace gb
