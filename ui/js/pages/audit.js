// Audit (admin keys only): the audit store's rows through GET /admin/audit, with the filters of
// `glassbox audit` — kind, key id, request id, since (inclusive), until (exclusive), limit — and
// paging by id (after_id), newest pages last as in the CLI. A row's spec opens below it.
import { api } from '../api.js';
import { h, table } from '../dom.js';

export function mount(root, { who }) {
  const kind = h('select', { id: 'au-kind', 'aria-label': 'kind' }, h('option', { value: '' }, 'any kind'),
    (who.audit_kinds ?? []).map((k) => h('option', { value: k }, k)));
  const keyId = h('input', { id: 'au-key-id', type: 'text', placeholder: 'key id' });
  const requestId = h('input', { id: 'au-request-id', type: 'text', placeholder: 'request id' });
  const since = h('input', { id: 'au-since', type: 'datetime-local', step: 1, 'aria-label': 'since' });
  const until = h('input', { id: 'au-until', type: 'datetime-local', step: 1, 'aria-label': 'until' });
  const limit = h('input', { id: 'au-limit', type: 'number', min: 1, max: 1000, value: '100', 'aria-label': 'limit' });
  const field = (label, input) => h('label.field', {}, h('span', {}, label), input);
  const prev = h('button', { id: 'au-prev', type: 'button', disabled: true }, '← Previous');
  const next = h('button', { id: 'au-next', type: 'button', disabled: true }, 'Next →');
  const info = h('p.sub', { id: 'au-info' });
  const error = h('p.error', { id: 'au-error', role: 'alert' });
  const results = h('div.scroll', { id: 'au-results' });
  const form = h('form.card', { id: 'au-form' },
    h('div.row', {}, field('kind', kind), field('key id', keyId), field('request id', requestId),
      field('since (local time)', since), field('until', until), field('limit', limit), h('button', { type: 'submit' }, 'Search')));
  root.append(h('h1', {}, 'Audit'),
    h('p.sub', {}, 'Every steered request and every policy, preset, vector, session, default-set, variant and route change, committed before it took effect.'),
    form, error, h('div.card', {}, h('div.row', {}, prev, next, info), results));

  const pages = [0]; // after_id of each page shown so far
  const abort = new AbortController();

  function query(afterId) {
    const q = new URLSearchParams();
    if (kind.value) q.set('kind', kind.value);
    if (keyId.value.trim()) q.set('key_id', keyId.value.trim());
    if (requestId.value.trim()) q.set('request_id', requestId.value.trim());
    if (since.value) q.set('since', new Date(since.value).toISOString());
    if (until.value) q.set('until', new Date(until.value).toISOString());
    q.set('limit', limit.value || '100');
    if (afterId > 0) q.set('after_id', String(afterId));
    return `/admin/audit?${q}`;
  }

  async function load() {
    const afterId = pages[pages.length - 1];
    error.textContent = '';
    try {
      const r = await api(query(afterId), { signal: abort.signal });
      const n = Number(limit.value || 100);
      const rows = r.data.map((x) => {
        const tokens = x.kind === 'request' ? `${x.prompt_tokens}+${x.completion_tokens}` : '–';
        const spec = h('details', {}, h('summary', {}, (x.spec_hash ?? '').slice(0, 12)), h('pre', {}, JSON.stringify(x.spec, null, 1)));
        return [String(x.id), x.time, x.kind, x.key_id || '–', x.request_id || '–', x.model || '–', x.action || '–',
          x.kind === 'request' ? String(x.status) : '–', x.finish_reason || '–', tokens, spec];
      });
      results.replaceChildren(rows.length
        ? table(['id', 'time', 'kind', 'key_id', 'request_id', 'model', 'action', 'status', 'finish_reason', 'tokens', 'spec'], rows, { id: 'au-table' })
        : h('p.sub', {}, 'No audit row matches.'));
      info.textContent = rows.length ? `rows ${r.data[0].id}–${r.last_id}` : '';
      prev.disabled = pages.length <= 1;
      next.disabled = r.data.length < n;
      next.onclick = () => {
        pages.push(r.last_id);
        load();
      };
      root.dataset.loads = String(Number(root.dataset.loads ?? 0) + 1);
    } catch (e) {
      if (e.name !== 'AbortError') error.textContent = e.message;
    }
  }
  prev.addEventListener('click', () => {
    if (pages.length > 1) pages.pop();
    load();
  });
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    pages.length = 1;
    load();
  });
  load();
  return () => abort.abort();
}
