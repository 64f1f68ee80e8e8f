#!/usr/bin/env python3
"""glassbox depth against a reference fixture's own hidden states (reference.safetensors, from
llama.cpp): block influence, update ratios and every angular distance recomputed here in float64
from the reference arrays must agree to 1e-5.
Usage: depth_check.py GLASSBOX FIXTURE_DIR (e.g. testdata/reference/llama-gqa)"""
import json, math, struct, subprocess, sys
from array import array

glassbox, fixture = sys.argv[1], sys.argv[2]
ref = json.load(open(f"{fixture}/reference.json"))

def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for k, v in header.items():
        if k == "__metadata__" or v["dtype"] != "F32":
            continue
        a, b = v["data_offsets"]
        vals = array("f")
        vals.frombytes(raw[8 + n + a:8 + n + b])
        rows, width = v["shape"][0], v["shape"][-1]
        out[k] = [vals[r * width:(r + 1) * width] for r in range(rows)]
    return out

st = read_safetensors(f"{fixture}/reference.safetensors")
dot = lambda a, b: sum(x * y for x, y in zip(a, b))
norm = lambda a: math.sqrt(dot(a, a))
cos = lambda a, b: max(-1.0, min(1.0, dot(a, b) / (norm(a) * norm(b))))
mean = lambda xs: sum(xs) / len(xs)
worst = 0.0
for i, ids in enumerate(ref["sequences"]):
    got = json.loads(subprocess.run([glassbox, "depth", "-m", f"{fixture}/hf", "--prompt-ids", " ".join(map(str, ids)),
                                     "--json", "-t", "1"], check=True, capture_output=True, text=True).stdout)
    L = len(got["layers"])
    post = lambda l: st[f"seq{i}.layers.{l}.resid_post"]
    pre = lambda l: st[f"seq{i}.embed"] if l == 0 else post(l - 1)
    for l, g in enumerate(got["layers"]):
        n = len(ids)
        want = {
            "block_influence": 1 - mean([cos(pre(l)[t], post(l)[t]) for t in range(n)]),
            "attn_update_ratio": mean([norm(st[f"seq{i}.layers.{l}.attn_out"][t]) / norm(pre(l)[t]) for t in range(n)]),
            "mlp_update_ratio": mean([norm(st[f"seq{i}.layers.{l}.mlp_out"][t]) / norm(st[f"seq{i}.layers.{l}.resid_mid"][t])
                                      for t in range(n)]),
        }
        for k, v in want.items():
            worst = max(worst, abs(g[k] - v))
            assert abs(g[k] - v) < 1e-5, (i, l, k, g[k], v)
        for m, d in enumerate(g["angular_distance"]):
            v = mean([math.acos(cos(pre(l)[t], post(l + m)[t])) / math.pi for t in range(n)])
            worst = max(worst, abs(d - v))
            assert abs(d - v) < 1e-5, (i, l, m + 1, d, v)
print(f"ok: {len(ref['sequences'])} sequences, worst difference {worst:.2e}")
