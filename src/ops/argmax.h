// argmax over a row of logits: the greedy choice, lowest index on ties (as llama2.c, llama.cpp).
#pragma once

#include <cstdint>
#include <span>

namespace gb::ops {

inline int32_t argmax(std::span<const float> v) {
  int32_t best = 0;
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i] > v[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

}  // namespace gb::ops
