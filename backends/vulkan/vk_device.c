/* backends/vulkan/vk_device.c — the Vulkan registry and its devices: the
 * instance (with the validation layer on request), one tessera device per
 * usable physical device, the logical device created on first use, and the
 * device entries of the backend interface.
 *
 * Not memory (vk_memory.c), streams (vk_stream.c) or kernels. Enumeration
 * only reads properties, so listing devices is cheap for processes that
 * never use one; the VkDevice, its queue and memory types come with the
 * first buffer or stream. Validation errors are counted by a debug-utils
 * messenger and turned into TSR_EDEVICE by the next call that checks
 * (tsr__vk_validation_check), so a test cannot pass over one.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/vulkan/vk_impl.h"

static tsr_reg vk_reg;
static vk_device vk_devs[VK_MAX_DEVICES];
static size_t vk_n_devs;
static VkInstance vk_instance;
static bool vk_validation;
static char vk_reason[512]; /* why there are no (or fewer) devices */
static VkDebugUtilsMessengerEXT vk_messenger_handle;

static const struct tsr_dev_i vk_dev_iface;
extern const struct tsr_buft_i tsr__vk_buft_iface;

/* ---- validation messages ----------------------------------------------------------- */

static atomic_uint_fast64_t vk_val_errors, vk_val_reported;
static pthread_mutex_t vk_val_lock = PTHREAD_MUTEX_INITIALIZER;
static char vk_val_first[512]; /* first error not yet reported */

static VKAPI_ATTR VkBool32 VKAPI_CALL vk_messenger(VkDebugUtilsMessageSeverityFlagBitsEXT sev,
                                                   VkDebugUtilsMessageTypeFlagsEXT types,
                                                   const VkDebugUtilsMessengerCallbackDataEXT *cb,
                                                   void *user)
{
    (void)user;
    const char *msg = cb && cb->pMessage ? cb->pMessage : "(no message)";
    if (sev & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) {
        pthread_mutex_lock(&vk_val_lock);
        if (atomic_load(&vk_val_errors) == atomic_load(&vk_val_reported))
            snprintf(vk_val_first, sizeof(vk_val_first), "%s", msg);
        atomic_fetch_add(&vk_val_errors, 1);
        pthread_mutex_unlock(&vk_val_lock);
        TSR_LOG_E("vulkan validation error: %s", msg);
    } else if (sev & VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) {
        TSR_LOG_I("vulkan validation warning (%s): %s",
                  (types & VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT) ? "performance"
                                                                            : "general",
                  msg);
    }
    return VK_FALSE;
}

tsr_status tsr__vk_validation_check(void)
{
    if (!vk_validation)
        return TSR_OK;
    const uint64_t n = atomic_load(&vk_val_errors);
    if (n == atomic_load(&vk_val_reported))
        return TSR_OK;
    pthread_mutex_lock(&vk_val_lock);
    const uint64_t before = atomic_exchange(&vk_val_reported, n);
    char first[512];
    snprintf(first, sizeof(first), "%s", vk_val_first);
    pthread_mutex_unlock(&vk_val_lock);
    if (before == n)
        return TSR_OK;
    return tsr__error(TSR_EDEVICE, "vulkan: the validation layer reported %llu error(s); first: %s",
                      (unsigned long long)(n - before), first);
}

const char *tsr_vulkan_reason(void)
{
    tsr_vulkan_reg();
    return vk_reason;
}

bool tsr_vulkan_validation_enabled(void)
{
    tsr_vulkan_reg();
    return vk_validation;
}

uint64_t tsr_vulkan_validation_errors(void)
{
    tsr_vulkan_reg();
    return atomic_load(&vk_val_errors);
}

/* At exit: when the application freed every buffer and stream, the
 * devices and the instance are destroyed (so that leak checkers see only
 * real leaks, and the validation layer checks that nothing was left
 * behind); errors nobody reported are still made visible. */
