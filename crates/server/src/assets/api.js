// ragbox's /v1 API as the page uses it: JSON calls, answers streamed as server-sent events,
// uploads with progress. Every failure becomes an ApiError whose message is words a person
// can act on, never a bare status code.

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

const OFFLINE = 'Cannot reach the ragbox server. Check that it is still running, then try again.';

// What a status means to a person, when the server sent no message of its own.
function fallback(status, retryAfter) {
  switch (status) {
    case 401: return 'You are signed out. Sign in again with your key.';
    case 403: return 'Your key is not allowed to do this.';
    case 404: return 'That was not found (it may have been removed).';
    case 408: return 'The upload took too long to arrive. Try again on a steadier connection.';
    case 413: return 'That is larger than this server accepts.';
    case 429: return 'Too many failed sign-ins from this computer. Wait a minute and try again.';
    case 503: return `ragbox is busy answering other questions. Try again${retryAfter ? ` in ${retryAfter} s` : ' shortly'}.`;
    case 504: return 'The server took too long to answer. Try again, or ask a narrower question.';
    default:
      return status >= 500 ? 'The server ran into a problem. Try again; if it keeps happening, tell whoever runs ragbox.'
        : 'The server did not accept that request.';
  }
}

function errorFrom(status, retryAfter, data) {
  const e = data && data.error;
  let message = e && e.message ? e.message : fallback(status, retryAfter);
  if (status === 503 && retryAfter) message = `${fallback(503, retryAfter)} (${message})`;
  if (status === 401) message = fallback(401);
  return new ApiError(status, (e && e.code) || 'http_' + status, message);
}

async function parse(res) {
  const text = await res.text();
  try { return text ? JSON.parse(text) : null; } catch { return null; }
}

export async function call(method, path, body) {
  let res;
  try {
    res = await fetch(path, {
      method,
      headers: body === undefined ? {} : { 'Content-Type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'same-origin',
    });
  } catch {
    throw new ApiError(0, 'offline', OFFLINE);
  }
  const data = res.status === 204 ? null : await parse(res);
  if (!res.ok) throw errorFrom(res.status, res.headers.get('Retry-After'), data);
  return data;
}

export const get = (path) => call('GET', path);
export const post = (path, body) => call('POST', path, body ?? {});
export const del = (path) => call('DELETE', path);

export const tenantPath = (tenant, rest) => `/v1/tenants/${encodeURIComponent(tenant)}${rest}`;

function parseEvent(block) {
  let name = 'message';
  const data = [];
  for (const line of block.split('\n')) {
    if (line.startsWith(':')) continue;
    const at = line.indexOf(':');
    const field = at < 0 ? line : line.slice(0, at);
    const value = at < 0 ? '' : line.slice(at + 1).replace(/^ /, '');
    if (field === 'event') name = value;
    else if (field === 'data') data.push(value);
  }
  if (!data.length) return null;
  try { return { name, data: JSON.parse(data.join('\n')) }; } catch { return null; }
}

// POSTs `body` and calls onEvent(name, data): `open` once the server has accepted the question,
// then each server-sent event until the `answer` or `error` event. A stream that ends before either (a lost connection) throws code 'lost'.
export async function stream(path, body, onEvent, signal) {
  let res;
  try {
    res = await fetch(path, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Accept: 'text/event-stream' },
      body: JSON.stringify(body),
      credentials: 'same-origin',
      signal,
    });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, 'offline', OFFLINE);
  }
  if (!res.ok) throw errorFrom(res.status, res.headers.get('Retry-After'), await parse(res));
  onEvent('open', null);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  let finished = false;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n/g, '\n');
      let cut;
      while ((cut = buffer.indexOf('\n\n')) >= 0) {
        const event = parseEvent(buffer.slice(0, cut));
        buffer = buffer.slice(cut + 2);
        if (!event) continue;
        if (event.name === 'answer' || event.name === 'error') finished = true;
        onEvent(event.name, event.data);
      }
    }
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, 'lost', 'The connection to the server was lost while the answer was streaming.');
  }
  if (!finished) throw new ApiError(0, 'lost', 'The connection to the server was lost before the answer was complete.');
}

// Uploads one file with progress (0..1); resolves with the ingest job.
export function upload(tenant, file, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open('POST', tenantPath(tenant, '/documents'));
    xhr.upload.onprogress = (e) => { if (e.lengthComputable) onProgress(e.loaded / e.total); };
    xhr.onload = () => {
      let data = null;
      try { data = JSON.parse(xhr.responseText); } catch { /* not JSON */ }
      if (xhr.status >= 200 && xhr.status < 300) resolve(data.job);
      else reject(errorFrom(xhr.status, xhr.getResponseHeader('Retry-After'), data));
    };
    xhr.onerror = () => reject(new ApiError(0, 'offline', OFFLINE));
    const form = new FormData();
    form.append('file', file, file.name);
    xhr.send(form);
  });
}
