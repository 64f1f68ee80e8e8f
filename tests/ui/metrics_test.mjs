// The server's real /metrics against the tools that read it: `promtool check metrics` passes on
// it, and every query of the Grafana dashboard (deploy/grafana/glassbox.json) and of the alert
// rules (deploy/prometheus/alerts.yaml) names metrics and labels this scrape has (histograms:
// their _bucket / _sum / _count series). The server serves stories260K with a weight variant, a
// canary route, a shadow copy, interventions and a low monitor rule, and gets traffic on each,
// so every family is in the scrape.
//
// Env: GB_UI_GLASSBOX, GB_UI_SHARED, GB_PROMTOOL (default: promtool on PATH).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startServer } from '../e2e/server_process.mjs';
import { editedCopy } from './browser.mjs';

const ADMIN = 'sk-m-admin', RESEARCHER = 'sk-m-researcher';
const repo = new URL('../../', import.meta.url).pathname;
const promtool = process.env.GB_PROMTOOL || 'promtool';
let server = null, scrape = '';

before(async () => {
  const { status, error } = spawnSync(promtool, ['--version']);
  if (error || status !== 0) throw new Error(`${promtool} not found: install Debian's prometheus package (scripts/setup.sh)`);
  const glassbox = process.env.GB_UI_GLASSBOX, shared = process.env.GB_UI_SHARED;
  if (!glassbox || !shared) throw new Error('set GB_UI_GLASSBOX and GB_UI_SHARED');
  const model = join(shared, 'models', 'stories260K');
  const variant = editedCopy(model);
  server = await startServer(`${glassbox} serve --model ${model} --threads 1 --variant same=${variant}`, [
    `api_key: ${ADMIN}`,
    'keys:',
    `  - {id: rita, key: ${RESEARCHER}, role: researcher}`,
    'interventions: true',
    `audit_db: ${join(mkdtempSync(join(tmpdir(), 'glassbox-metrics-audit-')), 'audit.db')}`,
    'monitor_min_abs: 5',
    'monitor_min_ratio: 5',
    'routes:',
    '  canary: [{variant: stories260K, weight: 50}, {variant: same, weight: 50}]',
    'shadow:',
    '  same: {variant: stories260K, share: 1}',
  ]);
  const post = (path, key, body) => fetch(`${server.origin}${path}`, {
    method: 'POST', headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' }, body: JSON.stringify(body),
  }).then(async (r) => ({ status: r.status, body: await r.json() }));
  const prompt = 'Once upon a time';
  const answers = await Promise.all([
    post('/v1/completions', ADMIN, { prompt, max_tokens: 8 }),
    post('/v1/completions', ADMIN, { model: 'canary', prompt, max_tokens: 8, user: 'u' }),
    post('/v1/completions', ADMIN, { model: 'same', prompt, max_tokens: 8 }),
    post('/v1/chat/completions', RESEARCHER, { messages: [{ role: 'user', content: 'Hi' }], max_tokens: 8,
      glassbox: { interventions: [{ op: 'scale', point: 'mlp_act', layer: 1, dims: [3], strength: 0.5 }] } }),
    post('/v1/glassbox/analyze', RESEARCHER, { kind: 'lens', prompt }),
  ]);
  for (const a of answers) assert.equal(a.status, 200, JSON.stringify(a.body));
  assert.equal((await post('/v1/completions', 'sk-wrong', { prompt })).status, 401); // a refusal, counted
  // The shadow copy runs in the background: wait for its counter.
  for (let i = 0; i < 600 && !/^glassbox_shadow_requests_total\{/m.test(scrape); i++) {
    scrape = await fetch(`${server.origin}/metrics`).then((r) => r.text());
    if (!/^glassbox_shadow_requests_total\{/m.test(scrape)) await new Promise((r) => setTimeout(r, 100));
  }
});

after(() => {
  if (server && server.proc.exitCode === null) server.proc.kill('SIGKILL');
});

// name -> Set of label names, for every series of the scrape (histograms: _bucket, _sum, _count).
function exported(text) {
  const names = new Map();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s/);
    if (!m) continue;
    const labels = names.get(m[1]) ?? new Set();
    for (const [, k] of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="/g)) labels.add(k);
    names.set(m[1], labels);
  }
  return names;
}

// Labels Prometheus adds to every scraped series (the target's), not in /metrics itself.
const TARGET_LABELS = ['job', 'instance'];

// The problems of one PromQL expression against the scrape: unknown metrics, label matchers on
// labels a metric does not have, `by (...)` labels none of its metrics has.
function problems(expr, names) {
  const out = [];
  const refs = [...expr.matchAll(/\b(glassbox_[a-zA-Z0-9_]*)\s*(\{([^}]*)\})?/g)];
  if (refs.length === 0) out.push(`no glassbox metric in ${expr}`);
  const used = new Set();
  for (const [, name, , matchers] of refs) {
    const labels = names.get(name);
    if (!labels) {
      out.push(`${name} is not exported`);
      continue;
    }
    for (const l of labels) used.add(l);
    for (const [, k] of (matchers ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!=|!~|=)/g)) {
      if (!labels.has(k) && !TARGET_LABELS.includes(k)) out.push(`${name} has no label ${k}`);
    }
  }
  for (const [, list] of expr.matchAll(/\b(?:by|without)\s*\(([^)]*)\)/g)) {
    for (const l of list.split(',').map((s) => s.trim()).filter(Boolean)) {
      if (!used.has(l) && !TARGET_LABELS.includes(l)) out.push(`no metric of "${expr.slice(0, 60)}..." has the label ${l}`);
    }
  }
  return out;
}

