#!/usr/bin/env bash
# scripts/netns_bench.sh — tensor vs layer split across real network hops:
# two tessera-rpc-servers, each in its own network namespace joined to this
# (root) namespace by a veth pair, with added round-trip latency from tc
# netem; `tessera run` in the root namespace drives a generated model over
# both servers' devices (rpc:0,rpc:1) with --split-mode tensor and then
# --split-mode layer, once per latency. Prints a table (latency | tensor
# decode tok/s | layer decode tok/s | ratio) and writes it to
# bench/results/netns.md, with one JSON line per latency in netns.jsonl.
#
# Latency is *added round-trip time* per client<->server link: netem delays
# each direction by half of it (on the root-side and the namespace-side veth
# ends), so "1 ms" means 0.5 ms each way on top of the veth's own few µs.
# The servers never talk to each other (copies between them go through the
# client), so every hop is client<->server.
#
# What it is not: a WAN emulator (no loss, jitter or bandwidth cap) nor a
# multi-machine benchmark — all three processes share this host's cores
# (the servers get 1 thread each). It needs root and a kernel with network
# namespaces; it exits 0 with "skipped: ..." where they are missing, and
# without sch_netem it runs the 0 ms row alone and marks the others skipped.
# Everything it makes (namespaces, veths, a token file, the servers) is
# removed on exit, Ctrl-C included. Addresses come from the benchmark range
# 198.18.0.0/15 (RFC 2544), on /30 links with no default route, so nothing
# outside what the script creates can reach the servers.
set -euo pipefail
source "$(dirname "$0")/common.sh"

usage() {
    cat <<'EOF'
usage: scripts/netns_bench.sh [options]

Runs two tessera-rpc-servers in their own network namespaces (veth links,
tc netem delay) and compares tensor and layer split decode speed over them
at several added round-trip latencies.

  --preset NAME         model shape (default tinyllama: TinyLlama-1.1B, F16)
  --wtype TYPE          weight type (default f16)
  --prompt-tokens N     prompt length (default 32)
  --gen N               decode steps (default 16)
  --rtt LIST            added round-trip latencies in ms (default 0,0.2,1)
  --reps N              runs per cell; the median decode tok/s is reported (default 1)
  --bin DIR             use tessera and tessera-rpc-server from DIR (skips
                        installing the build packages and building)
  --out DIR             results directory (default bench/results)
  -h, --help            this text

Needs root. Exits 0 with "skipped: ..." when network namespaces are not
available; without sch_netem only the 0 ms row runs.
EOF
}

preset=tinyllama wtype=f16 prompt=32 gen=16 rtts=0,0.2,1 reps=1 bin="" out="$tsr_root/bench/results"
while [ $# -gt 0 ]; do
    case "$1" in
        --preset) preset="$2"; shift 2 ;;
        --wtype) wtype="$2"; shift 2 ;;
        --prompt-tokens) prompt="$2"; shift 2 ;;
        --gen) gen="$2"; shift 2 ;;
        --rtt) rtts="$2"; shift 2 ;;
        --reps) reps="$2"; shift 2 ;;
        --bin) bin="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "netns_bench: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done

skip() { echo "netns_bench: skipped: $*"; exit 0; }

[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces, veth pairs and tc qdiscs)"

if [ -z "$bin" ]; then
    "$tsr_root/scripts/deps.sh" "${TSR_PACKAGES[@]}" iproute2 iputils-ping
    tsr_build "$tsr_root/build" -DCMAKE_BUILD_TYPE=Release --target tessera_cli
    tsr_build "$tsr_root/build" -DCMAKE_BUILD_TYPE=Release --target tessera_rpc_server
    bin="$tsr_root/build/tools"
else
    "$tsr_root/scripts/deps.sh" iproute2 iputils-ping
fi
tessera="$bin/tessera"
server="$bin/tessera-rpc-server"
for exe in "$tessera" "$server"; do
    [ -x "$exe" ] || { echo "netns_bench: $exe not found (build it, or pass --bin DIR)" >&2; exit 1; }
done
if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
    skip "ip and tc (iproute2) are not installed"
fi
if ip -4 -o addr show | grep -q ' inet 198\.1[89]\.'; then
    skip "198.18.0.0/15 is already in use on this host; this script will not share it"
fi

