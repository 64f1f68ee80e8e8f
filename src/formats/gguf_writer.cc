#include "formats/gguf_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "formats/gguf.h"

namespace gb {
namespace {

constexpr uint64_t kAlignment = 32;

class Out {
 public:
  explicit Out(std::FILE* f) : f_(f) {}
  void bytes(const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, f_) != n) ok_ = false;
    pos_ += n;
  }
  template <class T>
  void pod(T v) {
    bytes(&v, sizeof(T));
  }
  void str(const std::string& s) {
    pod<uint64_t>(s.size());
    bytes(s.data(), s.size());
  }
  void pad() {
    static const char zeros[kAlignment] = {};
    bytes(zeros, (kAlignment - pos_ % kAlignment) % kAlignment);
  }
  bool ok() const { return ok_; }

 private:
  std::FILE* f_;
  uint64_t pos_ = 0;
  bool ok_ = true;
};

uint32_t scalar_type(const nlohmann::json& v) {
  if (v.is_string()) return 8;
  if (v.is_boolean()) return 7;
  if (v.is_number_unsigned()) return v.get<uint64_t>() > 0xffffffffull ? 10 : 4;
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    return (i < INT32_MIN || i > INT32_MAX) ? 11 : 5;
  }
  return 6;  // float
}

void write_scalar(Out& o, uint32_t type, const nlohmann::json& v) {
  switch (type) {
    case 8: o.str(v.get<std::string>()); break;
    case 7: o.pod<uint8_t>(v.get<bool>() ? 1 : 0); break;
    case 4: o.pod<uint32_t>(static_cast<uint32_t>(v.get<uint64_t>())); break;
    case 10: o.pod<uint64_t>(v.get<uint64_t>()); break;
    case 5: o.pod<int32_t>(static_cast<int32_t>(v.get<int64_t>())); break;
    case 11: o.pod<int64_t>(v.get<int64_t>()); break;
    default: o.pod<float>(v.get<float>()); break;
  }
}

// One element type for a whole array: strings, bools, or the narrowest number type that holds
// every element (any float: f32; any negative or signed: i32/i64; else u32/u64). 0 when the
// elements mix kinds, which GGUF cannot store.
uint32_t array_type(const nlohmann::json& v) {
  if (v.empty()) return 4;
  if (v[0].is_string() || v[0].is_boolean()) {
    for (const auto& e : v) {
      if (e.type() != v[0].type()) return 0;
    }
    return scalar_type(v[0]);
  }
  bool any_float = false, any_signed = false, wide = false;
  for (const auto& e : v) {
    if (!e.is_number()) return 0;
    if (e.is_number_float()) {
      any_float = true;
    } else if (e.is_number_unsigned()) {
      wide |= e.get<uint64_t>() > 0xffffffffull;
    } else {
      any_signed = true;
      const int64_t i = e.get<int64_t>();
      wide |= i < INT32_MIN || i > INT32_MAX;
    }
  }
  if (any_float) return 6;
  if (any_signed) return wide ? 11 : 5;
  return wide ? 10 : 4;
}

}  // namespace

void GgufWriter::set(const std::string& key, nlohmann::json value) {
  for (auto& [k, v] : metadata_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(key, std::move(value));
}

void GgufWriter::add_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data,
                            size_t nbytes) {
  tensors_.push_back({name, dtype, std::move(shape), data, nbytes});
}

Status GgufWriter::write(const std::string& path) const {
  for (const auto& [key, v] : metadata_) {
    if (v.is_null() || v.is_object() || (v.is_array() && array_type(v) == 0))
      return Status::error("GGUF metadata '" + key + "' must be a scalar or an array of scalars of one kind");
  }
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) return Status::error("cannot create " + path + ": " + std::strerror(errno));
  Out o(f.get());
  o.pod<uint32_t>(0x46554747u);
  o.pod<uint32_t>(3);
  o.pod<uint64_t>(tensors_.size());
  o.pod<uint64_t>(metadata_.size());
  for (const auto& [key, v] : metadata_) {
    o.str(key);
    if (v.is_array()) {
      const uint32_t et = array_type(v);
      o.pod<uint32_t>(9);
      o.pod<uint32_t>(et);
      o.pod<uint64_t>(v.size());
      for (const auto& e : v) write_scalar(o, et, e);
    } else {
      const uint32_t t = scalar_type(v);
      o.pod<uint32_t>(t);
      write_scalar(o, t, v);
    }
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    o.str(t.name);
    o.pod<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) o.pod<uint64_t>(static_cast<uint64_t>(*it));
    o.pod<uint32_t>(dtype_to_gguf_type(t.dtype));
    o.pod<uint64_t>(offset);
    offset += (t.nbytes + kAlignment - 1) / kAlignment * kAlignment;
  }
  o.pad();
  for (const auto& t : tensors_) {
    o.bytes(t.data, t.nbytes);
    o.pad();
  }
  if (!o.ok() || std::fflush(f.get()) != 0) return Status::error("cannot write " + path + ": " + std::strerror(errno));
  return Status::ok();
}

}  // namespace gb
