/* tests/test_core.c — types and conversions, status codes, tensors, views,
 * and the shape errors of every op constructor (errors returned, never a
 * crash; the first error sticks to the context with a useful message).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"

/* ---- status ---------------------------------------------------------------------------- */

Test(status, every_code_has_a_name_and_a_message)
{
    const tsr_status codes[] = {
        TSR_OK,           TSR_EINVAL,    TSR_ESHAPE, TSR_ETYPE,   TSR_ENOMEM,      TSR_EDEVICE,
        TSR_EUNSUPPORTED, TSR_ENOTFOUND, TSR_EIO,    TSR_EFORMAT, TSR_ETIMEDOUT,   TSR_EBUSY,
        TSR_ERANGE,       TSR_EPROTO,    TSR_EAUTH,  TSR_ECLOSED, TSR_ENOTHANDLED, TSR_EINTERNAL};
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        cr_expect_str_neq(tsr_status_str(codes[i]), "unknown status", "code %d", codes[i]);
        cr_expect_str_neq(tsr_status_name(codes[i]), "UNKNOWN", "code %d", codes[i]);
        cr_expect(codes[i] == TSR_OK || codes[i] < 0, "error codes are negative");
    }
    cr_expect_str_eq(tsr_status_name(TSR_ENOMEM), "ENOMEM");
    cr_expect_str_eq(tsr_status_str((tsr_status)-999), "unknown status");
}

static int log_calls;
static char log_last[256];
static void capture_log(tsr_log_level level, const char *msg, void *user)
{
    (void)level;
    (void)user;
    log_calls++;
    snprintf(log_last, sizeof(log_last), "%s", msg);
}

Test(status, errors_reach_the_log_callback_at_debug_level)
{
    tsr_log_set(capture_log, NULL);
    tsr_log_set_level(TSR_LOG_DEBUG);
    tsr_ctx *ctx = tsr_ctx_new(8);
    tsr_tensor *a = tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 4, 4);
    tsr_tensor *b = tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 5, 4);
    cr_expect_null(tsr_mul_mat(ctx, a, b));
    cr_expect_gt(log_calls, 0);
    cr_expect(strstr(log_last, "mul_mat") != NULL, "log: %s", log_last);
    tsr_log_set_level(TSR_LOG_NONE);
    log_calls = 0;
    cr_expect_null(tsr_mul_mat(ctx, a, b));
    cr_expect_eq(log_calls, 0, "level none silences the log");
    tsr_log_set(NULL, NULL);
    tsr_ctx_free(ctx);
}

/* ---- types ----------------------------------------------------------------------------- */

Test(types, traits_are_consistent)
{
    cr_expect_eq(tsr_type_size(TSR_TYPE_F32), 4);
    cr_expect_eq(tsr_type_size(TSR_TYPE_F16), 2);
    cr_expect_eq(tsr_type_size(TSR_TYPE_BF16), 2);
    cr_expect_eq(tsr_type_size(TSR_TYPE_I32), 4);
    cr_expect_eq(tsr_type_size(TSR_TYPE_Q8_0), 34);
    cr_expect_eq(tsr_type_block_size(TSR_TYPE_Q8_0), 32);
    cr_expect_eq(tsr_row_size(TSR_TYPE_Q8_0, 64), 68);
    cr_expect_str_eq(tsr_type_name(TSR_TYPE_BF16), "bf16");
    cr_expect_str_eq(tsr_type_name((tsr_type)77), "?");
    cr_expect_not(tsr_type_valid(77));
}

