// End-to-end test of the OpenAI-compatible server with the official OpenAI Node SDK (v6):
// chat and completions, streaming and not, usage, stop strings, seeds, logprobs, each error
// status, and a SIGTERM drain. It starts the server itself (GB_E2E_SERVER: the command, e.g.
// "build/glassbox serve --model ../shared/models/stories260K" or "build/glassbox-fake-server
// --model fake") on a free port with a generated config, or uses a running one
// (GB_E2E_BASE_URL plus GB_E2E_ADMIN_KEY / GB_E2E_USER_KEY / GB_E2E_LIMITED_KEY; the drain
// test is then skipped).
//
// GB_E2E_TOKENIZER: a tokenizer.json to check usage.prompt_tokens against (with the `tokenizers`
// package), or "bytes" for the fake server's byte codec (BOS + one token per byte).
//
// Run: node --test tests/e2e/openai_sdk_test.mjs
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { metric, require, startServer } from './server_process.mjs';

const OpenAI = require('openai');

const ADMIN_KEY = process.env.GB_E2E_ADMIN_KEY ?? 'sk-e2e-admin';
const USER_KEY = process.env.GB_E2E_USER_KEY ?? 'sk-e2e-user';
const LIMITED_KEY = process.env.GB_E2E_LIMITED_KEY ?? 'sk-e2e-limited';
const MAX_BODY = 65536;

let server = null;  // the child process when we started it
let baseURL = process.env.GB_E2E_BASE_URL ?? '';
let model = '';
let countPromptTokens = null;  // text -> number of tokens with special tokens, or null

function client(key = USER_KEY) {
  // No retries: the test asserts on the first answer (the SDK would retry 429 and 5xx).
  return new OpenAI({ apiKey: key, baseURL, maxRetries: 0, timeout: 60_000 });
}

before(async () => {
  if (!baseURL) {
    const command = process.env.GB_E2E_SERVER ?? '';
    if (!command) throw new Error('set GB_E2E_SERVER (a server command) or GB_E2E_BASE_URL');
    const started = await startServer(command, [
      `api_key: ${ADMIN_KEY}`,
      'keys:',
      `  - {id: e2e-user, key: ${USER_KEY}, role: user}`,
      `  - {id: e2e-limited, key: ${LIMITED_KEY}, role: user, rate_limit_rpm: 6}`,
      `max_body_bytes: ${MAX_BODY}`,
      'drain_timeout_s: 10',
      'http_threads: 16',
    ]);
    server = started.proc;
    baseURL = started.baseURL;
  }
  const models = await client().models.list();
  model = models.data[0].id;
  const tok = process.env.GB_E2E_TOKENIZER;
  if (tok === 'bytes') {
    countPromptTokens = async (text) => 1 + Buffer.byteLength(text, 'utf8');
  } else if (tok) {
    const { Tokenizer } = require('tokenizers');
    const t = Tokenizer.fromFile(tok);
    countPromptTokens = async (text) => (await t.encode(text)).getIds().length;
  }
});

after(() => {
  if (server && server.exitCode === null) server.kill('SIGKILL');
});

const PROMPT = 'Once upon a time';
const CHAT = [{ role: 'user', content: 'Tell me a story.' }];

async function greedy(extra = {}) {
  return client().completions.create({ model, prompt: PROMPT, max_tokens: 24, temperature: 0, ignore_eos: true, ...extra });
}

test('models list names the served model', async () => {
  const models = await client().models.list();
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].object, 'model');
  const one = await client().models.retrieve(model);
  assert.equal(one.id, model);
});

test('completion, not streaming: shape and usage', async () => {
  const r = await greedy({ max_tokens: 8 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.model, model);
  assert.match(r.id, /^cmpl-/);
  assert.equal(r.choices.length, 1);
  assert.equal(typeof r.choices[0].text, 'string');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 8);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  if (countPromptTokens) assert.equal(r.usage.prompt_tokens, await countPromptTokens(PROMPT));
});

test('chat, not streaming: shape and usage', async () => {
  const r = await client().chat.completions.create({ model, messages: CHAT, max_completion_tokens: 6, temperature: 0, ignore_eos: true });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 6);
  assert.ok(r.usage.prompt_tokens > 0);
});

