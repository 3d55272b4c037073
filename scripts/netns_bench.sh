#!/usr/bin/env bash
# scripts/netns_bench.sh — tensor vs layer split across real network hops:
# two tessera-rpc-servers, each in its own network namespace, and the client
# (`tessera run`, in this root namespace) on one L2 segment — a Linux bridge
# in a third, "switch" namespace, with a veth pair to each endpoint — so
# every endpoint reaches every other directly, as on a LAN: the servers link
# to each other (protocol v2: server-to-server copies and the all-reduce run
# among the servers). `tessera run` drives a generated model over both
# servers' devices (rpc:0,rpc:1) with --split-mode tensor and then
# --split-mode layer, once per added latency. Prints a table and writes it
# to bench/results/netns.md, with one JSON line per row in netns.jsonl.
#
# Latency is *added round-trip time* between any two endpoints (client to
# server and server to server alike), from one of:
#   netem  tc netem on each endpoint's own veth end delays what it sends by
#          half the RTT, so every path gets the full RTT;
#   relay  where the kernel has no sch_netem: scripts/delay_relay.py, a
#          user-space TCP relay per server in the root namespace (on the
#          segment, at 198.18.0.1), delaying each chunk by half the RTT in
#          each direction. The client is given the relays' endpoints, and the
#          servers dial the endpoints the client names, so all tessera
#          traffic — server to server included — crosses a relay. A "relay,
#          +0 ms" row shows the relay's own cost.
# Each row's RTT is measured: ping for netem and the direct row, a TCP echo
# through a relay (delay_relay.py probe) for relay rows. Before each row's
# timed runs, a short tensor-split run with TSR_LOG=debug checks that the
# servers joined a mesh (no "server-to-server links unavailable").
#
# What it is not: a WAN emulator (no loss, jitter or bandwidth cap) nor a
# multi-machine benchmark — all processes (client, servers, relays) share
# this host's cores (the servers get 1 thread each). It needs root and a
# kernel with network namespaces and veth/bridge devices; it exits 0 with
# "skipped: ..." where they are missing. It changes no sysctl of the root
# namespace (the bridge lives in its own namespace; nothing is routed).
# Everything it makes (namespaces, veths, the bridge, a token file, the
# servers, relays and echo server) is removed on exit, Ctrl-C included.
# Addresses are 198.18.0.0/24, from the benchmark range 198.18.0.0/15
# (RFC 2544), with no default route, so nothing outside what the script
# creates can reach the servers.
set -euo pipefail
source "$(dirname "$0")/common.sh"

usage() {
    cat <<'EOF'
usage: scripts/netns_bench.sh [options]

Runs two tessera-rpc-servers in their own network namespaces on one bridged
segment with the client, adds round-trip latency (tc netem, or a user-space
delay relay where the kernel has no sch_netem) and compares tensor and layer
split decode speed over them.

  --preset NAME         model shape (default tinyllama: TinyLlama-1.1B, F16)
  --wtype TYPE          weight type (default f16)
  --prompt-tokens N     prompt length (default 32)
  --gen N               decode steps (default 16)
  --rtt LIST            added round-trip latencies in ms (default 0,0.2,1)
  --method M            auto (netem if the kernel has it, else relay), netem
                        or relay (default auto)
  --reps N              runs per cell; the median decode tok/s is reported (default 1)
  --bin DIR             use tessera and tessera-rpc-server from DIR (skips
                        installing the build packages and building)
  --out DIR             results directory (default bench/results)
  -h, --help            this text

Rows: 0 ms is measured directly (method "none"); with the relay, a
"relay, +0 ms" row follows it (the relay's own cost). Needs root (and
python3 for the relay). Exits 0 with "skipped: ..." when network namespaces
are not available.
EOF
}

preset=tinyllama wtype=f16 prompt=32 gen=16 rtts=0,0.2,1 reps=1 bin="" method=auto
out="$tsr_root/bench/results"
while [ $# -gt 0 ]; do
    case "$1" in
        --preset) preset="$2"; shift 2 ;;
        --wtype) wtype="$2"; shift 2 ;;
        --prompt-tokens) prompt="$2"; shift 2 ;;
        --gen) gen="$2"; shift 2 ;;
        --rtt) rtts="$2"; shift 2 ;;
        --method) method="$2"; shift 2 ;;
        --reps) reps="$2"; shift 2 ;;
        --bin) bin="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "netns_bench: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
