/* tests/fuzz/fuzz_rpc.c — libFuzzer target for the RPC server's message
 * decoder: an input is a stream of bytes as a client could send them, fed to
 * one server session over an in-memory connection (received in chunks of a
 * size the input picks) with a CPU device behind it. Whatever the bytes, the
 * session must end (the input runs out or the framing breaks) without a
 * crash, a leak or a sanitizer report, and release everything it created.
 *
 * The first input byte is a mode: bit 0 starts the session as if HELLO had
 * happened (so mutations reach every command quickly), bits 1..7 pick the
 * receive chunk size. Built with -DTSR_FUZZ=ON by clang only; it compiles the
 * session sources itself so coverage counts the decoder. How to run it:
 * README.md, "RPC".
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rpc_server/server.h"
#include "tessera/cpu.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
    rpc_io io;
    const uint8_t *p;
    size_t n, pos, chunk;
} mem_io;

static long mem_recv(rpc_io *io, void *dst, size_t max, int timeout_ms)
{
    (void)timeout_ms;
    mem_io *m = (mem_io *)io;
    if (m->pos == m->n)
        return TSR_ECLOSED;
    size_t k = m->n - m->pos;
    if (k > max)
        k = max;
    if (k > m->chunk)
        k = m->chunk;
    memcpy(dst, m->p + m->pos, k);
    m->pos += k;
    return (long)k;
}

static tsr_status mem_send(rpc_io *io, const rpc_iov *iov, int n, int timeout_ms)
{
    (void)io;
    (void)timeout_ms;
    /* Touch every byte sent, so a reply built from freed or uninitialized
     * memory is seen by the sanitizers. */
    volatile uint8_t sum = 0;
    for (int i = 0; i < n; i++)
        for (size_t j = 0; j < iov[i].n; j++)
            sum ^= ((const uint8_t *)iov[i].p)[j];
    (void)sum;
    return TSR_OK;
}

static void mem_nop(rpc_io *io) { (void)io; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static srv_config cfg;
    static int ready;
    if (!ready) {
        cfg.devs[0] = tsr_reg_dev_get(tsr_cpu_reg(), 0);
        cfg.n_devs = 1;
        cfg.max_memory = 16u << 20;
        cfg.handshake_timeout_ms = 1000;
        cfg.io_timeout_ms = 1000;
        tsr__srv_config_probe(&cfg);
        ready = 1;
    }
    if (size < 1)
        return 0;
    const uint8_t mode = data[0];
    mem_io m = {
        .io = {.recv_some = mem_recv, .send_all = mem_send, .shutdown = mem_nop, .free = mem_nop},
        .p = data + 1,
        .n = size - 1,
        .chunk = (mode >> 1) ? (size_t)(mode >> 1) * 97 : 1u << 20};
    srv_session s;
    if (!tsr__srv_session_init(&s, &cfg, &m.io))
        abort();
    if (mode & 1) {
        s.version = 1;
        s.authed = true;
    }
    tsr__srv_session_run(&s);
    tsr__srv_session_free(&s);
    return 0;
}
