/* rpc_server/handles.c — the per-connection table that turns opaque handles
 * into objects.
 *
 * Not shared between connections: a handle means something only on the
 * connection that received it, so a client can never name another client's
 * objects, whatever number it sends. A slot's generation grows each time the
 * slot is reused, so a stale handle fails instead of reaching a newer object.
 * Layout of a handle: rpc_proto.h ("handles").
 */
#include <stdlib.h>

#include "core/internal.h"
#include "rpc_server/server.h"

#define GEN_MASK 0xffffffu

void tsr__srv_handles_free(srv_handles *h)
{
    free(h->slots);
    free(h->free_list);
    *h = (srv_handles){0};
}

static uint64_t make(uint8_t kind, uint32_t gen, uint32_t slot)
{
    return (uint64_t)kind << 56 | (uint64_t)(gen & GEN_MASK) << 32 | slot;
}

uint64_t tsr__srv_handle_new(srv_handles *h, uint8_t kind, void *obj)
{
    if (kind == RPC_H_STREAM && h->n_streams >= SRV_MAX_STREAMS) {
        tsr__error(TSR_ENOMEM, "this connection already holds %d streams", SRV_MAX_STREAMS);
        return 0;
    }
    uint32_t i;
    if (h->n_free > 0) {
        i = h->free_list[--h->n_free];
    } else {
        if (h->n >= SRV_MAX_HANDLES) {
            tsr__error(TSR_ENOMEM, "this connection already holds %d objects", SRV_MAX_HANDLES);
            return 0;
        }
        if (h->n == h->cap) {
            const uint32_t cap = h->cap ? 2 * h->cap : 64;
            srv_slot *s = realloc(h->slots, cap * sizeof(*s));
            if (!s) {
                tsr__error(TSR_ENOMEM, "handle table of %u entries", cap);
                return 0;
            }
            uint32_t *f = realloc(h->free_list, cap * sizeof(*f));
            if (!f) {
                h->slots = s;
                tsr__error(TSR_ENOMEM, "handle table of %u entries", cap);
                return 0;
            }
            h->slots = s;
            h->free_list = f;
            h->cap = cap;
        }
        i = h->n++;
        h->slots[i] = (srv_slot){.gen = 0};
    }
    srv_slot *s = &h->slots[i];
    s->gen = (s->gen + 1) & GEN_MASK;
    if (s->gen == 0)
        s->gen = 1;
    s->kind = kind;
    s->obj = obj;
    if (kind == RPC_H_STREAM)
        h->n_streams++;
    return make(kind, s->gen, i);
}

void *tsr__srv_handle_get(const srv_handles *h, uint64_t handle, uint8_t kind)
{
    const uint32_t i = (uint32_t)handle;
    if (rpc_handle_kind(handle) != kind || i >= h->n)
        return NULL;
    const srv_slot *s = &h->slots[i];
    if (s->kind != kind || s->gen != ((handle >> 32) & GEN_MASK))
        return NULL;
    return s->obj;
}

void tsr__srv_handle_drop(srv_handles *h, uint64_t handle)
{
    const uint32_t i = (uint32_t)handle;
    if (i >= h->n || h->slots[i].kind == 0)
        return;
    if (h->slots[i].kind == RPC_H_STREAM)
        h->n_streams--;
    h->slots[i].kind = 0;
    h->slots[i].obj = NULL;
    h->free_list[h->n_free++] = i;
}

void *tsr__srv_handle_next(const srv_handles *h, uint8_t kind, uint32_t *i, uint64_t *handle)
{
    for (; *i < h->n; (*i)++) {
        const srv_slot *s = &h->slots[*i];
        if (s->kind == kind) {
            if (handle)
                *handle = make(kind, s->gen, *i);
            return h->slots[(*i)++].obj;
        }
    }
    return NULL;
}
