// Server benchmark: streamed completions at fixed concurrency against a running OpenAI-compatible
// server (Glassbox, or llama.cpp's llama-server / vLLM for comparison). Each request sends
// PROMPT_LEN random token ids (distinct per request, so the prefix cache never helps) and
// streams OUTPUT_LEN tokens (ignore_eos). Per concurrency level it reports aggregate output
// tokens/s (all output tokens / wall time of the level), TTFT p50/p99 and inter-token latency
// (per request (t_last − t_first)/(n − 1), p50/p99 over requests: vLLM's TPOT).
//
// Usage: node bench/serve/bench_serve.mjs --url http://127.0.0.1:8080 [--key KEY]
//          [--concurrency 1,4,16,64] [--requests-per-client 1] [--min-requests 4] [--prompt-len 32]
//          [--output-len 32]
//          [--vocab N] [--model NAME] [--temperature 0] [--top-p 1]
// --temperature / --top-p set the sampling of every request (default greedy: the decode path
// alone); e.g. --temperature 1 --top-p 0.9 adds the sampler's per-sequence cost.
// The prompt ids are drawn below the model's vocabulary size: --vocab, else what /v1/models says
// (Glassbox: vocab_size; llama-server: meta.n_vocab). vLLM does not say it: pass --vocab.
import { parseArgs } from 'node:util';

const { values: opt } = parseArgs({
  options: {
    url: { type: 'string', default: 'http://127.0.0.1:8080' },
    key: { type: 'string', default: '' },
    model: { type: 'string', default: '' },
    concurrency: { type: 'string', default: '1,4,16,64' },
    'requests-per-client': { type: 'string', default: '1' },
    'min-requests': { type: 'string', default: '4' },
    'prompt-len': { type: 'string', default: '32' },
    'output-len': { type: 'string', default: '32' },
    vocab: { type: 'string', default: '' },
    seed: { type: 'string', default: '1' },
    temperature: { type: 'string', default: '0' },
    'top-p': { type: 'string', default: '1' },
  },
});

const headers = { 'Content-Type': 'application/json' };
if (opt.key) headers.Authorization = `Bearer ${opt.key}`;
const promptLen = Number(opt['prompt-len']);
const outputLen = Number(opt['output-len']);
let vocab = 0;

// xorshift32: reproducible prompts.
let state = Number(opt.seed) >>> 0 || 1;
function rand() {
  state ^= state << 13; state >>>= 0;
  state ^= state >>> 17;
  state ^= state << 5; state >>>= 0;
  return state;
}
const randomPrompt = () => Array.from({ length: promptLen }, () => rand() % vocab);

// The model's name and vocabulary size, from the flags or GET /v1/models.
async function modelInfo() {
  let entry = null;
  if (!opt.model || !opt.vocab) {
    const r = await fetch(`${opt.url}/v1/models`, { headers });
    if (r.status !== 200) throw new Error(`GET /v1/models: HTTP ${r.status}: ${await r.text()}`);
    entry = (await r.json()).data?.[0];
    if (!entry) throw new Error('GET /v1/models lists no model');
  }
  const name = opt.model || entry.id;
  const n = Number(opt.vocab || entry.vocab_size || entry.meta?.n_vocab || 0);
  if (!Number.isInteger(n) || n <= 0) {
    throw new Error(`cannot tell the vocabulary size of ${name} (/v1/models has no vocab_size): pass --vocab N`);
  }
  return { name, vocab: n };
}

// One streamed request: times of each token-carrying chunk.
async function one(model, prompt) {
  const t0 = performance.now();
  const r = await fetch(`${opt.url}/v1/completions`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ model, prompt, max_tokens: outputLen, ignore_eos: true,
      temperature: Number(opt.temperature), top_p: Number(opt['top-p']), stream: true }),
  });
  if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${await r.text()}`);
  const times = [];
  const decoder = new TextDecoder();
  let buf = '';
  for await (const part of r.body) {
    buf += decoder.decode(part, { stream: true });
    let end;
    while ((end = buf.indexOf('\n\n')) >= 0) {
      const event = buf.slice(0, end);
      buf = buf.slice(end + 2);
      if (!event.startsWith('data: ') || event === 'data: [DONE]') continue;
      const chunk = JSON.parse(event.slice(6));
      if (chunk.choices?.length && chunk.choices[0].text) times.push(performance.now());
    }
  }
  return { ttft: times[0] - t0, itl: times.length > 1 ? (times.at(-1) - times[0]) / (times.length - 1) : NaN, chunks: times.length };
}

const pct = (xs, p) => {
  const s = xs.filter((x) => !Number.isNaN(x)).sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] : NaN;
};

const info = await modelInfo();
const model = info.name;
vocab = info.vocab;
await one(model, randomPrompt());  // warm-up
const rows = [];
for (const c of opt.concurrency.split(',').map(Number)) {
  const perClient = Math.max(Number(opt['requests-per-client']), Math.ceil(Number(opt['min-requests']) / c));
  const results = [];
  const t0 = performance.now();
  await Promise.all(Array.from({ length: c }, async () => {
    for (let i = 0; i < perClient; i++) results.push(await one(model, randomPrompt()));
  }));
  const wall = (performance.now() - t0) / 1000;
  const row = {
    concurrency: c, requests: results.length, wall_s: +wall.toFixed(1),
    output_tok_s: +((results.length * outputLen) / wall).toFixed(2),
    ttft_p50_ms: Math.round(pct(results.map((r) => r.ttft), 50)), ttft_p99_ms: Math.round(pct(results.map((r) => r.ttft), 99)),
    itl_p50_ms: Math.round(pct(results.map((r) => r.itl), 50)), itl_p99_ms: Math.round(pct(results.map((r) => r.itl), 99)),
  };
  rows.push(row);
  console.log(JSON.stringify(row));
}
console.log(`\nmodel ${model} (vocabulary ${vocab}), prompt ${promptLen} tokens, output ${outputLen} tokens\n`);
console.log('| concurrency | requests | output tok/s | TTFT p50 / p99 (ms) | ITL p50 / p99 (ms) |');
console.log('| --- | --- | --- | --- | --- |');
for (const r of rows) {
  console.log(`| ${r.concurrency} | ${r.requests} | ${r.output_tok_s} | ${r.ttft_p50_ms} / ${r.ttft_p99_ms} | ${r.itl_p50_ms} / ${r.itl_p99_ms} |`);
}
