/* core/tensor_impl.h — internal helpers of the tensor and op constructors,
 * shared by core/tensor.c and core/ops.c. Not installed.
 */
#ifndef TESSERA_CORE_TENSOR_IMPL_H
#define TESSERA_CORE_TENSOR_IMPL_H

#include "core/internal.h"
#include "tessera/tensor.h"

/* Records the first error of ctx (and the thread's last error); returns NULL. */
tsr_tensor *tsr__ctx_fail(tsr_ctx *ctx, tsr_status status, const char *fmt, ...) TSR__PRINTF(3, 4);

/* A new contiguous tensor, shape-checked; NULL (error recorded) otherwise. */
tsr_tensor *tsr__new_raw(tsr_ctx *ctx, tsr_type type, const int64_t ne[4], const char *what);

void tsr__set_contiguous_strides(tsr_tensor *t);
void tsr__set_op_param_f32(tsr_tensor *t, int i, float v);

/* The tensor's name, or its op's name when it has none (for messages). */
const char *tsr__tname(const tsr_tensor *t);

#endif /* TESSERA_CORE_TENSOR_IMPL_H */
