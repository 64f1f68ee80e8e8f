// A first run as a new user makes it, on stories260K over HTTP: the server's memory stays small
// and its KV cache size is in the log; logprob tokens are the exact text each token added (a
// SentencePiece model keeps its leading spaces) and text_offset indexes the returned text,
// streamed or not, with stop strings; the serving benchmark runs against the model as it is.
//
// GB_E2E_SERVER: "build/glassbox serve --model ../shared/models/stories260K ...".
// Run: node --test tests/e2e/firstrun_test.mjs
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { startServer } from './server_process.mjs';

const KEY = 'sk-first-run';
let server = null;
let model = '';

before(async () => {
  const command = process.env.GB_E2E_SERVER;
  if (!command) throw new Error('set GB_E2E_SERVER (a server command)');
  server = await startServer(command, [`api_key: ${KEY}`]);
  const r = await fetch(`${server.baseURL}/models`, { headers: { Authorization: `Bearer ${KEY}` } });
  model = (await r.json()).data[0].id;
});

after(() => {
  if (server && server.proc.exitCode === null) server.proc.kill('SIGTERM');
});

async function post(path, body) {
  const r = await fetch(`${server.baseURL}${path}`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ model, ...body }),
  });
  assert.equal(r.status, 200, await r.clone().text());
  return r;
}

function rssBytes(pid) {
  const m = readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+) kB/);
  return Number(m[1]) * 1024;
}

// Every token's text is the piece it added: they concatenate to the text, and text_offset[i]
// is where token i starts in it.
function checkCompletionLogprobs(text, lp) {
  assert.equal(lp.tokens.join(''), text, `tokens ${JSON.stringify(lp.tokens)} vs text ${JSON.stringify(text)}`);
  let at = 0;
  for (let i = 0; i < lp.tokens.length; i++) {
    assert.equal(lp.text_offset[i], at, `text_offset[${i}]`);
    assert.equal(text.slice(at, at + lp.tokens[i].length), lp.tokens[i]);
    at += lp.tokens[i].length;
  }
}

test('memory: stories260K serves in well under 500 MB, and the log gives the KV cache size', async () => {
  for (let i = 0; i < 4; i++) await post('/completions', { prompt: 'Once upon a time', max_tokens: 32, temperature: 0 });
  const rss = rssBytes(server.proc.pid);
  assert.ok(rss < 500 * 1024 * 1024, `RSS ${(rss / 1048576).toFixed(1)} MiB`);
  assert.match(server.stderr(), /KV cache [\d.]+ MiB: \d+ blocks of 16 tokens/);
});

test('logprobs: tokens keep their leading space; offsets index the text', async () => {
  const r = await (await post('/completions', { prompt: 'Once upon a time', max_tokens: 24, temperature: 0, ignore_eos: true, logprobs: 3 })).json();
  const { text, logprobs } = r.choices[0];
  assert.match(text, /^, there was a little girl/);
  checkCompletionLogprobs(text, logprobs);
  assert.equal(logprobs.tokens[1], ' there', 'SentencePiece ▁there is " there"');
  // The alternatives are the text they would have added there, space included.
  assert.ok(Object.keys(logprobs.top_logprobs[1]).includes(' there'), JSON.stringify(logprobs.top_logprobs[1]));
});

test('logprobs: with a stop string the tokens still add up to the (cut) text', async () => {
  const r = await (await post('/completions', { prompt: 'Once upon a time', max_tokens: 40, temperature: 0, ignore_eos: true, logprobs: 1, stop: [' girl'] })).json();
  const { text, logprobs, finish_reason } = r.choices[0];
  assert.equal(finish_reason, 'stop');
  assert.equal(text, ', there was a little');
  checkCompletionLogprobs(text, logprobs);
});

test('logprobs: streamed chunks carry the tokens of their own text', async () => {
  const r = await post('/completions', { prompt: 'Once upon a time', max_tokens: 24, temperature: 0, ignore_eos: true, logprobs: 1, stream: true, stop: ['Lily'] });
  const body = await r.text();
  let text = '';
  const tokens = [], offsets = [];
  for (const event of body.split('\n\n')) {
    if (!event.startsWith('data: ') || event === 'data: [DONE]') continue;
    const c = JSON.parse(event.slice(6)).choices[0];
    text += c.text;
    if (c.logprobs) {
      tokens.push(...c.logprobs.tokens);
      offsets.push(...c.logprobs.text_offset);
    }
  }
  checkCompletionLogprobs(text, { tokens, text_offset: offsets });
});

test('logprobs: chat tokens and bytes are the text of the message', async () => {
  const r = await (await post('/chat/completions', { messages: [{ role: 'user', content: 'Tell me a story.' }], max_tokens: 16, temperature: 0, ignore_eos: true, logprobs: true, top_logprobs: 2 })).json();
  const { message, logprobs } = r.choices[0];
  assert.equal(logprobs.content.map((t) => t.token).join(''), message.content);
  const bytes = logprobs.content.flatMap((t) => t.bytes);
  assert.equal(Buffer.from(bytes).toString('utf8'), message.content);
});

test('the serving benchmark runs on stories260K (its vocabulary from /v1/models)', async () => {
  const script = fileURLToPath(new URL('../../bench/serve/bench_serve.mjs', import.meta.url));
  const { stdout } = await promisify(execFile)(process.execPath, [script, '--url', server.origin, '--key', KEY,
    '--concurrency', '1,2', '--min-requests', '2', '--prompt-len', '8', '--output-len', '4'], { timeout: 120_000 });
  assert.match(stdout, /\(vocabulary 512\)/);
  assert.match(stdout, /\| 2 \| \d+ \| [\d.]+ \|/);
});
