/* rpc_server/session_peer.c — server-to-server links (protocol version 2):
 * MESH_JOIN (a client joins the servers it uses into a mesh), PEER_ATTACH
 * (a peer server's connection becomes a link of that mesh), sending and
 * receiving messages on links, and PEER_SEND / PEER_RECV (a copy whose bytes
 * go straight from one server to the other; the client only orders it).
 *
 * Not the all-reduce (session_collective.c), which uses the same links.
 * Key design choices: a mesh belongs to one client session, so links, like
 * handles, are never shared between clients; a peer proves itself like a
 * client (token, TLS) and then must name the mesh's random 32-byte ticket,
 * which only the client and the mesh's servers know. Only the session's
 * own thread touches its links: it reads a link itself when it waits for a
 * message from it (the transport wakes it directly, no hand-off between
 * threads), and an exchange starts its send, receives, then waits for the
 * send, so two servers sending to each other never both wait. This cannot
 * deadlock because every server runs the commands in the one order the
 * client issued them: the earliest blocked receive always has its send
 * under way on the other server.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/rpc/rpc_client.h"
#include "core/internal.h"
#include "rpc_server/server.h"

#define LINK_READ_BUF (64u << 10)
#define POOL_KEEP 8 /* message buffers a link keeps for reuse */
/* MESH_JOIN waits this long for the higher ranks to attach, less than the
 * client waits for its reply (5 s at the least), so a mesh that cannot form
 * is an error reply, not a dead connection. */
#define MESH_WAIT_MS 4000
#define DIAL_TIMEOUT_MS 3000

struct srv_link {
    srv_mesh *mesh;
    uint32_t peer;
    rpc_io *io; /* owned by the link */
    rpc_reader rd;
    uint8_t hb[RPC_HDR_SIZE]; /* the header of a started send */
    bool sending;             /* a send was started and not waited for */
    srv_msg *head, *tail;     /* read while waiting for another tag */
    srv_msg *pool;            /* buffers for reuse */
    int n_pool;
    bool dead;
    char why[200]; /* why the link died */
};

struct srv_mesh {
    srv_mesh *next; /* in the registry of meshes peers may attach to */
    uint8_t ticket[RPC_TICKET_SIZE];
    uint32_t rank, n;
    int timeout_ms, io_timeout_ms;
    pthread_mutex_t mu; /* links[], while peers attach */
    pthread_cond_t cv;
    srv_link *links[RPC_MESH_MAX];
};

/* Meshes of this process that peers may attach to, by (ticket, rank). */
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reg_cv = PTHREAD_COND_INITIALIZER;
static srv_mesh *reg_head;

uint32_t tsr__srv_mesh_rank(const srv_mesh *m) { return m->rank; }
uint32_t tsr__srv_mesh_size(const srv_mesh *m) { return m->n; }

static struct timespec deadline_in(int ms)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

static srv_mesh *reg_find(const uint8_t *ticket, uint32_t rank)
{
    for (srv_mesh *m = reg_head; m; m = m->next)
        if (m->rank == rank && memcmp(m->ticket, ticket, RPC_TICKET_SIZE) == 0)
            return m;
    return NULL;
}

/* ---- links ------------------------------------------------------------------------------------
 */

static void msg_free(srv_msg *m)
{
    if (m) {
        free(m->data);
        free(m);
    }
}

/* A buffer of at least n bytes: a pooled one when one is big enough. */
static srv_msg *msg_get(srv_link *l, size_t n)
{
    srv_msg **pp = &l->pool, *m = NULL;
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->cap >= n)
            break;
    if (!*pp && l->pool)
        pp = &l->pool; /* none is big enough: grow the first */
    if (*pp) {
        m = *pp;
        *pp = m->next;
        l->n_pool--;
    }
    if (!m && !(m = calloc(1, sizeof(*m))))
        return NULL;
    if (m->cap < n) {
        uint8_t *p = realloc(m->data, n);
        if (!p) {
            msg_free(m);
            return NULL;
        }
        m->data = p;
        m->cap = n;
    }
    m->next = NULL;
    m->len = n;
    return m;
}

static tsr_status link_fail(srv_link *l, tsr_status st, const char *why)
{
    if (!l->dead) {
        l->dead = true;
        snprintf(l->why, sizeof(l->why), "%s", why);
        l->io->shutdown(l->io);
    }
    return tsr__error(st, "the link with rank %u: %s", l->peer, l->why);
}

