#!/usr/bin/env bash
# The observability tests run a real Prometheus server and promtool (Debian's `prometheus` package).
# Install it where it is missing; do nothing where it is there.
set -euo pipefail
if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "prometheus/promtool missing: run 'sudo apt-get install -y prometheus' (the ops tests need them)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends prometheus >/dev/null