Test(types, fp16_round_trips_every_value)
{
    /* Every finite half converts to float and back unchanged; NaNs stay NaN. */
    for (uint32_t h = 0; h < 0x10000; h++) {
        const float f = tsr_fp16_to_f32((tsr_fp16)h);
        const bool is_nan = ((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff);
        if (is_nan) {
            cr_assert(isnan(f), "0x%04x should be NaN", h);
            cr_assert(isnan(tsr_fp16_to_f32(tsr_f32_to_fp16(f))));
        } else {
            cr_assert_eq(tsr_f32_to_fp16(f), h, "0x%04x -> %g -> 0x%04x", h, (double)f,
                         tsr_f32_to_fp16(f));
        }
    }
}

Test(types, fp16_rounds_to_nearest_even)
{
    /* 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: ties go to even (1). */
    cr_expect_eq(tsr_f32_to_fp16(1.0f + 0x1p-11f), 0x3c00);
    /* 1 + 3·2^-11 lies halfway between 1 + 2^-10 and 1 + 2^-9: goes to 1 + 2^-9. */
    cr_expect_eq(tsr_f32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);
    cr_expect_eq(tsr_f32_to_fp16(65504.0f), 0x7bff);
    cr_expect_eq(tsr_f32_to_fp16(65520.0f), 0x7c00, "rounds up to infinity");
    cr_expect_eq(tsr_f32_to_fp16(-INFINITY), 0xfc00);
    cr_expect_eq(tsr_f32_to_fp16(0x1p-24f), 0x0001, "smallest subnormal");
    cr_expect_eq(tsr_f32_to_fp16(0x1p-26f), 0x0000, "below half the smallest: zero");
    cr_expect_eq(tsr_f32_to_fp16(-0.0f), 0x8000);
}

Test(types, bf16_rounds_to_nearest_even_and_keeps_nan)
{
    cr_expect_eq(tsr_f32_to_bf16(1.0f), 0x3f80);
    cr_expect_eq(tsr_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80, "tie to even");
    cr_expect_eq(tsr_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82, "tie to even, upwards");
    cr_expect(isnan(tsr_bf16_to_f32(tsr_f32_to_bf16(NAN))));
    cr_expect_float_eq(tsr_bf16_to_f32(0x4049), 3.140625f, 0.0f);
}

Test(types, q8_0_quantizes_within_half_a_step)
{
    float x[64], y[64];
    tu_rng r = {7};
    for (int i = 0; i < 64; i++)
        x[i] = tu_uniform(&r, -3.0f, 3.0f);
    tsr_block_q8_0 q[2];
    cr_assert_eq(tsr_row_from_f32(TSR_TYPE_Q8_0, x, q, 64), TSR_OK);
    cr_assert_eq(tsr_row_to_f32(TSR_TYPE_Q8_0, q, y, 64), TSR_OK);
    for (int b = 0; b < 2; b++) {
        float amax = 0;
        for (int i = 0; i < 32; i++)
            amax = fmaxf(amax, fabsf(x[b * 32 + i]));
        const float step = amax / 127.0f;
        for (int i = 0; i < 32; i++)
            cr_expect_leq(fabsf(x[b * 32 + i] - y[b * 32 + i]), 0.5f * step * 1.01f + 1e-6f);
    }
    cr_expect_eq(tsr_row_from_f32(TSR_TYPE_Q8_0, x, q, 33), TSR_EINVAL, "partial block refused");
}

/* ---- tensors and views ----------------------------------------------------------------------- */

Test(tensor, strides_follow_ggml_conventions)
{
    tsr_ctx *ctx = tsr_ctx_new(8);
    tsr_tensor *t = tsr_new_tensor_3d(ctx, TSR_TYPE_F16, 6, 5, 4);
    cr_assert_not_null(t);
    cr_expect_eq(t->nb[0], 2);
    cr_expect_eq(t->nb[1], 12);
    cr_expect_eq(t->nb[2], 60);
    cr_expect_eq(t->nb[3], 240);
    cr_expect_eq(tsr_nbytes(t), 240);
    cr_expect(tsr_is_contiguous(t));
    tsr_tensor *q = tsr_new_tensor_2d(ctx, TSR_TYPE_Q8_0, 64, 3);
    cr_expect_eq(q->nb[1], 68);
    cr_expect_eq(tsr_nbytes(q), 204);
    tsr_ctx_free(ctx);
}

Test(tensor, bad_shapes_are_errors_not_crashes)
{
    tsr_ctx *ctx = tsr_ctx_new(8);
    cr_expect_null(tsr_new_tensor_2d(ctx, TSR_TYPE_F32, -1, 3));
    cr_expect_eq(tsr_ctx_status(ctx), TSR_ESHAPE);
    cr_expect(strstr(tsr_ctx_error(ctx), "negative") != NULL, "%s", tsr_ctx_error(ctx));
    tsr_ctx_reset(ctx);
    cr_expect_null(tsr_new_tensor_1d(ctx, TSR_TYPE_Q8_0, 33));
    cr_expect_eq(tsr_ctx_status(ctx), TSR_ESHAPE);
    tsr_ctx_reset(ctx);
    cr_expect_null(tsr_new_tensor_4d(ctx, TSR_TYPE_F32, INT64_MAX / 2, 4, 1, 1));
    cr_expect_eq(tsr_ctx_status(ctx), TSR_ERANGE);
    tsr_ctx_reset(ctx);
    cr_expect_null(tsr_new_tensor_1d(ctx, (tsr_type)99, 4));
    cr_expect_eq(tsr_ctx_status(ctx), TSR_ETYPE);
    tsr_ctx_free(ctx);
}

Test(tensor, a_full_context_fails_cleanly)
{
    tsr_ctx *ctx = tsr_ctx_new(2);
    cr_expect_not_null(tsr_new_tensor_1d(ctx, TSR_TYPE_F32, 4));
    cr_expect_not_null(tsr_new_tensor_1d(ctx, TSR_TYPE_F32, 4));
    cr_expect_null(tsr_new_tensor_1d(ctx, TSR_TYPE_F32, 4));
    cr_expect_eq(tsr_ctx_status(ctx), TSR_ENOMEM);
    tsr_ctx_reset(ctx);
    cr_expect_not_null(tsr_new_tensor_1d(ctx, TSR_TYPE_F32, 4), "reset frees the room");
    tsr_ctx_free(ctx);
}

Test(tensor, views_are_bounds_checked_against_their_source)
{
    tsr_ctx *ctx = tsr_ctx_new(16);
    tsr_tensor *a = tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 8, 4); /* 128 bytes */
    tsr_tensor *v = tsr_view_2d(ctx, a, 4, 4, a->nb[1], 16);
    cr_assert_not_null(v, "%s", tsr_ctx_error(ctx));
    cr_expect_eq(v->view_src, a);
    cr_expect_eq(v->view_offs, 16);
    /* A view of a view is rooted at the original, offsets add up. */
    tsr_tensor *vv = tsr_view_1d(ctx, v, 2, 8);
    cr_assert_not_null(vv);
    cr_expect_eq(vv->view_src, a);
    cr_expect_eq(vv->view_offs, 24);
    cr_expect_null(tsr_view_2d(ctx, a, 8, 4, a->nb[1], 4), "one element past the end");
    cr_expect_eq(tsr_ctx_status(ctx), TSR_ERANGE);
    tsr_ctx_reset(ctx);
    a = tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 8, 4);
    cr_expect_null(tsr_view_1d(ctx, a, 4, SIZE_MAX - 2), "offset overflow");
    cr_expect_eq(tsr_ctx_status(ctx), TSR_ERANGE);
    tsr_ctx_free(ctx);
}

