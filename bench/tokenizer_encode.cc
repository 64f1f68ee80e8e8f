// Encode throughput (MB/s, single thread) on the benchmark corpus (bench/tokenizer/make_corpus.py)
// for one or more tokenizers, runs interleaved; prints per-run figures, the median, and a
// checksum of the ids so the result can be compared with the HF tokenizers benchmark
// (bench/tokenizer/hf_tokenizers_bench.js).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "tokenizer/tokenizer.h"

namespace {

// CPU time of the calling thread: on a shared, overloaded machine wall time mostly measures
// the other tenants, CPU time measures the tokenizer.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

// Documents are separated by "\n\x1e\n" (see make_corpus.py).
std::vector<std::string_view> split_docs(const std::string& corpus) {
  std::vector<std::string_view> docs;
  const std::string_view sep = "\n\x1e\n";
  size_t pos = 0;
  while (pos <= corpus.size()) {
    const size_t next = corpus.find(sep, pos);
    const size_t end = next == std::string::npos ? corpus.size() : next;
    docs.push_back(std::string_view(corpus).substr(pos, end - pos));
    if (next == std::string::npos) break;
    pos = next + sep.size();
  }
  return docs;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tokenizer encode throughput"};
  std::vector<std::string> tokenizers;
  std::string corpus_path = "bench/out/corpus.txt";
  int runs = 5;
  bool cold = false;
  app.add_option("--tokenizer,-t", tokenizers, "tokenizer paths (repeatable)")->required();
  app.add_option("--corpus", corpus_path, "corpus file from bench/tokenizer/make_corpus.py");
  app.add_option("--runs", runs, "timed runs per tokenizer (interleaved)");
  app.add_flag("--cold", cold, "start each run with an empty word cache (the tokenizer reloaded)");
  CLI11_PARSE(app, argc, argv);

  auto corpus = gb::read_file(corpus_path);
  if (!corpus.is_ok()) {
    std::fprintf(stderr, "%s\n", corpus.message().c_str());
    return 1;
  }
  const auto docs = split_docs(*corpus);
  size_t bytes = 0;
  for (auto d : docs) bytes += d.size();
  std::vector<std::unique_ptr<gb::Tokenizer>> toks;
  for (const auto& p : tokenizers) {
    auto t = gb::Tokenizer::load(p);
    if (!t.is_ok()) {
      std::fprintf(stderr, "%s\n", t.message().c_str());
      return 1;
    }
    toks.push_back(std::move(*t));
  }
  std::printf("corpus: %zu bytes, %zu documents\n", bytes, docs.size());
  std::vector<std::vector<double>> mbps(toks.size()), cpu_mbps(toks.size());
  std::vector<uint64_t> checksum(toks.size()), n_tokens(toks.size());
  for (int r = 0; r < runs + 1; ++r) {  // run 0 warms caches and is not counted
    for (size_t k = 0; k < toks.size(); ++k) {
      uint64_t sum = 0, n = 0;
      double secs = 0, cpu = 0;
      auto body = [&] {
        const auto t0 = std::chrono::steady_clock::now();
        const double c0 = thread_cpu_seconds();
        for (auto d : docs) {
          const auto ids = toks[k]->encode(d, false);
          n += ids.size();
          for (int32_t id : ids) sum = sum * 1000003u + static_cast<uint32_t>(id);
        }
        cpu = thread_cpu_seconds() - c0;
        secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      };
      if (cold) {
        auto t = gb::Tokenizer::load(tokenizers[k]);
        if (!t.is_ok()) return 1;
        toks[k] = std::move(*t);
      }
      body();
      checksum[k] = sum;
      n_tokens[k] = n;
      const double v = bytes / 1e6 / secs, vc = bytes / 1e6 / cpu;
      if (r > 0) {
        mbps[k].push_back(v);
        cpu_mbps[k].push_back(vc);
      }
      std::printf("run %d %s: wall %.3f s %.2f MB/s, cpu %.3f s %.2f MB/s, %llu tokens\n", r, tokenizers[k].c_str(),
                  secs, v, cpu, vc, static_cast<unsigned long long>(n));
      std::fflush(stdout);
    }
  }
  for (size_t k = 0; k < toks.size(); ++k) {
    auto v = mbps[k], c = cpu_mbps[k];
    std::sort(v.begin(), v.end());
    std::sort(c.begin(), c.end());
    std::printf(
        "RESULT %s wall median %.2f MB/s (min %.2f, max %.2f) cpu median %.2f MB/s (min %.2f, max %.2f) "
        "tokens %llu checksum %016llx\n",
        tokenizers[k].c_str(), v[v.size() / 2], v.front(), v.back(), c[c.size() / 2], c.front(), c.back(),
        static_cast<unsigned long long>(n_tokens[k]), static_cast<unsigned long long>(checksum[k]));
  }
  return 0;
}
