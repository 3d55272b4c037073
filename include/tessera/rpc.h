/* tessera/rpc.h — remote devices: the devices of a tessera-rpc-server on
 * another machine (or process), used like local ones.
 *
 * Available when tessera is built with TSR_RPC (CMake finds NNG). Each
 * server added with tsr_rpc_add_server contributes one device per device it
 * exposes to the "rpc" registry ("rpc0", "rpc1", ... in the order added; the
 * tessera command calls them rpc:0, rpc:1). Their streams are asynchronous:
 * commands that need no answer are pipelined (sent without waiting), and
 * their errors come back at the next tsr_backend_synchronize; reads and
 * synchronizations wait. Every wait has a timeout: a dead or restarted server
 * turns into TSR_EDEVICE or TSR_ETIMEDOUT naming the endpoint and device,
 * never a hang. The wire protocol is docs/rpc-protocol.md.
 *
 * Environment (read when options are NULL or leave a field unset, and by the
 * registry the first time it is used):
 *   TSR_RPC_SERVERS=EP[,EP...]      servers the registry adds by itself
 *   TSR_RPC_TOKEN_FILE=PATH         the shared secret of servers started with --token-file
 *   TSR_RPC_TLS_CA=PATH             CA certificate (PEM) that verifies tls+tcp:// servers
 *   TSR_RPC_TLS_CERT / TSR_RPC_TLS_KEY   a client certificate, for servers that require one
 *   TSR_RPC_TIMEOUT_MS=N            control commands (default 5000)
 *   TSR_RPC_COMPUTE_TIMEOUT_MS=N    waits that may sit behind queued compute (default 30000)
 */
#ifndef TESSERA_RPC_H
#define TESSERA_RPC_H

#include <stddef.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tsr_rpc_options {
    /* The server's shared secret: token/token_len bytes, else the contents of
     * token_file (one trailing newline dropped); neither: TSR_RPC_TOKEN_FILE
     * or no token. */
    const void *token;
    size_t token_len;
    const char *token_file;
    /* tls+tcp:// only: the CA that signs the server's certificate (without
     * one the server is not verified and a warning is logged), an optional
     * client certificate and key, and the name the certificate must carry
     * (default: the endpoint's host). PEM files. */
    const char *tls_ca_file;
    const char *tls_cert_file;
    const char *tls_key_file;
    const char *tls_server_name;
    /* Milliseconds; 0 means the default. */
    int timeout_ms;         /* control commands and connecting (5000) */
    int compute_timeout_ms; /* replies that may wait for queued compute (30000) */
} tsr_rpc_options;

/* The RPC registry (also reachable as tsr_reg_by_name("rpc")). */
tsr_reg *tsr_rpc_reg(void);

/* Connects to a server and adds one device per device it exposes. endpoint:
 * "tcp://host:port", "ipc:///path", "tls+tcp://host:port", or "host:port"
 * (tcp). options may be NULL (defaults and environment). On success the new
 * devices are registry indices [*first, *first + *n) of tsr_rpc_reg() (either
 * pointer may be NULL). Blocks for at most the control timeout per step.
 * TSR_EDEVICE (cannot connect), TSR_ETIMEDOUT, TSR_EAUTH (token refused or
 * missing), TSR_EPROTO (not a tessera server, no common protocol version),
 * TSR_EINVAL (bad endpoint or options), TSR_ENOMEM (too many devices); the
 * message names the endpoint. Also reachable as get_proc("tsr_rpc_add_server"). */
tsr_status tsr_rpc_add_server(const char *endpoint, const tsr_rpc_options *options, size_t *first,
                              size_t *n);
typedef tsr_status (*tsr_rpc_add_server_fn)(const char *endpoint, const tsr_rpc_options *options,
                                            size_t *first, size_t *n);

/* Blocking round trips made so far on the connection that serves dev: each
 * wait for a reply that followed a send (replies read together count
 * once). 0 for a device that is not remote. Benchmarks count them per
 * decode step. Also reachable as get_proc("tsr_rpc_round_trips"). */
uint64_t tsr_rpc_round_trips(tsr_dev *dev);
typedef uint64_t (*tsr_rpc_round_trips_fn)(tsr_dev *dev);

/* What the client did on the connection that serves dev (all its streams),
 * since it was added. Zeros for a device that is not remote. */
typedef struct tsr_rpc_stats {
    uint64_t round_trips;         /* as tsr_rpc_round_trips */
    uint64_t graphs_sent;         /* GRAPH_COMPUTE: the graph went over the wire */
    uint64_t graphs_by_reference; /* GRAPH_RECOMPUTE: a graph the server holds, re-run by id */
} tsr_rpc_stats;
void tsr_rpc_stats_get(tsr_dev *dev, tsr_rpc_stats *out);

/* True when backend is a stream of a remote device. */
bool tsr_backend_is_rpc(tsr_backend *backend);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_RPC_H */
