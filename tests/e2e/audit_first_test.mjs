// The audit rule end to end on the real engine (stories260K) with the OpenAI SDK: no steered token
// leaves the server before a durable row for its request exists. A SIGKILL in the middle of a
// steered stream, then a restart: the request's row is there. A store that stops accepting
// writes — a full disk (a tiny tmpfs, where this machine lets us mount one) or the file deleted
// while serving — refuses intervention requests with 503 before any token, /ready says why, and
// plain requests go on.
//
// GB_E2E_SERVER: "build/glassbox serve --model ../shared/models/stories260K ...".
// Run: node --test tests/e2e/audit_first_test.mjs
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { require, startServer } from './server_process.mjs';

const OpenAI = require('openai');
const ADMIN = 'sk-gb-admin', RESEARCHER = 'sk-gb-researcher';
const servers = [];
const mounts = [];

after(async () => {
  for (const s of servers) {
    if (s.proc.exitCode !== null) continue;
    const exited = new Promise((resolve) => s.proc.on('exit', resolve));
    s.proc.kill('SIGKILL');
    await exited;  // a live server keeps the tmpfs busy
  }
  for (const m of mounts) {
    try { execFileSync('umount', [m]); } catch { /* already gone */ }
  }
});

function config(auditDb) {
  return [
    `api_key: ${ADMIN}`,
    'keys:',
    `  - {id: rita, key: ${RESEARCHER}, role: researcher}`,
    'interventions: true',
    `audit_db: ${auditDb}`,
    'glassbox_policy:',
    '  caps: {scale: 10}',
  ];
}

async function start(auditDb) {
  const command = process.env.GB_E2E_SERVER;
  if (!command) throw new Error('set GB_E2E_SERVER (a server command)');
  const s = await startServer(command, config(auditDb));
  servers.push(s);
  return s;
}

const client = (s, key) => new OpenAI({ apiKey: key, baseURL: s.baseURL, maxRetries: 0, timeout: 60_000 });
const steer = { interventions: [{ op: 'scale', point: 'mlp_act', layer: 1, dims: [5], strength: 0.5 }] };
const request = (extra = {}) => ({ model: 'stories260K', prompt: 'Once upon a time', max_tokens: 8, temperature: 0, ...extra });

async function auditRows(s, requestId) {
  const r = await fetch(`${s.origin}/admin/audit?request_id=${encodeURIComponent(requestId)}`,
    { headers: { Authorization: `Bearer ${ADMIN}` } });
  assert.equal(r.status, 200);
  return (await r.json()).data;
}

async function ready(s) {
  return (await fetch(`${s.origin}/ready`)).json();
}

test('SIGKILL in the middle of a steered stream: after a restart the request has its row', async () => {
  // stories260K is fast: a kill may land after the server has finished the stream. Try until one
  // lands in the middle (the row then still says status 0); every try must find its row.
  let midStream = false;
  for (let attempt = 0; attempt < 4 && !midStream; attempt++) {
    const auditDb = join(mkdtempSync(join(tmpdir(), 'glassbox-audit-first-')), 'audit.db');
    const s = await start(auditDb);
    const stream = await client(s, RESEARCHER).completions.create(
      request({ stream: true, max_tokens: 400, n: 4, ignore_eos: true, glassbox: steer }));
    let id = null;
    let text = '';
    for await (const chunk of stream) {
      id = chunk.id;
      text += chunk.choices[0]?.text ?? '';
      if (text.length > 0) {
        s.proc.kill('SIGKILL');  // a steered token is with the client; the server dies
        break;
      }
    }
    await new Promise((resolve) => (s.proc.exitCode !== null ? resolve() : s.proc.on('exit', resolve)));
    assert.ok(id && text.length > 0, 'received a steered token before the kill');
    const again = await start(auditDb);
    const rows = await auditRows(again, id);
    assert.equal(rows.length, 1, `no audit row for ${id} after the restart`);
    assert.equal(rows[0].key_id, 'rita');
    assert.equal(rows[0].spec.glassbox.interventions[0].dims[0], 5);
    if (rows[0].status === 0) midStream = true;  // admitted; the outcome was never recorded
    else assert.equal(rows[0].completion_tokens, 1600, 'a row with an outcome is a finished stream');
    again.proc.kill('SIGKILL');
  }
  assert.ok(midStream, 'no kill landed in the middle of the stream');
});

test('the audit file deleted while serving: steering refused with 503, plain requests go on', async () => {
  const auditDb = join(mkdtempSync(join(tmpdir(), 'glassbox-audit-first-')), 'audit.db');
  const s = await start(auditDb);
  const c = client(s, RESEARCHER);
  assert.ok((await c.completions.create(request({ glassbox: steer }))).choices[0].text.length > 0);
  unlinkSync(auditDb);
  await assert.rejects(c.completions.create(request({ stream: true, glassbox: steer })),
    (e) => e.status === 503 && /deleted/.test(e.message));
  assert.ok((await c.completions.create(request())).choices[0].text.length > 0);
  const r = await ready(s);
  assert.equal(r.status, 'degraded');
  assert.match(r.audit, /deleted/);
  s.proc.kill('SIGKILL');
});

test('a full disk (tiny tmpfs): steering refused before any token, /ready says why, recovery', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'glassbox-tmpfs-'));
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=2m', 'tmpfs', dir], { stdio: 'ignore' });
  } catch {
    t.skip('cannot mount a tmpfs here (not root); server_glass_http_test covers a full store by fault injection');
    return;
  }
  mounts.push(dir);
  const auditDb = join(dir, 'audit.db');
  const s = await start(auditDb);
  const c = client(s, RESEARCHER);
  assert.ok((await c.completions.create(request({ glassbox: steer }))).choices[0].text.length > 0);
  // Fill the disk.
  const filler = join(dir, 'filler');
  try { writeFileSync(filler, Buffer.alloc(8 << 20, 1)); } catch { /* ENOSPC: the disk is full */ }
  let tokens = 0;
  await assert.rejects(async () => {
    const stream = await c.completions.create(request({ stream: true, glassbox: steer }));
    for await (const chunk of stream) tokens += (chunk.choices[0]?.text ?? '').length;
  }, (e) => e.status === 503 && /audit store/.test(e.message));
  assert.equal(tokens, 0, 'no steered token left the server');
  assert.ok((await c.completions.create(request())).choices[0].text.length > 0, 'plain requests go on');
  const r = await ready(s);
  assert.equal(r.status, 'degraded');
  assert.match(r.audit, /full|disk/i);
  rmSync(filler);
  assert.ok((await c.completions.create(request({ glassbox: steer }))).choices[0].text.length > 0);
  assert.equal((await ready(s)).status, 'ready');
  s.proc.kill('SIGKILL');
  await new Promise((resolve) => (s.proc.exitCode !== null ? resolve() : s.proc.on('exit', resolve)));
});
