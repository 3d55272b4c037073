/* rpc_server/server_main.c — tessera-rpc-server: exposes this machine's
 * devices to tessera clients over NNG (tcp://, ipc://, tls+tcp://).
 *
 * This file is the program around the sessions: options, device choice,
 * the listener, one thread per client, and a clean shutdown on SIGINT or
 * SIGTERM (the listener closes, every connection is shut, every session
 * waits for its queued work and releases what it owned). It is not the
 * protocol (session*.c). Key design choice: the signal handler only writes
 * a byte to a pipe (libraries may have started threads before main, so
 * blocking signals everywhere is not possible); a watcher thread reads it
 * and closes the listener, so no handler ever runs library code.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/internal.h"
#include "rpc_server/server.h"
#include "tessera/tessera.h"

#define MAX_CLIENTS 64

typedef struct conn {
    pthread_t thread;
    rpc_io *io;
    const srv_config *cfg;
    volatile int done;
    struct conn *next;
    int id;
} conn;

static rpc_listener *g_listener;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile int g_stopping;
static int g_sigpipe[2] = {-1, -1};

static void usage(FILE *f)
{
    fprintf(f, "usage: tessera-rpc-server [options]\n"
               "\n"
               "Serves this machine's devices to tessera clients (tsr_rpc_add_server, tessera\n"
               "--rpc). Each client gets its own handles, streams and memory, released when it\n"
               "disconnects. SIGINT/SIGTERM stop the server cleanly.\n"
               "\n"
               "  --listen URL        tcp://HOST:PORT, ipc:///PATH or tls+tcp://HOST:PORT\n"
               "                      (default tcp://127.0.0.1:50052; port 0 picks a free port;\n"
               "                      the bound URL is printed on the first line of stdout)\n"
               "  --device NAME       expose this device (repeatable): cpu:N, vulkan:N, cuda:N,\n"
               "                      a registry name for all of its devices, or a device name;\n"
               "                      default: every local device\n"
               "  --threads N         CPU threads per client stream (default: the device's share)\n"
               "  --max-memory SIZE   bytes each client may allocate, e.g. 8G, 512M (default: the\n"
               "                      device's total memory)\n"
               "  --token-file PATH   require clients to prove they hold this shared secret\n"
               "                      (HMAC-SHA256 challenge/response; the token never travels)\n"
               "  --tls-cert PATH     server certificate (PEM) for tls+tcp://\n"
               "  --tls-key PATH      its private key (PEM)\n"
               "  --tls-ca PATH       require client certificates signed by this CA (PEM)\n"
               "  --no-peers          never connect to other servers (a client's copies between\n"
               "                      servers and its all-reduces then go through the client)\n"
               "\n"
               "Servers that one client uses connect to each other directly when the client asks\n"
               "(server-to-server copies and all-reduce), at the endpoints the client uses, with\n"
               "this server's --token-file and, for tls+tcp://, --tls-ca (to verify the peer) and\n"
               "--tls-cert/--tls-key (as its client certificate).\n");
}

static bool parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    const unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *s == '-')
        return false;
    uint64_t mul = 1;
    if (*end == 'K' || *end == 'k')
        mul = 1ull << 10;
    else if (*end == 'M' || *end == 'm')
        mul = 1ull << 20;
    else if (*end == 'G' || *end == 'g')
        mul = 1ull << 30;
    else if (*end == 'T' || *end == 't')
        mul = 1ull << 40;
    else if (*end)
        return false;
    if (mul > 1 && end[1] && !(end[1] == 'B' && !end[2]) && !(end[1] == 'i' && end[2] == 'B'))
        return false;
    return !__builtin_mul_overflow((uint64_t)v, mul, out);
}

/* Sets TSR_CPU_DEVICES for "cpu:K" requests before the registries start. */
static void prepare_cpu_devices(char **names, int n)
{
    long need = 1;
    for (int i = 0; i < n; i++)
        if (strncmp(names[i], "cpu:", 4) == 0)
            need = TSR_MAX(need, strtol(names[i] + 4, NULL, 10) + 1);
    if (need > 1 && need <= 64 && !getenv("TSR_CPU_DEVICES")) {
        char v[16];
        snprintf(v, sizeof(v), "%ld", need);
        setenv("TSR_CPU_DEVICES", v, 0);
    }
}

