# Makes docs/examples/happy-stories260K.json, the README's steering vector `happy`: for layers 1-3, the
# mean resid_post of stories260K over four happy sentences minus that over four sad ones (each
# sentence averaged over its tokens after BOS), made unit length. Reads `glassbox dump` output.
# Usage: python3 docs/examples/make_happy_vector.py build/glassbox ../shared/models/stories260K docs/examples/happy-stories260K.json
import json, math, struct, subprocess, sys, tempfile
glassbox, model, out = sys.argv[1], sys.argv[2], sys.argv[3]
happy = ["Lily was very happy.", "Tom smiled and laughed with joy.", "They had so much fun and felt glad.",
         "The sun was shining and everyone was happy."]
sad = ["Lily was very sad.", "Tom cried and felt bad.", "They were lonely and felt sad.",
       "The rain fell and everyone was sad."]
layers = [1, 2, 3]
def mean_resid(prompt):
    path = tempfile.gettempdir() + "/happy-vector-dump.safetensors"
    subprocess.run([glassbox, "dump", "-m", model, "-p", prompt, "--points", "resid_post", "--layers", "1-3", "-o", path],
                   check=True, capture_output=True)
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); base = 8 + n
    res = {}
    for l in layers:
        t = h[f"layers.{l}.resid_post"]
        rows, width = t["shape"]
        s, e = t["data_offsets"]
        vals = struct.unpack(f"<{rows*width}f", b[base + s:base + e])
        # mean over the text's tokens (row 0 is BOS)
        res[l] = [sum(vals[r * width + d] for r in range(1, rows)) / (rows - 1) for d in range(width)]
    return res
def avg(ms):
    return {l: [sum(m[l][d] for m in ms) / len(ms) for d in range(len(ms[0][l]))] for l in layers}
H = avg([mean_resid(p) for p in happy]); S = avg([mean_resid(p) for p in sad])
dirs = {}
for l in layers:
    v = [a - b for a, b in zip(H[l], S[l])]
    norm = math.sqrt(sum(x * x for x in v))
    dirs[str(l)] = [round(x / norm, 5) for x in v]
json.dump({"directions": dirs}, open(out, "w"), separators=(", ", ": "))
print("norms ok", {l: len(v) for l, v in dirs.items()})
