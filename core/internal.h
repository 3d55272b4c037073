/* core/internal.h — helpers shared by every part of the library: error
 * recording, logging, checked arithmetic, small utilities.
 *
 * Not a public header: nothing here is installed. Backends, meta and comm
 * include it for the helpers, never for another part's internals.
 */
#ifndef TESSERA_CORE_INTERNAL_H
#define TESSERA_CORE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera/status.h"
#include "tessera/tensor.h"

#if defined(__GNUC__)
#define TSR__PRINTF(a, b) __attribute__((format(printf, a, b)))
#define TSR__UNUSED __attribute__((unused))
#else
#define TSR__PRINTF(a, b)
#define TSR__UNUSED
#endif

/* Records `fmt` as the calling thread's last error (tsr_last_error), logs it
 * at debug level and returns `status`, so callers write
 * `return tsr__error(TSR_EINVAL, "...", ...)`. */
tsr_status tsr__error(tsr_status status, const char *fmt, ...) TSR__PRINTF(2, 3);

/* Sends a message to the log sink if `level` passes the threshold. */
void tsr__log(tsr_log_level level, const char *fmt, ...) TSR__PRINTF(2, 3);
bool tsr__log_enabled(tsr_log_level level);

#define TSR_LOG_D(...) tsr__log(TSR_LOG_DEBUG, __VA_ARGS__)
#define TSR_LOG_I(...) tsr__log(TSR_LOG_INFO, __VA_ARGS__)
#define TSR_LOG_W(...) tsr__log(TSR_LOG_WARN, __VA_ARGS__)
#define TSR_LOG_E(...) tsr__log(TSR_LOG_ERROR, __VA_ARGS__)

/* Invariant checks for our own bugs only: never for data from outside. */
#define TSR_ASSERT(cond)                                 \
    do {                                                 \
        if (!(cond))                                     \
            tsr__assert_fail(#cond, __FILE__, __LINE__); \
    } while (0)
_Noreturn void tsr__assert_fail(const char *cond, const char *file, int line);

/* Overflow-checked size arithmetic: false when the result does not fit. */
static inline bool tsr__mul_ok(size_t a, size_t b, size_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool tsr__add_ok(size_t a, size_t b, size_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

static inline size_t tsr__align_up(size_t x, size_t align)
{
    return (x + align - 1) / align * align;
}

#define TSR_MIN(a, b) ((a) < (b) ? (a) : (b))
#define TSR_MAX(a, b) ((a) > (b) ? (a) : (b))
#define TSR_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

struct tsr_buft;
struct tsr_tensor;
/* A buffer type's check of a tensor before placement (TSR_OK by default). */
tsr_status tsr__buft_check_tensor(struct tsr_buft *buft, const struct tsr_tensor *t);
/* The node `op` with parameters `op_params` (TSR_MAX_OP_PARAMS words) over
 * sources src, built by its constructor, which re-checks every shape; ne is
 * the result shape CONT needs. NULL when the constructor refuses (its
 * reason is in the context) or for ops without a constructor here (views,
 * NONE). */
tsr_tensor *tsr__op_rebuild(tsr_ctx *ctx, tsr_op op, const int32_t *op_params, tsr_tensor **src,
                            const int64_t ne[4]);

/* Monotonic time in nanoseconds. */
uint64_t tsr__time_ns(void);

/* Number of online CPU cores (at least 1). */
int tsr__n_cores(void);

/* Reads an integer environment variable; `def` when unset or malformed. */
long tsr__env_long(const char *name, long def);

#endif /* TESSERA_CORE_INTERNAL_H */
