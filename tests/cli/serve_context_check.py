#!/usr/bin/env python3
"""glassbox serve without --max-model-len, where the model's full context does not fit the KV cache
budget: it starts anyway, serving the context the budget holds (and says so at start), reports
that context in /v1/models, and refuses a request past it with a 400 naming the context.
Usage: serve_context_check.py GLASSBOX MODEL_DIR"""
import json, re, subprocess, sys, threading, time, urllib.error, urllib.request

glassbox, model = sys.argv[1], sys.argv[2]
proc = subprocess.Popen([glassbox, "serve", "-m", model, "-t", "1", "--allow-unauthenticated", "--port", "0",
                         "--kv-cache-memory", "100000"], stderr=subprocess.PIPE, text=True)
try:
    port, said = None, False
    deadline = time.time() + 60
    while time.time() < deadline and not (port and said):
        line = proc.stderr.readline()
        if not line:
            sys.exit(f"serve exited ({proc.wait()}) before it was ready")
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
        if "max_model_len 64: the model's 512 positions take 0.6 MiB of f32 K/V, more than --kv-cache-memory" in line:
            said = True
    assert port and said, "no port or no note about the shortened context in the start-up log"
    threading.Thread(target=proc.stderr.read, daemon=True).start()  # the rest of the log, unread
    base = f"http://127.0.0.1:{port}"
    while True:
        try:
            urllib.request.urlopen(base + "/ready", timeout=5)
            break
        except urllib.error.URLError:
            if time.time() > deadline:
                sys.exit("not ready within 60 s")
            time.sleep(0.2)
    models = json.load(urllib.request.urlopen(base + "/v1/models", timeout=5))
    assert models["data"][0]["max_model_len"] == 64, models
    ok = json.load(urllib.request.urlopen(urllib.request.Request(
        base + "/v1/completions", data=json.dumps({"prompt": "Once upon a time", "max_tokens": 8}).encode(),
        headers={"Content-Type": "application/json"}), timeout=30))
    assert ok["usage"]["completion_tokens"] == 8, ok
    try:
        urllib.request.urlopen(urllib.request.Request(
            base + "/v1/completions", data=json.dumps({"prompt": "Once upon a time", "max_tokens": 100}).encode(),
            headers={"Content-Type": "application/json"}), timeout=30)
        sys.exit("a request past the 64-token context was accepted")
    except urllib.error.HTTPError as e:
        body = e.read().decode()
        assert e.code == 400 and "64" in body, (e.code, body)
    print("serve: context 64 of the model's 512, said at start, reported and enforced")
finally:
    proc.terminate()
    proc.wait(timeout=40)
