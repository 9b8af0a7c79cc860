// The lineage in view: the API's responses merged (root + expansions), collapses applied,
// and turned into drawing elements with jobs either as nodes or folded into the edges.
import { EDGE_TYPES, nodeSize } from './graphview.js';

export class LineageModel {
  constructor(response) {
    this.root = response.root;
    this.truncated = response.truncated;
    this.nodes = new Map();
    this.edges = new Map();
    this.merge(response);
  }

  merge(response) {
    for (const n of response.nodes) {
      if (n.id === response.root || !this.nodes.has(n.id)) this.nodes.set(n.id, { ...n });
    }
    for (const e of response.edges) this.edges.set(e.id, e);
  }

  // A frontier node's neighbours, fetched with depth 1 around it.
  expand(id, response) {
    const n = this.nodes.get(id);
    if (n) Object.assign(n, { expandable: false, hidden_neighbours: 0 });
    this.merge({ ...response, root: null });
    const fresh = response.nodes.find((x) => x.id === response.root);
    if (n && fresh) Object.assign(n, { expandable: fresh.expandable, hidden_neighbours: fresh.hidden_neighbours });
  }

  // Hides what is reachable from the root, walking away from it (`direction`), only through `id`;
  // `id` becomes a frontier again.
  collapse(id, direction) {
    if (id === this.root || !this.nodes.has(id)) return 0;
    const adjacent = new Map();
    for (const e of this.edges.values()) {
      const steps = direction === 'upstream' ? [[e.target, e.source]]
        : direction === 'downstream' ? [[e.source, e.target]] : [[e.source, e.target], [e.target, e.source]];
      for (const [a, b] of steps) {
        if (!adjacent.has(a)) adjacent.set(a, []);
        adjacent.get(a).push(b);
      }
    }
    const column = (n) => n?.type === 'column' && n.dataset_id;
    const reached = new Set([this.root, id]);
    const queue = [this.root];
    while (queue.length) {
      const at = queue.pop();
      for (const next of adjacent.get(at) ?? []) {
        if (!reached.has(next)) { reached.add(next); queue.push(next); }
      }
    }
    // the datasets of reached columns stay (they hold them)
    for (const nid of [...reached]) { const ds = column(this.nodes.get(nid)); if (ds) reached.add(ds); }
    let removed = 0;
    for (const nid of [...this.nodes.keys()]) {
      if (!reached.has(nid)) { this.nodes.delete(nid); removed += 1; }
    }
    for (const [eid, e] of this.edges) {
      if (!this.nodes.has(e.source) || !this.nodes.has(e.target)) this.edges.delete(eid);
    }
    if (removed) Object.assign(this.nodes.get(id), { expandable: true, hidden_neighbours: removed });
    return removed;
  }

  visible(jobsAsNodes) {
    const nodes = [...this.nodes.values()].filter((n) => jobsAsNodes || n.type !== 'job');
    const shown = new Set(nodes.map((n) => n.id));
    const edges = [...this.edges.values()].filter((e) => {
      if (!shown.has(e.source) || !shown.has(e.target)) return false;
      if (e.type === 'reads' || e.type === 'writes') return jobsAsNodes;
      return !(jobsAsNodes && e.job && shown.has(e.job));
    });
    return { nodes, edges };
  }
}

export function label(n) {
  const base = n.type === 'column' ? n.column ?? n.name : n.name;
  return n.expandable && n.hidden_neighbours > 0 ? `${base}  +${n.hidden_neighbours} more` : n.expandable ? `${base}  +more` : base;
}

export function toElements({ nodes, edges }, root) {
  const ids = new Set(nodes.map((n) => n.id));
  const out = [];
  for (const n of nodes) {
    const text = label(n);
    const classes = [
      n.id === root && 'root', n.placeholder && 'placeholder', n.anomaly && 'anomaly',
      (n.last_run_state ?? '').toUpperCase() === 'FAIL' || (n.last_run_state ?? '').toUpperCase() === 'FAILED' ? 'failed' : null,
      n.expandable && 'frontier',
    ].filter(Boolean).join(' ');
    const parent = n.type === 'column' && ids.has(n.dataset_id) ? n.dataset_id : undefined;
    out.push({ group: 'nodes', classes, data: { id: n.id, label: text, kind: n.type, parent, ...nodeSize(text) } });
  }
  for (const e of edges) {
    const t = EDGE_TYPES[e.type] ?? EDGE_TYPES.derived_from;
    out.push({
      group: 'edges', classes: e.type,
      data: { id: e.id, source: e.source, target: e.target, color: t.color, lineStyle: t.style, transformation: e.transformation ?? t.label },
    });
  }
  return out;
}

// Upstream and downstream column paths through `id` (edges run upstream -> downstream).
export function columnPaths(model, id) {
  const nodes = new Set([id]);
  const edges = new Set();
  for (const [from, to] of [['target', 'source'], ['source', 'target']]) {
    const queue = [id];
    const seen = new Set(queue);
    while (queue.length) {
      const at = queue.pop();
      for (const e of model.edges.values()) {
        if (e[from] !== at || e.type === 'reads' || e.type === 'writes') continue;
        edges.add(e.id);
        nodes.add(e[to]);
        if (!seen.has(e[to])) { seen.add(e[to]); queue.push(e[to]); }
      }
    }
  }
  return { nodes, edges };
}
