/* tests/test_reference.c — known answers for the reference kernels, the
 * oracle of every other test. Each expected value is worked out by hand or
 * by the formula written out here, independently of the kernel.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "testutil.h"

typedef struct {
    tsr_ctx *ctx;
    tsr_buf *buf;
    tsr_backend *be;
} fixture;

static fixture fx;

static void setup(void)
{
    fx.ctx = tsr_ctx_new(64);
    fx.be = tu_reference_backend();
    cr_assert_not_null(fx.be);
}

static void teardown(void)
{
    tsr_buf_free(fx.buf);
    tsr_ctx_free(fx.ctx);
    tsr_backend_free(fx.be);
    memset(&fx, 0, sizeof(fx));
}

/* Places every tensor, copies the given inputs in, runs out, returns its
 * values as floats in `got`. */
static void run(tsr_tensor *out, float *got)
{
    cr_assert_not_null(out, "%s", tsr_ctx_error(fx.ctx));
    cr_assert_eq(tsr_ctx_alloc_tensors(fx.ctx, tsr_dev_buft(tsr_backend_dev(fx.be)), &fx.buf),
                 TSR_OK);
    for (size_t i = 0; i < tsr_ctx_n_tensors(fx.ctx); i++) {
        tsr_tensor *t = tsr_ctx_tensor(fx.ctx, i);
        if (t->op == TSR_OP_NONE && t->extra) /* host data stashed by input() */
            cr_assert_eq(tsr_tensor_set(t, t->extra, 0, tsr_nbytes(t)), TSR_OK);
    }
    tsr_graph *g = tsr_graph_new(64);
    cr_assert_eq(tsr_graph_build(g, out), TSR_OK);
    cr_assert_eq(tsr_backend_graph_compute(fx.be, g), TSR_OK, "%s", tsr_last_error());
    tsr_tensor *root = out->view_src ? out->view_src : out;
    cr_assert_eq(tu_read_f32(root, got), TSR_OK);
    for (size_t i = 0; i < tsr_ctx_n_tensors(fx.ctx); i++)
        tsr_ctx_tensor(fx.ctx, i)->extra = NULL;
    tsr_graph_free(g);
}

/* An input tensor whose host data (already in its type) is copied at run. */
static tsr_tensor *input(tsr_type type, int64_t ne0, int64_t ne1, int64_t ne2, const void *data)
{
    tsr_tensor *t = tsr_new_tensor_3d(fx.ctx, type, ne0, ne1, ne2);
    t->extra = (void *)data;
    return t;
}

static void expect_close(const float *got, const float *want, int n, float tol)
{
    for (int i = 0; i < n; i++)
        cr_expect(fabsf(got[i] - want[i]) <= tol * (1.0f + fabsf(want[i])),
                  "element %d: expected %.7g, got %.7g", i, (double)want[i], (double)got[i]);
}

TestSuite(reference, .init = setup, .fini = teardown);

Test(reference, mul_mat_is_w_transposed_times_x)
{
    /* W rows (K = 3): n0 = [1, 2, 3], n1 = [4, 5, 6]; x columns [1, 0, -1], [2, 1, 0]. */
    static const float w[] = {1, 2, 3, 4, 5, 6}, x[] = {1, 0, -1, 2, 1, 0};
    float got[4];
    run(tsr_mul_mat(fx.ctx, input(TSR_TYPE_F32, 3, 2, 1, w), input(TSR_TYPE_F32, 3, 2, 1, x)), got);
    const float want[] = {-2, -2, 4, 13}; /* y[n, t] with n fastest */
    expect_close(got, want, 4, 0);
}

Test(reference, mul_mat_broadcasts_weights_over_batches)
{
    /* Two weight matrices (identity and 2·identity), four x batches: x
     * batches 0, 1 use W0 and 2, 3 use W1. */
    static const float w[] = {1, 0, 0, 1, 2, 0, 0, 2};
    static const float x[] = {1, 2, 3, 4, 5, 6, 7, 8};
    float got[8];
    run(tsr_mul_mat(fx.ctx, input(TSR_TYPE_F32, 2, 2, 2, w), input(TSR_TYPE_F32, 2, 1, 4, x)), got);
    const float want[] = {1, 2, 3, 4, 10, 12, 14, 16};
    expect_close(got, want, 8, 0);
}

Test(reference, mul_mat_id_picks_each_slots_expert)
{
    /* Experts: E0 = identity, E1 = swap, E2 = -identity (K = N = 2). */
    static const float w[] = {1, 0, 0, 1, 0, 1, 1, 0, -1, 0, 0, -1};
    static const float x[] = {1, 2, 3, 4};     /* x [2, 1, 2]: one column per token */
    static const int32_t ids[] = {1, 2, 0, 2}; /* [U = 2, T = 2] */
    float got[8];
    run(tsr_mul_mat_id(fx.ctx, input(TSR_TYPE_F32, 2, 2, 3, w), input(TSR_TYPE_F32, 2, 1, 2, x),
                       input(TSR_TYPE_I32, 2, 2, 1, ids)),
        got);
    const float want[] = {2, 1, -1, -2, 3, 4, -3, -4};
    expect_close(got, want, 8, 0);
}

