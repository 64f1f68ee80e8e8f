// Variants: each served model (the base and its weight variants, /v1/models) with its truncation
// rate, output lengths and latency from /metrics (since the server started), the output-length
// distribution, and the canary routes. Admin keys also see the variants' versions and standby
// (/admin/variants, with rollback) and change a route's weights (/admin/routes).
import { api, metricsText } from '../api.js';
import { h, ms, num, pct, table } from '../dom.js';
import { buckets, parseMetrics, quantile, sum } from '../prom.js';
import { barChart } from '../charts.js';

export const REFRESH_MS = 5000;

function routeEditor(alias, arms, onSaved) {
  const inputs = arms.map((a) => h('input', { type: 'number', min: 0, step: 1, value: String(a.weight), 'aria-label': `${alias} ${a.model} weight`, dataset: { model: a.model } }));
  const msg = h('span.sub');
  const save = h('button', { type: 'button', class: 'admin-control', dataset: { alias } }, 'Save weights');
  save.addEventListener('click', async () => {
    msg.textContent = 'saving…';
    try {
      await api(`/admin/routes/${encodeURIComponent(alias)}`, { method: 'PUT', body: { arms: inputs.map((i) => ({ variant: i.dataset.model, weight: Number(i.value) })) } });
      onSaved();
    } catch (e) {
      msg.textContent = e.message;
    }
  });
  return h('div.route-edit', {}, arms.map((a, i) => h('label.field', {}, h('span', {}, a.model), inputs[i])), save, msg);
}

