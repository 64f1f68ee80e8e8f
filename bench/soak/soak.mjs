// Soak test (a benchmark script, not a ctest): starts a real server, then for --seconds (default
// 600) runs --clients (default 64) streaming OpenAI SDK clients that mix plain, observed and steered
// requests, plus clients that disconnect mid-stream and clients that read slowly. Samples the
// server's RSS every 10 s. At the end it checks, and prints as one JSON line:
//   - no error other than 429 (the concurrency limit is set below the client count on purpose);
//   - RSS after warm-up (the first third) is flat: the least-squares slope in MiB per minute;
//   - every steered request that got an answer (200) has its row in the audit store, read back
//     with `glassbox audit --db ... --request-id ...`;
//   - when idle, no request running and every KV block back (0 used).
//
// Usage: node bench/soak/soak.mjs --server "build/glassbox serve --model ../shared/models/stories260K"
//          [--seconds 600] [--clients 64] [--out bench/out/soak.json]
import { parseArgs } from 'node:util';
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import http from 'node:http';
import { createRequire } from 'node:module';

const require = createRequire(new URL('../../tools/node/package.json', import.meta.url));
const OpenAI = require('openai');

const { values: opt } = parseArgs({
  options: {
    server: { type: 'string', default: 'build/glassbox serve --model ../shared/models/stories260K' },
    seconds: { type: 'string', default: '600' },
    clients: { type: 'string', default: '64' },
    out: { type: 'string', default: '' },
  },
});
const SECONDS = Number(opt.seconds);
const CLIENTS = Number(opt.clients);
const KEY = 'sk-soak';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- the server ----
const dir = mkdtempSync(join(tmpdir(), 'glassbox-soak-'));
const auditDb = join(dir, 'audit.db');
const config = join(dir, 'glassbox.yaml');
writeFileSync(config, [
  `api_key: ${KEY}`,
  `max_concurrent_requests: ${CLIENTS - 4}`,
  'max_queue_length: 256',
  `http_threads: ${CLIENTS + 16}`,
  'write_timeout_s: 30',
  'interventions: true',
  `audit_db: ${auditDb}`,
  'glassbox_policy:',
  '  caps: {scale: 10, add: 100}',
  '',
].join('\n'));
const cmd = opt.server.split(/\s+/).filter(Boolean);
const binary = cmd[0];
const proc = spawn(cmd[0], [...cmd.slice(1), '--config', config, '--host', '127.0.0.1', '--port', '0'],
  { stdio: ['ignore', 'ignore', 'pipe'] });
let stderr = '';
const port = await new Promise((resolve, reject) => {
  proc.stderr.on('data', (c) => {
    stderr += c.toString();
    const m = stderr.match(/listening on [^\s:]+:(\d+)/);
    if (m) resolve(Number(m[1]));
  });
  proc.on('exit', (code) => reject(new Error(`server exited with ${code}:\n${stderr}`)));
});
const origin = `http://127.0.0.1:${port}`;
for (let i = 0; i < 1200; i++) {
  const r = await fetch(`${origin}/ready`).catch(() => null);
  if (r && r.status === 200) break;
  await sleep(100);
}
const client = new OpenAI({ apiKey: KEY, baseURL: `${origin}/v1`, maxRetries: 0, timeout: 120_000 });
const model = (await client.models.list()).data[0].id;
const metricsText = async () => (await fetch(`${origin}/metrics`)).text();
const metric = (text, sample) => {
  const line = text.split('\n').find((l) => l.startsWith(sample + ' '));
  return line ? Number(line.slice(sample.length + 1)) : NaN;
};
const rssKiB = () => Number(readFileSync(`/proc/${proc.pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)[1]);

// ---- the mix ----
const PROMPTS = ['Once upon a time', 'The little dog', 'Lily and Ben went to the park', 'Tom had a toy car. He',
  'One day, a big red ball', 'Sue liked to sing.', 'The cat saw a fish', 'There was a boy named Max who'];
const OBSERVE = { observe: { points: ['resid_post', 'mlp_act'], layers: 'all', tokens: 'generated', top_k: 2 } };
const STEER = { interventions: [{ op: 'scale', point: 'mlp_act', layer: 1, dims: [3], strength: 2 },
  { op: 'clamp', point: 'resid_post', layers: 'all', strength: 50 }] };
const stats = { ok: { plain: 0, observed: 0, steered: 0 }, rejected429: 0, errors: [], disconnects: 0, slow: 0, tokens: 0 };
const steeredIds = [];
const t0 = performance.now();
const deadline = t0 + SECONDS * 1000;

async function streamOnce(kind, i, leaveAfter = 0) {
  const glassbox = kind === 'observed' ? OBSERVE : kind === 'steered' ? STEER : undefined;
  const controller = new AbortController();
  try {
    const stream = await client.completions.create({
      model, prompt: PROMPTS[i % PROMPTS.length], max_tokens: 24 + (i % 5) * 16, temperature: 0.8, seed: i,
      stream: true, ...(glassbox ? { glassbox } : {}),
    }, { signal: controller.signal });
    let n = 0, id = '';
    for await (const chunk of stream) {
      id = chunk.id;
      n++;
      if (leaveAfter && n === leaveAfter) {
        controller.abort();
        stats.disconnects++;
        return;
      }
    }
    stats.ok[kind]++;
    stats.tokens += n;
    if (kind === 'steered') steeredIds.push(id);
  } catch (e) {
    if (e.status === 429) {
      stats.rejected429++;
      await sleep(200);
    } else if (!controller.signal.aborted) {
      stats.errors.push(`${kind}: ${e.status ?? ''} ${e.message}`.slice(0, 300));
    }
  }
}

async function streamer(c) {
  for (let i = c; performance.now() < deadline; i += CLIENTS) {
    const r = i % 10;
    const kind = r < 5 ? 'plain' : r < 7 ? 'observed' : 'steered';
    await streamOnce(kind, i, c % 16 === 15 ? 3 : 0);  // every 16th client leaves mid-stream
  }
}

// A slow reader: raw HTTP, reads one chunk every 100 ms, repeated.
async function slowReader() {
  while (performance.now() < deadline - 30_000) {
    await new Promise((resolve) => {
      const body = JSON.stringify({ model, prompt: 'Once upon a time', max_tokens: 200, stream: true, ignore_eos: true });
      const req = http.request(`${origin}/v1/completions`, {
        method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}` },
      }, (res) => {
        res.on('data', () => { res.pause(); setTimeout(() => res.resume(), 100); });
        res.on('end', () => { stats.slow++; resolve(); });
        res.on('error', resolve);
      });
      req.on('error', resolve);
      req.end(body);
    });
  }
}

