// A bounded load test on loopback: 64 streaming clients (the OpenAI Node SDK) for
// GB_LOAD_SECONDS (default 60) against a real server, plus one client that reads very slowly
// and one that disconnects mid-stream again and again. Passes when: no error other than
// deliberate 429s (the concurrency limit is set below the client count, and 429s are retried
// after Retry-After), the slow reader holds nobody up (the others keep streaming while it
// crawls), every disconnect is cancelled and its KV blocks freed (the cache is empty at the
// end), and the server's RSS is flat after warm-up.
//
// With GB_TEST_PG (the state folder of tests/support/pg_cluster.sh, whose url file names a
// PostgreSQL database), the audit store is that database and every fourth client steers
// (interventions on, each such request audited at admission and at its end): the same checks,
// plus every steered answer's audit row with its outcome.
//
// GB_E2E_SERVER: the server command, e.g. "build/glassbox serve --model ../shared/models/stories260K".
// Run: node --test tests/e2e/load_test.mjs
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import { metric, require, startServer } from './server_process.mjs';

const OpenAI = require('openai');
const KEY = 'sk-load-test';
const SECONDS = Number(process.env.GB_LOAD_SECONDS ?? 60);
const CLIENTS = 64;
const MAX_CONCURRENT = 60;  // below CLIENTS + 2: some 429s are deliberate
let server = null;
let auditUrl = null;  // the PostgreSQL audit store, with GB_TEST_PG

before(async () => {
  const command = process.env.GB_E2E_SERVER;
  if (!command) throw new Error('set GB_E2E_SERVER (a server command)');
  const audit = [];
  if (process.env.GB_TEST_PG) {
    const file = `${process.env.GB_TEST_PG}/url`;
    try {
      auditUrl = readFileSync(file, 'utf8').trim();
    } catch {
      throw new Error(`${file} is missing: the pg_audit fixture did not start PostgreSQL (scripts/setup.sh installs it)`);
    }
    audit.push('interventions: true', `audit_db: "${auditUrl}"`);
  }
  server = await startServer(command, [
    `api_key: ${KEY}`,
    `max_concurrent_requests: ${MAX_CONCURRENT}`,
    'max_queue_length: 256',
    `http_threads: ${CLIENTS + 16}`,
    'write_timeout_s: 30',
    ...audit,
  ], { requestLog: true });
});