Test(tensor, reshape_permute_transpose_keep_the_data_layout)
{
    tsr_ctx *ctx = tsr_ctx_new(16);
    tsr_tensor *a = tsr_new_tensor_3d(ctx, TSR_TYPE_F32, 4, 3, 2);
    tsr_tensor *r = tsr_reshape_2d(ctx, a, 12, 2);
    cr_assert_not_null(r);
    cr_expect_eq(r->nb[1], 48);
    tsr_tensor *p = tsr_permute(ctx, a, 2, 0, 1, 3); /* dim0 -> 2, dim1 -> 0, dim2 -> 1 */
    cr_assert_not_null(p);
    cr_expect_eq(p->ne[0], 3);
    cr_expect_eq(p->ne[1], 2);
    cr_expect_eq(p->ne[2], 4);
    cr_expect_eq(p->nb[0], a->nb[1]);
    cr_expect_eq(p->nb[2], a->nb[0]);
    cr_expect_not(tsr_is_contiguous(p));
    tsr_tensor *t = tsr_transpose(ctx, a);
    cr_expect_eq(t->ne[0], 3);
    cr_expect_eq(t->nb[0], a->nb[1]);
    cr_expect_null(tsr_reshape_2d(ctx, p, 12, 2), "reshape of a permuted view");
    cr_expect_eq(tsr_ctx_status(ctx), TSR_ESHAPE);
    tsr_ctx_reset(ctx);
    a = tsr_new_tensor_3d(ctx, TSR_TYPE_F32, 4, 3, 2);
    cr_expect_null(tsr_reshape_2d(ctx, a, 5, 5), "element count differs");
    tsr_ctx_reset(ctx);
    a = tsr_new_tensor_3d(ctx, TSR_TYPE_F32, 4, 3, 2);
    cr_expect_null(tsr_permute(ctx, a, 0, 0, 1, 2), "not a permutation");
    cr_expect_eq(tsr_ctx_status(ctx), TSR_EINVAL);
    tsr_ctx_free(ctx);
}

