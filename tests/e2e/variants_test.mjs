// Weight variants served beside their base, through the official OpenAI Node SDK (issue 12):
// a request's `model` picks the base or a variant; the greedy tokens of each equal the
// independent reference's (`../shared/testdata/patches/*/reference.json` for the variants, the
// base fixture's own for the base), with base and variant requests in flight together; /v1/models
// lists the variants with their `parent`; the request metrics carry a `model` label.
//
// Two servers: the Qwen3 fixture with its LoRA adapter as PEFT (--variant) and as a llama.cpp
// LoRA GGUF (config `variants:`), and the Qwen3.5 hybrid fixture with the loop-fix edited
// checkpoint, diffed against the base at load.
//
// GB_E2E_GLASSBOX: the glassbox binary; GB_E2E_SHARED: the shared data directory.
// Run: node --test tests/e2e/variants_test.mjs
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { metric, require, startServer } from './server_process.mjs';

const OpenAI = require('openai');
const KEY = 'sk-variants-test';
const BIN = process.env.GB_E2E_GLASSBOX;
const SHARED = process.env.GB_E2E_SHARED;
const readJson = (p) => JSON.parse(readFileSync(`${SHARED}/${p}`, 'utf8'));

const servers = [];
after(() => {
  for (const s of servers) if (s.proc.exitCode === null) s.proc.kill('SIGKILL');
});

async function serve(args, config) {
  if (!BIN || !SHARED) throw new Error('set GB_E2E_GLASSBOX and GB_E2E_SHARED');
  const s = await startServer(`${BIN} serve --threads 1 ${args}`, [`api_key: ${KEY}`, ...config], { requestLog: true });
  servers.push(s);
  s.client = new OpenAI({ apiKey: KEY, baseURL: s.baseURL, maxRetries: 0, timeout: 120_000 });
  return s;
}

// The greedy token ids of a completion (vLLM's return_tokens_as_token_ids names them).
async function greedyIds(client, model, prompt, n) {
  const r = await client.completions.create({
    model, prompt, max_tokens: n, temperature: 0, ignore_eos: true, logprobs: 0, return_tokens_as_token_ids: true,
  });
  assert.equal(r.model, model, 'the answer names the model that served it');
  return r.choices[0].logprobs.tokens.map((t) => {
    assert.match(t, /^token_id:\d+$/);
    return Number(t.slice('token_id:'.length));
  });
}

// Every (sequence, model) request at once, so base and variant rows share engine steps.
async function checkGreedy(s, sequences, expected) {
  const jobs = [];
  for (const [model, greedy] of Object.entries(expected)) {
    sequences.forEach((seq, i) => jobs.push(greedyIds(s.client, model, seq, 16).then((ids) => ({ model, i, ids, want: greedy[i].slice(0, 16) }))));
  }
  for (const { model, i, ids, want } of await Promise.all(jobs)) {
    assert.deepEqual(ids, want, `${model}, sequence ${i}: greedy tokens differ from the reference`);
  }
}

let qwen3, hybrid;
before(async () => {
  const lora = 'testdata/patches/qwen3-lora';
  qwen3 = await serve(`--model ${SHARED}/testdata/reference/qwen3-qknorm/hf --variant lora=${SHARED}/${lora}/adapter`, [
    'served_model_name: qwen3',
    `audit_db: ${join(mkdtempSync(join(tmpdir(), 'glassbox-variants-')), 'audit.db')}`,
    'variants:',
    `  - {name: lora-gguf, path: ${SHARED}/${lora}/adapter.gguf}`,
    'routes:',
    '  canary: [{variant: base, weight: 90}, {variant: lora, weight: 10}]',
    'shadow:',
    '  lora-gguf: {variant: base, share: 1}',
  ]);
  hybrid = await serve(
    `--model ${SHARED}/testdata/reference/qwen35-hybrid/hf --variant loopfix=${SHARED}/testdata/patches/qwen35-loopfix/edited-hf`,
    ['served_model_name: qwen35'],
  );
});

