#!/usr/bin/env python3
"""Summarizes bench/out/serve_compare.log (written by compare_llama_server.sh) as a Markdown table.

Per weight type and concurrency: output tok/s of llama-server and Glassbox as median [min, max]
over the runs, the ratio of the medians, TTFT p50 and ITL p50 (medians over the runs).

  bench/serve/summarize_compare.py [LOG]    (default bench/out/serve_compare.log)
"""
import collections
import json
import re
import statistics
import sys


def spread(v):
    m = statistics.median(v)
    return f"{m:.1f} [{min(v):.1f}, {max(v):.1f}]" if len(v) > 1 else f"{m:.1f}"


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "bench/out/serve_compare.log"
    runs = collections.defaultdict(list)  # (server, type, concurrency) -> bench_serve result lines
    types, current = [], None
    with open(path) as f:
        for line in f:
            header = re.match(r"== (\S+) (\S+) ", line)
            if header:
                current = (header.group(1), header.group(2))
                if current[1] not in types:
                    types.append(current[1])
            elif line.startswith("{") and current:
                r = json.loads(line)
                runs[current + (r["concurrency"],)].append(r)
    med = statistics.median
    print("| type | c | llama-server tok/s | Glassbox tok/s | ratio | TTFT p50 ms llama-server → Glassbox (ratio) "
          "| ITL p50 ms llama-server → Glassbox |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for t in types:
        levels = sorted({k[2] for k in runs if k[1] == t})
        for c in levels:
            ll, gb = runs.get(("llama", t, c), []), runs.get(("glassbox", t, c), [])
            if not ll or not gb:
                continue
            lt, gt = [r["output_tok_s"] for r in ll], [r["output_tok_s"] for r in gb]
            lf, gf = med([r["ttft_p50_ms"] for r in ll]), med([r["ttft_p50_ms"] for r in gb])
            li, gi = med([r["itl_p50_ms"] for r in ll]), med([r["itl_p50_ms"] for r in gb])
            print(f"| {t} | {c} | {spread(lt)} | {spread(gt)} | {med(gt) / med(lt):.2f}× | "
                  f"{lf:.0f} → {gf:.0f} ({gf / lf:.2f}×) | {li:.0f} → {gi:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
