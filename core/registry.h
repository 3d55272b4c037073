/* core/registry.h — the table of built-in registry constructors, generated
 * per build in core/registry_builtin.c (each backend compiled in adds its
 * own). Not installed.
 */
#ifndef TESSERA_CORE_REGISTRY_H
#define TESSERA_CORE_REGISTRY_H

#include "core/backend_impl.h"

/* NULL-terminated; each returns its registry (never NULL, maybe 0 devices). */
extern const tsr__reg_init_fn tsr__builtin_regs[];

#endif /* TESSERA_CORE_REGISTRY_H */
