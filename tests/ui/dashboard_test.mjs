// The dashboard in a real browser (Debian's Chromium through playwright-core) against
// `glassbox serve` on stories260K with a weight variant and a canary route: every page loads with
// no console error and is screenshotted into the build folder; the playground's streamed run
// shows, per layer, exactly the report the API returned (one point per layer) and a steered run
// that differs from the plain one; the monitor's heat map and events follow the server's
// monitor; an admin changes canary weights from the Variants page; a user key sees no admin page,
// control or request.
//
// Env: GB_UI_GLASSBOX (the glassbox binary), GB_UI_SHARED (../shared), GB_UI_OUT (where the
// screenshots go). Run: node --test tests/ui/dashboard_test.mjs
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startServer } from '../e2e/server_process.mjs';
import { editedCopy, launchBrowser, newPage, signIn } from './browser.mjs';

const ADMIN = 'sk-ui-admin', RESEARCHER = 'sk-ui-researcher', USER = 'sk-ui-user';
const glassbox = process.env.GB_UI_GLASSBOX;
const shared = process.env.GB_UI_SHARED;
const shots = join(process.env.GB_UI_OUT ?? tmpdir(), 'ui-screenshots');
const LONG = 120_000; // generous waits for conditions: CI is a loaded 2-core machine
let server = null, browser = null;

const api = async (path, key, init = {}) => {
  const r = await fetch(`${server.origin}${path}`, {
    ...init, headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json', ...(init.headers ?? {}) },
  });
  const body = await r.json();
  assert.ok(r.ok, `${path}: ${r.status} ${JSON.stringify(body)}`);
  return body;
};

// The events of an SSE body.
const sseEvents = (text) => text.split('\n\n').map((b) => b.trim()).filter((b) => b.startsWith('data: ') && b !== 'data: [DONE]')
  .map((b) => JSON.parse(b.slice(6)));

async function shot(page, name) {
  mkdirSync(shots, { recursive: true });
  await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
}

before(async () => {
  if (!glassbox || !shared) throw new Error('set GB_UI_GLASSBOX and GB_UI_SHARED');
  const model = join(shared, 'models', 'stories260K');
  const variant = editedCopy(model);
  server = await startServer(`${glassbox} serve --model ${model} --threads 1 --max-num-batched-tokens 512 --variant edited=${variant}`, [
    `api_key: ${ADMIN}`,
    'keys:',
    `  - {id: rita, key: ${RESEARCHER}, role: researcher}`,
    `  - {id: uma, key: ${USER}, role: user}`,
    'interventions: true',
    `audit_db: ${join(mkdtempSync(join(tmpdir(), 'glassbox-ui-audit-')), 'audit.db')}`,
    // stories260K has no massive activation under the standard rule; this one fires at layer 3.
    'monitor_min_abs: 5',
    'monitor_min_ratio: 5',
    'routes:',
    '  canary: [{variant: stories260K, weight: 90}, {variant: edited, weight: 10}]',
  ]);
  browser = await launchBrowser();
});

after(async () => {
  if (browser) await browser.close();
  if (server && server.proc.exitCode === null) server.proc.kill('SIGKILL');
});

test('the key gate: no request before a key; a wrong key is refused in words', async () => {
  const { page, problems, requests } = await newPage(browser);
  await page.goto(`${server.origin}/ui/`);
  await page.waitForSelector('#login:not([hidden])');
  assert.ok(!requests.some((p) => p.startsWith('/v1/') || p.startsWith('/admin/')), `requests before a key: ${requests}`);
  await shot(page, 'login');
  assert.deepEqual(problems, []);
  await page.fill('#login-key', 'sk-not-a-key');
  await page.click('#login-form button[type=submit]');
  await page.waitForFunction(() => document.querySelector('#login-error').textContent.length > 0, null, { timeout: LONG });
  assert.match(await page.textContent('#login-error'), /does not know that key/);
  assert.equal(await page.evaluate(() => sessionStorage.getItem('glassbox.api_key')), null, 'a refused key is not kept');
  await page.close();
});

