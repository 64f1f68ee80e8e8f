// Shared by the patch module's files: a Hugging Face checkpoint opened for byte-level work, SHA-256
// streaming, and writing one checkpoint file with edits applied.
#pragma once

#include <openssl/evp.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "formats/safetensors.h"
#include "patch/patch.h"

namespace gb::patch {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t n);
  std::string hex();  // finishes; call once

 private:
  EVP_MD_CTX* ctx_;
};

Result<std::string> sha256_file(const std::string& path);

struct CheckpointFile {
  std::string name;  // relative to the directory
  std::shared_ptr<MappedFile> map;
  SafetensorsFile st;
  size_t header_end = 0;  // 8 + header length: where the data starts
};

struct Checkpoint {
  std::string dir;
  std::vector<CheckpointFile> files;                                    // the safetensors files
  std::map<std::string, std::pair<size_t, const TensorView*>> tensors;  // name -> (file, view)

  const TensorView* find(const std::string& name) const {
    auto it = tensors.find(name);
    return it == tensors.end() ? nullptr : it->second.second;
  }
};

// model.safetensors, or the shards model.safetensors.index.json names.
Result<Checkpoint> open_checkpoint(const std::string& dir);

// Every regular file of dir that is not one of the checkpoint's safetensors files.
std::vector<std::string> other_files(const Checkpoint& ck);

using Sink = std::function<Status(const uint8_t*, size_t)>;

// Emits base file f with the edits of `edits` (tensor -> edit) applied, under the header
// `header` (empty: f's own header bytes) to sink.
Status emit_file(const CheckpointFile& f, const std::string& header, const std::map<std::string, const Edit*>& edits,
                 const Sink& sink);

std::string shape_string(const std::vector<int64_t>& shape);  // "[64, 128]"

std::string hf_layer_prefix(const std::string& name);  // "model." or "model.language_model." or ""

}  // namespace gb::patch
