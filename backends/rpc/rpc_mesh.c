/* backends/rpc/rpc_mesh.c — the client's side of server-to-server work
 * (protocol version 2): the mesh that joins every server this process
 * uses, copies whose bytes go from one server straight to another, and the
 * RPC registry's native all-reduce (tsr_comm_init & co., tessera/comm.h),
 * which the servers run among themselves.
 *
 * Not the servers' side (rpc_server/session_peer.c, session_collective.c).
 * Key design choices: the client only orders work — a copy is a PEER_SEND
 * to one server and a PEER_RECV to the other, an all-reduce is one
 * ALLREDUCE per server, all pipelined (no reply, no wait), so a decode step
 * over remote devices has no blocking round trip until its result is
 * read. Every message between servers carries a tag the client hands out
 * from one counter, so each receive takes exactly the bytes its send
 * produced. When the servers cannot reach each other (a firewall, a token
 * only the client knows, a server started with --no-peers, an old server),
 * the mesh is marked failed for that set of servers, the debug log says
 * why, and copies and all-reduces take the paths through the client.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/rpc/rpc_auth.h"
#include "backends/rpc/rpc_client.h"
#include "core/internal.h"
#include "tessera/comm.h"

#define MESH_JOIN_TIMEOUT_MS 15000

static pthread_mutex_t mesh_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int state; /* 0: none yet, 1: up, -1: failed for these servers */
    size_t n;
    rpc_conn *conns[RPC_MESH_MAX];
    uint64_t next_tag;
} mesh;

/* Sends MESH_JOIN to every server (all requests first, then the replies:
 * each server waits for its peers to connect). The caller holds mesh_mu. */
static tsr_status join(rpc_conn **cs, size_t n)
{
    uint8_t ticket[RPC_TICKET_SIZE];
    tsr_status st = tsr__rpc_random(ticket, sizeof(ticket));
    if (st != TSR_OK)
        return st;
    for (size_t i = 0; i < n; i++) {
        if (cs[i]->version < 2 || !(cs[i]->server_caps & RPC_CAP_PEER_COPY))
            return tsr__error(TSR_EUNSUPPORTED, "%s speaks protocol version %u without peer copies",
                              cs[i]->url, cs[i]->version);
        if (strlen(cs[i]->url) > RPC_URL_MAX)
            return tsr__error(TSR_EINVAL, "%s: the endpoint is too long", cs[i]->url);
    }
    rpc_wr w = {0};
    uint64_t ids[RPC_MESH_MAX];
    size_t sent = 0;
    for (size_t i = 0; i < n; i++)
        pthread_mutex_lock(&cs[i]->mu);
    for (size_t i = 0; i < n && st == TSR_OK; i++) {
        w.len = 0;
        rpc_wr_bytes(&w, ticket, sizeof(ticket));
        rpc_wr_u32(&w, (uint32_t)i);
        rpc_wr_u32(&w, (uint32_t)n);
        for (size_t j = 0; j < n; j++) {
            const size_t len = strlen(cs[j]->url);
            rpc_wr_u16(&w, (uint16_t)len);
            rpc_wr_bytes(&w, cs[j]->url, len);
        }
        if (w.bad) {
            st = tsr__error(TSR_ENOMEM, "MESH_JOIN");
            break;
        }
        /* The servers wait for each other: give them the longer timeout. */
        cs[i]->busy++;
        st = tsr__rpc_send(cs[i], cs[i]->url, RPC_CMD_MESH_JOIN, true, true, w.p, w.len, NULL, 0,
                           &ids[i]);
        if (st == TSR_OK)
            sent = i + 1;
        else
            cs[i]->busy--;
    }
    /* Every reply is read, even after a failure, so the connections stay in step. */
    for (size_t i = 0; i < sent; i++) {
        uint64_t len = 0;
        const tsr_status r =
            tsr__rpc_reply_begin(cs[i], cs[i]->url, ids[i], RPC_CMD_MESH_JOIN, &len);
        if (r == TSR_OK && len != 0 && st == TSR_OK)
            st = tsr__error(TSR_EPROTO, "%s: MESH_JOIN replied %llu bytes", cs[i]->url,
                            (unsigned long long)len);
        else if (r != TSR_OK && st == TSR_OK)
            st = r;
        cs[i]->busy--;
    }
    for (size_t i = 0; i < n; i++) {
        cs[i]->mesh_rank = st == TSR_OK ? (int)i : -1;
        pthread_mutex_unlock(&cs[i]->mu);
    }
    free(w.p);
    return st;
}

/* Whether a mesh over every server connected now is up; builds it the
 * first time for each set of servers. The caller holds mesh_mu. */
