// Layout/render candidates measured before choosing (docs/UI.md). Not part of the app build; needs
// `npm i --no-save cytoscape-dagre cytoscape-elk react react-dom @xyflow/react`, then
// `npx vite build bench --outDir ../.bench-dist` and `python bench/run.py .bench-dist` (from web/).
// Measures first render (data -> laid out and painted) of a layered graph of N nodes
// for the candidate graph libraries. Usage: index.html?lib=cy-dagre|cy-elk|rf-elk&n=2000
import cytoscape from 'cytoscape';
import dagre from 'cytoscape-dagre';
import cyElk from 'cytoscape-elk';
import ELK from 'elkjs/lib/elk.bundled.js';

cytoscape.use(dagre);
cytoscape.use(cyElk);

// A lineage-like neighbourhood: a root, 10 layers upstream, fan-in of 1-3 per node.
function graph(n) {
  let seed = 42;
  const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
  const layers = 10;
  const nodes = [];
  const edges = [];
  for (let i = 0; i < n; i++) nodes.push({ id: 'n' + i, layer: i === 0 ? 0 : 1 + (i % layers) });
  const byLayer = Array.from({ length: layers + 1 }, () => []);
  nodes.forEach((d) => byLayer[d.layer].push(d.id));
  for (let l = 1; l <= layers; l++) {
    for (const id of byLayer[l]) {
      const prev = byLayer[l - 1];
      const k = 1 + Math.floor(rnd() * 2);
      for (let j = 0; j < k; j++) {
        const t = prev[Math.floor(rnd() * prev.length)];
        edges.push({ id: `e${edges.length}`, source: id, target: t });
      }
    }
  }
  return { nodes, edges };
}

// ELK layered with the cheap strategies: longest-path layering, one sweep of crossing
// minimisation, simple node placement (the defaults are network simplex and Brandes-Koepf).
export const FAST = {
  algorithm: 'layered', 'elk.direction': 'LEFT',
  'elk.layered.layering.strategy': 'LONGEST_PATH',
  'elk.layered.thoroughness': 1,
  'elk.layered.crossingMinimization.greedySwitch.type': 'OFF',
  'elk.layered.nodePlacement.strategy': 'SIMPLE',
  'elk.edgeRouting': 'POLYLINE',
};

const frame = () => new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));

async function cy(name, g) {
  const t0 = performance.now();
  const c = cytoscape({
    container: document.getElementById('c'),
    elements: [
      ...g.nodes.map((d) => ({ data: { id: d.id, label: 'ns/db.schema.table_' + d.id } })),
      ...g.edges.map((e) => ({ data: e })),
    ],
    style: [
      { selector: 'node', style: { label: 'data(label)', shape: 'round-rectangle', width: 120, height: 24, 'font-size': 9 } },
      { selector: 'edge', style: { 'curve-style': 'bezier', 'target-arrow-shape': 'triangle', width: 1 } },
    ],
    layout: { name: 'preset' },
    textureOnViewport: true,
    hideEdgesOnViewport: g.nodes.length > 500,
  });
  const opts = name === 'cy-dagre'
    ? { name: 'dagre', rankDir: 'RL', nodeSep: 8, rankSep: 80, animate: false }
    : name === 'cy-elk-fast'
      ? { name: 'elk', animate: false, elk: FAST }
      : { name: 'elk', elk: { algorithm: 'layered', 'elk.direction': 'LEFT' }, animate: false };
  await new Promise((res) => { const l = c.layout(opts); l.one('layoutstop', res); l.run(); });
  const tl = performance.now() - t0;
  c.fit();
  await frame();
  return { total: performance.now() - t0, layout: tl };
}

async function rf(g) {
  const React = await import('react');
  const { createRoot } = await import('react-dom/client');
  const { ReactFlow } = await import('@xyflow/react');
  await import('@xyflow/react/dist/style.css');
  const t0 = performance.now();
  const elk = new ELK();
  const laid = await elk.layout({
    id: 'root',
    layoutOptions: { 'elk.algorithm': 'layered', 'elk.direction': 'LEFT' },
    children: g.nodes.map((d) => ({ id: d.id, width: 120, height: 24 })),
    edges: g.edges.map((e) => ({ id: e.id, sources: [e.source], targets: [e.target] })),
  });
  const tl = performance.now() - t0;
  const nodes = laid.children.map((d) => ({ id: d.id, position: { x: d.x, y: d.y }, data: { label: 'ns/db.schema.table_' + d.id } }));
  const edges = g.edges.map((e) => ({ id: e.id, source: e.source, target: e.target }));
  await new Promise((res) => {
    createRoot(document.getElementById('c')).render(
      React.createElement(ReactFlow, { nodes, edges, fitView: true, onlyRenderVisibleElements: false, onInit: () => res() }),
    );
  });
  await frame();
  return { total: performance.now() - t0, layout: tl };
}

const p = new URLSearchParams(location.search);
const lib = p.get('lib');
const n = Number(p.get('n') || 200);
const g = graph(n);
// after load, so the page's own loading is not counted
window.addEventListener('load', () => setTimeout(() => {
  (lib === 'rf-elk' ? rf(g) : cy(lib, g)).then((ms) => { window.__result = { lib, n, edges: g.edges.length, ...ms }; });
}, 50));
