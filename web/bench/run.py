"""Drive bench/index.html in Debian chromium: python bench/run.py DIST_DIR"""
import functools
import http.server
import sys
import threading

from playwright.sync_api import sync_playwright

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])
httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
httpd.RequestHandlerClass.log_message = lambda *a: None
threading.Thread(target=httpd.serve_forever, daemon=True).start()
with sync_playwright() as p:
    b = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
    for n in (200, 2000):
        for lib in (sys.argv[2].split(",") if len(sys.argv) > 2 else ("cy-dagre", "cy-elk", "cy-elk-fast", "rf-elk")):
            for _rep in range(2 if n == 200 else 1):
                page = b.new_page(viewport={"width": 1400, "height": 900})
                page.goto(f"http://127.0.0.1:{httpd.server_address[1]}/index.html?lib={lib}&n={n}")
                page.wait_for_function("window.__result", timeout=300000)
                print(page.evaluate("window.__result"), flush=True)
                page.close()
    b.close()
httpd.shutdown()
