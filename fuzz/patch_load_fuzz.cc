// libFuzzer target: loading weight patches (src/patch). The first input byte picks what the rest
// replaces in an otherwise valid patch built at start-up:
//   0  manifest.json of an artifact whose edit files are valid ("@SHA0@", "@SHA1@": their hashes)
//   1  an artifact's edit file (the manifest's SHA-256 is updated to match, so parsing is reached)
//   2  adapter_config.json of a PEFT adapter with valid weights
//   3  adapter_model.safetensors of a PEFT adapter with a valid config
//   4  a LoRA GGUF file
// A patch that loads has each edit applied to a zeroed tensor of its shape (when small).
// The patch lives in a temporary directory on a tmpfs (GB_FUZZ_TMPDIR, else /dev/shm when there
// is one, else /tmp): on a disk file system, rewriting a file per input cost a block-device
// flush per input (ext4 writes a truncated-and-rewritten file back on close), ~70% of the time.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "formats/safetensors.h"
#include "patch/patch.h"

namespace {

namespace fs = std::filesystem;

void spit(const std::string& path, const uint8_t* data, size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(n));
}
void spit(const std::string& path, const std::string& s) {
  spit(path, reinterpret_cast<const uint8_t*>(s.data()), s.size());
}
std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string temp_base() {
  if (const char* e = std::getenv("GB_FUZZ_TMPDIR"); e != nullptr && *e != '\0') return e;
  std::error_code ec;
  return fs::is_directory("/dev/shm", ec) ? "/dev/shm" : "/tmp";
}

struct Setup {
  std::string root, artifact, peft;
  nlohmann::json manifest;
  // The valid files, as written: put back after each input replaced one.
  std::string manifest_text, edit0, adapter_config, adapter_model;
  Setup() {
    std::string tmpl = temp_base() + "/gb-patch-fuzz.XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) std::abort();
    root = tmpl;
    artifact = root + "/artifact";
    peft = root + "/peft";
    fs::create_directories(artifact);
    fs::create_directories(peft);
    std::vector<int64_t> idx = {1, 3};
    std::vector<float> cols(4 * 2, 0.5f), a(2 * 6, 0.25f), b(4 * 2, -1.0f);
    if (!gb::write_safetensors(artifact + "/edit-0000.safetensors", {{"indices", gb::DType::kI64, {2}, idx.data()},
                                                                     {"values", gb::DType::kF32, {4, 2}, cols.data()}})
             .is_ok() ||
        !gb::write_safetensors(artifact + "/edit-0001.safetensors", {{"lora_A", gb::DType::kF32, {2, 6}, a.data()},
                                                                     {"lora_B", gb::DType::kF32, {4, 2}, b.data()}})
             .is_ok() ||
        !gb::write_safetensors(
             peft + "/adapter_model.safetensors",
             {{"base_model.model.model.layers.0.mlp.down_proj.lora_A.weight", gb::DType::kF32, {2, 6}, a.data()},
              {"base_model.model.model.layers.0.mlp.down_proj.lora_B.weight", gb::DType::kF32, {4, 2}, b.data()}})
             .is_ok()) {
      std::abort();
    }
    const std::string zero(64, '0');
    auto sha = [&](const std::string& f) {
      const std::string s = slurp(artifact + "/" + f);
      return gb::patch::sha256_hex(s.data(), s.size());
    };
    manifest = {{"format", "glassbox-patch"},
                {"format_version", 1},
                {"name", "fuzz"},
                {"version", "1"},
                {"base_model", {{"name", "x"}, {"tensors", {{"a.weight", zero}, {"b.weight", zero}}}}},
                {"edits",
                 {{{"tensor", "a.weight"},
                   {"kind", "columns"},
                   {"file", "edit-0000.safetensors"},
                   {"sha256", sha("edit-0000.safetensors")},
                   {"dtype", "f32"},
                   {"shape", {4, 6}}},
                  {{"tensor", "b.weight"},
                   {"kind", "low_rank"},
                   {"file", "edit-0001.safetensors"},
                   {"sha256", sha("edit-0001.safetensors")},
                   {"dtype", "f32"},
                   {"shape", {4, 6}},
                   {"rank", 2},
                   {"scale", 2.0}}}}};
    spit(artifact + "/manifest.json", manifest.dump());
    spit(peft + "/adapter_config.json", R"({"peft_type": "LORA", "r": 2, "lora_alpha": 4})");
    manifest_text = slurp(artifact + "/manifest.json");
    edit0 = slurp(artifact + "/edit-0000.safetensors");
    adapter_config = slurp(peft + "/adapter_config.json");
    adapter_model = slurp(peft + "/adapter_model.safetensors");
  }
  ~Setup() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
};

void exercise(const gb::Result<gb::patch::Patch>& p) {
  if (!p.is_ok()) return;
  for (const auto& e : p->edits) {
    if (e.numel() > (1 << 16) || e.dtype != gb::DType::kF32) continue;
    std::vector<uint8_t> buf(e.numel() * 4, 0);
    (void)gb::patch::apply_edit(e, buf.data(), buf.size());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Setup s;
  if (size < 1) return 0;
  const uint8_t mode = data[0] % 5;
  ++data;
  --size;
  switch (mode) {
    case 0: {
      // "@SHA0@" / "@SHA1@" stand for the edit files' real hashes, so mutated manifests still
      // reach the edit files.
      std::string text(reinterpret_cast<const char*>(data), size);
      for (int i = 0; i < 2; ++i) {
        const std::string tag = "@SHA" + std::to_string(i) + "@";
        const std::string sha = s.manifest["edits"][i]["sha256"];
        for (size_t at; (at = text.find(tag)) != std::string::npos;) text.replace(at, tag.size(), sha);
      }
      spit(s.artifact + "/manifest.json", text);
      exercise(gb::patch::load_patch(s.artifact));
      spit(s.artifact + "/manifest.json", s.manifest_text);
      break;
    }
    case 1: {
      const std::string file = s.artifact + "/edit-0000.safetensors";
      spit(file, data, size);
      nlohmann::json m = s.manifest;
      m["edits"][0]["sha256"] = gb::patch::sha256_hex(data, size);
      spit(s.artifact + "/manifest.json", m.dump());
      exercise(gb::patch::load_patch(s.artifact));
      spit(file, s.edit0);
      spit(s.artifact + "/manifest.json", s.manifest_text);
      break;
    }
    case 2: {
      const std::string file = s.peft + "/adapter_config.json";
      spit(file, data, size);
      exercise(gb::patch::load_patch(s.peft));
      spit(file, s.adapter_config);
      break;
    }
    case 3: {
      const std::string file = s.peft + "/adapter_model.safetensors";
      spit(file, data, size);
      exercise(gb::patch::load_patch(s.peft));
      spit(file, s.adapter_model);
      break;
    }
    default: {
      const std::string file = s.root + "/lora.gguf";
      spit(file, data, size);
      exercise(gb::patch::load_patch(file));
      break;
    }
  }
  return 0;
}