test('playground: the layer chart is the API report, one point per layer; steered differs from plain', async () => {
  const { page, problems } = await newPage(browser);
  await signIn(page, server.origin, RESEARCHER);
  await page.goto(`${server.origin}/ui/#/playground`);
  await page.waitForSelector('#pg-editor');
  const nLayers = (await api('/v1/glassbox/whoami', RESEARCHER)).shape.n_layers;
  assert.equal(nLayers, 5);
  await page.fill('#pg-prompt', 'Once upon a time');
  await page.fill('#pg-max-tokens', '24');
  await page.click('#pg-add');
  const row = page.locator('#pg-interventions .iv-row').first();
  await row.locator('select[name=op]').selectOption('add');
  await row.locator('select[name=point]').selectOption('resid_post');
  await row.locator('select[name=layer]').selectOption('all');
  await row.locator('input[name=dims]').fill('3, 15, 30');
  await row.locator('input[name=strength]').fill('8');
  const responses = [];
  page.on('response', (r) => {
    if (new URL(r.url()).pathname === '/v1/completions') responses.push(r);
  });
  await page.click('#pg-run');
  await page.waitForFunction(() => ['pg-plain', 'pg-steered'].every((id) => document.getElementById(id).dataset.state === 'done'),
    null, { timeout: LONG });
  await page.waitForSelector('#pg-lens-table', { timeout: LONG });
  assert.equal(responses.length, 2);

  // The API's answer to exactly the request each pane sent, asked again from here (greedy, and a
  // sequence's statistics do not depend on its batch): its text and its glass-box report.
  const runs = {};
  for (const r of responses) {
    const body = r.request().postDataJSON();
    const res = await fetch(`${server.origin}/v1/completions`, {
      method: 'POST', headers: { Authorization: `Bearer ${RESEARCHER}`, 'Content-Type': 'application/json' }, body: JSON.stringify(body),
    });
    assert.equal(res.status, 200);
    const events = sseEvents(await res.text());
    const g = events.map((e) => e.choices && e.choices[0] && e.choices[0].glassbox).find(Boolean);
    assert.ok(g, 'the stream carries the glass-box report');
    runs[body.glassbox.interventions ? 'steered' : 'plain'] = {
      body, text: events.map((e) => (e.choices && e.choices[0] && e.choices[0].text) || '').join(''), report: g.report,
    };
  }
  assert.ok(runs.plain && runs.steered, 'one plain and one steered request');
  assert.deepEqual(runs.steered.body.glassbox.interventions,
    [{ op: 'add', layers: 'all', point: 'resid_post', dims: [3, 15, 30], strength: 8 }]);
  for (const [name, id] of [['plain', '#pg-plain'], ['steered', '#pg-steered']]) {
    const shown = await page.evaluate((sel) => document.querySelector(`${sel}-chart`).uplot.data.map((s) => Array.from(s)), id);
    const rows = runs[name].report.filter((x) => x.point === 'resid_post').sort((a, b) => a.layer - b.layer);
    assert.equal(rows.length, nLayers, `${name}: the report has every layer`);
    assert.deepEqual(shown[0], rows.map((x) => x.layer), `${name}: one point per layer`);
    assert.deepEqual(shown[1], rows.map((x) => x.max_abs), `${name}: max |x| per layer = the report's`);
    assert.deepEqual(shown[2], rows.map((x) => x.median_abs), `${name}: median |x| per layer = the report's`);
    assert.equal(await page.textContent(`${id} [data-role=output]`), runs[name].text, `${name}: the streamed text is shown`);
  }
  assert.notEqual(runs.steered.text, runs.plain.text, 'steering changed the output');
  const maxAbs = (n) => runs[n].report.filter((x) => x.point === 'resid_post').map((x) => x.max_abs);
  assert.notDeepEqual(maxAbs('steered'), maxAbs('plain'), 'and the layer statistics');
  // The lens: one row per layer, one column per prompt token; its last layer is the model.
  const lens = await api('/v1/glassbox/analyze', RESEARCHER, { method: 'POST', body: JSON.stringify({ kind: 'lens', prompt: 'Once upon a time', top_k: 1 }) });
  assert.equal(await page.locator('#pg-lens-table tbody tr').count(), nLayers);
  const lastRow = await page.locator('#pg-lens-table tbody tr').first().locator('td').allTextContents();
  assert.equal(lastRow.length, 1 + lens.result.tokens.length);
  assert.ok(lastRow[lastRow.length - 1].startsWith(JSON.stringify(lens.result.layers[nLayers - 1].positions.at(-1).top[0].text)));
  await shot(page, 'playground');
  assert.deepEqual(problems, []);
  await page.close();
});