# --- everything below is undone by cleanup ---------------------------------
id="$$"
ns=("tsr-nb$id-a" "tsr-nb$id-b")       # the servers' namespaces
host_if=("tnb${id}a0" "tnb${id}b0")    # root-namespace veth ends (<= 15 chars)
peer_if=("tnb${id}a1" "tnb${id}b1")    # namespace veth ends
host_ip=(198.18.0.1 198.18.0.5)        # two /30 links
peer_ip=(198.18.0.2 198.18.0.6)
pids=()
tmp=""

cleanup() {
    local rc=$? p i
    trap - EXIT INT TERM
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    for i in 0 1; do
        ip link del "${host_if[$i]}" 2>/dev/null || true   # takes its peer with it
        ip netns del "${ns[$i]}" 2>/dev/null || true
    done
    [ -n "$tmp" ] && rm -rf "$tmp"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

tmp="$(mktemp -d /tmp/tsr-netns.XXXXXX)"
ip netns add "${ns[0]}" 2>"$tmp/err" ||
    skip "cannot create a network namespace ($(head -1 "$tmp/err"))"
ip netns add "${ns[1]}"
for i in 0 1; do
    ip link add "${host_if[$i]}" type veth peer name "${peer_if[$i]}" netns "${ns[$i]}"
    ip addr add "${host_ip[$i]}/30" dev "${host_if[$i]}"
    ip link set "${host_if[$i]}" up
    ip -n "${ns[$i]}" link set lo up
    ip -n "${ns[$i]}" addr add "${peer_ip[$i]}/30" dev "${peer_if[$i]}"
    ip -n "${ns[$i]}" link set "${peer_if[$i]}" up
done

netem=1 netem_why=""
if ! tc qdisc add dev "${host_if[0]}" root netem delay 1ms 2>"$tmp/err"; then
    netem=0
    netem_why="tc netem is not available ($(head -1 "$tmp/err" | tr -cd '[:alnum:] .,:;()_-'); the kernel lacks sch_netem)"
    echo "netns_bench: $netem_why: only the 0 ms row runs"
else
    tc qdisc del dev "${host_if[0]}" root
fi

# A token: the servers listen beyond loopback, so clients must prove they hold it.
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/token"
chmod 600 "$tmp/token"
export TSR_RPC_TOKEN_FILE="$tmp/token"

urls=()
for i in 0 1; do
    ip netns exec "${ns[$i]}" env TSR_CPU_DEVICES=1 "$server" \
        --listen "tcp://${peer_ip[$i]}:0" --device cpu:0 --threads 1 --token-file "$tmp/token" \
        >"$tmp/server$i.out" 2>&1 &
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
        echo "netns_bench: server $i in ${ns[$i]} did not start:" >&2
        cat "$tmp/server$i.out" >&2
        exit 1
    fi
    urls+=("$url")
done
echo "netns_bench: servers ${urls[0]} (${ns[0]}), ${urls[1]} (${ns[1]}); $preset $wtype," \
     "$prompt prompt tokens, $gen decode steps, $reps run(s) per cell"

# set_rtt MS: netem delay of MS/2 on both ends of both links (none for 0).
set_rtt() {
    local half i
    half="$(awk -v r="$1" 'BEGIN { printf "%.0f", r * 500 }')"   # µs each way
    for i in 0 1; do
        tc qdisc del dev "${host_if[$i]}" root 2>/dev/null || true
        ip netns exec "${ns[$i]}" tc qdisc del dev "${peer_if[$i]}" root 2>/dev/null || true
        if [ "$half" -gt 0 ]; then
            tc qdisc add dev "${host_if[$i]}" root netem delay "${half}us"
            ip netns exec "${ns[$i]}" tc qdisc add dev "${peer_if[$i]}" root netem delay "${half}us"
        fi
    done
}

# ping_rtt: the median ping round trip to server 0 in ms, or "null".
ping_rtt() {
    command -v ping >/dev/null || { echo null; return; }
    ping -n -c 21 -i 0.01 "${peer_ip[0]}" 2>/dev/null |
        sed -n 's/.*time=\([0-9.]*\) ms.*/\1/p' | sort -g |
        awk '{ v[NR] = $1 } END { if (NR) printf "%.3f", v[int((NR + 1) / 2)]; else print "null" }'
}

# json_field KEY: a number or string field of the one-line JSON on stdin.
json_field() {
    sed -n "s/.*\"$1\": *\"\{0,1\}\([^\",}]*\).*/\1/p"
}

# run_mode MODE: runs tessera $reps times; prints "decode_tok_s prefill_tok_s
# allreduce_per_token tokens" of the run with the median decode speed.
run_mode() {
    local r j
    : >"$tmp/runs"
    for r in $(seq "$reps"); do
        if ! "$tessera" run --preset "$preset" --wtype "$wtype" --rpc "${urls[0]},${urls[1]}" \
                --devices rpc:0,rpc:1 --split-mode "$1" --prompt-tokens "$prompt" --gen "$gen" \
                --json --quiet >"$tmp/run.json" 2>"$tmp/run.err"; then
            echo "netns_bench: tessera run --split-mode $1 failed (run $r):" >&2
            cat "$tmp/run.err" >&2
            return 1
        fi
        j="$(cat "$tmp/run.json")"
        printf '%s %s %s %s\n' "$(json_field decode_tok_s <<<"$j")" \
            "$(json_field prefill_tok_s <<<"$j")" "$(json_field allreduce_per_token <<<"$j")" \
            "$(sed -n 's/.*"tokens": *\[\([^]]*\)\].*/\1/p' <<<"$j" | tr -d ' ')" >>"$tmp/runs"
    done
    sort -g "$tmp/runs" | sed -n "$(( (reps + 1) / 2 ))p"
}

mkdir -p "$out"
md="$out/netns.md" jsonl="$out/netns.jsonl"
{
    echo "# netns_bench: tensor vs layer split over two RPC servers in network namespaces"
    echo
    echo "$preset $wtype, $prompt prompt tokens, $gen decode steps, 1 CPU device and 1 thread per"
    echo "server, veth links, added latency = round trip (netem, half each way); median of $reps run(s)."
    echo
    echo "| added RTT | ping RTT | tensor decode tok/s | layer decode tok/s | tensor / layer | tensor prefill tok/s | layer prefill tok/s |"
    echo "|---|---|---|---|---|---|---|"
} >"$md"
: >"$jsonl"

printf '\n%-10s %-9s %20s %19s %7s\n' "added RTT" "ping RTT" "tensor decode tok/s" "layer decode tok/s" "ratio"
IFS=, read -r -a rtt_list <<<"$rtts"
for rtt in "${rtt_list[@]}"; do
    if [ "$netem" -eq 0 ] && awk -v r="$rtt" 'BEGIN { exit !(r > 0) }'; then
        printf '%-10s skipped: %s\n' "$rtt ms" "$netem_why"
        echo "| $rtt ms | skipped: $netem_why | | | | | |" >>"$md"
        printf '{"bench":"netns","preset":"%s","wtype":"%s","added_rtt_ms":%s,"skipped":"%s"}\n' \
            "$preset" "$wtype" "$rtt" "$netem_why" >>"$jsonl"
        continue
    fi
    set_rtt "$rtt"
    prtt="$(ping_rtt)"
    res="$(run_mode tensor)"
    read -r t_dec t_pre t_ar t_tok <<<"$res"
    res="$(run_mode layer)"
    read -r l_dec l_pre l_ar l_tok <<<"$res"
    ratio="$(awk -v t="$t_dec" -v l="$l_dec" 'BEGIN { printf "%.2f", t / l }')"
    same=false
    [ "$t_tok" = "$l_tok" ] && same=true
    shown="n/a"
    [ "$prtt" = null ] || shown="$prtt ms"
    printf '%-10s %-9s %20s %19s %6sx\n' "$rtt ms" "$shown" "$t_dec" "$l_dec" "$ratio"
    echo "| $rtt ms | $shown | $t_dec | $l_dec | ${ratio}x | $t_pre | $l_pre |" >>"$md"
    printf '{"bench":"netns","preset":"%s","wtype":"%s","prompt_tokens":%s,"gen":%s,"reps":%s,"added_rtt_ms":%s,"ping_rtt_ms":%s,"tensor_decode_tok_s":%s,"layer_decode_tok_s":%s,"ratio":%s,"tensor_prefill_tok_s":%s,"layer_prefill_tok_s":%s,"tensor_allreduce_per_token":%s,"layer_allreduce_per_token":%s,"tokens_equal":%s}\n' \
        "$preset" "$wtype" "$prompt" "$gen" "$reps" "$rtt" "$prtt" "$t_dec" "$l_dec" "$ratio" \
        "$t_pre" "$l_pre" "$t_ar" "$l_ar" "$same" >>"$jsonl"
done
echo
echo "netns_bench: $md, $jsonl"