/* Reads the next PEER_DATA message of the link (waiting up to timeout_ms). */
static tsr_status link_read(srv_link *l, int timeout_ms, srv_msg **out)
{
    uint8_t hb[RPC_HDR_SIZE];
    char why[200];
    tsr_status st = tsr__rpc_read(&l->rd, hb, sizeof(hb), timeout_ms);
    if (st == TSR_ETIMEDOUT)
        return tsr__error(TSR_ETIMEDOUT, "nothing from rank %u within %d ms", l->peer, timeout_ms);
    if (st != TSR_OK) {
        snprintf(why, sizeof(why), "connection lost (%s)", l->io->err);
        return link_fail(l, TSR_EDEVICE, why);
    }
    rpc_hdr h;
    tsr__rpc_hdr_decode(hb, &h);
    if (h.magic != RPC_MAGIC || h.cmd != RPC_CMD_PEER_DATA || h.flags != 0 || h.status != 0 ||
        h.length > RPC_PEER_DATA_MAX) {
        snprintf(why, sizeof(why), "a frame that is not PEER_DATA (command 0x%x, %llu bytes)",
                 h.cmd, (unsigned long long)h.length);
        return link_fail(l, TSR_EPROTO, why);
    }
    srv_msg *m = msg_get(l, (size_t)h.length);
    if (!m)
        return tsr__error(TSR_ENOMEM, "a %llu-byte message from rank %u",
                          (unsigned long long)h.length, l->peer);
    if ((st = tsr__rpc_read(&l->rd, m->data, m->len, l->mesh->io_timeout_ms)) != TSR_OK) {
        msg_free(m);
        snprintf(why, sizeof(why), "connection lost in a message (%s)", l->io->err);
        return link_fail(l, TSR_EDEVICE, why);
    }
    m->tag = h.id;
    *out = m;
    return TSR_OK;
}

/* Installs a link to `peer` over io (which it then owns). The caller holds m->mu. */
static tsr_status link_start(srv_mesh *m, uint32_t peer, rpc_io *io)
{
    srv_link *l = calloc(1, sizeof(*l));
    if (!l || !io->send_start || !tsr__rpc_reader_init(&l->rd, io, LINK_READ_BUF)) {
        free(l);
        io->free(io);
        return tsr__error(TSR_ENOMEM, "peer link");
    }
    l->mesh = m;
    l->peer = peer;
    l->io = io;
    m->links[peer] = l;
    pthread_cond_broadcast(&m->cv);
    return TSR_OK;
}

static void link_free(srv_link *l)
{
    l->io->shutdown(l->io);
    l->io->free(l->io);
    tsr__rpc_reader_free(&l->rd);
    for (srv_msg *m = l->head, *n; m; m = n) {
        n = m->next;
        msg_free(m);
    }
    for (srv_msg *m = l->pool, *n; m; m = n) {
        n = m->next;
        msg_free(m);
    }
    free(l);
}

static srv_link *link_of(srv_mesh *m, uint32_t peer, const char *what)
{
    srv_link *l = peer < m->n && peer != m->rank ? m->links[peer] : NULL;
    if (!l)
        tsr__error(TSR_EINVAL, "%s: rank %u is not a peer of rank %u in this %u-server mesh", what,
                   peer, m->rank, m->n);
    return l;
}

tsr_status tsr__srv_peer_send_start(srv_mesh *m, uint32_t to, uint64_t tag, const void *p, size_t n)
{
    srv_link *l = link_of(m, to, "PEER_DATA");
    if (!l)
        return TSR_EINVAL;
    if (l->dead)
        return tsr__error(TSR_EDEVICE, "the link with rank %u is down: %s", to, l->why);
    tsr_status st = tsr__srv_peer_send_wait(m, to);
    if (st != TSR_OK)
        return st;
    const rpc_hdr h = {
        .magic = RPC_MAGIC, .version = 2, .cmd = RPC_CMD_PEER_DATA, .id = tag, .length = n};
    tsr__rpc_hdr_encode(&h, l->hb);
    const rpc_iov iov[2] = {{l->hb, sizeof(l->hb)}, {p, n}};
    if ((st = l->io->send_start(l->io, iov, 2, m->io_timeout_ms)) != TSR_OK) {
        char why[200];
        snprintf(why, sizeof(why), "sending failed (%s)", l->io->err);
        return link_fail(l, TSR_EDEVICE, why);
    }
    l->sending = true;
    return TSR_OK;
}

