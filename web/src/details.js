// Details panel of the selected node: everything `lineage show` shows, as text.
import * as api from './api.js';
import { breakable, clear, h } from './dom.js';

const text = (v) => (v === null || v === undefined ? '' : typeof v === 'object' ? JSON.stringify(v) : String(v));

function section(title, items) {
  if (!items || (Array.isArray(items) && !items.length)) return null;
  return h('section', {}, h('h3', { text: title }), items);
}

function table(headers, rows) {
  return h('table', {},
    h('thead', {}, h('tr', {}, headers.map((x) => h('th', { text: x })))),
    h('tbody', {}, rows.map((r) => h('tr', {}, r.map((c) => h('td', { text: text(c) }))))));
}

function tags(list) {
  return h('ul', { class: 'tags' }, list.map((t) => h('li', { text: text(t.name ?? t) })));
}

export function createDetails(panel, actions) {
  let controller;

  async function show(id, inView) {
    controller?.abort();
    controller = new AbortController();
    clear(panel, h('p', { class: 'muted', text: 'Loading…' }));
    panel.hidden = false;
    let d;
    try {
      d = await api.node(id, controller.signal);
    } catch (err) {
      if (err.name === 'AbortError') return;
      clear(panel, h('p', { class: 'error', text: `Could not load ${id}: ${err.message}` }));
      return;
    }
    const latest = d.quality?.[0];
    clear(panel,
      h('header', {},
        h('span', { class: `kind kind-${d.type}`, text: d.type }),
        h('h2', { title: d.qualified_name }, breakable(d.qualified_name)),
        h('button', { class: 'close', 'aria-label': 'Close details', text: '×', onClick: () => { panel.hidden = true; } })),
      h('div', { class: 'actions' },
        h('button', { text: 'Open lineage', onClick: () => actions.open(d.id) }),
        d.type === 'dataset' && h('button', { text: 'Open columns', onClick: () => actions.openColumns(d.id) }),
        inView?.expandable && h('button', { text: 'Expand', onClick: () => actions.expand(id) }),
        inView && !inView.isRoot && h('button', { text: 'Collapse', onClick: () => actions.collapse(id) })),
      d.placeholder && h('p', { class: 'badge placeholder', text: 'Placeholder: referenced, never produced by a job we saw' }),
      section('Schema', d.schema?.length && table(['Field', 'Type', 'Description'], d.schema.map((f) => [f.name, f.type, f.description]))),
      section('Owners', d.owners?.length && tags(d.owners)),
      section('Tags', d.tags?.length && tags(d.tags)),
      section('Latest runs', d.runs?.length && table(['Run', 'State', 'Started', 'Duration (s)'],
        d.runs.slice(0, 10).map((r) => [r.run_id?.slice(0, 8), r.state, r.started_at, r.duration_s]))),
      section('Quality', latest && [
        table(['Metric', 'Score'], Object.entries(latest.scores ?? {})),
        latest.failed_validations?.length && h('p', { class: 'error', text: `Failed validations: ${latest.failed_validations.map(text).join(', ')}` }),
        latest.anomalies?.length && h('p', { class: 'warn', text: `Anomalies: ${latest.anomalies.map(text).join(', ')}` }),
      ]),
      section('Versions', d.versions?.length && table(['Version', 'Created'], d.versions.slice(0, 10).map((v) => [v.version, v.created_at]))),
      section('SQL', d.sql && h('pre', { text: d.sql })),
      section('Source code', d.source_code_location && h('pre', { text: text(d.source_code_location) })),
      section('Constraints', d.constraints && h('pre', { text: JSON.stringify(d.constraints, null, 2) })),
      section('Aliases', d.aliases?.length && tags(d.aliases)),
      section('Provenance', d.provenance?.length && h('pre', { text: JSON.stringify(d.provenance, null, 2) })),
    );
  }

  return { show, hide: () => { panel.hidden = true; } };
}