static void vk_atexit(void)
{
    bool all_free = true;
    for (size_t i = 0; i < vk_n_devs; i++) {
        vk_device *d = &vk_devs[i];
        if (!d->dev)
            continue;
        pthread_mutex_lock(&d->streams_lock);
        const size_t user_streams = d->n_streams - (d->xfer ? 1 : 0);
        pthread_mutex_unlock(&d->streams_lock);
        if (user_streams > 0 || atomic_load(&d->n_buffers) > 0) {
            all_free = false;
            continue;
        }
        tsr__vk_stream_free(d->xfer);
        d->xfer = NULL;
        VKF.vkDeviceWaitIdle(d->dev);
        tsr__vk_pipelines_free(d);
        VKF.vkDestroyDevice(d->dev, NULL);
        d->dev = VK_NULL_HANDLE;
    }
    if (all_free && vk_instance) {
        if (vk_messenger_handle)
            VKF.vkDestroyDebugUtilsMessengerEXT(vk_instance, vk_messenger_handle, NULL);
        VKF.vkDestroyInstance(vk_instance, NULL);
        vk_instance = VK_NULL_HANDLE;
    }
    const uint64_t n = atomic_load(&vk_val_errors);
    if (n > 0)
        fprintf(stderr,
                "tessera: the Vulkan validation layer reported %llu error(s) in this "
                "process\n",
                (unsigned long long)n);
}

/* ---- errors -------------------------------------------------------------------------- */

tsr_status tsr__vk_fail(const vk_device *d, VkResult r, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    const tsr_status st = (r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_OUT_OF_DEVICE_MEMORY)
                              ? TSR_ENOMEM
                              : TSR_EDEVICE;
    return tsr__error(st, "%s: %s: %s", d ? d->name : "vulkan", what, tsr__vk_result_str(r));
}

/* ---- instance and enumeration ----------------------------------------------------------- */

static bool vk_has_layer(const char *name)
{
    uint32_t n = 0;
    if (VKF.vkEnumerateInstanceLayerProperties(&n, NULL) != VK_SUCCESS || n == 0)
        return false;
    VkLayerProperties *p = calloc(n, sizeof(*p));
    bool found = false;
    if (p && VKF.vkEnumerateInstanceLayerProperties(&n, p) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !found; i++)
            found = strcmp(p[i].layerName, name) == 0;
    free(p);
    return found;
}

static bool vk_has_instance_ext(const char *name)
{
    uint32_t n = 0;
    if (VKF.vkEnumerateInstanceExtensionProperties(NULL, &n, NULL) != VK_SUCCESS)
        return false;
    VkExtensionProperties *p = calloc(n ? n : 1, sizeof(*p));
    bool found = false;
    if (p && VKF.vkEnumerateInstanceExtensionProperties(NULL, &n, p) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !found; i++)
            found = strcmp(p[i].extensionName, name) == 0;
    free(p);
    return found;
}

static bool vk_has_device_ext(VkPhysicalDevice phys, const char *name)
{
    uint32_t n = 0;
    if (VKF.vkEnumerateDeviceExtensionProperties(phys, NULL, &n, NULL) != VK_SUCCESS)
        return false;
    VkExtensionProperties *p = calloc(n ? n : 1, sizeof(*p));
    bool found = false;
    if (p && VKF.vkEnumerateDeviceExtensionProperties(phys, NULL, &n, p) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !found; i++)
            found = strcmp(p[i].extensionName, name) == 0;
    free(p);
    return found;
}

static VkDebugUtilsMessengerCreateInfoEXT vk_messenger_info(void)
{
    return (VkDebugUtilsMessengerCreateInfoEXT){
        .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
        .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT |
                           VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT,
        .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
        .pfnUserCallback = vk_messenger,
    };
}

