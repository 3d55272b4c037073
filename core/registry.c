/* core/registry.c — the list of backend registries and the global device
 * list built from it.
 *
 * Built-in registries (CPU always; CUDA, Vulkan, RPC when compiled in) are
 * created once, on the first call that needs the list; a registry whose
 * initialization finds no hardware still registers, with zero devices.
 * Registries added later (tsr_reg_add) are appended. The list only grows, so
 * pointers handed out stay valid.
 */
#include <pthread.h>
#include <string.h>

#include "core/backend_impl.h"
#include "core/internal.h"
#include "core/registry.h"

#define MAX_REGS 32

static pthread_mutex_t regs_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t regs_once = PTHREAD_ONCE_INIT;
static tsr_reg *regs[MAX_REGS];
static size_t n_regs;

static void add_locked(tsr_reg *reg)
{
    if (reg && n_regs < MAX_REGS)
        regs[n_regs++] = reg;
}

static void builtin_init(void)
{
    pthread_mutex_lock(&regs_lock);
    for (size_t i = 0; tsr__builtin_regs[i]; i++)
        add_locked(tsr__builtin_regs[i]());
    pthread_mutex_unlock(&regs_lock);
}

static void ensure_init(void) { pthread_once(&regs_once, builtin_init); }

size_t tsr_reg_count(void)
{
    ensure_init();
    pthread_mutex_lock(&regs_lock);
    size_t n = n_regs;
    pthread_mutex_unlock(&regs_lock);
    return n;
}

tsr_reg *tsr_reg_get(size_t i)
{
    ensure_init();
    pthread_mutex_lock(&regs_lock);
    tsr_reg *r = i < n_regs ? regs[i] : NULL;
    pthread_mutex_unlock(&regs_lock);
    return r;
}

tsr_reg *tsr_reg_by_name(const char *name)
{
    if (!name)
        return NULL;
    const size_t n = tsr_reg_count();
    for (size_t i = 0; i < n; i++) {
        tsr_reg *r = tsr_reg_get(i);
        if (strcmp(tsr_reg_name(r), name) == 0)
            return r;
    }
    return NULL;
}

tsr_status tsr_reg_add(tsr_reg *reg)
{
    if (!reg || !reg->iface)
        return tsr__error(TSR_EINVAL, "reg_add: NULL registry");
    ensure_init();
    pthread_mutex_lock(&regs_lock);
    tsr_status st = TSR_OK;
    for (size_t i = 0; i < n_regs; i++)
        if (regs[i] == reg || strcmp(tsr_reg_name(regs[i]), tsr_reg_name(reg)) == 0)
            st = tsr__error(TSR_EBUSY, "reg_add: a registry named '%s' exists", tsr_reg_name(reg));
    if (st == TSR_OK && n_regs >= MAX_REGS)
        st = tsr__error(TSR_ENOMEM, "reg_add: more than %d registries", MAX_REGS);
    if (st == TSR_OK)
        regs[n_regs++] = reg;
    pthread_mutex_unlock(&regs_lock);
    return st;
}

const char *tsr_reg_name(tsr_reg *reg) { return reg->iface->get_name(reg); }
size_t tsr_reg_dev_count(tsr_reg *reg) { return reg->iface->get_dev_count(reg); }

tsr_dev *tsr_reg_dev_get(tsr_reg *reg, size_t i)
{
    return i < tsr_reg_dev_count(reg) ? reg->iface->get_dev(reg, i) : NULL;
}

void *tsr_reg_get_proc(tsr_reg *reg, const char *name)
{
    if (!reg || !name || !reg->iface->get_proc)
        return NULL;
    return reg->iface->get_proc(reg, name);
}

size_t tsr_dev_count(void)
{
    size_t total = 0;
    const size_t n = tsr_reg_count();
    for (size_t i = 0; i < n; i++)
        total += tsr_reg_dev_count(tsr_reg_get(i));
    return total;
}

tsr_dev *tsr_dev_get(size_t i)
{
    const size_t n = tsr_reg_count();
    for (size_t r = 0; r < n; r++) {
        tsr_reg *reg = tsr_reg_get(r);
        const size_t c = tsr_reg_dev_count(reg);
        if (i < c)
            return tsr_reg_dev_get(reg, i);
        i -= c;
    }
    return NULL;
}

tsr_dev *tsr_dev_by_name(const char *name)
{
    if (!name)
        return NULL;
    const size_t n = tsr_dev_count();
    for (size_t i = 0; i < n; i++) {
        tsr_dev *d = tsr_dev_get(i);
        if (d && strcmp(tsr_dev_name(d), name) == 0)
            return d;
    }
    return NULL;
}
