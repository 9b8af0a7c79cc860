// The drawing: Cytoscape.js (canvas) laid out by ELK's layered algorithm in a web worker, so
// that the page stays responsive while 2,000 nodes are placed. Left to right = data flow.
import cytoscape from 'cytoscape';
import ELK from 'elkjs/lib/elk-api.js';
import workerUrl from 'elkjs/lib/elk-worker.min.js?url';

import { sweepLayout } from './sweep.js';

const elk = new ELK({ workerUrl });
// Start the worker (1.6 MB of compiled Java) while the page asks for its first lineage.
elk.layout({ id: 'warm-up', children: [], edges: [] }).catch(() => {});

// Flat graphs above this many nodes are placed by sweep.js in linear time: at 192 nodes ELK took 4.3 s to
// the first paint and sweep.js 1.6 s on the same (loaded) machine (docs/UI.md).
const SWEEP_ABOVE = 150;

// Above this many nodes ELK's cheap strategies are used (measured: docs/UI.md).
const FAST_ABOVE = 300;
const BASE_OPTIONS = {
  'elk.algorithm': 'layered',
  'elk.direction': 'RIGHT',
  'elk.spacing.nodeNode': '10',
  'elk.layered.spacing.nodeNodeBetweenLayers': '60',
  'elk.hierarchyHandling': 'INCLUDE_CHILDREN',
  'elk.padding': '[top=22,left=22,bottom=22,right=22]',
};
const FAST_OPTIONS = {
  'elk.layered.layering.strategy': 'LONGEST_PATH',
  'elk.layered.thoroughness': '1',
  'elk.layered.crossingMinimization.greedySwitch.type': 'OFF',
  'elk.layered.nodePlacement.strategy': 'SIMPLE',
  'elk.edgeRouting': 'POLYLINE',
};

// A fit never zooms in further than this: one table or a three-node lineage stays at reading size (at
// Cytoscape's maxZoom of 3 a single ERD table filled the screen with giant text).
export const FIT_MAX_ZOOM = 1.25;
const PADDING = 30;
// Below this zoom node labels (11 px, 'min-zoomed-font-size' 7 px) are no longer drawn.
const READABLE_ZOOM = 7 / 11;

export const EDGE_TYPES = {
  derived_from: { color: '#475569', style: 'solid', label: 'derived' },
  aggregated_from: { color: '#7c3aed', style: 'solid', label: 'aggregated' },
  joined_with: { color: '#0891b2', style: 'dashed', label: 'joined' },
  filtered_from: { color: '#d97706', style: 'dashed', label: 'filtered' },
  projected_from: { color: '#16a34a', style: 'dotted', label: 'projected' },
  reads: { color: '#94a3b8', style: 'solid', label: 'reads' },
  writes: { color: '#94a3b8', style: 'solid', label: 'writes' },
  relation: { color: '#0f766e', style: 'solid', label: 'foreign key' },
};

