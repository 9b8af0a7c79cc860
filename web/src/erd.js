// ERD view: namespace -> schema -> table -> column, relations from the API's erd endpoint.
import { EDGE_TYPES, nodeSize } from './graphview.js';

export const ERD_LEVELS = ['namespace', 'schema', 'table', 'column'];

// `level`: the deepest hierarchy level drawn; `collapsed`: container ids drawn closed.
export function erdElements(response, level, collapsed) {
  const depth = ERD_LEVELS.indexOf(level);
  const out = [];
  const listed = [];
  const seen = new Set();
  const add = (id, text, kind, parent, qualified) => {
    if (seen.has(id)) return;
    seen.add(id);
    out.push({ group: 'nodes', data: { id, label: text, kind, parent, ...nodeSize(text) } });
    listed.push({ id, qualified_name: qualified });
  };
  const owner = new Map();
  for (const t of response.tables) {
    const nsId = `ns:${t.namespace}`;
    const schemaName = [t.database, t.schema].filter(Boolean).join('.') || '(default)';
    const schemaId = `schema:${t.namespace}/${schemaName}`;
    add(nsId, t.namespace, 'namespace', undefined, t.namespace);
    let at = nsId;
    if (depth >= 1 && !collapsed.has(nsId)) {
      add(schemaId, schemaName, 'schema', nsId, `${t.namespace}/${schemaName}`);
      at = schemaId;
      if (depth >= 2 && !collapsed.has(schemaId)) {
        const label = depth >= 3 || collapsed.has(t.id) ? t.table : `${t.table} (${t.columns.length})`;
        add(t.id, label, 'table', schemaId, t.qualified_name);
        at = t.id;
        if (depth >= 3 && !collapsed.has(t.id)) {
          for (const c of t.columns) {
            const text = `${c.primary_key ? '🔑 ' : ''}${c.name}: ${c.type ?? '?'}`;
            add(`${t.id}#${c.name}`, text, 'column', t.id, `${t.qualified_name}#${c.name}`);
          }
        }
      }
    }
    owner.set(t.id, at);
  }
  const relation = EDGE_TYPES.relation;
  const drawn = new Set();
  for (const r of response.relations) {
    const pick = (table, columns) => (depth >= 3 && seen.has(`${table}#${columns[0]}`) ? `${table}#${columns[0]}` : owner.get(table));
    const source = pick(r.from_table, r.from_columns);
    const target = pick(r.to_table, r.to_columns);
    if (!source || !target || source === target) continue;
    const id = `rel:${source}->${target}`;
    if (drawn.has(id)) continue;
    drawn.add(id);
    out.push({ group: 'edges', classes: 'relation', data: { id, source, target, color: relation.color, lineStyle: relation.style, transformation: r.name } });
  }
  return { elements: out, listed };
}
