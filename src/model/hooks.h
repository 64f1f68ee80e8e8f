// Hook points: the named tensors of the forward pass (VISION.md), the set of active (point, layer)
// pairs, the observers that receive them, and the interface of a step's table of in-place edits
// (StepTable; the glass box implements it, the model depends on nothing of the glass box). The
// active set is fixed before a step, so an inactive point costs the forward pass one bit test.
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
  kAttnIn,     // attn_norm(resid_pre): the token mixer's input (q/k/v) [n_tokens, n_embd]
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

std::string_view hook_point_name(HookPoint p);  // "resid_post", "embed", ...
std::optional<HookPoint> parse_hook_point(std::string_view name);
// The names for messages: "resid_pre, attn_in, ..., resid_post" (per_layer) or every point.
std::string hook_point_list(bool per_layer);
// "layers.{l}.{point}" for per-layer points, "{point}" for embed / final_norm / logits: the keys
// of `glassbox dump` files and of the reference fixtures.
std::string hook_key(HookPoint p, int32_t layer);

// What an observer sees: a read-only view of one hook tensor of the current step.
struct HookTensor {
  HookPoint point;
  int32_t layer;      // 0-based layer; -1 for embed, final_norm, logits
  const float* data;  // [n_rows, width] f32, valid only during the call
  int64_t n_rows;
  int64_t width;
  const int32_t* rows;  // [n_rows] batch token row of each tensor row (per-layer points: 0..n_tokens-1;
                        // final_norm / logits: batch.output_rows)
  const Batch* batch;   // seq_index / positions of those rows, to split them by sequence
};

// One step's table of in-place edits and per-row work at the hook points, as the forward
// pass sees it: which (point, layer) pairs it touches and a call that applies it to a hook tensor.
// The glass box's GlassStep (src/glass) implements it; the model knows only this interface.
class StepTable {
 public:
  virtual ~StepTable() = default;
  virtual int32_t n_layers() const = 0;
  // Bits (hook_bit) of the per-layer points the table touches at layer l; of the global points.
  virtual uint32_t layer_mask(int32_t layer) const = 0;
  virtual uint32_t global_mask() const = 0;
  // One past the highest batch row the table touches (the forward checks it against the batch).
  virtual int32_t rows_needed() const = 0;
  // Applies the table's work for (p, layer) to data[n_rows, width] in place (rows = batch rows
  // 0..n_rows-1). Called on the forward pass's thread, in layer order.
  virtual void apply(HookPoint p, int32_t layer, float* data, int64_t n_rows, int64_t width,
                     const Batch& batch) const = 0;
  // Reads a global point (embed, final_norm, logits): data[n_rows, width], whose row i is batch
  // row row_ids[i] (every row for embed, the output rows for final_norm and logits).
  virtual void apply_global(HookPoint p, const float* data, int64_t n_rows, int64_t width,
                            const int32_t* row_ids) const = 0;
  // Attention sinks (not a hook point: a by-product of attention's softmax). At full-attention
  // layer l: null when no row wants the statistic, else [rows_needed()] the number of first key
  // positions (0: none) whose softmax mass each batch row's query heads should report; rows at or
  // past rows_needed() want none. The attention writes the masses, then calls apply_sinks with
  // mass[n_rows, n_heads] (row r, head h: the weight on positions < sink_rows(l)[r]; rows with 0
  // are unset). Called on the forward pass's thread, in layer order.
  virtual const uint8_t* sink_rows(int32_t layer) const = 0;
  virtual void apply_sinks(int32_t layer, const float* mass, int64_t n_rows, int64_t n_heads,
                           const Batch& batch) const = 0;
};

// Receives hook tensors. Called on the forward pass's thread, in layer order; must not keep
// pointers past the call. Observers see the values after the step table's edits (the glass box's
// interventions), which are data applied at the same points, not observers.
class Observer {
 public:
  virtual ~Observer() = default;
  virtual void observe(const HookTensor& t) = 0;
};

// The active hook set of a step: for each (point, layer) the observers to call, and optionally the
// step's table (the glass box: interventions, per-request observation, the monitor).
class Hooks {
 public:
  explicit Hooks(int32_t n_layers);

  // Registers obs for a per-layer point at `layer` (-1: every layer) or for a global point (layer ignored).
  void watch(HookPoint p, int32_t layer, Observer* obs);
  // Clears the observers (and detaches the glass table).
  void clear();
  // Attaches this step's table (null: none). Call once the table is complete (GlassStep::finalize),
  // before the forward pass; the layer masks become the observers' bits | the table's bits.
  void set_glass(const StepTable* table);
  const StepTable* glass() const { return glass_; }

  // Bits (hook_bit) of the per-layer points active at layer l; of the global points.
  uint32_t layer_mask(int32_t l) const { return masks_[l]; }
  uint32_t global_mask() const { return masks_.back(); }
  bool empty() const;

  // A hook point's tensor was produced: applies the step table for (p, layer) to data in place
  // (per-layer points; data rows are the batch rows 0..n_rows-1), then calls the observers.
  // Layer loops call it through hook_point().
  void emit(HookPoint p, int32_t layer, float* data, int64_t n_rows, int64_t width, const int32_t* row_ids,
            const Batch& batch) const;

  int32_t n_layers() const { return n_layers_; }

 private:
  size_t index(HookPoint p, int32_t layer) const;
  int32_t n_layers_;
  void update_masks();
  std::vector<uint32_t> observer_masks_;  // [n_layers + 1] bits with observers; the last is the global points
  std::vector<uint32_t> masks_;           // [n_layers + 1] observer_masks_ | the step table's bits
  const StepTable* glass_ = nullptr;
  std::vector<std::vector<Observer*>> observers_;  // [(n_layers + 1) · kNumHookPoints]
};

// The one call a layer loop makes where a hook tensor is produced (every architecture's loop, the
// same way): costs one bit test when (p, layer) is inactive. mask: hooks->layer_mask(layer) (or
// global_mask()), 0 when hooks is null.
inline void hook_point(const Hooks* hooks, uint32_t mask, HookPoint p, int32_t layer, float* data, int64_t n_rows,
                       int64_t width, const int32_t* row_ids, const Batch& batch) {
  if (mask & hook_bit(p)) hooks->emit(p, layer, data, n_rows, width, row_ids, batch);
}

}  // namespace gb
