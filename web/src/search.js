// Search box (role searchbox) with a listbox of results: arrows move, Enter opens, Escape closes.
import * as api from './api.js';
import { clear, debounce, h } from './dom.js';

export function createSearch(onPick) {
  const input = h('input', {
    type: 'search', id: 'search', placeholder: 'Search datasets, jobs, columns…', autocomplete: 'off',
    role: 'searchbox', 'aria-label': 'Search datasets, jobs and columns',
    'aria-controls': 'search-results', 'aria-autocomplete': 'list', 'aria-expanded': 'false',
  });
  const list = h('ul', { id: 'search-results', role: 'listbox', 'aria-label': 'Search results', hidden: true });
  let results = [];
  let active = -1;
  let controller;

  function render() {
    clear(list, results.map((r, i) => h('li', {
      id: `search-result-${i}`, role: 'option', 'aria-selected': String(i === active),
      class: i === active ? 'active' : '',
      onMousedown: (e) => { e.preventDefault(); pick(i); },
    }, h('span', { class: `kind kind-${r.type}`, text: r.type }), h('span', { class: 'qname', text: r.qualified_name }))));
    list.hidden = results.length === 0;
    input.setAttribute('aria-expanded', String(!list.hidden));
    if (active >= 0) input.setAttribute('aria-activedescendant', `search-result-${active}`);
    else input.removeAttribute('aria-activedescendant');
    list.children[active]?.scrollIntoView({ block: 'nearest' });
  }

  function pick(i) {
    const r = results[i];
    if (!r) return;
    results = [];
    active = -1;
    render();
    input.value = r.qualified_name;
    onPick(r);
  }

  const query = debounce(async () => {
    const q = input.value.trim();
    controller?.abort();
    if (!q) { results = []; render(); return; }
    controller = new AbortController();
    try {
      results = (await api.search(q, {}, controller.signal)).results;
      active = results.length ? 0 : -1;
      render();
    } catch (err) {
      if (err.name !== 'AbortError') { results = []; render(); }
    }
  }, 120);

  input.addEventListener('input', query);
  input.addEventListener('keydown', (e) => {
    if (e.key === 'ArrowDown' && results.length) { active = (active + 1) % results.length; render(); e.preventDefault(); }
    else if (e.key === 'ArrowUp' && results.length) { active = (active - 1 + results.length) % results.length; render(); e.preventDefault(); }
    else if (e.key === 'Enter') { pick(Math.max(active, 0)); e.preventDefault(); }
    else if (e.key === 'Escape') { results = []; active = -1; render(); }
  });
  input.addEventListener('blur', () => setTimeout(() => { results = []; render(); }, 150));
  return h('div', { class: 'search' }, input, list);
}
