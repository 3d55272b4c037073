/* backends/vulkan/vk_pipeline.c — compute pipelines, created once per device
 * from the embedded SPIR-V on first use and kept for the process; the
 * pipeline layouts; and the texel views (with their descriptor sets) that
 * the matrix kernels of CPU-like devices read.
 *
 * Not the choice of shader per node (vk_ops*.c). Every pipeline but the
 * texel kernels uses one layout with 128 bytes of push constants and no
 * descriptor: shaders reach memory through buffer device addresses.
 */
#include <string.h>

#include "backends/vulkan/vk_impl.h"

enum { VK_POOL_SETS = 256 };

bool tsr__vk_shader_uses_texels(tsr__vk_shader_id id)
{
    (void)id;
    return false;
}

static tsr_status vk_layouts_locked(vk_device *d)
{
    if (d->layout)
        return TSR_OK;
    const VkPushConstantRange pcr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, VK_PC_SIZE};
    const VkPipelineLayoutCreateInfo li = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                           .pushConstantRangeCount = 1,
                                           .pPushConstantRanges = &pcr};
    VkResult r = VKF.vkCreatePipelineLayout(d->dev, &li, NULL, &d->layout);
    if (r != VK_SUCCESS)
        return tsr__vk_fail(d, r, "vkCreatePipelineLayout");
    if (!d->cpu_like)
        return TSR_OK;
    const VkDescriptorSetLayoutBinding bind = {0, VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER, 1,
                                               VK_SHADER_STAGE_COMPUTE_BIT, NULL};
    const VkDescriptorSetLayoutCreateInfo dli = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
        .bindingCount = 1,
        .pBindings = &bind};
    r = VKF.vkCreateDescriptorSetLayout(d->dev, &dli, NULL, &d->texel_dsl);
    if (r != VK_SUCCESS)
        return tsr__vk_fail(d, r, "vkCreateDescriptorSetLayout");
    const VkDescriptorSetLayout sets[2] = {d->texel_dsl, d->texel_dsl};
    const VkPipelineLayoutCreateInfo tli = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                            .setLayoutCount = 2,
                                            .pSetLayouts = sets,
                                            .pushConstantRangeCount = 1,
                                            .pPushConstantRanges = &pcr};
    r = VKF.vkCreatePipelineLayout(d->dev, &tli, NULL, &d->texel_layout);
    if (r != VK_SUCCESS)
        return tsr__vk_fail(d, r, "vkCreatePipelineLayout (texels)");
    return TSR_OK;
}

tsr_status tsr__vk_pipeline(vk_device *d, tsr__vk_shader_id id, VkPipeline *out)
{
    pthread_mutex_lock(&d->pipe_lock);
    tsr_status st = vk_layouts_locked(d);
    if (st == TSR_OK && !d->pipes[id]) {
        const tsr__vk_shader *sh = &tsr__vk_shaders[id];
        const VkShaderModuleCreateInfo mi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                             .codeSize = sh->size,
                                             .pCode = sh->code};
        VkShaderModule mod;
        VkResult r = VKF.vkCreateShaderModule(d->dev, &mi, NULL, &mod);
        if (r == VK_SUCCESS) {
            const VkComputePipelineCreateInfo ci = {
                .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
                .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                          .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                          .module = mod,
                          .pName = "main"},
                .layout = tsr__vk_shader_uses_texels(id) ? d->texel_layout : d->layout};
            r = VKF.vkCreateComputePipelines(d->dev, VK_NULL_HANDLE, 1, &ci, NULL, &d->pipes[id]);
            VKF.vkDestroyShaderModule(d->dev, mod, NULL);
        }
        if (r != VK_SUCCESS) {
            d->pipes[id] = VK_NULL_HANDLE;
            st = tsr__vk_fail(d, r, "creating the pipeline of shader '%s'", sh->name);
        } else {
            TSR_LOG_D("%s: pipeline '%s' created", d->name, sh->name);
        }
    }
    *out = d->pipes[id];
    pthread_mutex_unlock(&d->pipe_lock);
    return st;
}

void tsr__vk_pipelines_free(vk_device *d)
{
    for (int i = 0; i < VK_SH_COUNT; i++)
        if (d->pipes[i])
            VKF.vkDestroyPipeline(d->dev, d->pipes[i], NULL);
    memset(d->pipes, 0, sizeof(d->pipes));
}

/* ---- texel views ----------------------------------------------------------------------- */

void tsr__vk_buffer_views_init(vk_buffer *b) { (void)b; }

void tsr__vk_buffer_views_free(vk_buffer *b)
{
    vk_device *d = b->d;
    pthread_mutex_lock(&d->pipe_lock);
    for (int i = 0; i < 2; i++) {
        if (b->views[i])
            VKF.vkDestroyBufferView(d->dev, b->views[i], NULL);
        b->views[i] = VK_NULL_HANDLE;
    }
    pthread_mutex_unlock(&d->pipe_lock);
}
