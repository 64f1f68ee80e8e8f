#!/usr/bin/env python3
"""Allocator retention of `glassbox serve` (issue 11.3): RSS before, at peak and after idle across
rounds of concurrent requests with large `glassbox.observe` captures. A benchmark, not a ctest.

usage: bench/serve/rss_retention.py [--server "build/glassbox serve --model ../shared/models/stories260K"]
           [--rounds 4] [--concurrency 16] [--idle 5] [--env K=V ...] [--label NAME]

Starts the server on an ephemeral port (one API key, observation budgets raised so every request
is admitted), then runs --rounds rounds; each round sends --concurrency requests at once, each
capturing resid_post and mlp_act at every layer for 200 token positions plus every statistic
(a ~3 MB response), and waits for all of them. RSS (VmRSS of /proc/PID/status) is read before the
first round, every 50 ms during the rounds (the peak), after each round, and --idle seconds after
the last round. Prints one JSON line: {label, before_mib, peak_mib, after_round_mib: [...],
idle_mib, rounds_s (the rounds' wall time), requests, errors, server_log}. --env sets variables for the server only (e.g. MALLOC_ARENA_MAX=8),
so variants can be compared interleaved:
  for i in 1 2 3; do for v in A B; do bench/serve/rss_retention.py --server "$BIN_$v ..."; done; done
"""
import argparse
import http.client
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time


def rss_mib(pid):
    with open(f'/proc/{pid}/status') as f:
        m = re.search(r'^VmRSS:\s+(\d+) kB', f.read(), re.M)
    return int(m.group(1)) / 1024.0


def request_body():
    captures = [{'point': p, 'layer': layer, 'token': t} for t in range(200) for layer in range(5)
                for p in ('resid_post', 'mlp_act')]
    return json.dumps({
        'prompt': 'Once upon a time, there was a little girl named Lily. ' * 8,
        'max_tokens': 100,
        'temperature': 0,
        'ignore_eos': True,
        'glassbox': {'observe': {'points': 'all', 'layers': 'all', 'tokens': 'all', 'top_k': 4,
                                 'detect_massive': True, 'capture': captures}},
    })


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--server', default='build/glassbox serve --model ../shared/models/stories260K')
    ap.add_argument('--rounds', type=int, default=4)
    ap.add_argument('--concurrency', type=int, default=16)
    ap.add_argument('--idle', type=float, default=5)
    ap.add_argument('--env', action='append', default=[])
    ap.add_argument('--label', default='')
    a = ap.parse_args()

    d = tempfile.mkdtemp(prefix='glassbox-rss-')
    cfg = os.path.join(d, 'glassbox.yaml')
    with open(cfg, 'w') as f:
        f.write('api_key: sk-rss\nmax_request_observation_bytes: 268435456\nmax_observation_bytes: 4294967296\n'
                'max_body_bytes: 16777216\nmax_model_len: 512\nmax_num_seqs: 32\n')
    env = dict(os.environ)
    for kv in a.env:
        k, v = kv.split('=', 1)
        env[k] = v
    cmd = shlex.split(a.server) + ['--config', cfg, '--host', '127.0.0.1', '--port', '0']
    requests_log = open(os.path.join(d, 'requests.jsonl'), 'w')
    proc = subprocess.Popen(cmd, stdout=requests_log, stderr=subprocess.PIPE, env=env, text=True)
    port = None
    for line in proc.stderr:
        m = re.search(r'ready: serving .* on [\d.]+:(\d+)', line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        sys.exit('the server did not start: ' + ' '.join(cmd))
    log = open(os.path.join(d, 'server.log'), 'w')
    threading.Thread(target=lambda: [log.write(line) for line in proc.stderr], daemon=True).start()

    body = request_body()
    errors = [0]
    done = [0]

    def one():
        try:
            c = http.client.HTTPConnection('127.0.0.1', port, timeout=600)
            c.request('POST', '/v1/completions', body, {'Authorization': 'Bearer sk-rss',
                                                        'Content-Type': 'application/json'})
            r = c.getresponse()
            data = r.read()
            if r.status != 200:
                errors[0] += 1
                print(r.status, data[:300], file=sys.stderr)
            c.close()
        except Exception as e:  # noqa: BLE001 - any failure counts
            errors[0] += 1
            print(e, file=sys.stderr)
        done[0] += 1

    time.sleep(1)
    before = rss_mib(proc.pid)
    peak = [before]
    running = [True]

    def sample():
        while running[0]:
            peak[0] = max(peak[0], rss_mib(proc.pid))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    after_round = []
    t0 = time.time()
    for _ in range(a.rounds):
        ts = [threading.Thread(target=one) for _ in range(a.concurrency)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        time.sleep(0.5)
        after_round.append(round(rss_mib(proc.pid), 1))
    rounds_s = time.time() - t0 - 0.5 * a.rounds
    running[0] = False
    sampler.join()
    time.sleep(a.idle)
    idle = rss_mib(proc.pid)
    proc.terminate()
    proc.wait(timeout=60)
    print(json.dumps({'label': a.label, 'before_mib': round(before, 1), 'peak_mib': round(peak[0], 1),
                      'after_round_mib': after_round, 'idle_mib': round(idle, 1), 'rounds_s': round(rounds_s, 1), 'requests': done[0],
                      'errors': errors[0], 'server_log': log.name}))


if __name__ == '__main__':
    main()
