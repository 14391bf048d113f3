#!/usr/bin/env bash
# The wgpu path on a real GPU, in one bounded command: what wgpu sees, agreement with the f64
# truth, and the training step's speed against PyTorch on CUDA. Made for the minutes a GPU
# machine is lent: every step has its own time limit, the whole run stops by 9 minutes, and a
# step that cannot run (no CUDA PyTorch, out of memory at a shape, a time limit) is reported
# as skipped with its reason while the rest runs.
#
#   tools/gpu-check.sh [--allow-cpu-adapter] [--tiny] [--results DIR] [--bin DIR]
#                      [--python PY] [--budget SECONDS]
#
#   --allow-cpu-adapter  measure on a CPU adapter (Mesa's lavapipe) instead of refusing
#   --tiny               one tiny shape, one compare step, one round, the compare beside the
#                        training step (its timings mean nothing): the dry run CI does on
#                        lavapipe
#   --results DIR        where the result files go (default bench/results)
#   --bin DIR            where headlab and headlab-bench are (default: $CARGO_TARGET_DIR or
#                        target, then release/)
#   --python PY          a Python with torch for the PyTorch columns (default: the bench's
#                        venv ~/.cache/headlab/torch-venv, else python3)
#   --budget SECONDS     the whole run's limit (default 540)
#
# Steps: 1. the adapter (refuses a CPU adapter unless told); 2. `headlab compare --backends
# flex,wgpu` on the default config and on a GPT-2-small shape; 3. the training step on wgpu at
# the recipe shape, nanoGPT's GPU shape (6L/384/T256/B64) and GPT-2 small (12L/768/T1024/B8),
# the first step timed apart (shader compile, autotune), MFU against the GPU's published fp32
# peak; 4. where torch.cuda.is_available(), PyTorch's eager, fused and compiled step on CUDA in
# the same interleaved rounds; 5. bench/results/<date>-<gpu>.{json,md} from headlab-bench and
# <date>-<gpu>-check.md, this script's summary with every compare report.
#
# On a machine without a Rust toolchain, bring the two binaries built here: stripped and
# xz-compressed they are about 15 MB each (2026-12-03), e.g.
#   mkdir -p gpu-bin && for b in headlab headlab-bench; do strip -o gpu-bin/$b target/release/$b
#   && xz -f gpu-bin/$b; done          # there: xz -d gpu-bin/*.xz; tools/gpu-check.sh --bin gpu-bin
#
# Exit codes: 0 when every step ran or was skipped with a reason; 1 when a step failed; 2 for
# a usage error or a CPU adapter without --allow-cpu-adapter; 3 when wgpu finds no adapter.
set -uo pipefail

# Paths given on the command line are the caller's, made absolute before moving to the root.
absolute() { case "$1" in /*) printf '%s' "$1" ;; *) printf '%s' "$PWD/$1" ;; esac; }
allow_cpu=0 tiny=0 results="" bin="" python="" budget=540
while [ $# -gt 0 ]; do
  case "$1" in
    --allow-cpu-adapter) allow_cpu=1; shift; continue ;;
    --tiny) tiny=1; shift; continue ;;
    -h|--help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  esac
  if [ $# -lt 2 ]; then
    echo "gpu-check: $1 needs a value, or is not an option (see --help)" >&2; exit 2
  fi
  case "$1" in
    --results) results="$(absolute "$2")" ;;
    --bin) bin="$(absolute "$2")" ;;
    --python) case "$2" in */*) python="$(absolute "$2")" ;; *) python="$2" ;; esac ;;
    --budget) budget="$2" ;;
    *) echo "gpu-check: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift 2
done
case "$budget" in ''|*[!0-9]*) echo "gpu-check: --budget $budget is not a number of seconds" >&2; exit 2 ;; esac
cd "$(dirname "$0")/.."
[ -n "$results" ] || results="$PWD/bench/results"
[ -n "$bin" ] || bin="${CARGO_TARGET_DIR:-$PWD/target}/release"
for exe in headlab headlab-bench; do
  if [ ! -x "$bin/$exe" ]; then
    echo "gpu-check: $bin/$exe not found; build it first (cargo build --release --workspace) or pass --bin DIR" >&2
    exit 2
  fi
done
if [ -z "$python" ]; then
  python="$HOME/.cache/headlab/torch-venv/bin/python"
  [ -x "$python" ] || python=python3
fi
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$scratch}"
start=$SECONDS
summary=()
failed=0