case "$method" in
    auto|netem|relay) ;;
    *) echo "netns_bench: --method must be auto, netem or relay" >&2; exit 2 ;;
esac

skip() { echo "netns_bench: skipped: $*"; exit 0; }

[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces, veth pairs, a bridge and tc qdiscs)"

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
relay_py="$tsr_root/scripts/delay_relay.py"
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
sw="tsr-nb$id-sw"                      # the switch: a bridge and one port per endpoint
ns=("tsr-nb$id-a" "tsr-nb$id-b")       # the servers' namespaces
client_if="tnb${id}c"                  # the client's (root namespace) veth end, <= 15 chars
client_ip=198.18.0.1
server_ip=(198.18.0.2 198.18.0.3)
pids=()          # servers, echo server
relay_pids=()    # this row's relays
tmp=""

stop_pids() {   # stop_pids PID...: SIGTERM, then reap
    local p
    for p in "$@"; do kill "$p" 2>/dev/null || true; done
    for p in "$@"; do wait "$p" 2>/dev/null || true; done
}

cleanup() {
    local rc=$? n
    trap - EXIT INT TERM
    stop_pids "${relay_pids[@]}" "${pids[@]}"
    ip link del "$client_if" 2>/dev/null || true        # takes its peer with it
    for n in "${ns[@]}" "$sw"; do
        ip netns del "$n" 2>/dev/null || true           # and their veths and bridge
    done
    [ -n "$tmp" ] && rm -rf "$tmp"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

tmp="$(mktemp -d /tmp/tsr-netns.XXXXXX)"
ip netns add "$sw" 2>"$tmp/err" ||
    skip "cannot create a network namespace ($(head -1 "$tmp/err"))"
ip netns add "${ns[0]}"
ip netns add "${ns[1]}"
ip -n "$sw" link set lo up
ip -n "$sw" link add br0 type bridge 2>"$tmp/err" ||
    skip "cannot create a bridge ($(head -1 "$tmp/err"))"
ip -n "$sw" link set br0 up
# The client: its end in the root namespace, the other a bridge port.
ip link add "$client_if" type veth peer name pc netns "$sw" 2>"$tmp/err" ||
    skip "cannot create a veth pair ($(head -1 "$tmp/err"))"
ip addr add "$client_ip/24" dev "$client_if"
ip link set "$client_if" up
ip -n "$sw" link set pc master br0
ip -n "$sw" link set pc up
# The servers: eth0 in their namespace, the other end a bridge port.
for i in 0 1; do
    port="p$i"
    ip -n "$sw" link add "$port" type veth peer name eth0 netns "${ns[$i]}"
    ip -n "$sw" link set "$port" master br0
    ip -n "$sw" link set "$port" up
    ip -n "${ns[$i]}" link set lo up
    ip -n "${ns[$i]}" addr add "${server_ip[$i]}/24" dev eth0
    ip -n "${ns[$i]}" link set eth0 up
done
# ns_do I CMD...: CMD in server I's namespace (I = root: here). Not for
# background processes: `ns_do ... &` would leave $! the subshell's.
ns_do() {
    local i="$1"
    shift
    if [ "$i" = root ]; then "$@"; else ip netns exec "${ns[$i]}" "$@"; fi
}
# Wait for the segment: every endpoint answers every other.
if command -v ping >/dev/null; then
    for pair in "root 0" "root 1" "0 1"; do
        read -r from to <<<"$pair"
        ok=0
        for _ in $(seq 50); do
            if ns_do "$from" ping -n -c 1 -W 1 "${server_ip[$to]}" >/dev/null 2>&1; then ok=1; break; fi
            sleep 0.1
        done
        if [ "$ok" -eq 0 ]; then
            echo "netns_bench: ${server_ip[$to]} does not answer from ${from/root/the client}" >&2
            exit 1
        fi
    done
fi

# The latency method.
netem_why=""
if [ "$method" != relay ]; then
    if tc qdisc add dev "$client_if" root netem delay 1ms 2>"$tmp/err"; then
        tc qdisc del dev "$client_if" root
        method=netem
    else
        netem_why="tc netem is not available ($(head -1 "$tmp/err" | tr -cd '[:alnum:] .,:;()_-'); the kernel lacks sch_netem)"
        if [ "$method" = netem ]; then
            echo "netns_bench: $netem_why" >&2
            exit 1
        fi
        echo "netns_bench: $netem_why: the delay relay adds the latency"
        method=relay
    fi
fi
relay_why=""
if [ "$method" = relay ] && ! command -v python3 >/dev/null; then
    relay_why="neither tc netem nor python3 (for the delay relay) is available"
    [ -n "$netem_why" ] || relay_why="python3 (for the delay relay) is not installed"
    echo "netns_bench: $relay_why: only the 0 ms row runs"
fi

# A token: the servers listen beyond loopback, so clients (and the servers,
# when they dial each other) must prove they hold it.
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/token"
chmod 600 "$tmp/token"
export TSR_RPC_TOKEN_FILE="$tmp/token"

# first_line FILE PID PATTERN: waits for FILE's first line to match PATTERN
# while PID lives; prints the match, or nothing.
first_line() {
    local f="$1" pid="$2" pat="$3" v="" _
    for _ in $(seq 100); do
        v="$(head -1 "$f" 2>/dev/null | grep -o "$pat" || true)"
        [ -n "$v" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    echo "$v"
}

urls=()   # the servers' own endpoints
for i in 0 1; do
    # (ip netns exec execs the command: $! is the server itself)
    ip netns exec "${ns[$i]}" env TSR_CPU_DEVICES=1 "$server" \
        --listen "tcp://${server_ip[$i]}:0" --device cpu:0 --threads 1 --token-file "$tmp/token" \
        >"$tmp/server$i.out" 2>&1 &
    pids+=("$!")
done
for i in 0 1; do
    url="$(first_line "$tmp/server$i.out" "${pids[$i]}" 'tcp://[0-9.]*:[0-9]*')"
    if [ -z "$url" ]; then
        echo "netns_bench: server $i in ${ns[$i]} did not start:" >&2
        cat "$tmp/server$i.out" >&2
        exit 1
    fi
    urls+=("$url")
done
echo_ep=""
if [ "$method" = relay ] && [ -z "$relay_why" ]; then
    # The far end of the RTT probe, beside server 0.
    ip netns exec "${ns[0]}" python3 "$relay_py" echo --listen "${server_ip[0]}:0" >"$tmp/echo.out" 2>&1 &
    pids+=("$!")
    echo_ep="$(first_line "$tmp/echo.out" "$!" '[0-9.]*:[0-9]*')"
    [ -n "$echo_ep" ] || { echo "netns_bench: the echo server did not start:" >&2; cat "$tmp/echo.out" >&2; exit 1; }
fi
echo "netns_bench: servers ${urls[0]} (${ns[0]}), ${urls[1]} (${ns[1]}), client $client_ip," \
     "bridge in $sw; $preset $wtype, $prompt prompt tokens, $gen decode steps, $reps run(s) per cell"

# set_netem MS: each endpoint delays what it sends by MS/2 (none for 0).
set_netem() {
    local half i
    half="$(awk -v r="$1" 'BEGIN { printf "%.0f", r * 500 }')"   # µs each way
    for i in root 0 1; do
        local dev=eth0
        [ "$i" = root ] && dev="$client_if"
        ns_do "$i" tc qdisc del dev "$dev" root 2>/dev/null || true
        if [ "$half" -gt 0 ]; then
            ns_do "$i" tc qdisc add dev "$dev" root netem delay "${half}us" limit 100000
        fi
    done
}

# start_relays MS: one relay per server at $client_ip (and the probe's, in
# server 0's relay process); sets row_urls and probe_ep.
start_relays() {
    local i f maps
    row_urls=()
    for i in 0 1; do
        f="$tmp/relay$i.out"
        maps=(--map "$client_ip:0=${urls[$i]#tcp://}")
        [ "$i" -eq 0 ] && maps+=(--map "$client_ip:0=$echo_ep")
        python3 "$relay_py" relay --rtt-ms "$1" "${maps[@]}" >"$f" 2>&1 &
        relay_pids+=("$!")
        local ep
        ep="$(first_line "$f" "$!" '[0-9.]*:[0-9]*')"
        [ -n "$ep" ] || { echo "netns_bench: the delay relay did not start:" >&2; cat "$f" >&2; return 1; }
        row_urls+=("tcp://$ep")
    done
    for _ in $(seq 50); do
        [ "$(wc -l <"$tmp/relay0.out")" -ge 2 ] && break
        sleep 0.1
    done
    probe_ep="$(sed -n 2p "$tmp/relay0.out")"
}

# rtt_ms FROM METHOD: the median round trip from FROM (root or 1) to server 0
# in ms, or "null": ping, or a TCP echo through the relay.
rtt_ms() {
    local v
    if [ "$2" = relay ]; then
        v="$(ns_do "$1" python3 "$relay_py" probe --target "$probe_ep" 2>/dev/null || true)"
        echo "${v:-null}"
        return
    fi
    command -v ping >/dev/null || { echo null; return; }
    ns_do "$1" ping -n -c 21 -i 0.01 "${server_ip[0]}" 2>/dev/null |
        sed -n 's/.*time=\([0-9.]*\) ms.*/\1/p' | sort -g |
        awk '{ v[NR] = $1 } END { if (NR) printf "%.3f", v[int((NR + 1) / 2)]; else print "null" }'
}

# json_field KEY: a number or string field of the one-line JSON on stdin.
json_field() {
    sed -n "s/.*\"$1\": *\"\{0,1\}\([^\",}]*\).*/\1/p"
}

# run_tessera MODE ARGS...: one `tessera run` over this row's endpoints.
run_tessera() {
    local mode="$1"
    shift
    timeout 600 "$tessera" run --preset "$preset" --wtype "$wtype" --rpc "${row_urls[0]},${row_urls[1]}" \
        --devices rpc:0,rpc:1 --split-mode "$mode" "$@"
}

# check_mesh: a short tensor-split run with the debug log; prints yes (the
# servers joined a mesh), no (they did not: the log's reason goes to
# $tmp/mesh.why) or "run failed".
check_mesh() {
    if ! TSR_LOG=debug run_tessera tensor --prompt-tokens 4 --gen 1 --quiet \
            >"$tmp/mesh.out" 2>"$tmp/mesh.err"; then
        tail -5 "$tmp/mesh.err" >"$tmp/mesh.why"
        echo "run failed"
    elif grep -q 'server-to-server links unavailable' "$tmp/mesh.err" ||
            ! grep -q 'servers joined in a mesh' "$tmp/mesh.err"; then
        { grep 'server-to-server\|mesh\|peer' "$tmp/mesh.err" || echo "(no mesh message)"; } |
            head -3 >"$tmp/mesh.why"
        echo no
    else
        echo yes
    fi
}

# run_mode MODE: runs tessera $reps times; prints "decode_tok_s prefill_tok_s
# allreduce_path tokens" of the run with the median decode speed.
run_mode() {
    local r j
    : >"$tmp/runs"
    for r in $(seq "$reps"); do
        if ! run_tessera "$1" --prompt-tokens "$prompt" --gen "$gen" --json --quiet \
                >"$tmp/run.json" 2>"$tmp/run.err"; then
            echo "netns_bench: tessera run --split-mode $1 failed (run $r):" >&2
            cat "$tmp/run.err" >&2
            return 1
        fi
        j="$(cat "$tmp/run.json")"
        printf '%s %s %s %s\n' "$(json_field decode_tok_s <<<"$j")" \
            "$(json_field prefill_tok_s <<<"$j")" "$(json_field allreduce_path <<<"$j")" \
            "$(sed -n 's/.*"tokens": *\[\([^]]*\)\].*/\1/p' <<<"$j" | tr -d ' ')" >>"$tmp/runs"
    done
    sort -g "$tmp/runs" | sed -n "$(( (reps + 1) / 2 ))p"
}

# The rows: "METHOD RTT". 0 ms runs direct; the relay adds its own +0 ms row.
rows=()
IFS=, read -r -a rtt_list <<<"$rtts"
for rtt in "${rtt_list[@]}"; do
    if awk -v r="$rtt" 'BEGIN { exit !(r + 0 == 0) }'; then rows+=("none $rtt"); fi
done
if [ "$method" = relay ]; then rows+=("relay 0"); fi
for rtt in "${rtt_list[@]}"; do
    if awk -v r="$rtt" 'BEGIN { exit !(r + 0 > 0) }'; then rows+=("$method $rtt"); fi
done

mkdir -p "$out"
md="$out/netns.md" jsonl="$out/netns.jsonl"
{
    echo "# netns_bench: tensor vs layer split over two RPC servers in network namespaces"
    echo
    echo "$preset $wtype, $prompt prompt tokens, $gen decode steps, 1 CPU device and 1 thread per"
    echo "server; client and servers on one bridged segment (servers link to each other); added"
    echo "latency = round trip between any two endpoints (netem: half on each sender's veth;"
    echo "relay: a user-space TCP relay per server, half each way); RTT measured by ping"
    echo "(none, netem) or a TCP echo through the relay; median of $reps run(s)."
    echo
    echo "| added RTT | method | RTT client–server | RTT server–server | tensor decode tok/s | layer decode tok/s | tensor / layer | tensor prefill tok/s | layer prefill tok/s | servers linked |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
} >"$md"
: >"$jsonl"

warnings=()
printf '\n%-10s %-6s %-11s %-11s %20s %19s %7s %7s\n' "added RTT" method "RTT c-s" "RTT s-s" \
    "tensor decode tok/s" "layer decode tok/s" ratio linked
for row in "${rows[@]}"; do
    read -r how rtt <<<"$row"
    if [ "$how" = relay ] && [ -n "$relay_why" ]; then
        printf '%-10s %-6s skipped: %s\n' "+$rtt ms" "$how" "$relay_why"
        echo "| +$rtt ms | $how | skipped: $relay_why | | | | | | | |" >>"$md"
        printf '{"bench":"netns","preset":"%s","wtype":"%s","added_rtt_ms":%s,"method":"%s","skipped":"%s"}\n' \
            "$preset" "$wtype" "$rtt" "$how" "$relay_why" >>"$jsonl"
        continue
    fi
    row_urls=("${urls[@]}")
    case "$how" in
        netem) set_netem "$rtt" ;;
        relay) start_relays "$rtt" ;;
    esac
    rtt_cs="$(rtt_ms root "$how")"
    rtt_ss="$(rtt_ms 1 "$how")"
    linked="$(check_mesh)"
    if [ "$linked" != yes ]; then
        warnings+=("+$rtt ms ($how): the servers did not link ($linked): $(tr '\n' ' ' <"$tmp/mesh.why")")
        echo "netns_bench: WARNING: ${warnings[-1]}" >&2
    fi
    res="$(run_mode tensor)"
    read -r t_dec t_pre t_path t_tok <<<"$res"
    res="$(run_mode layer)"
    read -r l_dec l_pre _ l_tok <<<"$res"
    ratio="$(awk -v t="$t_dec" -v l="$l_dec" 'BEGIN { printf "%.2f", t / l }')"
    same=false
    [ "$t_tok" = "$l_tok" ] && same=true
    show_cs="n/a" show_ss="n/a"
    [ "$rtt_cs" = null ] || show_cs="$rtt_cs ms"
    [ "$rtt_ss" = null ] || show_ss="$rtt_ss ms"
    printf '%-10s %-6s %-11s %-11s %20s %19s %6sx %7s\n' "+$rtt ms" "$how" "$show_cs" "$show_ss" \
        "$t_dec" "$l_dec" "$ratio" "$linked"
    echo "| +$rtt ms | $how | $show_cs | $show_ss | $t_dec | $l_dec | ${ratio}× | $t_pre | $l_pre | $linked |" >>"$md"
    printf '{"bench":"netns","preset":"%s","wtype":"%s","prompt_tokens":%s,"gen":%s,"reps":%s,"added_rtt_ms":%s,"method":"%s","rtt_client_server_ms":%s,"rtt_server_server_ms":%s,"servers_linked":"%s","tensor_decode_tok_s":%s,"layer_decode_tok_s":%s,"ratio":%s,"tensor_prefill_tok_s":%s,"layer_prefill_tok_s":%s,"tensor_allreduce_path":"%s","tokens_equal":%s}\n' \
        "$preset" "$wtype" "$prompt" "$gen" "$reps" "$rtt" "$how" "$rtt_cs" "$rtt_ss" "$linked" \
        "$t_dec" "$l_dec" "$ratio" "$t_pre" "$l_pre" "$t_path" "$same" >>"$jsonl"
    case "$how" in
        netem) set_netem 0 ;;
        relay) stop_pids "${relay_pids[@]}"; relay_pids=() ;;
    esac
done
if [ ${#warnings[@]} -gt 0 ]; then
    {
        echo
        for w in "${warnings[@]}"; do echo "**WARNING**: $w"; done
        echo "Copies and all-reduces then went through the client, not server to server."
    } >>"$md"
    echo
    for w in "${warnings[@]}"; do echo "netns_bench: WARNING: $w"; done
else
    echo >>"$md"
    echo "All rows: the servers linked (joined a mesh; copies and all-reduces server to server)." >>"$md"
fi
echo
echo "netns_bench: $md, $jsonl"
