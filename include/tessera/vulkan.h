/* tessera/vulkan.h — the Vulkan backend: one device per Vulkan physical
 * device (discrete and integrated GPUs, and CPU implementations such as
 * Mesa's lavapipe), compute shaders compiled into the library.
 *
 * Available when tessera is built with TSR_VULKAN (CMake finds the Vulkan
 * headers and glslc). The loader (libvulkan.so.1) is opened at run time: a
 * machine without it, or without a usable device, gets a "vulkan" registry
 * with zero devices and a log line saying why, never a failure to load.
 *
 * Environment, read once when the registry is first used:
 *   TSR_VULKAN_DEVICES=0,2    expose only these physical devices (indices in
 *                             the loader's order); "none" exposes none.
 *   TSR_VULKAN_LOADER=path    open this Vulkan loader instead of
 *                             libvulkan.so.1 (a missing path: no devices).
 *   TSR_VULKAN_NO_MAP=1       never map tensor memory, even where the host
 *                             could: transfers are staged as on a discrete
 *                             GPU (tests this path on lavapipe).
 *   TSR_VULKAN_MM=tiled       matrix products use the shared-memory tiled
 *                             GEMM on CPU-like devices too (testing).
 *   TSR_VULKAN_VALIDATION=1   enable VK_LAYER_KHRONOS_validation; each error
 *                             it reports is counted, logged, and makes the
 *                             next tessera call on a Vulkan object return
 *                             TSR_EDEVICE with the layer's message.
 *
 * A device needs Vulkan 1.2 with buffer device addresses, timeline
 * semaphores, 64-bit shader integers and 16-bit storage; devices without
 * them are not listed (the log says which feature is missing).
 */
#ifndef TESSERA_VULKAN_H
#define TESSERA_VULKAN_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The Vulkan registry (also reachable as tsr_reg_by_name("vulkan")). */
tsr_reg *tsr_vulkan_reg(void);

/* Why the registry has no devices, or why a physical device was left out
 * (the last such reason); "" when every device was taken. */
const char *tsr_vulkan_reason(void);

/* Whether the validation layer was requested and loaded. */
bool tsr_vulkan_validation_enabled(void);

/* Errors the validation layer has reported in this process so far (0 when
 * it is off). Also reachable as get_proc("tsr_vulkan_validation_errors"). */
uint64_t tsr_vulkan_validation_errors(void);
typedef uint64_t (*tsr_vulkan_validation_errors_fn)(void);

/* True when backend is a Vulkan stream. */
bool tsr_backend_is_vulkan(tsr_backend *backend);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_VULKAN_H */