static tsr_status vk_instance_create(char *why, size_t why_size)
{
    uint32_t version = 0;
    if (VKF.vkEnumerateInstanceVersion(&version) != VK_SUCCESS || version < VK_API_VERSION_1_2) {
        snprintf(why, why_size, "the Vulkan loader supports %u.%u; 1.2 is needed",
                 VK_API_VERSION_MAJOR(version), VK_API_VERSION_MINOR(version));
        return TSR_ENOTFOUND;
    }
    const char *layers[1];
    const char *exts[1];
    uint32_t n_layers = 0, n_exts = 0;
    const bool want_validation = tsr__env_long("TSR_VULKAN_VALIDATION", 0) != 0;
    if (want_validation) {
        if (!vk_has_layer("VK_LAYER_KHRONOS_validation"))
            TSR_LOG_W("vulkan: TSR_VULKAN_VALIDATION=1 but VK_LAYER_KHRONOS_validation is not "
                      "installed (Debian: vulkan-validationlayers); running without it");
        else if (!vk_has_instance_ext(VK_EXT_DEBUG_UTILS_EXTENSION_NAME))
            TSR_LOG_W("vulkan: TSR_VULKAN_VALIDATION=1 but VK_EXT_debug_utils is missing; "
                      "running without validation");
        else {
            layers[n_layers++] = "VK_LAYER_KHRONOS_validation";
            exts[n_exts++] = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
        }
    }
    const VkApplicationInfo app = {
        .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
        .pApplicationName = "tessera",
        .pEngineName = "tessera",
        .apiVersion = version >= VK_API_VERSION_1_3 ? VK_API_VERSION_1_3 : VK_API_VERSION_1_2,
    };
    VkDebugUtilsMessengerCreateInfoEXT dbg = vk_messenger_info();
    const VkInstanceCreateInfo ici = {
        .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
        .pNext = n_layers ? &dbg : NULL,
        .pApplicationInfo = &app,
        .enabledLayerCount = n_layers,
        .ppEnabledLayerNames = layers,
        .enabledExtensionCount = n_exts,
        .ppEnabledExtensionNames = exts,
    };
    VkResult r = VKF.vkCreateInstance(&ici, NULL, &vk_instance);
    if (r != VK_SUCCESS) {
        snprintf(why, why_size, "vkCreateInstance: %s", tsr__vk_result_str(r));
        return TSR_EDEVICE;
    }
    tsr__vk_load_instance(vk_instance);
    atexit(vk_atexit);
    if (n_layers) {
        if (VKF.vkCreateDebugUtilsMessengerEXT &&
            VKF.vkCreateDebugUtilsMessengerEXT(vk_instance, &dbg, NULL, &vk_messenger_handle) ==
                VK_SUCCESS) {
            vk_validation = true;
            TSR_LOG_I("vulkan: validation layer on");
        } else {
            TSR_LOG_W("vulkan: the debug messenger could not be created; running without "
                      "validation");
        }
    }
    return TSR_OK;
}

/* Which physical devices TSR_VULKAN_DEVICES selects ("0,2", "none"; unset:
 * all). */
static bool vk_selected(uint32_t index)
{
    const char *env = getenv("TSR_VULKAN_DEVICES");
    if (!env || !*env)
        return true;
    if (strcmp(env, "none") == 0)
        return false;
    const char *p = env;
    while (*p) {
        char *end;
        const long v = strtol(p, &end, 10);
        if (end == p)
            break;
        if (v == (long)index)
            return true;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            break;
    }
    return false;
}

static const char *vk_type_str(VkPhysicalDeviceType t)
{
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
        return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
        return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
        return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
        return "CPU";
    default:
        return "other";
    }
}

/* Reads one physical device; false (with the reason) when it lacks what the
 * backend needs. */