static bool add_dev(srv_config *cfg, tsr_dev *d)
{
    for (int i = 0; i < cfg->n_devs; i++)
        if (cfg->devs[i] == d)
            return true;
    if (cfg->n_devs >= SRV_MAX_DEVS) {
        fprintf(stderr, "tessera-rpc-server: more than %d devices\n", SRV_MAX_DEVS);
        return false;
    }
    cfg->devs[cfg->n_devs++] = d;
    return true;
}

static bool servable(tsr_dev *d)
{
    const tsr_dev_type t = tsr_dev_get_type(d);
    return t != TSR_DEV_REMOTE && t != TSR_DEV_META;
}

static bool resolve_device(srv_config *cfg, const char *name)
{
    char reg[32];
    const char *colon = strchr(name, ':');
    const size_t rl = colon ? (size_t)(colon - name) : strlen(name);
    snprintf(reg, sizeof(reg), "%.*s", (int)TSR_MIN(rl, sizeof(reg) - 1), name);
    tsr_reg *r = tsr_reg_by_name(reg);
    if (r && strcmp(reg, "rpc") != 0) {
        if (!colon) {
            for (size_t i = 0; i < tsr_reg_dev_count(r); i++)
                if (!add_dev(cfg, tsr_reg_dev_get(r, i)))
                    return false;
            if (tsr_reg_dev_count(r) > 0)
                return true;
        } else {
            char *end;
            const long idx = strtol(colon + 1, &end, 10);
            tsr_dev *d = *end || idx < 0 ? NULL : tsr_reg_dev_get(r, (size_t)idx);
            if (d)
                return add_dev(cfg, d);
        }
    }
    tsr_dev *d = tsr_dev_by_name(name);
    if (d && servable(d))
        return add_dev(cfg, d);
    fprintf(stderr,
            "tessera-rpc-server: --device %s: no such local device (see `tessera devices`)\n",
            name);
    return false;
}

static bool is_loopback(const char *url)
{
    if (strncmp(url, "ipc://", 6) == 0)
        return true;
    const char *h = strstr(url, "://");
    h = h ? h + 3 : url;
    return strncmp(h, "127.", 4) == 0 || strncmp(h, "localhost:", 10) == 0 ||
           strncmp(h, "[::1]", 5) == 0;
}

/* ---- connections ---------------------------------------------------------------------------- */

static void *conn_main(void *arg)
{
    conn *c = arg;
    srv_session s;
    if (!tsr__srv_session_init(&s, c->cfg, c->io)) {
        TSR_LOG_E("rpc server: client %d: out of memory", c->id);
    } else {
        const tsr_status st = tsr__srv_session_run(&s);
        if (s.handed_over)
            TSR_LOG_I("rpc server: client %d is a peer server's link now", c->id);
        else
            TSR_LOG_I("rpc server: client %d: session ended after %llu frames (%s%s%s)", c->id,
                      (unsigned long long)s.frames, tsr_status_name(st),
                      st == TSR_ECLOSED ? "" : ": ", st == TSR_ECLOSED ? "" : tsr_last_error());
        /* A link's connection belongs to its mesh from now on. */
        pthread_mutex_lock(&g_lock);
        if (s.handed_over)
            c->io = NULL;
        pthread_mutex_unlock(&g_lock);
        tsr__srv_session_free(&s);
    }
    pthread_mutex_lock(&g_lock);
    if (c->io)
        c->io->shutdown(c->io);
    pthread_mutex_unlock(&g_lock);
    c->done = 1;
    return NULL;
}

