// Wires the page: search, toolbar, drawing, details, "Nodes in view", deep links, live updates.
import './style.css';
import * as api from './api.js';
import { createDetails } from './details.js';
import { breakable, clear, h } from './dom.js';
import { ERD_LEVELS, erdElements } from './erd.js';
import { EDGE_TYPES, createGraphView } from './graphview.js';
import { LineageModel, columnPaths, toElements } from './lineage.js';
import { createSearch } from './search.js';
import { fromLocalInput, fromUrl, toLocalInput, toUrl } from './state.js';

const $ = (id) => document.getElementById(id);
let state = fromUrl();
let model = null;
let erdCollapsed = new Set();
let loadToken = 0;

const details = createDetails($('details'), {
  open: (id) => navigate({ view: 'lineage', node: id, level: 'dataset', select: '' }),
  openColumns: (id) => navigate({ view: 'lineage', node: id, level: 'column', select: '' }),
  expand: (id) => expand(id),
  collapse: (id) => collapse(id),
});
const view = createGraphView($('graph'), { onTap: tapped, onBackgroundTap: () => { view.highlight(null); } });
window.lineageCy = view.cy; // for the browser tests and the devtools console

// ---- toolbar -------------------------------------------------------------------------------
$('search-slot').append(createSearch((r) => navigate({
  view: 'lineage', node: r.id, level: r.type === 'column' ? 'column' : 'dataset', select: r.type === 'column' ? r.id : '',
})));
$('depth').addEventListener('change', (e) => navigate({ depth: Math.min(10, Math.max(1, Number(e.target.value) || 3)) }));
$('direction').addEventListener('change', (e) => navigate({ direction: e.target.value }));
$('level').addEventListener('change', (e) => navigate({ level: e.target.value, select: '' }));
$('jobs').addEventListener('change', (e) => navigate({ jobs: e.target.checked ? 'nodes' : 'folded' }));
$('as-of').addEventListener('change', (e) => navigate({ asOf: fromLocalInput(e.target.value) }));
$('as-of-now').addEventListener('click', () => navigate({ asOf: '' }));
$('tab-lineage').addEventListener('click', () => navigate({ view: 'lineage' }));
$('tab-erd').addEventListener('click', () => navigate({ view: 'erd' }));
$('erd-level').addEventListener('change', (e) => { erdCollapsed = new Set(); navigate({ erdLevel: e.target.value }); });
for (const [id, key] of [['erd-namespace', 'namespace'], ['erd-schema', 'schema'], ['erd-source', 'sourceFile']]) {
  $(id).addEventListener('change', (e) => navigate({ [key]: e.target.value.trim() }));
}
$('legend').append(...Object.entries(EDGE_TYPES).filter(([k]) => k !== 'writes' && k !== 'relation').map(([, t]) =>
  h('li', {}, h('span', { class: 'swatch', style: `border-top: 3px ${t.style} ${t.color}` }), t.label === 'reads' ? 'reads / writes' : t.label)),
h('li', {}, h('span', { class: 'box placeholder' }), 'placeholder'),
h('li', {}, h('span', { class: 'box failed' }), 'failed last run'),
h('li', {}, h('span', { class: 'box anomaly' }), 'anomaly'),
h('li', {}, h('span', { class: 'box frontier' }), 'more beyond: click to expand'));

function syncControls() {
  $('depth').value = state.depth;
  $('direction').value = state.direction;
  $('level').value = state.level;
  $('jobs').checked = state.jobs === 'nodes';
  $('as-of').value = toLocalInput(state.asOf);
  $('erd-level').value = state.erdLevel;
  $('erd-namespace').value = state.namespace;
  $('erd-schema').value = state.schema;
  $('erd-source').value = state.sourceFile;
  const erd = state.view === 'erd';
  $('tab-lineage').setAttribute('aria-pressed', String(!erd));
  $('tab-erd').setAttribute('aria-pressed', String(erd));
  $('lineage-tools').hidden = erd;
  $('erd-tools').hidden = !erd;
  $('as-of-badge').hidden = !state.asOf || erd;
  $('as-of-badge').textContent = state.asOf ? `As of ${new Date(state.asOf).toLocaleString()}` : '';
}

// ---- navigation and deep links ------------------------------------------------------------------
function navigate(patch, { push = true } = {}) {
  const next = { ...state, ...patch };
  const reload = ['view', 'budget', 'node', 'depth', 'direction', 'level', 'asOf', 'namespace', 'schema', 'sourceFile', 'erdLevel']
    .some((k) => String(next[k]) !== String(state[k]));
  state = next;
  if (push) history.pushState(null, '', toUrl(state));
  syncControls();
  if (reload) load();
  else redraw({ keepViewport: true });
}
window.addEventListener('popstate', () => { state = fromUrl(); syncControls(); load(); });

function setStatus(text, kind = '') {
  $('status').textContent = text;
  $('status').className = kind;
}

// ---- "Nodes in view" ---------------------------------------------------------------------------
function listNodes(items) {
  $('nodes-count').textContent = String(items.length);
  clear($('nodes-in-view'), items.map((n) => h('li', {
    tabIndex: 0, dataset: { id: n.id },
    onClick: () => focusNode(n.id), onKeydown: (e) => { if (e.key === 'Enter') focusNode(n.id); },
  }, breakable(n.qualified_name))));
}

function focusNode(id) {
  const el = view.cy.getElementById(id);
  if (el.empty()) return;
  tapped(el);      // opens the details panel first, so that the node is centred in the canvas that is left
  view.focus(id);
}

