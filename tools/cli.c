/* tools/cli.c — argument parsing, device names and small output helpers
 * for the `tessera` command. See tools/cli.h.
 *
 * Every parse failure prints one line naming the option and the bad text,
 * and the caller exits with status 2 (usage error).
 */
#include "tools/cli.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/rpc.h"

bool cli_long(const char *opt, const char *s, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    const long v = s ? strtol(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "tessera: %s: '%s' is not an integer in %ld..%ld\n", opt, s ? s : "", lo,
                hi);
        return false;
    }
    *out = v;
    return true;
}

bool cli_float(const char *opt, const char *s, double lo, double hi, float *out)
{
    char *end = NULL;
    errno = 0;
    const double v = s ? strtod(s, &end) : 0;
    if (!s || !*s || *end || errno || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "tessera: %s: '%s' is not a number in %g..%g\n", opt, s ? s : "", lo, hi);
        return false;
    }
    *out = (float)v;
    return true;
}

bool cli_u64(const char *opt, const char *s, uint64_t *out)
{
    char *end = NULL;
    errno = 0;
    const unsigned long long v = s && *s != '-' ? strtoull(s, &end, 10) : 0;
    if (!s || !*s || *s == '-' || *end || errno) {
        fprintf(stderr, "tessera: %s: '%s' is not a non-negative integer\n", opt, s ? s : "");
        return false;
    }
    *out = (uint64_t)v;
    return true;
}

/* Splits "name:index" (index optional). */
static bool split_entry(const char *e, size_t len, char *reg, size_t reg_size, long *idx)
{
    const char *colon = memchr(e, ':', len);
    const size_t nlen = colon ? (size_t)(colon - e) : len;
    if (nlen == 0 || nlen >= reg_size)
        return false;
    memcpy(reg, e, nlen);
    reg[nlen] = '\0';
    *idx = -1;
    if (colon) {
        char num[24];
        const size_t dl = len - nlen - 1;
        if (dl == 0 || dl >= sizeof(num))
            return false;
        memcpy(num, colon + 1, dl);
        num[dl] = '\0';
        for (size_t i = 0; i < dl; i++)
            if (!isdigit((unsigned char)num[i]))
                return false;
        *idx = strtol(num, NULL, 10);
    }
    return true;
}

void cli_prepare_cpu_devices(const char *list)
{
    if (!list || getenv("TSR_CPU_DEVICES"))
        return;
    long need = 1;
    for (const char *p = list; *p;) {
        const char *q = strchr(p, ',');
        const size_t len = q ? (size_t)(q - p) : strlen(p);
        char reg[32];
        long idx;
        if (split_entry(p, len, reg, sizeof(reg), &idx) && strcmp(reg, "cpu") == 0 &&
            idx + 1 > need)
            need = idx + 1;
        else if (len > 3 && strncmp(p, "cpu", 3) == 0 && isdigit((unsigned char)p[3]))
            need = CLI_MAX(need, strtol(p + 3, NULL, 10) + 1);
        p = q ? q + 1 : p + len;
    }
    if (need > 1 && need <= 64) {
        char v[16];
        snprintf(v, sizeof(v), "%ld", need);
        setenv("TSR_CPU_DEVICES", v, 0);
    }
}

bool cli_add_rpc(const char *cmd, const char *list)
{
    tsr_rpc_add_server_fn add =
        (tsr_rpc_add_server_fn)tsr_reg_get_proc(tsr_reg_by_name("rpc"), "tsr_rpc_add_server");
    if (!add) {
        fprintf(stderr, "tessera %s: --rpc %s: this build has no RPC support (TSR_RPC=OFF)\n", cmd,
                list);
        return false;
    }
    for (const char *p = list; *p;) {
        const char *q = strchr(p, ',');
        const size_t len = q ? (size_t)(q - p) : strlen(p);
        char ep[512];
        if (len == 0 || len >= sizeof(ep)) {
            fprintf(stderr, "tessera %s: --rpc: bad endpoint list '%s'\n", cmd, list);
            return false;
        }
        memcpy(ep, p, len);
        ep[len] = '\0';
        size_t first = 0, n = 0;
        if (add(ep, NULL, &first, &n) != TSR_OK) {
            fprintf(stderr, "tessera %s: --rpc %s: %s\n", cmd, ep, tsr_last_error());
            return false;
        }
        p = q ? q + 1 : p + len;
    }
    return true;
}

const char *cli_dev_name(tsr_dev *dev, char *buf, size_t size)
{
    tsr_reg *reg = tsr_dev_reg(dev);
    size_t idx = 0;
    for (size_t i = 0; i < tsr_reg_dev_count(reg); i++)
        if (tsr_reg_dev_get(reg, i) == dev)
            idx = i;
    snprintf(buf, size, "%s:%zu", tsr_reg_name(reg), idx);
    return buf;
}

