/* core/registry_builtin.c — which registries this build has. Backends other
 * than the CPU are listed when CMake compiled them in (TSR_HAVE_* macros).
 */
#include "core/registry.h"
#include "tessera/cpu.h"
#if defined(TSR_HAVE_VULKAN)
#include "tessera/vulkan.h"
#endif
#if defined(TSR_HAVE_RPC)
#include "tessera/rpc.h"
#endif

const tsr__reg_init_fn tsr__builtin_regs[] = {
    tsr_cpu_reg,
#if defined(TSR_HAVE_VULKAN)
    tsr_vulkan_reg,
#endif
#if defined(TSR_HAVE_RPC)
    tsr_rpc_reg,
#endif
    NULL,
};
