// A few DOM helpers: h('tag.class', {attrs}, ...children), tables, number formatting.
export function h(spec, attrs = {}, ...children) {
  const [tag, ...classes] = spec.split('.');
  const e = document.createElement(tag || 'div');
  if (classes.length) e.className = classes.join(' ');
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v == null || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(e.dataset, v);
    else if (k in e && typeof v !== 'string') e[k] = v;
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) if (c != null && c !== false) e.append(c instanceof Node ? c : String(c));
  return e;
}

// A table from column names and rows of cells (strings, numbers or nodes).
export function table(columns, rows, attrs = {}) {
  return h('table', attrs,
    h('thead', {}, h('tr', {}, columns.map((c) => h('th', {}, c)))),
    h('tbody', {}, rows.map((r) => h('tr', {}, r.map((c) => h('td', {}, c ?? '–'))))));
}

export const num = (v, digits = 3) =>
  v == null || Number.isNaN(v) ? '–' : Number.isInteger(v) && Math.abs(v) < 1e6 ? String(v) : Number(v).toPrecision(digits);
export const ms = (s) => (s == null || Number.isNaN(s) ? '–' : s < 1 ? `${(s * 1000).toPrecision(3)} ms` : `${s.toPrecision(3)} s`);
export const pct = (r) => (r == null || Number.isNaN(r) ? '–' : `${(100 * r).toFixed(1)}%`);

// A labelled tile with a big number.
export function tile(label, id) {
  return h('div.tile', {}, h('div.tile-label', {}, label), h('div.tile-value', { id }, '–'));
}

export function setText(root, id, text) {
  const e = root.querySelector(`#${id}`);
  if (e) e.textContent = text;
}