tsr_status tsr__srv_peer_send_wait(srv_mesh *m, uint32_t to)
{
    srv_link *l = link_of(m, to, "PEER_DATA");
    if (!l)
        return TSR_EINVAL;
    if (!l->sending)
        return TSR_OK;
    l->sending = false;
    if (l->io->send_wait(l->io) != TSR_OK) {
        char why[200];
        snprintf(why, sizeof(why), "sending failed (%s)", l->io->err);
        return link_fail(l, TSR_EDEVICE, why);
    }
    return TSR_OK;
}

tsr_status tsr__srv_peer_send(srv_mesh *m, uint32_t to, uint64_t tag, const void *p, size_t n)
{
    const tsr_status st = tsr__srv_peer_send_start(m, to, tag, p, n);
    return st == TSR_OK ? tsr__srv_peer_send_wait(m, to) : st;
}

tsr_status tsr__srv_peer_take(srv_mesh *m, uint32_t from, uint64_t tag, srv_msg **out)
{
    *out = NULL;
    srv_link *l = link_of(m, from, "PEER_RECV");
    if (!l)
        return TSR_EINVAL;
    /* Read before (normally the queue is empty: messages arrive in the
     * order they are wanted). */
    for (srv_msg *x = l->head, *prev = NULL; x; prev = x, x = x->next) {
        if (x->tag != tag)
            continue;
        if (prev)
            prev->next = x->next;
        else
            l->head = x->next;
        if (l->tail == x)
            l->tail = prev;
        x->next = NULL;
        *out = x;
        return TSR_OK;
    }
    if (l->dead)
        return tsr__error(TSR_EDEVICE, "the link with rank %u is down: %s", from, l->why);
    for (;;) {
        srv_msg *x;
        const tsr_status st = link_read(l, m->timeout_ms, &x);
        if (st != TSR_OK)
            return st;
        if (x->tag == tag) {
            *out = x;
            return TSR_OK;
        }
        if (l->tail)
            l->tail->next = x;
        else
            l->head = x;
        l->tail = x;
    }
}

void tsr__srv_peer_done(srv_mesh *m, uint32_t from, srv_msg *msg)
{
    srv_link *l = from < m->n ? m->links[from] : NULL;
    if (!l || !msg || l->n_pool >= POOL_KEEP) {
        msg_free(msg);
        return;
    }
    msg->next = l->pool;
    l->pool = msg;
    l->n_pool++;
}

/* ---- meshes -----------------------------------------------------------------------------------
 */

void tsr__srv_mesh_free(srv_mesh *m)
{
    if (!m)
        return;
    pthread_mutex_lock(&reg_mu);
    for (srv_mesh **pp = &reg_head; *pp; pp = &(*pp)->next)
        if (*pp == m) {
            *pp = m->next;
            break;
        }
    pthread_mutex_unlock(&reg_mu);
    for (uint32_t i = 0; i < m->n; i++)
        if (m->links[i])
            link_free(m->links[i]);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    free(m);
}

/* Dials rank `peer` at url and attaches as rank m->rank. */
static tsr_status dial_peer(srv_session *s, srv_mesh *m, uint32_t peer, const char *url)
{
    rpc_conn *c = NULL;
    rpc_dev_info *infos = NULL;
    uint32_t nd = 0;
    tsr_rpc_options opt = s->cfg->peer_opt;
    if (opt.timeout_ms <= 0 || opt.timeout_ms > DIAL_TIMEOUT_MS)
        opt.timeout_ms = DIAL_TIMEOUT_MS;
    tsr_status st = tsr__rpc_conn_open(url, &opt, &c, &infos, &nd);
    free(infos);
    if (st != TSR_OK)
        return st;
    uint8_t f[40];
    rpc_wr w = {.p = f, .cap = sizeof(f)};
    rpc_wr_bytes(&w, m->ticket, RPC_TICKET_SIZE);
    rpc_wr_u32(&w, m->rank);
    rpc_wr_u32(&w, peer);
    size_t got = 0;
    st = tsr__rpc_call(c, url, RPC_CMD_PEER_ATTACH, f, sizeof(f), NULL, 0, &got);
    rpc_io *io = tsr__rpc_conn_detach(c);
    if (st != TSR_OK) {
        io->free(io);
        return st;
    }
    pthread_mutex_lock(&m->mu);
    st = link_start(m, peer, io);
    pthread_mutex_unlock(&m->mu);
    return st;
}

