/* backends/vulkan/vk_pipeline.c — compute pipelines, created once per device
 * from the embedded SPIR-V on first use and kept for the process; the
 * pipeline layouts; and the texel views (with their descriptor sets) that
 * the matrix kernels of CPU-like devices read.
 *
 * Not the choice of shader per node (vk_ops*.c). Every pipeline but the
 * texel kernels uses one layout with 128 bytes of push constants and no
 * descriptor: shaders reach memory through buffer device addresses.
 */
#include <stdlib.h>
#include <string.h>

#include "backends/vulkan/vk_impl.h"

enum { VK_POOL_SETS = 256 };

bool tsr__vk_shader_uses_texels(tsr__vk_shader_id id)
{
    return id == VK_SH_mmt || id == VK_SH_mvt || id == VK_SH_mmt_h || id == VK_SH_mvt_h ||
           id == VK_SH_mmt_b || id == VK_SH_mvt_b;
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
    for (size_t i = 0; i < d->n_pools; i++)
        VKF.vkDestroyDescriptorPool(d->dev, d->pools[i], NULL);
    free(d->pools);
    free(d->pool_used);
    d->pools = NULL;
    d->pool_used = NULL;
    d->n_pools = 0;
    if (d->layout)
        VKF.vkDestroyPipelineLayout(d->dev, d->layout, NULL);
    if (d->texel_layout)
        VKF.vkDestroyPipelineLayout(d->dev, d->texel_layout, NULL);
    if (d->texel_dsl)
        VKF.vkDestroyDescriptorSetLayout(d->dev, d->texel_dsl, NULL);
    d->layout = d->texel_layout = VK_NULL_HANDLE;
    d->texel_dsl = VK_NULL_HANDLE;
}

/* ---- texel views ----------------------------------------------------------------------- */

/* A descriptor set of the texel layout from a pool with room left (a new
 * pool when all are full); *pool says which. Counting the sets keeps every
 * allocation within the pool's size. Called with pipe_lock held. */
static VkDescriptorSet vk_texel_set_locked(vk_device *d, VkDescriptorPool *pool)
{
    size_t i = 0;
    while (i < d->n_pools && d->pool_used[i] >= VK_POOL_SETS)
        i++;
    if (i == d->n_pools) {
        VkDescriptorPool *pools = realloc(d->pools, (d->n_pools + 1) * sizeof(*pools));
        if (pools)
            d->pools = pools;
        uint32_t *used = realloc(d->pool_used, (d->n_pools + 1) * sizeof(*used));
        if (used)
            d->pool_used = used;
        if (!pools || !used)
            return VK_NULL_HANDLE;
        const VkDescriptorPoolSize size = {VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER, VK_POOL_SETS};
        const VkDescriptorPoolCreateInfo pi = {
            .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
            .flags = VK_DESCRIPTOR_POOL_CREATE_FREE_DESCRIPTOR_SET_BIT,
            .maxSets = VK_POOL_SETS,
            .poolSizeCount = 1,
            .pPoolSizes = &size};
        if (VKF.vkCreateDescriptorPool(d->dev, &pi, NULL, &d->pools[i]) != VK_SUCCESS)
            return VK_NULL_HANDLE;
        d->pool_used[i] = 0;
        d->n_pools++;
    }
    const VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                            .descriptorPool = d->pools[i],
                                            .descriptorSetCount = 1,
                                            .pSetLayouts = &d->texel_dsl};
    VkDescriptorSet set = VK_NULL_HANDLE;
    if (VKF.vkAllocateDescriptorSets(d->dev, &ai, &set) != VK_SUCCESS)
        return VK_NULL_HANDLE;
    d->pool_used[i]++;
    *pool = d->pools[i];
    return set;
}

const VkFormat tsr__vk_texel_formats[VK_TEXEL_VIEWS] = {
    VK_FORMAT_R32G32B32A32_SFLOAT, VK_FORMAT_R16G16B16A16_SFLOAT, VK_FORMAT_R32G32B32A32_UINT};
const size_t tsr__vk_texel_bytes[VK_TEXEL_VIEWS] = {16, 8, 16};

/* Views of the whole buffer as RGBA32F, RGBA16F and RGBA32UI texels (as far
 * as maxTexelBufferElements reaches), each in its own descriptor set: F32
 * weights and activations, F16 weights whose rows are not on 16 bytes, and
 * F16 or BF16 weights 8 to a texel. A view that cannot be made is left out:
 * the matrix kernels then use the tiled GEMM for tensors in this buffer. */
void tsr__vk_buffer_views_init(vk_buffer *b)
{
    vk_device *d = b->d;
    const size_t *texel = tsr__vk_texel_bytes;
    pthread_mutex_lock(&d->pipe_lock);
    if (vk_layouts_locked(d) != TSR_OK) {
        pthread_mutex_unlock(&d->pipe_lock);
        return;
    }
    for (int i = 0; i < VK_TEXEL_VIEWS; i++) {
        const size_t range =
            TSR_MIN(b->m.size / texel[i], (size_t)d->limits.maxTexelBufferElements) * texel[i];
        if (!d->texels[i] || range == 0)
            continue;
        const VkBufferViewCreateInfo vi = {.sType = VK_STRUCTURE_TYPE_BUFFER_VIEW_CREATE_INFO,
                                           .buffer = b->m.buf,
                                           .format = tsr__vk_texel_formats[i],
                                           .offset = 0,
                                           .range = range};
        if (VKF.vkCreateBufferView(d->dev, &vi, NULL, &b->views[i]) != VK_SUCCESS) {
            b->views[i] = VK_NULL_HANDLE;
            continue;
        }
        b->sets[i] = vk_texel_set_locked(d, &b->set_pools[i]);
        if (!b->sets[i]) {
            VKF.vkDestroyBufferView(d->dev, b->views[i], NULL);
            b->views[i] = VK_NULL_HANDLE;
            continue;
        }
        b->view_texels[i] = range / texel[i];
        const VkWriteDescriptorSet w = {.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                        .dstSet = b->sets[i],
                                        .dstBinding = 0,
                                        .descriptorCount = 1,
                                        .descriptorType = VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER,
                                        .pTexelBufferView = &b->views[i]};
        VKF.vkUpdateDescriptorSets(d->dev, 1, &w, 0, NULL);
    }
    pthread_mutex_unlock(&d->pipe_lock);
}

void tsr__vk_buffer_views_free(vk_buffer *b)
{
    vk_device *d = b->d;
    pthread_mutex_lock(&d->pipe_lock);
    for (int i = 0; i < VK_TEXEL_VIEWS; i++) {
        if (b->sets[i]) {
            VKF.vkFreeDescriptorSets(d->dev, b->set_pools[i], 1, &b->sets[i]);
            for (size_t p = 0; p < d->n_pools; p++)
                if (d->pools[p] == b->set_pools[i])
                    d->pool_used[p]--;
        }
        if (b->views[i])
            VKF.vkDestroyBufferView(d->dev, b->views[i], NULL);
        b->views[i] = VK_NULL_HANDLE;
        b->sets[i] = VK_NULL_HANDLE;
    }
    pthread_mutex_unlock(&d->pipe_lock);
}
