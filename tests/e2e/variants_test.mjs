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
import { readFileSync } from 'node:fs';
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
    'variants:',
    `  - {name: lora-gguf, path: ${SHARED}/${lora}/adapter.gguf}`,
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
  assert.deepEqual(models.map((m) => [m.id, m.parent]), [['qwen3', null], ['lora-gguf', 'qwen3'], ['lora', 'qwen3']]);
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
    (e) => e.status === 404 && /does not exist; this server serves 'qwen3', 'lora-gguf', 'lora'/.test(e.message),
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
  assert.match(m, /glassbox_variant_info\{model="lora",version="",sha256="[0-9a-f]{64}",source="peft"\} 1/);
  assert.match(m, /glassbox_variant_memory_bytes\{model="lora-gguf"\} \d+/);
  assert.match(m, /glassbox_lora_requests_info\{max_lora="2",running_lora_adapters="[^"]*",waiting_lora_adapters="[^"]*"\} \d+/);
  assert.ok(metric(m, 'glassbox_model_requests_running{model="lora"}') >= 0);
  const lines = qwen3.requestLog().filter((l) => l.event === 'request' && l.status === 200);
  assert.ok(lines.some((l) => l.model === 'lora') && lines.some((l) => l.model === 'qwen3'));
});
