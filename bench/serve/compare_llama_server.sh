#!/usr/bin/env bash
# Glassbox beside llama.cpp's llama-server on the same GGUF files, same threads and batch limits:
# for each repetition and weight type it starts one server, runs bench_serve.mjs at concurrency
# 1, 4, 16 and 64, stops it, then does the same with the other (alternating which goes first),
# appends everything to bench/out/serve_compare.log and prints the log's summary table
# (bench/serve/summarize_compare.py). Run from the repository root.
# Usage: bench/serve/compare_llama_server.sh LLAMA_SERVER [MODEL_DIR] [TYPES] [REPS]
#   LLAMA_SERVER  path to llama-server (build it outside the repo)
#   MODEL_DIR     default /work/benchmodels/qwen3-0.6b (glassbox-make-model's output)
#   TYPES         default "q8_0 q4_0" (add q4_k_m after glassbox-make-model --types ...,q4_k_m);
#                 REPS default 2
set -euo pipefail
llama=${1:?usage: compare_llama_server.sh LLAMA_SERVER [MODEL_DIR] [TYPES] [REPS]}
dir=${2:-/work/benchmodels/qwen3-0.6b}
types=${3:-q8_0 q4_0}
reps=${4:-2}
threads=$(nproc)
port=18392
mkdir -p bench/out
log=bench/out/serve_compare.log

run_one() {  # $1 = glassbox | llama, $2 = type
  local model="$dir/gguf/model-$2.gguf" pid probe=/health  # llama-server: 503 until loaded
  if [ "$1" = glassbox ]; then
    probe=/ready
    ./build/glassbox serve --model "$model" --port $port --allow-unauthenticated --threads "$threads" \
      --max-num-seqs 64 --max-num-batched-tokens 512 --max-model-len 4096 > bench/out/cmp_server.log 2>&1 &
  else
    "$llama" -m "$model" --port $port -t "$threads" -np 64 -c 16384 -b 512 -ub 512 --no-webui \
      > bench/out/cmp_server.log 2>&1 &
  fi
  pid=$!
  trap "kill $pid 2> /dev/null || true" EXIT
  until curl -sf "http://127.0.0.1:$port$probe" > /dev/null; do
    kill -0 $pid 2> /dev/null || { cat bench/out/cmp_server.log; return 1; }
    sleep 1
  done
  { echo "== $1 $2 $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
    node bench/serve/bench_serve.mjs --url "http://127.0.0.1:$port" --concurrency 1,4,16,64
  } | tee -a "$log"
  kill $pid; wait $pid || true
  trap - EXIT
}

for t in $types; do
  [ -f "$dir/gguf/model-$t.gguf" ] || { echo "missing $dir/gguf/model-$t.gguf (glassbox-make-model --out $dir --types ...)" >&2; exit 2; }
done
for r in $(seq 1 "$reps"); do
  for t in $types; do
    if [ $((r % 2)) -eq 1 ]; then run_one glassbox "$t"; run_one llama "$t"; else run_one llama "$t"; run_one glassbox "$t"; fi
  done
done
python3 bench/serve/summarize_compare.py "$log"