tsr_status tsr__srv_mesh_join(srv_session *s, srv_req *q)
{
    if (!s->cfg->peers)
        return tsr__error(TSR_EUNSUPPORTED, "this server does not connect to other servers "
                                            "(started with --no-peers)");
    const uint8_t *ticket = rpc_rd_bytes(&q->p, RPC_TICKET_SIZE);
    const uint32_t rank = rpc_rd_u32(&q->p), n = rpc_rd_u32(&q->p);
    if (q->p.bad || n < 2 || n > RPC_MESH_MAX || rank >= n)
        return tsr__error(TSR_EINVAL, "rank %u of %u servers (2..%d)", rank, n, RPC_MESH_MAX);
    char urls[RPC_MESH_MAX][RPC_URL_MAX + 1];
    for (uint32_t i = 0; i < n; i++) {
        const uint16_t len = rpc_rd_u16(&q->p);
        const uint8_t *u = rpc_rd_bytes(&q->p, len);
        if (q->p.bad || len == 0 || len > RPC_URL_MAX)
            return tsr__error(TSR_EINVAL, "endpoint %u: %u bytes (1..%d)", i, len, RPC_URL_MAX);
        memcpy(urls[i], u, len);
        urls[i][len] = '\0';
        if (memchr(urls[i], '\0', len))
            return tsr__error(TSR_EINVAL, "endpoint %u contains a NUL byte", i);
        char tmp[RPC_URL_MAX + 16];
        if (tsr__rpc_endpoint_url(urls[i], tmp, sizeof(tmp)) != TSR_OK)
            return tsr__error(TSR_EINVAL, "endpoint %u: %s", i, tsr_last_error());
    }
    if (rpc_rd_left(&q->p) != 0)
        return tsr__error(TSR_EINVAL, "%zu bytes after the last endpoint", rpc_rd_left(&q->p));
    /* A new mesh replaces the old one (the work queued before is done). */
    tsr__srv_quiesce_all(s);
    tsr__srv_mesh_free(s->mesh);
    s->mesh = NULL;
    srv_mesh *m = calloc(1, sizeof(*m));
    if (!m)
        return tsr__error(TSR_ENOMEM, "mesh");
    memcpy(m->ticket, ticket, RPC_TICKET_SIZE);
    m->rank = rank;
    m->n = n;
    m->timeout_ms = s->cfg->peer_timeout_ms > 0 ? s->cfg->peer_timeout_ms : 30000;
    m->io_timeout_ms = s->cfg->io_timeout_ms > 0 ? s->cfg->io_timeout_ms : 60000;
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    pthread_mutex_lock(&reg_mu);
    if (reg_find(ticket, rank)) {
        pthread_mutex_unlock(&reg_mu);
        tsr__srv_mesh_free(m);
        return tsr__error(TSR_EINVAL, "rank %u of this ticket has joined already", rank);
    }
    m->next = reg_head;
    reg_head = m;
    pthread_cond_broadcast(&reg_cv);
    pthread_mutex_unlock(&reg_mu);
    /* Dial the lower ranks; the higher ones dial us. */
    tsr_status st = TSR_OK;
    for (uint32_t p = 0; p < rank && st == TSR_OK; p++)
        if ((st = dial_peer(s, m, p, urls[p])) != TSR_OK)
            st = tsr__error(st, "rank %u could not reach rank %u at %s: %s", rank, p, urls[p],
                            tsr_last_error());
    if (st == TSR_OK) {
        const int wait_ms = TSR_MIN(m->timeout_ms, MESH_WAIT_MS);
        const struct timespec until = deadline_in(wait_ms);
        pthread_mutex_lock(&m->mu);
        for (uint32_t p = rank + 1; p < n && st == TSR_OK; p++)
            while (!m->links[p] && st == TSR_OK)
                if (pthread_cond_timedwait(&m->cv, &m->mu, &until) == ETIMEDOUT)
                    st = tsr__error(TSR_ETIMEDOUT,
                                    "rank %u at %s did not connect to rank %u within %d ms", p,
                                    urls[p], rank, wait_ms);
        pthread_mutex_unlock(&m->mu);
    }
    if (st != TSR_OK) {
        tsr__srv_mesh_free(m);
        return st;
    }
    s->mesh = m;
    TSR_LOG_D("rpc server: rank %u of a %u-server mesh", rank, n);
    return TSR_OK;
}

