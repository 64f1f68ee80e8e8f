// Playground: a prompt (or a chat message) and sampling settings → the streamed output, with the
// request's per-layer statistics (the glass-box report: max |x| and median |x| per layer at one
// hook point, log scale) and the logit lens of the prompt (POST /v1/glassbox/analyze). With an
// intervention in the editor (keys whose role may intervene) the plain and the steered request
// run side by side, each with its output and its layer chart.
import { api, stream } from '../api.js';
import { h, ms, num, table } from '../dom.js';
import { layerChart } from '../charts.js';

const POINTS = ['resid_post', 'resid_pre', 'attn_in', 'attn_out', 'resid_mid', 'mlp_act', 'mlp_out'];
const OPS = {
  scale: { min: -1, max: 10, step: 0.05, value: 2, help: 'x·(1+s) on the dims' },
  add: { min: -50, max: 50, step: 0.5, value: 10, help: 'x + s on the dims' },
  set: { min: -50, max: 50, step: 0.5, value: 0, help: 'x = s on the dims' },
  clamp: { min: 0, max: 50, step: 0.5, value: 1, help: '|x| ≤ s on the dims' },
  skip: { help: "the layer's resid_post = its resid_pre" },
};

// "5, 7 9" → [5, 7, 9]; "" → null (every dim). Throws on anything else.
function parseDims(text) {
  const parts = text.split(/[\s,]+/).filter(Boolean);
  if (parts.length === 0) return null;
  return parts.map((p) => {
    if (!/^\d+$/.test(p)) throw new Error(`dims: "${p}" is not a dimension index`);
    return Number(p);
  });
}

function interventionRow(nLayers, onRemove) {
  const op = h('select', { 'aria-label': 'op', name: 'op' }, Object.keys(OPS).map((o) => h('option', { value: o }, o)));
  const point = h('select', { 'aria-label': 'point', name: 'point' }, POINTS.filter((p) => p !== 'attn_in').map((p) => h('option', { value: p }, p)));
  point.value = 'mlp_act';
  const layer = h('select', { 'aria-label': 'layer', name: 'layer' }, h('option', { value: 'all' }, 'all layers'),
    Array.from({ length: nLayers }, (_, i) => h('option', { value: String(i) }, `layer ${i}`)));
  const dims = h('input', { type: 'text', name: 'dims', placeholder: 'all dims', 'aria-label': 'dims', size: 10 });
  const slider = h('input', { type: 'range', name: 'strength-slider', 'aria-label': 'strength' });
  const strength = h('input', { type: 'number', name: 'strength', 'aria-label': 'strength value', step: 'any' });
  const help = h('span.sub');
  const row = h('div.iv-row', {}, op, point, layer, dims, slider, strength, help,
    h('button.small', { type: 'button', title: 'remove', onclick: () => onRemove(row) }, '×'));
  const setOp = () => {
    const o = OPS[op.value];
    const skip = op.value === 'skip';
    for (const e of [point, dims, slider, strength]) e.disabled = skip;
    if (!skip) {
      Object.assign(slider, { min: o.min, max: o.max, step: o.step });
      slider.value = strength.value = String(o.value);
    }
    help.textContent = o.help;
  };
  op.addEventListener('change', setOp);
  slider.addEventListener('input', () => (strength.value = slider.value));
  strength.addEventListener('input', () => (slider.value = strength.value));
  setOp();
  row.spec = () => {
    const item = { op: op.value };
    if (layer.value === 'all') item.layers = 'all';
    else item.layer = Number(layer.value);
    if (op.value === 'skip') return item;
    item.point = point.value;
    const d = parseDims(dims.value);
    if (d) item.dims = d;
    const s = Number(strength.value);
    if (!Number.isFinite(s)) throw new Error('strength: a number');
    item.strength = s;
    return item;
  };
  return row;
}

function resultPane(id, title) {
  return h('div.card.result', { id },
    h('h2', {}, title),
    h('pre.output', { 'data-role': 'output' }),
    h('p.sub', { 'data-role': 'meta' }),
    h('p.error', { 'data-role': 'error', role: 'alert' }),
    h('div.chart', { 'data-role': 'chart', id: `${id}-chart` }));
}

