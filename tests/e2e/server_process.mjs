// Starts a Glassbox server as a child process for the end-to-end tests: writes a YAML config
// into a temp dir, listens on a free loopback port, waits for /ready (weights loaded and the
// self-test passed) and returns where it listens.
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';

export const require = createRequire(new URL('../../tools/node/package.json', import.meta.url));

// command: the server command line as one string ("build/glassbox serve --model ...");
// config: the YAML config's lines; options.requestLog: collect the JSON request log (stdout).
// Returns { proc, origin, baseURL, stderr(), requestLog() } (requestLog: the parsed lines so far).
export async function startServer(command, config, options = {}) {
  const cmd = command.split(/\s+/).filter(Boolean);
  if (cmd.length === 0) throw new Error('no server command given');
  const dir = mkdtempSync(join(tmpdir(), 'glassbox-e2e-'));
  const path = join(dir, 'glassbox.yaml');
  writeFileSync(path, [...config, ''].join('\n'));
  const proc = spawn(cmd[0], [...cmd.slice(1), '--config', path, '--host', '127.0.0.1', '--port', '0'], {
    stdio: ['ignore', options.requestLog ? 'pipe' : 'ignore', 'pipe'],
  });
  let stderr = '';
  const log = [];
  let partial = '';
  if (options.requestLog) {
    proc.stdout.on('data', (chunk) => {
      const lines = (partial + chunk.toString()).split('\n');
      partial = lines.pop();
      for (const l of lines) if (l.trim()) log.push(JSON.parse(l));
    });
  }
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${stderr}`)), 120_000);
    proc.stderr.on('data', (chunk) => {
      stderr += chunk.toString();
      const m = stderr.match(/listening on [^\s:]+:(\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    proc.on('exit', (code) => reject(new Error(`server exited with ${code}:\n${stderr}`)));
  });
  const origin = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 1200; i++) {
    // A server that fails its start-up (a self-test) exits after listening: say so at once.
    if (proc.exitCode !== null) throw new Error(`server exited with ${proc.exitCode} before it was ready:\n${stderr}`);
    const r = await fetch(`${origin}/ready`).catch(() => null);
    if (r && r.status === 200) return { proc, origin, baseURL: `${origin}/v1`, stderr: () => stderr, requestLog: () => log };
    await new Promise((res) => setTimeout(res, 100));
  }
  throw new Error(`server never became ready:\n${stderr}`);
}

// The value of a Prometheus sample, summed over the label sets it does not name, as a PromQL
// sum() would: `sample` is a name with some of its labels ('glassbox_kv_cache_blocks_used',
// 'glassbox_request_finished_total{finish_reason="length"}' sums over every model). NaN when no
// sample matches.
export function metric(text, sample) {
  const parse = (s) => {
    const m = s.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?$/);
    if (!m) return null;
    const labels = new Map();
    for (const [, k, v] of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels.set(k, v);
    return { name: m[1], labels };
  };
  const want = parse(sample);
  let sum = NaN;
  for (const line of text.split('\n')) {
    if (line.startsWith('#') || !line.trim()) continue;
    const cut = line.lastIndexOf(' ');
    const have = parse(line.slice(0, cut));
    if (!have || have.name !== want.name) continue;
    if ([...want.labels].some(([k, v]) => have.labels.get(k) !== v)) continue;
    sum = (Number.isNaN(sum) ? 0 : sum) + Number(line.slice(cut + 1));
  }
  return sum;
}