static bool mesh_ready(void)
{
    rpc_conn *cs[RPC_MESH_MAX];
    const size_t n = tsr__rpc_conn_list(cs, RPC_MESH_MAX);
    if (n == mesh.n && mesh.state != 0)
        return mesh.state == 1;
    mesh.n = n;
    mesh.state = -1;
    if (n < 2)
        return false;
    if (n > RPC_MESH_MAX) {
        TSR_LOG_D("rpc: %zu servers (at most %d in a mesh): copies between servers and "
                  "all-reduces go through this client",
                  n, RPC_MESH_MAX);
        return false;
    }
    if (tsr__env_long("TSR_RPC_NO_PEERS", 0) != 0) {
        TSR_LOG_D("rpc: TSR_RPC_NO_PEERS: copies between servers go through this client");
        return false;
    }
    const tsr_status st = join(cs, n);
    if (st != TSR_OK) {
        TSR_LOG_D("rpc: server-to-server links unavailable (%s); copies between servers and "
                  "all-reduces go through this client",
                  tsr_last_error());
        return false;
    }
    memcpy(mesh.conns, cs, n * sizeof(cs[0]));
    mesh.state = 1;
    TSR_LOG_D("rpc: %zu servers joined in a mesh: copies between them go server to server", n);
    return true;
}

/* The next tag block (256 tags) of the mesh, or 0 when there is no mesh
 * over these servers. */
static uint64_t next_tags(bool need_mesh)
{
    pthread_mutex_lock(&mesh_mu);
    const bool ok = !need_mesh || mesh_ready();
    const uint64_t tag = ok ? ++mesh.next_tag << 8 : 0;
    pthread_mutex_unlock(&mesh_mu);
    return tag;
}

/* ---- copies between servers -------------------------------------------------------------------
 */

tsr_status tsr__rpc_copy_between(tsr_backend *src_b, tsr_backend *dst_b, const tsr_tensor *src,
                                 tsr_tensor *dst)
{
    rpc_conn *sc, *dc, *bc = NULL;
    uint64_t sbuf, soff, dbuf, doff, dstream, sstream = 0;
    const char *who;
    const size_t bytes = tsr_nbytes(src);
    if (!tsr__rpc_tensor_where(src, &sc, &sbuf, &soff) ||
        !tsr__rpc_tensor_where(dst, &dc, &dbuf, &doff) ||
        !tsr__rpc_stream_where(dst_b, &bc, &dstream, &who) || bc != dc || sc == dc ||
        !tsr_is_contiguous(src) || !tsr_is_contiguous(dst) || tsr_nbytes(dst) != bytes)
        return TSR_ENOTHANDLED;
    const uint64_t tag = next_tags(true);
    if (tag == 0 || sc->mesh_rank < 0 || dc->mesh_rank < 0)
        return TSR_ENOTHANDLED;
    rpc_conn *c2;
    if (!tsr__rpc_stream_where(src_b, &c2, &sstream, NULL) || c2 != sc)
        sstream = 0; /* the server then waits for all of this client's streams */
    uint8_t f[48];
    uint64_t v[6] = {sstream, (uint64_t)(uint32_t)dc->mesh_rank, sbuf, soff, bytes, tag};
    rpc_put_u64s(f, v, 6);
    pthread_mutex_lock(&sc->mu);
    tsr_status st =
        tsr__rpc_send(sc, sc->url, RPC_CMD_PEER_SEND, false, true, f, sizeof(f), NULL, 0, NULL);
    if (st == TSR_OK && sstream)
        tsr__rpc_stream_set_busy(src_b);
    pthread_mutex_unlock(&sc->mu);
    if (st != TSR_OK)
        return st;
    v[0] = dstream;
    v[1] = (uint64_t)(uint32_t)sc->mesh_rank;
    v[2] = dbuf;
    v[3] = doff;
    rpc_put_u64s(f, v, 6);
    pthread_mutex_lock(&dc->mu);
    st = tsr__rpc_send(dc, who, RPC_CMD_PEER_RECV, false, true, f, sizeof(f), NULL, 0, NULL);
    if (st == TSR_OK)
        tsr__rpc_stream_set_busy(dst_b);
    pthread_mutex_unlock(&dc->mu);
    return st;
}

/* ---- the native all-reduce --------------------------------------------------------------------
 */

#define COMM_MAX 16

typedef struct rpc_comm {
    int n;
    tsr_backend *be[COMM_MAX];
    rpc_conn *conn[COMM_MAX];
    uint64_t stream[COMM_MAX];
    int server[COMM_MAX]; /* index into servers[] */
    int n_servers;
    rpc_conn *servers[COMM_MAX];
    rpc_wr msg; /* reused request */
} rpc_comm;

