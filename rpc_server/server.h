/* rpc_server/server.h — the server side of the RPC protocol: one session
 * per client connection, the objects it owns behind handles, and the
 * configuration all sessions share. Not installed.
 *
 * A session is transport-independent (it reads and writes an rpc_io), so
 * the same code serves NNG connections (server_main.c), the libFuzzer target
 * and tests. Key design choice: a session runs on one thread and executes
 * commands in arrival order; only graph computations run in the background
 * (on the device streams), and any command that touches memory first waits
 * for the streams that may be using it. That keeps every client's view
 * in-order without any locking between clients: sessions share nothing but
 * the devices.
 */
#ifndef TESSERA_RPC_SERVER_H
#define TESSERA_RPC_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/rpc/rpc_auth.h"
#include "backends/rpc/rpc_io.h"
#include "backends/rpc/rpc_proto.h"
#include "tessera/backend.h"

#define SRV_MAX_DEVS 32
#define SRV_MAX_HANDLES 65536 /* objects one client may hold at once */
#define SRV_MAX_STREAMS 64    /* streams one client may hold at once */

typedef struct srv_config {
    tsr_dev *devs[SRV_MAX_DEVS];
    int n_devs;
    uint64_t op_mask[SRV_MAX_DEVS]; /* ops each device may run (DEV_CAPS) */
    int threads;                    /* CPU threads per stream; 0: the device's share */
    uint64_t max_memory;            /* bytes per client; 0: each device's total */
    rpc_token token;                /* len 0: no authentication */
    int handshake_timeout_ms;       /* HELLO and AUTH must arrive within this */
    int io_timeout_ms;              /* a started frame must finish, a reply must leave */
    /* Server-to-server work (MESH_JOIN): off unless set (the fuzz target and
     * tests that want no outgoing connections leave it off). peer_opt is how
     * this server dials its peers: its token, and for tls+tcp:// its CA and
     * certificate, the same settings it demands of clients. */
    bool peers;
    tsr_rpc_options peer_opt;
    int peer_timeout_ms; /* waits for a peer's data or connection (default 30 s) */
} srv_config;

/* Fills cfg->op_mask by building a small instance of every op per device. */
void tsr__srv_config_probe(srv_config *cfg);

/* ---- objects and handles -------------------------------------------------------------------- */

typedef struct srv_buf {
    tsr_buf *buf;
    int dev;
    uint64_t size;   /* what the client asked for; every access is checked against it */
    uint64_t vbase;  /* the address the client may show (never a server pointer) */
    uint8_t *host;   /* the memory, when the host can address it; else NULL */
    tsr_tensor span; /* an I32 tensor over the whole allocation, for non-host copies */
} srv_buf;

/* A graph cached on a stream. Version 2: RPC_GRAPH_SLOTS per stream, in the
 * slot the client names (so both ends agree on what is cached), re-run by
 * id; version 1: two slots, the next graph decoded while the last runs. A
 * slot is reused only after its last run finished. */
typedef struct srv_graph {
    tsr_ctx *ctx;
    size_t ctx_cap;
    tsr_graph *g;
    size_t g_cap;
    tsr_tensor **map; /* record index -> tensor */
    size_t map_cap;
    uint64_t id;
    bool valid;
    size_t n_compute; /* nodes flagged COMPUTE: 0 means nothing to enqueue */
    tsr_event *done;  /* recorded after each run of this slot */
    bool pending;
} srv_graph;

typedef struct srv_stream {
    tsr_backend *be;
    int dev;
    bool busy;      /* work may be queued: synchronize before touching memory */
    tsr_status err; /* the first error of pipelined work, reported at SYNCHRONIZE */
    char err_msg[RPC_REASON_MAX];
    srv_graph slot[RPC_GRAPH_SLOTS]; /* version 1: slots 0 and 1 alternate */
    int cur;                         /* version 1: the slot of the last graph */
} srv_stream;

typedef struct srv_event {
    tsr_event *ev;
    int dev;
    uint64_t recorded_on; /* stream handle of the last record, 0: none */
} srv_event;

typedef struct srv_slot {
    uint32_t gen;
    uint8_t kind; /* 0: free */
    void *obj;
} srv_slot;

