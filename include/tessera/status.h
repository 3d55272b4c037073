/* tessera/status.h — status codes, error messages and the log callback.
 *
 * Every tessera function that can fail because of the outside world returns a
 * tsr_status: 0 for success, a negative code otherwise. The code says what kind
 * of failure it was; tsr_last_error() gives the sentence that says what failed,
 * where and how much (per thread, overwritten by the next failure). This is not
 * an exception mechanism: a failing call leaves nothing half-done behind.
 */
#ifndef TESSERA_STATUS_H
#define TESSERA_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, message): the one list of status codes. */
#define TSR_STATUS_LIST(X)                          \
    X(OK, 0, "success")                             \
    X(EINVAL, -1, "invalid argument")               \
    X(ESHAPE, -2, "shape mismatch")                 \
    X(ETYPE, -3, "unsupported type")                \
    X(ENOMEM, -4, "out of memory")                  \
    X(EDEVICE, -5, "device error")                  \
    X(EUNSUPPORTED, -6, "operation not supported")  \
    X(ENOTFOUND, -7, "not found")                   \
    X(EIO, -8, "input/output error")                \
    X(EFORMAT, -9, "malformed data")                \
    X(ETIMEDOUT, -10, "timed out")                  \
    X(EBUSY, -11, "resource busy")                  \
    X(ERANGE, -12, "value out of range")            \
    X(EPROTO, -13, "protocol error")                \
    X(EAUTH, -14, "authentication failed")          \
    X(ECLOSED, -15, "connection closed")            \
    X(ENOTHANDLED, -16, "not handled by this path") \
    X(EINTERNAL, -17, "internal error")

typedef enum tsr_status {
#define TSR__STATUS_ENUM(name, value, msg) TSR_##name = (value),
    TSR_STATUS_LIST(TSR__STATUS_ENUM)
#undef TSR__STATUS_ENUM
} tsr_status;

/* The fixed message of a code ("out of memory"); "unknown status" otherwise. */
const char *tsr_status_str(tsr_status status);

/* The code's name without prefix ("ENOMEM"). */
const char *tsr_status_name(tsr_status status);

/* The detailed message of the most recent failure on the calling thread, e.g.
 * "mul_mat: a [64, 32] and b [48, 7] disagree on ne[0]". Never NULL; "" when
 * nothing failed yet. Valid until the thread's next failing call. */
const char *tsr_last_error(void);

typedef enum tsr_log_level {
    TSR_LOG_DEBUG = 0,
    TSR_LOG_INFO = 1,
    TSR_LOG_WARN = 2,
    TSR_LOG_ERROR = 3,
    TSR_LOG_NONE = 4,
} tsr_log_level;

/* Receives one complete message (no trailing newline). May be called from any
 * thread, including backend worker threads; must not call back into tessera. */
typedef void (*tsr_log_fn)(tsr_log_level level, const char *msg, void *user);

/* Replaces the log sink (NULL restores the default: stderr). */
void tsr_log_set(tsr_log_fn fn, void *user);

/* Messages below `level` are dropped. The default comes from the environment
 * variable TSR_LOG (debug|info|warn|error|none), else warn. */
void tsr_log_set_level(tsr_log_level level);
tsr_log_level tsr_log_get_level(void);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_STATUS_H */
