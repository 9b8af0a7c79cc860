#!/usr/bin/env bash
# Debian's chromium for the browser tests (tests/test_web_ui.py) and benchmarks/ui_render_bench.py.
# Playwright drives it through executable_path; `playwright install` cannot download its own browser here.
set -euo pipefail
CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
if [ -x "$CHROMIUM" ]; then
    exit 0
fi
if [ "$(id -u)" = 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
else
    echo "ensure-chromium: $CHROMIUM is missing and neither root nor sudo is available; install Debian's 'chromium'" >&2
    exit 1
fi
echo "ensure-chromium: installing Debian's chromium" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
"$CHROMIUM" --version