test('streaming completion equals the non-streamed text; usage chunk', async () => {
  const full = await greedy();
  const stream = await client().completions.create({
    model, prompt: PROMPT, max_tokens: 24, temperature: 0, ignore_eos: true, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(text, full.choices[0].text);
  assert.equal(finish, 'length');
  assert.deepEqual(usage, full.usage);
});

test('streaming chat: role first, then content, then finish', async () => {
  const full = await client().chat.completions.create({ model, messages: CHAT, max_tokens: 10, temperature: 0, ignore_eos: true });
  const stream = await client().chat.completions.create({
    model, messages: CHAT, max_tokens: 10, temperature: 0, ignore_eos: true, stream: true,
    stream_options: { include_usage: true },
  });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  assert.equal(chunks[0].object, 'chat.completion.chunk');
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  const text = chunks.flatMap((c) => c.choices.map((x) => x.delta.content ?? '')).join('');
  assert.equal(text, full.choices[0].message.content);
  const finishes = chunks.flatMap((c) => c.choices.map((x) => x.finish_reason)).filter(Boolean);
  assert.deepEqual(finishes, ['length']);
  assert.deepEqual(chunks.at(-1).usage, full.usage);
});

test('stop strings end the text before the stop, streaming and not', async () => {
  const base = (await greedy()).choices[0].text;
  // A stop string from the middle of the greedy text, so it surely occurs.
  const start = Math.floor(base.length / 3);
  const stop = base.slice(start, start + 3);
  assert.equal(stop.length, 3, `greedy text too short: ${JSON.stringify(base)}`);
  const expected = base.slice(0, base.indexOf(stop));
  const r = await greedy({ stop: [stop, '\u0000never'] });
  assert.equal(r.choices[0].text, expected);
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.ok(r.usage.completion_tokens < 24);
  const stream = await greedy({ stop, stream: true });
  let text = '';
  let finish = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(text, expected);
  assert.equal(finish, 'stop');
});

test('a seed makes sampling reproducible; n choices differ', async () => {
  const req = { model, prompt: PROMPT, max_tokens: 16, temperature: 1.0, seed: 1234, n: 2, ignore_eos: true };
  const a = await client().completions.create(req);
  const b = await client().completions.create(req);
  assert.equal(a.choices.length, 2);
  assert.deepEqual(a.choices.map((c) => c.text), b.choices.map((c) => c.text));
  assert.notEqual(a.choices[0].text, a.choices[1].text);
  assert.deepEqual(a.choices.map((c) => c.index), [0, 1]);
  assert.equal(a.usage.completion_tokens, 32);
});

test('logprobs: completions and chat', async () => {
  const r = await greedy({ max_tokens: 5, logprobs: 2 });
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, 5);
  assert.equal(lp.token_logprobs.length, 5);
  assert.equal(lp.text_offset.length, 5);
  for (const x of lp.token_logprobs) assert.ok(x <= 0);
  for (const top of lp.top_logprobs) assert.ok(Object.keys(top).length <= 2 && Object.keys(top).length >= 1);
  const c = await client().chat.completions.create({ model, messages: CHAT, max_tokens: 4, temperature: 0, ignore_eos: true, logprobs: true, top_logprobs: 3 });
  const content = c.choices[0].logprobs.content;
  assert.equal(content.length, 4);
  for (const t of content) {
    assert.equal(typeof t.token, 'string');
    assert.ok(t.logprob <= 0);
    assert.ok(Array.isArray(t.bytes));
    assert.equal(t.top_logprobs.length, 3);
  }
});

async function expectError(promise, status, check = () => {}) {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIError, `not an APIError: ${e}`);
    assert.equal(e.status, status, `${e.status}: ${e.message}`);
    check(e);
    return e;
  }
  assert.fail(`expected HTTP ${status}`);
}

test('400: an invalid field is named', async () => {
  await expectError(greedy({ temperature: -1 }), 400, (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError);
    assert.equal(e.param, 'temperature');
    assert.match(e.message, /temperature/);
  });
  await expectError(greedy({ n: 0 }), 400, (e) => assert.equal(e.param, 'n'));
  await expectError(client().chat.completions.create({ model, messages: [] }), 400, (e) => assert.equal(e.param, 'messages'));
});