# step NAME LIMIT CMD...: runs CMD within min(LIMIT, what is left of the budget); stdout and
# stderr go to $scratch/NAME.log. Sets $rc; notes the outcome in the summary.
step() {
  local name="$1" limit="$2"; shift 2
  local left=$(( budget - (SECONDS - start) - 5 ))
  if [ "$left" -lt 10 ]; then
    summary+=("- $name: skipped: the ${budget} s budget is spent")
    echo "gpu-check: skipped: $name: the ${budget} s budget is spent" >&2
    rc=124; return
  fi
  [ "$limit" -le "$left" ] || limit="$left"
  echo "gpu-check: $name (at most ${limit} s)" >&2
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >"$scratch/$name.log" 2>&1
  rc=$?
  local took=$(( SECONDS - t0 ))
  if [ "$rc" -eq 0 ]; then
    summary+=("- $name: ran in ${took} s")
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    summary+=("- $name: skipped: timed out after ${limit} s")
    echo "gpu-check: skipped: $name: timed out after ${limit} s" >&2
  else
    local why
    why="$(grep -m1 -E '^error|out of memory|panicked' "$scratch/$name.log" | cut -c1-300)"
    summary+=("- $name: failed (exit $rc): ${why:-see its log}")
    echo "gpu-check: $name failed (exit $rc): ${why:-}" >&2
    failed=1
  fi
}

# 1. The adapter.
if ! adapter_json="$(timeout 120 "$bin/headlab-bench" --adapter 2>"$scratch/adapter.log")"; then
  echo "gpu-check: wgpu finds no adapter: $(tail -n 3 "$scratch/adapter.log")" >&2
  exit 3
fi
adapter="$(printf '%s' "$adapter_json" | sed -n 's/.*"name":"\([^"]*\)".*/\1/p')"
physical="$(printf '%s' "$adapter_json" | sed -n 's/.*"physical":\([a-z]*\).*/\1/p')"
echo "gpu-check: wgpu adapter: ${adapter:-unnamed} (a card: ${physical:-?})" >&2
if [ "$physical" != "true" ] && [ "$allow_cpu" -ne 1 ]; then
  echo "gpu-check: ${adapter:-the adapter} is a CPU or software adapter (lavapipe?), not a GPU: its numbers say nothing about GPU speed. Pass --allow-cpu-adapter to run anyway (the dry run)." >&2
  exit 2
fi

mkdir -p "$results"

# The GPU's published fp32 peak (non-tensor-core FMA), for MFU; none for other adapters.
peak_gflops="" peak_name=""
case "$adapter" in
  *H200*|*"H100 SXM"*|*"H100 80GB HBM3"*) peak_gflops=67000 ;;
  *H100*) peak_gflops=51200 ;;
  *A100*) peak_gflops=19500 ;;
  *L40S*) peak_gflops=91600 ;;
  *L40*) peak_gflops=90500 ;;
  *" L4"|*" L4 "*) peak_gflops=30300 ;;
  *A10G*) peak_gflops=31200 ;;
  *"RTX 4090"*) peak_gflops=82600 ;;
  *T4*) peak_gflops=8100 ;;
esac
[ -z "$peak_gflops" ] || peak_name="$adapter, fp32 non-tensor-core peak from NVIDIA's spec sheet"
label="$(printf '%s' "${adapter:-adapter}" | tr 'A-Z' 'a-z' | tr -cs 'a-z0-9' '-' | sed 's/^-//; s/-$//' | cut -c1-40)"
[ "$physical" = "true" ] || label="$label-dry-run"

# 2. Agreement with the f64 truth. The GPT-2-small shape keeps T 256 and one sequence: the
# truth runs in f64 on the CPU, and at T 1024 it alone would take the budget.
if [ "$tiny" -eq 1 ]; then
  # The model of tests/compare.rs's wgpu run, so that in the test suite lavapipe finds most
  # kernels in Mesa's shader cache.
  shape_sets=(--set model.n_layers=1 --set model.n_heads=2 --set model.d_model=24
              --set model.block_size=16 --set train.batch_size=4 --set data.builtin_chars=5000)
  compare_steps=1
else
  shape_sets=()
  compare_steps=3
  gpt2_sets=(--set model.n_layers=12 --set model.n_heads=12 --set model.d_model=768
             --set model.block_size=256 --set train.batch_size=1)
