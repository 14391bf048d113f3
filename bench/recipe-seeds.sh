#!/usr/bin/env bash
# The nanoGPT CPU recipe (configs/shakespeare-char-cpu.toml) over several seeds, headlab on
# flex and the PyTorch reference (bench/reference/bench.py), so a loss threshold can be told
# apart from seed noise: one seed's val loss says little when seeds differ by 0.01.
#
#   bench/recipe-seeds.sh [SEED ...]         (default: 1337 1338 1339 1340 1341)
#
# DATA=FILE points at tiny-shakespeare (default datasets/tinyshakespeare/input.txt).
# Needs the venv that `cargo xtask bench --with-torch` creates. Writes
# bench/results/<date>-<host>-seeds[-2, ...].md, with the CPU, versions and threads. Each seed
# takes about 100 s for headlab and 150 s for PyTorch on a 2-core Zen 4.
set -euo pipefail
cd "$(dirname "$0")/.."

data=${DATA:-datasets/tinyshakespeare/input.txt}
if [ ! -f "$data" ]; then
  echo "recipe-seeds: $data not found: see datasets/README.md, or set DATA=FILE" >&2
  exit 1
fi
python=$HOME/.cache/headlab/torch-venv/bin/python
if [ ! -x "$python" ]; then
  echo "recipe-seeds: no PyTorch venv at $python: run 'cargo xtask bench --with-torch' once" >&2
  exit 1
fi
seeds=("$@")
[ ${#seeds[@]} -gt 0 ] || seeds=(1337 1338 1339 1340 1341)

cargo build --release --workspace --quiet
headlab=${CARGO_TARGET_DIR:-target}/release/headlab
work=$(mktemp -d)
rows=()
for seed in "${seeds[@]}"; do
  echo "recipe-seeds: seed $seed: headlab" >&2
  "$headlab" train --config configs/shakespeare-char-cpu.toml --backend flex \
    --set "data.path=$data" --set "train.seed=$seed" --out "$work/headlab-$seed" >/dev/null
  # The last val row of metrics.csv (step,split,loss,...) is the final evaluation.
  ours=$(awk -F, '$2 == "val" { loss = $3 } END { print loss }' "$work/headlab-$seed/metrics.csv")
  echo "recipe-seeds: seed $seed: PyTorch" >&2
  "$python" bench/reference/bench.py --only recipe --recipe-data "$data" --recipe-seed "$seed" \
    --out "$work/torch-$seed.json" 2>/dev/null
  theirs=$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["recipe"]["val_loss"])' \
    "$work/torch-$seed.json")
  rows+=("$seed $ours $theirs")
done

# Like the bench's results, a second run on one day gets -2, -3, ... instead of overwriting.
stem=bench/results/$(date +%F)-$(hostname -s)-seeds
out=$stem.md
for i in $(seq 2 99); do [ -e "$out" ] || break; out=$stem-$i.md; done
# What the numbers hold for, as every result file records it.
cpu=$(awk -F': ' '/^model name/ {m=$2} /^cpu family/ {f=$2} /^model\t/ {n=$2} END {print m ", family " f " model " n}' /proc/cpuinfo)
torch_info=$("$python" -c 'import torch; print(torch.__version__, "with ATen", torch.backends.cpu.get_cpu_capability(), "kernels,", torch.get_num_threads(), "threads")')
flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -x -E 'avx|avx2|fma|avx512f|avx512bw|avx512vl|avx512dq|avx512_vnni|avx512_bf16|amx_tile' | tr '\n' ' ')
header="Made by \`bench/recipe-seeds.sh ${seeds[*]}\` on $(date -u +%F) on $(hostname -s): $(nproc) cores of $cpu (flags: ${flags% }); $("$headlab" --version) on flex with RAYON_NUM_THREADS=${RAYON_NUM_THREADS:-unset}; PyTorch $torch_info."
printf '%s\n' "${rows[@]}" | HEADER="$header" "$python" -c '
import statistics, sys
rows = [line.split() for line in sys.stdin if line.strip()]
print("# nanoGPT CPU recipe over seeds (val loss, 200 batches, 2000 iterations)\n")
import os
print(os.environ["HEADER"] + "\n")
print("| seed | headlab (flex) | PyTorch |")
print("|---|---|---|")
for seed, ours, theirs in rows:
    print(f"| {seed} | {float(ours):.4f} | {float(theirs):.4f} |")
for name, col in (("mean", statistics.mean), ("std", statistics.stdev if len(rows) > 1 else lambda v: 0.0)):
    ours = col([float(r[1]) for r in rows])
    theirs = col([float(r[2]) for r in rows])
    print(f"| {name} | {ours:.4f} | {theirs:.4f} |")
' | tee "$out"
echo "recipe-seeds: wrote $out" >&2
