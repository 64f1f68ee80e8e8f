// The glass box end to end on the real engine (stories260K), with the official OpenAI Node SDK
// sending the `glassbox` extension through extra_body: observation reports, no massive
// activation on stories260K, identity and effect of interventions, the policy (403 / 400 over a
// cap), and the audit trail — ending with a SIGKILL right after the answers, after which every
// answered request's audit row is in the store (`glassbox audit`).
//
// GB_E2E_SERVER: "build/glassbox serve --model ../shared/models/stories260K ..." (the audit CLI is
// the same binary). Run: node --test tests/e2e/glassbox_test.mjs
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { metric, require, startServer } from './server_process.mjs';

const OpenAI = require('openai');
const ADMIN = 'sk-gb-admin', RESEARCHER = 'sk-gb-researcher', USER = 'sk-gb-user';
const auditDb = join(mkdtempSync(join(tmpdir(), 'glassbox-audit-')), 'audit.db');
let server = null;
let model = '';
const client = (key) => new OpenAI({ apiKey: key, baseURL: server.baseURL, maxRetries: 0, timeout: 60_000 });

before(async () => {
  const command = process.env.GB_E2E_SERVER;
  if (!command) throw new Error('set GB_E2E_SERVER (a server command)');
  server = await startServer(command, [
    `api_key: ${ADMIN}`,
    'keys:',
    `  - {id: rita, key: ${RESEARCHER}, role: researcher}`,
    `  - {id: uma, key: ${USER}, role: user}`,
    'interventions: true',
    `audit_db: ${auditDb}`,
    'glassbox_policy:',
    '  caps: {scale: 10, add: 100}',
  ]);
  server.binary = command.split(/\s+/)[0];
  model = (await client(USER).models.list()).data[0].id;
});

after(() => {
  if (server && server.proc.exitCode === null) server.proc.kill('SIGKILL');
});

const PROMPT = 'Once upon a time';
async function complete(key, glassbox, extra = {}) {
  return client(key).completions.create({
    model, prompt: PROMPT, max_tokens: 16, temperature: 0, ignore_eos: true, logprobs: 1, ...extra,
    ...(glassbox ? { glassbox } : {}),
  });
}

test('observation: per-layer statistics, top dims, captures; nothing massive in stories260K', async () => {
  const r = await complete(USER, {
    observe: { points: ['resid_post', 'mlp_act'], layers: 'all', tokens: 'all', top_k: 3,
      capture: [{ point: 'resid_post', layer: 4, token: 0 }] },
  });
  const g = r.choices[0].glassbox;
  assert.equal(g.report.length, 5 * 2, 'five layers × two points');
  for (const s of g.report) {
    assert.ok(['resid_post', 'mlp_act'].includes(s.point));
    assert.equal(s.tokens, r.usage.prompt_tokens + r.usage.completion_tokens - 1, 'every computed row observed once');
    assert.ok(s.max_abs > 0 && s.median_abs > 0 && s.rms > 0);
    // The residual stream of stories260K has no massive activations: max / median below 10.
    if (s.point === 'resid_post') assert.ok(s.max_ratio < 10, `layer ${s.layer}: max/median ${s.max_ratio}`);
    assert.equal(s.top.length, 3);
    assert.ok(s.top[0].abs >= s.top[1].abs);
  }
  assert.deepEqual(g.events, []);
  assert.equal(g.captures.length, 1);
  assert.equal(g.captures[0].values.length, 64);
  assert.deepEqual(g.applied, []);
});

test('attention sinks: per layer and head, the first token\'s mass; attn_in is a point', async () => {
  const r = await complete(USER, { observe: { points: ['attn_in'], attention_sinks: true } });
  const g = r.choices[0].glassbox;
  assert.equal(g.report.length, 5, 'attn_in on five layers');
  assert.ok(g.report.every((s) => s.point === 'attn_in' && s.max_abs > 0));
  const s = g.attention_sinks;
  assert.equal(s.sink_tokens, 1);
  assert.equal(s.layers.length, 5);
  const rows = r.usage.prompt_tokens + r.usage.completion_tokens - 1;
  for (const l of s.layers) {
    assert.equal(l.tokens, rows, 'every computed row once');
    assert.equal(l.mean.length, 8, 'eight query heads');
    for (let h = 0; h < 8; h++) {
      // Token 0 attends only to itself: the max is 1 there, and every mean is at least 1/rows.
      assert.equal(l.max[h], 1);
      assert.equal(l.max_token[h], 0);
      assert.ok(l.mean[h] >= 1 / rows - 1e-6 && l.mean[h] <= 1, `layer ${l.layer} head ${h}: ${l.mean[h]}`);
    }
  }
});

test('identity interventions leave the output bit-identical; a strong one changes it', async () => {
  const plain = await complete(USER);
  const identity = await complete(RESEARCHER, {
    interventions: [
      { op: 'scale', point: 'mlp_act', layer: 2, dims: [7, 100], strength: 0 },
      { op: 'add', point: 'resid_post', layers: 'all', dims: [3], strength: 0 },
      { op: 'clamp', point: 'resid_mid', layers: { from: 0, to: 4 }, strength: 'inf' },
    ],
  });
  assert.equal(identity.choices[0].text, plain.choices[0].text);
  assert.deepEqual(identity.choices[0].logprobs.token_logprobs, plain.choices[0].logprobs.token_logprobs);
  assert.equal(identity.choices[0].glassbox.applied.length, 3);
  assert.ok(identity.choices[0].glassbox.applied.every((a) => a.rows > 0));

  const steered = await complete(RESEARCHER, {
    interventions: [{ op: 'add', point: 'resid_post', layers: 'all', vector: Array(64).fill(3), strength: 1 }],
  });
  assert.notEqual(steered.choices[0].text, plain.choices[0].text);
});

