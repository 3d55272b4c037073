/* core/registry_builtin.c — which registries this build has. Backends other
 * than the CPU are listed when CMake compiled them in (TSR_HAVE_* macros).
 */
#include "core/registry.h"
#include "tessera/cpu.h"

const tsr__reg_init_fn tsr__builtin_regs[] = {
    tsr_cpu_reg,
    NULL,
};