static bool vk_probe(VkPhysicalDevice phys, uint32_t index, vk_device *d, char *why,
                     size_t why_size)
{
    VkPhysicalDeviceMaintenance3Properties m3 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
    VkPhysicalDeviceVulkan11Properties p11 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_PROPERTIES, .pNext = &m3};
    VkPhysicalDeviceVulkan12Properties p12 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_PROPERTIES, .pNext = &p11};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                      .pNext = &p12};
    VkPhysicalDeviceProperties base;
    VKF.vkGetPhysicalDeviceProperties(phys, &base);
    snprintf(d->desc, sizeof(d->desc), "%s", base.deviceName);
    if (base.apiVersion < VK_API_VERSION_1_2) {
        snprintf(why, why_size, "Vulkan %u.%u (1.2 needed)", VK_API_VERSION_MAJOR(base.apiVersion),
                 VK_API_VERSION_MINOR(base.apiVersion));
        return false;
    }
    VKF.vkGetPhysicalDeviceProperties2(phys, &p2);

    VkPhysicalDeviceVulkan11Features f11 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
    VkPhysicalDeviceVulkan12Features f12 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES, .pNext = &f11};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                    .pNext = &f12};
    VKF.vkGetPhysicalDeviceFeatures2(phys, &f2);
    const char *missing = !f12.bufferDeviceAddress        ? "bufferDeviceAddress"
                          : !f12.timelineSemaphore        ? "timelineSemaphore"
                          : !f2.features.shaderInt64      ? "shaderInt64"
                          : !f11.storageBuffer16BitAccess ? "storageBuffer16BitAccess"
                                                          : NULL;
    if (missing) {
        snprintf(why, why_size, "no %s", missing);
        return false;
    }
    if (base.limits.maxComputeWorkGroupInvocations < 256 ||
        base.limits.maxComputeWorkGroupSize[0] < 256) {
        snprintf(why, why_size, "workgroups of %u invocations (256 needed)",
                 base.limits.maxComputeWorkGroupInvocations);
        return false;
    }
    uint32_t nq = 0;
    VKF.vkGetPhysicalDeviceQueueFamilyProperties(phys, &nq, NULL);
    VkQueueFamilyProperties *qf = calloc(nq ? nq : 1, sizeof(*qf));
    VKF.vkGetPhysicalDeviceQueueFamilyProperties(phys, &nq, qf);
    /* A compute-only family (an asynchronous compute engine) if there is
     * one, else the first with compute. */
    int64_t fam = -1;
    for (uint32_t i = 0; i < nq; i++) {
        if (!(qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) || qf[i].queueCount == 0)
            continue;
        if (fam < 0 || !(qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT))
            fam = i;
        if (!(qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT))
            break;
    }
    free(qf);
    if (fam < 0) {
        snprintf(why, why_size, "no compute queue");
        return false;
    }

    VkPhysicalDeviceMemoryProperties mp;
    VKF.vkGetPhysicalDeviceMemoryProperties(phys, &mp);
    uint64_t heap = 0;
    uint32_t heap_index = 0;
    for (uint32_t i = 0; i < mp.memoryHeapCount; i++)
        if ((mp.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) &&
            mp.memoryHeaps[i].size > heap) {
            heap = mp.memoryHeaps[i].size;
            heap_index = i;
        }
    if (heap == 0) {
        snprintf(why, why_size, "no device-local memory heap");
        return false;
    }

    d->phys = phys;
    d->phys_index = index;
    d->queue_family = (uint32_t)fam;
    d->limits = base.limits;
    d->cpu_like = base.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    d->type = base.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU     ? TSR_DEV_GPU
              : base.deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU ? TSR_DEV_IGPU
              : base.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU            ? TSR_DEV_CPU
                                                                          : TSR_DEV_GPU;
    d->heap_size = heap;
    d->heap_index = heap_index;
    d->max_alloc = m3.maxMemoryAllocationSize ? m3.maxMemoryAllocationSize : heap;
    if (d->max_alloc > heap)
        d->max_alloc = heap;
    d->has_budget = vk_has_device_ext(phys, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
    d->has_f64 = f2.features.shaderFloat64;
    if (d->cpu_like) {
        for (int i = 0; i < VK_TEXEL_VIEWS; i++) {
            VkFormatProperties fp;
            VKF.vkGetPhysicalDeviceFormatProperties(phys, tsr__vk_texel_formats[i], &fp);
            d->texels[i] = (fp.bufferFeatures & VK_FORMAT_FEATURE_UNIFORM_TEXEL_BUFFER_BIT) != 0;
        }
    }
    d->subgroup_size = p11.subgroupSize;
    snprintf(d->desc, sizeof(d->desc),
             "%.120s (%s, Vulkan %u.%u.%u, %.40s %.60s, %llu MiB, max allocation %llu MiB, "
             "storage range %llu MiB)",
             base.deviceName, vk_type_str(base.deviceType), VK_API_VERSION_MAJOR(base.apiVersion),
             VK_API_VERSION_MINOR(base.apiVersion), VK_API_VERSION_PATCH(base.apiVersion),
             p12.driverName, p12.driverInfo, (unsigned long long)(heap >> 20),
             (unsigned long long)(d->max_alloc >> 20),
             (unsigned long long)(base.limits.maxStorageBufferRange >> 20));
    return true;
}

