#!/usr/bin/env python3
"""--glassbox FILE on the analysis commands (dump, scan, depth, lens, sweep) of stories260K: the
file's interventions steer every request the analysis runs, and each analysis shows it exactly.
  depth: with layer 2 skipped its block influence is 0 and its angular distance d(2, 1) ~0
         (resid_post = resid_pre), the other layers' numbers below it unchanged;
  lens:  with layer 4 skipped the lens at layer 4 equals the lens at layer 3, cell for cell;
  dump:  a `set` of dim 5 at layer 1's resid_post is in the dumped tensor, the unsteered dump not;
  scan:  the same set to 5000 is a massive activation at layer 1, dim 5, every token;
  sweep: the steered baseline (strength 0 under --glassbox) is what `generate --glassbox` writes;
and a file without interventions is refused; --prompts FILE reads JSONL like plain lines.
Usage: analysis_glassbox_check.py GLASSBOX MODEL (run in a scratch directory)"""
import json, struct, subprocess, sys

glassbox, model = sys.argv[1], sys.argv[2]
prompt = "Once upon a time, there was a little girl"


def run(*a, ok=True):
    p = subprocess.run([glassbox, *a, "-m", model, "-t", "1"], capture_output=True, text=True)
    if ok:
        assert p.returncode == 0, (a, p.stderr)
    return p


def spec(name, interventions):
    open(name, "w").write(json.dumps({"interventions": interventions}))
    return name


skip2 = spec("skip2.json", [{"op": "skip", "layer": 2}])
skip4 = spec("skip4.json", [{"op": "skip", "layer": 4}])
set5 = spec("set5.json", [{"op": "set", "point": "resid_post", "layer": 1, "dims": [5], "strength": 5000}])

# depth
plain = json.loads(run("depth", "-p", prompt, "--json").stdout)
steered = json.loads(run("depth", "-p", prompt, "--json", "--glassbox", skip2).stdout)
assert plain["layers"][2]["block_influence"] > 1e-3, plain["layers"][2]
assert steered["layers"][2]["block_influence"] == 0, steered["layers"][2]
assert steered["layers"][2]["angular_distance"][0] < 1e-7, steered["layers"][2]  # arccos(1 − ε)
for l in (0, 1):  # layers before the skipped one see the same stream
    for k in ("block_influence", "attn_update_ratio", "mlp_update_ratio"):
        assert steered["layers"][l][k] == plain["layers"][l][k], (l, k)

# lens
lens = json.loads(run("lens", "-p", prompt, "--json", "--glassbox", skip4).stdout)
assert lens["layers"][4]["positions"] == lens["layers"][3]["positions"]
unsteered = json.loads(run("lens", "-p", prompt, "--json").stdout)
assert unsteered["layers"][4]["positions"] != unsteered["layers"][3]["positions"]


# dump: read layers.1.resid_post from the safetensors file
def tensor(path, name):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    t = head[name]
    a, b = t["data_offsets"]
    vals = struct.unpack(f"<{(b - a) // 4}f", raw[8 + n + a:8 + n + b])
    return t["shape"], vals


run("dump", "-p", prompt, "--points", "resid_post", "--layers", "1", "-o", "plain.safetensors")
run("dump", "-p", prompt, "--points", "resid_post", "--layers", "1", "-o", "set.safetensors", "--glassbox", set5)
shape, vals = tensor("set.safetensors", "layers.1.resid_post")
_, plain_vals = tensor("plain.safetensors", "layers.1.resid_post")
width = shape[1]
assert all(vals[t * width + 5] == 5000 for t in range(shape[0]))
assert all(plain_vals[t * width + 5] != 5000 for t in range(shape[0]))

# scan
scan = json.loads(run("scan", "-p", prompt, "--json", "--glassbox", set5).stdout)
e = scan["emergence_layer"]
assert e is not None and e["layer"] == 1 and e["dims"] == [5], e
assert sorted(p["position"] for p in e["positions"]) == list(range(shape[0])), e
assert json.loads(run("scan", "-p", prompt, "--json").stdout)["emergence_layer"] is None

# sweep: strength 0 of a scale is the identity, so its outputs are the --glassbox model's own
sw = json.loads(run("sweep", "-p", prompt, "--json", "-n", "12", "--strengths", "0", "--glassbox", skip4,
                    "--intervention", json.dumps({"op": "scale", "point": "mlp_act", "layer": 1, "dims": [3]})).stdout)
gen = run("generate", "-p", prompt, "-n", "12", "--temperature", "0", "--ignore-eos", "--glassbox", skip4).stdout
text = sw["strengths"][0]["outputs"][0]["text"]
assert text and gen.strip().startswith(text.strip()), (text, gen)  # sweep's text decodes without context
plain_gen = run("generate", "-p", prompt, "-n", "12", "--temperature", "0", "--ignore-eos").stdout
assert not plain_gen.strip().startswith(text.strip()), (text, plain_gen)  # the baseline is the steered model's

# a file with no interventions
obs = open("observe_only.json", "w")
obs.write(json.dumps({"observe": {"points": ["resid_post"]}}))
obs.close()
p = run("depth", "-p", prompt, "--glassbox", "observe_only.json", ok=False)
assert p.returncode != 0 and "no interventions" in p.stderr, p.stderr
# --prompts FILE as JSONL ({"prompt": ...} objects or JSON strings) reads the same prompts as plain lines
lines = [prompt, "The cat sat on the mat."]
open("prompts.txt", "w").write("\n".join(lines) + "\n")
open("prompts.jsonl", "w").write(json.dumps({"prompt": lines[0], "id": 1}) + "\n" + json.dumps(lines[1]) + "\n")
a = json.loads(run("depth", "--prompts", "prompts.txt", "--json").stdout)
b = json.loads(run("depth", "--prompts", "prompts.jsonl", "--json").stdout)
assert a["n_prompts"] == b["n_prompts"] == 2 and a["n_tokens"] == b["n_tokens"]
assert [l["block_influence"] for l in a["layers"]] == [l["block_influence"] for l in b["layers"]]
open("bad.jsonl", "w").write(json.dumps({"question": "x"}) + "\n")
p = run("scan", "--prompts", "bad.jsonl", ok=False)
assert p.returncode != 0 and "bad.jsonl:1" in p.stderr and '"prompt"' in p.stderr, p.stderr
print("ok: --glassbox steers dump, scan, depth, lens and sweep; --prompts reads JSONL")
