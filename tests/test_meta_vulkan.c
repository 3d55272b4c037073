/* tests/test_meta_vulkan.c — the meta device over CPU devices and a Vulkan
 * device gives the single-device result.
 *
 * This is test_meta.c's suite (a Llama-style layer, prefill and decode, for
 * 1..6 devices, uneven ratios, zero slices, fused QKV, MoE, every weight
 * type, and its error paths) compiled once more with the CPU registry
 * replaced by a mixed list: cpu0, vulkan0, cpu1, cpu2, ... So the reference
 * run is on cpu0 and every meta device with two or more sub-devices spans
 * the CPU and the Vulkan device (split, all-reduced, with zero slices on
 * either). Any change to test_meta.c's graph tests applies here too.
 *
 * Without a Vulkan device every test skips, saying why. ctest runs it with
 * TSR_CPU_DEVICES=6 and the validation layer on.
 */
#include <criterion/criterion.h>

#include "core/backend_impl.h"
#include "tessera/vulkan.h"
#include "testutil.h"

/* ---- the mixed registry: cpu0, vulkan0, cpu1, cpu2, ... ------------------------------------ */

static const char *mix_name(tsr_reg *r)
{
    (void)r;
    return "cpu+vulkan";
}

static size_t mix_count(tsr_reg *r)
{
    (void)r;
    return tsr_reg_dev_count(tsr_cpu_reg()) + (tsr_reg_dev_count(tsr_vulkan_reg()) ? 1 : 0);
}

static tsr_dev *mix_dev(tsr_reg *r, size_t i)
{
    (void)r;
    if (i == 1 && tsr_reg_dev_count(tsr_vulkan_reg()))
        return tsr_reg_dev_get(tsr_vulkan_reg(), 0);
    return tsr_reg_dev_get(tsr_cpu_reg(), i > 1 ? i - 1 : i);
}

static const struct tsr_reg_i mix_iface = {
    .get_name = mix_name,
    .get_dev_count = mix_count,
    .get_dev = mix_dev,
};

static tsr_reg *mix_reg(void)
{
    static tsr_reg reg = {.iface = &mix_iface};
    return &reg;
}

static void need_vulkan(void)
{
    if (tsr_reg_dev_count(tsr_vulkan_reg()) == 0)
        cr_skip_test("no Vulkan device: %s",
                     *tsr_vulkan_reason() ? tsr_vulkan_reason() : "none listed");
}

static void no_validation_errors(void)
{
    if (tsr_reg_dev_count(tsr_vulkan_reg()) > 0)
        cr_expect_eq(tsr_vulkan_validation_errors(), 0,
                     "the validation layer reported %llu error(s) (see the log)",
                     (unsigned long long)tsr_vulkan_validation_errors());
}

TestSuite(meta, .init = need_vulkan, .fini = no_validation_errors);

#define tsr_cpu_reg mix_reg
#include "test_meta.c"
#undef tsr_cpu_reg
