#!/usr/bin/env python3
"""glassbox lens at the last layer is the model's own next-token distribution: at every position
its top-1 token is the greedy next token (from `glassbox score`'s alternatives, and from
`glassbox generate` at the last position) with the same probability; and at layer 0 of
stories260K it differs somewhere (the lens really reads each layer).
Usage: lens_check.py GLASSBOX MODEL"""
import json, math, subprocess, sys

glassbox, model = sys.argv[1], sys.argv[2]
prompt = "Once upon a time, there was a little girl named Lily. She loved to"
run = lambda *a: subprocess.run([glassbox, *a], check=True, capture_output=True, text=True).stdout
lens = json.loads(run("lens", "-m", model, "-p", prompt, "-k", "2", "--json", "-t", "1"))
score = json.loads(run("score", "-m", model, "--text", prompt, "--tokens", "--top", "1", "--json", "-t", "1"))
ids = [t["id"] for t in lens["tokens"]]
assert ids == [t["id"] for t in score["tokens"]], "lens and score tokenize the prompt alike"
last, first = lens["layers"][-1]["positions"], lens["layers"][0]["positions"]
assert len(last) == len(ids)
for p in range(len(ids) - 1):
    want = score["tokens"][p + 1]["top"][0]
    got = last[p]["top"][0]
    assert got["id"] == want["id"], f"position {p}: lens {got['id']} vs greedy {want['id']}"
    assert abs(got["prob"] - math.exp(want["logprob"])) < 1e-5, f"position {p}: {got['prob']} vs {math.exp(want['logprob'])}"
    assert last[p]["entropy"] >= 0
greedy = run("generate", "-m", model, "-p", prompt, "--temperature", "0", "-n", "1", "--show-ids", "-t", "1")
assert f"[{last[-1]['top'][0]['id']}]" in greedy, f"last position: {greedy!r}"
assert any(f["top"][0]["id"] != l["top"][0]["id"] for f, l in zip(first, last)), "layer 0 equals the last layer"
print(f"ok: {len(ids)} positions, last-layer lens = greedy next token everywhere")
