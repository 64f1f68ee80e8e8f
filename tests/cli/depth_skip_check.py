#!/usr/bin/env python3
"""glassbox depth --skip on stories260K, the prompt read from a file: the no-skip perplexity is
exactly `glassbox score`'s for the same text; every single-layer and block perplexity is finite
and each equals `glassbox score --glassbox` with the same skip (the op a request sends); each
block is the least-change block of its length by depth's own angular distances; skipping a layer
changes the perplexity.
Usage: depth_skip_check.py GLASSBOX MODEL (run in a scratch directory)"""
import json, math, subprocess, sys

glassbox, model = sys.argv[1], sys.argv[2]
text = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park."
open("depth_skip_text.txt", "w").write(text)
run = lambda *a: subprocess.run([glassbox, *a, "-t", "1"], check=True, capture_output=True, text=True).stdout
j = json.loads(run("depth", "-m", model, "--file", "depth_skip_text.txt", "--skip", "--skip-block", "3", "--json"))
sk = j["skip"]
L = len(j["layers"])
score = lambda *extra: json.loads(run("score", "-m", model, "--file", "depth_skip_text.txt", "--json", *extra))
base = score()
assert sk["perplexity"] == base["perplexity"], (sk["perplexity"], base["perplexity"])
assert sk["n_scored"] == base["n_scored"] == j["n_tokens"] - 1

def skipped(first, last):
    open("depth_skip_spec.json", "w").write(json.dumps({"interventions": [
        {"op": "skip", "layers": {"from": first, "to": last}}]}))
    return score("--glassbox", "depth_skip_spec.json")["perplexity"]

assert [r["layer"] for r in sk["layers"]] == list(range(L))
for r in sk["layers"]:
    assert math.isfinite(r["perplexity"]) and r["perplexity"] > 0, r
    assert r["perplexity"] != sk["perplexity"], r  # the layer does something
    assert r["angular_distance"] == j["layers"][r["layer"]]["angular_distance"][0]
    assert r["perplexity"] == skipped(r["layer"], r["layer"]), r
assert [b["n"] for b in sk["blocks"]] == [2, 3]
for b in sk["blocks"]:
    n = b["n"]
    dists = [j["layers"][l]["angular_distance"][n - 1] for l in range(L - n + 1)]
    assert b["first_layer"] == dists.index(min(dists)), (b, dists)
    assert b["angular_distance"] == min(dists)
    assert math.isfinite(b["perplexity"]) and b["perplexity"] > 0, b
    assert b["perplexity"] == skipped(b["first_layer"], b["first_layer"] + n - 1), b
print("ok: no skip", sk["perplexity"], "layers", [round(r["perplexity"], 4) for r in sk["layers"]],
      "blocks", [(b["first_layer"], b["n"], round(b["perplexity"], 4)) for b in sk["blocks"]])
