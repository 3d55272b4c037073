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

/* A stream as its connection sees it (embedded in the backend's stream):
 * a synchronize of one stream synchronizes every stream of the connection
 * in the same round trip, and a stream with nothing sent since then is
 * synchronized without one. */
typedef struct rpc_sync {
    uint64_t handle;
    const char *who;
    bool busy;          /* graph work may be queued: waits get the compute timeout */
    uint64_t synced_at; /* the connection's next_id right after its last synchronize */
    tsr_status err;     /* from a synchronize done on its behalf, returned by its next one */
    char msg[320];
} rpc_sync;

/* A read sent without waiting: its reply is read straight into dst at the
 * next wait on the connection. */
typedef struct rpc_pending {
    uint64_t id;
    uint16_t cmd;
    void *dst;
    size_t n;
} rpc_pending;

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
    bool sent;            /* bytes went out since the last wait for a reply */
    uint64_t round_trips; /* waits for a reply that followed a send: blocking round trips */
    uint64_t graphs_sent, graphs_by_ref;
    int mesh_rank;      /* this server's rank in the client's mesh; -1: none */
    rpc_sync **streams; /* the live streams of this connection */
    size_t n_streams, cap_streams;
    rpc_pending *pend; /* reads in flight, in request order (a ring) */
    size_t pend_head, n_pend, cap_pend;
    tsr_status pend_err; /* the first failed read in flight, for the next synchronize */
    char pend_msg[320];
    bool hold; /* queue frames that want a reply instead of sending them at once */
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

/* Streams of the connection (the caller holds c->mu). */
bool tsr__rpc_stream_add(rpc_conn *c, rpc_sync *s);
void tsr__rpc_stream_remove(rpc_conn *c, rpc_sync *s);
void tsr__rpc_set_busy(rpc_conn *c, rpc_sync *s, bool busy);
/* Synchronizes every stream of the connection in one round trip and returns
 * s's result; nothing is sent when s and the connection are already idle. */
tsr_status tsr__rpc_sync(rpc_conn *c, rpc_sync *s);
/* Sends a read (TENSOR_GET of n bytes, fields as given) whose reply lands
 * in dst at the next wait; the caller holds c->mu. */
tsr_status tsr__rpc_get_later(rpc_conn *c, const char *who, const void *fields, size_t flen,
                              void *dst, size_t n);

/* Frees everything of a connection but its transport, which the caller
 * then owns (a server turning a connection to its peer into a link). */
rpc_io *tsr__rpc_conn_detach(rpc_conn *c);

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

/* The graphs a stream sent lately, as the server holds them: a graph that
 * serializes to the bytes of one of them is re-run by reference
 * (GRAPH_RECOMPUTE) instead of being sent again. Version 2 servers keep
 * RPC_GRAPH_SLOTS graphs per stream, in the slot the client names; version
 * 1 servers only the last one. */
typedef struct rpc_cached {
    rpc_wr bytes;
    uint64_t hash, id, epoch, used;
    bool valid;
} rpc_cached;

typedef struct rpc_graph_cache {
    rpc_cached e[RPC_GRAPH_SLOTS];
    uint64_t tick;
} rpc_graph_cache;

/* The id of a cached graph with exactly these bytes (and the connection's
 * current epoch), or 0. n_slots: how many slots the server keeps. */
uint64_t tsr__rpc_cache_find(rpc_graph_cache *c, int n_slots, const rpc_wr *w, uint64_t epoch);
/* Records bytes sent as graph `id`; returns the slot it takes (the least
 * recently used one). */
uint32_t tsr__rpc_cache_put(rpc_graph_cache *c, int n_slots, const rpc_wr *w, uint64_t id,
                            uint64_t epoch);
void tsr__rpc_cache_free(rpc_graph_cache *c);

/* Serializes g's nodes and everything they read into records (rpc_proto.h);
 * `own` says whether a buffer belongs to this connection and gives its
 * handle and client-visible base. */
typedef bool (*rpc_buf_lookup_fn)(void *ctx, const tsr_buf *buf, uint64_t *handle, uintptr_t *base);
tsr_status tsr__rpc_serialize(rpc_ser *s, tsr_graph *g, rpc_buf_lookup_fn own, void *ctx,
                              const char *who);
void tsr__rpc_ser_free(rpc_ser *s);

/* ---- between the tables and the mesh (rpc_backend.c, rpc_mesh.c) ---------------------------- */

/* The connection, buffer handle and offset of a tensor in a remote buffer. */
bool tsr__rpc_tensor_where(const tsr_tensor *t, rpc_conn **conn, uint64_t *buf, uint64_t *off);
/* The connection and handle of a remote stream (who: its device, for messages). */
bool tsr__rpc_stream_where(tsr_backend *b, rpc_conn **conn, uint64_t *stream, const char **who);
/* Marks a remote stream as having queued work (its waits get the compute
 * timeout). The caller holds the connection's mutex. */
void tsr__rpc_stream_set_busy(tsr_backend *b);
/* The distinct server connections, in the order they were added; returns
 * how many there are (out gets at most max). */
size_t tsr__rpc_conn_list(rpc_conn **out, size_t max);

/* A copy from a buffer of one server into a buffer of another: the bytes go
 * between the servers (PEER_SEND + PEER_RECV, pipelined) when they can
 * reach each other, else TSR_ENOTHANDLED (core copies through this host). */
tsr_status tsr__rpc_copy_between(tsr_backend *src_b, tsr_backend *dst_b, const tsr_tensor *src,
                                 tsr_tensor *dst);
/* "tsr_comm_init", "tsr_comm_allreduce", "tsr_comm_free" of the RPC
 * registry (the servers' own all-reduce); NULL for other names. */
void *tsr__rpc_comm_proc(const char *name);

#endif /* TESSERA_RPC_CLIENT_H */