after(() => {
  if (server && server.proc.exitCode === null) server.proc.kill('SIGKILL');
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const rssKiB = () => Number(readFileSync(`/proc/${server.proc.pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)[1]);
const metricsText = async () => (await fetch(`${server.origin}/metrics`)).text();
const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] : NaN;
};

const PROMPTS = ['Once upon a time', 'The little dog', 'Lily and Ben went to the park', 'Tom had a toy car. He',
  'One day, a big red ball', 'Sue liked to sing.', 'The cat saw a fish', 'There was a boy named Max who'];

test(`${CLIENTS} streaming clients for ${SECONDS} s, a slow reader and a disconnecting client`, { timeout: (SECONDS + 120) * 1000 }, async () => {
  const client = new OpenAI({ apiKey: KEY, baseURL: server.baseURL, maxRetries: 0, timeout: 60_000 });
  const model = (await client.models.list()).data[0].id;
  const t0 = performance.now();
  const deadline = t0 + SECONDS * 1000;
  const stats = { ok: 0, rejected429: 0, errors: [], tokens: 0, itl: [], completions: [], steered: [] };
  const STEER = { interventions: [{ op: 'scale', point: 'mlp_act', layer: 1, dims: [5], strength: 0.5 }] };

  // The 64 clients: streamed completions back to back.
  async function streamer(id) {
    let k = 0;
    while (performance.now() < deadline) {
      k++;
      const steered = auditUrl !== null && id % 4 === 0;
      try {
        const stream = await client.completions.create({
          model, prompt: PROMPTS[(id + k) % PROMPTS.length], max_tokens: 16 + ((id * 7 + k * 13) % 96),
          temperature: 0.8, seed: id * 1000 + k, stream: true, ...(steered ? { glassbox: STEER } : {}),
        });
        let last = null;
        let requestId = null;
        for await (const chunk of stream) {
          requestId = chunk.id;
          if (!chunk.choices.length || !chunk.choices[0].text) continue;
          const now = performance.now();
          if (last !== null) stats.itl.push(now - last);
          last = now;
          stats.tokens++;
        }
        stats.ok++;
        stats.completions.push(performance.now());
        if (steered) stats.steered.push(requestId);
      } catch (e) {
        if (e.status === 429) {
          stats.rejected429++;
          await sleep(1000 * Number(e.headers?.get?.('retry-after') ?? 1) * Math.random());
        } else {
          // A connection error names its cause (ECONNRESET, a socket hang up, ...).
          const cause = e.cause ? ` (${e.cause.code ?? ''} ${e.cause.message ?? e.cause})` : '';
          stats.errors.push(`client ${id}: ${e.status ?? ''} ${e.message}${cause}`);
        }
      }
    }
  }

  // The slow reader: a long streamed completion read one chunk every 100 ms (the server's
  // writes to it block in its own HTTP thread; nobody else may notice).
  const slow = { events: 0, reads: 0, done: false, start: 0, end: 0, status: 0 };
  // Like every other client it may be refused with a 429 (the concurrency limit is below the
  // client count on purpose); it then retries after a moment, as the SDK clients do.
  async function slowReader() {
    await sleep(2000);
    const body = JSON.stringify({ model, prompt: 'Once upon a time', max_tokens: 300, temperature: 0, ignore_eos: true,
      stream: true, logprobs: 5 });
    for (let attempt = 0; attempt < 100 && (slow.status === 0 || slow.status === 429); attempt++) {
      if (slow.status === 429) {
        stats.rejected429++;
        await sleep(200);
      }
      slow.start = performance.now();
      await slowOnce(body);
    }
    slow.end = performance.now();
  }
  async function slowOnce(body) {
    await new Promise((resolve) => {
      const req = http.request(`${server.origin}/v1/completions`, {
        method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}` },
      }, (res) => {
        slow.status = res.statusCode;
        res.setEncoding('utf8');
        res.on('data', (text) => {
          slow.events += text.split('data: {').length - 1;
          slow.reads++;
          if (text.includes('data: [DONE]')) slow.done = true;
          res.pause();
          setTimeout(() => res.resume(), 100);
        });
        res.on('end', resolve);
        res.on('error', resolve);
      });
      req.on('error', resolve);
      req.end(body);
    });
  }

  // The disconnecting client: starts a long stream, leaves after a few chunks, repeats. The model
  // is small enough that a 400-token stream can be generated and buffered in the socket before
  // the client has read 5 chunks; such a request ends with "length" before the disconnect
  // reaches the server. Its request ids are checked against the server's request log below.
  let disconnects = 0;
  const leaverIds = [];
  async function leaver() {
    while (performance.now() < deadline - 3000) {
      const controller = new AbortController();
      try {
        const stream = await client.completions.create({
          model, prompt: 'The little dog', max_tokens: 400, temperature: 0, ignore_eos: true, stream: true,
        }, { signal: controller.signal });
        let n = 0;
        for await (const chunk of stream) {
          if (n === 0) leaverIds.push(chunk.id);
          if (++n === 5) {
            controller.abort();
            disconnects++;
            break;
          }
        }
      } catch (e) {
        if (e.status === 429) stats.rejected429++;
        else if (e.name !== 'AbortError' && !controller.signal.aborted) stats.errors.push(`leaver: ${e.message}`);
      }
      await sleep(1500);
    }
  }

  // RSS every second.
  const rss = [];
  const sampler = setInterval(() => rss.push({ t: performance.now() - t0, kib: rssKiB() }), 1000);

  await Promise.all([...Array(CLIENTS).keys()].map(streamer).concat([slowReader(), leaver()]));
  clearInterval(sampler);

  // Idle: no sequence running, every KV block back (cancelled and finished alike), and no request
  // in flight on the HTTP side. The last condition matters: a disconnected stream's engine
  // sequence is freed (running 0, blocks 0) a moment before its HTTP thread counts the finish
  // (finalize() increments finished_total, then in_flight); reading the counter in between saw
  // 24 cancelled for 25 disconnects on a loaded machine.
  let m = '';
  for (let i = 0; i < 100; i++) {
    m = await metricsText();
    if (metric(m, 'glassbox_num_requests_running') === 0 && metric(m, 'glassbox_kv_cache_blocks_used') === 0 &&
        metric(m, 'glassbox_requests_in_flight') === 0) break;
    await sleep(100);
  }

  const elapsed = (performance.now() - t0) / 1000;
  const duringSlow = stats.completions.filter((t) => t >= slow.start && t <= slow.end).length;
  const slowSeconds = (slow.end - slow.start) / 1000;
  const rate = stats.ok / elapsed;
  // After warm-up (the first half: thread stacks and malloc arenas of the HTTP threads grow to
  // their working size), RSS must stay flat; a leak would keep climbing.
  const warm = rss.filter((s) => s.t > (SECONDS * 1000) / 2);
  const rssStart = warm.length ? warm[0].kib : NaN;
  const rssMax = Math.max(...warm.map((s) => s.kib));
  console.log(JSON.stringify({
    seconds: elapsed.toFixed(1), completed: stats.ok, rejected_429: stats.rejected429, errors: stats.errors.length,
    tokens_per_s: (stats.tokens / elapsed).toFixed(1), itl_p50_ms: pct(stats.itl, 50).toFixed(1),
    itl_p99_ms: pct(stats.itl, 99).toFixed(1), slow_reader: { ...slow, seconds: slowSeconds.toFixed(1) },
    completed_during_slow_read: duringSlow, disconnects,
    cancelled: metric(m, 'glassbox_request_finished_total{finish_reason="cancelled"}'),
    rss_series_mib: rss.filter((_, i) => i % 3 === 0).map((s) => Math.round(s.kib / 1024)),
    rss_mib: { after_warmup: (rssStart / 1024).toFixed(1), max_after: (rssMax / 1024).toFixed(1) },
  }));

  assert.deepEqual(stats.errors, [], 'errors other than 429');
  assert.ok(stats.ok > CLIENTS, `only ${stats.ok} completions`);
  // The slow reader got its whole answer, slowly, while everyone else kept going at the usual rate.
  assert.equal(slow.status, 200);
  assert.ok(slow.done && slow.events >= 300, `slow reader got ${slow.events} events, done: ${slow.done}`);
  // It really read slowly: a 100 ms pause after each of many reads (how many events share a read
  // depends on the host's load, so the floor is on reads and their pauses, not on wall time).
  assert.ok(slow.reads >= 10 && slowSeconds >= 0.09 * slow.reads, `${slow.reads} reads in ${slowSeconds} s`);
  assert.ok(duringSlow > 0.5 * rate * slowSeconds, `${duringSlow} completions during the slow read (rate ${rate.toFixed(1)}/s)`);
  // Each disconnect was cancelled and freed its blocks.
  // Every disconnect is in the request log, either cancelled (499) or finished before the client
  // left; the cancelled metric counts exactly the former (nobody else disconnects).
  const byId = new Map(server.requestLog().map((l) => [l.request_id, l]));
  const leaverLines = leaverIds.map((id) => byId.get(id));
  assert.equal(leaverLines.filter((l) => l === undefined).length, 0, 'a disconnected request has no log line');
  const cancelled = leaverLines.filter((l) => l.status === 499 && l.finish_reasons[0] === 'cancelled').length;
  const finishedFirst = leaverLines.filter((l) => l.status === 200 && l.finish_reasons[0] === 'length').length;
  console.log(JSON.stringify({ disconnects, cancelled_in_log: cancelled, finished_before_disconnect: finishedFirst }));
  assert.equal(cancelled + finishedFirst, leaverIds.length, 'a disconnect that neither cancelled nor finished');
  assert.ok(cancelled >= 5, `only ${cancelled} disconnects were cancelled`);
  assert.equal(metric(m, 'glassbox_request_finished_total{finish_reason="cancelled"}'), cancelled);
  assert.equal(metric(m, 'glassbox_num_requests_running'), 0);
  assert.equal(metric(m, 'glassbox_kv_cache_blocks_used'), 0);
  assert.equal(metric(m, 'glassbox_requests_in_flight'), 0);
  // With the audit store: every steered answer has its row, with its outcome.
  if (auditUrl !== null) {
    const rows = new Map();
    for (let after = 0; ;) {
      const r = await fetch(`${server.origin}/admin/audit?kind=request&limit=1000&after_id=${after}`,
        { headers: { Authorization: `Bearer ${KEY}` } });
      assert.equal(r.status, 200);
      const page = await r.json();
      for (const row of page.data) rows.set(row.request_id, row);
      if (page.data.length < 1000) break;
      after = page.last_id;
    }
    console.log(JSON.stringify({ steered_answers: stats.steered.length, audit_rows: rows.size }));
    assert.ok(stats.steered.length > 10, `only ${stats.steered.length} steered answers`);
    for (const id of stats.steered) {
      assert.ok(rows.has(id), `no audit row for steered answer ${id}`);
      assert.equal(rows.get(id).status, 200, `the row of ${id} has no outcome`);
    }
  }
  // Flat RSS after warm-up: under 5% (or 8 MiB) growth.
  assert.ok(rssMax - rssStart < Math.max(0.05 * rssStart, 8 * 1024), `RSS grew from ${rssStart} to ${rssMax} KiB`);
});
