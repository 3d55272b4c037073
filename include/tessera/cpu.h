/* tessera/cpu.h — the CPU backend: N CPU devices, each an asynchronous
 * stream with its own worker threads and a share of the cores.
 *
 * TSR_CPU_DEVICES=N (default 1) sets how many devices the registry exposes
 * ("cpu0".."cpuN-1"); the cores are shared out evenly, the first devices
 * taking the remainder. A stream's work runs on its own threads:
 * graph_compute_async returns at once.
 */
#ifndef TESSERA_CPU_H
#define TESSERA_CPU_H

#include <stdbool.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CPU registry (also reachable as tsr_reg_by_name("cpu")). */
tsr_reg *tsr_cpu_reg(void);

/* Sets the number of threads of a CPU stream (1..256); takes effect for work
 * enqueued afterwards. TSR_EINVAL for a non-CPU backend or a bad count.
 * Also reachable as get_proc("tsr_cpu_set_n_threads"). */
tsr_status tsr_cpu_set_n_threads(tsr_backend *backend, int n_threads);
typedef tsr_status (*tsr_cpu_set_n_threads_fn)(tsr_backend *backend, int n_threads);

/* The stream's thread count. */
int tsr_cpu_get_n_threads(tsr_backend *backend);

/* Makes the stream run the plain-C reference kernels instead of the fast
 * paths: the oracle the test harness compares every device against. Also
 * reachable as get_proc("tsr_cpu_set_reference"). */
tsr_status tsr_cpu_set_reference(tsr_backend *backend, bool reference);
typedef tsr_status (*tsr_cpu_set_reference_fn)(tsr_backend *backend, bool reference);

/* True when backend is a CPU stream. */
bool tsr_backend_is_cpu(tsr_backend *backend);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_CPU_H */