test('a LoRA adapter (PEFT and GGUF) and its base answer with their own reference greedy tokens, together', async () => {
  const ref = readJson('testdata/patches/qwen3-lora/reference.json');
  const base = readJson('testdata/reference/qwen3-qknorm/reference.json');
  await checkGreedy(qwen3, ref.sequences, { qwen3: base.greedy.f32, lora: ref.greedy_16, 'lora-gguf': ref.greedy_16 });
});

test('an edited checkpoint, diffed at load, serves the loop-fix edit beside the hybrid base', async () => {
  const ref = readJson('testdata/patches/qwen35-loopfix/reference.json');
  const base = readJson('testdata/reference/qwen35-hybrid/reference.json');
  await checkGreedy(hybrid, ref.sequences, { qwen35: base.greedy.f32, loopfix: ref.greedy_16 });
  assert.match(hybrid.stderr(), /variant 'loopfix' .*checkpoint, 2 edited matrices/);
  const card = await hybrid.client.models.retrieve('loopfix');
  assert.equal(card.glassbox.variant.sha256, ref.edited_model_sha256, 'its identity is the edited file\'s SHA-256');
});

test('/v1/models lists the base and its variants with their parent', async () => {
  const models = (await qwen3.client.models.list()).data;
  // The config file's variants first, then the --variant flags.
  assert.deepEqual(models.map((m) => [m.id, m.parent]),
    [['qwen3', null], ['lora-gguf', 'qwen3'], ['lora', 'qwen3'], ['canary', null]]);
  assert.deepEqual(models[3].glassbox.route, [{ model: 'qwen3', weight: 90 }, { model: 'lora', weight: 10 }]);
  assert.equal(models[1].glassbox.variant.source, 'gguf-lora');
  assert.equal(models[2].glassbox.variant.source, 'peft');
  assert.equal(models[2].glassbox.variant.edited_matrices, 9);
  assert.equal(models[0].root, `${SHARED}/testdata/reference/qwen3-qknorm/hf`, 'an admin key sees where the weights are');
  const one = await qwen3.client.models.retrieve('lora-gguf');
  assert.equal(one.parent, 'qwen3');
  await assert.rejects(qwen3.client.models.retrieve('nope'), (e) => e.status === 404);
});

test('an unknown model is a 404 naming what is served', async () => {
  await assert.rejects(
    qwen3.client.completions.create({ model: 'lora2', prompt: [1, 2, 3], max_tokens: 2 }),
    (e) => e.status === 404 && /does not exist; this server serves 'qwen3', 'lora-gguf', 'lora', 'canary'/.test(e.message),
  );
});

