/* backends/vulkan/vk_loader.c — opens the Vulkan loader at run time and
 * fills the table of Vulkan entry points the backend calls (tsr__vkf).
 *
 * Not the instance or devices (vk_device.c). The loader is dlopen'ed, so
 * libtessera has no link-time dependency on libvulkan: without it the
 * registry simply has no devices. Every entry point comes from
 * vkGetInstanceProcAddr (device functions through the instance, which works
 * for every device of it); the names live in one X-macro list in
 * vk_impl.h.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "backends/vulkan/vk_impl.h"

tsr__vk_fns tsr__vkf;

tsr_status tsr__vk_load(char *why, size_t why_size)
{
    /* TSR_VULKAN_LOADER names another loader (or a missing one, to test
     * a machine without Vulkan). */
    const char *want = getenv("TSR_VULKAN_LOADER");
    const char *names[] = {want && *want ? want : "libvulkan.so.1", "libvulkan.so"};
    void *lib = NULL;
    for (size_t i = 0; i < (want && *want ? 1u : 2u) && !lib; i++)
        lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(why, why_size, "no Vulkan loader (%s: %s)", names[0], dlerror());
        return TSR_ENOTFOUND;
    }
    /* Casting the object pointer dlsym returns to a function pointer is
     * what POSIX prescribes for dlsym. */
    void *sym = dlsym(lib, "vkGetInstanceProcAddr");
    if (!sym) {
        snprintf(why, why_size, "the Vulkan loader has no vkGetInstanceProcAddr");
        return TSR_ENOTFOUND;
    }
    *(void **)&VKF.vkGetInstanceProcAddr = sym;
#define TSR_VK_LOAD_GLOBAL(name) VKF.name = (PFN_##name)VKF.vkGetInstanceProcAddr(NULL, #name);
    TSR_VK_GLOBAL_FNS(TSR_VK_LOAD_GLOBAL)
#undef TSR_VK_LOAD_GLOBAL
    if (!VKF.vkCreateInstance || !VKF.vkEnumerateInstanceVersion) {
        snprintf(why, why_size, "the Vulkan loader predates Vulkan 1.1");
        return TSR_ENOTFOUND;
    }
    return TSR_OK;
}

void tsr__vk_load_instance(VkInstance instance)
{
#define TSR_VK_LOAD(name) VKF.name = (PFN_##name)VKF.vkGetInstanceProcAddr(instance, #name);
    TSR_VK_INSTANCE_FNS(TSR_VK_LOAD)
    TSR_VK_DEVICE_FNS(TSR_VK_LOAD)
#undef TSR_VK_LOAD
}

const char *tsr__vk_result_str(VkResult r)
{
    switch (r) {
#define TSR_VK_RESULT(name) \
    case name:              \
        return #name;
        TSR_VK_RESULT(VK_SUCCESS)
        TSR_VK_RESULT(VK_NOT_READY)
        TSR_VK_RESULT(VK_TIMEOUT)
        TSR_VK_RESULT(VK_INCOMPLETE)
        TSR_VK_RESULT(VK_ERROR_OUT_OF_HOST_MEMORY)
        TSR_VK_RESULT(VK_ERROR_OUT_OF_DEVICE_MEMORY)
        TSR_VK_RESULT(VK_ERROR_INITIALIZATION_FAILED)
        TSR_VK_RESULT(VK_ERROR_DEVICE_LOST)
        TSR_VK_RESULT(VK_ERROR_MEMORY_MAP_FAILED)
        TSR_VK_RESULT(VK_ERROR_LAYER_NOT_PRESENT)
        TSR_VK_RESULT(VK_ERROR_EXTENSION_NOT_PRESENT)
        TSR_VK_RESULT(VK_ERROR_FEATURE_NOT_PRESENT)
        TSR_VK_RESULT(VK_ERROR_INCOMPATIBLE_DRIVER)
        TSR_VK_RESULT(VK_ERROR_TOO_MANY_OBJECTS)
        TSR_VK_RESULT(VK_ERROR_FORMAT_NOT_SUPPORTED)
        TSR_VK_RESULT(VK_ERROR_FRAGMENTED_POOL)
        TSR_VK_RESULT(VK_ERROR_UNKNOWN)
        TSR_VK_RESULT(VK_ERROR_OUT_OF_POOL_MEMORY)
        TSR_VK_RESULT(VK_ERROR_INVALID_EXTERNAL_HANDLE)
        TSR_VK_RESULT(VK_ERROR_FRAGMENTATION)
        TSR_VK_RESULT(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS)
#undef TSR_VK_RESULT
    default:
        return "VkResult (unknown)";
    }
}
