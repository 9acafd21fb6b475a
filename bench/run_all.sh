#!/usr/bin/env bash
# Runs every benchmark in turn (tens of minutes; the live ones need lighttpd, wrk, tshark).
# Each prints a ratio against a reference measured in the same run; copy what you
# measured into bench/RESULTS.md with the command and the date.
set -euo pipefail
cd "$(dirname "$0")/.."
for b in bench/bench_*.py; do
  echo "== $b"
  python3 "$b"
done
