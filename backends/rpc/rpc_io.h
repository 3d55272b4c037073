/* backends/rpc/rpc_io.h — the byte transport under the RPC protocol: a
 * connection (rpc_io) that sends and receives bytes with timeouts, a
 * buffered reader over it, and the NNG stream implementation (tcp://,
 * ipc://, tls+tcp://) with endpoint parsing and TLS setup. Not installed.
 *
 * Not the protocol (rpc_proto.h). Key design choice: NNG byte streams
 * (nng_stream), not NNG messages: the protocol does its own framing, so a
 * payload goes straight between the socket and its final place (a tensor's
 * memory, the caller's buffer) with no message copy, and one TCP connection
 * is one client, which gives per-connection isolation for free. The aios
 * have no callback, so an operation whose bytes are already there completes
 * in the calling thread.
 */
#ifndef TESSERA_RPC_IO_H
#define TESSERA_RPC_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera/rpc.h"
#include "tessera/status.h"

typedef struct rpc_iov {
    const void *p;
    size_t n;
} rpc_iov;

typedef struct rpc_io rpc_io;

/* A connection. Timeouts are milliseconds; < 0 waits forever. */
struct rpc_io {
    /* Receives 1..max bytes into dst. Returns the count, or a negative
     * tsr_status: TSR_ECLOSED (the peer closed or reset the connection),
     * TSR_ETIMEDOUT, TSR_EIO. Blocks. */
    long (*recv_some)(rpc_io *io, void *dst, size_t max, int timeout_ms);
    /* Sends every byte of iov[0..n). TSR_OK, TSR_ECLOSED, TSR_ETIMEDOUT or
     * TSR_EIO (the connection is then unusable). Blocks. */
    tsr_status (*send_all)(rpc_io *io, const rpc_iov *iov, int n, int timeout_ms);
    /* send_all in two halves: starts sending iov[0..n) (n <= 4; the memory
     * must stay as it is) and returns; send_wait finishes it, with the same
     * results as send_all. One at a time, not mixed with send_all. NULL for
     * transports without it. */
    tsr_status (*send_start)(rpc_io *io, const rpc_iov *iov, int n, int timeout_ms);
    tsr_status (*send_wait)(rpc_io *io);
    /* Makes pending and later calls fail with TSR_ECLOSED; callable from any
     * thread while another is blocked in a call. */
    void (*shutdown)(rpc_io *io);
    /* Closes and frees. */
    void (*free)(rpc_io *io);
    char err[160]; /* the transport's words for the last failure */
};

/* ---- the buffered reader -------------------------------------------------------------------- */

typedef struct rpc_reader {
    rpc_io *io;
    uint8_t *buf;
    size_t cap, pos, end; /* buffered bytes are buf[pos..end) */
} rpc_reader;

/* A reader with a cap-byte buffer; false when out of memory. */
bool tsr__rpc_reader_init(rpc_reader *r, rpc_io *io, size_t cap);
void tsr__rpc_reader_free(rpc_reader *r);
/* Exactly n bytes into dst: buffered bytes first, then large remainders
 * straight from the connection into dst (no copy through the buffer). */
tsr_status tsr__rpc_read(rpc_reader *r, void *dst, size_t n, int timeout_ms);
/* Reads and drops n bytes. */
tsr_status tsr__rpc_skip(rpc_reader *r, uint64_t n, int timeout_ms);

/* ---- NNG streams ---------------------------------------------------------------------------- */

/* Writes the NNG URL of an endpoint into url: "host:port" means
 * tcp://host:port; tcp://, ipc:// and tls+tcp:// pass through. TSR_EINVAL
 * names what is wrong (empty, unknown scheme, too long). */
tsr_status tsr__rpc_endpoint_url(const char *endpoint, char *url, size_t size);

/* Connects to an endpoint within timeout_ms (TLS settings from opt for
 * tls+tcp://; TCP_NODELAY on). TSR_EDEVICE / TSR_ETIMEDOUT name the endpoint. */
tsr_status tsr__rpc_dial(const char *url, const tsr_rpc_options *opt, int timeout_ms, rpc_io **out);

typedef struct rpc_listener rpc_listener;

/* TLS settings of a listener: certificate and key (PEM files), and a CA
 * whose certificates clients must present (NULL: no client certificates). */
typedef struct rpc_tls_server {
    const char *cert_file, *key_file, *ca_file;
} rpc_tls_server;

/* Listens on url (tls may be NULL for tcp:// and ipc://). */
tsr_status tsr__rpc_listen(const char *url, const rpc_tls_server *tls, rpc_listener **out);
/* The TCP port actually bound (for port 0), or 0 for ipc://. */
int tsr__rpc_listener_port(rpc_listener *l);
/* Waits for the next connection. TSR_ECLOSED once the listener is closed. */
tsr_status tsr__rpc_accept(rpc_listener *l, rpc_io **out);
/* Makes a pending accept return TSR_ECLOSED (callable from any thread). */
void tsr__rpc_listener_close(rpc_listener *l);
void tsr__rpc_listener_free(rpc_listener *l);

#endif /* TESSERA_RPC_IO_H */
