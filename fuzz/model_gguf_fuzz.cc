// libFuzzer target: a GGUF model file through the loader's whole GGUF path — the reader (header,
// metadata, tensor infos), the config parse from metadata, rope_freqs, and binding every weight
// to the config's shapes. Input: the file's bytes. Seeds: the fixture GGUFs.
#include <cstddef>
#include <cstdint>

#include "fuzz_file.h"
#include "model/model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static gb::fuzz::MemFile file;
  static gb::ThreadPool pool(1);
  gb::LoadOptions options;
  options.pool = &pool;
  options.max_batch_tokens = 4;
  auto model = gb::load_model(file.write(data, size), options);
  if (model.is_ok()) (void)(*model)->describe();
  return 0;
}
