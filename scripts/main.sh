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
# --preset tiny, --gen 64, --devices cpu:0,cpu:1,cpu:2); they apply to this
# first run only.
#
# Then, on a machine without a second accelerator (no GPU, or one), it shows
# multi-node tensor parallelism on one host: two tessera-rpc-server
# processes on loopback (tcp://127.0.0.1, a free port each; each serves one
# CPU device, cpu:0, with 1 thread) and the same model tensor-split over them
# (rpc:0,rpc:1), verified the same way. The servers are stopped on exit.
# That part is a demonstration of the RPC path, not a benchmark: both
# "nodes" share this host's cores. TSR_MAIN_NO_RPC=1 skips it. The
# benchmarks are scripts/bench.sh and scripts/netns_bench.sh.
set -euo pipefail
source "$(dirname "$0")/common.sh"

"$tsr_root/scripts/deps.sh" "${TSR_PACKAGES[@]}"
tsr_build "$tsr_root/build" -DCMAKE_BUILD_TYPE=Release --target tessera_cli
if grep -q '^TSR_RPC:BOOL=ON' "$tsr_root/build/CMakeCache.txt"; then
    tsr_build "$tsr_root/build" -DCMAKE_BUILD_TYPE=Release --target tessera_rpc_server
fi

if [ -z "${TSR_CPU_DEVICES:-}" ]; then
    if [ "$(nproc)" -ge 2 ]; then export TSR_CPU_DEVICES=2; fi
fi
tessera="$tsr_root/build/tools/tessera"
"$tessera" devices
echo
"$tessera" run --preset tinyllama --prompt-tokens 64 --gen 32 --verify "$@"

# --- two RPC servers on loopback: multi-node tensor parallelism on one host ---
server="$tsr_root/build/tools/tessera-rpc-server"
n_gpu="$("$tessera" devices 2>/dev/null | awk 'NR > 1 && ($2 == "gpu" || $2 == "igpu")' | wc -l)"
if [ "${TSR_MAIN_NO_RPC:-0}" = 1 ] || [ "$n_gpu" -ge 2 ] || [ ! -x "$server" ]; then
    exit 0
fi
tmp="$(mktemp -d /tmp/tsr-main.XXXXXX)"
pids=()
stop_servers() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap stop_servers EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
urls=()
for i in 0 1; do
    TSR_CPU_DEVICES=1 "$server" --listen tcp://127.0.0.1:0 --device cpu:0 --threads 1 >"$tmp/server$i.out" 2>&1 &
    pids+=("$!")
done
for i in 0 1; do
    url=""
    for _ in $(seq 100); do
        url="$(head -1 "$tmp/server$i.out" | grep -o 'tcp://[0-9.]*:[0-9]*' || true)"
        [ -n "$url" ] && break
        kill -0 "${pids[$i]}" 2>/dev/null || break
        sleep 0.1
    done
    if [ -z "$url" ]; then
        echo "main: tessera-rpc-server $i did not start:" >&2
        cat "$tmp/server$i.out" >&2
        exit 1
    fi
    urls+=("$url")
done
echo
echo "== two tessera-rpc-servers on this host (${urls[0]}, ${urls[1]}), tensor-split over rpc:0,rpc:1 =="
"$tessera" run --preset tinyllama --rpc "${urls[0]},${urls[1]}" --devices rpc:0,rpc:1 \
    --split-mode tensor --prompt-tokens 64 --gen 32 --verify