bool cli_parse_devices(const char *list, tsr_dev **out, int max, int *n)
{
    *n = 0;
    for (const char *p = list; p && *p;) {
        const char *q = strchr(p, ',');
        const size_t len = q ? (size_t)(q - p) : strlen(p);
        char reg[32], entry[64];
        snprintf(entry, sizeof(entry), "%.*s", (int)CLI_MIN(len, sizeof(entry) - 1), p);
        long idx;
        tsr_dev *d = tsr_dev_by_name(entry);
        if (!d && split_entry(p, len, reg, sizeof(reg), &idx) && idx >= 0) {
            tsr_reg *r = tsr_reg_by_name(reg);
            if (!r) {
                fprintf(stderr, "tessera: --devices: no backend '%s' (see `tessera devices`)\n",
                        reg);
                return false;
            }
            d = tsr_reg_dev_get(r, (size_t)idx);
            if (!d) {
                fprintf(stderr, "tessera: --devices: '%s': %s has %zu device(s)%s\n", entry, reg,
                        tsr_reg_dev_count(r),
                        strcmp(reg, "cpu") == 0 ? " (TSR_CPU_DEVICES sets how many)" : "");
                return false;
            }
        }
        if (!d) {
            fprintf(stderr,
                    "tessera: --devices: no device '%s' (names look like cpu:0; see "
                    "`tessera devices`)\n",
                    entry);
            return false;
        }
        for (int j = 0; j < *n; j++)
            if (out[j] == d) {
                fprintf(stderr, "tessera: --devices: '%s' is listed twice\n", entry);
                return false;
            }
        if (*n == max) {
            fprintf(stderr, "tessera: --devices: more than %d devices\n", max);
            return false;
        }
        out[(*n)++] = d;
        p = q ? q + 1 : p + len;
    }
    if (*n == 0) {
        fprintf(stderr, "tessera: --devices: empty list\n");
        return false;
    }
    return true;
}

int cli_default_devices(tsr_dev **out, int max)
{
    int n = 0;
    for (size_t i = 0; i < tsr_dev_count() && n < max; i++)
        if ((tsr_dev_get_type(tsr_dev_get(i)) == TSR_DEV_GPU ||
             tsr_dev_get_type(tsr_dev_get(i)) == TSR_DEV_IGPU))
            out[n++] = tsr_dev_get(i);
    if (n > 0)
        return n;
    tsr_reg *cpu = tsr_cpu_reg();
    for (size_t i = 0; i < tsr_reg_dev_count(cpu) && n < max; i++)
        out[n++] = tsr_reg_dev_get(cpu, i);
    return n;
}

bool cli_floats(const char *opt, const char *s, float *out, int max, int *n)
{
    *n = 0;
    for (const char *p = s; p && *p;) {
        const char *q = strpbrk(p, ",:/");
        char item[64];
        const size_t len = q ? (size_t)(q - p) : strlen(p);
        snprintf(item, sizeof(item), "%.*s", (int)CLI_MIN(len, sizeof(item) - 1), p);
        if (*n == max) {
            fprintf(stderr, "tessera: %s: more than %d values\n", opt, max);
            return false;
        }
        if (!cli_float(opt, item, 0.0, 1e9, &out[(*n)++]))
            return false;
        p = q ? q + 1 : p + len;
    }
    return *n > 0;
}

bool cli_ints(const char *opt, const char *s, int32_t *out, int max, int *n)
{
    *n = 0;
    for (const char *p = s; p && *p;) {
        const char *q = strchr(p, ',');
        char item[64];
        const size_t len = q ? (size_t)(q - p) : strlen(p);
        snprintf(item, sizeof(item), "%.*s", (int)CLI_MIN(len, sizeof(item) - 1), p);
        long v;
        if (*n == max) {
            fprintf(stderr, "tessera: %s: more than %d values\n", opt, max);
            return false;
        }
        if (!cli_long(opt, item, 0, INT32_MAX, &v))
            return false;
        out[(*n)++] = (int32_t)v;
        p = q ? q + 1 : p + len;
    }
    if (*n == 0)
        fprintf(stderr, "tessera: %s: empty list\n", opt);
    return *n > 0;
}

void cli_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; p && *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

const char *cli_bytes(double bytes, char *buf, size_t size)
{
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 4) {
        bytes /= 1024.0;
        u++;
    }
    snprintf(buf, size, u ? "%.1f %s" : "%.0f %s", bytes, unit[u]);
    return buf;
}
