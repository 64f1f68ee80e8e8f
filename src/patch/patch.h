// Weight patches: an edit of some of a base checkpoint's tensors, as a versioned artifact with a
// SHA-256 manifest, or as a LoRA adapter in the forms users bring (PEFT, llama.cpp GGUF). All of
// them load into the same in-memory `Patch`: a list of per-tensor edits of five kinds.
//
// Artifact layout (a directory):
//   manifest.json   {"format": "glassbox-patch", "format_version": 1, name, version, description,
//                    "base_model": {"name", "tensors": {NAME: sha256 of the base tensor's bytes}},
//                    "files": [{"name": "model.safetensors", "sha256": the edited file's sha256,
//                               "header": null | a file in the patch holding the edited header}],
//                    "edits": [{"tensor", "kind", "file", "sha256", "dtype", "shape", "count",
//                               "weights_changed", ("rank", "scale" for low_rank)}]}
//                    optional "golden": [{"prompt": [ids], "greedy": [ids]}] (at most 16; checked
//                    when the variant is loaded while serving)
//   edit-NNNN.safetensors, one per edit:
//     columns  "indices" I64 [k] (strictly increasing column indices), "values" [rows, k]
//     rows     "indices" I64 [k] (row indices), "values" [k, cols]
//     sparse   "indices" I64 [k] (flat element indices), "values" [k]
//     full     "values" with the tensor's shape
//     low_rank "lora_A" [r, cols], "lora_B" [rows, r] (f32, f16 or bf16); W' = W + scale · B · A
//   Values are stored in the tensor's own dtype, so applying reproduces the edited bytes exactly.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace gb::patch {

enum class EditKind { kLowRank, kColumns, kRows, kSparse, kFull };
const char* edit_kind_name(EditKind k);  // "low_rank", "columns", "rows", "sparse", "full"

struct Edit {
  std::string tensor;  // the checkpoint's tensor name (Hugging Face naming)
  EditKind kind = EditKind::kFull;
  DType dtype = DType::kF32;   // the tensor's dtype; values (not low-rank factors) are stored in it
  std::vector<int64_t> shape;  // the whole tensor's shape; 2-D for columns / rows / low_rank
  // columns / rows / sparse: the column, row or flat element indices (strictly increasing);
  // values: the replaced elements' bytes in `dtype` — columns [rows, k], rows [k, cols],
  // sparse [k], full the whole tensor.
  std::vector<int64_t> indices;
  std::vector<uint8_t> values;
  // low_rank: delta = scale · B · A with A [rank, cols] and B [rows, rank], widened to f32.
  int64_t rank = 0;
  float scale = 1.0f;
  std::vector<float> a, b;
  DType factor_dtype = DType::kF32;  // how A and B were stored
  // llama.cpp's converter permutes a llama model's q/k rows for its rope; a GGUF LoRA's B rows of
  // attn_q / attn_k are in that order, like a GGUF base's weights (not an HF base's).
  bool gguf_rope_permuted = false;
  std::string file;             // where the edit came from (a file in the patch, the adapter file)
  std::string sha256;           // that file's SHA-256
  int64_t weights_changed = 0;  // elements replaced (columns/rows/sparse/full); 0 for low_rank

  int64_t rows() const { return shape.size() == 2 ? shape[0] : 0; }
  int64_t cols() const { return shape.size() == 2 ? shape[1] : 0; }
  int64_t numel() const;
  int64_t stored_bytes() const;  // bytes of indices + values (or of the factors as stored)
};

// A checkpoint file the patch reproduces (artifacts made by `patch diff`).
struct OutputFile {
  std::string name;         // e.g. "model.safetensors"
  std::string sha256;       // of the edited file
  std::string header_file;  // empty: the base file's header; else a file in the patch
  std::string header;       // its bytes (the JSON header, padded), when header_file is set
};

enum class PatchSource { kArtifact, kPeft, kGgufLora, kCheckpoint };
// "patch", "peft", "gguf-lora", "checkpoint" (an edited checkpoint diffed in memory)
const char* patch_source_name(PatchSource s);

// A prompt and the greedy tokens the edited model must produce for it (the manifest's optional
// "golden": [{"prompt": [ids], "greedy": [ids]}]): checked before a variant loaded while serving
// takes traffic.
struct GoldenPrompt {
  std::vector<int32_t> prompt, greedy;
};