const rss = [];
const sampler = setInterval(() => rss.push({ t: (performance.now() - t0) / 1000, mib: rssKiB() / 1024 }), 10_000);
await Promise.all([...Array(CLIENTS).keys()].map(streamer).concat([slowReader(), slowReader()]));
clearInterval(sampler);

// ---- idle, then the checks ----
let m = '';
for (let i = 0; i < 200; i++) {
  m = await metricsText();
  if (metric(m, 'glassbox_num_requests_running') === 0 && metric(m, 'glassbox_kv_cache_blocks_used') === 0 &&
      metric(m, 'glassbox_requests_in_flight') === 0) break;
  await sleep(100);
}
const warm = rss.filter((s) => s.t > SECONDS / 3);
const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;
const tm = mean(warm.map((s) => s.t)), rm = mean(warm.map((s) => s.mib));
const slope = warm.reduce((a, s) => a + (s.t - tm) * (s.mib - rm), 0) /
              warm.reduce((a, s) => a + (s.t - tm) ** 2, 0) * 60;  // MiB per minute
let unaudited = 0;
for (const id of steeredIds) {
  const rows = execFileSync(binary, ['audit', '--db', auditDb, '--request-id', id, '--json'], { encoding: 'utf8' });
  if (!rows.trim()) unaudited++;
}
proc.kill('SIGTERM');
const result = {
  seconds: ((performance.now() - t0) / 1000).toFixed(0), clients: CLIENTS, completed: stats.ok,
  rejected_429: stats.rejected429, errors: stats.errors.length, first_errors: stats.errors.slice(0, 5),
  disconnects: stats.disconnects, slow_reads: stats.slow, streamed_chunks: stats.tokens,
  cancelled: metric(m, 'glassbox_request_finished_total{finish_reason="cancelled"}'),
  steered_answered: steeredIds.length, steered_unaudited: unaudited,
  kv_blocks_used_at_end: metric(m, 'glassbox_kv_cache_blocks_used'),
  running_at_end: metric(m, 'glassbox_num_requests_running'),
  rss_mib: rss.map((s) => Math.round(s.mib)), rss_slope_mib_per_min_after_warmup: Number(slope.toFixed(3)),
};
console.log(JSON.stringify(result));
if (opt.out) {
  mkdirSync(dirname(opt.out), { recursive: true });
  writeFileSync(opt.out, JSON.stringify(result, null, 1));
}
const ok = result.errors === 0 && unaudited === 0 && result.kv_blocks_used_at_end === 0 && result.running_at_end === 0;
process.exit(ok ? 0 : 1);
