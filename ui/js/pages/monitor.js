// Monitor: the always-on massive-activation monitor (GET /v1/glassbox/monitor): events per layer
// over time as a heat map (the increase of each layer's count per refresh), each layer's
// max/median ratio (the last sampled step's and the peak) against the rule, the latest events.
import { api } from '../api.js';
import { h, num, setText, table } from '../dom.js';
import { heatMap, layerChart } from '../charts.js';

export const REFRESH_MS = 3000;
const COLUMNS = 60; // refreshes shown in the heat map (3 minutes)

export function mount(root, { who }) {
  root.append(
    h('h1', {}, 'Monitor'),
    h('p.sub', { id: 'mon-rule' }, 'Loading the monitor…'),
    h('p.error', { id: 'mon-error', role: 'alert' }),
    h('div.tiles', {}, h('div.tile', {}, h('div.tile-label', {}, 'steps sampled'), h('div.tile-value', { id: 'mon-steps' }, '–')),
      h('div.tile', {}, h('div.tile-label', {}, 'events'), h('div.tile-value', { id: 'mon-events' }, '–')),
      h('div.tile', {}, h('div.tile-label', {}, 'rows checked'), h('div.tile-value', { id: 'mon-rows' }, '–'))),
    h('div.grid2', {},
      h('div.card', {}, h('h2', {}, 'Massive-activation events per layer over time'), h('div.chart', { id: 'mon-heat' }),
        h('p.sub', {}, 'Rows: layers (0 at the bottom). Columns: refreshes, newest on the right. Colour: events in that interval (log scale).')),
      h('div.card', {}, h('h2', {}, 'max |x| / median |x| per layer'), h('div.chart', { id: 'mon-ratio' }))),
    h('div.card', {}, h('h2', {}, 'Latest events (newest first, the last 100)'), h('div.scroll-y', { id: 'mon-events-table' })),
  );
  let heat = null;
  const ratio = layerChart(root.querySelector('#mon-ratio'), { series: [{ label: 'last sampled step' }, { label: 'peak' }, { label: 'rule: min_ratio' }] });
  const columns = []; // [per layer increase] per refresh
  let lastCounts = null;
  const events = []; // newest last, at most 100
  let after = 0;
  const abort = new AbortController();
  let timer = null;

  async function refresh() {
    try {
      const m = await api(`/v1/glassbox/monitor?after=${after}`, { signal: abort.signal });
      const r = m.rule;
      setText(root, 'mon-rule', m.enabled
        ? `Sampling one engine step in ${m.every_steps} at resid_post of every layer; an event is |x| > ${r.min_abs} ${r.fire_on === 'both' ? 'and' : r.fire_on} > ${r.min_ratio} × the ${r.median} median |x|. Refreshed every ${REFRESH_MS / 1000} s.`
        : 'The monitor is off on this server (monitor_every_steps: 0).');
      setText(root, 'mon-steps', num(m.steps_sampled));
      setText(root, 'mon-events', num(m.events_total));
      setText(root, 'mon-rows', num(m.rows_checked));
      const counts = m.layers.map((l) => l.events);
      if (!heat) heat = heatMap(root.querySelector('#mon-heat'), { rowLabel: (i) => `layer ${i}`, colLabel: (j) => `-${(columns.length - j) * REFRESH_MS / 1000}s` });
      if (lastCounts) {
        columns.push(counts.map((c, i) => Math.max(0, c - (lastCounts[i] ?? 0))));
        if (columns.length > COLUMNS) columns.shift();
      }
      lastCounts = counts;
      // rows = layers, columns = time
      heat.setData(counts.map((_, l) => columns.map((col) => col[l] ?? 0)));
      const pos = (v) => (typeof v === 'number' && v > 0 ? v : null);
      ratio.setData([m.layers.map((l) => l.layer), m.layers.map((l) => pos(l.last_max_ratio)), m.layers.map((l) => pos(l.peak_max_ratio)),
        m.layers.map(() => pos(r.min_ratio))]);
      for (const e of m.recent) events.push(e);
      if (m.recent.length) after = m.recent[m.recent.length - 1].index;
      while (events.length > 100) events.shift();
      const admin = who.can.admin;
      const rows = [...events].reverse().map((e) => [String(e.index), String(e.layer), e.point, String(e.token), String(e.dim), num(e.value),
        num(e.median_abs), num(e.ratio), ...(admin ? [e.request_id ?? ''] : [])]);
      root.querySelector('#mon-events-table').replaceChildren(rows.length
        ? table(['#', 'layer', 'point', 'token', 'dim', 'value', 'median |x|', 'ratio', ...(admin ? ['request'] : [])], rows, { id: 'mon-events-rows' })
        : h('p.sub', {}, 'No massive activation since the server started.'));
      setText(root, 'mon-error', '');
      root.dataset.refreshes = String(Number(root.dataset.refreshes ?? 0) + 1);
    } catch (e) {
      if (e.name !== 'AbortError') setText(root, 'mon-error', `monitor: ${e.message}`);
    }
    if (!abort.signal.aborted) timer = setTimeout(refresh, REFRESH_MS);
  }
  refresh();
  return () => {
    abort.abort();
    clearTimeout(timer);
    ratio.destroy();
    if (heat) heat.destroy();
  };
}
