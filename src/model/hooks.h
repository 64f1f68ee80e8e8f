// Hook points: the named tensors of the forward pass (VISION.md), the set of active (point, layer)
// pairs, and the observers that receive them. The active set is fixed before a step, so an
// inactive point costs the forward pass one bit test.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/batch.h"

namespace gb {

// Per-layer points first, then the global ones; the order is the bit number in a layer mask.
enum class HookPoint : uint8_t {
  kResidPre,   // residual stream entering layer l                    [n_tokens, n_embd]
  kAttnOut,    // attention output projection, before the residual add [n_tokens, n_embd]
  kResidMid,   // residual after the attention add                      [n_tokens, n_embd]
  kMlpAct,     // act(gate) · up, the input of down_proj                [n_tokens, n_ff]
  kMlpOut,     // down_proj output, before the residual add             [n_tokens, n_embd]
  kResidPost,  // residual leaving layer l (= resid_pre of l + 1)      [n_tokens, n_embd]
  kEmbed,      // token embeddings                                       [n_tokens, n_embd]
  kFinalNorm,  // final RMSNorm output, the lm_head input                [n_out, n_embd]
  kLogits,     // lm_head output                                         [n_out, vocab]
  kCount,
};
inline constexpr int kNumHookPoints = static_cast<int>(HookPoint::kCount);
inline constexpr uint32_t hook_bit(HookPoint p) { return 1u << static_cast<int>(p); }
inline constexpr bool is_layer_point(HookPoint p) { return p < HookPoint::kEmbed; }

std::string_view hook_point_name(HookPoint p);         // "resid_post", "embed", ...
std::optional<HookPoint> parse_hook_point(std::string_view name);

// What an observer sees: a read-only view of one hook tensor of the current step.
struct HookTensor {
  HookPoint point;
  int32_t layer;        // 0-based layer; -1 for embed, final_norm, logits
  const float* data;    // [n_rows, width] f32, valid only during the call
  int64_t n_rows;
  int64_t width;
  const int32_t* rows;  // [n_rows] batch token row of each tensor row (per-layer points: 0..n_tokens-1;
                        // final_norm / logits: batch.output_rows)
  const Batch* batch;   // seq_index / positions of those rows, to split them by sequence
};

// Receives hook tensors. Called on the forward pass's thread, in layer order; must not keep
// pointers past the call. (Interventions — per-sequence edits applied inside the batch — will be
// data tables applied by kernels at the same points, not observers.)
class Observer {
 public:
  virtual ~Observer() = default;
  virtual void observe(const HookTensor& t) = 0;
};

// The active hook set of a step: for each (point, layer) the observers to call.
class Hooks {
 public:
  explicit Hooks(int32_t n_layers);

  // Registers obs for a per-layer point at `layer` (-1: every layer) or for a global point (layer ignored).
  void watch(HookPoint p, int32_t layer, Observer* obs);
  void clear();

  // Bits (hook_bit) of the per-layer points active at layer l; of the global points.
  uint32_t layer_mask(int32_t l) const { return masks_[l]; }
  uint32_t global_mask() const { return masks_.back(); }
  bool empty() const;

  // Calls the observers registered for t.point at t.layer.
  void dispatch(const HookTensor& t) const;

  int32_t n_layers() const { return n_layers_; }

 private:
  size_t index(HookPoint p, int32_t layer) const;
  int32_t n_layers_;
  std::vector<uint32_t> masks_;                   // [n_layers + 1]; the last is the global points
  std::vector<std::vector<Observer*>> observers_;  // [(n_layers + 1) · kNumHookPoints]
};

}  // namespace gb