/* ---- op constructor errors ------------------------------------------------------------------- */

/* Runs `expr` in a fresh context holding a, b (F32 [8, 4]), q (Q8_0
 * [64, 2]), i (I32 [4]) and expects NULL with `code` recorded and the op's
 * name in the message. */
#define EXPECT_OP_ERROR(code, opname, expr)                                              \
    do {                                                                                 \
        tsr_ctx *ctx = tsr_ctx_new(32);                                                  \
        tsr_tensor *a = tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 8, 4);                      \
        tsr_tensor *b = tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 8, 4);                      \
        tsr_tensor *q = tsr_new_tensor_2d(ctx, TSR_TYPE_Q8_0, 64, 2);                    \
        tsr_tensor *i = tsr_new_tensor_1d(ctx, TSR_TYPE_I32, 4);                         \
        (void)a, (void)b, (void)q, (void)i;                                              \
        tsr_tensor *res = (expr);                                                        \
        cr_expect_null(res, "%s should fail", #expr);                                    \
        cr_expect_eq(tsr_ctx_status(ctx), code, "%s: status %s (%s)", #expr,             \
                     tsr_status_name(tsr_ctx_status(ctx)), tsr_ctx_error(ctx));          \
        cr_expect(strstr(tsr_ctx_error(ctx), opname) != NULL, "%s: message '%s'", #expr, \
                  tsr_ctx_error(ctx));                                                   \
        tsr_ctx_free(ctx);                                                               \
    } while (0)

Test(ops, mul_mat_shape_and_type_errors)
{
    EXPECT_OP_ERROR(TSR_ESHAPE, "mul_mat",
                    tsr_mul_mat(ctx, a, tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 7, 3)));
    EXPECT_OP_ERROR(TSR_ETYPE, "mul_mat", tsr_mul_mat(ctx, i, b));
    EXPECT_OP_ERROR(TSR_ETYPE, "mul_mat",
                    tsr_mul_mat(ctx, a, tsr_new_tensor_2d(ctx, TSR_TYPE_F16, 8, 3)));
    EXPECT_OP_ERROR(TSR_ESHAPE, "mul_mat",
                    tsr_mul_mat(ctx, tsr_new_tensor_3d(ctx, TSR_TYPE_F32, 8, 4, 3),
                                tsr_new_tensor_3d(ctx, TSR_TYPE_F32, 8, 4, 4)));
    EXPECT_OP_ERROR(TSR_ESHAPE, "mul_mat", tsr_mul_mat(ctx, tsr_transpose(ctx, a), b));
}

