/* bench/raw_nng.h — the raw NNG baseline of the RPC benchmarks (raw_nng.c):
 * a forked peer that, per request {u64 op, u64 size}, echoes the bytes
 * (RAW_ECHO), answers one byte (RAW_SINK) or sends size bytes (RAW_SOURCE). */
#ifndef TESSERA_BENCH_RAW_NNG_H
#define TESSERA_BENCH_RAW_NNG_H

#include <nng/nng.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum { RAW_ECHO = 1, RAW_SINK = 2, RAW_SOURCE = 3 };

typedef struct {
    nng_stream *s;
    nng_aio *aio;
    int timeout_ms; /* the client side waits with a timeout, as the RPC client does */
} raw;

typedef struct {
    pid_t pid;
    char url[300];
} raw_server;

/* Forks a peer listening on `listen` (tcp://127.0.0.1:0 or ipc://PATH); call
 * it before this process touches NNG (NNG is not fork-safe). Exits the
 * process when the peer does not start. */
raw_server raw_start(const char *listen);
void raw_stop(raw_server *rs);
raw raw_connect(const char *url);
/* One request and its answer (data: size bytes out for ECHO/SINK, and the
 * echo or source bytes back into it). */
void raw_req(raw *r, uint64_t op, void *data, size_t size);
void raw_close(raw *r);

#endif /* TESSERA_BENCH_RAW_NNG_H */