typedef struct srv_handles {
    srv_slot *slots;
    uint32_t n, cap;
    uint32_t *free_list;
    uint32_t n_free;
    uint32_t n_streams;
} srv_handles;

void tsr__srv_handles_free(srv_handles *h);
/* A new handle of `kind` for obj; 0 (error set) when the client holds too many. */
uint64_t tsr__srv_handle_new(srv_handles *h, uint8_t kind, void *obj);
/* The object behind handle h if it is of `kind` and alive, else NULL. */
void *tsr__srv_handle_get(const srv_handles *h, uint64_t handle, uint8_t kind);
/* Forgets a handle (its object is freed by the caller). */
void tsr__srv_handle_drop(srv_handles *h, uint64_t handle);
/* Iterates live objects of a kind: *i starts at 0; returns NULL at the end. */
void *tsr__srv_handle_next(const srv_handles *h, uint8_t kind, uint32_t *i, uint64_t *handle);

/* ---- peers (session_peer.c) ----------------------------------------------------------------
 * A mesh joins the servers one client uses: the client names it with a
 * random ticket and tells each server its rank and every rank's endpoint;
 * each server dials the lower ranks and is dialed by the higher ones. Each
 * connection between two servers is a *link* carrying PEER_DATA messages
 * both ways, each with a tag chosen by the client (unique per mesh), so a
 * receive takes exactly the bytes its send produced. Only the session's
 * thread uses its links: it reads one when it waits for a message from it,
 * and starts a send before it receives when two servers exchange. */

typedef struct srv_msg {
    struct srv_msg *next;
    uint64_t tag;
    size_t len, cap;
    uint8_t *data;
} srv_msg;

typedef struct srv_link srv_link;
typedef struct srv_mesh srv_mesh;

/* Sends n bytes as one PEER_DATA message tagged `tag` to rank `to`. */
tsr_status tsr__srv_peer_send(srv_mesh *m, uint32_t to, uint64_t tag, const void *p, size_t n);
/* The same in two halves: p must stay unchanged until send_wait returns
 * (a new start on the link waits for the last one first). */
tsr_status tsr__srv_peer_send_start(srv_mesh *m, uint32_t to, uint64_t tag, const void *p,
                                    size_t n);
tsr_status tsr__srv_peer_send_wait(srv_mesh *m, uint32_t to);
/* Waits (peer_timeout_ms) for the message tagged `tag` from rank `from`;
 * the caller gives it back with tsr__srv_peer_done. */
tsr_status tsr__srv_peer_take(srv_mesh *m, uint32_t from, uint64_t tag, srv_msg **out);
void tsr__srv_peer_done(srv_mesh *m, uint32_t from, srv_msg *msg);
/* This server's rank and the mesh size. */
uint32_t tsr__srv_mesh_rank(const srv_mesh *m);
uint32_t tsr__srv_mesh_size(const srv_mesh *m);
/* Closes the links, joins their readers and frees the mesh. */
void tsr__srv_mesh_free(srv_mesh *m);

/* ---- sessions ------------------------------------------------------------------------------- */

typedef struct srv_session {
    const srv_config *cfg;
    rpc_io *io;
    rpc_reader rd;
    uint16_t version; /* 0 until HELLO */
    bool authed;
    uint8_t client_nonce[RPC_NONCE_SIZE], server_nonce[RPC_NONCE_SIZE];
    srv_handles h;
    uint64_t mem_used;
    uint64_t next_vbase;
    uint8_t *msg; /* the current request's payload */
    size_t msg_cap;
    rpc_wr reply; /* the current reply's payload */
    uint8_t *staging;
    size_t staging_cap;
    tsr_status deferred; /* the first error of a pipelined command without a stream */
    char deferred_msg[RPC_REASON_MAX];
    bool close;             /* end the session after this frame */
    tsr_status io_err;      /* a handler's read from the connection failed */
    srv_stream *cur_stream; /* the stream the current command names (for deferred errors) */
    uint64_t frames;
    srv_mesh *mesh;   /* the client's servers, after MESH_JOIN */
    bool handed_over; /* PEER_ATTACH gave this connection to a mesh: do not close io */
    float *acc;       /* ALLREDUCE accumulator, grown once and reused */
    size_t acc_cap;   /* in floats */
} srv_session;