struct Patch {
  PatchSource source = PatchSource::kArtifact;
  std::vector<GoldenPrompt> golden;
  std::string path;
  std::string name, version, description;
  std::string base_model;                           // a name, for people
  std::map<std::string, std::string> base_tensors;  // tensor -> SHA-256 of its bytes in the base
  std::vector<OutputFile> files;
  std::vector<Edit> edits;
  std::string manifest_sha256;  // artifact: of manifest.json (the patch's identity)

  const Edit* find(const std::string& tensor) const;
  int64_t stored_bytes() const;
};

// Loads any of the forms: a directory with manifest.json (an artifact; every file's hash is
// checked against the manifest), a directory with adapter_config.json (PEFT), a GGUF file with
// general.type = adapter and adapter.type = lora, or — given the Hugging Face base directory it
// was edited from — an edited checkpoint (model.safetensors), diffed in memory (diff_to_patch).
// Every field, shape and index is checked; a bad file is an error naming the file and what is wrong.
Result<Patch> load_patch(const std::string& path, const std::string& base_dir = "");
Result<Patch> load_artifact(const std::string& dir);
Result<Patch> load_peft_adapter(const std::string& dir);
Result<Patch> load_gguf_lora(const std::string& path);

// The canonical (Hugging Face) name of a llama.cpp tensor name ("blk.3.attn_q.weight" ->
// "model.layers.3.self_attn.q_proj.weight"); empty if the name is not one Glassbox binds.
std::string hf_name_from_gguf(const std::string& gguf_name);
// The reverse ("model.layers.3.self_attn.q_proj.weight" or "model.language_model.layers.3...").
std::string gguf_name_from_hf(const std::string& hf_name);

// Where an edited matrix sits in the model, for the forward pass (part 2 binds this to
// LayerWeights): the layer (-1 for embeddings / output) and the projection.
enum class Proj { kQ, kK, kV, kO, kGate, kUp, kDown, kLinQkv, kLinZ, kLinB, kLinA, kLinOut, kEmbed, kOutput };
struct Target {
  int layer = -1;
  Proj proj = Proj::kQ;
};
// Accepts HF names (either "model." or "model.language_model." prefix) and GGUF names.
Result<Target> target_of(const std::string& tensor);

// A patch's deltas applied to one tensor's bytes in place (`data` holds the base tensor, dtype and
// shape as the edit says). Columns / rows / sparse / full replace bytes exactly; low_rank adds
// scale · B · A in double and rounds once to the tensor's dtype (f32, f16 or bf16).
Status apply_edit(const Edit& e, uint8_t* data, size_t nbytes);

// What `patch diff` found and stored.
struct DiffStats {
  int64_t tensors_compared = 0;
  int64_t tensors_changed = 0;
  int64_t weights_changed = 0;
  int64_t bytes_stored = 0;
  std::vector<std::string> other_files_differing;  // config.json etc.: not stored, reported
};

struct DiffOptions {
  std::string name, version = "1", description, base_name;
};

// Compares two Hugging Face checkpoints (same files, tensor names, dtypes and shapes) tensor by
// tensor, stores each changed tensor in the kind with the fewest bytes that reproduces it
// exactly, writes the artifact to out_dir (created; must not exist or be empty), then applies it
// to the base (hashing only) and checks every edited file's SHA-256.
Result<DiffStats> diff_checkpoints(const std::string& base_dir, const std::string& edited_dir,
                                   const std::string& out_dir, const DiffOptions& options);

// The edits that turn one Hugging Face checkpoint into another (same files, names, dtypes and
// shapes), each changed tensor in the kind with the fewest bytes, without writing anything:
// `patch diff` in memory, for serving an edited checkpoint beside its base. manifest_sha256 is
// the edited safetensors file's SHA-256 (of the files' hashes when sharded).
Result<Patch> diff_to_patch(const std::string& base_dir, const std::string& edited_dir);

// Writes base + patch to out_dir: the patched safetensors files and a copy of every other file of
// the base directory (config.json, tokenizer files, ...). For an artifact each written file's
// SHA-256 must equal the manifest's; a mismatch is an error and the file is removed.
Status apply_patch(const std::string& base_dir, const Patch& patch, const std::string& out_dir);

// Checks the patch's files against its manifest (load_artifact does) and every touched base
// tensor against base_tensors. The message of a mismatch names the file or tensor and both hashes.
Status verify_patch(const Patch& patch, const std::string& base_dir);

// What identifies a patch's content: the artifact's manifest hash, an edited checkpoint's hash, or
// the adapter file's hash (PEFT's adapter_model.safetensors, a LoRA GGUF).
std::string identity_sha256(const Patch& p);

// SHA-256 (OpenSSL) as lower-case hex.
std::string sha256_hex(const void* data, size_t n);

}  // namespace gb::patch