static void vk_reg_init(void)
{
    char why[256];
    tsr_status st = tsr__vk_load(why, sizeof(why));
    if (st == TSR_OK)
        st = vk_instance_create(why, sizeof(why));
    if (st != TSR_OK) {
        snprintf(vk_reason, sizeof(vk_reason), "%s", why);
        TSR_LOG_I("vulkan: no devices: %s", why);
        return;
    }
    uint32_t n = 0;
    VkResult r = VKF.vkEnumeratePhysicalDevices(vk_instance, &n, NULL);
    VkPhysicalDevice *phys = calloc(n ? n : 1, sizeof(*phys));
    if (r == VK_SUCCESS && phys)
        r = VKF.vkEnumeratePhysicalDevices(vk_instance, &n, phys);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
        TSR_LOG_W("vulkan: vkEnumeratePhysicalDevices: %s", tsr__vk_result_str(r));
        n = 0;
    }
    if (n == 0) {
        snprintf(vk_reason, sizeof(vk_reason), "the Vulkan loader lists no physical device");
        TSR_LOG_I("vulkan: %s", vk_reason);
    }
    for (uint32_t i = 0; i < n && vk_n_devs < VK_MAX_DEVICES; i++) {
        if (!vk_selected(i)) {
            snprintf(vk_reason, sizeof(vk_reason),
                     "device %u not selected by TSR_VULKAN_DEVICES=%s", i,
                     getenv("TSR_VULKAN_DEVICES"));
            continue;
        }
        vk_device *d = &vk_devs[vk_n_devs];
        if (!vk_probe(phys[i], i, d, why, sizeof(why))) {
            TSR_LOG_W("vulkan: skipping device %u (%s): %s", i, d->desc, why);
            snprintf(vk_reason, sizeof(vk_reason), "device %u (%.200s) skipped: %.200s", i, d->desc,
                     why);
            memset(d, 0, sizeof(*d));
            continue;
        }
        d->index = (int)vk_n_devs;
        snprintf(d->name, sizeof(d->name), "vulkan%zu", vk_n_devs);
        pthread_mutex_init(&d->init_lock, NULL);
        pthread_mutex_init(&d->queue_lock, NULL);
        pthread_mutex_init(&d->pipe_lock, NULL);
        pthread_mutex_init(&d->streams_lock, NULL);
        pthread_mutex_init(&d->xfer_lock, NULL);
        d->tdev = (tsr_dev){.iface = &vk_dev_iface, .reg = &vk_reg, .context = d};
        d->buft = (tsr_buft){.iface = &tsr__vk_buft_iface, .dev = &d->tdev, .context = d};
        TSR_LOG_I("vulkan: %s = %s", d->name, d->desc);
        vk_n_devs++;
    }
    free(phys);
}

/* ---- the logical device ------------------------------------------------------------------ */

/* The memory type of `props` in the allowed mask preferring `want` flags;
 * UINT32_MAX when none has `need`. */
static uint32_t vk_pick_type(const VkPhysicalDeviceMemoryProperties *mp, VkMemoryPropertyFlags need,
                             VkMemoryPropertyFlags want, int heap)
{
    uint32_t best = UINT32_MAX;
    int best_score = -1;
    for (uint32_t i = 0; i < mp->memoryTypeCount; i++) {
        const VkMemoryPropertyFlags f = mp->memoryTypes[i].propertyFlags;
        if ((f & need) != need)
            continue;
        if (heap >= 0 && mp->memoryTypes[i].heapIndex != (uint32_t)heap)
            continue;
        int score = 0;
        for (int b = 0; b < 8; b++)
            if ((want >> b) & (f >> b) & 1)
                score++;
        if (score > best_score) {
            best = i;
            best_score = score;
        }
    }
    return best;
}

