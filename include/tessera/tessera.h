/* tessera/tessera.h — everything public in one include. */
#ifndef TESSERA_TESSERA_H
#define TESSERA_TESSERA_H

#include "backend.h"
#include "comm.h"
#include "cpu.h"
#include "gguf.h"
#include "graph.h"
#include "meta.h"
#include "model.h"
#include "status.h"
#include "tensor.h"

#define TESSERA_VERSION_MAJOR 0
#define TESSERA_VERSION_MINOR 1
#define TESSERA_VERSION_PATCH 0

#endif /* TESSERA_TESSERA_H */
