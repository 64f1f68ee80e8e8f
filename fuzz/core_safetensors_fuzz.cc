// libFuzzer target: the safetensors reader (header length, JSON header, dtypes, shapes against
// byte ranges, ranges inside the file, overlaps). Input: the file's bytes. Seeds: the fixtures'
// model.safetensors and small files written by write_safetensors.
#include <cstddef>
#include <cstdint>

#include "formats/safetensors.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static gb::fuzz::MemFile file;
  auto st = gb::parse_safetensors(file.map(data, size));
  if (!st.is_ok()) return 0;
  // Every accepted tensor's bytes lie inside the mapping: touch the first and the last.
  volatile uint8_t sink = 0;
  for (const gb::TensorView& t : st->tensors) {
    if (t.nbytes > 0) sink = sink ^ t.data[0] ^ t.data[t.nbytes - 1];
    (void)t.shape_str();
  }
  return 0;
}