// Every `expr:` of a rules file (inline, or a `|` block).
function ruleExprs(yaml) {
  const lines = yaml.split('\n');
  const out = [];
  for (let i = 0; i < lines.length; i++) {
    const m = lines[i].match(/^(\s*)expr:\s*(.*)$/);
    if (!m) continue;
    if (m[2] !== '|') {
      out.push(m[2]);
      continue;
    }
    const block = [];
    while (i + 1 < lines.length && (lines[i + 1].trim() === '' || lines[i + 1].search(/\S/) > m[1].length)) block.push(lines[++i].trim());
    out.push(block.join(' '));
  }
  return out;
}

test('promtool check metrics passes on a real /metrics scrape', () => {
  const r = spawnSync(promtool, ['check', 'metrics'], { input: scrape, encoding: 'utf8' });
  assert.equal(r.status, 0, `promtool check metrics:\n${r.stdout}${r.stderr}`);
  assert.equal((r.stdout + r.stderr).trim(), '', 'no lint finding');
  // The scrape has the families the dashboard's glass-box panels read.
  for (const f of ['glassbox_interventions_total', 'glassbox_route_requests_total', 'glassbox_shadow_requests_total',
    'glassbox_massive_activation_events_total', 'glassbox_massive_activation_ratio_bucket', 'glassbox_request_repetition_rate_bucket',
    'glassbox_requests_rejected_total', 'glassbox_analysis_requests_total', 'glassbox_variant_info']) {
    assert.ok(exported(scrape).has(f), `${f} in the scrape`);
  }
});

test('the checker finds a wrong metric or label (it can fail)', () => {
  const names = exported(scrape);
  assert.deepEqual(problems('sum(rate(glassbox_generation_tokens_total[5m]))', names), []);
  assert.equal(problems('sum(rate(glassbox_generation_token_total[5m]))', names).length, 1);
  assert.equal(problems('sum(rate(glassbox_generation_tokens_total{modle="x"}[5m]))', names).length, 1);
  assert.equal(problems('sum by (reason) (rate(glassbox_generation_tokens_total[5m]))', names).length, 1);
  assert.equal(problems('sum(rate(vllm:generation_tokens_total[5m]))', names).length, 1);
});

test('every Grafana panel query and variable names exported metrics and labels', () => {
  const names = exported(scrape);
  const dash = JSON.parse(readFileSync(join(repo, 'deploy/grafana/glassbox.json'), 'utf8'));
  const panels = dash.panels.flatMap((p) => (p.type === 'row' ? p.panels ?? [] : [p]));
  assert.ok(panels.length >= 20, `${panels.length} panels`);
  const found = [];
  for (const p of panels) {
    assert.ok(p.targets && p.targets.length > 0, `panel "${p.title}" has a query`);
    for (const t of p.targets) for (const e of problems(t.expr, names)) found.push(`${p.title}: ${e}`);
  }
  for (const v of dash.templating.list.filter((x) => x.type === 'query')) {
    const m = v.definition.match(/^label_values\((glassbox_[a-z0-9_]+),\s*([a-z_]+)\)$/);
    assert.ok(m, v.definition);
    if (!names.has(m[1])) found.push(`variable ${v.name}: ${m[1]} is not exported`);
    else if (m[2] !== 'instance' && !names.get(m[1]).has(m[2])) found.push(`variable ${v.name}: ${m[1]} has no label ${m[2]}`);
  }
  // The panels are there.
  for (const title of ['E2E request latency', 'Token throughput', 'Time to first token', 'Inter-token latency', 'Scheduler state',
    'Cache utilization', 'Finish reason', 'Massive-activation events per layer', 'max/median ratio', 'Repetition rate',
    'Interventions by op', 'Truncation rate per variant']) {
    assert.ok(panels.some((p) => p.title === title), `panel "${title}"`);
  }
  assert.deepEqual(found, []);
});

test('every alert rule names exported metrics and labels', () => {
  const names = exported(scrape);
  const exprs = ruleExprs(readFileSync(join(repo, 'deploy/prometheus/alerts.yaml'), 'utf8'));
  assert.equal(exprs.length, 7);
  assert.deepEqual(exprs.flatMap((e) => problems(e, names)), []);
});
