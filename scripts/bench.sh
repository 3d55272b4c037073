#!/usr/bin/env bash
# scripts/bench.sh — every benchmark: installs what is missing, builds
# tessera (Release) and runs the op, all-reduce, meta-device and model
# benchmarks, writing bench/results/ops.{jsonl,md,png},
# comm.{jsonl,md,png}, meta.{jsonl,md}, model.{jsonl,md,png} and rpc.{jsonl,md,png}. Extra
# arguments go to bench_ops (e.g. --threads 1, --quick); --quick also makes
# the others short runs. OpenMPI is installed for bench_comm's MPI_Allreduce
# baseline (the benchmark runs without it too). About 6 minutes on 2 cores.
set -euo pipefail
source "$(dirname "$0")/common.sh"

"$tsr_root/scripts/deps.sh" "${TSR_PACKAGES[@]}" gnuplot-nox openmpi-bin libopenmpi-dev
tsr_build "$tsr_root/build" -DCMAKE_BUILD_TYPE=Release
cd "$tsr_root"
"$tsr_root/build/bench/bench_ops" --out "$tsr_root/bench/results" "$@"
gnuplot -e "dir='$tsr_root/bench/results'" "$tsr_root/bench/plot_ops.gp" &&
    echo "plot: $tsr_root/bench/results/ops.png"

comm_args=()
for a in "$@"; do
    if [ "$a" = --quick ]; then comm_args+=(--quick); fi
done
"$tsr_root/build/bench/bench_comm" --out "$tsr_root/bench/results" "${comm_args[@]}"
gnuplot -e "dir='$tsr_root/bench/results'" "$tsr_root/bench/plot_comm.gp" &&
    echo "plot: $tsr_root/bench/results/comm.png"
"$tsr_root/build/bench/bench_meta" --out "$tsr_root/bench/results" "${comm_args[@]}"
"$tsr_root/build/bench/bench_model" --out "$tsr_root/bench/results" "${comm_args[@]}"
gnuplot -e "dir='$tsr_root/bench/results'" "$tsr_root/bench/plot_model.gp" &&
    echo "plot: $tsr_root/bench/results/model.png"
# Remote devices against raw NNG streams (starts its own tessera-rpc-server).
if [ -x "$tsr_root/build/bench/bench_rpc" ]; then
    "$tsr_root/build/bench/bench_rpc" --out "$tsr_root/bench/results" "${comm_args[@]}"
    gnuplot -e "dir='$tsr_root/bench/results'" "$tsr_root/bench/plot_rpc.gp" &&
        echo "plot: $tsr_root/bench/results/rpc.png"
fi