function lensTable(result) {
  const tokens = result.tokens.map((t) => t.text);
  const layers = [...result.layers].reverse();
  const rows = layers.map((l) => [`layer ${l.layer}`, ...l.positions.map((p) => {
    const t = p.top[0];
    const cell = h('span.lens', { title: `${(100 * t.prob).toFixed(1)}%, entropy ${p.entropy.toFixed(2)} nats` }, JSON.stringify(t.text), h('small', {}, ` ${t.prob.toFixed(2)}`));
    cell.style.setProperty('--p', String(t.prob));
    return cell;
  })]);
  return table(['', ...tokens.map((t) => JSON.stringify(t))], rows, { id: 'pg-lens-table', class: 'lens-table' });
}

export function mount(root, { who }) {
  const nLayers = who.shape ? who.shape.n_layers : 0;
  const canObserve = who.can.observe, canIntervene = who.can.intervene;
  const mode = h('select', { id: 'pg-mode', 'aria-label': 'mode' }, h('option', { value: 'completion' }, 'completion'), h('option', { value: 'chat' }, 'chat'));
  const system = h('input', { id: 'pg-system', type: 'text', placeholder: 'system message (chat)', hidden: true });
  const prompt = h('textarea', { id: 'pg-prompt', rows: 3, 'aria-label': 'prompt' }, 'Once upon a time');
  const field = (label, input) => h('label.field', {}, h('span', {}, label), input);
  const maxTokens = h('input', { id: 'pg-max-tokens', type: 'number', min: 1, value: '32' });
  const temperature = h('input', { id: 'pg-temperature', type: 'number', min: 0, step: 0.1, value: '0' });
  const topP = h('input', { id: 'pg-top-p', type: 'number', min: 0, max: 1, step: 0.05, value: '1' });
  const topK = h('input', { id: 'pg-top-k', type: 'number', min: 0, value: '0' });
  const seed = h('input', { id: 'pg-seed', type: 'number', placeholder: 'random' });
  const point = h('select', { id: 'pg-point', 'aria-label': 'observed point' }, POINTS.map((p) => h('option', { value: p }, p)));
  const lensOn = h('input', { id: 'pg-lens', type: 'checkbox', checked: canObserve, disabled: !canObserve });
  const rows = h('div', { id: 'pg-interventions' });
  const addRow = () => rows.append(interventionRow(nLayers, (r) => r.remove()));
  const run = h('button', { id: 'pg-run', type: 'submit' }, 'Run');
  const stop = h('button', { id: 'pg-stop', type: 'button', disabled: true }, 'Stop');
  const status = h('p.sub', { id: 'pg-status' });
  const editor = canIntervene
    ? h('div.card', { id: 'pg-editor' }, h('h2', {}, 'Interventions'),
      h('p.sub', {}, 'With any intervention here, Run sends the plain and the steered request side by side (each steered request is an audit row).'),
      rows, h('button', { id: 'pg-add', type: 'button', onclick: addRow }, 'Add intervention'))
    : h('p.sub', { id: 'pg-no-editor' }, `The ${who.role} role may not intervene on this server, so the intervention editor is not shown.`);
  mode.addEventListener('change', () => (system.hidden = mode.value !== 'chat'));
  const form = h('form.card', { id: 'pg-form' },
    h('div.row', {}, field('mode', mode), system),
    prompt,
    h('div.row', {}, field('max tokens', maxTokens), field('temperature', temperature), field('top_p', topP), field('top_k', topK), field('seed', seed),
      field('observe at', point), h('label.field', {}, h('span', {}, 'logit lens'), lensOn)),
    h('div.row', {}, run, stop, status));
  const plain = resultPane('pg-plain', 'Plain');
  const steered = resultPane('pg-steered', 'Steered');
  steered.hidden = true;
  const lens = h('div.card', { id: 'pg-lens-card', hidden: true }, h('h2', {}, 'Logit lens of the prompt'),
    h('p.sub', {}, 'Each layer\'s resid_post through the model\'s output head: the top next token at each position and its probability (last layer = the model).'),
    h('div.scroll', { id: 'pg-lens-body' }));
  root.append(h('h1', {}, 'Playground'), form, editor, h('div.grid2', {}, plain, steered), lens);
  if (!canObserve) root.insertBefore(h('p.sub', {}, `The ${who.role} role may not observe on this server: no layer statistics.`), form);

  const charts = new Map();
  let abort = null;
  const chartOf = (pane) => {
    if (!charts.has(pane)) charts.set(pane, layerChart(pane.querySelector('[data-role=chart]'), { series: [{ label: 'max |x|' }, { label: 'median |x|' }] }));
    return charts.get(pane);
  };

  function body(interventions) {
    const b = { model: who.model, max_tokens: Number(maxTokens.value), temperature: Number(temperature.value), top_p: Number(topP.value),
      top_k: Number(topK.value), stream_options: { include_usage: true } };
    if (seed.value !== '') b.seed = Number(seed.value);
    if (mode.value === 'chat') b.messages = [...(system.value ? [{ role: 'system', content: system.value }] : []), { role: 'user', content: prompt.value }];
    else b.prompt = prompt.value;
    const g = {};
    if (canObserve) g.observe = { points: [point.value], layers: 'all', tokens: 'all' };
    if (interventions) g.interventions = interventions;
    if (Object.keys(g).length) b.glassbox = g;
    return b;
  }

  async function runOne(pane, interventions, signal) {
    const out = pane.querySelector('[data-role=output]'), meta = pane.querySelector('[data-role=meta]'), err = pane.querySelector('[data-role=error]');
    out.textContent = '';
    meta.textContent = 'running…';
    err.textContent = '';
    pane.dataset.state = 'running';
    const t0 = performance.now();
    let first = null, report = null, finish = null, usage = null, events = [];
    try {
      const path = mode.value === 'chat' ? '/v1/chat/completions' : '/v1/completions';
      await stream(path, body(interventions), (ev) => {
        if (ev.usage) usage = ev.usage;
        const c = ev.choices && ev.choices[0];
        if (!c) return;
        const piece = c.text ?? (c.delta && c.delta.content) ?? '';
        if (piece && first === null) first = performance.now();
        out.textContent += piece;
        if (c.finish_reason) finish = c.finish_reason;
        if (c.glassbox) {
          report = c.glassbox.report ?? null;
          events = c.glassbox.events ?? [];
        }
      }, signal);
      const total = (performance.now() - t0) / 1000;
      meta.textContent = [`finish: ${finish ?? '–'}`, usage ? `${usage.completion_tokens} tokens` : '', first ? `first token ${ms((first - t0) / 1000)}` : '',
        `total ${ms(total)}`, report ? `${events.length} massive-activation event(s)` : ''].filter(Boolean).join(' · ');
      if (report) {
        const rows = report.filter((r) => r.point === point.value).sort((a, b) => a.layer - b.layer);
        chartOf(pane).setData([rows.map((r) => r.layer), rows.map((r) => r.max_abs), rows.map((r) => r.median_abs)]);
      }
      pane.dataset.state = 'done';
    } catch (e) {
      if (e.name === 'AbortError') {
        meta.textContent = 'stopped';
        pane.dataset.state = 'stopped';
      } else {
        err.textContent = e.message;
        meta.textContent = '';
        pane.dataset.state = 'error';
      }
    }
  }

  async function runLens(signal) {
    const target = lens.querySelector('#pg-lens-body');
    target.replaceChildren(h('p.sub', {}, 'running…'));
    lens.hidden = false;
    try {
      const r = await api('/v1/glassbox/analyze', { method: 'POST', body: { kind: 'lens', model: who.model, prompt: prompt.value, top_k: 1 }, signal });
      target.replaceChildren(lensTable(r.result));
    } catch (e) {
      if (e.name !== 'AbortError') target.replaceChildren(h('p.error', {}, `logit lens: ${e.message}`));
    }
  }

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    let interventions = null;
    try {
      const items = [...rows.children].map((r) => r.spec());
      interventions = items.length ? items : null;
    } catch (e) {
      status.textContent = e.message;
      return;
    }
    status.textContent = '';
    abort = new AbortController();
    run.disabled = true;
    stop.disabled = false;
    steered.hidden = interventions === null;
    plain.querySelector('h2').textContent = interventions ? 'Plain' : 'Output';
    const jobs = [runOne(plain, null, abort.signal)];
    if (interventions) jobs.push(runOne(steered, interventions, abort.signal));
    if (lensOn.checked && mode.value === 'completion') jobs.push(runLens(abort.signal));
    else lens.hidden = true;
    await Promise.all(jobs);
    run.disabled = false;
    stop.disabled = true;
    root.dataset.runs = String(Number(root.dataset.runs ?? 0) + 1);
  });
  stop.addEventListener('click', () => abort && abort.abort());
  return () => {
    if (abort) abort.abort();
    for (const c of charts.values()) c.destroy();
  };
}
