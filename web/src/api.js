// The one module that talks to the server: our JSON read API under /api/graph
// (contract: docs/UI.md and the OpenAPI document at /openapi.json).

const BASE = '/api/graph';

export class ApiError extends Error {
  constructor(status, detail) {
    super(`${status}: ${detail}`);
    this.status = status;
    this.detail = detail;
  }
}

async function get(path, params = {}, signal) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== '') query.set(key, String(value));
  }
  const response = await fetch(`${BASE}/${path}?${query}`, { signal, headers: { Accept: 'application/json' } });
  if (!response.ok) {
    let detail = response.statusText;
    try {
      detail = (await response.json()).detail ?? detail;
    } catch {
      /* a body that is not JSON keeps the status text */
    }
    throw new ApiError(response.status, typeof detail === 'string' ? detail : JSON.stringify(detail));
  }
  return response.json();
}

export const search = (q, { type, limit = 20, offset = 0 } = {}, signal) =>
  get('search', { q, type, limit, offset }, signal);

export const node = (name, signal) => get('node', { node: name }, signal);

export const lineage = ({ node: name, direction, depth, level, asOf, budget }, signal) =>
  get('lineage', { node: name, direction, depth, level, as_of: asOf, budget }, signal);

export const erd = ({ namespace, schema, sourceFile, limit = 500, offset = 0 } = {}, signal) =>
  get('erd', { namespace, schema, source_file: sourceFile, limit, offset }, signal);

export const runs = (job, { limit = 10, offset = 0 } = {}, signal) => get('runs', { job, limit, offset }, signal);

// Server-sent events of newly committed lineage; returns a function that stops listening.
export function live(onGraph, onState) {
  const source = new EventSource(`${BASE}/live`);
  source.addEventListener('graph', (message) => {
    try {
      onGraph(JSON.parse(message.data));
    } catch {
      /* a malformed message is ignored */
    }
  });
  source.onopen = () => onState?.('open');
  source.onerror = () => onState?.(source.readyState === EventSource.CLOSED ? 'closed' : 'reconnecting');
  return () => source.close();
}