test('steered and plain requests in one batch each equal themselves alone', async () => {
  const steer = { interventions: [{ op: 'scale', point: 'mlp_act', layers: 'all', strength: -0.9 }] };
  const aloneA = await complete(RESEARCHER, steer);
  const aloneB = await complete(USER);
  const [a, b] = await Promise.all([complete(RESEARCHER, steer), complete(USER)]);
  assert.equal(a.choices[0].text, aloneA.choices[0].text);
  assert.deepEqual(a.choices[0].logprobs.token_logprobs, aloneA.choices[0].logprobs.token_logprobs);
  assert.equal(b.choices[0].text, aloneB.choices[0].text);
  assert.deepEqual(b.choices[0].logprobs.token_logprobs, aloneB.choices[0].logprobs.token_logprobs);
  assert.notEqual(aloneA.choices[0].text, aloneB.choices[0].text);
});

test('policy: a user may not intervene (403), over a cap is 400 naming it', async () => {
  const steer = { interventions: [{ op: 'scale', point: 'mlp_act', layer: 1, dims: [5], strength: 0.5 }] };
  await assert.rejects(complete(USER, steer), (e) => e.status === 403 && /may not intervene/.test(e.message));
  const over = { interventions: [{ op: 'scale', point: 'mlp_act', layer: 1, dims: [5], strength: 11 }] };
  await assert.rejects(complete(RESEARCHER, over),
    (e) => e.status === 400 && /cap of 10/.test(e.message) && e.param === 'glassbox.interventions[0].strength');
});

test('caps bound stacked items; an admin session is not open to a user key', async () => {
  // 256 scales of 10 used to turn activations into NaN and answer 200 with empty text.
  const stacked = { interventions: Array(256).fill({ op: 'scale', point: 'mlp_act', layer: 1, strength: 10 }) };
  await assert.rejects(complete(RESEARCHER, stacked),
    (e) => e.status === 400 && e.code === 'cap_exceeded' && /stacked scale/.test(e.message));
  const admin = { Authorization: `Bearer ${ADMIN}`, 'Content-Type': 'application/json' };
  const put = await fetch(`${server.origin}/admin/glassbox/sessions/lab`, {
    method: 'PUT', headers: admin,
    body: JSON.stringify({ interventions: [{ op: 'scale', point: 'mlp_act', layers: 'all', strength: -0.9 }] }),
  });
  assert.equal(put.status, 200, await put.text());
  const withSession = (key) => fetch(`${server.origin}/v1/completions`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json', 'X-Glassbox-Session': 'lab' },
    body: JSON.stringify({ model, prompt: PROMPT, max_tokens: 4, temperature: 0 }),
  });
  const asUser = await withSession(USER);
  assert.equal(asUser.status, 403, 'a user key gets no admin session');
  assert.equal((await asUser.json()).error.code, 'session_not_allowed');
  const asResearcher = await withSession(RESEARCHER);
  assert.equal(asResearcher.status, 200);
  assert.equal((await asResearcher.json()).choices[0].glassbox.applied.length, 1);
});

test('the monitor counts nothing on stories260K and exports its ratio histogram', async () => {
  const m = await (await fetch(`${server.origin}/metrics`)).text();
  assert.ok(metric(m, 'glassbox_monitor_steps_total') > 0);
  assert.equal(metric(m, 'glassbox_massive_activation_events_total{layer="0"}'), 0);
  assert.ok(metric(m, 'glassbox_massive_activation_ratio_count{layer="4"}') > 0);
  assert.equal(metric(m, 'glassbox_massive_activation_ratio_bucket{layer="4",le="10"}'),
    metric(m, 'glassbox_massive_activation_ratio_count{layer="4"}'), 'every sampled step below 10');
});

// Last: it kills the server.
test('SIGKILL right after the answers: every answered intervention request has its audit row', async () => {
  const steer = (i) => ({ interventions: [{ op: 'scale', point: 'mlp_act', layer: i % 5, dims: [i], strength: 0.01 * i }] });
  const answered = await Promise.all([...Array(12).keys()].map((i) => complete(RESEARCHER, steer(i), { max_tokens: 4 })));
  server.proc.kill('SIGKILL');
  await new Promise((resolve) => server.proc.on('exit', resolve));
  const rows = execFileSync(server.binary, ['audit', '--db', auditDb, '--kind', 'request', '--limit', '1000', '--json'])
    .toString().trim().split('\n').map((l) => JSON.parse(l));
  const ids = new Set(rows.map((r) => r.request_id));
  for (const r of answered) assert.ok(ids.has(r.id), `no audit row for ${r.id}`);
  const row = rows.find((r) => r.request_id === answered[5].id);
  assert.equal(row.key_id, 'rita');
  assert.equal(row.completion_tokens, 4);
  assert.equal(row.spec.glassbox.interventions[0].dims[0], 5);
});
