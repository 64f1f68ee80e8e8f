#!/usr/bin/env bash
# Tokenizer encode benchmark, Glassbox vs Hugging Face tokenizers (npm), interleaved rounds on
# the same corpus and machine. Run from the repository root after building (build/) and
# `(cd tools/node && npm install)`. Usage: bench/tokenizer/run_bench.sh [ROUNDS] [RUNS_PER_ROUND]
set -euo pipefail
rounds=${1:-3}
runs=${2:-3}
shared=${GLASSBOX_SHARED:-$(pwd)/../shared}
hf=$shared/testdata/tokenizers/hf
mkdir -p bench/out
[ -f bench/out/corpus.txt ] || python3 bench/tokenizer/make_corpus.py bench/out/corpus.txt --shared "$shared"
toks=("$hf/llama3-bpe/tokenizer.json" "$hf/qwen2-bpe/tokenizer.json")
args=()
for t in "${toks[@]}"; do args+=(-t "$t"); done
: > bench/out/tokenizer_bench.log
for r in $(seq 1 "$rounds"); do
  echo "== round $r: glassbox" | tee -a bench/out/tokenizer_bench.log
  ./build/bench/bench_tokenizer_encode "${args[@]}" --runs "$runs" | tee -a bench/out/tokenizer_bench.log
  echo "== round $r: hf tokenizers" | tee -a bench/out/tokenizer_bench.log
  # One worker thread for Rust (rayon) so both sides run single-threaded.
  RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false NODE_PATH=tools/node/node_modules \
    node bench/tokenizer/hf_tokenizers_bench.js --runs "$runs" "${toks[@]}" | tee -a bench/out/tokenizer_bench.log
done
echo "== per-run figures in bench/out/tokenizer_bench.log; medians over all timed runs:"
python3 - <<'PY'
import re, statistics, collections
wall, cpu, impl = collections.defaultdict(list), collections.defaultdict(list), None
for line in open("bench/out/tokenizer_bench.log"):
    if line.startswith("== round"):
        impl = "glassbox" if "glassbox" in line else "hf-tokenizers"
    m = re.match(r"run (\d+) (\S+): wall [\d.]+ s ([\d.]+) MB/s, cpu [\d.]+ s ([\d.]+) MB/s", line)
    if m and m.group(1) != "0":
        key = (impl, m.group(2).split("/")[-2])
        wall[key].append(float(m.group(3)))
        cpu[key].append(float(m.group(4)))
for key in sorted(wall):
    print(f"{key[0]:14s} {key[1]:11s} wall median {statistics.median(wall[key]):7.2f} MB/s  "
          f"cpu median {statistics.median(cpu[key]):7.2f} MB/s  ({len(wall[key])} runs)")
PY
