// A layered left-to-right placement in linear time for large flat graphs: longest-path layers (Kahn's
// order; the edges that close a cycle are ignored), then barycentre sweeps to order each layer. ELK's
// layered algorithm draws better but needs tens of seconds for 2,000 nodes (docs/UI.md); above
// graphview.js's SWEEP_ABOVE the drawing uses this instead.

export function sweepLayout(nodes, edges, { sweeps = 4, gapX = 70, gapY = 8 } = {}) {
  const ids = nodes.map((n) => n.id);
  const index = new Map(ids.map((id, i) => [id, i]));
  const preds = ids.map(() => []);
  const succs = ids.map(() => []);
  for (const e of edges) {
    const s = index.get(e.source);
    const t = index.get(e.target);
    if (s === undefined || t === undefined || s === t) continue;
    succs[s].push(t);
    preds[t].push(s);
  }
  // longest-path layering
  const indegree = preds.map((p) => p.length);
  const rank = new Array(ids.length).fill(0);
  const queue = [];
  indegree.forEach((d, i) => { if (d === 0) queue.push(i); });
  const done = new Array(ids.length).fill(false);
  for (let head = 0; head < ids.length; head++) {
    if (head >= queue.length) {
      // a cycle: start from the first node left
      const next = done.findIndex((d, i) => !d && !queue.includes(i));
      if (next < 0) break;
      queue.push(next);
    }
    const v = queue[head];
    done[v] = true;
    for (const w of succs[v]) {
      if (done[w]) continue;
      rank[w] = Math.max(rank[w], rank[v] + 1);
      if (--indegree[w] === 0) queue.push(w);
    }
  }
  const layers = [];
  rank.forEach((r, i) => { (layers[r] ??= []).push(i); });
  const dense = layers.filter(Boolean);
  // barycentre ordering, alternating directions
  const pos = new Array(ids.length).fill(0);
  const place = () => dense.forEach((layer) => layer.forEach((v, i) => { pos[v] = i; }));
  place();
  for (let s = 0; s < sweeps; s++) {
    const forward = s % 2 === 0;
    const order = forward ? dense : [...dense].reverse();
    for (const layer of order) {
      const key = new Map(layer.map((v) => {
        const near = forward ? preds[v] : succs[v];
        return [v, near.length ? near.reduce((a, u) => a + pos[u], 0) / near.length : pos[v]];
      }));
      layer.sort((a, b) => key.get(a) - key.get(b));
      layer.forEach((v, i) => { pos[v] = i; });
    }
  }
  // coordinates: layer columns as wide as their widest node, each column centred vertically
  const positions = {};
  let x = 0;
  const tallest = Math.max(...dense.map((layer) => layer.reduce((a, v) => a + nodes[v].h + gapY, 0)));
  for (const layer of dense) {
    const width = Math.max(...layer.map((v) => nodes[v].w));
    let y = (tallest - layer.reduce((a, v) => a + nodes[v].h + gapY, 0)) / 2;
    for (const v of layer) {
      positions[ids[v]] = { x: x + width / 2, y: y + nodes[v].h / 2 };
      y += nodes[v].h + gapY;
    }
    x += width + gapX;
  }
  return positions;
}
