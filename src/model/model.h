// Model: a loaded model (config + weights used in place) and its forward pass over one flat batch.
// The entry point for the engine, the CLI and the tests.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "model/activations.h"
#include "model/batch.h"
#include "model/config.h"
#include "model/hooks.h"
#include "model/kv_cache.h"
#include "model/variants.h"
#include "model/weights.h"

namespace gb {

struct LoadOptions {
  int32_t max_batch_tokens = 512;  // Activations are sized for this many tokens per forward
  int32_t n_threads = 0;           // size of the model's own pool when `pool` is null (0: all CPUs)
  ThreadPool* pool = nullptr;      // a pool owned by the caller, shared with other work
  // Convert F32/F16/BF16 weight matrices to Q8_0 at load (llama-quantize's blocks; activations
  // then rounded to Q8_0 like any Q8_0 weight): about half of bf16's bytes per decoded token.
  bool convert_to_q8 = false;
  // Repack Q8_0 / Q4_0 matrices into matmul's interleaved layout (ops::pack_weight): the same
  // results, faster decode and prefill, the matrix's bytes once more in memory. Off: the
  // kernels read the files' row-major layout (for A/B benchmarks).
  bool pack_weights = true;
};

class Model {
 public:
  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  int32_t max_batch_tokens() const { return acts_.max_tokens; }
  ThreadPool& pool() { return *pool_; }
  // "llama (hf, f32): 5 layers, hidden 64, 8/4 heads × 8, ffn 172, vocab 512"
  std::string describe() const;
  // The memory-mapped weight files (for prefetching them with progress).
  const std::vector<std::shared_ptr<MappedFile>>& files() const { return files_; }

  // One step: writes every token's k/v into its cache slot, attends each token over its own
  // sequence's cache up to its position, and writes logits[n_out, vocab] f32 for
  // batch.output_rows. hooks (may be null) receive the active hook tensors as they are produced.
  // An invalid batch (ids, positions, slots, block tables, sizes) is an error before any work.
  // Not re-entrant: one forward at a time per Model.
  Status forward(const Batch& batch, KvCache& cache, const Hooks* hooks, float* logits);

  Status validate_batch(const Batch& batch, const KvCache& cache) const;

  // The model's output head — the final RMSNorm and lm_head, as forward applies them — on n
  // residual-stream rows x[n, n_embd], into logits[n, vocab]: the logit lens on any layer's
  // resid_post. Allocates its normed copy (a tool's call, not the serving path). pool: the threads
  // of its matmul (null: the model's own, which only the thread running forward may use).
  void output_head(const float* x, int64_t n, float* logits, ThreadPool* pool = nullptr) const;
  // Registers a weight variant served beside the base from the same weights: each edit is
  // resolved to the matrix it targets (shape, row order, the pinned base hash where checkable)
  // and kept as a delta (low_rank: A and scale·B in f32; columns / sparse: edited − dequantized
  // base in f32; rows / full: the edited values in their dtype). scale multiplies low_rank,
  // columns and sparse deltas. Returns the id (1, 2, ...) a BatchSeq::variant names. Not
  // thread-safe with forward: register before serving. Embedding / lm_head edits are refused.
  Result<int32_t> add_variant(const patch::Patch& patch, const std::string& name, float scale = 1.0f);
  // add_variant in two halves, for loading while serving: prepare resolves the patch and builds
  // its deltas (reads the weights only: it may run beside forward, on another thread); commit
  // makes it servable and returns its id (between forwards: the engine's thread).
  Result<std::shared_ptr<PreparedVariant>> prepare_variant(const patch::Patch& patch, const std::string& name,
                                                           float scale = 1.0f) const;
  int32_t commit_variant(PreparedVariant&& prepared);
  // Frees a variant's deltas (between forwards, with no sequence on it); its id stays unused.
  Status remove_variant(int32_t id);
  // Ids ever registered (1..n_variants(); an id removed since is inactive).
  int32_t n_variants() const { return static_cast<int32_t>(variants_.size()); }
  bool variant_active(int32_t id) const { return id >= 1 && id <= n_variants() && variants_[id - 1].active; }
  const std::vector<VariantInfo>& variants() const { return variants_; }

 private:
  // Hybrid models: checks state slots and per-sequence contiguity, and fills acts_.seq_first/count.
  Status prepare_recurrent(const Batch& batch, const KvCache& cache);
  // Groups the batch rows by variant for this step; null when every row is on the base.
  const VariantStep* prepare_variants(const Batch& batch);
  friend Result<std::unique_ptr<Model>> load_model(const std::string& path, const LoadOptions& options);
  Model(ModelConfig config, const LoadOptions& options);

  ModelConfig config_;
  ModelWeights weights_;
  std::string format_;                              // "hf" or "gguf"
  DType file_dtype_ = DType::kF32;                  // describe()'s matrix as the file stores it
  std::vector<std::shared_ptr<MappedFile>> files_;  // keep the weight mappings alive
  std::vector<std::vector<float>> f32_store_;       // f32 copies of norm weights / biases / rope factors
  std::vector<ops::OwnedWeight> owned_weights_;     // at load: Q4_1 / Q5_1 offsets, convert_to_q8 results
  std::unique_ptr<HugePages> packed_;               // matrices repacked at load (pack_weights)
  std::unique_ptr<ThreadPool> own_pool_;
  ThreadPool* pool_;
  Activations acts_;
  // Variants: deltas per (layer, projection), and the per-step scratch sized at registration.
  std::vector<VariantInfo> variants_;
  std::vector<std::vector<MatrixDelta>> deltas_;  // [n_layers · kProjCount]
  int64_t var_max_in_ = 0, var_max_rank_ = 0, var_max_out_ = 0;
  std::vector<float> var_xg_, var_tg_, var_yg_;
  std::vector<int32_t> var_rows_, var_offsets_, var_cursor_;
  VariantStep var_step_;
};

// Loads a Hugging Face model directory (config.json, model.safetensors or shards with
// model.safetensors.index.json, generation_config.json) or a GGUF file. Weight matrices are used
// in place in the mapped files; any missing or mis-shaped tensor, unsupported dtype or
// architecture, bad config key or truncated file is an error naming it.
Result<std::unique_ptr<Model>> load_model(const std::string& path, const LoadOptions& options = {});

}  // namespace gb
