// Debian's Chromium driven by playwright-core (from npm; no browser is ever downloaded), headless,
// in a fresh profile. A missing browser is an error, never a skip: CI installs it (scripts/setup.sh).
import { closeSync, cpSync, existsSync, mkdtempSync, openSync, readSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { require } from '../e2e/server_process.mjs';

export const CHROMIUM = process.env.GB_CHROMIUM ?? '/usr/bin/chromium';

export async function launchBrowser() {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} not found: install Debian's chromium (scripts/setup.sh)`);
  const { chromium } = require('playwright-core');
  const profile = mkdtempSync(join(tmpdir(), 'glassbox-chromium-'));
  return chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1360, height: 900 },
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
}

// A new page that records console errors, uncaught exceptions and the requests it makes.
export async function newPage(context) {
  const page = await context.newPage();
  const problems = [];
  const requests = [];
  page.on('console', (m) => {
    if (m.type() === 'error') problems.push(`console error: ${m.text()} (${m.location().url})`);
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('requestfailed', (r) => {
    const why = r.failure() ? r.failure().errorText : '';
    if (!/ERR_ABORTED/.test(why)) problems.push(`request failed: ${r.url()} ${why}`);
  });
  page.on('request', (r) => requests.push(new URL(r.url()).pathname));
  return { page, problems, requests };
}

// Opens the dashboard at origin and signs in with key; resolves once the navigation shows.
export async function signIn(page, origin, key) {
  await page.goto(`${origin}/ui/`);
  await page.fill('#login-key', key);
  await page.click('#login-form button[type=submit]');
  await page.waitForSelector('#nav:not([hidden])', { timeout: 60_000 });
}

// A copy of stories260K with one MLP matrix's first 64 weights changed: a variant the server
// diffs against the base at load.
export function editedCopy(base) {
  const dir = join(mkdtempSync(join(tmpdir(), 'glassbox-ui-variant-')), 'edited');
  cpSync(base, dir, { recursive: true });
  const file = join(dir, 'model.safetensors');
  const fd = openSync(file, 'r+');
  const head = Buffer.alloc(8);
  readSync(fd, head, 0, 8, 0);
  const n = Number(head.readBigUInt64LE(0));
  const header = Buffer.alloc(n);
  readSync(fd, header, 0, n, 8);
  const t = JSON.parse(header.toString())['model.layers.1.mlp.down_proj.weight'];
  const at = 8 + n + t.data_offsets[0];
  const w = Buffer.alloc(64 * 4);
  readSync(fd, w, 0, w.length, at);
  for (let i = 0; i < 64; i++) w.writeFloatLE(w.readFloatLE(i * 4) + 0.25, i * 4);
  writeSync(fd, w, 0, w.length, at);
  closeSync(fd);
  return dir;
}

