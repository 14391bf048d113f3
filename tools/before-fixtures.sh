#!/usr/bin/env bash
# Short runs of every shipped config, kept as tests/fixtures/before/<config>.csv (metrics.csv's
# step, split, loss, lr and bpc columns): the losses an older headlab trained to, which
# tests/before.rs holds every later build to, digit for digit, so a new default-off switch
# cannot move a default run. Made with the binary of commit 7092141 (before the speedrun's
# switches):
#
#   git worktree add /tmp/old 7092141 && (cd /tmp/old && cargo build --release)
#   tools/before-fixtures.sh /path/to/that/target/release/headlab
#
# The speedrun's config is made of those switches and has no such before: its fixture holds
# it to the losses of the commit that gave Newton-Schulz its Gram form (the fixture's last
# commit in `git log`), made with that commit's binary by naming it:
#
#   tools/before-fixtures.sh /path/to/that/target/release/headlab shakespeare-char-speedrun
#
# The default config's fixture was made again when it moved to word tokens (issue #66), by
# naming it (`tools/before-fixtures.sh BINARY default`); its character run before that is
# configs/grammar-char.toml, whose fixture is the old default.csv. lab-syntax.csv was made
# the same way when that lab's config was first held to its digits (issue #66).
#
# The long track's config (shakespeare-char-long) has no fixture: it is the speedrun's
# switches at another shape, which the speedrun's fixture already holds to their digits.
#
# gemm's AVX-512 kernels (x86-v4, chosen at run time) block the products otherwise than its
# AVX2 + FMA ones, so the digits depend on the CPU: the fixtures above come from CPUs with
# AVX-512 (tests/before.rs uses them where the CPU has avx512f). tests/fixtures/before-avx2
# holds the same runs on an AVX2-only CPU (a 2-core AMD EPYC, family 25 model 1, Zen 3),
# made on 2026-12-07 with the binary of the commit that added them (which trains to every
# digit of the AVX-512 fixtures on AVX-512 CPUs), by naming every config:
#
#   BEFORE_OUT=tests/fixtures/before-avx2 tools/before-fixtures.sh BINARY $(ls tests/fixtures/before | sed 's/.csv//')
#
# The overrides below are repeated in tests/before.rs; change both together.
set -euo pipefail
cd "$(dirname "$0")/.."
headlab=${1:?usage: tools/before-fixtures.sh HEADLAB_BINARY [CONFIG_NAME...]}
shift
out=${BEFORE_OUT:-tests/fixtures/before}
mkdir -p "$out"
work=$(mktemp -d)
if [ $# -gt 0 ]; then
  configs=()
  for name in "$@"; do configs+=("configs/$name.toml"); done
else
  configs=(configs/*.toml)
fi
for config in "${configs[@]}"; do
  name=$(basename "$config" .toml)
  [ -f "$config" ] || { echo "before-fixtures: no $config" >&2; exit 2; }
  # Without names: every config but the speedrun's, whose fixture comes from another commit,
  # and the long track's, which has none.
  if [ $# -eq 0 ]; then
    case "$name" in shakespeare-char-speedrun | shakespeare-char-long) continue ;; esac
  fi
  "$headlab" train --config "$config" --out "$work/$name" \
    --set train.max_iters=30 --set train.eval_interval=10 --set train.eval_iters=2 \
    --set train.log_interval=5 --set train.sample_tokens=0 --set train.track_heads_every=0 \
    --set train.grammar_sentences=0 >/dev/null 2>&1
  cut -d, -f1-4,7 "$work/$name/metrics.csv" > "$out/$name.csv"
  echo "$name: $(wc -l < "$out/$name.csv") rows" >&2
done
rm -rf "$work"
