#!/usr/bin/env bash
# Server benchmark on the random-weight Qwen3-0.6B-shaped model (q8_0 and bf16 GGUF): starts
# `glassbox serve` for each, runs bench/serve/bench_serve.mjs at concurrency 1, 4, 16 and 64, and
# appends the tables to bench/out/serve_bench.log. Run from the repository root after building.
# Usage: bench/serve/run_bench.sh [MODEL_DIR (default /work/benchmodels/qwen3-0.6b)] [TYPES (default "q8_0 bf16")]
set -euo pipefail
dir=${1:-/work/benchmodels/qwen3-0.6b}
types=${2:-q8_0 bf16}
[ -d "$dir/gguf" ] || ./build/glassbox-make-model --out "$dir"
mkdir -p bench/out
port=18391
for t in $types; do
  ./build/glassbox serve --model "$dir/gguf/model-$t.gguf" --port $port --allow-unauthenticated \
    --max-num-seqs 64 --max-num-batched-tokens 512 --max-model-len 4096 > bench/out/serve_$t.server.log 2>&1 &
  pid=$!
  until curl -sf "http://127.0.0.1:$port/ready" > /dev/null; do sleep 1; done
  { echo "== $t $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
    node bench/serve/bench_serve.mjs --url "http://127.0.0.1:$port" --concurrency 1,4,16,64
    echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"; } | tee -a bench/out/serve_bench.log
  kill $pid; wait $pid || true
done
