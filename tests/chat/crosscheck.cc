// Cross-check: renders every case in cases.json with our engine and with a second
// implementation, and requires byte-identical prompts (or both refusing). Exit 77 = skipped.
//   chat_crosscheck <tests/chat dir> node <node or ""> <tools/node/node_modules>
//       @huggingface/jinja, the implementation transformers.js uses (render_hf_jinja.mjs)
//   chat_crosscheck <tests/chat dir> jinja2 <python3 or "">
//       Python Jinja2 set up as transformers' apply_chat_template sets it (render_jinja2.py)
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>

#include "case_support.h"

namespace {

// Cases where the two implementations legitimately differ, with the reason.
struct KnownDifference {
  const char* case_name;
  const char* why;
};
// Applies to the @huggingface/jinja run only; Python Jinja2 must match every case.
constexpr KnownDifference kKnownDifferences[] = {
    // Qwen3.5 tests `args_value is sequence`; @huggingface/jinja 0.5.1 has no `sequence` test.
    {"qwen3.5-27b.tools.gen", "@huggingface/jinja lacks the 'sequence' test"},
    {"qwen3.5-27b.tools.nogen", "@huggingface/jinja lacks the 'sequence' test"},
};

const char* known_difference(const std::string& name) {
  for (const auto& k : kKnownDifferences) {
    if (name == k.case_name) return k.why;
  }
  return nullptr;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

}  // namespace

bool missing(const std::string& exe) { return exe.empty() || exe.find("NOTFOUND") != std::string::npos; }

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: chat_crosscheck <tests/chat dir> node <node> <node_modules> | jinja2 <python3>\n";
    return 2;
  }
  const std::string dir = argv[1];
  const std::string impl = argv[2];
  const std::string exe = argv[3];
  std::string cmd;
  std::string label;
  if (impl == "node") {
    const std::string modules = argc > 4 ? argv[4] : "";
    label = "@huggingface/jinja";
    if (missing(exe)) {
      std::cout << "SKIPPED: node not found; install it (scripts/setup.sh) to cross-check with @huggingface/jinja\n";
      return 77;
    }
    if (!std::filesystem::exists(modules + "/@huggingface/jinja/package.json")) {
      std::cout << "SKIPPED: " << modules << "/@huggingface/jinja missing; run (cd tools/node && npm install)\n";
      return 77;
    }
    cmd = "'" + exe + "' '" + dir + "/render_hf_jinja.mjs' '" + dir + "' '" + modules + "'";
  } else if (impl == "jinja2") {
    label = "Python Jinja2";
    if (missing(exe) || std::system(("'" + exe + "' -c 'import jinja2' 2>/dev/null").c_str()) != 0) {
      std::cout << "SKIPPED: python3 with jinja2 not found (Debian: python3-jinja2)\n";
      return 77;
    }
    cmd = "'" + exe + "' '" + dir + "/render_jinja2.py' '" + dir + "'";
  } else {
    std::cerr << "unknown implementation " << impl << "\n";
    return 2;
  }
  const bool allow_known = impl == "node";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  if (!pipe) {
    std::cerr << "cannot run " << cmd << "\n";
    return 1;
  }
  std::string text;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe.get())) > 0) text.append(buf, n);
  nlohmann::json theirs;
  try {
    theirs = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    std::cerr << "bad output from " << cmd << ": " << e.what() << "\n" << text.substr(0, 2000) << "\n";
    return 1;
  }
  int compared = 0, agreed = 0, failed = 0, both_error = 0, known = 0;
  for (const auto& c : gb::chat::testing::load_cases(dir)) {
    std::string ours;
    const bool ok = gb::chat::testing::render_case(dir, c.spec, ours);
    const auto& t = theirs[c.name];
    ++compared;
    if (!ok || !t.value("ok", false)) {
      if (!ok && !t.value("ok", false)) {
        ++both_error;  // both refuse the conversation (e.g. raise_exception)
        continue;
      }
      const char* why = allow_known ? known_difference(c.name) : nullptr;
      std::cout << (why ? "KNOWN " : "MISMATCH ") << c.name << ": ours " << (ok ? "rendered" : "failed: " + ours)
                << "; " << label << " " << (t.value("ok", false) ? "rendered" : "failed: " + t.value("error", ""))
                << (why ? std::string(" (") + why + ")" : "") << "\n";
      why ? ++known : ++failed;
      continue;
    }
    const std::string other = t["output"].get<std::string>();
    if (other == ours) {
      ++agreed;
      continue;
    }
    if (const char* why = allow_known ? known_difference(c.name) : nullptr) {
      std::cout << "KNOWN " << c.name << ": " << why << "\n";
      ++known;
      continue;
    }
    ++failed;
    size_t i = 0;
    while (i < ours.size() && i < other.size() && ours[i] == other[i]) ++i;
    std::cout << "MISMATCH " << c.name << " at byte " << i
              << "\n  ours:   " << escape(ours.substr(i > 40 ? i - 40 : 0, 120))
              << "\n  theirs: " << escape(other.substr(i > 40 ? i - 40 : 0, 120)) << "\n";
  }
  std::cout << "cross-check with " << label << ": " << compared << " cases, " << agreed << " identical, " << both_error
            << " refused by both, " << known << " known differences, " << failed << " mismatches\n";
  return failed == 0 ? 0 : 1;
}
