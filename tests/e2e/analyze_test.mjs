// POST /v1/glassbox/analyze on the real engine (stories260K): scan, depth and lens over HTTP give
// the numbers the CLI computes offline on the same model (one analysis library, the same glass-box
// requests), the lens' last layer is the model's greedy next token, and bad bodies, roles and
// budgets are refused with the field named.
// GB_E2E_GLASSBOX: the glassbox binary; GB_E2E_SHARED: ../shared.
// Run: node --test tests/e2e/analyze_test.mjs
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { require, startServer } from './server_process.mjs';

const OpenAI = require('openai');
const KEY = 'sk-analyst', USER = 'sk-user', RESEARCHER = 'sk-researcher';
const glassbox = process.env.GB_E2E_GLASSBOX;
const model = join(process.env.GB_E2E_SHARED ?? '', 'models/stories260K');
const PROMPTS = ['Once upon a time, there was a little girl.', 'The cat sat on the mat and looked at the sun.'];
let server = null;
let promptsFile = '';

before(async () => {
  if (!glassbox) throw new Error('set GB_E2E_GLASSBOX and GB_E2E_SHARED');
  promptsFile = join(mkdtempSync(join(tmpdir(), 'glassbox-analyze-')), 'prompts.txt');
  writeFileSync(promptsFile, PROMPTS.join('\n') + '\n');
  const dir = mkdtempSync(join(tmpdir(), 'glassbox-analyze-audit-'));
  server = await startServer(`${glassbox} serve --model ${model} --threads 1 --max-num-batched-tokens 512`, [
    `api_key: ${KEY}`,
    'keys:',
    `  - {id: uma, key: ${USER}, role: user}`,
    `  - {id: rita, key: ${RESEARCHER}, role: researcher}`,
    'interventions: true',
    `audit_db: ${join(dir, 'audit.db')}`,
    'glassbox_policy:',
    '  observe_roles: [researcher, admin]',
    '  intervention_roles: [admin]',
    'max_request_observation_bytes: 200000',
  ]);
});
after(() => server?.proc.kill('SIGTERM'));

async function analyze(body, key = KEY) {
  const r = await fetch(`${server.origin}/v1/glassbox/analyze`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: r.status, body: await r.json(), id: r.headers.get('x-request-id') };
}

function cli(args) {
  return JSON.parse(execFileSync(glassbox, [...args, '--model', model, '--threads', '1', '--json'], { encoding: 'utf8' }));
}

test('scan over HTTP equals glassbox scan on the same prompts', async () => {
  // A loosened rule, so stories260K (no massive activations) has events to compare.
  const r = await analyze({ kind: 'scan', prompts: PROMPTS, top_k: 3, massive: { min_abs: 1, min_ratio: 4 } });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.object, 'glassbox.analysis');
  assert.equal(r.body.kind, 'scan');
  assert.equal(r.body.model, 'stories260K');
  const local = cli(['scan', '--prompts', promptsFile, '--top-k', '3', '--min-abs', '1', '--min-ratio', '4']);
  const res = r.body.result;
  assert.equal(res.layers.length, 5);
  assert.deepEqual(res.layers, local.layers, 'the same per-layer rows, numbers and tokens');
  assert.deepEqual(res.emergence_layer, local.emergence_layer);
  assert.ok(res.emergence_layer !== null, 'the loosened rule finds an emergence layer');
  assert.equal(res.events, local.events);
  // The attention-sink rows (first-token attention mass per layer) equal scan --sinks.
  const sk = await analyze({ kind: 'scan', prompts: PROMPTS, sinks: true });
  assert.equal(sk.status, 200, JSON.stringify(sk.body));
  const localSinks = cli(['scan', '--prompts', promptsFile, '--sinks']);
  assert.equal(sk.body.result.attention_sinks.length, 5);
  assert.deepEqual(sk.body.result.attention_sinks, localSinks.attention_sinks);
  // The heat map: one row per layer, one ratio per token of the first prompt.
  const h = await analyze({ kind: 'scan', prompt: PROMPTS[0], heat_map: true });
  assert.equal(h.status, 200, JSON.stringify(h.body));
  assert.equal(h.body.result.heat_map.length, 5);
  for (const row of h.body.result.heat_map) {
    assert.equal(row.length, h.body.usage.prompt_tokens);
    for (const v of row) assert.ok(v >= 1, `max/median ≥ 1, got ${v}`);
  }
});