Test(ops, mul_mat_id_shape_errors)
{
    EXPECT_OP_ERROR(TSR_ESHAPE, "mul_mat_id",
                    tsr_mul_mat_id(ctx, tsr_new_tensor_3d(ctx, TSR_TYPE_F32, 8, 4, 3),
                                   tsr_new_tensor_3d(ctx, TSR_TYPE_F32, 8, 2, 5),
                                   tsr_new_tensor_2d(ctx, TSR_TYPE_I32, 3, 5)));
    EXPECT_OP_ERROR(TSR_ETYPE, "mul_mat_id",
                    tsr_mul_mat_id(ctx, tsr_new_tensor_3d(ctx, TSR_TYPE_F32, 8, 4, 3),
                                   tsr_new_tensor_3d(ctx, TSR_TYPE_F32, 8, 2, 5),
                                   tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 2, 5)));
}

Test(ops, element_wise_errors)
{
    EXPECT_OP_ERROR(TSR_ESHAPE, "ADD", tsr_add(ctx, a, tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 3, 4)));
    EXPECT_OP_ERROR(TSR_ETYPE, "MUL", tsr_mul(ctx, i, i));
    EXPECT_OP_ERROR(TSR_ETYPE, "SUB",
                    tsr_sub(ctx, tsr_new_tensor_2d(ctx, TSR_TYPE_F16, 8, 4),
                            tsr_new_tensor_2d(ctx, TSR_TYPE_BF16, 8, 4)));
    EXPECT_OP_ERROR(TSR_ETYPE, "SILU", tsr_silu(ctx, q));
    EXPECT_OP_ERROR(
        TSR_ESHAPE, "glu",
        tsr_glu(ctx, tsr_new_tensor_1d(ctx, TSR_TYPE_F32, 7), NULL, TSR_GLU_SWIGLU, false));
    EXPECT_OP_ERROR(TSR_ESHAPE, "glu",
                    tsr_swiglu(ctx, a, tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 8, 3)));
    EXPECT_OP_ERROR(TSR_ESHAPE, "add_id",
                    tsr_add_id(ctx, tsr_new_tensor_3d(ctx, TSR_TYPE_F32, 8, 2, 3), b,
                               tsr_new_tensor_2d(ctx, TSR_TYPE_I32, 3, 3)));
    EXPECT_OP_ERROR(TSR_EINVAL, "rms_norm", tsr_rms_norm(ctx, a, -1.0f));
    EXPECT_OP_ERROR(TSR_ETYPE, "fill", tsr_fill(ctx, q, 1.0f));
}

Test(ops, rows_and_copies_errors)
{
    EXPECT_OP_ERROR(TSR_ETYPE, "get_rows", tsr_get_rows(ctx, a, b));
    EXPECT_OP_ERROR(TSR_ESHAPE, "get_rows",
                    tsr_get_rows(ctx, a, tsr_new_tensor_2d(ctx, TSR_TYPE_I32, 2, 3)));
    EXPECT_OP_ERROR(TSR_ESHAPE, "set_rows",
                    tsr_set_rows(ctx, a, tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 7, 2),
                                 tsr_new_tensor_1d(ctx, TSR_TYPE_I32, 2)));
    EXPECT_OP_ERROR(TSR_ETYPE, "set_rows", tsr_set_rows(ctx, i, b, i));
    EXPECT_OP_ERROR(TSR_ESHAPE, "cpy", tsr_cpy(ctx, a, tsr_new_tensor_1d(ctx, TSR_TYPE_F32, 31)));
    EXPECT_OP_ERROR(TSR_ESHAPE, "cpy", tsr_cpy(ctx, a, i));
    EXPECT_OP_ERROR(TSR_ESHAPE, "cpy",
                    tsr_cpy(ctx, tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 32, 4),
                            tsr_new_tensor_2d(ctx, TSR_TYPE_Q8_0, 64, 2)));
    EXPECT_OP_ERROR(TSR_ESHAPE, "concat",
                    tsr_concat(ctx, a, tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 7, 3), 1));
    EXPECT_OP_ERROR(TSR_EINVAL, "concat", tsr_concat(ctx, a, b, 4));
    EXPECT_OP_ERROR(TSR_ESHAPE, "cont", tsr_cont_4d(ctx, a, 5, 5, 1, 1));
}