// ---- loading ----------------------------------------------------------------------------------
async function load() {
  const token = ++loadToken;
  document.body.dataset.state = 'loading';
  if (state.view === 'erd') return loadErd(token);
  if (!state.node) {
    model = null;
    listNodes([]);
    $('empty').hidden = false;
    await view.render([]);
    if (token !== loadToken) return;
    setStatus('');
    document.body.dataset.state = 'ready';
    return;
  }
  $('empty').hidden = true;
  setStatus('Loading lineage…');
  performance.clearMarks('lineage-request');
  performance.clearMeasures('lineage-first-render');
  performance.mark('lineage-request');
  try {
    const response = await api.lineage(query(state.node));
    if (token !== loadToken) return;
    model = new LineageModel(response);
    await redraw();
    if (token !== loadToken) return;
    performance.measure('lineage-first-render', 'lineage-request');
  } catch (err) {
    if (token !== loadToken) return;
    model = null;
    listNodes([]);
    await view.render([]);
    if (token !== loadToken) return;
    setStatus(err.status === 404 ? `Not found: ${state.node}` : `Error: ${err.message}`, 'error');
  }
  document.body.dataset.state = 'ready';
}

const query = (node, depth = state.depth) => ({
  node, depth, direction: state.direction, level: state.level, asOf: state.asOf, budget: state.budget,
});

async function redraw({ keepViewport = false } = {}) {
  if (state.view === 'erd') return;
  if (!model) return;
  const visible = model.visible(state.jobs === 'nodes' || state.level === 'column');
  listNodes(visible.nodes);
  await view.render(toElements(visible, model.root), { keepViewport });
  const shown = visible.nodes.length;
  setStatus(`${shown} node${shown === 1 ? '' : 's'}${model.truncated ? ' · budget reached, frontier nodes expand on click' : ''}`);
  if (state.select) selectColumn(state.select);
}

async function expand(id) {
  if (!model) return;
  setStatus('Expanding…');
  try {
    model.expand(id, await api.lineage(query(id, 1)));
    await redraw({ keepViewport: true });
  } catch (err) {
    setStatus(`Could not expand: ${err.message}`, 'error');
  }
}

async function collapse(id) {
  if (!model) return;
  model.collapse(id, state.direction);
  await redraw({ keepViewport: true });
}

function tapped(el) {
  const id = el.id();
  if (state.view === 'erd') {
    if (el.isParent() || erdCollapsed.has(id)) {
      if (erdCollapsed.has(id)) erdCollapsed.delete(id); else erdCollapsed.add(id);
      return load();
    }
    const table = id.includes('#') ? id.split('#')[0] : id;
    if (!table.startsWith('ns:') && !table.startsWith('schema:')) details.show(table);
    return undefined;
  }
  const n = model?.nodes.get(id);
  if (!n) return undefined;
  if (n.type === 'column') {
    navigate({ select: id });
    return undefined;
  }
  view.highlight(null);
  details.show(id, { expandable: n.expandable, isRoot: id === model.root });
  if (n.expandable) return expand(id);
  return undefined;
}

function selectColumn(id) {
  const n = model?.nodes.get(id);
  if (!n) return;
  const paths = columnPaths(model, id);
  view.highlight(paths.nodes, paths.edges);
  view.select(id);
  const name = (x) => model.nodes.get(x)?.qualified_name ?? x;
  const hops = () => [...model.edges.values()].filter((e) => paths.edges.has(e.id) && e.source !== e.target)
    .map((e) => h('li', {}, name(e.source), ' → ', name(e.target), h('span', { class: 'muted', text: `  ${e.transformation ?? e.type}` })));
  clear($('details'),
    h('header', {}, h('span', { class: 'kind kind-column', text: 'column' }), h('h2', {}, breakable(n.qualified_name)),
      h('button', { class: 'close', 'aria-label': 'Close details', text: '×', onClick: () => { $('details').hidden = true; } })),
    h('section', {}, h('h3', { text: 'Column paths' }), h('ul', { class: 'hops', 'aria-label': 'Column paths' }, hops())));
  $('details').hidden = false;
}

async function loadErd(token) {
  $('empty').hidden = true;
  setStatus('Loading ERD…');
  try {
    const response = await api.erd({ namespace: state.namespace, schema: state.schema, sourceFile: state.sourceFile });
    if (token !== loadToken) return;
    const { elements, listed } = erdElements(response, state.erdLevel, erdCollapsed);
    listNodes(listed);
    await view.render(elements);
    setStatus(`${response.tables.length} table${response.tables.length === 1 ? '' : 's'}, ${response.relations.length} relation${response.relations.length === 1 ? '' : 's'}${response.next_offset ? ' (first page)' : ''} · click a container to collapse or expand it`);
  } catch (err) {
    if (token === loadToken) setStatus(`Error: ${err.message}`, 'error');
  }
  document.body.dataset.state = 'ready';
}

// ---- live updates ------------------------------------------------------------------------------
let pendingLive = null;
api.live(async (message) => {
  const cue = $('live');
  cue.textContent = `Live · updated ${new Date(message.at ?? Date.now()).toLocaleTimeString()}`;
  cue.classList.remove('pulse');
  void cue.offsetWidth;
  cue.classList.add('pulse');
  if (state.view !== 'lineage' || !model || state.asOf || pendingLive) return;
  pendingLive = (async () => {
    try {
      const response = await api.lineage(query(state.node));
      if (!model) return;
      model.merge({ ...response, root: null });
      await redraw({ keepViewport: true });
      view.flash(message.changed ?? []);
    } catch { /* the next message retries */ } finally { pendingLive = null; }
  })();
}, (s) => { $('live').dataset.state = s; if (s !== 'open') $('live').textContent = s === 'closed' ? 'Live: off' : 'Live: reconnecting…'; });

syncControls();
load();
$('erd-level').replaceChildren(...ERD_LEVELS.map((l) => h('option', { value: l, text: `down to ${l}` })));
$('erd-level').value = state.erdLevel;