test('depth over HTTP equals glassbox depth; the angular distances are consistent', async () => {
  const r = await analyze({ kind: 'depth', prompts: PROMPTS });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const local = cli(['depth', '--prompts', promptsFile]);
  assert.equal(r.body.result.n_tokens, local.n_tokens);
  assert.equal(r.body.result.n_prompts, 2);
  // Every number but the wall-time shares (measured, so never equal twice).
  const untimed = (layers) => layers.map(({ time_share, ...rest }) => rest);
  assert.deepEqual(untimed(r.body.result.layers), untimed(local.layers));
  const shares = r.body.result.layers.map((l) => l.time_share);
  assert.ok(shares.every((s) => s > 0), `every layer takes time: ${shares}`);
  const total = shares.reduce((a, b) => a + b, 0) + r.body.result.step_time.head.share;
  assert.ok(Math.abs(total - 1) < 1e-6, `the shares and the head's sum to 1: ${total}`);
  assert.deepEqual(r.body.result.best_blocks, local.best_blocks);
  for (const l of r.body.result.layers) {
    assert.equal(l.angular_distance.length, 5 - l.layer);
    assert.ok(l.block_influence > 0 && l.block_influence < 1);
  }
});

test('depth skip over HTTP equals glassbox depth --skip, needs the intervention role and is audited', async () => {
  const r = await analyze({ kind: 'depth', prompts: PROMPTS, skip: true, skip_block: 3 });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const local = cli(['depth', '--prompts', promptsFile, '--skip', '--skip-block', '3']);
  assert.deepEqual(r.body.result.skip, local.skip, 'the same perplexities, layers and blocks');
  assert.equal(r.body.result.skip.layers.length, 5);
  assert.deepEqual(r.body.result.skip.blocks.map((b) => b.n), [2, 3]);
  // Its audit row was written (committed before the skip runs) and records the outcome.
  const rows = await fetch(`${server.origin}/admin/audit?request_id=${encodeURIComponent(r.id)}`,
    { headers: { Authorization: `Bearer ${KEY}` } }).then((x) => x.json());
  assert.equal(rows.data.length, 1, JSON.stringify(rows));
  assert.equal(rows.data[0].kind, 'request');
  assert.equal(rows.data[0].action, '/v1/glassbox/analyze');
  assert.equal(rows.data[0].status, 200);
  assert.equal(rows.data[0].spec.analysis.skip_block, 3);
  // A researcher may observe (depth without skip) but not intervene here (intervention_roles: [admin]).
  assert.equal((await analyze({ kind: 'depth', prompt: PROMPTS[0] }, RESEARCHER)).status, 200);
  const refused = await analyze({ kind: 'depth', prompt: PROMPTS[0], skip: true }, RESEARCHER);
  assert.equal(refused.status, 403, JSON.stringify(refused.body));
  assert.match(refused.body.error.message, /may not intervene/);
  // Plain analyses write no audit row.
  const none = await analyze({ kind: 'depth', prompt: PROMPTS[0] });
  const noRows = await fetch(`${server.origin}/admin/audit?request_id=${encodeURIComponent(none.id)}`,
    { headers: { Authorization: `Bearer ${KEY}` } }).then((x) => x.json());
  assert.equal(noRows.data.length, 0);
});