Test(ops, attention_and_rope_errors)
{
    EXPECT_OP_ERROR(TSR_EINVAL, "rope",
                    tsr_rope(ctx, tsr_new_tensor_3d(ctx, TSR_TYPE_F32, 8, 2, 4), i, 7,
                             TSR_ROPE_NEOX, 10000.0f, 1.0f));
    EXPECT_OP_ERROR(TSR_ESHAPE, "rope",
                    tsr_rope(ctx, tsr_new_tensor_3d(ctx, TSR_TYPE_F32, 8, 2, 5), i, 8,
                             TSR_ROPE_NEOX, 10000.0f, 1.0f));
    EXPECT_OP_ERROR(TSR_ESHAPE, "soft_max",
                    tsr_soft_max(ctx, a, tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 8, 3), 1.0f));
    EXPECT_OP_ERROR(TSR_ESHAPE, "flash_attn_ext",
                    tsr_flash_attn_ext(ctx, tsr_new_tensor_3d(ctx, TSR_TYPE_F32, 16, 2, 6),
                                       tsr_new_tensor_3d(ctx, TSR_TYPE_F16, 16, 9, 4),
                                       tsr_new_tensor_3d(ctx, TSR_TYPE_F16, 16, 9, 4), NULL, 1.0f,
                                       0.0f));
    EXPECT_OP_ERROR(TSR_ETYPE, "flash_attn_ext",
                    tsr_flash_attn_ext(ctx, tsr_new_tensor_3d(ctx, TSR_TYPE_F32, 16, 2, 4),
                                       tsr_new_tensor_3d(ctx, TSR_TYPE_F16, 16, 9, 2),
                                       tsr_new_tensor_3d(ctx, TSR_TYPE_F32, 16, 9, 2), NULL, 1.0f,
                                       0.0f));
    EXPECT_OP_ERROR(TSR_EINVAL, "top_k", tsr_top_k(ctx, a, 9));
    EXPECT_OP_ERROR(TSR_EINVAL, "argsort", tsr_argsort(ctx, a, (tsr_sort_order)5));
}

Test(ops, a_failed_constructor_poisons_its_users_without_crashing)
{
    tsr_ctx *ctx = tsr_ctx_new(16);
    tsr_tensor *a = tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 8, 4);
    tsr_tensor *bad = tsr_mul_mat(ctx, a, tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 3, 3));
    tsr_tensor *y = tsr_silu(ctx, tsr_add(ctx, bad, a));
    cr_expect_null(y);
    cr_expect_eq(tsr_ctx_status(ctx), TSR_ESHAPE, "the first error is kept");
    cr_expect(strstr(tsr_ctx_error(ctx), "mul_mat") != NULL, "%s", tsr_ctx_error(ctx));
    tsr_graph *g = tsr_graph_new(8);
    cr_expect_eq(tsr_graph_build(g, y), TSR_EINVAL);
    cr_expect_eq(tsr_graph_n_nodes(g), 0);
    tsr_graph_free(g);
    tsr_ctx_free(ctx);
}