static void vk_device_init_once(vk_device *d)
{
    const float prio = 1.0f;
    const VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                         .queueFamilyIndex = d->queue_family,
                                         .queueCount = 1,
                                         .pQueuePriorities = &prio};
    VkPhysicalDeviceVulkan11Features f11 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
        .storageBuffer16BitAccess = VK_TRUE};
    VkPhysicalDeviceVulkan12Features f12 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
        .pNext = &f11,
        .bufferDeviceAddress = VK_TRUE,
        .timelineSemaphore = VK_TRUE};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                    .pNext = &f12};
    f2.features.shaderInt64 = VK_TRUE;
    f2.features.shaderFloat64 = d->has_f64 ? VK_TRUE : VK_FALSE;
    const char *exts[1];
    uint32_t n_exts = 0;
    if (d->has_budget)
        exts[n_exts++] = VK_EXT_MEMORY_BUDGET_EXTENSION_NAME;
    const VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                                    .pNext = &f2,
                                    .queueCreateInfoCount = 1,
                                    .pQueueCreateInfos = &qci,
                                    .enabledExtensionCount = n_exts,
                                    .ppEnabledExtensionNames = exts};
    VkResult r = VKF.vkCreateDevice(d->phys, &dci, NULL, &d->dev);
    if (r != VK_SUCCESS) {
        d->init_status = tsr__vk_fail(d, r, "vkCreateDevice");
        snprintf(d->init_error, sizeof(d->init_error), "%s", tsr_last_error());
        return;
    }
    VKF.vkGetDeviceQueue(d->dev, d->queue_family, 0, &d->queue);

    VkPhysicalDeviceMemoryProperties mp;
    VKF.vkGetPhysicalDeviceMemoryProperties(d->phys, &mp);
    const VkMemoryPropertyFlags hv =
        VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    /* Tensors: device-local memory of the largest heap. Unified-memory
     * devices (CPU, integrated) prefer a host-visible type there, so that
     * blocking transfers are plain memcpy; discrete GPUs prefer memory the
     * host cannot see (host reads through a BAR are very slow). */
    const bool unified = d->type != TSR_DEV_GPU;
    d->mt_device =
        vk_pick_type(&mp, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT,
                     unified ? hv | VK_MEMORY_PROPERTY_HOST_CACHED_BIT : 0, (int)d->heap_index);
    if (!unified && d->mt_device != UINT32_MAX &&
        (mp.memoryTypes[d->mt_device].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT)) {
        /* Prefer a type without host visibility when one exists. */
        for (uint32_t i = 0; i < mp.memoryTypeCount; i++)
            if (mp.memoryTypes[i].heapIndex == d->heap_index &&
                (mp.memoryTypes[i].propertyFlags & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) &&
                !(mp.memoryTypes[i].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT)) {
                d->mt_device = i;
                break;
            }
    }
    d->mt_host = vk_pick_type(&mp, hv, VK_MEMORY_PROPERTY_HOST_CACHED_BIT, -1);
    if (d->mt_device == UINT32_MAX || d->mt_host == UINT32_MAX) {
        d->init_status = tsr__error(TSR_EDEVICE, "%s: no %s memory type", d->name,
                                    d->mt_device == UINT32_MAX ? "device-local" : "host-visible");
        snprintf(d->init_error, sizeof(d->init_error), "%s", tsr_last_error());
        return;
    }
    d->device_mappable = (mp.memoryTypes[d->mt_device].propertyFlags & hv) == hv;
    /* TSR_VULKAN_NO_MAP=1: treat tensor memory as not host-visible, so that
     * the staged transfers of discrete GPUs run (and are tested) here too. */
    if (tsr__env_long("TSR_VULKAN_NO_MAP", 0) != 0)
        d->device_mappable = false;
    d->init_status = tsr__vk_validation_check();
    if (d->init_status != TSR_OK)
        snprintf(d->init_error, sizeof(d->init_error), "%s", tsr_last_error());
    TSR_LOG_D("%s: device ready (tensor memory type %u%s, ring memory type %u)", d->name,
              d->mt_device, d->device_mappable ? ", mapped" : "", d->mt_host);
}

tsr_status tsr__vk_device_ready(vk_device *d)
{
    if (!atomic_load(&d->init_done)) {
        pthread_mutex_lock(&d->init_lock);
        if (!atomic_load(&d->init_done)) {
            vk_device_init_once(d);
            atomic_store(&d->init_done, 1);
        }
        pthread_mutex_unlock(&d->init_lock);
    }
    if (d->init_status != TSR_OK)
        return tsr__error(d->init_status, "%s", d->init_error);
    return TSR_OK;
}

/* ---- device entries ----------------------------------------------------------------------- */

vk_device *tsr__vk_device_of(tsr_dev *dev) { return dev->context; }
bool tsr__vk_is_device(tsr_dev *dev) { return dev && dev->iface == &vk_dev_iface; }

static const char *vk_dev_name(tsr_dev *dev) { return tsr__vk_device_of(dev)->name; }
static const char *vk_dev_desc(tsr_dev *dev) { return tsr__vk_device_of(dev)->desc; }
static tsr_dev_type vk_dev_type(tsr_dev *dev) { return tsr__vk_device_of(dev)->type; }