test('lens over HTTP equals glassbox lens; its last layer is the greedy next token', async () => {
  const r = await analyze({ kind: 'lens', prompt: PROMPTS[0], top_k: 2 });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const local = cli(['lens', '--prompt', PROMPTS[0], '--top-k', '2']);
  assert.deepEqual(r.body.result.layers.map((l) => l.positions.map((p) => p.top.map((t) => t.id))),
    local.layers.map((l) => l.positions.map((p) => p.top.map((t) => t.id))));
  for (let l = 0; l < 5; l++) {
    for (let p = 0; p < local.layers[l].positions.length; p++) {
      const a = r.body.result.layers[l].positions[p], b = local.layers[l].positions[p];
      assert.ok(Math.abs(a.entropy - b.entropy) < 1e-9 && Math.abs(a.top[0].prob - b.top[0].prob) < 1e-9);
    }
  }
  // At the last layer the lens is the model: its top-1 at the last position is the greedy token.
  const client = new OpenAI({ apiKey: KEY, baseURL: server.baseURL, maxRetries: 0 });
  const done = await client.completions.create({ model: 'stories260K', prompt: PROMPTS[0], max_tokens: 1, temperature: 0,
    logprobs: 1 });
  const last = r.body.result.layers[4].positions.at(-1).top[0];
  assert.ok(last.prob > 0 && last.text.trim().length > 0);
  assert.equal(last.text.trim(), done.choices[0].text.trim(), 'the lens at the last layer names the greedy next token');
});

test('bad bodies, roles and budgets are refused, naming the field', async () => {
  const cases = [
    [{ kind: 'x', prompt: 'a' }, 400, 'kind'],
    [{ kind: 'scan' }, 400, 'prompts'],
    [{ kind: 'scan', prompt: 'a', prompts: ['b'] }, 400, 'prompts'],
    [{ kind: 'scan', prompt: 'a', colour: 1 }, 400, 'colour'],
    [{ kind: 'scan', prompt: 'a', points: ['nowhere'] }, 400, 'points'],
    [{ kind: 'scan', prompt: 'a', top_k: 99 }, 400, 'top_k'],
    [{ kind: 'scan', prompt: 'a', massive: { min_abs: -1 } }, 400, 'massive.min_abs'],
    [{ kind: 'depth', prompt: 'a', heat_map: true }, 400, 'heat_map'],
    [{ kind: 'scan', prompt: 'a', sinks: 1 }, 400, 'sinks'],
    [{ kind: 'scan', prompt: 'a', skip: true }, 400, 'skip'],
    [{ kind: 'depth', prompt: 'a b', skip_block: 2 }, 400, 'skip_block'],
    [{ kind: 'depth', prompt: 'a b', skip: true, skip_block: 9 }, 400, 'skip_block'],
    [{ kind: 'depth', prompt: [1], skip: true }, 400, 'prompts'],
    [{ kind: 'scan', prompt: 'a', massive: { median: 'row' } }, 400, 'massive.median'],
    [{ kind: 'lens', prompts: ['a', 'b'] }, 400, 'prompts'],
    [{ kind: 'scan', prompt: [1, 99999] }, 400, 'prompt'],
    [{ kind: 'scan', prompt: '' }, 400, 'prompt'],
    [{ kind: 'scan', prompts: Array(17).fill('a') }, 400, 'prompts'],
    [{ kind: 'scan', prompt: 'a', model: 'nope' }, 404, 'model'],
    // 2 prompts × 5 layers × 5 points of depth captures: over max_request_observation_bytes.
    [{ kind: 'depth', prompt: 'Once upon a time '.repeat(40) }, 400, 'prompts'],
  ];
  for (const [body, status, param] of cases) {
    const r = await analyze(body);
    assert.equal(r.status, status, `${JSON.stringify(body).slice(0, 80)}: ${JSON.stringify(r.body)}`);
    assert.equal(r.body.error.param, param, JSON.stringify(r.body));
  }
  const big = await analyze({ kind: 'depth', prompt: 'Once upon a time '.repeat(40) });
  assert.equal(big.body.error.code, 'observation_budget_exceeded');
  const r = await analyze({ kind: 'scan', prompt: 'a' }, USER);
  assert.equal(r.status, 403, JSON.stringify(r.body));
  assert.match(r.body.error.message, /may not observe/);
  const unauth = await analyze({ kind: 'scan', prompt: 'a' }, 'sk-wrong');
  assert.equal(unauth.status, 401);
  // The server is still serving.
  assert.equal((await analyze({ kind: 'scan', prompt: 'a' })).status, 200);
});
