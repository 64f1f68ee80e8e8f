// Hook point names and the active hook set.
#include "model/hooks.h"

namespace gb {

namespace {
constexpr std::string_view kNames[kNumHookPoints] = {
    "resid_pre", "attn_in",    "attn_out", "resid_mid",  "mlp_act",
    "mlp_out",   "resid_post", "embed",    "final_norm", "logits",
};
}  // namespace

std::string_view hook_point_name(HookPoint p) {
  const int i = static_cast<int>(p);
  return i < kNumHookPoints ? kNames[i] : "?";
}

std::optional<HookPoint> parse_hook_point(std::string_view name) {
  for (int i = 0; i < kNumHookPoints; ++i) {
    if (kNames[i] == name) return static_cast<HookPoint>(i);
  }
  return std::nullopt;
}

std::string hook_point_list(bool per_layer) {
  std::string s;
  for (int i = 0; i < kNumHookPoints; ++i) {
    const auto p = static_cast<HookPoint>(i);
    if (per_layer && !is_layer_point(p)) break;
    if (!s.empty()) s += ", ";
    s += kNames[i];
  }
  return s;
}

std::string hook_key(HookPoint p, int32_t layer) {
  const std::string name(hook_point_name(p));
  return is_layer_point(p) ? "layers." + std::to_string(layer) + "." + name : name;
}

Hooks::Hooks(int32_t n_layers)
    : n_layers_(n_layers),
      observer_masks_(n_layers + 1, 0),
      masks_(n_layers + 1, 0),
      observers_(static_cast<size_t>(n_layers + 1) * kNumHookPoints) {}

size_t Hooks::index(HookPoint p, int32_t layer) const {
  const int32_t slot = is_layer_point(p) ? layer : n_layers_;
  return static_cast<size_t>(slot) * kNumHookPoints + static_cast<size_t>(p);
}

void Hooks::watch(HookPoint p, int32_t layer, Observer* obs) {
  if (is_layer_point(p) && layer < 0) {
    for (int32_t l = 0; l < n_layers_; ++l) watch(p, l, obs);
    return;
  }
  if (is_layer_point(p) && layer >= n_layers_) return;
  observers_[index(p, layer)].push_back(obs);
  observer_masks_[is_layer_point(p) ? layer : n_layers_] |= hook_bit(p);
  update_masks();
}

void Hooks::clear() {
  for (auto& m : observer_masks_) m = 0;
  for (auto& o : observers_) o.clear();
  glass_ = nullptr;
  update_masks();
}

void Hooks::set_glass(const StepTable* table) {
  glass_ = table;
  update_masks();
}

void Hooks::update_masks() {
  for (int32_t l = 0; l <= n_layers_; ++l) {
    uint32_t g = 0;
    if (glass_ != nullptr)
      g = l < n_layers_ ? (l < glass_->n_layers() ? glass_->layer_mask(l) : 0) : glass_->global_mask();
    masks_[l] = observer_masks_[l] | g;
  }
}

void Hooks::emit(HookPoint p, int32_t layer, float* data, int64_t n_rows, int64_t width, const int32_t* row_ids,
                 const Batch& batch) const {
  if (glass_ != nullptr) {
    if (is_layer_point(p)) glass_->apply(p, layer, data, n_rows, width, batch);
    else glass_->apply_global(p, data, n_rows, width, row_ids);
  }
  const HookTensor t{p, layer, data, n_rows, width, row_ids, &batch};
  for (Observer* o : observers_[index(p, layer)]) o->observe(t);
}

bool Hooks::empty() const {
  for (uint32_t m : masks_) {
    if (m != 0) return false;
  }
  return true;
}

}  // namespace gb
