// Element builder. Data (names, facet values) only ever goes in as text: there is no
// innerHTML anywhere in this UI, so a dataset named `<img src=x onerror=...>` stays text.

export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on')) el.addEventListener(key.slice(2).toLowerCase(), value);
    else if (key === 'class') el.className = value;
    else if (key === 'text') el.textContent = value;
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else if (key in el && key !== 'list' && !key.includes('-')) el[key] = value;
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function clear(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export function debounce(fn, ms) {
  let timer;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}

// `text` as text nodes with a <wbr> after each run of '/', '.', '_' or '#', so that a long qualified name wraps
// between its parts ("postgres://host:5432/" | "mart." | "revenue") rather than mid-word.
export function breakable(text) {
  return String(text).split(/(?<=[/._#])(?![/._#])/).flatMap((part, i) => (i ? [h('wbr'), part] : [part]));
}