Test(ops, results_have_the_documented_shapes)
{
    tsr_ctx *ctx = tsr_ctx_new(32);
    tsr_tensor *w = tsr_new_tensor_3d(ctx, TSR_TYPE_Q8_0, 64, 10, 2);
    tsr_tensor *x = tsr_new_tensor_4d(ctx, TSR_TYPE_F32, 64, 7, 4, 3);
    tsr_tensor *y = tsr_mul_mat(ctx, w, x);
    cr_assert_not_null(y, "%s", tsr_ctx_error(ctx));
    cr_expect(y->ne[0] == 10 && y->ne[1] == 7 && y->ne[2] == 4 && y->ne[3] == 3, "%s", tu_shape(y));
    tsr_tensor *q = tsr_new_tensor_4d(ctx, TSR_TYPE_F32, 16, 5, 8, 1);
    tsr_tensor *k = tsr_new_tensor_4d(ctx, TSR_TYPE_F16, 16, 9, 2, 1);
    tsr_tensor *fa = tsr_flash_attn_ext(ctx, q, k, k, NULL, 0.25f, 0.0f);
    cr_assert_not_null(fa, "%s", tsr_ctx_error(ctx));
    cr_expect(fa->ne[0] == 16 && fa->ne[1] == 8 && fa->ne[2] == 5, "%s", tu_shape(fa));
    tsr_tensor *am = tsr_argmax(ctx, tsr_new_tensor_3d(ctx, TSR_TYPE_F32, 100, 3, 2));
    cr_expect(am->ne[0] == 3 && am->ne[1] == 2 && am->type == TSR_TYPE_I32, "%s", tu_shape(am));
    tsr_tensor *tk = tsr_top_k(ctx, tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 100, 3), 4);
    cr_expect(tk->ne[0] == 4 && tk->ne[1] == 3, "%s", tu_shape(tk));
    tsr_tensor *g =
        tsr_glu(ctx, tsr_new_tensor_2d(ctx, TSR_TYPE_F32, 20, 3), NULL, TSR_GLU_SWIGLU, 0);
    cr_expect(g->ne[0] == 10 && g->ne[1] == 3, "%s", tu_shape(g));
    tsr_tensor *c = tsr_cpy(ctx, x, tsr_new_tensor_4d(ctx, TSR_TYPE_F16, 64, 7, 4, 3));
    cr_expect_not_null(c->view_src, "cpy returns a view of its destination");
    cr_expect_eq(tsr_ctx_status(ctx), TSR_OK, "%s", tsr_ctx_error(ctx));
    tsr_ctx_free(ctx);
}

/* Random shapes, types, parameters and NULLs thrown at every constructor:
 * each call returns a tensor or NULL with an error, never crashes, and a
 * returned tensor has non-negative dims and a byte size that fits. */
static tsr_tensor *random_tensor(tsr_ctx *ctx, tu_rng *r)
{
    if (tu_next(r) % 16 == 0)
        return NULL;
    const tsr_type types[] = {TSR_TYPE_F32, TSR_TYPE_F16, TSR_TYPE_BF16, TSR_TYPE_Q8_0,
                              TSR_TYPE_I32};
    const tsr_type t = types[tu_next(r) % 5];
    int64_t ne[4];
    for (int i = 0; i < 4; i++)
        ne[i] = (int64_t)(tu_next(r) % 5) + (i == 0 ? (t == TSR_TYPE_Q8_0 ? 31 : 0) : 0);
    if (t == TSR_TYPE_Q8_0)
        ne[0] = 32 * (int64_t)(1 + tu_next(r) % 2);
    tsr_tensor *x = tsr_new_tensor_4d(ctx, t, ne[0], ne[1], ne[2], ne[3]);
    if (x && tu_next(r) % 4 == 0)
        x = tsr_transpose(ctx, x);
    return x;
}

