"""``GET /docs``: interactive API documentation served by the product itself (no CDN, works offline).

FastAPI's Swagger UI and ReDoc pages load their JavaScript from a CDN; this page is self-contained
instead: a few lines of inline script that read ``/openapi.json``, list every operation by tag with its
parameters and responses, and let a reader try GET operations (with an optional API key). Text from
the document is inserted with ``textContent`` only.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

__all__ = ["router", "DOCS_HTML"]

router = APIRouter(include_in_schema=False)

DOCS_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>lineage-stream API</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1100px;padding:1rem 2rem;color:#1d2330}
h1{margin:.2rem 0}h2{border-bottom:1px solid #ccd;margin-top:2rem}code,pre,input{font-family:ui-monospace,monospace}
details{border:1px solid #dde;border-radius:6px;margin:.4rem 0;padding:.3rem .6rem}
summary{cursor:pointer}.m{display:inline-block;min-width:4.2em;font-weight:700}.GET{color:#0a6}.POST{color:#c60}
pre{background:#f4f5f8;padding:.6rem;overflow:auto;max-height:24rem}table{border-collapse:collapse}
td,th{border:1px solid #dde;padding:.2rem .5rem;text-align:left;vertical-align:top}
</style></head><body>
<h1>lineage-stream API</h1>
<p>The machine-readable document is <a href="/openapi.json">/openapi.json</a>. This page is served by the product
(no external scripts). API key for "Try it" (sent as <code>Authorization: Bearer</code>, kept in this page only):
<input id="key" type="password" size="30" aria-label="API key"></p>
<main id="ops" aria-live="polite">Loading /openapi.json ...</main>
<script>
"use strict";
const el = (tag, text, cls) => { const e = document.createElement(tag); if (text !== undefined) e.textContent = text;
  if (cls) e.className = cls; return e; };
function operation(path, method, op) {
  const d = el("details"), s = el("summary");
  s.append(el("span", method.toUpperCase(), "m " + method.toUpperCase()), el("code", path), " ",
           el("span", op.summary || ""));
  d.append(s);
  if (op.description) d.append(el("p", op.description));
  const params = op.parameters || [], inputs = {};
  if (params.length) {
    const t = el("table"); const h = el("tr"); ["name", "in", "required", "type", "description"].forEach(x => h.append(el("th", x)));
    t.append(h);
    for (const p of params) {
      const r = el("tr"), sch = p.schema || {};
      r.append(el("td", p.name), el("td", p.in), el("td", p.required ? "yes" : ""),
               el("td", sch.type || (sch.anyOf || []).map(x => x.type).join("|")), el("td", p.description || ""));
      if (method === "get") { const i = el("input"); i.placeholder = sch.default !== undefined ? String(sch.default) : "";
        i.setAttribute("aria-label", p.name); inputs[p.name] = [p, i]; const c = el("td"); c.append(i); r.append(c); }
      t.append(r);
    }
    d.append(t);
  }
  const codes = Object.entries(op.responses || {}).map(([c, r]) => c + " " + (r.description || "")).join("; ");
  if (codes) d.append(el("p", "Responses: " + codes));
  if (method === "get") {
    const b = el("button", "Try it"), out = el("pre");
    b.onclick = async () => {
      let url = path; const q = new URLSearchParams();
      for (const [name, [p, i]] of Object.entries(inputs)) {
        if (!i.value) continue;
        if (p.in === "path") url = url.replace("{" + name + "}", encodeURIComponent(i.value));
        else q.append(name, i.value);
      }
      const key = document.getElementById("key").value, headers = key ? {Authorization: "Bearer " + key} : {};
      try { const r = await fetch(url + (q.toString() ? "?" + q : ""), {headers});
        const text = await r.text(); let shown = text; try { shown = JSON.stringify(JSON.parse(text), null, 2); } catch (e) {}
        out.textContent = r.status + " " + r.statusText + "\\n" + shown;
      } catch (e) { out.textContent = String(e); }
    };
    d.append(b, out);
  }
  return d;
}
fetch("/openapi.json").then(r => r.json()).then(spec => {
  const main = document.getElementById("ops"); main.textContent = "";
  main.append(el("p", (spec.info.summary || spec.info.title) + " - version " + spec.info.version));
  const byTag = {};
  for (const [path, item] of Object.entries(spec.paths))
    for (const [method, op] of Object.entries(item))
      (byTag[(op.tags || ["other"])[0]] ||= []).push(operation(path, method, op));
  for (const [tag, ops] of Object.entries(byTag)) { main.append(el("h2", tag)); ops.forEach(o => main.append(o)); }
}).catch(e => { document.getElementById("ops").textContent = "Could not load /openapi.json: " + e; });
</script></body></html>
"""


@router.get("/docs")
def docs() -> HTMLResponse:
    return HTMLResponse(DOCS_HTML, headers={"Content-Security-Policy": "default-src 'self'; script-src 'unsafe-inline' "
                                            "'self'; style-src 'unsafe-inline'"})
