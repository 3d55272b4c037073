#!/usr/bin/env python3
"""scripts/delay_relay.py — a user-space stand-in for `tc netem delay`, used by
scripts/netns_bench.sh where the kernel has no sch_netem.

  relay --rtt-ms D --map LHOST:LPORT=THOST:TPORT [--map ...]
        listens on each LHOST:LPORT (port 0 picks a free one) and forwards every
        connection to THOST:TPORT, delaying each chunk by D/2 ms in each
        direction: a chunk read at time t is written at t + D/2, in order,
        while later chunks keep being read (reads of up to 256 KiB, up to
        64 MiB in flight per direction), so the delay adds latency without
        capping throughput. Prints each bound LHOST:PORT on its own line, in
        --map order, once all are listening.
  echo --listen HOST:PORT
        a TCP echo server for `probe`; prints the bound HOST:PORT.
  probe --target HOST:PORT [--count N]
        the median round trip of a 64-byte message over one TCP connection,
        in ms (after a few warm-up round trips).

What it is not: a WAN emulator (no loss, jitter, reordering or bandwidth
cap). Its own cost (a Python process copying every byte, sharing the host's
cores) is part of what it adds; measure it with --rtt-ms 0. It uses
asyncio with a select()-based loop, whose timers have microsecond
resolution (epoll's and poll()'s round sub-millisecond waits up to 1 ms),
and asks Linux for no timer slack (50 us per sleep by default).
SIGINT/SIGTERM stop it.
"""
import argparse
import asyncio
import ctypes
import selectors
import signal
import socket
import statistics
import sys
import time

CHUNK = 256 * 1024
QUEUE_CHUNKS = 256  # up to 64 MiB in flight per direction


def hostport(s):
    host, _, port = s.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {s!r}")
    return host, int(port)


def mapping(s):
    left, sep, right = s.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected LHOST:LPORT=THOST:TPORT, got {s!r}")
    return hostport(left), hostport(right)


def nodelay(writer):
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def pump(reader, writer, delay_s):
    """Copies reader to writer, each chunk written delay_s after it was read."""
    loop = asyncio.get_running_loop()
    q = asyncio.Queue(QUEUE_CHUNKS)

    async def read_side():
        try:
            while True:
                data = await reader.read(CHUNK)
                await q.put((loop.time() + delay_s, data))
                if not data:
                    return
        except (ConnectionError, OSError):
            await q.put((loop.time(), b""))

    async def write_side():
        try:
            while True:
                due, data = await q.get()
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not data:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            return

    rt = asyncio.ensure_future(read_side())
    try:
        await write_side()
    finally:
        rt.cancel()


async def relay(rtt_ms, maps):
    delay_s = rtt_ms / 2000.0
    servers = []

    def handler(target):
        async def on_conn(cr, cw):
            try:
                tr, tw = await asyncio.open_connection(*target)
            except OSError as e:
                print(f"delay_relay: cannot reach {target[0]}:{target[1]}: {e}", file=sys.stderr)
                cw.close()
                return
            nodelay(cw)
            nodelay(tw)
            try:
                await asyncio.gather(pump(cr, tw, delay_s), pump(tr, cw, delay_s))
            finally:
                cw.close()
                tw.close()
        return on_conn

    for (lhost, lport), target in maps:
        srv = await asyncio.start_server(handler(target), lhost, lport, reuse_address=True)
        servers.append(srv)
        print(f"{lhost}:{srv.sockets[0].getsockname()[1]}", flush=True)
    await asyncio.Event().wait()


async def echo(listen):
    async def on_conn(r, w):
        nodelay(w)
        try:
            while True:
                data = await r.read(CHUNK)
                if not data:
                    break
                w.write(data)
                await w.drain()
        except (ConnectionError, OSError):
            pass
        w.close()

    srv = await asyncio.start_server(on_conn, listen[0], listen[1], reuse_address=True)
    print(f"{listen[0]}:{srv.sockets[0].getsockname()[1]}", flush=True)
    await asyncio.Event().wait()


def probe(target, count):
    msg = b"x" * 64
    with socket.create_connection(target, timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        times = []
        for i in range(count + 5):
            t0 = time.perf_counter()
            s.sendall(msg)
            got = 0
            while got < len(msg):
                b = s.recv(len(msg) - got)
                if not b:
                    raise ConnectionError("echo server closed the connection")
                got += len(b)
            if i >= 5:
                times.append(time.perf_counter() - t0)
            time.sleep(0.002)
    print(f"{statistics.median(times) * 1e3:.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("relay")
    r.add_argument("--rtt-ms", type=float, required=True)
    r.add_argument("--map", type=mapping, action="append", required=True)
    e = sub.add_parser("echo")
    e.add_argument("--listen", type=hostport, required=True)
    p = sub.add_parser("probe")
    p.add_argument("--target", type=hostport, required=True)
    p.add_argument("--count", type=int, default=50)
    a = ap.parse_args()
    if a.cmd == "probe":
        probe(a.target, a.count)
        return
    # select() takes a timeout in microseconds; epoll and poll round up to 1 ms.
    # Linux adds up to 50 us of timer slack to each sleep: ask for 1 ns.
    try:
        ctypes.CDLL(None).prctl(29, 1, 0, 0, 0)  # PR_SET_TIMERSLACK
    except (OSError, AttributeError):
        pass
    loop = asyncio.SelectorEventLoop(selectors.SelectSelector())
    asyncio.set_event_loop(loop)
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, loop.stop)
    coro = relay(a.rtt_ms, a.map) if a.cmd == "relay" else echo(a.listen)
    task = loop.create_task(coro)
    task.add_done_callback(lambda _: loop.stop())
    try:
        loop.run_forever()
    finally:
        if task.done() and not task.cancelled() and task.exception():
            print(f"delay_relay: {task.exception()}", file=sys.stderr)
            sys.exit(1)
        task.cancel()


if __name__ == "__main__":
    main()
