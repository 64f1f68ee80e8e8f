// `glassbox eval` end to end on stories260K (issue 13): a dataset made from the model's own
// greedy continuations (so the base arm scores exactly 100% at temperature 0), an arm that steers
// it (a strong neuron scale) and one that truncates it (max_tokens 4). The report's numbers must
// be the ones counted here by hand from the stored samples (read with the sqlite3 CLI, not through
// glassbox), the paired test's p-value the exact binomial one; a run killed with SIGKILL half way
// (after exactly 12 samples, the next request held at a proxy) and re-run must end with the same
// report (latencies aside) without recomputing a stored sample; and --url against `glassbox serve`
// must give the in-process run's samples.
//
// GB_E2E_GLASSBOX: the glassbox binary; GB_E2E_SHARED: the shared data directory.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync, existsSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { require, startServer } from './server_process.mjs';

const OpenAI = require('openai');
const BIN = process.env.GB_E2E_GLASSBOX;
const SHARED = process.env.GB_E2E_SHARED;
const MODEL = `${SHARED}/models/stories260K`;
const KEY = 'sk-eval-test';
const dir = mkdtempSync(join(tmpdir(), 'glassbox-eval-'));
const data = join(dir, 'stories.jsonl');
const PROMPTS = ['Once upon a time', 'The little dog', 'Lily wanted to', 'Tom and his mom', 'One day, a bird',
  'The sun was', 'Sam liked to play', 'There was a big tree', 'A girl named Sue', 'The cat sat on', 'Ben found a box',
  'It was a cold day'];
const STEER = { interventions: [{ op: 'scale', point: 'mlp_act', layer: 1, dims: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], strength: 3 }] };
const ARMS = ['--arm', 'base', '--arm', `steered=${JSON.stringify(STEER)}`, '--arm', 'short={"max_tokens": 4}'];
const COMMON = ['--data', data, ...ARMS, '--max-tokens', '16', '--temperature', '0', '--seed', '7'];

let server;
after(() => {
  if (server && server.proc.exitCode === null) server.proc.kill('SIGKILL');
});

const sql = (db, query) =>
  JSON.parse(execFileSync('sqlite3', ['-json', '-cmd', '.timeout 10000', db, query], { encoding: 'utf8' }) || '[]');
const evalRun = (args) => spawnSync(BIN, ['eval', ...args], { encoding: 'utf8', timeout: 240_000 });
const report = (out) => JSON.parse(readFileSync(join(out, 'report.json'), 'utf8'));
// The report without what the clock decides.
const stable = (r) => ({
  arms: r.arms.map(({ latency, ...a }) => a),
  paired: r.paired,
  samples: r.samples,
  missing: r.missing_samples,
});

before(async () => {
  if (!BIN || !SHARED) throw new Error('set GB_E2E_GLASSBOX and GB_E2E_SHARED');
  // The dataset: each prompt's greedy continuation, from a server the eval runs never see.
  server = await startServer(`${BIN} serve --model ${MODEL} --threads 1`, [
    `api_key: ${KEY}`, 'interventions: true', `audit_db: ${join(dir, 'serve-audit.db')}`,
  ]);
  const client = new OpenAI({ apiKey: KEY, baseURL: server.baseURL, maxRetries: 0 });
  const rows = [];
  for (const [i, prompt] of PROMPTS.entries()) {
    const r = await client.completions.create({ model: 'stories260K', prompt, max_tokens: 16, temperature: 0 });
    rows.push(JSON.stringify({ id: `s${i}`, prompt, expected: r.choices[0].text }));
  }
  writeFileSync(data, rows.join('\n') + '\n');
});