static void reap(conn **list, bool all)
{
    for (conn **p = list; *p;) {
        conn *c = *p;
        pthread_mutex_lock(&g_lock);
        if (all && c->io)
            c->io->shutdown(c->io);
        pthread_mutex_unlock(&g_lock);
        if (all || c->done) {
            pthread_join(c->thread, NULL);
            if (c->io)
                c->io->free(c->io);
            *p = c->next;
            free(c);
        } else {
            p = &c->next;
        }
    }
}

static int count(const conn *c)
{
    int n = 0;
    for (; c; c = c->next)
        n++;
    return n;
}

static void on_signal(int sig)
{
    const unsigned char b = (unsigned char)sig;
    if (write(g_sigpipe[1], &b, 1) < 0) {
        /* Nothing else is safe here. */
    }
}

static void *signal_main(void *arg)
{
    (void)arg;
    unsigned char b;
    while (read(g_sigpipe[0], &b, 1) < 0 && errno == EINTR) {
    }
    pthread_mutex_lock(&g_lock);
    g_stopping = 1;
    tsr__rpc_listener_close(g_listener);
    pthread_mutex_unlock(&g_lock);
    return NULL;
}

static int serve(const char *url, const rpc_tls_server *tls, srv_config *cfg)
{
    char nurl[256];
    tsr_status st = tsr__rpc_endpoint_url(url, nurl, sizeof(nurl));
    if (st == TSR_OK)
        st = tsr__rpc_listen(nurl, tls, &g_listener);
    if (st != TSR_OK) {
        fprintf(stderr, "tessera-rpc-server: %s\n", tsr_last_error());
        return 1;
    }
    pthread_mutex_lock(&g_lock);
    if (g_stopping) /* a signal came before the listener existed */
        tsr__rpc_listener_close(g_listener);
    pthread_mutex_unlock(&g_lock);
    const int port = tsr__rpc_listener_port(g_listener);
    char shown[300];
    const char *colon = strrchr(nurl, ':');
    if (port > 0 && colon && strncmp(nurl, "ipc", 3) != 0)
        snprintf(shown, sizeof(shown), "%.*s:%d", (int)(colon - nurl), nurl, port);
    else
        snprintf(shown, sizeof(shown), "%s", nurl);
    printf("tessera-rpc-server: listening on %s, devices:", shown);
    for (int i = 0; i < cfg->n_devs; i++)
        printf(" %s", tsr_dev_name(cfg->devs[i]));
    printf("%s\n", cfg->token.len ? " (token required)" : "");
    fflush(stdout);
    if (!is_loopback(nurl) && strncmp(nurl, "tls+", 4) != 0 && cfg->token.len == 0)
        fprintf(stderr,
                "tessera-rpc-server: warning: %s is reachable from other machines without TLS or "
                "a token: anyone who can connect can read and write this machine's device "
                "memory. Use --token-file and tls+tcp://.\n",
                shown);
    conn *list = NULL;
    int next_id = 0;
    for (;;) {
        rpc_io *io;
        st = tsr__rpc_accept(g_listener, &io);
        if (st != TSR_OK)
            break;
        reap(&list, false);
        if (count(list) >= MAX_CLIENTS) {
            TSR_LOG_W("rpc server: %d clients already; refusing one", MAX_CLIENTS);
            io->free(io);
            continue;
        }
        conn *c = calloc(1, sizeof(*c));
        if (!c) {
            io->free(io);
            continue;
        }
        *c = (conn){.io = io, .cfg = cfg, .id = next_id++, .next = list};
        if (pthread_create(&c->thread, NULL, conn_main, c) != 0) {
            io->free(io);
            free(c);
            continue;
        }
        list = c;
        TSR_LOG_I("rpc server: client %d connected", c->id);
    }
    reap(&list, true);
    pthread_mutex_lock(&g_lock);
    tsr__rpc_listener_free(g_listener);
    g_listener = NULL;
    pthread_mutex_unlock(&g_lock);
    printf("tessera-rpc-server: stopped\n");
    fflush(stdout);
    return g_stopping ? 0 : 1;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {{"listen", required_argument, 0, 'l'},
                                             {"device", required_argument, 0, 'd'},
                                             {"threads", required_argument, 0, 't'},
                                             {"max-memory", required_argument, 0, 'm'},
                                             {"token-file", required_argument, 0, 'k'},
                                             {"tls-cert", required_argument, 0, 'c'},
                                             {"tls-key", required_argument, 0, 'y'},
                                             {"tls-ca", required_argument, 0, 'a'},
                                             {"no-peers", no_argument, 0, 'P'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    static srv_config cfg = {.handshake_timeout_ms = 10000, .io_timeout_ms = 60000, .peers = true};
    const char *url = "tcp://127.0.0.1:50052", *token_file = NULL;
    rpc_tls_server tls = {0};
    char *devnames[SRV_MAX_DEVS];
    int n_names = 0, c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'l':
            url = optarg;
            break;
        case 'd':
            if (n_names == SRV_MAX_DEVS) {
                fprintf(stderr, "tessera-rpc-server: more than %d --device\n", SRV_MAX_DEVS);
                return 2;
            }
            devnames[n_names++] = optarg;
            break;
        case 't': {
            char *end;
            const long v = strtol(optarg, &end, 10);
            if (*end || v < 1 || v > 256) {
                fprintf(stderr, "tessera-rpc-server: --threads %s: not in 1..256\n", optarg);
                return 2;
            }
            cfg.threads = (int)v;
            break;
        }
        case 'm':
            if (!parse_size(optarg, &cfg.max_memory) || cfg.max_memory == 0) {
                fprintf(stderr, "tessera-rpc-server: --max-memory %s: not a size (e.g. 8G)\n",
                        optarg);
                return 2;
            }
            break;
        case 'k':
            token_file = optarg;
            break;
        case 'c':
            tls.cert_file = optarg;
            break;
        case 'y':
            tls.key_file = optarg;
            break;
        case 'a':
            tls.ca_file = optarg;
            break;
        case 'P':
            cfg.peers = false;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            fprintf(stderr, "tessera-rpc-server: unknown option '%s' (see --help)\n",
                    argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "tessera-rpc-server: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (token_file && tsr__rpc_token_read(token_file, &cfg.token) != TSR_OK) {
        fprintf(stderr, "tessera-rpc-server: %s\n", tsr_last_error());
        return 1;
    }
    cfg.peer_opt = (tsr_rpc_options){.token = cfg.token.bytes,
                                     .token_len = cfg.token.len,
                                     .tls_ca_file = tls.ca_file,
                                     .tls_cert_file = tls.cert_file,
                                     .tls_key_file = tls.key_file};
    /* This process never acts on a remote client's say-so: the clients of
     * the library's own registry are not wanted here. */
    unsetenv("TSR_RPC_SERVERS");
    unsetenv("TSR_RPC_TOKEN_FILE"); /* peers get this server's own token, or none */
    if (pipe(g_sigpipe) != 0) {
        fprintf(stderr, "tessera-rpc-server: pipe: %s\n", strerror(errno));
        return 1;
    }
    pthread_t sig_thread;
    pthread_create(&sig_thread, NULL, signal_main, NULL);
    pthread_detach(sig_thread);
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    prepare_cpu_devices(devnames, n_names);
    for (int i = 0; i < n_names; i++)
        if (!resolve_device(&cfg, devnames[i]))
            return 2;
    if (n_names == 0)
        for (size_t i = 0; i < tsr_dev_count(); i++)
            if (servable(tsr_dev_get(i)) && !add_dev(&cfg, tsr_dev_get(i)))
                return 2;
    if (cfg.n_devs == 0) {
        fprintf(stderr, "tessera-rpc-server: no devices to serve\n");
        return 1;
    }
    tsr__srv_config_probe(&cfg);
    return serve(url, tls.cert_file || tls.key_file || tls.ca_file ? &tls : NULL, &cfg);
}
