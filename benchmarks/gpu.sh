#!/usr/bin/env bash
# The headline benchmarks at accelerator sizes, on a machine without registry access: installs
# nothing (jax with its GPU plugin, jaxdyn and the baselines' packages must already be
# importable, e.g. from wheels carried to the machine), checks that JAX sees a GPU, then runs
#   1. the rank figure: bench_pde_ranks.py (1,200 published runs; the natural simulate_gaussian
#      member with default SweepOptions, against the published loop timed in the same run);
#   2. particle velocities of 10^5 and 10^6 tokens with the chunked kernel
#      (bench_velocity_memory.py --n, Softmax(chunk_size=...));
#   3. 10^4 SGLD chains of the copy head (bench_copy_head_sgld.py --chains 10000);
#   4. a 10^5-member heterogeneous adaptive ensemble (bench_sweep_heterogeneous.py --members).
# Each benchmark's last stdout line (one JSON object) is appended to $OUT/gpu_results.jsonl
# (default benchmarks/gpu_results.jsonl); benchmarks/results/ (the CPU results) is restored
# afterwards, so GPU runs never overwrite them.
# Usage: benchmarks/gpu.sh [--dry-run] [--quick]
#   --dry-run: print the commands and check the scripts and their options, run nothing
#              (works on a CPU-only machine);
#   --quick:   each benchmark's small configuration (a smoke test of the GPU set-up).
set -uo pipefail
cd "$(dirname "$0")/.."
dry=0 quick=()
for arg in "$@"; do
  case "$arg" in
    --dry-run) dry=1 ;;
    --quick) quick=(--quick) ;;
    *) echo "gpu.sh: unknown argument $arg (use --dry-run, --quick)" >&2; exit 2 ;;
  esac
done
python=${PYTHON:-python}
out="${OUT:-benchmarks}/gpu_results.jsonl"
commands=(
  "benchmarks/bench_pde_ranks.py ${quick[*]}"
  "benchmarks/bench_velocity_memory.py --n 100000 --chunk 4096"
  "benchmarks/bench_velocity_memory.py --n 1000000 --chunk 8192"
  "benchmarks/bench_copy_head_sgld.py --chains 10000 --baseline-chains 16 ${quick[*]}"
  "benchmarks/bench_sweep_heterogeneous.py --members 100000 ${quick[*]}"
)
if [ "$dry" = 1 ]; then
  status=0
  for cmd in "${commands[@]}"; do
    read -r script args <<< "$cmd"
    echo "would run: $python $cmd"
    if [ ! -f "$script" ]; then
      echo "  missing: $script" >&2; status=1; continue
    fi
    # every option the command passes must be one the script declares (add_argument)
    for opt in $args; do
      case "$opt" in
        --*) grep -q -- "add_argument(\"$opt\"" "$script" \
               || { echo "  $script: no option $opt" >&2; status=1; } ;;
      esac
    done
  done
  echo "results would go to $out"
  exit $status
fi
if ! "$python" -c "import jax, sys; sys.exit(jax.devices()[0].platform != 'gpu')"; then
  echo "gpu.sh: JAX sees no GPU ($("$python" -c 'import jax; print(jax.devices())' 2>&1))" >&2
  exit 1
fi
"$python" -c "import jax; print('devices:', jax.devices())" >&2
mkdir -p "$(dirname "$out")"
saved=$(mktemp -d)
cp -r benchmarks/results "$saved/"
trap 'rm -rf benchmarks/results && cp -r "$saved/results" benchmarks/ && rm -rf "$saved"' EXIT
for cmd in "${commands[@]}"; do
  echo "== $cmd" >&2
  start=$(date +%s)
  # shellcheck disable=SC2086
  if line=$("$python" $cmd | tail -n 1) && [ -n "$line" ]; then
    echo "$line" | tee -a "$out"
  else
    echo "{\"benchmark\": \"$cmd\", \"error\": \"failed\"}" | tee -a "$out"
  fi
  echo "   ($(( $(date +%s) - start )) s)" >&2
done
echo "results in $out" >&2