fi
# ${a[@]+"${a[@]}"}: an empty array under `set -u` on bash before 4.4 too.
compare_default() {
  step compare-default 150 "$bin/headlab" compare --backends flex,wgpu --steps "$compare_steps" \
    ${shape_sets[@]+"${shape_sets[@]}"} --out "$scratch/compare-default"
}
compare_pid=""
if [ "$tiny" -eq 1 ]; then
  # The dry run's timings mean nothing, so its compare runs beside the training step (each
  # keeps about one core busy compiling kernels on lavapipe): the suite waits half as long.
  # The subshell's summary lines and failure come back through a file and its exit status.
  ( summary=(); compare_default
    printf '%s\n' ${summary[@]+"${summary[@]}"} >"$scratch/compare-default.summary"
    exit "$failed" ) &
  compare_pid=$!
  # At the tiny shape it would be compare-default again: half a minute on lavapipe for nothing.
  summary+=("- compare-gpt2-small: skipped: --tiny runs one shape")
else
  compare_default
  step compare-gpt2-small 200 "$bin/headlab" compare --backends flex,wgpu --steps 1 \
    "${gpt2_sets[@]}" --out "$scratch/compare-gpt2-small"
fi

# 3 and 4. The training step, interleaved with PyTorch on CUDA where there is one.
torch_args=()
if timeout 60 "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  torch_args=(--torch-python "$python" --torch-device cuda)
else
  summary+=("- PyTorch CUDA columns: skipped: no CUDA PyTorch in $python")
  echo "gpu-check: skipped: PyTorch CUDA columns: no CUDA PyTorch in $python" >&2
fi
peak_args=()
if [ -n "$peak_gflops" ]; then
  peak_args=(--device-peak-gflops "$peak_gflops" --device-peak-name "$peak_name")
else
  summary+=("- MFU: no published peak known for ${adapter:-this adapter}; the wgpu column's MFU is of the CPU's FMA peak")
fi
if [ "$tiny" -eq 1 ]; then
  # One round: the rounds' interleaving is the bench's own test's (crates/bench/tests), and on
  # lavapipe each round's worker compiles every kernel again.
  bench_args=(--quick --rounds 1 --step-shapes tiny)
else
  bench_args=(--rounds 2 --step-shapes recipe,nanogpt-gpu-b64,gpt2-small)
fi
step train-step 300 "$bin/headlab-bench" --only train_step --backends wgpu \
  --step-threads "$(nproc)" "${bench_args[@]}" ${torch_args[@]+"${torch_args[@]}"} \
  ${peak_args[@]+"${peak_args[@]}"} \
  --results "$results" --label "$label" --criterion-dir "$scratch/criterion"
if [ -n "$compare_pid" ]; then
  wait "$compare_pid" || failed=1
  while IFS= read -r line; do summary+=("$line"); done <"$scratch/compare-default.summary"
fi
report="$(sed -n 's/^wrote \(.*\.json\) and \(.*\.md\)$/\2/p' "$scratch/train-step.log" | tail -n 1)"
# A shape that ran out of memory is a failed cell in the report, not a failed script.
if [ -n "$report" ]; then
  grep -q "failed, see below" "$report" &&
    summary+=("- train-step: some shapes did not run; their reasons are under 'Failed:' in $report")
fi

# 5. The summary, with every compare report.
check="$results/$(date -u +%Y-%m-%d)-$label-check.md"
{
  echo "# GPU check: ${adapter:-unknown adapter}"
  echo
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPU cores, \`tools/gpu-check.sh$( [ "$tiny" -eq 1 ] && echo ' --tiny')$( [ "$allow_cpu" -eq 1 ] && echo ' --allow-cpu-adapter')\`, $(( SECONDS - start )) s."
  echo
  printf '%s\n' ${summary[@]+"${summary[@]}"}
  echo
  echo "Training step: ${report:-not written}"
  compares=(compare-default)
  [ "$tiny" -eq 1 ] || compares+=(compare-gpt2-small)
  for c in "${compares[@]}"; do
    echo
    echo "## $c"
    echo
    if [ -f "$scratch/$c/compare.md" ]; then
      sed 's/^#/##/' "$scratch/$c/compare.md"
    else
      echo "No report; the log's end:"
      echo
      echo '```'
      tail -n 15 "$scratch/$c.log" 2>/dev/null
      echo '```'
    fi
  done
} >"$check"
printf '%s\n' ${summary[@]+"${summary[@]}"}
echo "gpu-check: wrote $check${report:+ and $report} in $(( SECONDS - start )) s" >&2
exit "$failed"
