/* core/status.c — status names and messages, the per-thread last error, the
 * log sink and a few process-wide utilities (time, core count, env).
 *
 * The log sink is a single global function pointer swapped atomically; it is
 * not a logging framework (no files, no rotation).
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/internal.h"

const char *tsr_status_str(tsr_status status)
{
    switch (status) {
#define TSR__STATUS_STR(name, value, msg) \
    case TSR_##name:                      \
        return msg;
        TSR_STATUS_LIST(TSR__STATUS_STR)
#undef TSR__STATUS_STR
    }
    return "unknown status";
}

const char *tsr_status_name(tsr_status status)
{
    switch (status) {
#define TSR__STATUS_NAME(name, value, msg) \
    case TSR_##name:                       \
        return #name;
        TSR_STATUS_LIST(TSR__STATUS_NAME)
#undef TSR__STATUS_NAME
    }
    return "UNKNOWN";
}

static _Thread_local char last_error[512];

const char *tsr_last_error(void) { return last_error; }

tsr_status tsr__error(tsr_status status, const char *fmt, ...)
{
    /* Formatted aside first: callers often pass tsr_last_error() itself. */
    char msg[sizeof(last_error)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    memcpy(last_error, msg, sizeof(msg));
    tsr__log(TSR_LOG_DEBUG, "error %s: %s", tsr_status_name(status), last_error);
    return status;
}

/* ---- log ---------------------------------------------------------------- */

static _Atomic(tsr_log_fn) log_fn;
static void *_Atomic log_user;
static atomic_int log_level = -1; /* -1: not yet read from the environment */

static tsr_log_level log_level_from_env(void)
{
    const char *s = getenv("TSR_LOG");
    if (!s)
        return TSR_LOG_WARN;
    static const char *names[] = {"debug", "info", "warn", "error", "none"};
    for (int i = 0; i < (int)TSR_ARRAY_SIZE(names); i++)
        if (strcmp(s, names[i]) == 0)
            return (tsr_log_level)i;
    return TSR_LOG_WARN;
}

tsr_log_level tsr_log_get_level(void)
{
    int l = atomic_load(&log_level);
    if (l < 0) {
        l = (int)log_level_from_env();
        atomic_store(&log_level, l);
    }
    return (tsr_log_level)l;
}

void tsr_log_set_level(tsr_log_level level) { atomic_store(&log_level, (int)level); }

void tsr_log_set(tsr_log_fn fn, void *user)
{
    atomic_store(&log_user, user);
    atomic_store(&log_fn, fn);
}

bool tsr__log_enabled(tsr_log_level level) { return level >= tsr_log_get_level(); }

void tsr__log(tsr_log_level level, const char *fmt, ...)
{
    if (!tsr__log_enabled(level) || level >= TSR_LOG_NONE)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    tsr_log_fn fn = atomic_load(&log_fn);
    if (fn) {
        fn(level, msg, atomic_load(&log_user));
        return;
    }
    static const char *tags[] = {"debug", "info", "warn", "error"};
    fprintf(stderr, "tessera %s: %s\n", tags[level], msg);
}

void tsr__assert_fail(const char *cond, const char *file, int line)
{
    fprintf(stderr, "tessera: internal invariant failed: %s (%s:%d)\n", cond, file, line);
    abort();
}

/* ---- utilities ------------------------------------------------------------ */

uint64_t tsr__time_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int tsr__n_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}

long tsr__env_long(const char *name, long def)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return def;
    char *end;
    long v = strtol(s, &end, 10);
    return *end == '\0' ? v : def;
}
