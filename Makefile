# The two things people do with this repository. Both are in the README; CI runs `make test`.
PYTHON ?= python3

.PHONY: up test install-test-deps lint web-build

up: web-build   ## install the product and start it on the embedded default, with demo traffic
	$(PYTHON) -m pip install -q -e '.[processor]'
	$(PYTHON) scripts/build_compiled.py
	lineage up

test: install-test-deps   ## install the test extras (and a Prometheus server where missing), run every test
	$(PYTHON) -m pytest

install-test-deps: web-build
	$(PYTHON) -m pip install -q -e '.[dev]'
	$(PYTHON) scripts/build_compiled.py
	bash scripts/ensure-prometheus.sh
	bash scripts/ensure-chromium.sh

lint:
	ruff check .

web-build:     ## build the web UI into web/dist (served at /) when it is missing; npm ci takes the lockfile
	@test -f web/dist/index.html || (cd web && npm ci --no-audit --no-fund && npm run build)
