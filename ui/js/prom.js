// Prometheus text format in the browser: the parser, sums over label sets (PromQL's sum by),
// rates between two scrapes, and histogram_quantile over bucket increases, so the Overview shows
// the same numbers a Prometheus over /metrics (and the Grafana dashboard) would.

// [{name, labels: {k: v}, value}] for every sample line; comments and blank lines skipped.
export function parseMetrics(text) {
  const out = [];
  for (const line of text.split('\n')) {
    if (!line || line[0] === '#') continue;
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/);
    if (!m) continue;
    const labels = {};
    if (m[3]) {
      for (const [, k, v] of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
        labels[k] = v.replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
      }
    }
    const v = m[4] === '+Inf' ? Infinity : m[4] === '-Inf' ? -Infinity : Number(m[4]);
    out.push({ name: m[1], labels, value: v });
  }
  return out;
}

const matches = (labels, match) => Object.entries(match).every(([k, v]) => labels[k] === v);

// Sum of a metric's samples whose labels include `match`; 0 when none.
export function sum(samples, name, match = {}) {
  let s = 0;
  for (const x of samples) if (x.name === name && matches(x.labels, match)) s += x.value;
  return s;
}

// Sums by the values of one label: Map(value -> sum).
export function sumBy(samples, name, label, match = {}) {
  const out = new Map();
  for (const x of samples) {
    if (x.name !== name || !matches(x.labels, match) || !(label in x.labels)) continue;
    out.set(x.labels[label], (out.get(x.labels[label]) ?? 0) + x.value);
  }
  return out;
}

// Whether any sample of `name` is present.
export const has = (samples, name) => samples.some((x) => x.name === name);

// A histogram's cumulative buckets summed over the matching series: [{le, count}] by le.
export function buckets(samples, name, match = {}) {
  const byLe = new Map();
  for (const x of samples) {
    if (x.name !== `${name}_bucket` || !matches(x.labels, match)) continue;
    const le = x.labels.le === '+Inf' ? Infinity : Number(x.labels.le);
    byLe.set(le, (byLe.get(le) ?? 0) + x.value);
  }
  return [...byLe.entries()].sort((a, b) => a[0] - b[0]).map(([le, count]) => ({ le, count }));
}

// Increase of a counter from an older to a newer value (a smaller newer value: a restart).
export const increase = (older, newer) => (newer >= older ? newer - older : newer);

// The bucket increases between two scrapes of one histogram.
export function bucketIncrease(older, newer) {
  const before = new Map(older.map((b) => [b.le, b.count]));
  return newer.map((b) => ({ le: b.le, count: increase(before.get(b.le) ?? 0, b.count) }));
}

// PromQL's histogram_quantile over cumulative buckets: linear within the bucket, the highest
// finite bound when the rank falls in +Inf; NaN when there are no observations.
export function quantile(q, cumulative) {
  if (cumulative.length === 0) return NaN;
  const total = cumulative[cumulative.length - 1].count;
  if (!(total > 0)) return NaN;
  const rank = q * total;
  let prevLe = 0, prevCount = 0;
  for (const b of cumulative) {
    if (b.count >= rank) {
      if (b.le === Infinity) return prevLe;
      if (b.count === prevCount) return b.le;
      return prevLe + ((b.le - prevLe) * (rank - prevCount)) / (b.count - prevCount);
    }
    prevLe = b.le;
    prevCount = b.count;
  }
  return prevLe;
}

// Keeps the scrapes of the last `windowS` seconds (and one older, as the window's start); t in
// milliseconds (Date.now()).
export class ScrapeWindow {
  constructor(windowS) {
    this.windowS = windowS;
    this.scrapes = [];
  }
  push(t, samples) {
    this.scrapes.push({ t, samples });
    while (this.scrapes.length > 2 && t - this.scrapes[1].t >= this.windowS * 1000) this.scrapes.shift();
  }
  get latest() {
    return this.scrapes[this.scrapes.length - 1];
  }
  get oldest() {
    return this.scrapes[0];
  }
  get previous() {
    return this.scrapes.length > 1 ? this.scrapes[this.scrapes.length - 2] : null;
  }
  // Per-second rate of a counter sum over the window (null with a single scrape).
  rate(name, match = {}) {
    if (this.scrapes.length < 2) return null;
    const a = this.oldest, b = this.latest;
    return increase(sum(a.samples, name, match), sum(b.samples, name, match)) / ((b.t - a.t) / 1000);
  }
  // The quantile of a histogram's observations within the window.
  quantile(q, name, match = {}) {
    if (this.scrapes.length < 2) return NaN;
    return quantile(q, bucketIncrease(buckets(this.oldest.samples, name, match), buckets(this.latest.samples, name, match)));
  }
}
