# The two things people do with this repository. Both are in the README; CI runs `make test`.
PYTHON ?= python3

.PHONY: up test install-test-deps lint

up:            ## install the product and start it on the embedded default, with demo traffic
	$(PYTHON) -m pip install -q -e '.[processor]'
	lineage up

test: install-test-deps   ## install the test extras (and a Prometheus server where missing), run every test
	$(PYTHON) -m pytest

install-test-deps:
	$(PYTHON) -m pip install -q -e '.[dev]'
	bash scripts/ensure-prometheus.sh

lint:
	ruff check .
