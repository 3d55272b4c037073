#!/usr/bin/env bash
# scripts/main.sh — the main job: installs what is missing, builds tessera
# (Release) and runs the op benchmark, writing bench/results/ops.{jsonl,md,png}.
# Extra arguments go to bench_ops (e.g. --threads 1, --quick).
set -euo pipefail
source "$(dirname "$0")/common.sh"

"$tsr_root/scripts/deps.sh" "${TSR_PACKAGES[@]}" gnuplot-nox
tsr_build "$tsr_root/build" -DCMAKE_BUILD_TYPE=Release
cd "$tsr_root"
"$tsr_root/build/bench/bench_ops" --out "$tsr_root/bench/results" "$@"
gnuplot -e "dir='$tsr_root/bench/results'" "$tsr_root/bench/plot_ops.gp" &&
    echo "plot: $tsr_root/bench/results/ops.png"
