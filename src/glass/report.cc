// Report entries built from resolved specs and from rows.
#include "glass/report.h"

#include <cmath>
#include <limits>

namespace gb {

AppliedIntervention applied_intervention(const Intervention& iv) {
  AppliedIntervention a;
  a.op = iv.op;
  a.point = iv.point;
  a.layer_first = iv.layer_first;
  a.layer_last = iv.layer_last;
  a.dims = iv.dims;
  a.strength = iv.strength;
  a.threshold = iv.threshold;
  a.vector_size = static_cast<int64_t>(iv.vector.size());
  double n2 = 0;
  for (float v : iv.vector) n2 += static_cast<double>(v) * v;
  a.vector_norm = static_cast<float>(std::sqrt(n2));
  a.tokens = iv.tokens;
  a.label = iv.label;
  return a;
}

MassiveEvent massive_event(HookPoint p, int32_t layer, int32_t position, const float* x, int32_t max_dim, float max_abs,
                           float median_abs, MassiveMedian median, const MassiveTest& test) {
  return {p,
          layer,
          position,
          max_dim,
          x[max_dim],
          median_abs,
          median,
          median_abs > 0 ? max_abs / median_abs : std::numeric_limits<float>::infinity(),
          test.abs_test,
          test.ratio_test};
}

}  // namespace gb