tsr_status tsr__srv_peer_attach(srv_session *s, srv_req *q)
{
    const uint8_t *ticket = rpc_rd_bytes(&q->p, RPC_TICKET_SIZE);
    const uint32_t from = rpc_rd_u32(&q->p), to = rpc_rd_u32(&q->p);
    s->close = true; /* this connection is a link now, or it is refused */
    if (q->p.bad || rpc_rd_left(&q->p) != 0)
        return tsr__error(TSR_EPROTO, "a PEER_ATTACH payload is 40 bytes");
    if (!s->cfg->peers)
        return tsr__error(TSR_EUNSUPPORTED, "this server takes no peer connections");
    if (s->rd.pos != s->rd.end)
        return tsr__error(TSR_EPROTO, "bytes sent after PEER_ATTACH before its reply");
    const int wait_ms = s->cfg->peer_timeout_ms > 0 ? s->cfg->peer_timeout_ms : 30000;
    const struct timespec until = deadline_in(wait_ms);
    tsr_status st = TSR_OK;
    pthread_mutex_lock(&reg_mu);
    srv_mesh *m;
    while (!(m = reg_find(ticket, to)))
        if (pthread_cond_timedwait(&reg_cv, &reg_mu, &until) == ETIMEDOUT)
            break;
    if (!m)
        st = tsr__error(TSR_ETIMEDOUT, "no mesh with this ticket has a rank %u here (waited %d ms)",
                        to, wait_ms);
    else if (from <= to || from >= m->n)
        st = tsr__error(TSR_EINVAL, "rank %u may not attach to rank %u of %u", from, to, m->n);
    if (st == TSR_OK) {
        pthread_mutex_lock(&m->mu);
        if (m->links[from])
            st = tsr__error(TSR_EINVAL, "rank %u is attached already", from);
        /* The reply goes out before the link's own traffic can start. */
        if (st == TSR_OK && (st = tsr__srv_send_reply(s, &q->hdr, TSR_OK, NULL, 0)) == TSR_OK &&
            (st = link_start(m, from, s->io)) == TSR_OK)
            s->handed_over = true;
        pthread_mutex_unlock(&m->mu);
    }
    pthread_mutex_unlock(&reg_mu);
    return st;
}

/* ---- PEER_SEND / PEER_RECV ---------------------------------------------------------------------
 */

tsr_status tsr__srv_peer_copy(srv_session *s, srv_req *q)
{
    const bool send = q->hdr.cmd == RPC_CMD_PEER_SEND;
    const char *what = send ? "PEER_SEND" : "PEER_RECV";
    const uint64_t sh = rpc_rd_u64(&q->p);
    const uint32_t peer = rpc_rd_u32(&q->p), zero = rpc_rd_u32(&q->p);
    const uint64_t bh = rpc_rd_u64(&q->p), off = rpc_rd_u64(&q->p), len = rpc_rd_u64(&q->p),
                   tag = rpc_rd_u64(&q->p);
    if (q->p.bad || rpc_rd_left(&q->p) != 0 || zero != 0)
        return tsr__error(TSR_EINVAL, "a %s payload is 48 bytes with a zero reserved field", what);
    srv_stream *sp;
    tsr_status st = tsr__srv_stream_get(s, sh, true, &sp, "stream");
    if (st != TSR_OK)
        return st;
    s->cur_stream = sp;
    if (!s->mesh)
        return tsr__error(TSR_EINVAL, "no mesh (MESH_JOIN first)");
    if (len > RPC_PEER_DATA_MAX)
        return tsr__error(TSR_ERANGE, "%llu bytes (at most %llu per message)",
                          (unsigned long long)len, (unsigned long long)RPC_PEER_DATA_MAX);
    srv_buf *b;
    if ((st = tsr__srv_buf_range(s, bh, off, len, &b, what)) != TSR_OK)
        return st;
    if (!link_of(s->mesh, peer, what))
        return TSR_EINVAL;
    if (sp)
        tsr__srv_stream_quiesce(sp);
    else
        tsr__srv_quiesce_all(s);
    if (send) {
        const uint8_t *p = b->host ? b->host + off : tsr__srv_staging(s, (size_t)len);
        if (!p)
            return tsr__error(TSR_ENOMEM, "staging of %llu bytes", (unsigned long long)len);
        if (!b->host &&
            (st = tsr_tensor_get(&b->span, (void *)p, (size_t)off, (size_t)len)) != TSR_OK)
            return st;
        return tsr__srv_peer_send(s->mesh, peer, tag, p, (size_t)len);
    }
    srv_msg *m;
    if ((st = tsr__srv_peer_take(s->mesh, peer, tag, &m)) != TSR_OK)
        return st;
    if (m->len != len)
        st = tsr__error(TSR_EINVAL, "%zu bytes arrived for tag %llu from rank %u; %llu expected",
                        m->len, (unsigned long long)tag, peer, (unsigned long long)len);
    else if (b->host)
        memcpy(b->host + off, m->data, m->len);
    else
        st = tsr_tensor_set(&b->span, m->data, (size_t)off, m->len);
    tsr__srv_peer_done(s->mesh, peer, m);
    return st;
}
