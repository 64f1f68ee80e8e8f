// Overview: serving health at a glance, from /metrics (the same text Prometheus scrapes, parsed
// here; rates and percentiles over the scrapes of the last minute, as rate() and
// histogram_quantile() compute them), refreshed every REFRESH_MS.
import { metricsText } from '../api.js';
import { h, ms, num, pct, setText, table, tile } from '../dom.js';
import { ScrapeWindow, increase, parseMetrics, sum, sumBy } from '../prom.js';
import { timeChart } from '../charts.js';

export const REFRESH_MS = 3000;
const HISTORY = 120; // points kept in the charts (6 minutes)

export function mount(root) {
  root.append(
    h('h1', {}, 'Overview'),
    h('p.sub', {}, `Live from /metrics, refreshed every ${REFRESH_MS / 1000} s; rates over the last scrape interval, percentiles over the last minute.`),
    h('p.error', { id: 'ov-error', role: 'alert' }),
    h('div.tiles', {},
      tile('output tokens/s', 'ov-gen-tps'), tile('prompt tokens/s', 'ov-prompt-tps'),
      tile('TTFT p50 / p99', 'ov-ttft'), tile('inter-token p50 / p99', 'ov-itl'),
      tile('running / waiting', 'ov-queue'), tile('KV cache used', 'ov-kv'),
      tile('requests/s', 'ov-rps'), tile('truncated (length)', 'ov-trunc')),
    h('div.grid2', {},
      h('div.card', {}, h('h2', {}, 'Tokens per second'), h('div.chart', { id: 'ov-chart-tps' })),
      h('div.card', {}, h('h2', {}, 'Requests running and waiting'), h('div.chart', { id: 'ov-chart-queue' })),
      h('div.card', {}, h('h2', {}, 'KV cache use'), h('div.chart', { id: 'ov-chart-kv' })),
      h('div.card', {}, h('h2', {}, 'Finished requests by model and finish reason'), h('div', { id: 'ov-finish' }))),
  );
  const tps = timeChart(root.querySelector('#ov-chart-tps'), { series: [{ label: 'output' }, { label: 'prompt' }], yLabel: 'tokens/s' });
  const queue = timeChart(root.querySelector('#ov-chart-queue'), { series: [{ label: 'running' }, { label: 'waiting' }], yLabel: 'sequences' });
  const kv = timeChart(root.querySelector('#ov-chart-kv'), { series: [{ label: 'KV used' }], yLabel: '%' });
  const window60 = new ScrapeWindow(60);
  const hist = { t: [], gen: [], prompt: [], run: [], wait: [], kv: [] };
  const abort = new AbortController();
  let timer = null;

  async function refresh() {
    try {
      const text = await metricsText(abort.signal);
      const now = Date.now();
      const s = parseMetrics(text);
      window60.push(now, s);
      const prev = window60.previous;
      const dt = prev ? (now - prev.t) / 1000 : 0;
      const rate = (name, match) => (prev && dt > 0 ? increase(sum(prev.samples, name, match), sum(s, name, match)) / dt : null);
      const gen = rate('glassbox_generation_tokens_total'), prompt = rate('glassbox_prompt_tokens_total');
      const rps = rate('glassbox_request_finished_total');
      const running = sum(s, 'glassbox_num_requests_running'), waiting = sum(s, 'glassbox_num_requests_waiting');
      const kvUse = sum(s, 'glassbox_kv_cache_usage_ratio');
      const q = (p, n) => window60.quantile(p, n);
      setText(root, 'ov-gen-tps', num(gen));
      setText(root, 'ov-prompt-tps', num(prompt));
      setText(root, 'ov-ttft', `${ms(q(0.5, 'glassbox_time_to_first_token_seconds'))} / ${ms(q(0.99, 'glassbox_time_to_first_token_seconds'))}`);
      setText(root, 'ov-itl', `${ms(q(0.5, 'glassbox_inter_token_latency_seconds'))} / ${ms(q(0.99, 'glassbox_inter_token_latency_seconds'))}`);
      setText(root, 'ov-queue', `${running} / ${waiting}`);
      setText(root, 'ov-kv', pct(kvUse));
      setText(root, 'ov-rps', num(rps));
      const all = sum(s, 'glassbox_request_finished_total');
      setText(root, 'ov-trunc', all > 0 ? pct(sum(s, 'glassbox_request_finished_total', { finish_reason: 'length' }) / all) : '–');
      if (prev) {
        hist.t.push(now / 1000);
        hist.gen.push(gen);
        hist.prompt.push(prompt);
        hist.run.push(running);
        hist.wait.push(waiting);
        hist.kv.push(100 * kvUse);
        for (const k of Object.keys(hist)) if (hist[k].length > HISTORY) hist[k].shift();
        tps.setData([hist.t, hist.gen, hist.prompt]);
        queue.setData([hist.t, hist.run, hist.wait]);
        kv.setData([hist.t, hist.kv]);
      }
      const models = [...sumBy(s, 'glassbox_request_finished_total', 'model').keys()].sort();
      const reasons = [...sumBy(s, 'glassbox_request_finished_total', 'finish_reason').keys()].sort();
      const rows = models.map((m) => {
        const total = sum(s, 'glassbox_request_finished_total', { model: m });
        return [m, ...reasons.map((r) => num(sum(s, 'glassbox_request_finished_total', { model: m, finish_reason: r }))), num(total),
          total > 0 ? pct(sum(s, 'glassbox_request_finished_total', { model: m, finish_reason: 'length' }) / total) : '–'];
      });
      root.querySelector('#ov-finish').replaceChildren(models.length
        ? table(['model', ...reasons, 'all', 'truncation rate'], rows, { id: 'ov-finish-table' })
        : h('p.sub', {}, 'No request has finished yet.'));
      setText(root, 'ov-error', '');
      root.dataset.scrapes = String(window60.scrapes.length);
    } catch (e) {
      if (e.name !== 'AbortError') setText(root, 'ov-error', `metrics: ${e.message}`);
    }
    if (!abort.signal.aborted) timer = setTimeout(refresh, REFRESH_MS);
  }
  refresh();
  return () => {
    abort.abort();
    clearTimeout(timer);
    tps.destroy();
    queue.destroy();
    kv.destroy();
  };
}