const STYLE = [
  { selector: 'node', style: {
    shape: 'round-rectangle', width: 'data(w)', height: 'data(h)', label: 'data(label)',
    'background-color': '#ffffff', 'border-width': 1, 'border-color': '#94a3b8',
    'font-size': 11, 'font-family': 'system-ui, sans-serif', color: '#0f172a',
    'text-valign': 'center', 'text-halign': 'center', 'text-wrap': 'ellipsis', 'text-max-width': 'data(w)',
    'min-zoomed-font-size': 7,
  } },
  // large graphs: no text measuring for ellipses, straight edges (cheap hit tests and paints)
  { selector: 'node.bulk', style: { 'text-wrap': 'none' } },
  { selector: 'node[kind = "job"]', style: { shape: 'round-tag', 'background-color': '#eef2ff', 'border-color': '#6366f1' } },
  { selector: 'node[kind = "column"]', style: { 'background-color': '#f8fafc', 'font-size': 10 } },
  { selector: ':parent', style: {
    'background-color': '#f1f5f9', 'border-color': '#64748b', 'text-valign': 'top', 'text-halign': 'center',
    'text-margin-y': 19, 'font-weight': 600, padding: 22,
  } },
  { selector: 'node[kind = "namespace"]', style: { 'background-color': '#f8fafc', 'border-style': 'dashed' } },
  { selector: 'node.root', style: { 'border-width': 3, 'border-color': '#2563eb' } },
  { selector: 'node.placeholder', style: { 'border-style': 'dashed', color: '#64748b', 'background-color': '#f8fafc' } },
  { selector: 'node.failed', style: { 'border-color': '#dc2626', 'border-width': 3, 'background-color': '#fef2f2' } },
  { selector: 'node.anomaly', style: { 'outline-width': 3, 'outline-color': '#f59e0b', 'outline-offset': 2 } },
  { selector: 'node.frontier', style: { 'border-style': 'double', 'border-width': 4, 'border-color': '#2563eb' } },
  { selector: 'node.changed', style: { 'background-color': '#dcfce7' } },
  { selector: 'node:selected', style: { 'border-color': '#2563eb', 'border-width': 3, 'background-color': '#dbeafe' } },
  { selector: 'edge', style: {
    width: 1.5, 'curve-style': 'bezier', 'target-arrow-shape': 'triangle', 'arrow-scale': 0.8,
    'line-color': 'data(color)', 'target-arrow-color': 'data(color)', 'line-style': 'data(lineStyle)',
  } },
  { selector: 'edge.bulk', style: { 'curve-style': 'straight', 'arrow-scale': 0.6 } },
  { selector: 'edge.relation', style: { 'target-arrow-shape': 'tee', 'source-arrow-shape': 'circle', 'source-arrow-color': 'data(color)' } },
  { selector: '.dim', style: { opacity: 0.15 } },
  { selector: 'edge.path', style: {
    width: 3, label: 'data(transformation)', 'font-size': 9, 'text-background-color': '#fff',
    'text-background-opacity': 1, 'text-background-padding': 2, color: '#1e293b',
  } },
  { selector: 'node.path', style: { 'border-color': '#2563eb', 'border-width': 2 } },
];

export function nodeSize(label) {
  return { w: Math.min(260, Math.max(60, label.length * 6.4 + 20)), h: 26 };
}

function elkGraph(elements, fast) {
  const byId = new Map();
  const root = { id: '__root', layoutOptions: { ...BASE_OPTIONS, ...(fast ? FAST_OPTIONS : {}) }, children: [], edges: [] };
  for (const el of elements) {
    if (el.group !== 'nodes') continue;
    byId.set(el.data.id, { id: el.data.id, width: el.data.w, height: el.data.h, children: [], parent: el.data.parent });
  }
  for (const n of byId.values()) {
    const parent = n.parent && byId.get(n.parent);
    (parent ? parent.children : root.children).push(n);
    delete n.parent;
  }
  for (const el of elements) {
    if (el.group === 'edges' && byId.has(el.data.source) && byId.has(el.data.target)) {
      root.edges.push({ id: el.data.id, sources: [el.data.source], targets: [el.data.target] });
    }
  }
  return root;
}

function absolutePositions(node, dx, dy, out) {
  for (const child of node.children ?? []) {
    const x = dx + child.x;
    const y = dy + child.y;
    if (!child.children?.length) out[child.id] = { x: x + child.width / 2, y: y + child.height / 2 };
    absolutePositions(child, x, y, out);
  }
  return out;
}

