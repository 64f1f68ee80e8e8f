#!/usr/bin/env python3
"""Prefill and decode tokens/s of Glassbox beside llama.cpp on the same GGUF files, interleaved.

For every weight type and repetition it runs `glassbox bench` and then `llama-bench` on the same
file with the same threads (one process per measurement, so neither warms the other's caches),
and reports per type and test the median and [min, max] over the repetitions, the ratio of the
medians, and decode as a share of the bandwidth limit (bandwidth / weight bytes read per token,
the figure `glassbox bench` prints). Usage:

  bench/speed/compare.py --glassbox build/glassbox --llama-bench /path/to/llama-bench \\
      --models DIR/gguf --types bf16,q8_0,q4_0,q4_k_m --threads 2 --reps 3 \\
      --tests pp512,pp4096,tg64,tg64@d4096 --bandwidth 32.0 [--kv-cache-dtype f16]

A test is pp<N> or tg<N>, optionally @d<D>: after D tokens of context (llama-bench -d D).

Without --llama-bench only Glassbox is measured; --peer-glassbox BIN measures another Glassbox
build as the peer instead (before/after a change). Files are DIR/model-<type>.gguf
(glassbox-make-model writes them). Run niced peers off the machine: the host is shared.
"""
import argparse
import json
import statistics
import subprocess
import sys


def parse_test(test):
    """'tg64@d4096' -> ('tg', 64, 4096)."""
    name, _, depth = test.partition("@d")
    return name[:2], int(name[2:]), int(depth or 0)


def run_glassbox(exe, model, test, threads, kv):
    kind, n, depth = parse_test(test)
    args = [exe, "bench", "-m", model, "-t", str(threads), "-r", "1", "--json", "--kv-cache-dtype", kv]
    args += ["-p", str(n), "-n", "0"] if kind == "pp" else ["-p", "0", "-n", str(n)]
    args += ["-d", str(depth)]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    j = json.loads(out.strip().splitlines()[-1])
    return j[kind]["tps_median"], j.get("decode_weight_bytes", 0)


def run_llama(exe, model, test, threads):
    kind, n, depth = parse_test(test)
    args = [exe, "-m", model, "-t", str(threads), "-r", "1", "-o", "json", "-d", str(depth)]
    args += ["-p", str(n), "-n", "0"] if kind == "pp" else ["-p", "0", "-n", str(n)]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    rows = json.loads(out)
    return rows[0]["avg_ts"]


def fmt(v):
    return f"{statistics.median(v):.1f} [{min(v):.1f}, {max(v):.1f}]" if v else "-"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--glassbox", default="build/glassbox")
    ap.add_argument("--llama-bench", default="")
    ap.add_argument("--peer-glassbox", default="", help="another glassbox binary as the peer (before/after)")
    ap.add_argument("--models", required=True)
    ap.add_argument("--types", default="bf16,q8_0,q4_0")
    ap.add_argument("--tests", default="pp512,tg64")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--bandwidth", type=float, default=0.0, help="read GB/s (bench_ops_stream)")
    ap.add_argument("--kv-cache-dtype", default="f32", choices=["f32", "bf16", "f16"],
                    help="Glassbox's KV cache type (llama-bench keeps its default, f16)")
    o = ap.parse_args()
    peer = "peer Glassbox" if o.peer_glassbox else "llama.cpp"
    print(f"| type | test | {peer} t/s | Glassbox t/s | ratio | decode % of limit |")
    print("| --- | --- | --- | --- | --- | --- |")
    for t in o.types.split(","):
        model = f"{o.models}/model-{t}.gguf"
        for test in o.tests.split(","):
            gb, ll, wbytes = [], [], 0
            for _ in range(o.reps):  # interleaved rep by rep
                v, wbytes = run_glassbox(o.glassbox, model, test, o.threads, o.kv_cache_dtype)
                gb.append(v)
                if o.peer_glassbox:
                    ll.append(run_glassbox(o.peer_glassbox, model, test, o.threads, o.kv_cache_dtype)[0])
                elif o.llama_bench:
                    ll.append(run_llama(o.llama_bench, model, test, o.threads))
            ratio = f"{statistics.median(gb) / statistics.median(ll):.2f}x" if ll else "-"
            share = "-"
            # The limit counts weights only: at depth the KV cache's reads come on top.
            if test.startswith("tg") and "@d" not in test and o.bandwidth > 0 and wbytes > 0:
                share = f"{100 * statistics.median(gb) / (o.bandwidth * 1e9 / wbytes):.0f}%"
            print(f"| {t} | {test} | {fmt(ll)} | {fmt(gb)} | {ratio} | {share} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