test('400: prompt + max_tokens over the context names both numbers', async () => {
  await expectError(greedy({ max_tokens: 10_000_000 }), 400, (e) => {
    assert.match(e.message, /maximum context length is \d+ tokens/);
    assert.match(e.message, /\d+ in the prompt, 10000000 in the completion/);
    assert.equal(e.code, 'context_length_exceeded');
  });
});

test('401: missing or wrong key', async () => {
  await expectError(client('sk-wrong').completions.create({ model, prompt: 'x', max_tokens: 1 }), 401, (e) => {
    assert.ok(e instanceof OpenAI.AuthenticationError);
  });
  const r = await fetch(`${baseURL}/completions`, { method: 'POST', body: JSON.stringify({ prompt: 'x' }), headers: { 'Content-Type': 'application/json' } });
  assert.equal(r.status, 401);
  assert.equal((await r.json()).error.code, 'invalid_api_key');
});

test('403: a user key on an admin endpoint', async () => {
  const base = baseURL.replace(/\/v1$/, '');
  const c = new OpenAI({ apiKey: USER_KEY, baseURL: base, maxRetries: 0 });
  await expectError(c.get('/admin/config'), 403, (e) => assert.ok(e instanceof OpenAI.PermissionDeniedError));
  const admin = new OpenAI({ apiKey: ADMIN_KEY, baseURL: base, maxRetries: 0 });
  const cfg = await admin.get('/admin/config');
  assert.equal(cfg.api_key, '***');
});

test('404: unknown model', async () => {
  await expectError(client().completions.create({ model: 'no-such-model', prompt: 'x', max_tokens: 1 }), 404, (e) => {
    assert.ok(e instanceof OpenAI.NotFoundError);
    assert.equal(e.param, 'model');
  });
});

test('413: body over max_body_bytes', async () => {
  await expectError(client().completions.create({ model, prompt: 'x'.repeat(MAX_BODY + 10), max_tokens: 1 }), 413);
});

test('429: per-key rate limit with Retry-After', async () => {
  const c = client(LIMITED_KEY);
  await c.completions.create({ model, prompt: 'x', max_tokens: 1 });  // the bucket holds one
  await expectError(c.completions.create({ model, prompt: 'x', max_tokens: 1 }), 429, (e) => {
    assert.ok(e instanceof OpenAI.RateLimitError);
    assert.ok(Number(e.headers.get('retry-after')) >= 1);
  });
});

test('metrics show the traffic', async () => {
  const text = await (await fetch(baseURL.replace(/\/v1$/, '/metrics'))).text();
  for (const name of ['glassbox_request_finished_total{finish_reason="length"}', 'glassbox_time_to_first_token_seconds_count',
    'glassbox_generation_tokens_total', 'glassbox_kv_cache_blocks_used', 'glassbox_prefix_cache_hit_rate',
    'glassbox_http_requests_total{endpoint="/v1/completions",status="429"}']) {
    assert.ok(metric(text, name) > 0 || text.includes(name), `missing ${name}`);
  }
});

test('503 while draining on SIGTERM; exit code 0', { skip: !server && 'server not started by this test' }, async () => {
  const stream = await client().completions.create({ model, prompt: PROMPT, temperature: 0, ignore_eos: true, stream: true });
  const it = stream[Symbol.asyncIterator]();
  await it.next();  // the stream is running
  const exited = new Promise((resolve) => server.on('exit', (code) => resolve(code)));
  server.kill('SIGTERM');
  await new Promise((res) => setTimeout(res, 50));
  await expectError(client().completions.create({ model, prompt: 'x', max_tokens: 1 }), 503, (e) => {
    assert.ok(e instanceof OpenAI.InternalServerError);
  });
  // The running stream either finishes or is cancelled at the drain deadline with an error.
  try {
    for (;;) {
      const { done } = await it.next();
      if (done) break;
    }
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIError);
  }
  assert.equal(await exited, 0);
});