static tsr_comm *rpc_comm_init(tsr_backend *const *backends, int n)
{
    if (n < 1 || n > COMM_MAX)
        return NULL;
    rpc_comm *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->n = n;
    for (int i = 0; i < n; i++) {
        const char *who;
        if (!tsr__rpc_stream_where(backends[i], &c->conn[i], &c->stream[i], &who) ||
            c->conn[i]->version < 2 || !(c->conn[i]->server_caps & RPC_CAP_COLLECTIVE))
            goto no;
        c->be[i] = backends[i];
        int k = 0;
        while (k < c->n_servers && c->servers[k] != c->conn[i])
            k++;
        if (k == c->n_servers)
            c->servers[c->n_servers++] = c->conn[i];
        c->server[i] = k;
    }
    if (c->n_servers > 1 && next_tags(true) == 0)
        goto no;
    for (int k = 0; k < c->n_servers && c->n_servers > 1; k++)
        if (c->servers[k]->mesh_rank < 0)
            goto no;
    TSR_LOG_D("rpc: native all-reduce over %d streams on %d server(s)", n, c->n_servers);
    return (tsr_comm *)c;
no:
    free(c);
    return NULL;
}

static tsr_status rpc_comm_allreduce(tsr_comm *comm, tsr_tensor *const *ts)
{
    rpc_comm *c = (rpc_comm *)comm;
    const tsr_type type = ts[0]->type;
    if (type != TSR_TYPE_F32 && type != TSR_TYPE_F16 && type != TSR_TYPE_BF16)
        return TSR_ENOTHANDLED;
    uint64_t buf[COMM_MAX], off[COMM_MAX];
    int per_server[COMM_MAX] = {0};
    for (int i = 0; i < c->n; i++) {
        rpc_conn *tc;
        if (!tsr__rpc_tensor_where(ts[i], &tc, &buf[i], &off[i]) || tc != c->conn[i] ||
            !tsr_is_contiguous(ts[i]) || ++per_server[c->server[i]] > RPC_AR_MAX_LOCAL)
            return TSR_ENOTHANDLED;
    }
    const uint64_t tag = next_tags(c->n_servers > 1);
    if (tag == 0)
        return TSR_ENOTHANDLED;
    const uint64_t n_elems = (uint64_t)tsr_nelements(ts[0]);
    for (int k = 0; k < c->n_servers; k++) {
        rpc_conn *sc = c->servers[k];
        rpc_wr *w = &c->msg;
        w->len = 0;
        rpc_wr_u64(w, tag);
        rpc_wr_u32(w, (uint32_t)type);
        rpc_wr_u32(w, (uint32_t)per_server[k]);
        rpc_wr_u64(w, n_elems);
        rpc_wr_u32(w, (uint32_t)c->n_servers);
        rpc_wr_u32(w, 0);
        for (int j = 0; j < c->n_servers; j++)
            rpc_wr_u32(w, c->n_servers > 1 ? (uint32_t)c->servers[j]->mesh_rank
                                           : (uint32_t)TSR_MAX(sc->mesh_rank, 0));
        for (int i = 0; i < c->n; i++)
            if (c->server[i] == k) {
                rpc_wr_u64(w, c->stream[i]);
                rpc_wr_u64(w, buf[i]);
                rpc_wr_u64(w, off[i]);
            }
        if (w->bad)
            return tsr__error(TSR_ENOMEM, "rpc: ALLREDUCE request");
        pthread_mutex_lock(&sc->mu);
        const tsr_status st =
            tsr__rpc_send(sc, sc->url, RPC_CMD_ALLREDUCE, false, true, w->p, w->len, NULL, 0, NULL);
        if (st == TSR_OK)
            for (int i = 0; i < c->n; i++)
                if (c->server[i] == k)
                    tsr__rpc_stream_set_busy(c->be[i]);
        pthread_mutex_unlock(&sc->mu);
        if (st != TSR_OK)
            return st;
    }
    return TSR_OK;
}

static void rpc_comm_free(tsr_comm *comm)
{
    rpc_comm *c = (rpc_comm *)comm;
    if (!c)
        return;
    for (int i = 0; i < c->n; i++)
        tsr_backend_synchronize(c->be[i]);
    free(c->msg.p);
    free(c);
}

void *tsr__rpc_comm_proc(const char *name)
{
    if (strcmp(name, "tsr_comm_init") == 0)
        return (void *)(tsr_comm_init_fn)rpc_comm_init;
    if (strcmp(name, "tsr_comm_allreduce") == 0)
        return (void *)(tsr_comm_allreduce_fn)rpc_comm_allreduce;
    if (strcmp(name, "tsr_comm_free") == 0)
        return (void *)(tsr_comm_free_fn)rpc_comm_free;
    return NULL;
}
