#!/usr/bin/env bash
# Run every benchmark (benchmarks/bench_*.py: the sweep engine's and every theory's); each
# prints one JSON object as its last line of stdout, with its baseline measured in the same run.
# The lines are collected into benchmarks/results.jsonl (or $OUT/results.jsonl when OUT is set);
# a benchmark that fails gets {"benchmark": script, "error": last line of its stderr}.
# Usage: benchmarks/run_all.sh [--quick]      (--quick: each benchmark's small configuration)
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-benchmarks}/results.jsonl"
mkdir -p "$(dirname "$out")"
: > "$out"
errors=$(mktemp)
trap 'rm -f "$errors"' EXIT
for script in benchmarks/bench_*.py; do
  echo "== $script" >&2
  start=$(date +%s)
  # stderr shows live and is kept in $errors; stdout's last line is the result
  if line=$({ python "$script" "$@" 2>&1 1>&3 | tee "$errors" >&2; } 3>&1 | tail -n 1) \
      && [ -n "$line" ]; then
    echo "$line" | tee -a "$out"
  else
    reason=$(tail -n 1 "$errors" | tr -d '"\\' | cut -c1-300)
    echo "{\"benchmark\": \"$script\", \"error\": \"${reason:-failed}\"}" | tee -a "$out"
  fi
  echo "   ($(( $(date +%s) - start )) s)" >&2
done
echo "results in $out" >&2
