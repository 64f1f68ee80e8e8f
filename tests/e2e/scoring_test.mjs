// Scoring a text over HTTP with the OpenAI SDK on stories260K: completions `echo` + `logprobs`
// (with max_tokens 0 it scores without generating) and vLLM's `prompt_logprobs`, checked against
// llama2.c's reference logits (reference.json) and against the server's own greedy decoding.
// GB_E2E_SERVER: the server command (it is started here on a free port).
// Run: node --test tests/e2e/scoring_test.mjs
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { require, startServer } from './server_process.mjs';

const OpenAI = require('openai');
const KEY = 'sk-scoring';
const here = dirname(fileURLToPath(import.meta.url));
const ref = JSON.parse(readFileSync(join(here, '../../../shared/models/stories260K/reference.json'), 'utf8'));
let server = null;
let client = null;

function logSoftmax(values) {
  const mx = Math.max(...values);
  const z = values.reduce((s, v) => s + Math.exp(v - mx), 0);
  return values.map((v) => v - mx - Math.log(z));
}

before(async () => {
  const started = await startServer(process.env.GB_E2E_SERVER, [`api_key: ${KEY}`]);
  server = started.proc;
  client = new OpenAI({ apiKey: KEY, baseURL: started.baseURL, maxRetries: 0, timeout: 60_000 });
});
after(() => server?.kill('SIGTERM'));

test('echo + logprobs with max_tokens 0 scores the text against the reference logits', async () => {
  for (const c of ref.cases) {
    const ids = [...c.prompt_ids, ...c.continuation_ids];
    const r = await client.completions.create({ model: 'stories260K', prompt: ids, max_tokens: 0, echo: true, logprobs: 5 });
    const choice = r.choices[0];
    assert.equal(choice.finish_reason, 'length');
    assert.equal(r.usage.completion_tokens, 0);
    const lp = choice.logprobs;
    assert.equal(lp.tokens.length, ids.length);
    assert.equal(lp.tokens.join(''), choice.text);  // the token texts make up the echoed text
    assert.equal(lp.token_logprobs[0], null);
    assert.equal(lp.top_logprobs[0], null);
    for (let i = 1; i < ids.length; ++i) {
      assert.equal(lp.text_offset[i], [...lp.tokens.slice(0, i).join('')].length);
      const top = Object.values(lp.top_logprobs[i]);
      assert.ok(top.length >= 1 && top.length <= 5);
      // The continuation is greedy: each of its tokens is the most likely one.
      if (i >= c.prompt_ids.length) assert.ok(Math.abs(lp.token_logprobs[i] - Math.max(...top)) < 1e-6, `position ${i}`);
    }
    // The first continuation token against llama2.c's full logits after the prompt.
    const n = c.prompt_ids.length;
    const want = logSoftmax(c.step0_logits)[c.continuation_ids[0]];
    assert.ok(Math.abs(lp.token_logprobs[n] - want) < 1e-4, `${lp.token_logprobs[n]} vs ${want}`);
  }
});

test('prompt_logprobs (vLLM) carries logprob, rank and decoded token, and agrees with echo', async () => {
  const c = ref.cases[0];
  const ids = [...c.prompt_ids, ...c.continuation_ids.slice(0, 8)];
  const r = await client.completions.create({ model: 'stories260K', prompt: ids, max_tokens: 0, echo: true, logprobs: 0,
                                              prompt_logprobs: 2 });
  const pl = r.choices[0].prompt_logprobs;
  assert.equal(pl.length, ids.length);
  assert.equal(pl[0], null);
  for (let i = 1; i < ids.length; ++i) {
    const own = pl[i][String(ids[i])];
    assert.ok(own, `position ${i} lists its own token`);
    assert.equal(own.logprob, r.choices[0].logprobs.token_logprobs[i]);
    assert.equal(own.decoded_token, r.choices[0].logprobs.tokens[i]);
    const ranks = Object.values(pl[i]).map((e) => e.rank);
    assert.ok(ranks.includes(1) && ranks.includes(2));
    if (i >= c.prompt_ids.length) assert.equal(own.rank, 1);
  }
});

test('scores equal the logprobs of the same tokens when generated', async () => {
  const prompt = 'Once upon a time';
  const gen = await client.completions.create({ model: 'stories260K', prompt, max_tokens: 12, temperature: 0, logprobs: 0 });
  const scored = await client.completions.create({ model: 'stories260K', prompt: prompt + gen.choices[0].text, max_tokens: 0,
                                                   echo: true, logprobs: 0 });
  const a = gen.choices[0].logprobs.token_logprobs;
  const b = scored.choices[0].logprobs.token_logprobs.slice(-a.length);
  assert.equal(scored.choices[0].text, prompt + gen.choices[0].text);
  for (let i = 0; i < a.length; ++i) assert.ok(Math.abs(a[i] - b[i]) < 1e-4, `token ${i}: ${a[i]} vs ${b[i]}`);
});

test('streamed echo sends the prompt first, then the completion', async () => {
  const stream = await client.completions.create({ model: 'stories260K', prompt: 'Once upon a time', max_tokens: 4,
                                                   temperature: 0, echo: true, stream: true });
  const texts = [];
  for await (const chunk of stream) texts.push(chunk.choices[0]?.text ?? '');
  assert.equal(texts[0], 'Once upon a time');
  const plain = await client.completions.create({ model: 'stories260K', prompt: 'Once upon a time', max_tokens: 4, temperature: 0 });
  assert.equal(texts.join(''), 'Once upon a time' + plain.choices[0].text);
});

test('max_tokens 0 without echo is refused', async () => {
  await assert.rejects(client.completions.create({ model: 'stories260K', prompt: 'x', max_tokens: 0 }), (e) => e.status === 400);
});