Test(reference, soft_max_with_scale_and_mask)
{
    static const float a[] = {1, 2, 3, 0, 0, 0};
    static const float m[] = {0, 0, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    float got[6];
    run(tsr_soft_max(fx.ctx, input(TSR_TYPE_F32, 3, 2, 1, a), input(TSR_TYPE_F32, 3, 2, 1, m),
                     2.0f),
        got);
    /* Row 0: softmax(2, 4) over the first two; row 1 fully masked: zeros. */
    const float e = expf(-2.0f);
    const float want[] = {e / (1 + e), 1 / (1 + e), 0, 0, 0, 0};
    expect_close(got, want, 6, 1e-6f);
}

Test(reference, rms_norm_divides_by_the_root_mean_square)
{
    static const float a[] = {3, 4};
    float got[2];
    run(tsr_rms_norm(fx.ctx, input(TSR_TYPE_F32, 2, 1, 1, a), 0.0f), got);
    const float r = sqrtf(12.5f);
    const float want[] = {3 / r, 4 / r};
    expect_close(got, want, 2, 1e-6f);
}

Test(reference, rope_rotates_pairs_normal_and_neox)
{
    /* One head of 4 dims at position 1, base 10000: pair i turns by
     * 10000^(-2i/4) = 1 and 0.01 radians. */
    static const float a[] = {1, 0, 0, 1};
    static const int32_t pos[] = {1};
    float got[4];
    run(tsr_rope(fx.ctx, input(TSR_TYPE_F32, 4, 1, 1, a), input(TSR_TYPE_I32, 1, 1, 1, pos), 4,
                 TSR_ROPE_NORMAL, 10000.0f, 1.0f),
        got);
    const float want[] = {cosf(1), sinf(1), -sinf(0.01f), cosf(0.01f)};
    expect_close(got, want, 4, 1e-6f);
}

Test(reference, rope_neox_pairs_the_two_halves)
{
    /* Pairs (0, 2) at 1 rad and (1, 3) at 0.01 rad. x = [1, 0, 0, 1]. */
    static const float a[] = {1, 0, 0, 1};
    static const int32_t pos[] = {1};
    float got[4];
    run(tsr_rope(fx.ctx, input(TSR_TYPE_F32, 4, 1, 1, a), input(TSR_TYPE_I32, 1, 1, 1, pos), 4,
                 TSR_ROPE_NEOX, 10000.0f, 1.0f),
        got);
    const float want[] = {cosf(1), -sinf(0.01f), sinf(1), cosf(0.01f)};
    expect_close(got, want, 4, 1e-6f);
}

Test(reference, flash_attention_weights_values_by_softmax_of_scores)
{
    /* D = 2, one query, two keys: scores 1 and 0, then a fully masked query. */
    static const float q[] = {1, 0, 1, 0};
    static const float k[] = {1, 0, 0, 1};
    static const float v[] = {1, 2, 3, 4};
    static const float m[] = {0, 0, -INFINITY, -INFINITY};
    float got[4];
    tsr_tensor *qt = input(TSR_TYPE_F32, 2, 2, 1, q); /* [D, T = 2, H = 1] */
    run(tsr_flash_attn_ext(fx.ctx, qt, input(TSR_TYPE_F32, 2, 2, 1, k),
                           input(TSR_TYPE_F32, 2, 2, 1, v), input(TSR_TYPE_F32, 2, 2, 1, m), 1.0f,
                           0.0f),
        got);
    const float w0 = 1.0f / (1.0f + expf(-1.0f)), w1 = 1.0f - w0;
    const float want[] = {w0 * 1 + w1 * 3, w0 * 2 + w1 * 4, 0, 0};
    expect_close(got, want, 4, 1e-6f);
}

Test(reference, flash_attention_shares_kv_heads_across_query_groups)
{
    /* 2 query heads, 1 kv head, one key: every head returns v. */
    static const float q[] = {1, 2, 3, 4};
    static const float k[] = {5, 6};
    static const float v[] = {7, 8};
    float got[4];
    run(tsr_flash_attn_ext(fx.ctx, input(TSR_TYPE_F32, 2, 1, 2, q), input(TSR_TYPE_F32, 2, 1, 1, k),
                           input(TSR_TYPE_F32, 2, 1, 1, v), NULL, 0.5f, 0.0f),
        got);
    const float want[] = {7, 8, 7, 8};
    expect_close(got, want, 4, 0);
}

Test(reference, sort_ops_are_stable_and_top_k_prefers_lower_indices)
{
    static const float a[] = {3, 1, 2, 1, 3};
    float got[5];
    run(tsr_argsort(fx.ctx, input(TSR_TYPE_F32, 5, 1, 1, a), TSR_SORT_ASC), got);
    const float asc[] = {1, 3, 2, 0, 4};
    expect_close(got, asc, 5, 0);
}

Test(reference, argsort_descending_and_top_k)
{
    static const float a[] = {3, 1, 2, 1, 3};
    float got[5];
    tsr_tensor *x = input(TSR_TYPE_F32, 5, 1, 1, a);
    run(tsr_argsort(fx.ctx, x, TSR_SORT_DESC), got);
    const float desc[] = {0, 4, 2, 1, 3};
    expect_close(got, desc, 5, 0);
}

Test(reference, top_k_and_argmax)
{
    static const float a[] = {1, 5, 2, 5, -1, 0, 7, 7};
    float got[4];
    run(tsr_top_k(fx.ctx, input(TSR_TYPE_F32, 4, 2, 1, a), 2), got);
    const float want[] = {1, 3, 2, 3};
    expect_close(got, want, 4, 0);
}

Test(reference, argmax_takes_the_first_maximum)
{
    static const float a[] = {1, 5, 2, 5, -1, 0, 7, 7};
    float got[2];
    run(tsr_argmax(fx.ctx, input(TSR_TYPE_F32, 4, 2, 1, a)), got);
    const float want[] = {1, 2};
    expect_close(got, want, 2, 0);
}

Test(reference, glu_multiplies_the_activated_gate_by_up)
{
    static const float a[] = {1, -2, 3, 4}; /* fused [gate | up], F = 2 */
    float got[2];
    run(tsr_glu(fx.ctx, input(TSR_TYPE_F32, 4, 1, 1, a), NULL, TSR_GLU_SWIGLU, false), got);
    const float silu1 = 1.0f / (1.0f + expf(-1.0f)), silu_m2 = -2.0f / (1.0f + expf(2.0f));
    const float want[] = {silu1 * 3, silu_m2 * 4};
    expect_close(got, want, 2, 1e-6f);
}

Test(reference, gelu_uses_the_tanh_approximation)
{
    static const float a[] = {1.0f, -1.0f, 0.0f};
    float got[3];
    run(tsr_gelu(fx.ctx, input(TSR_TYPE_F32, 3, 1, 1, a)), got);
    const float want[] = {0.8411920f, -0.1588080f, 0.0f};
    expect_close(got, want, 3, 1e-5f);
}

Test(reference, rows_tables_gather_and_scatter)
{
    static const float table[] = {0, 1, 10, 11, 20, 21};
    static const int32_t ids[] = {2, 0, 2};
    float got[6];
    run(tsr_get_rows(fx.ctx, input(TSR_TYPE_F32, 2, 3, 1, table),
                     input(TSR_TYPE_I32, 3, 1, 1, ids)),
        got);
    const float want[] = {20, 21, 0, 1, 20, 21};
    expect_close(got, want, 6, 0);
}

Test(reference, set_rows_writes_only_the_named_rows)
{
    static const uint16_t dst[6] = {0}; /* f16 zeros */
    static const float src[] = {7, 8};
    static const int32_t ids[] = {1};
    float got[6];
    run(tsr_set_rows(fx.ctx, input(TSR_TYPE_F16, 2, 3, 1, dst), input(TSR_TYPE_F32, 2, 1, 1, src),
                     input(TSR_TYPE_I32, 1, 1, 1, ids)),
        got);
    const float want[] = {0, 0, 7, 8, 0, 0};
    expect_close(got, want, 6, 0);
}

Test(reference, broadcast_add_concat_and_sum_rows)
{
    static const float a[] = {1, 2, 3, 4, 5, 6}, b[] = {10, 20, 30};
    float got[6];
    run(tsr_add(fx.ctx, input(TSR_TYPE_F32, 3, 2, 1, a), input(TSR_TYPE_F32, 3, 1, 1, b)), got);
    const float want[] = {11, 22, 33, 14, 25, 36};
    expect_close(got, want, 6, 0);
}

Test(reference, concat_joins_along_the_requested_dim)
{
    static const float a[] = {1, 2, 3, 4}, b[] = {5, 6};
    float got[6];
    run(tsr_concat(fx.ctx, input(TSR_TYPE_F32, 2, 2, 1, a), input(TSR_TYPE_F32, 1, 2, 1, b), 0),
        got);
    const float want[] = {1, 2, 5, 3, 4, 6};
    expect_close(got, want, 6, 0);
}

Test(reference, sum_rows_and_scale)
{
    static const float a[] = {1, 2, 3, 4, 5, 6};
    float got[2];
    run(tsr_sum_rows(fx.ctx, tsr_scale_bias(fx.ctx, input(TSR_TYPE_F32, 3, 2, 1, a), 2.0f, 1.0f)),
        got);
    const float want[] = {15, 33};
    expect_close(got, want, 2, 0);
}

Test(reference, cont_of_a_transpose_reorders_elements)
{
    static const float a[] = {1, 2, 3, 4, 5, 6}; /* [3, 2] */
    float got[6];
    run(tsr_cont(fx.ctx, tsr_transpose(fx.ctx, input(TSR_TYPE_F32, 3, 2, 1, a))), got);
    const float want[] = {1, 4, 2, 5, 3, 6};
    expect_close(got, want, 6, 0);
}
