/* backends/rpc/rpc_client.h — the client side of the RPC backend: a
 * connection to one server (shared by that server's devices), its framing
 * and batching, and the graph serializer. Not installed.
 *
 * Not the interface tables (rpc_backend.c). Key design choice: one
 * connection per server, in order, guarded by one mutex. Commands that need
 * no answer are appended to a batch that goes out with the next command that
 * needs one (or that must start work now, or when it grows past a bound), so
 * a thousand small writes cost one send; bulk data is sent straight from the
 * caller's memory and replies are read straight into it. A transport failure
 * or timeout kills the connection: every later call fails at once with the
 * reason, naming the endpoint and the device.
 */
#ifndef TESSERA_RPC_CLIENT_H
#define TESSERA_RPC_CLIENT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "backends/rpc/rpc_io.h"
#include "backends/rpc/rpc_proto.h"
#include "core/backend_impl.h"
#include "tessera/rpc.h"

typedef struct rpc_conn {
    char url[256];
    rpc_io *io;
    rpc_reader rd;
    pthread_mutex_t mu;
    tsr_status dead; /* TSR_OK while usable */
    char dead_msg[320];
    uint16_t version;
    uint64_t server_caps;
    uint64_t next_id;
    rpc_wr batch; /* pipelined frames not sent yet */
    int timeout_ms, compute_timeout_ms;
    int busy;       /* streams with graph work since their last synchronize */
    uint64_t epoch; /* bumped when a buffer is freed: cached graphs are then stale */
    uint64_t next_graph;
} rpc_conn;

/* The remote device info gathered at connection time. */
typedef struct rpc_dev_info {
    uint32_t index, type, caps;
    char name[RPC_NAME_MAX + 1];
    char desc[RPC_DESC_MAX + 1];
    uint64_t alignment, max_size, op_mask;
} rpc_dev_info;

/* Connects, negotiates the version, authenticates and lists the devices
 * (*infos is malloc'ed, *n entries). Messages name the endpoint. */
tsr_status tsr__rpc_conn_open(const char *url, const tsr_rpc_options *opt, rpc_conn **out,
                              rpc_dev_info **infos, uint32_t *n);

/* ---- framing (the caller holds c->mu; `who` prefixes every message) ------------------------ */

/* Fails at once when the connection is dead. */
tsr_status tsr__rpc_alive(rpc_conn *c, const char *who);
/* Sends or batches one frame: header, fixed fields, then dlen data bytes.
 * Frames that want a reply, `flush`, or a large frame send the batch (and
 * themselves) now. *id (may be NULL) receives the request id. */
tsr_status tsr__rpc_send(rpc_conn *c, const char *who, uint16_t cmd, bool want_reply, bool flush,
                         const void *fields, size_t flen, const void *data, size_t dlen,
                         uint64_t *id);
/* Reads the header of the reply to (id, cmd). An error reply's reason is
 * read and returned as the error; on success *len bytes of payload follow,
 * which the caller consumes with tsr__rpc_reply_read (all of them). */
tsr_status tsr__rpc_reply_begin(rpc_conn *c, const char *who, uint64_t id, uint16_t cmd,
                                uint64_t *len);
tsr_status tsr__rpc_reply_read(rpc_conn *c, const char *who, void *dst, size_t n);
/* Request + reply whose payload (≤ cap bytes) lands in out. */
tsr_status tsr__rpc_call(rpc_conn *c, const char *who, uint16_t cmd, const void *fields,
                         size_t flen, void *out, size_t cap, size_t *got);
/* The timeout of the next wait: longer while graph work is queued. */
int tsr__rpc_timeout(const rpc_conn *c);

/* ---- graphs --------------------------------------------------------------------------------- */

/* A stream's serializer: scratch memory reused across graphs. */
typedef struct rpc_ser {
    rpc_wr w;
    const tsr_tensor **keys;
    int32_t *vals; /* record index, or -2 - node position for nodes not yet emitted */
    size_t hcap;
    uint32_t n;
} rpc_ser;

/* Serializes g's nodes and everything they read into records (rpc_proto.h);
 * `own` says whether a buffer belongs to this connection and gives its
 * handle and client-visible base. */
typedef bool (*rpc_buf_lookup_fn)(void *ctx, const tsr_buf *buf, uint64_t *handle, uintptr_t *base);
tsr_status tsr__rpc_serialize(rpc_ser *s, tsr_graph *g, rpc_buf_lookup_fn own, void *ctx,
                              const char *who);
void tsr__rpc_ser_free(rpc_ser *s);

#endif /* TESSERA_RPC_CLIENT_H */