export function createGraphView(container, { onTap, onBackgroundTap }) {
  const cy = cytoscape({
    container, style: STYLE, minZoom: 0.05, maxZoom: 3, wheelSensitivity: 0.3,
    textureOnViewport: true, hideEdgesOnViewport: false, pixelRatio: 1,
  });
  cy.on('tap', 'node', (e) => onTap(e.target));
  cy.on('tap', (e) => { if (e.target === cy) onBackgroundTap?.(); });
  let generation = 0;
  // Set by the user's own pans and zooms (a click on a node is neither), and by focus().
  let userMoved = false;
  cy.on('dragpan scrollzoom pinchzoom', () => { userMoved = true; });

  // The whole drawing in view, never zoomed in past FIT_MAX_ZOOM.
  function fit() {
    cy.fit(undefined, PADDING);
    if (cy.zoom() > FIT_MAX_ZOOM) {
      cy.zoom(FIT_MAX_ZOOM);
      cy.center();
    }
  }

  // Pans (no zoom) the least that brings `node` inside the viewport, its left and top edges first.
  function reveal(node) {
    if (node.empty()) return;
    const bb = node.renderedBoundingBox();
    const shift = (low, high, size) => (low < PADDING || high - low > size - 2 * PADDING ? PADDING - low
      : high > size - PADDING ? size - PADDING - high : 0);
    cy.panBy({ x: shift(bb.x1, bb.x2, cy.width()), y: shift(bb.y1, bb.y2, cy.height()) });
  }

  // The canvas changed size (details panel opened or closed, window resized): the same drawing, no new layout,
  // refit while the user has not moved the view; otherwise the same middle, with the selected node in view.
  new ResizeObserver(() => {
    const before = { w: cy.width(), h: cy.height() };
    cy.resize();
    if (!cy.nodes().length || cy.animated()) return;
    if (!userMoved) {
      fit();
      return;
    }
    cy.panBy({ x: (cy.width() - before.w) / 2, y: (cy.height() - before.h) / 2 });
    reveal(cy.$('node:selected'));
  }).observe(container);

  // Replaces the drawing with `elements`; resolves once laid out and painted.
  async function render(elements, { keepViewport = false } = {}) {
    const mine = ++generation;
    const nodes = elements.filter((e) => e.group === 'nodes');
    let positions;
    if (nodes.length > SWEEP_ABOVE && !nodes.some((n) => n.data.parent)) {
      positions = sweepLayout(nodes.map((n) => n.data), elements.filter((e) => e.group === 'edges').map((e) => e.data));
    } else {
      const laid = await elk.layout(elkGraph(elements, nodes.length > FAST_ABOVE));
      positions = absolutePositions(laid, 0, 0, {});
    }
    if (mine !== generation) return false;
    performance.mark('render:laid-out');
    const pan = cy.pan();
    const zoom = cy.zoom();
    cy.startBatch();
    cy.elements().remove();
    const bulk = nodes.length > SWEEP_ABOVE;
    cy.add(elements.map((el) => {
      const classes = bulk ? `${el.classes ?? ''} bulk` : el.classes;
      return el.group === 'nodes' && positions[el.data.id] ? { ...el, classes, position: positions[el.data.id] } : { ...el, classes };
    }));
    cy.endBatch();
    if (keepViewport) cy.viewport({ zoom, pan });
    else {
      cy.stop(true);
      fit();
      userMoved = false;
    }
    performance.mark('render:added');
    await new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve)));
    return true;
  }

  function highlight(ids, pathEdges) {
    cy.batch(() => {
      cy.elements().removeClass('dim path');
      if (!ids) return;
      cy.elements().addClass('dim');
      for (const id of ids) cy.getElementById(id).removeClass('dim').addClass('path').ancestors().removeClass('dim');
      for (const id of pathEdges) cy.getElementById(id).removeClass('dim').addClass('path');
    });
  }

  function flash(ids) {
    const changed = cy.collection(ids.map((id) => cy.getElementById(id)).filter((n) => n.nonempty()));
    changed.addClass('changed');
    setTimeout(() => changed.removeClass('changed'), 2500);
  }

  function select(id) {
    cy.$(':selected').unselect();
    cy.getElementById(id).select();
  }

  // Selects `id` and brings it into view: the whole drawing while that is fitted and readable, otherwise a
  // glide to the node (at least zoom 0.8), which counts as a move of the view like the user's own.
  function focus(id) {
    const el = cy.getElementById(id);
    if (el.empty()) return;
    select(id);
    cy.resize();   // the details panel may have just opened: fit or centre in the canvas as it is now
    cy.stop(true);
    if (!userMoved) {
      fit();
      if (cy.zoom() >= READABLE_ZOOM) return;
    }
    userMoved = true;
    cy.animate({ center: { eles: el }, zoom: Math.max(cy.zoom(), 0.8) }, { duration: 200 });
  }

  return { cy, render, highlight, flash, select, focus };
}
