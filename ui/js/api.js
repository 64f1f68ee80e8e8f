// The dashboard's HTTP client: the API key (kept in sessionStorage, so for this tab only), JSON
// requests with errors in the API's own words, and Server-Sent-Event streams.
const KEY = 'glassbox.api_key';

export const key = {
  get: () => sessionStorage.getItem(KEY) ?? '',
  set: (k) => sessionStorage.setItem(KEY, k),
  clear: () => sessionStorage.removeItem(KEY),
};

export class ApiError extends Error {
  constructor(status, body, fallback) {
    const e = body && body.error ? body.error : null;
    super(e && e.message ? e.message : fallback);
    this.status = status;
    this.code = e ? e.code : undefined;
    this.param = e ? e.param : undefined;
  }
}

function headers(extra = {}) {
  const h = { ...extra };
  const k = key.get();
  if (k) h.Authorization = `Bearer ${k}`;
  return h;
}

async function parse(res) {
  const text = await res.text();
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = null;
  }
  if (!res.ok) throw new ApiError(res.status, body, `${res.status} ${res.statusText}: ${text.slice(0, 200)}`);
  return body;
}

// GET or send JSON; resolves to the parsed body, rejects with ApiError.
export async function api(path, { method = 'GET', body, signal } = {}) {
  const init = { method, headers: headers(body !== undefined ? { 'Content-Type': 'application/json' } : {}), signal };
  if (body !== undefined) init.body = JSON.stringify(body);
  return parse(await fetch(path, init));
}

// The Prometheus text of /metrics (no key needed, as for a scraper).
export async function metricsText(signal) {
  const res = await fetch('/metrics', { signal, cache: 'no-store' });
  if (!res.ok) throw new ApiError(res.status, null, `/metrics: ${res.status}`);
  return res.text();
}

// POSTs a streaming request and calls onEvent(json) for each `data:` event until [DONE];
// resolves to the list of events. An `error` event rejects with its message.
export async function stream(path, body, onEvent, signal) {
  const res = await fetch(path, {
    method: 'POST',
    headers: headers({ 'Content-Type': 'application/json' }),
    body: JSON.stringify({ ...body, stream: true }),
    signal,
  });
  if (!res.ok) await parse(res);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  const events = [];
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      for (const line of block.split('\n')) {
        if (!line.startsWith('data: ')) continue;
        const data = line.slice(6);
        if (data === '[DONE]') return events;
        const event = JSON.parse(data);
        if (event.error) throw new ApiError(500, event, event.error.message);
        events.push(event);
        onEvent(event);
      }
    }
  }
  return events;
}