export function mount(root, { who }) {
  const admin = who.can.admin;
  root.append(
    h('h1', {}, 'Variants'),
    h('p.sub', {}, 'Per served model since the server started (from /metrics); the truncation rate is finish_reason = length over all finished choices.'),
    h('p.error', { id: 'var-error', role: 'alert' }),
    h('div.card', {}, h('h2', {}, 'Served models'), h('div', { id: 'var-models' })),
    h('div.card', {}, h('h2', {}, 'Output length distribution'), h('div.chart', { id: 'var-lengths' })),
    h('div.card', {}, h('h2', {}, 'Canary routes'), h('div', { id: 'var-routes' })),
    admin ? h('div.card', { id: 'var-admin' }, h('h2', {}, 'Loaded versions (admin)'), h('div', { id: 'var-versions' })) : null,
  );
  let chart = null, chartModels = '', shownRoutes = '', shownVersions = '';
  const abort = new AbortController();
  let timer = null;

  async function refresh() {
    try {
      const [models, text, versions, routes] = await Promise.all([
        api('/v1/models', { signal: abort.signal }),
        metricsText(abort.signal),
        admin ? api('/admin/variants', { signal: abort.signal }) : null,
        admin ? api('/admin/routes', { signal: abort.signal }) : null,
      ]);
      const s = parseMetrics(text);
      const served = models.data.filter((m) => !(m.glassbox && m.glassbox.route));
      const aliases = models.data.filter((m) => m.glassbox && m.glassbox.route);
      const rows = served.map((m) => {
        const f = { model: m.id };
        const all = sum(s, 'glassbox_request_finished_total', f);
        const len = sum(s, 'glassbox_request_finished_total', { ...f, finish_reason: 'length' });
        const count = sum(s, 'glassbox_request_generation_tokens_count', f);
        const v = m.glassbox && m.glassbox.variant;
        return [m.id, m.parent ?? 'base', v ? `${v.source} ${v.version ?? ''}` : '–', num(all), all > 0 ? pct(len / all) : '–',
          count > 0 ? num(sum(s, 'glassbox_request_generation_tokens_sum', f) / count) : '–',
          num(quantile(0.9, buckets(s, 'glassbox_request_generation_tokens', f))),
          ms(quantile(0.5, buckets(s, 'glassbox_time_to_first_token_seconds', f))),
          ms(quantile(0.5, buckets(s, 'glassbox_e2e_request_latency_seconds', f)))];
      });
      root.querySelector('#var-models').replaceChildren(table(['model', 'parent', 'variant', 'finished', 'truncation rate', 'mean length', 'p90 length', 'TTFT p50', 'latency p50'], rows, { id: 'var-models-table' }));
      // Output lengths: per model, the choices in each bucket (the histogram's increments).
      const names = served.map((m) => m.id).join(',');
      // Up to the longest bucket any model has used (the histogram runs to 128k tokens).
      const full = served.map((m) => buckets(s, 'glassbox_request_generation_tokens', { model: m.id }));
      const used = Math.max(0, ...full.map((b) => b.findIndex((x) => x.count === b[b.length - 1].count)));
      const hist = full.map((b) => b.slice(0, Math.max(used + 1, Math.min(4, b.length))));
      const les = hist.length ? hist[0].map((b) => b.le) : [];
      const labels = les.map((le, i) => (le === Infinity ? `>${les[i - 1]}` : `≤${le}`));
      if (chartModels !== names) {
        if (chart) chart.destroy();
        chart = barChart(root.querySelector('#var-lengths'), { series: served.map((m) => ({ label: m.id })), labels, yLabel: 'choices' });
        chartModels = names;
      }
      chart.setData([les.map((_, i) => i), ...hist.map((b) => b.map((x, i) => x.count - (i > 0 ? b[i - 1].count : 0)))], labels);
      // Routes: what clients see; admins can change the weights.
      // Rebuilt only when they change, so an admin's edit in progress is not wiped by a refresh.
      const routesKey = JSON.stringify(aliases.map((a) => [a.id, a.glassbox.route]));
      const routeRows = routesKey === shownRoutes ? null : aliases.map((a) => [a.id, a.glassbox.route.map((x) => `${x.model}: ${x.weight}`).join(', '),
        admin ? routeEditor(a.id, a.glassbox.route, refresh) : null].filter((c) => c !== null));
      shownRoutes = routesKey;
      if (routeRows) root.querySelector('#var-routes').replaceChildren(routeRows.length
        ? table(['alias', 'arms (weights)', ...(admin ? ['change'] : [])], routeRows, { id: 'var-routes-table' })
        : h('p.sub', {}, 'No canary route (routes: in the config file, or PUT /admin/routes/ALIAS).'));
      const versionsKey = admin ? JSON.stringify([versions.data, routes.shadow]) : '';
      if (admin && versionsKey !== shownVersions) {
        shownVersions = versionsKey;
        const shadows = Object.entries(routes.shadow ?? {}).map(([m, x]) => `${m} → ${x.variant} (${pct(x.share)})`).join('; ');
        const vrows = versions.data.map((v) => [v.name, v.version ?? '–', v.source, (v.sha256 ?? '').slice(0, 12), num(v.memory_bytes), v.previous ? `${v.previous.version ?? v.previous.sha256.slice(0, 12)}` : '–',
          v.previous ? h('button', { type: 'button', class: 'admin-control', onclick: async (ev) => {
            ev.target.disabled = true;
            try {
              await api(`/admin/variants/${encodeURIComponent(v.name)}/rollback`, { method: 'POST', body: {} });
            } catch (e) {
              root.querySelector('#var-error').textContent = e.message;
            }
            shownVersions = '';
            refresh();
          } }, 'Roll back') : '–']);
        root.querySelector('#var-versions').replaceChildren(vrows.length
          ? table(['variant', 'version', 'source', 'sha256', 'bytes', 'standby', ''], vrows, { id: 'var-versions-table' })
          : h('p.sub', {}, 'No weight variant is loaded (--variant NAME=PATH, or PUT /admin/variants/NAME).'),
          h('p.sub', {}, `Shadow copies: ${shadows || 'none'}`));
      }
      root.querySelector('#var-error').textContent = '';
      root.dataset.refreshes = String(Number(root.dataset.refreshes ?? 0) + 1);
    } catch (e) {
      if (e.name !== 'AbortError') root.querySelector('#var-error').textContent = e.message;
    }
    clearTimeout(timer);
    if (!abort.signal.aborted) timer = setTimeout(refresh, REFRESH_MS);
  }
  refresh();
  return () => {
    abort.abort();
    clearTimeout(timer);
    if (chart) chart.destroy();
  };
}