test('request metrics and logs carry the model; variant info and lora_requests_info are exported', async () => {
  const before = await (await fetch(`${qwen3.origin}/metrics`)).text();
  const count = (m, model) => metric(m, `glassbox_request_finished_total{finish_reason="length",model="${model}"}`) || 0;
  await Promise.all([
    greedyIds(qwen3.client, 'lora', [1, 2, 3], 4), greedyIds(qwen3.client, 'lora', [4, 5], 4),
    greedyIds(qwen3.client, 'qwen3', [1, 2, 3], 4),
  ]);
  // The last request's metrics may land just after its answer.
  let m = '';
  for (let i = 0; i < 100; i++) {
    m = await (await fetch(`${qwen3.origin}/metrics`)).text();
    if (count(m, 'lora') - count(before, 'lora') === 2 && count(m, 'qwen3') - count(before, 'qwen3') === 1) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.equal(count(m, 'lora') - count(before, 'lora'), 2);
  assert.equal(count(m, 'qwen3') - count(before, 'qwen3'), 1);
  assert.equal(count(m, 'lora-gguf') - count(before, 'lora-gguf'), 0);
  assert.ok(metric(m, 'glassbox_time_to_first_token_seconds_count{model="lora"}') >= 2, m);
  assert.match(m, /glassbox_variant_info\{model="lora",version="[0-9a-f]{12}",sha256="[0-9a-f]{64}",source="peft"\} 1/);
  assert.match(m, /glassbox_variant_memory_bytes\{model="lora-gguf"\} \d+/);
  assert.match(m, /glassbox_lora_requests_info\{max_lora="2",running_lora_adapters="[^"]*",waiting_lora_adapters="[^"]*"\} \d+/);
  assert.ok(metric(m, 'glassbox_model_requests_running{model="lora"}') >= 0);
  const lines = qwen3.requestLog().filter((l) => l.event === 'request' && l.status === 200);
  assert.ok(lines.some((l) => l.model === 'lora') && lines.some((l) => l.model === 'qwen3'));
});

async function admin(s, method, path, body) {
  const r = await fetch(`${s.origin}${path}`, {
    method, headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: r.status, body: await r.json() };
}

test('run-time load, a refused wrong hash under traffic, replace, rollback and unload, each audited', async () => {
  const ref = readJson('testdata/patches/qwen3-lora/reference.json');
  const base = readJson('testdata/reference/qwen3-qknorm/reference.json');
  const seq = ref.sequences[1];
  const wantLora = ref.greedy_16[1], wantBase = base.greedy.f32[1].slice(0, 16);
  const adapter = `${SHARED}/testdata/patches/qwen3-lora/adapter`;
  const gguf = `${SHARED}/testdata/patches/qwen3-lora/adapter.gguf`;

  // Traffic on the base and on a served variant while a load with a wrong hash is refused.
  let stop = false, served = 0;
  const errors = [];
  const traffic = ['qwen3', 'lora', 'qwen3', 'lora-gguf'].map(async (model) => {
    while (!stop) {
      try {
        const ids = await greedyIds(qwen3.client, model, seq, 16);
        assert.deepEqual(ids, model === 'qwen3' ? wantBase : wantLora, model);
        served++;
      } catch (e) {
        errors.push(`${model}: ${e.message}`);
      }
    }
  });
  const wrong = await admin(qwen3, 'PUT', '/admin/variants/lora', { path: gguf, sha256: '0'.repeat(64) });
  assert.equal(wrong.status, 409, JSON.stringify(wrong.body));
  assert.match(wrong.body.error.message, /the running version keeps serving/);
  await new Promise((r) => setTimeout(r, 300));
  stop = true;
  await Promise.all(traffic);
  assert.deepEqual(errors, [], 'no request failed while the load was refused');
  assert.ok(served >= 4, `${served} requests served`);
  assert.equal((await qwen3.client.models.retrieve('lora')).glassbox.variant.source, 'peft', 'lora is unchanged');

  // A new name loaded while serving.
  const loaded = await admin(qwen3, 'PUT', '/admin/variants/lora-rt', { path: adapter });
  assert.equal(loaded.status, 200, JSON.stringify(loaded.body));
  assert.deepEqual(await greedyIds(qwen3.client, 'lora-rt', seq, 16), wantLora);
  const v1 = await qwen3.client.completions.create({ model: 'lora-rt', prompt: seq, max_tokens: 8, temperature: 0, logprobs: 2 });

  // Replaced by a second version (the same adapter at half strength): other outputs.
  const sha = (await qwen3.client.models.retrieve('lora-rt')).glassbox.variant.sha256;
  const v2 = await admin(qwen3, 'PUT', '/admin/variants/lora-rt', { path: adapter, sha256: sha, scale: 0.5 });
  assert.equal(v2.status, 200, JSON.stringify(v2.body));
  assert.notDeepEqual(await greedyIds(qwen3.client, 'lora-rt', seq, 16), wantLora);

  // Rolled back: the first version's outputs exactly (tokens and logprobs).
  const back = await admin(qwen3, 'POST', '/admin/variants/lora-rt/rollback');
  assert.equal(back.status, 200, JSON.stringify(back.body));
  const again = await qwen3.client.completions.create({ model: 'lora-rt', prompt: seq, max_tokens: 8, temperature: 0, logprobs: 2 });
  assert.deepEqual(again.choices[0].logprobs, v1.choices[0].logprobs);
  const listed = (await admin(qwen3, 'GET', '/admin/variants')).body.data.find((v) => v.name === 'lora-rt');
  assert.ok(listed.previous, 'the replaced version stands by');

  // Unloaded: 404 for requests, gone from /v1/models, a second delete is 404.
  const del = await admin(qwen3, 'DELETE', '/admin/variants/lora-rt');
  assert.equal(del.status, 200, JSON.stringify(del.body));
  await assert.rejects(qwen3.client.completions.create({ model: 'lora-rt', prompt: seq, max_tokens: 2 }), (e) => e.status === 404);
  assert.ok(!(await qwen3.client.models.list()).data.some((m) => m.id === 'lora-rt'));
  assert.equal((await admin(qwen3, 'DELETE', '/admin/variants/lora-rt')).status, 404);
  assert.equal((await admin(qwen3, 'POST', '/admin/variants/lora/rollback')).status, 409, 'no previous version');
  assert.equal((await admin(qwen3, 'PUT', '/admin/variants/qwen3', { path: adapter })).status, 400, 'not the base');
  assert.equal((await admin(qwen3, 'PUT', '/admin/variants/x', { path: `${SHARED}/nope` })).status, 400);

  // Every change is an audit row; the refused one is not.
  const rows = (await admin(qwen3, 'GET', '/admin/audit?kind=variant')).body.data;
  assert.deepEqual(rows.map((r) => r.action), ['load', 'load', 'rollback', 'unload']);
});

test('a 90/10 canary over 1,000 users lands inside binomial bounds and keeps each user on one arm', async () => {
  const ask = async (user) => {
    const r = await qwen3.client.completions.create({ model: 'canary', prompt: [1, 2, 3], max_tokens: 1, temperature: 0, user });
    return r.model;
  };
  const arms = new Array(1000);
  for (let start = 0; start < 1000; start += 25) {
    await Promise.all(Array.from({ length: 25 }, (_, k) => ask(`user-${start + k}`).then((m) => { arms[start + k] = m; })));
  }
  const onLora = arms.filter((m) => m === 'lora').length;
  assert.equal(arms.filter((m) => m === 'qwen3').length + onLora, 1000, 'every answer names an arm');
  // Binomial(1000, 0.1): mean 100, sd 9.5; 4.5 sd either side.
  assert.ok(onLora >= 57 && onLora <= 143, `${onLora} of 1000 on the 10% arm`);
  for (let i = 0; i < 100; i++) assert.equal(await ask(`user-${i}`), arms[i], `user-${i} changed arm`);
  const m = await (await fetch(`${qwen3.origin}/metrics`)).text();
  assert.ok(metric(m, 'glassbox_route_requests_total{route="canary",model="lora"}') >= onLora);
  const logged = qwen3.requestLog().filter((l) => l.route === 'canary');
  assert.ok(logged.length >= 1000 && logged.every((l) => l.model === 'qwen3' || l.model === 'lora'));
});

test('shadow mode: every lora-gguf request also runs on the base in the background, logged, never returned', async () => {
  const ref = readJson('testdata/patches/qwen3-lora/reference.json');
  const base = readJson('testdata/reference/qwen3-qknorm/reference.json');
  const ids = [];
  for (let i = 0; i < 3; i++) {
    const r = await qwen3.client.completions.create({
      model: 'lora-gguf', prompt: ref.sequences[i], max_tokens: 16, temperature: 0, ignore_eos: true, logprobs: 0,
      return_tokens_as_token_ids: true,
    });
    assert.equal(r.model, 'lora-gguf');
    assert.deepEqual(r.choices[0].logprobs.tokens.map((t) => Number(t.slice(9))), ref.greedy_16[i], 'the answer is the variant\'s');
    ids.push(r.id);
  }
  // The monitor thread logs finished copies every 500 ms.
  let lines = [];
  for (let k = 0; k < 100 && lines.length < 3; k++) {
    lines = qwen3.requestLog().filter((l) => l.event === 'shadow' && ids.includes(l.request_id));
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(lines.length, 3);
  for (const l of lines) {
    const i = ids.indexOf(l.request_id);
    assert.equal(l.model, 'lora-gguf');
    assert.equal(l.shadow_model, 'qwen3');
    assert.deepEqual(l.token_ids, base.greedy.f32[i].slice(0, 16), 'the copy ran on the base');
  }
  const m = await (await fetch(`${qwen3.origin}/metrics`)).text();
  assert.ok(metric(m, 'glassbox_shadow_requests_total{model="lora-gguf",shadow="qwen3"}') >= 3);
});

test('canary weights and shadow copies change at run time through /admin/routes, audited; what they name stays loaded', async () => {
  const listed = (await admin(qwen3, 'GET', '/admin/routes')).body;
  assert.deepEqual(listed.routes.canary, [{ variant: 'qwen3', weight: 90 }, { variant: 'lora', weight: 10 }]);
  assert.deepEqual(listed.shadow['lora-gguf'], { variant: 'qwen3', share: 1 });

  // A new 50/50 route: both arms serve, each user sticks to one, /v1/models lists it.
  const put = await admin(qwen3, 'PUT', '/admin/routes/split', { arms: [{ variant: 'base', weight: 1 }, { variant: 'lora', weight: 1 }] });
  assert.equal(put.status, 200, JSON.stringify(put.body));
  assert.deepEqual((await qwen3.client.models.retrieve('split')).glassbox.route, [{ model: 'qwen3', weight: 1 }, { model: 'lora', weight: 1 }]);
  const ask = async (user) => (await qwen3.client.completions.create({ model: 'split', prompt: [1, 2], max_tokens: 1, user })).model;
  const served = await Promise.all(Array.from({ length: 40 }, (_, i) => ask(`u${i}`)));
  assert.ok(served.includes('qwen3') && served.includes('lora'), served.join(' '));
  assert.equal(await ask('u7'), served[7], 'sticky');
  // Shift it all to the base by weight: the same users now land on the base.
  assert.equal((await admin(qwen3, 'PUT', '/admin/routes/split', { arms: [{ variant: 'base', weight: 1 }] })).status, 200);
  for (let i = 0; i < 10; i++) assert.equal(await ask(`u${i}`), 'qwen3');

  // Refused, nothing changed: an unknown arm, a served model's name, a bad weight, a stray key.
  const refused = [
    ['PUT', '/admin/routes/split', { arms: [{ variant: 'nope', weight: 1 }] }, 400, /neither the base/],
    ['PUT', '/admin/routes/lora', { arms: [{ variant: 'base', weight: 1 }] }, 409, /served model's name/],
    ['PUT', '/admin/routes/split', { arms: [{ variant: 'base', weight: -1 }] }, 400, /weight/],
    ['PUT', '/admin/routes/split', { arms: [{ variant: 'base', weight: 1 }], sticky: false }, 400, /expected an object/],
    ['PUT', '/admin/shadow/split', { variant: 'base', share: 1.5 }, 400, /share/],
    ['PUT', '/admin/shadow/nope', { variant: 'base', share: 1 }, 404, /no model or route/],
    // What a route or shadow names cannot be unloaded under it.
    ['DELETE', '/admin/variants/lora', undefined, 409, /an arm of route 'canary'/],
    ['DELETE', '/admin/variants/lora-gguf', undefined, 409, /shadow 'lora-gguf'/],
    ['PUT', '/admin/variants/split', { path: `${SHARED}/testdata/patches/qwen3-lora/adapter` }, 409, /route alias/],
  ];
  for (const [method, path, body, status, message] of refused) {
    const r = await admin(qwen3, method, path, body);
    assert.equal(r.status, status, `${method} ${path} ${JSON.stringify(body)}: ${JSON.stringify(r.body)}`);
    assert.match(r.body.error.message, message);
  }
  assert.deepEqual((await qwen3.client.models.retrieve('split')).glassbox.route, [{ model: 'qwen3', weight: 1 }]);

  // A shadow on the route; the route cannot go while it is copied.
  assert.equal((await admin(qwen3, 'PUT', '/admin/shadow/split', { variant: 'lora', share: 0.5 })).status, 200);
  assert.deepEqual((await admin(qwen3, 'GET', '/admin/routes')).body.shadow.split, { variant: 'lora', share: 0.5 });
  assert.equal((await admin(qwen3, 'DELETE', '/admin/routes/split')).status, 409);
  assert.equal((await admin(qwen3, 'DELETE', '/admin/shadow/split')).status, 200);
  assert.equal((await admin(qwen3, 'DELETE', '/admin/shadow/split')).status, 404);
  assert.equal((await admin(qwen3, 'DELETE', '/admin/routes/split')).status, 200);
  await assert.rejects(qwen3.client.models.retrieve('split'), (e) => e.status === 404);
  await assert.rejects(ask('u1'), (e) => e.status === 404);

  const rows = (await admin(qwen3, 'GET', '/admin/audit?kind=route')).body.data;
  assert.deepEqual(rows.map((r) => r.action), ['set', 'set', 'set_shadow', 'delete_shadow', 'delete']);
  assert.deepEqual(rows[1].spec.replaced, [{ variant: 'qwen3', weight: 1 }, { variant: 'lora', weight: 1 }]);
});

test('a patch whose manifest gives golden prompts loads only when its greedy tokens match them', async () => {
  const ref = readJson('testdata/patches/qwen35-loopfix/reference.json');
  const dir = mkdtempSync(join(tmpdir(), 'glassbox-golden-'));
  const patchDir = (name, golden) => {
    const out = join(dir, name);
    execFileSync(BIN, ['patch', 'diff', '--base', `${SHARED}/testdata/reference/qwen35-hybrid/hf`,
      '--edited', `${SHARED}/testdata/patches/qwen35-loopfix/edited-hf`, '-o', out, '--name', name]);
    const manifest = JSON.parse(readFileSync(join(out, 'manifest.json'), 'utf8'));
    manifest.golden = golden;
    writeFileSync(join(out, 'manifest.json'), JSON.stringify(manifest));
    return out;
  };
  const good = patchDir('good', [0, 1].map((i) => ({ prompt: ref.sequences[i], greedy: ref.greedy_16[i] })));
  const loaded = await admin(hybrid, 'PUT', '/admin/variants/loopfix-v2', { path: good });
  assert.equal(loaded.status, 200, JSON.stringify(loaded.body));
  assert.deepEqual(await greedyIds(hybrid.client, 'loopfix-v2', ref.sequences[2], 16), ref.greedy_16[2]);
  // The base's tokens are not the edit's: refused, nothing changed.
  const base = readJson('testdata/reference/qwen35-hybrid/reference.json');
  const bad = patchDir('bad', [{ prompt: ref.sequences[0], greedy: base.greedy.f32[0].slice(0, 16) }]);
  const refused = await admin(hybrid, 'PUT', '/admin/variants/loopfix-v3', { path: bad });
  assert.equal(refused.status, 400, JSON.stringify(refused.body));
  assert.match(refused.body.error.message, /golden prompt 0 of the manifest: greedy tokens \[.*\], the manifest expects/);
  assert.ok(!(await hybrid.client.models.list()).data.some((m) => m.id === 'loopfix-v3'));
  // Configured at start, the same patch stops the server before it is ready.
  await assert.rejects(
    startServer(`${BIN} serve --threads 1 --model ${SHARED}/testdata/reference/qwen35-hybrid/hf --variant bad=${bad}`,
      [`api_key: ${KEY}`]),
    /self-test of variant 'bad': golden prompt 0 of the manifest/);
});