static void vk_dev_memory(tsr_dev *dev, size_t *free_bytes, size_t *total_bytes)
{
    vk_device *d = tsr__vk_device_of(dev);
    *total_bytes = d->heap_size;
    const size_t used = atomic_load(&d->allocated);
    *free_bytes = d->heap_size > used ? d->heap_size - used : 0;
    if (d->has_budget) {
        VkPhysicalDeviceMemoryBudgetPropertiesEXT b = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
        VkPhysicalDeviceMemoryProperties2 mp = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2, .pNext = &b};
        VKF.vkGetPhysicalDeviceMemoryProperties2(d->phys, &mp);
        const uint64_t budget = b.heapBudget[d->heap_index], usage = b.heapUsage[d->heap_index];
        if (budget > 0)
            *free_bytes = budget > usage ? budget - usage : 0;
    }
}

static tsr_dev_caps vk_dev_caps(tsr_dev *dev)
{
    (void)dev;
    return (tsr_dev_caps){.async = true, .events = true, .host_buffer = false};
}

static tsr_buft *vk_dev_buft(tsr_dev *dev) { return &tsr__vk_device_of(dev)->buft; }

static bool vk_dev_supports_op(tsr_dev *dev, const tsr_tensor *op)
{
    return tsr__vk_supports_op(tsr__vk_device_of(dev), op);
}

static tsr_status vk_dev_backend_new(tsr_dev *dev, tsr_backend **out)
{
    return tsr__vk_backend_new(tsr__vk_device_of(dev), out);
}

static tsr_status vk_dev_event_new(tsr_dev *dev, tsr_event **out)
{
    return tsr__vk_event_new(tsr__vk_device_of(dev), out);
}

static void vk_dev_event_free(tsr_dev *dev, tsr_event *e)
{
    (void)dev;
    tsr__vk_event_free(e);
}

static tsr_status vk_dev_event_sync(tsr_dev *dev, tsr_event *e)
{
    (void)dev;
    return tsr__vk_event_sync(e);
}

static tsr_status vk_dev_event_copy(tsr_dev *dev, tsr_event *dst, const tsr_event *src)
{
    (void)dev;
    return tsr__vk_event_copy(dst, src);
}

static const struct tsr_dev_i vk_dev_iface = {
    .get_name = vk_dev_name,
    .get_description = vk_dev_desc,
    .get_type = vk_dev_type,
    .get_memory = vk_dev_memory,
    .get_caps = vk_dev_caps,
    .get_buft = vk_dev_buft,
    .supports_op = vk_dev_supports_op,
    .backend_new = vk_dev_backend_new,
    .event_new = vk_dev_event_new,
    .event_free = vk_dev_event_free,
    .event_synchronize = vk_dev_event_sync,
    .event_copy = vk_dev_event_copy,
};

/* ---- registry -------------------------------------------------------------------------------- */

static const char *vk_reg_name(tsr_reg *r)
{
    (void)r;
    return "vulkan";
}

static size_t vk_reg_dev_count(tsr_reg *r)
{
    (void)r;
    return vk_n_devs;
}

static tsr_dev *vk_reg_dev(tsr_reg *r, size_t i)
{
    (void)r;
    return &vk_devs[i].tdev;
}

static void *vk_reg_get_proc(tsr_reg *r, const char *name)
{
    (void)r;
    if (strcmp(name, "tsr_vulkan_validation_errors") == 0)
        return (void *)(tsr_vulkan_validation_errors_fn)tsr_vulkan_validation_errors;
    return NULL;
}

static const struct tsr_reg_i vk_reg_iface = {
    .get_name = vk_reg_name,
    .get_dev_count = vk_reg_dev_count,
    .get_dev = vk_reg_dev,
    .get_proc = vk_reg_get_proc,
};

static pthread_once_t vk_reg_once = PTHREAD_ONCE_INIT;

static void vk_reg_setup(void)
{
    vk_reg = (tsr_reg){.iface = &vk_reg_iface};
    vk_reg_init();
}

tsr_reg *tsr_vulkan_reg(void)
{
    pthread_once(&vk_reg_once, vk_reg_setup);
    return &vk_reg;
}