test('the report is what the stored samples count to; base 100%, steered and short below it', async () => {
  const out = join(dir, 'run');
  const r = evalRun(['--model', MODEL, '--threads', '1', '--concurrency', '2', ...COMMON, '--out', out]);
  assert.equal(r.status, 0, r.stderr);
  const db = join(out, 'samples.db');
  const rep = report(out);
  const rows = sql(db, 'SELECT * FROM samples');
  assert.equal(rows.length, 3 * PROMPTS.length);
  for (const arm of ['base', 'steered', 'short']) {
    const mine = rows.filter((s) => s.arm === arm);
    const a = rep.arms.find((x) => x.name === arm);
    const correct = mine.filter((s) => s.correct === 1).length;
    const truncated = mine.filter((s) => s.finish_reason === 'length').length;
    assert.equal(a.samples, mine.length);
    assert.equal(a.accuracy.count, correct, arm);
    assert.equal(a.accuracy.n, mine.length);
    assert.equal(a.accuracy.rate, correct / mine.length);
    assert.equal(a.truncation.count, truncated, arm);
    const lengths = mine.map((s) => s.completion_tokens).sort((x, y) => x - y);
    assert.equal(a.length.mean, lengths.reduce((x, y) => x + y, 0) / lengths.length);
    assert.equal(a.length.max, lengths.at(-1));
    const mid = (lengths.length - 1) / 2;  // numpy's linear percentile at 0.5
    assert.equal(a.length.p50, (lengths[Math.floor(mid)] + lengths[Math.ceil(mid)]) / 2);
    assert.equal(a.length.histogram.counts.reduce((x, y) => x + y, 0), mine.length);
  }
  const arm = (n) => rep.arms.find((x) => x.name === n);
  assert.equal(arm('base').accuracy.rate, 1, 'the dataset is the base model\'s own greedy output');
  for (const s of rows.filter((x) => x.arm === 'base')) {
    assert.equal(JSON.parse(s.token_ids).length, s.completion_tokens, 'token ids are stored');
  }
  assert.ok(arm('steered').accuracy.rate < 1, 'the neuron scale changes some outputs');
  assert.equal(arm('short').accuracy.count, rows.filter((s) => s.arm === 'short' && s.completion_tokens >= 16).length);
  assert.equal(arm('short').truncation.rate, 1, 'every max_tokens-4 answer is cut at its limit');
  assert.equal(arm('short').length.max, 4);
  // Paired against base: base is always right, so every discordant pair is a loss and McNemar's
  // exact two-sided p is min(1, 2 · 0.5^losses).
  for (const name of ['steered', 'short']) {
    const p = rep.paired.find((x) => x.arm === name);
    const losses = rows.filter((s) => s.arm === name && s.correct === 0).length;
    assert.equal(p.baseline, 'base');
    assert.equal(p.pairs, PROMPTS.length);
    assert.equal(p.baseline_only, losses);
    assert.equal(p.arm_only, 0);
    assert.ok(Math.abs(p.mcnemar_p - Math.min(1, 2 * 0.5 ** losses)) < 1e-12, `${name}: p ${p.mcnemar_p}, ${losses} losses`);
    assert.equal(p.differing_problems.length, losses);
  }
  // Every steered sample is audited (in-process interventions need the audit store).
  assert.ok(existsSync(join(out, 'audit.db')));
  assert.equal(sql(join(out, 'audit.db'), "SELECT count(*) AS n FROM audit WHERE kind = 'request'")[0].n, PROMPTS.length);
  // The Markdown and the plots are there; eval report rebuilds the same numbers from the store.
  const md = readFileSync(join(out, 'report.md'), 'utf8');
  assert.match(md, /\| base \| 12 \| 100\.0% \[/);
  assert.match(readFileSync(join(out, 'lengths.svg'), 'utf8'), /max_tokens 4/);
  assert.match(r.stderr, /wrote .*\/run\/\{report\.json,report\.md,lengths\.svg,accuracy\.svg\}/);
  const again = join(dir, 'rebuilt');
  const rr = spawnSync(BIN, ['eval', 'report', out, '--out', again], { encoding: 'utf8' });
  assert.equal(rr.status, 0, rr.stderr);
  assert.deepEqual(report(again), rep);
});

test('SIGKILL half way, then the same command: the same report, and no stored sample recomputed', async () => {
  const out = join(dir, 'killed');
  const db = join(out, 'samples.db');
  // The run goes to the server through a proxy that forwards the first STOP generation requests
  // and holds the next one unanswered, so the kill lands after exactly STOP stored samples however
  // loaded the machine is (a whole run takes ~0.2 s: polling for a count alone raced it).
  const STOP = 12;
  let posts = 0;
  let gate = true;
  const held = [];
  const target = new URL(server.origin);
  const proxy = http.createServer((req, res) => {
    if (req.method === 'POST' && gate && ++posts > STOP) {
      held.push(res);
      return;
    }
    const up = http.request(
      { host: target.hostname, port: target.port, path: req.url, method: req.method, headers: req.headers },
      (ur) => {
        res.writeHead(ur.statusCode, ur.headers);
        ur.pipe(res);
      });
    up.on('error', () => res.destroy());
    req.pipe(up);
  });
  await new Promise((r) => proxy.listen(0, '127.0.0.1', r));
  try {
    const args = ['--url', `http://127.0.0.1:${proxy.address().port}`, '--api-key', KEY, ...COMMON, '--out', out];
    const child = spawn(BIN, ['eval', '--concurrency', '1', ...args], { stdio: 'ignore' });
    let before = [];
    for (let i = 0; i < 2400 && before.length < STOP; i++) {
      await new Promise((r) => setTimeout(r, 50));
      try {
        before = sql(db, 'SELECT arm, problem_id, sample, finished_ms FROM samples');
      } catch {
        // not created yet
      }
    }
    child.kill('SIGKILL');
    await new Promise((r) => child.on('exit', r));
    before = sql(db, 'SELECT arm, problem_id, sample, finished_ms, text FROM samples');
    assert.equal(before.length, STOP, `${before.length} samples stored when killed`);
    gate = false;
    const r = await new Promise((resolve) => {  // async: the proxy runs in this process
      const c = spawn(BIN, ['eval', '--concurrency', '2', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
      let stderr = '';
      c.stderr.on('data', (d) => (stderr += d));
      c.on('exit', (status) => resolve({ status, stderr }));
    });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stderr, new RegExp(`resuming .*: ${STOP} samples stored, ${36 - STOP} to run`));
    const afterRows = sql(db, 'SELECT arm, problem_id, sample, finished_ms, text FROM samples');
    assert.equal(afterRows.length, 36);
    for (const b of before) {
      const a = afterRows.find((x) => x.arm === b.arm && x.problem_id === b.problem_id && x.sample === b.sample);
      assert.deepEqual(a, b, 'a stored sample is kept as it was');
    }
    assert.deepEqual(stable(report(out)), stable(report(join(dir, 'run'))));
    // A store made with other settings is refused, naming them.
    const other = evalRun(['--model', MODEL, '--threads', '1', ...COMMON, '--samples', '2', '--out', out]);
    assert.equal(other.status, 2);
    assert.match(other.stderr, /other settings \(.*samples_per_problem/);
  } finally {
    for (const res of held) res.destroy();
    proxy.close();
  }
});

test('--url against glassbox serve gives the in-process samples', async () => {
  const out = join(dir, 'url');
  const r = evalRun(['--url', server.origin, '--api-key', KEY, '--concurrency', '3', ...COMMON, '--out', out]);
  assert.equal(r.status, 0, r.stderr);
  const q = 'SELECT arm, problem_id, sample, seed, text, token_ids, finish_reason, completion_tokens, correct FROM samples ORDER BY arm, problem_id, sample';
  assert.deepEqual(sql(join(out, 'samples.db'), q), sql(join(dir, 'run', 'samples.db'), q));
});

test('GSM8K rows go through the chat template with the prompt template and are graded', async () => {
  const gsm = join(dir, 'gsm8k.jsonl');
  writeFileSync(gsm, [
    { question: 'Tom has 3 apples and buys 4 more. How many?', answer: '3 + 4 = 7\n#### 7' },
    { question: 'A box holds 1,000 nails; 250 are used. How many are left?', answer: '#### 750' },
  ].map((r) => JSON.stringify(r)).join('\n') + '\n');
  const out = join(dir, 'gsm');
  const r = evalRun(['--url', server.origin, '--api-key', KEY, '--data', gsm, '--arm', 'base', '--max-tokens', '24',
    '--temperature', '0', '--prompt-template', 'Question: {question}\nAnswer:', '--out', out]);
  assert.equal(r.status, 0, r.stderr);
  const rep = report(out);
  assert.equal(rep.settings.task, 'gsm8k');
  const a = rep.arms[0];
  assert.equal(a.accuracy.n, 2);
  assert.ok(a.strict_accuracy, 'GSM8K reports strict-match beside flexible-extract');
  const rows = sql(join(out, 'samples.db'), 'SELECT text, extracted, correct, token_ids FROM samples ORDER BY problem_id');
  for (const row of rows) {
    // The flexible extraction is the last number of the text (or nothing), and the verdict follows it.
    const numbers = row.text.match(/-?[$0-9.,]{2,}|-?[0-9]+/g)?.filter((m) => /[0-9]/.test(m)) ?? [];
    if (numbers.length === 0) assert.equal(row.extracted, '');
    assert.ok(JSON.parse(row.token_ids).length > 0, 'the chat stream names its token ids');
  }
  assert.equal(a.accuracy.count, rows.filter((x) => x.correct === 1).length);
  // The question reached the model through the chat template, with the prompt template around it.
  const prompt = sql(join(out, 'samples.db'), 'SELECT prompt_tokens FROM samples')[0].prompt_tokens;
  assert.ok(prompt > 12, `${prompt} prompt tokens`);
});

test('bad input is a clear error and runs nothing', async () => {
  const bad = join(dir, 'bad.jsonl');
  writeFileSync(bad, '{"prompt": "a", "expected": "b"}\n{"question": "no answer"}\n');
  let r = evalRun(['--model', MODEL, '--data', bad, '--arm', 'base', '--out', join(dir, 'bad')]);
  assert.equal(r.status, 2);
  assert.match(r.stderr, /bad\.jsonl: line 2: "answer" must be a non-empty string/);
  r = evalRun(['--model', MODEL, '--data', data, '--arm', 'x={not json', '--out', join(dir, 'bad')]);
  assert.equal(r.status, 2);
  assert.match(r.stderr, /--arm 'x': expected NAME/);
  r = evalRun(['--url', 'http://127.0.0.1:1', '--served-model', 'm', '--data', data, '--arm', 'base', '--out', join(dir, 'bad2')]);
  assert.equal(r.status, 1);
  assert.match(r.stderr, /cannot reach http:\/\/127\.0\.0\.1:1/);
  // A steering arm the server refuses (over the scale cap) stops the run with the server's reason.
  r = evalRun(['--url', server.origin, '--api-key', KEY, '--data', data, '--out', join(dir, 'bad3'),
    '--arm', `over=${JSON.stringify({ interventions: [{ op: 'scale', point: 'mlp_act', layer: 1, dims: [0], strength: 1000 }] })}`]);
  assert.equal(r.status, 1);
  assert.match(r.stderr, /arm 'over', problem 's\d+': HTTP 400: .*over the cap of 10 for scale/);
  assert.doesNotMatch(r.stderr, /wrote/, 'no report of a run that stored nothing');
});
