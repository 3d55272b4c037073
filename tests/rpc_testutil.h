/* tests/rpc_testutil.h — helpers of the RPC tests: starting and stopping
 * tessera-rpc-server processes on ports chosen at run time, a raw protocol
 * client that sends any frame (valid or not), and the builder of valid
 * frame sequences that the fuzz seeds and the live fuzz test mutate.
 *
 * No Criterion here: the ctest launcher (rpc_launch.c) and the fuzz seed
 * writer use it too.
 */
#ifndef TESSERA_RPC_TESTUTIL_H
#define TESSERA_RPC_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "backends/rpc/rpc_io.h"
#include "backends/rpc/rpc_proto.h"

/* ---- server processes ----------------------------------------------------------------------- */

typedef struct rt_server {
    pid_t pid;
    char url[300]; /* the URL it listens on, with the port it bound */
} rt_server;

/* The tessera-rpc-server binary (TSR_RPC_SERVER_BIN, or $TSR_RPC_SERVER). */
const char *rt_server_bin(void);
/* Starts a server listening on `listen` (NULL: tcp://127.0.0.1:0, a free
 * port), with extra arguments (NULL-terminated, may be NULL), and waits up
 * to 20 s for its "listening on" line. False (with a message on stderr) when
 * it did not come up. */
bool rt_server_start(rt_server *s, const char *listen, const char *const *args);
/* SIGTERM, then waits up to 20 s (SIGKILL after). Returns the exit status
 * (0 = clean, leak-free under LeakSanitizer), or -1 when it had to be killed
 * or died of a signal. */
int rt_server_stop(rt_server *s);
/* kill -9, and reaps it. */
void rt_server_kill9(rt_server *s);
/* True while the process runs. */
bool rt_server_alive(rt_server *s);

/* A fresh private directory under $TMPDIR (or /tmp). */
bool rt_tmpdir(char *out, size_t size);
/* Writes text to path (created or truncated); false when it cannot. */
bool rt_write_text(const char *path, const char *text);

/* ---- the raw client ------------------------------------------------------------------------- */

typedef struct rt_raw {
    rpc_io *io;
    rpc_reader rd;
    uint64_t next_id;
    uint16_t version; /* of the frames it sends: 0 means 1 */
} rt_raw;

/* Connects; with hello, also does HELLO (version 1, no token). */
tsr_status rt_raw_connect(rt_raw *c, const char *url, bool hello);
/* Connects and negotiates protocol version 2 (no token); later frames carry 2. */
tsr_status rt_raw_connect_v2(rt_raw *c, const char *url);
void rt_raw_close(rt_raw *c);
/* Sends raw bytes as they are. */
tsr_status rt_raw_write(rt_raw *c, const void *p, size_t n);
/* One request (a well-formed header around payload); *id gets its id. */
tsr_status rt_raw_send(rt_raw *c, uint16_t cmd, uint32_t flags, const void *payload, size_t len,
                       uint64_t *id);
/* Reads one reply frame: its header, and up to cap payload bytes into out
 * (the rest is dropped); *len = the payload length. */
tsr_status rt_raw_recv(rt_raw *c, rpc_hdr *h, void *out, size_t cap, size_t *len, int timeout_ms);
/* send (REPLY_WANTED) + recv. An error reply's reason is copied to
 * `reason` (NUL-terminated) when given. */
tsr_status rt_raw_call(rt_raw *c, uint16_t cmd, const void *payload, size_t len, rpc_hdr *h,
                       void *out, size_t cap, size_t *got, char *reason, size_t reason_size);

/* ---- frames --------------------------------------------------------------------------------- */

/* The handles a fresh session hands out, in order: buffer A (BUF_ALLOC),
 * stream (STREAM_OPEN), event (EVENT_NEW), buffer B (BUF_ALLOC). */
#define RT_H_BUF_A 0x0100000100000000ull
#define RT_H_STREAM 0x0200000100000001ull
#define RT_H_EVENT 0x0300000100000002ull
#define RT_H_BUF_B 0x0100000100000003ull
#define RT_BUF_SIZE 4096

/* Appends one frame (header + payload) to w. */
void rt_frame(rpc_wr *w, uint16_t cmd, uint32_t flags, uint64_t id, const void *payload,
              size_t len);
/* Appends the frames that create the objects above (buffers of RT_BUF_SIZE
 * bytes on device 0), each wanting a reply. With hello, a HELLO first. */
void rt_setup_frames(rpc_wr *w, bool hello);
/* Appends a valid exercise of every command on those objects (sets, a small
 * graph and its recompute, gets, 2-D, memset, copy, events, device queries,
 * ping, supports_op); `variant` picks among a few shapes and values. */
void rt_exercise_frames(rpc_wr *w, int variant);
/* Appends a tensor record (a helper for graph payloads). */
void rt_rec(rpc_wr *w, uint32_t type, uint32_t op, const int64_t ne[4], const int32_t *src,
            int n_src, int32_t view_src, uint32_t flags, uint64_t buffer, uint64_t offset,
            const int32_t *op_params, const char *name);

#endif /* TESSERA_RPC_TESTUTIL_H */
