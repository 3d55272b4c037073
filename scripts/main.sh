#!/usr/bin/env bash
# scripts/main.sh — the main job: installs what is missing, builds the
# `tessera` command (Release) and runs a generated TinyLlama-1.1B-shaped
# model (F16) tensor-parallel over this machine's default device mix, then
# again on one device to verify it (--verify): prints prefill and decode
# tokens/s, memory per device, the all-reduces per token and their path,
# and whether the tokens match. Exits non-zero if they differ.
#
# The default mix: every GPU when there is one, else the host's cores split
# into CPU devices (two when there are two cores or more; set
# TSR_CPU_DEVICES to choose). Extra arguments go to `tessera run` (e.g.
# --preset tiny, --gen 64, --devices cpu:0,cpu:1,cpu:2). The benchmarks are
# scripts/bench.sh.
set -euo pipefail
source "$(dirname "$0")/common.sh"

"$tsr_root/scripts/deps.sh" "${TSR_PACKAGES[@]}"
tsr_build "$tsr_root/build" -DCMAKE_BUILD_TYPE=Release --target tessera_cli

if [ -z "${TSR_CPU_DEVICES:-}" ]; then
    if [ "$(nproc)" -ge 2 ]; then export TSR_CPU_DEVICES=2; fi
fi
tessera="$tsr_root/build/tools/tessera"
"$tessera" devices
echo
"$tessera" run --preset tinyllama --prompt-tokens 64 --gen 32 --verify "$@"
