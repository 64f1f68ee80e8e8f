// libFuzzer target: tokenizer.json parsing + encode + decode + streaming decode on untrusted
// bytes. Input: tokenizer.json bytes, a NUL byte, then the text to encode.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string_view json = in.substr(0, nul);
  const std::string_view text =
      nul == std::string_view::npos ? std::string_view("Hello world, 123 <s> héllo 日本") : in.substr(nul + 1);
  auto tok = gb::Tokenizer::from_hf_json(json);
  if (!tok.is_ok()) return 0;
  const gb::Tokenizer& t = **tok;
  for (bool add : {false, true}) {
    const std::vector<int32_t> ids = t.encode(text, add);
    (void)t.decode(ids, false);
    (void)t.decode(ids, true);
    gb::StreamDecoder stream(t, false);
    for (int32_t id : ids) (void)stream.push(id);
    (void)stream.flush();
  }
  // Arbitrary ids, including out-of-range ones, must decode without crashing.
  std::vector<int32_t> raw;
  for (size_t i = 0; i + 1 < text.size() && raw.size() < 64; i += 2) {
    raw.push_back(static_cast<int32_t>(static_cast<uint8_t>(text[i]) | (static_cast<int8_t>(text[i + 1]) << 8)));
  }
  (void)t.decode(raw, false);
  gb::StreamDecoder stream(t, true);
  for (int32_t id : raw) (void)stream.push(id);
  (void)stream.flush();
  for (int32_t id : raw) (void)t.token_to_piece(id);
  return 0;
}
