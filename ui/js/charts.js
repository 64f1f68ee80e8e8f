// Charts over uPlot (vendor/uplot, copied from npm by the build): time series, per-layer charts
// on a log scale, bars; and a heat map drawn on a canvas. Each chart's uPlot instance is kept on
// its container element as `.uplot`, so its data can be read back (the browser tests do).
const COLORS = ['#2f6fdf', '#e0702b', '#2e9e5b', '#b23bb5', '#c9a300', '#666'];

export const color = (i) => COLORS[i % COLORS.length];

function ready(el) {
  if (typeof window.uPlot === 'function') return true;
  el.textContent = 'charting library missing (vendor/uplot): run scripts/setup.sh and rebuild';
  el.classList.add('error');
  return false;
}

function sized(el, make) {
  const width = () => Math.max(240, el.clientWidth || 480);
  const u = make(width());
  el.uplot = u;
  const ro = new ResizeObserver(() => u.setSize({ width: width(), height: u.height }));
  ro.observe(el);
  return { u, destroy: () => (ro.disconnect(), u.destroy(), (el.uplot = null)) };
}

const fmt = (v) => (v == null || Number.isNaN(v) ? '–' : v === 0 ? '0' : Math.abs(v) >= 1000 || Math.abs(v) < 0.01 ? v.toExponential(2) : v.toPrecision(3));

// A time series chart: data [[unix seconds], [series 1], ...].
export function timeChart(el, { series, height = 180, yLabel = '', yMin = 0 }) {
  if (!ready(el)) return { setData() {}, destroy() {} };
  const { u, destroy } = sized(el, (width) => new window.uPlot({
    width, height,
    scales: { y: { range: (_, lo, hi) => [Math.min(yMin, lo), hi > 0 ? hi * 1.1 : 1] } },
    axes: [{}, { label: yLabel, size: 60, values: (_, ticks) => ticks.map(fmt) }],
    series: [{}, ...series.map((s, i) => ({ label: s.label, stroke: s.color ?? color(i), width: 2, value: (_, v) => fmt(v) }))],
  }, [[], ...series.map(() => [])], el));
  return { setData: (d) => u.setData(d), destroy, u };
}

// Per-layer statistics: x = layer index, one series per statistic, log-scale y.
export function layerChart(el, { series, height = 220, title = '' }) {
  if (!ready(el)) return { setData() {}, destroy() {} };
  const { u, destroy } = sized(el, (width) => new window.uPlot({
    title, width, height,
    scales: { x: { time: false }, y: { distr: 3, log: 10 } },
    axes: [{ label: 'layer', values: (_, t) => t.map((v) => (Number.isInteger(v) ? v : '')) },
      { label: '|x|', size: 60, values: (_, ticks) => ticks.map(fmt) }],
    series: [{ label: 'layer' }, ...series.map((s, i) => ({
      label: s.label, stroke: s.color ?? color(i), width: 2, points: { show: true, size: 7 }, value: (_, v) => fmt(v),
    }))],
  }, [[], ...series.map(() => [])], el));
  return { setData: (d) => u.setData(d), destroy, u };
}

// Bars over categories (x = 0..n-1 labelled by `labels`).
export function barChart(el, { series, labels, height = 200, yLabel = '' }) {
  if (!ready(el)) return { setData() {}, destroy() {} };
  let names = labels;
  const bars = window.uPlot.paths.bars({ size: [0.8 / Math.max(1, series.length), 64] });
  const { u, destroy } = sized(el, (width) => new window.uPlot({
    width, height,
    scales: { x: { time: false, range: (_, lo, hi) => [lo - 0.5, hi + 0.5] } },
    axes: [{ values: (_, t) => t.map((v) => (Number.isInteger(v) ? names[v] ?? '' : '')) }, { label: yLabel, size: 60 }],
    series: [{}, ...series.map((s, i) => ({ label: s.label, stroke: color(i), fill: `${color(i)}99`, paths: bars, points: { show: false } }))],
  }, [[], ...series.map(() => [])], el));
  return { setData: (d, l) => ((names = l ?? names), u.setData(d)), destroy, u };
}

// A heat map on a canvas: rows × columns of values, colour by log(1 + v) / log(1 + max).
// rowLabel(i) and colLabel(j) name the axes' ticks.
export function heatMap(el, { rowLabel = (i) => String(i), colLabel = () => '', height = 220 }) {
  const canvas = document.createElement('canvas');
  el.replaceChildren(canvas);
  let last = { rows: 0, cols: 0, values: [] };
  function draw(values) {
    last = { rows: values.length, cols: values.length ? values[0].length : 0, values };
    el.dataset.max = String(values.flat().reduce((a, b) => Math.max(a, b), 0));
    const dpr = window.devicePixelRatio || 1;
    const w = Math.max(240, el.clientWidth || 480);
    canvas.width = w * dpr;
    canvas.height = height * dpr;
    canvas.style.width = `${w}px`;
    canvas.style.height = `${height}px`;
    const g = canvas.getContext('2d');
    g.scale(dpr, dpr);
    g.clearRect(0, 0, w, height);
    const left = 56, bottom = 22, top = 4, right = 8;
    const rows = last.rows, cols = last.cols;
    g.fillStyle = '#666';
    g.font = '11px system-ui, sans-serif';
    if (rows === 0 || cols === 0) {
      g.fillText('no samples yet', left, height / 2);
      return;
    }
    const max = Number(el.dataset.max);
    const cw = (w - left - right) / cols, ch = (height - top - bottom) / rows;
    for (let i = 0; i < rows; i++) {
      for (let j = 0; j < cols; j++) {
        const v = values[i][j];
        const t = max > 0 ? Math.log1p(v) / Math.log1p(max) : 0;
        g.fillStyle = v > 0 ? `hsl(${20 - 20 * t}, 85%, ${92 - 52 * t}%)` : '#f3f4f6';
        g.fillRect(left + j * cw, top + (rows - 1 - i) * ch, Math.ceil(cw), Math.ceil(ch));
      }
    }
    g.fillStyle = '#444';
    const every = Math.ceil(rows / Math.max(1, Math.floor((height - top - bottom) / 14)));
    for (let i = 0; i < rows; i += every) g.fillText(rowLabel(i), 4, top + (rows - 1 - i) * ch + ch / 2 + 4);
    const colEvery = Math.ceil(cols / 6);
    for (let j = 0; j < cols; j += colEvery) g.fillText(colLabel(j), left + j * cw, height - 6);
  }
  const ro = new ResizeObserver(() => draw(last.values));
  ro.observe(el);
  return { setData: draw, destroy: () => ro.disconnect(), get data() { return last; } };
}

export { fmt };
