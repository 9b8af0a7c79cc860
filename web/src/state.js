// The view's state and its deep link: everything needed to reproduce a view is in the URL.
export const DEFAULTS = { view: 'lineage', node: '', depth: 3, direction: 'upstream', level: 'dataset', asOf: '', jobs: 'nodes', select: '', budget: '', erdLevel: 'table', namespace: '', schema: '', sourceFile: '' };
const KEYS = { view: 'view', node: 'node', depth: 'depth', direction: 'direction', level: 'level', asOf: 'as_of', jobs: 'jobs', select: 'select', budget: 'budget', erdLevel: 'erd_level', namespace: 'namespace', schema: 'schema', sourceFile: 'source_file' };
const CHOICES = { view: ['lineage', 'erd'], direction: ['upstream', 'downstream', 'both'], level: ['dataset', 'column'], jobs: ['nodes', 'folded'], erdLevel: ['namespace', 'schema', 'table', 'column'] };

export function fromUrl(search = location.search) {
  const params = new URLSearchParams(search);
  const state = { ...DEFAULTS };
  for (const [key, param] of Object.entries(KEYS)) {
    const value = params.get(param);
    if (value === null) continue;
    if (CHOICES[key] && !CHOICES[key].includes(value)) continue;
    state[key] = value;
  }
  state.depth = Math.min(10, Math.max(1, Number.parseInt(state.depth, 10) || DEFAULTS.depth));
  if (state.asOf && Number.isNaN(Date.parse(state.asOf))) state.asOf = '';
  return state;
}

export function toUrl(state) {
  const params = new URLSearchParams();
  for (const [key, param] of Object.entries(KEYS)) {
    if (state[key] !== DEFAULTS[key] && state[key] !== '') params.set(param, String(state[key]));
  }
  const query = params.toString();
  return `${location.pathname}${query ? `?${query}` : ''}`;
}

// <input type="datetime-local"> holds local time without a zone; the URL and the API hold UTC.
export function toLocalInput(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  const pad = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export const fromLocalInput = (value) => (value ? new Date(value).toISOString() : '');
