// libFuzzer target: a GGUF file's tokenizer.ggml.* vocabulary — the GGUF reader, the vocabulary
// builder (llama / gpt2 models, scores, merges, token types, special ids), then encode and decode
// of a fixed text and of ids taken from the input. Seeds: the fixture GGUFs cut to their metadata.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "formats/gguf.h"
#include "fuzz_file.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static gb::fuzz::MemFile file;
  auto gguf = gb::parse_gguf(file.map(data, size));
  if (!gguf.is_ok()) return 0;
  auto tok = gb::Tokenizer::from_gguf(*gguf);
  if (!tok.is_ok()) return 0;
  const gb::Tokenizer& t = **tok;
  for (bool add : {false, true}) {
    const std::vector<int32_t> ids = t.encode("Hello world, 123 <s> héllo 日本\n\n  x", add);
    (void)t.decode(ids, false);
    (void)t.decode(ids, true);
  }
  // Ids from the tail of the input, out-of-range ones included, must decode without crashing.
  std::vector<int32_t> raw;
  for (size_t i = size >= 128 ? size - 128 : 0; i + 1 < size; i += 2) {
    raw.push_back(static_cast<int32_t>(data[i] | (static_cast<int8_t>(data[i + 1]) << 8)));
  }
  (void)t.decode(raw, false);
  gb::StreamDecoder stream(t, true);
  for (int32_t id : raw) (void)stream.push(id);
  (void)stream.flush();
  return 0;
}