/* A session over io (the session does not own io). False when out of memory. */
bool tsr__srv_session_init(srv_session *s, const srv_config *cfg, rpc_io *io);
/* Serves frames until the peer closes, the framing breaks or io fails;
 * returns why (TSR_ECLOSED for an orderly end). Never aborts. */
tsr_status tsr__srv_session_run(srv_session *s);
/* Waits for the client's queued work and releases everything it owned. */
void tsr__srv_session_free(srv_session *s);

/* ---- command handlers (session_*.c) -------------------------------------------------------- */

/* A request as the handlers see it: the header and, for every command but
 * the data-carrying ones, the whole payload. */
typedef struct srv_req {
    rpc_hdr hdr;
    rpc_rd p;
} srv_req;

/* Waits for a stream's queued work; its error is kept for SYNCHRONIZE. */
void tsr__srv_stream_quiesce(srv_stream *st);
/* The same for every stream of the session. */
void tsr__srv_quiesce_all(srv_session *s);
/* Frees a stream's cached graphs (after its work is done). */
void tsr__srv_graphs_free(srv_stream *st);

tsr_status tsr__srv_dev_cmd(srv_session *s, srv_req *q);    /* DEV_* */
tsr_status tsr__srv_buf_cmd(srv_session *s, srv_req *q);    /* BUF_* */
tsr_status tsr__srv_stream_cmd(srv_session *s, srv_req *q); /* STREAM_*, SYNCHRONIZE */
tsr_status tsr__srv_event_cmd(srv_session *s, srv_req *q);  /* EVENT_* */
/* Releases every object of the session (streams first). */
void tsr__srv_objects_free(srv_session *s);

tsr_status tsr__srv_mesh_join(srv_session *s, srv_req *q);   /* MESH_JOIN */
tsr_status tsr__srv_peer_attach(srv_session *s, srv_req *q); /* PEER_ATTACH */
tsr_status tsr__srv_peer_copy(srv_session *s, srv_req *q);   /* PEER_SEND, PEER_RECV */
tsr_status tsr__srv_allreduce(srv_session *s, srv_req *q);   /* ALLREDUCE */

tsr_status tsr__srv_graph_compute(srv_session *s, srv_req *q);
tsr_status tsr__srv_graph_recompute(srv_session *s, srv_req *q);
tsr_status tsr__srv_supports_op(srv_session *s, srv_req *q);

/* TENSOR_SET / TENSOR_SET_2D read their payload from the connection
 * themselves; *unread counts what they leave unread (the session skips it
 * or, past RPC_DISCARD_MAX, closes). */
tsr_status tsr__srv_tensor_set(srv_session *s, const rpc_hdr *hdr, bool two_d, uint64_t *unread);
/* TENSOR_GET / TENSOR_GET_2D send their own reply (the data goes out from
 * the tensor's memory); *replied tells whether they did. */
tsr_status tsr__srv_tensor_get(srv_session *s, srv_req *q, bool two_d, bool *replied);
tsr_status tsr__srv_tensor_memset(srv_session *s, srv_req *q);
tsr_status tsr__srv_tensor_copy(srv_session *s, srv_req *q);

/* Looks up a buffer handle and checks [off, off + size) against it. */
tsr_status tsr__srv_buf_range(srv_session *s, uint64_t handle, uint64_t off, uint64_t size,
                              srv_buf **out, const char *what);
/* A stream handle of this session, or 0 allowed when may_be_none. */
tsr_status tsr__srv_stream_get(srv_session *s, uint64_t handle, bool may_be_none, srv_stream **out,
                               const char *what);
/* A reusable staging area of at least n bytes. */
uint8_t *tsr__srv_staging(srv_session *s, size_t n);
/* Sends a reply: header with status, then the iovs. */
tsr_status tsr__srv_send_reply(srv_session *s, const rpc_hdr *req, tsr_status status,
                               const rpc_iov *iov, int n);

#endif /* TESSERA_RPC_SERVER_H */