test('admin: every page loads with no console error; monitor and variants follow the server', async () => {
  const { page, problems } = await newPage(browser);
  await signIn(page, server.origin, ADMIN);
  // Traffic on both arms of the canary route, so every page has something to show.
  const complete = (model, extra = {}) => api('/v1/completions', ADMIN, { method: 'POST',
    body: JSON.stringify({ model, prompt: 'Once upon a time', max_tokens: 12, temperature: 0, ...extra }) });
  await Promise.all([complete('stories260K'), complete('edited'), complete('stories260K', { max_tokens: 4 }), complete('canary', { user: 'u1' })]);

  await page.goto(`${server.origin}/ui/#/overview`);
  await page.waitForFunction(() => Number(document.querySelector('main').dataset.scrapes ?? 0) >= 2, null, { timeout: LONG });
  await complete('stories260K', { max_tokens: 16 });
  await page.waitForFunction(() => Number(document.querySelector('main').dataset.scrapes ?? 0) >= 3, null, { timeout: LONG });
  const finished = await page.locator('#ov-finish-table tbody tr').allTextContents();
  assert.ok(finished.some((r) => r.startsWith('stories260K')) && finished.some((r) => r.startsWith('edited')), finished.join('|'));
  await shot(page, 'overview');

  await page.goto(`${server.origin}/ui/#/monitor`);
  await page.waitForFunction(() => Number(document.querySelector('main').dataset.refreshes ?? 0) >= 1, null, { timeout: LONG });
  // New events while the page is open show in the heat map; the table's newest is the server's.
  await complete('stories260K', { max_tokens: 16 });
  await page.waitForFunction(() => Number(document.getElementById('mon-heat').dataset.max ?? 0) > 0, null, { timeout: LONG });
  const mon = await api('/v1/glassbox/monitor', ADMIN);
  assert.ok(mon.events_total > 0 && mon.layers.length === 5);
  await page.waitForFunction((i) => {
    const first = document.querySelector('#mon-events-rows tbody tr td');
    return first && Number(first.textContent) >= i;
  }, mon.recent.at(-1).index, { timeout: LONG });
  const heads = await page.locator('#mon-events-rows thead th').allTextContents();
  assert.ok(heads.includes('request'), 'an admin sees whose request it was');
  const ratio = await page.evaluate(() => document.getElementById('mon-ratio').uplot.data.map((s) => Array.from(s)));
  assert.deepEqual(ratio[0], [0, 1, 2, 3, 4]);
  await shot(page, 'monitor');

  await page.goto(`${server.origin}/ui/#/variants`);
  await page.waitForSelector('#var-models-table', { timeout: LONG });
  await page.waitForSelector('#var-versions-table', { timeout: LONG });
  const models = await page.locator('#var-models-table tbody tr td:first-child').allTextContents();
  assert.deepEqual(models, ['stories260K', 'edited']);
  // The canary weights from the page: PUT /admin/routes/canary, seen by the API.
  await page.fill('input[aria-label="canary edited weight"]', '35');
  await page.click('button.admin-control[data-alias=canary]');
  await page.waitForFunction(() => /edited: 35/.test(document.querySelector('#var-routes-table').textContent), null, { timeout: LONG });
  const routes = await api('/admin/routes', ADMIN);
  assert.deepEqual(routes.routes.canary, [{ variant: 'stories260K', weight: 90 }, { variant: 'edited', weight: 35 }]);
  await shot(page, 'variants');

  await page.goto(`${server.origin}/ui/#/audit`);
  await page.waitForSelector('#au-table', { timeout: LONG });
  const all = await api('/admin/audit?limit=1000', ADMIN);
  assert.equal(await page.locator('#au-table tbody tr').count(), all.data.length, 'every row (fewer than the limit)');
  // The filters are the CLI's: kind=route finds the weight change just made.
  await page.selectOption('#au-kind', 'route');
  await page.click('#au-form button[type=submit]');
  await page.waitForFunction(() => [...document.querySelectorAll('#au-table tbody tr')].every((r) => r.children[2].textContent === 'route'),
    null, { timeout: LONG });
  const routeRows = await api('/admin/audit?kind=route', ADMIN);
  assert.equal(await page.locator('#au-table tbody tr').count(), routeRows.data.length);
  assert.ok(routeRows.data.length >= 1);
  await page.selectOption('#au-kind', '');
  await page.fill('#au-key-id', 'rita');
  await page.click('#au-form button[type=submit]');
  await page.waitForFunction(() => [...document.querySelectorAll('#au-table tbody tr')].every((r) => r.children[3].textContent === 'rita'),
    null, { timeout: LONG });
  assert.equal(await page.locator('#au-table tbody tr').count(), (await api('/admin/audit?key_id=rita', ADMIN)).data.length);
  await page.fill('#au-key-id', '');
  await page.click('#au-form button[type=submit]');
  const again = await api('/admin/audit?limit=1000', ADMIN);
  await page.waitForFunction((n) => document.querySelectorAll('#au-table tbody tr').length === n, again.data.length, { timeout: LONG });
  await shot(page, 'audit');
  assert.deepEqual(problems, []);
  await page.close();
});

