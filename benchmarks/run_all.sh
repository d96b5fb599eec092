#!/usr/bin/env bash
# Run every benchmark; each prints one JSON object. Collected into benchmarks/results.jsonl
# (or $OUT/results.jsonl when OUT is set). Usage: benchmarks/run_all.sh [--quick]
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-benchmarks}/results.jsonl"
: > "$out"
for script in benchmarks/bench_*.py; do
  echo "== $script" >&2
  start=$(date +%s)
  if line=$(python "$script" "$@" | tail -n 1); then
    echo "$line" | tee -a "$out"
  else
    echo "{\"benchmark\": \"$script\", \"error\": \"failed\"}" | tee -a "$out"
  fi
  echo "   ($(( $(date +%s) - start )) s)" >&2
done
echo "results in $out" >&2
