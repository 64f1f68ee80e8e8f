// Does an open dashboard cost decode speed? One greedy stream at a time against a running
// Glassbox server, decode tokens/s per request ((n − 1) / (t_last − t_first)), in reps that
// alternate between no dashboard page and the Overview and Monitor pages open in headless
// Chromium (each polling at its refresh interval, 3 s), so drift on a shared machine hits both
// alike; a third condition polls the same endpoints from this process instead of a browser (the
// server's share of the cost, without Chromium's rendering on the same CPUs). Prints per condition the median of the rep medians with their min and max.
//
// Usage: node bench/serve/dashboard_overhead.mjs --url http://127.0.0.1:8000 --key KEY
//          [--reps 6] [--requests 3] [--output-len 128]
import { parseArgs } from 'node:util';
import { launchBrowser, signIn } from '../../tests/ui/browser.mjs';

const { values: opt } = parseArgs({
  options: {
    url: { type: 'string', default: 'http://127.0.0.1:8000' },
    key: { type: 'string', default: '' },
    reps: { type: 'string', default: '6' },
    requests: { type: 'string', default: '3' },
    'output-len': { type: 'string', default: '128' },
  },
});
const headers = { 'Content-Type': 'application/json', Authorization: `Bearer ${opt.key}` };
const median = (a) => [...a].sort((x, y) => x - y)[Math.floor((a.length - 1) / 2)];

async function decodeRate() {
  const res = await fetch(`${opt.url}/v1/completions`, {
    method: 'POST', headers,
    body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: Number(opt['output-len']), temperature: 0, ignore_eos: true, stream: true }),
  });
  if (!res.ok) throw new Error(`${res.status} ${await res.text()}`);
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let first = 0, last = 0, n = 0, buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      if (!ev.startsWith('data: {')) continue;
      const c = JSON.parse(ev.slice(6)).choices[0];
      if (!c || !c.text) continue;
      const t = performance.now();
      if (n === 0) first = t;
      last = t;
      n++;
    }
  }
  return ((n - 1) * 1000) / (last - first);
}

for (let i = 0; ; i++) { // the model may still be loading
  const r = await fetch(`${opt.url}/ready`).catch(() => null);
  if (r && r.status === 200) break;
  if (i === 1200) throw new Error(`${opt.url} is not ready after 120 s`);
  await new Promise((res) => setTimeout(res, 100));
}
const browser = await launchBrowser();
const results = { off: [], poll: [], on: [] };
// What the two pages request every 3 s: /metrics (Overview) and /v1/glassbox/monitor (Monitor).
function poller() {
  let stop = false;
  (async () => {
    while (!stop) {
      await Promise.all([fetch(`${opt.url}/metrics`).then((r) => r.text()),
        fetch(`${opt.url}/v1/glassbox/monitor`, { headers }).then((r) => r.text())]);
      await new Promise((res) => setTimeout(res, 3000));
    }
  })();
  return () => (stop = true);
}
await decodeRate(); // warm-up
for (let rep = 0; rep < Number(opt.reps); rep++) {
  const order = [['off', 'poll', 'on'], ['on', 'off', 'poll'], ['poll', 'on', 'off']][rep % 3];
  for (const cond of order) {
    const pages = [];
    const stopPolling = cond === 'poll' ? poller() : () => {};
    if (cond === 'on') {
      for (const page of ['overview', 'monitor']) {
        const p = await browser.newPage();
        await signIn(p, opt.url, opt.key);
        await p.goto(`${opt.url}/ui/#/${page}`);
        pages.push(p);
      }
    }
    const rates = [];
    for (let i = 0; i < Number(opt.requests); i++) rates.push(await decodeRate());
    results[cond].push(median(rates));
    stopPolling();
    for (const p of pages) await p.close();
  }
}
await browser.close();
for (const [cond, r] of Object.entries(results)) {
  const name = { off: 'no dashboard', poll: 'its polling alone', on: 'dashboard open (2 pages)' }[cond];
  console.log(`${name.padEnd(24)}: decode ${median(r).toFixed(1)} tok/s (rep medians ${Math.min(...r).toFixed(1)}–${Math.max(...r).toFixed(1)}; ${r.map((x) => x.toFixed(1)).join(', ')})`);
}