test('a user key sees no admin page, control or data, and never calls an admin route', async () => {
  const { page, problems, requests } = await newPage(browser);
  await signIn(page, server.origin, USER);
  assert.equal(await page.isVisible('#nav a[data-page=audit]'), false, 'no Audit page in the navigation');
  for (const name of ['overview', 'monitor', 'playground', 'variants']) assert.ok(await page.isVisible(`#nav a[data-page=${name}]`), name);
  // A typed-in admin address lands on the overview.
  await page.goto(`${server.origin}/ui/#/audit`);
  await page.waitForFunction(() => document.querySelector('main').dataset.page === 'overview', null, { timeout: LONG });
  await page.goto(`${server.origin}/ui/#/variants`);
  await page.waitForFunction(() => Number(document.querySelector('main').dataset.refreshes ?? 0) >= 1, null, { timeout: LONG });
  assert.equal(await page.locator('.admin-control').count(), 0, 'no admin control');
  assert.equal(await page.locator('#var-admin').count(), 0, 'no admin section');
  assert.match(await page.textContent('#var-routes-table'), /edited: 35/, 'the route as a client sees it');
  await shot(page, 'variants-user');
  await page.goto(`${server.origin}/ui/#/monitor`);
  await page.waitForSelector('#mon-events-rows', { timeout: LONG });
  const heads = await page.locator('#mon-events-rows thead th').allTextContents();
  assert.ok(!heads.includes('request'), 'no request ids of other keys');
  await page.goto(`${server.origin}/ui/#/playground`);
  await page.waitForSelector('#pg-no-editor');
  assert.equal(await page.locator('#pg-editor').count(), 0, 'a user may not intervene: no editor');
  await page.click('#pg-run');
  await page.waitForFunction(() => document.getElementById('pg-plain').dataset.state === 'done', null, { timeout: LONG });
  const shown = await page.evaluate(() => document.querySelector('#pg-plain-chart').uplot.data[0].length);
  assert.equal(shown, 5, 'a user may observe (observe_roles): five layers');
  await shot(page, 'playground-user');
  assert.ok(!requests.some((p) => p.startsWith('/admin/')), `admin requests: ${requests.filter((p) => p.startsWith('/admin/'))}`);
  assert.deepEqual(problems, []);
  // The server agrees: the same key gets 403 from an admin route.
  const r = await fetch(`${server.origin}/admin/audit`, { headers: { Authorization: `Bearer ${USER}` } });
  assert.equal(r.status, 403);
  await page.close();
});

test('static files: content types, a CSP, no path outside the UI directory', async () => {
  const get = (p) => fetch(`${server.origin}${p}`, { redirect: 'manual' });
  const index = await get('/ui/');
  assert.equal(index.status, 200);
  assert.equal(index.headers.get('content-type'), 'text/html; charset=utf-8');
  assert.match(index.headers.get('content-security-policy'), /default-src 'self'/);
  assert.equal((await get('/ui/js/app.js')).headers.get('content-type'), 'text/javascript; charset=utf-8');
  assert.equal((await get('/ui/vendor/uplot/uPlot.iife.min.js')).status, 200, 'uPlot is served from the build');
  assert.equal((await get('/ui')).status, 301);
  for (const p of ['/ui/../CMakeCache.txt', '/ui/%2e%2e/CMakeCache.txt', '/ui/.hidden.js', '/ui/js//app.js', '/ui/nothing.js', '/ui/index.exe']) {
    assert.equal((await get(p)).status, 404, p);
  }
});
