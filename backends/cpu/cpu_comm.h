/* backends/cpu/cpu_comm.h — the CPU backend's native all-reduce: the three
 * entries of the comm protocol (tessera/comm.h) that the CPU registry
 * exports by name, and the summation kernels they run. Not installed.
 *
 * Not the engine that chooses a path (comm/allreduce.c).
 */
#ifndef TESSERA_CPU_COMM_H
#define TESSERA_CPU_COMM_H

#include <stdint.h>

#include "tessera/comm.h"

/* A context over n distinct CPU streams (any mix of CPU devices), or NULL
 * when a stream is not a CPU stream, appears twice, or n is outside
 * 1..64. Blocks (allocates once). */
tsr_comm *tsr__cpu_comm_init(tsr_backend *const *backends, int n);
/* Enqueues one job per stream; the jobs meet, each sums its share of the
 * elements across all n tensors in place, and none returns before all are
 * done. Async; blocks only when 64 collectives are already in flight.
 * TSR_ENOTHANDLED: a type other than F32/F16/BF16 or memory that is not
 * host memory. */
tsr_status tsr__cpu_comm_allreduce(tsr_comm *comm, tsr_tensor *const *tensors);
/* Waits for the queued collectives, then frees the context. */
void tsr__cpu_comm_free(tsr_comm *comm);

/* The summation kernels. p[j] (j < m) points at element 0 of a range of ne
 * elements in tensor j: s[i] = ((p[0][i] + p[1][i]) + p[2][i]) + … in F32,
 * then p[j][i] = s[i] for every j, rounded once to the type (round to
 * nearest even): every tensor gets bit-identical results. */
typedef void (*tsr__cpu_comm_sum_fn)(void *const *p, int m, int64_t ne);
void tsr__cpu_comm_sum_f32_avx512(void *const *p, int m, int64_t ne);
void tsr__cpu_comm_sum_f16_avx512(void *const *p, int m, int64_t ne);
void tsr__cpu_comm_sum_bf16_avx512(void *const *p, int m, int64_t ne);

#endif /* TESSERA_CPU_COMM_H */
