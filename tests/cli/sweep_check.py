#!/usr/bin/env python3
"""glassbox sweep on stories260K: strength 0 is bitwise the unsteered run (same tokens as
`glassbox generate`, KL exactly 0, the perplexity `glassbox score` gives those tokens), and every
row's metrics are what one counts by hand from the outputs it stores.
Usage: sweep_check.py GLASSBOX MODEL"""
import json, math, subprocess, sys

glassbox, model = sys.argv[1], sys.argv[2]
prompts = ["Once upon a time", "Lily and Tom went to the park"]
open("sweep_prompts.txt", "w").write("\n".join(prompts) + "\n")
run = lambda *a: subprocess.run([glassbox, *a, "-t", "1"], check=True, capture_output=True, text=True).stdout
item = {"op": "scale", "point": "mlp_act", "layer": 2, "dims": [5, 7, 9], "strength": 0}
j = json.loads(run("sweep", "-m", model, "--prompts", "sweep_prompts.txt", "--intervention", json.dumps(item),
                   "--strengths", "0,5,20", "-n", "40", "--json"))
rows = j["strengths"]
assert [r["strength"] for r in rows] == [0, 5, 20]

for p, out in zip(prompts, rows[0]["outputs"]):
    ids = run("generate", "-m", model, "-p", p, "--temperature", "0", "-n", "40", "--ignore-eos", "--show-ids")
    got = "".join(f"[{t}]" for t in out["tokens"])
    assert ids.startswith(got), (p, ids, got)
assert rows[0]["kl_first_tokens"] == 0.0
logp, n = 0.0, 0
for p, out in zip(prompts, rows[0]["outputs"]):
    s = json.loads(run("score", "-m", model, "--text", p + out["text"], "--json", "--tokens"))
    toks = s["tokens"]
    assert [t["id"] for t in toks[-len(out["tokens"]):]] == out["tokens"], "the text re-encodes to its tokens"
    logp += sum(t["logprob"] for t in toks[-len(out["tokens"]):])
    n += len(out["tokens"])
assert abs(rows[0]["perplexity_unsteered"] - math.exp(-logp / n)) < 1e-4, (rows[0]["perplexity_unsteered"], math.exp(-logp / n))

def repetition(tokens, k=4):
    seen, rep, total = set(), 0, 0
    for i in range(len(tokens) - k + 1):
        g = tuple(tokens[i:i + k]); total += 1; rep += g in seen; seen.add(g)
    return rep / total if total else 0.0

for r in rows:
    outs = r["outputs"]
    assert abs(r["output_length"] - sum(len(o["tokens"]) for o in outs) / len(outs)) < 1e-9
    assert abs(r["truncation_rate"] - sum(o["finish_reason"] == "length" for o in outs) / len(outs)) < 1e-9
    bigrams = [(o["tokens"][i - 1], o["tokens"][i]) for o in outs for i in range(1, len(o["tokens"]))]
    assert abs(r["distinct_2"] - len(set(bigrams)) / len(bigrams)) < 1e-9, r["strength"]
    assert abs(r["repetition_rate"] - sum(repetition(o["tokens"]) for o in outs) / len(outs)) < 1e-9, r["strength"]
assert rows[2]["kl_first_tokens"] > rows[0]["kl_first_tokens"] and rows[2]["perplexity_unsteered"] > rows[0]["perplexity_unsteered"]
print("ok:", [(r["strength"], round(r["perplexity_unsteered"], 3), round(r["kl_first_tokens"], 4)) for r in rows])
