/* backends/cpu/cpu_xcopy.c — copies into host memory, on a CPU stream, from
 * a tensor of another backend's device (a GPU, lavapipe): the asynchronous
 * path of tsr_backend_copy_async when the destination is a CPU stream and
 * the source is not; and waits on other devices' events.
 *
 * Not CPU → CPU copies (a memcpy job behind a wait on the source stream,
 * cpu_backend.c), nor copies into another device (that backend's entry).
 *
 * Design. An event is recorded on the source stream when the copy is asked
 * for; a job on the destination stream waits for it and then reads the bytes
 * with the source buffer's blocking get, so the caller never waits, the copy
 * is ordered after the work queued on both streams and before the
 * destination's later work, and the bytes are copied once (from mapped
 * memory, or through the source device's own staging). Records and their
 * events are pooled per stream and reused when the worker is done with
 * them: no allocation per copy once the pool has warmed up. A wait on
 * another device's event waits on a pooled copy of its mark, so the event
 * can be re-recorded at once without moving the wait. Remote and meta
 * sources are left to core's synchronized path: their blocking get goes
 * through other streams' machinery that a worker thread should not drive.
 */
#include <pthread.h>
#include <stdlib.h>

#include "backends/cpu/cpu_impl.h"

struct cpu_xrec {
    cpu_xpool *pool;
    tsr_dev *dev; /* the device `event` belongs to */
    tsr_event *event;
    const tsr_tensor *src;
    void *dst;
    size_t n;
    cpu_xrec *next; /* in the pool's free list */
};

struct cpu_xpool {
    pthread_mutex_t mu;
    cpu_xrec *free_list;
};

tsr_status tsr__cpu_xpool_new(cpu_xpool **out)
{
    cpu_xpool *p = calloc(1, sizeof(*p));
    if (!p)
        return tsr__error(TSR_ENOMEM, "CPU stream: out of memory for its copy pool");
    pthread_mutex_init(&p->mu, NULL);
    *out = p;
    return TSR_OK;
}

void tsr__cpu_xpool_free(cpu_xpool *p)
{
    if (!p)
        return;
    for (cpu_xrec *r = p->free_list, *next; r; r = next) {
        next = r->next;
        tsr_event_free(r->event);
        free(r);
    }
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* A free record whose event belongs to dev, or a new one. */
static tsr_status take(cpu_xpool *p, tsr_dev *dev, cpu_xrec **out)
{
    pthread_mutex_lock(&p->mu);
    for (cpu_xrec **link = &p->free_list; *link; link = &(*link)->next) {
        if ((*link)->dev == dev) {
            *out = *link;
            *link = (*link)->next;
            pthread_mutex_unlock(&p->mu);
            return TSR_OK;
        }
    }
    pthread_mutex_unlock(&p->mu);
    cpu_xrec *r = calloc(1, sizeof(*r));
    if (!r)
        return tsr__error(TSR_ENOMEM, "CPU stream: out of memory for a copy record");
    tsr_status st = tsr_event_new(dev, &r->event);
    if (st != TSR_OK) {
        free(r);
        return st;
    }
    r->pool = p;
    r->dev = dev;
    *out = r;
    return TSR_OK;
}

static void give_back(cpu_xrec *r)
{
    cpu_xpool *p = r->pool;
    r->src = NULL;
    r->dst = NULL;
    pthread_mutex_lock(&p->mu);
    r->next = p->free_list;
    p->free_list = r;
    pthread_mutex_unlock(&p->mu);
}

/* Runs on the destination stream's worker thread: waits for the event,
 * then copies when the record carries a copy (else it was only a wait). */
static tsr_status run(void *arg)
{
    cpu_xrec *r = arg;
    tsr_status st = tsr_event_synchronize(r->event);
    if (st == TSR_OK && r->src)
        st = tsr_tensor_get(r->src, r->dst, 0, r->n);
    if (st != TSR_OK && r->src)
        st = tsr__error(st, "copying '%s' (%zu bytes) from %s into host memory: %s", r->src->name,
                        r->n, tsr_dev_name(r->dev), tsr_last_error());
    else if (st != TSR_OK)
        st = tsr__error(st, "waiting for an event of %s: %s", tsr_dev_name(r->dev),
                        tsr_last_error());
    give_back(r);
    return st;
}

tsr_status tsr__cpu_xwait_push(cpu_xpool *p, cpu_stream *s, const tsr_event *event)
{
    if (!event->dev->iface->event_copy)
        return TSR_ENOTHANDLED;
    cpu_xrec *r = NULL;
    tsr_status st = take(p, event->dev, &r);
    if (st != TSR_OK)
        return st;
    if ((st = tsr__event_copy(r->event, event)) == TSR_OK &&
        (st = tsr__cpu_stream_push_fn(s, run, r)) == TSR_OK)
        return TSR_OK;
    give_back(r);
    return st;
}

bool tsr__cpu_xcopy_handles(tsr_backend *src_b, const tsr_tensor *src)
{
    tsr_dev *dev = tsr_backend_dev(src_b);
    const tsr_dev_type type = tsr_dev_get_type(dev);
    return src->buffer && type != TSR_DEV_REMOTE && type != TSR_DEV_META &&
           tsr_dev_get_caps(dev).events;
}

tsr_status tsr__cpu_xcopy_push(cpu_xpool *p, cpu_stream *s, tsr_backend *src_b,
                               const tsr_tensor *src, void *dst, size_t n)
{
    cpu_xrec *r = NULL;
    tsr_status st = take(p, tsr_backend_dev(src_b), &r);
    if (st != TSR_OK)
        return st;
    if ((st = tsr_event_record(r->event, src_b)) != TSR_OK) {
        give_back(r);
        return st;
    }
    r->src = src;
    r->dst = dst;
    r->n = n;
    if ((st = tsr__cpu_stream_push_fn(s, run, r)) != TSR_OK)
        give_back(r);
    return st;
}