Test(ops, random_arguments_never_crash_a_constructor, .timeout = 60)
{
    tu_rng r = {2024};
    tsr_ctx *ctx = tsr_ctx_new(64);
    int built = 0, refused = 0;
    for (int iter = 0; iter < 20000; iter++) {
        tsr_ctx_reset(ctx);
        tsr_tensor *a = random_tensor(ctx, &r), *b = random_tensor(ctx, &r);
        tsr_tensor *c = random_tensor(ctx, &r), *d = random_tensor(ctx, &r);
        const int k = (int)(tu_next(&r) % 8) - 2;
        const float f = (float)((int)(tu_next(&r) % 7) - 3);
        const tsr_status before = tsr_ctx_status(ctx); /* a random input may have failed */
        tsr_tensor *y = NULL;
        switch (tu_next(&r) % 30) {
        case 0:
            y = tsr_mul_mat(ctx, a, b);
            break;
        case 1:
            y = tsr_mul_mat_id(ctx, a, b, c);
            break;
        case 2:
            y = tsr_add(ctx, a, b);
            break;
        case 3:
            y = tsr_mul(ctx, a, b);
            break;
        case 4:
            y = tsr_add_id(ctx, a, b, c);
            break;
        case 5:
            y = tsr_scale_bias(ctx, a, f, f);
            break;
        case 6:
            y = tsr_fill(ctx, a, f * 1e10f);
            break;
        case 7:
            y = tsr_glu(ctx, a, b, (tsr_glu_kind)(k & 3), k & 1);
            break;
        case 8:
            y = tsr_rms_norm(ctx, a, f);
            break;
        case 9:
            y = tsr_rope(ctx, a, b, k * 2, (tsr_rope_mode)(k & 2), f * 1000, f);
            break;
        case 10:
            y = tsr_soft_max(ctx, a, b, f);
            break;
        case 11:
            y = tsr_flash_attn_ext(ctx, a, b, c, d, f, f);
            break;
        case 12:
            y = tsr_concat(ctx, a, b, k);
            break;
        case 13:
            y = tsr_sum_rows(ctx, a);
            break;
        case 14:
            y = tsr_argmax(ctx, a);
            break;
        case 15:
            y = tsr_argsort(ctx, a, (tsr_sort_order)(k & 3));
            break;
        case 16:
            y = tsr_top_k(ctx, a, k);
            break;
        case 17:
            y = tsr_get_rows(ctx, a, b);
            break;
        case 18:
            y = tsr_set_rows(ctx, a, b, c);
            break;
        case 19:
            y = tsr_cpy(ctx, a, b);
            break;
        case 20:
            y = tsr_cont(ctx, a);
            break;
        case 21:
            y = tsr_cont_4d(ctx, a, k, 2, 1, 1);
            break;
        case 22:
            y = tsr_reshape_2d(ctx, a, k, 2);
            break;
        case 23:
            y = tsr_permute(ctx, a, k & 3, (k + 1) & 3, (k + 2) & 3, (k + 3) & 3);
            break;
        case 24:
            y = tsr_view_2d(ctx, a, k, 2, (size_t)(k * 4), (size_t)(k * 8));
            break;
        case 25:
            y = tsr_silu(ctx, a);
            break;
        case 26:
            y = tsr_gelu(ctx, a);
            break;
        case 27:
            y = tsr_div(ctx, a, b);
            break;
        case 28:
            y = tsr_transpose(ctx, a);
            break;
        default:
            y = tsr_view_1d(ctx, a, k, (size_t)k);
            break;
        }
        if (y) {
            built++;
            for (int i = 0; i < 4; i++)
                cr_assert_geq(y->ne[i], 0, "iteration %d", iter);
            cr_assert_eq(tsr_ctx_status(ctx), before, "iteration %d: success changed the status",
                         iter);
        } else {
            refused++;
            cr_assert_neq(tsr_ctx_status(ctx), TSR_OK, "iteration %d: NULL without an error", iter);
            cr_assert_neq(tsr_ctx_error(ctx)[0], '\0', "iteration %d: an error without a message",
                          iter);
        }
    }
    cr_log_info("constructors: %d built, %d refused", built, refused);
    cr_expect_gt(built, 100);
    cr_expect_gt(refused, 100);
    tsr_ctx_free(ctx);
}
