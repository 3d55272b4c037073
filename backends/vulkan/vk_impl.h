/* backends/vulkan/vk_impl.h — private interface between the files of the
 * Vulkan backend: the loader's function table, devices, memory, streams,
 * pipelines and op recording.
 *
 * Not installed, and included by nothing outside backends/vulkan. Every
 * Vulkan function is called through tsr__vkf (loaded with dlopen by
 * vk_loader.c), so the library neither links nor needs libvulkan.
 *
 * Locking: a device's queue is shared by its streams (queue_lock); a stream's
 * state is guarded by its own lock, which every recording helper below
 * expects to be held ("_locked").
 */
#ifndef TESSERA_VK_IMPL_H
#define TESSERA_VK_IMPL_H

#define VK_NO_PROTOTYPES
#include <pthread.h>
#include <stdatomic.h>
#include <vulkan/vulkan.h>

#include "core/backend_impl.h"
#include "core/internal.h"
#include "tessera/vulkan.h"
#include "vk_shaders.h"

/* ---- loader (vk_loader.c) ------------------------------------------------------------ */

#define TSR_VK_GLOBAL_FNS(X)              \
    X(vkCreateInstance)                   \
    X(vkEnumerateInstanceVersion)         \
    X(vkEnumerateInstanceLayerProperties) \
    X(vkEnumerateInstanceExtensionProperties)

#define TSR_VK_INSTANCE_FNS(X)                  \
    X(vkDestroyInstance)                        \
    X(vkEnumeratePhysicalDevices)               \
    X(vkGetPhysicalDeviceProperties)            \
    X(vkGetPhysicalDeviceProperties2)           \
    X(vkGetPhysicalDeviceFeatures2)             \
    X(vkGetPhysicalDeviceMemoryProperties)      \
    X(vkGetPhysicalDeviceFormatProperties)      \
    X(vkGetPhysicalDeviceMemoryProperties2)     \
    X(vkGetPhysicalDeviceQueueFamilyProperties) \
    X(vkEnumerateDeviceExtensionProperties)     \
    X(vkCreateDevice)                           \
    X(vkCreateDebugUtilsMessengerEXT)           \
    X(vkDestroyDebugUtilsMessengerEXT)

#define TSR_VK_DEVICE_FNS(X)         \
    X(vkDestroyDevice)               \
    X(vkGetDeviceQueue)              \
    X(vkDeviceWaitIdle)              \
    X(vkCreateBuffer)                \
    X(vkDestroyBuffer)               \
    X(vkGetBufferMemoryRequirements) \
    X(vkAllocateMemory)              \
    X(vkFreeMemory)                  \
    X(vkBindBufferMemory)            \
    X(vkMapMemory)                   \
    X(vkUnmapMemory)                 \
    X(vkGetBufferDeviceAddress)      \
    X(vkCreateBufferView)            \
    X(vkDestroyBufferView)           \
    X(vkCreateShaderModule)          \
    X(vkDestroyShaderModule)         \
    X(vkCreatePipelineLayout)        \
    X(vkDestroyPipelineLayout)       \
    X(vkCreateComputePipelines)      \
    X(vkDestroyPipeline)             \
    X(vkCreateDescriptorSetLayout)   \
    X(vkDestroyDescriptorSetLayout)  \
    X(vkCreateDescriptorPool)        \
    X(vkDestroyDescriptorPool)       \
    X(vkAllocateDescriptorSets)      \
    X(vkFreeDescriptorSets)          \
    X(vkUpdateDescriptorSets)        \
    X(vkCreateCommandPool)           \
    X(vkDestroyCommandPool)          \
    X(vkAllocateCommandBuffers)      \
    X(vkResetCommandBuffer)          \
    X(vkBeginCommandBuffer)          \
    X(vkEndCommandBuffer)            \
    X(vkCmdBindPipeline)             \
    X(vkCmdBindDescriptorSets)       \
    X(vkCmdPushConstants)            \
    X(vkCmdDispatch)                 \
    X(vkCmdPipelineBarrier)          \
    X(vkCmdCopyBuffer)               \
    X(vkCmdFillBuffer)               \
    X(vkQueueSubmit)                 \
    X(vkCreateSemaphore)             \
    X(vkDestroySemaphore)            \
    X(vkWaitSemaphores)              \
    X(vkSignalSemaphore)             \
    X(vkGetSemaphoreCounterValue)

#define TSR_VK_DECL_FN(name) PFN_##name name;
typedef struct tsr__vk_fns {
    PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr;
    TSR_VK_GLOBAL_FNS(TSR_VK_DECL_FN)
    TSR_VK_INSTANCE_FNS(TSR_VK_DECL_FN)
    TSR_VK_DEVICE_FNS(TSR_VK_DECL_FN)
} tsr__vk_fns;
#undef TSR_VK_DECL_FN

extern tsr__vk_fns tsr__vkf;
#define VKF tsr__vkf

/* Opens the loader and fills the global entries; TSR_ENOTFOUND with a reason
 * in why when there is no loader. */
tsr_status tsr__vk_load(char *why, size_t why_size);
/* Fills the instance and device entries (debug-utils ones may stay NULL). */
void tsr__vk_load_instance(VkInstance instance);

/* "VK_ERROR_OUT_OF_DEVICE_MEMORY" etc. */
const char *tsr__vk_result_str(VkResult r);

/* ---- devices (vk_device.c) ------------------------------------------------------------ */

#define VK_MAX_DEVICES 16
#define VK_ALIGN 256   /* tensor offsets: covers storage, texel and vec4 alignment */
#define VK_PC_SIZE 128 /* push constants every pipeline may use */

typedef struct vk_stream vk_stream;

/* Texel views per buffer on CPU-like devices (tsr__vk_texel_formats). */
enum { VK_TEXEL_VIEWS = 3 };

typedef struct vk_device {
    /* Identity, filled at enumeration. */
    int index;           /* in the registry ("vulkanN") */
    uint32_t phys_index; /* in the loader's enumeration */
    VkPhysicalDevice phys;
    char name[16];
    char desc[512];
    tsr_dev_type type;
    bool cpu_like; /* VK_PHYSICAL_DEVICE_TYPE_CPU (lavapipe, SwiftShader) */
    VkPhysicalDeviceLimits limits;
    uint64_t max_alloc; /* maxMemoryAllocationSize, capped by maxBufferSize and the heap */
    uint64_t heap_size; /* the device-local heap */
    uint32_t heap_index;
    bool has_budget;             /* VK_EXT_memory_budget */
    bool has_f64;                /* shaderFloat64 (ROPE runs in double precision) */
    bool texels[VK_TEXEL_VIEWS]; /* each texel format usable (CPU-like devices) */
    uint32_t subgroup_size;

    /* The logical device, created on first use. */
    pthread_mutex_t init_lock;
    atomic_int init_done;
    tsr_status init_status;
    char init_error[256];
    VkDevice dev;
    VkQueue queue;
    uint32_t queue_family;
    pthread_mutex_t queue_lock;
    uint32_t mt_device;   /* memory type for tensors */
    uint32_t mt_host;     /* host-visible, coherent: rings */
    bool device_mappable; /* mt_device is host-visible and coherent */
    atomic_size_t allocated;
    atomic_int n_buffers; /* live tessera buffers (teardown at exit needs none) */

    /* Pipelines, created once on first use (vk_pipeline.c). */
    pthread_mutex_t pipe_lock;
    VkPipelineLayout layout;         /* push constants only */
    VkDescriptorSetLayout texel_dsl; /* one uniform texel buffer */
    VkPipelineLayout texel_layout;   /* two texel sets + push constants */
    VkDescriptorPool *pools;
    uint32_t *pool_used; /* sets taken from each pool */
    size_t n_pools;
    VkPipeline pipes[VK_SH_COUNT];

    /* Live streams, so that freeing a buffer can wait for their work. */
    pthread_mutex_t streams_lock;
    vk_stream **streams;
    size_t n_streams, cap_streams;

    /* The private stream of blocking transfers (buffers that are not
     * host-visible), created on first need. */
    pthread_mutex_t xfer_lock;
    vk_stream *xfer;

    tsr_dev tdev;
    tsr_buft buft;
} vk_device;

/* The device behind a tessera device, buffer type or stream of this backend. */
vk_device *tsr__vk_device_of(tsr_dev *dev);
/* Creates the logical device once; later calls return the first outcome
 * (and set the thread's last error when it failed). */
tsr_status tsr__vk_device_ready(vk_device *d);
/* A status for a failed Vulkan call: "vulkan0: vkAllocateMemory (4096 bytes):
 * VK_ERROR_OUT_OF_DEVICE_MEMORY". Out-of-memory results give TSR_ENOMEM,
 * everything else TSR_EDEVICE. */
tsr_status tsr__vk_fail(const vk_device *d, VkResult r, const char *fmt, ...) TSR__PRINTF(3, 4);
/* TSR_EDEVICE (once per new batch) when the validation layer has reported
 * errors since the last call; TSR_OK otherwise. */
tsr_status tsr__vk_validation_check(void);
bool tsr__vk_is_device(tsr_dev *dev);

/* ---- memory (vk_memory.c) ------------------------------------------------------------- */

/* One VkBuffer with its memory, address and (when host-visible) mapping. */
typedef struct vk_mem {
    VkBuffer buf;
    VkDeviceMemory mem;
    uint64_t addr; /* buffer device address */
    void *map;     /* host mapping, or NULL */
    size_t size;
    bool host; /* a ring (not counted as device memory) */
} vk_mem;

/* A tessera buffer: the memory, a reserved address range that tensors'
 * data pointers point into (never dereferenced), and the texel view of the
 * matrix kernels for CPU-like devices. */
typedef struct vk_buffer {
    vk_device *d;
    vk_mem m;
    char *base;
    size_t reserved;
    VkBufferView views[VK_TEXEL_VIEWS];         /* VK_NULL_HANDLE when absent */
    VkDescriptorSet sets[VK_TEXEL_VIEWS];       /* each holding one view */
    size_t view_texels[VK_TEXEL_VIEWS];         /* texels each view covers */
    VkDescriptorPool set_pools[VK_TEXEL_VIEWS]; /* the pool each set came from */
} vk_buffer;

/* host: host-visible coherent memory (rings); else the device type. */
tsr_status tsr__vk_mem_new(vk_device *d, size_t size, bool host, vk_mem *out);
void tsr__vk_mem_free(vk_device *d, vk_mem *m);
bool tsr__vk_is_buffer(const tsr_buf *buf);
/* The memory of a tensor placed in a Vulkan buffer and its byte offset. */
vk_buffer *tsr__vk_buffer_of(const tsr_tensor *t);
size_t tsr__vk_offset(const tsr_tensor *t);
uint64_t tsr__vk_addr(const tsr_tensor *t);

/* ---- streams (vk_stream.c) ------------------------------------------------------------ */

typedef struct vk_range {
    uint64_t lo, hi; /* device addresses [lo, hi) */
} vk_range;

tsr_status tsr__vk_stream_new(vk_device *d, const char *name, vk_stream **out);
void tsr__vk_stream_free(vk_stream *s);
void tsr__vk_stream_lock(vk_stream *s);
void tsr__vk_stream_unlock(vk_stream *s);
/* Submits what is recorded and waits for all of it; returns (and clears)
 * the first error queued work raised. Takes the lock itself. */
tsr_status tsr__vk_stream_sync(vk_stream *s);
/* Submits what is recorded (locked); the stream's last value. */
uint64_t tsr__vk_stream_flush_locked(vk_stream *s);

/* Transfers on a stream (locked): byte ranges of VkBuffers; the host side of
 * an upload is copied before the call returns, that of a download when the
 * work completes. */
void tsr__vk_upload_locked(vk_stream *s, const vk_mem *dst, size_t off, const void *src, size_t n);
void tsr__vk_download_locked(vk_stream *s, const vk_mem *src, size_t off, void *dst, size_t n);
void tsr__vk_copy_locked(vk_stream *s, const vk_mem *src, size_t soff, const vk_mem *dst,
                         size_t doff, size_t n);
void tsr__vk_fill_locked(vk_stream *s, const vk_mem *dst, size_t off, size_t n, uint8_t value);

/* Records one dispatch of shader id (locked): a barrier first when it reads
 * or writes memory that earlier work of the batch writes (or reads, for
 * writes). Groups beyond the device's per-dimension limit are folded into
 * gy by the caller. texel_sets: two descriptor sets for the texel layout,
 * or NULL. */
void tsr__vk_dispatch_locked(vk_stream *s, tsr__vk_shader_id id, const void *pc, size_t pc_size,
                             uint32_t gx, uint32_t gy, uint32_t gz, const vk_range *reads,
                             int n_reads, vk_range write, const VkDescriptorSet *texel_sets);
/* Registers the node a shader may report a run-time error for; returns its
 * site number and the device address of the stream's error word. */
uint32_t tsr__vk_error_site_locked(vk_stream *s, const tsr_tensor *node, uint64_t *err_addr);

/* Host bytes [p, p + n) are the destination of a download not yet done:
 * wait for it, so that host memory sees the stream's operations in order. */
void tsr__vk_settle_host_locked(vk_stream *s, const void *p, size_t n);
/* Later work of s waits for value v of stream o: on the GPU when o is on
 * the same device and v is submitted, else through s's waiter thread. */
void tsr__vk_wait_stream_locked(vk_stream *s, vk_stream *o, uint64_t v);
/* Later work of s waits for an event of another backend (the waiter thread
 * synchronizes it; own: the waiter frees it afterwards). */
void tsr__vk_wait_event_locked(vk_stream *s, tsr_event *e, bool own);
/* Uploads n bytes of host memory that may be read only after the waits
 * queued so far: the waiter copies them into the ring, the GPU copy
 * follows. */
void tsr__vk_upload_deferred_locked(vk_stream *s, const vk_mem *dst, size_t off, const void *src,
                                    size_t n);
/* Waits (taking the lock) until value v of s is complete and retired. */
tsr_status tsr__vk_stream_wait(vk_stream *s, uint64_t v);
vk_device *tsr__vk_stream_device(const vk_stream *s);
const char *tsr__vk_stream_name(const vk_stream *s);

/* ---- the backend interface (vk_backend.c) ---------------------------------------------- */

bool tsr__vk_stream_is(tsr_backend *b);
vk_stream *tsr__vk_stream_of(tsr_backend *b);
tsr_status tsr__vk_backend_new(vk_device *d, tsr_backend **out);
tsr_status tsr__vk_event_new(vk_device *d, tsr_event **out);
void tsr__vk_event_free(tsr_event *e);
tsr_status tsr__vk_event_sync(tsr_event *e);
tsr_status tsr__vk_event_copy(tsr_event *dst, const tsr_event *src);
/* Waits until every stream of the device has finished the work queued so
 * far (recorded work is submitted first). */
tsr_status tsr__vk_device_drain(vk_device *d);

/* ---- pipelines (vk_pipeline.c) ------------------------------------------------------- */

/* The pipeline of shader id, created on first use. */
tsr_status tsr__vk_pipeline(vk_device *d, tsr__vk_shader_id id, VkPipeline *out);
bool tsr__vk_shader_uses_texels(tsr__vk_shader_id id);
/* Texel views + descriptor sets of a buffer, for the CPU-like matrix kernels
 * (absent views are left null: those kernels are then not used). */
void tsr__vk_buffer_views_init(vk_buffer *b);
void tsr__vk_buffer_views_free(vk_buffer *b);
/* The texel views of every buffer on CPU-like devices, by index: RGBA32F
 * (F32), RGBA16F (F16), RGBA32UI (F16 or BF16, 8 to a texel); their formats
 * and texel sizes. */
extern const VkFormat tsr__vk_texel_formats[VK_TEXEL_VIEWS];
extern const size_t tsr__vk_texel_bytes[VK_TEXEL_VIEWS];
void tsr__vk_pipelines_free(vk_device *d);

/* ---- ops (vk_ops.c, vk_ops_mm.c) ---------------------------------------------------- */

bool tsr__vk_supports_op(vk_device *d, const tsr_tensor *n);
/* Creates the pipelines of every node of g and checks placement, before
 * anything is recorded (a failure leaves nothing half-enqueued). */
tsr_status tsr__vk_graph_prepare(vk_device *d, tsr_graph *g);
/* Records node n (locked). */
void tsr__vk_record_node(vk_stream *s, tsr_tensor *n);

/* The shader and grid of a node; the push constants written into pc (at
 * most VK_PC_SIZE bytes). Used by record_node; the _mm variants are in
 * vk_ops_mm.c. */
typedef struct vk_launch {
    tsr__vk_shader_id id;
    _Alignas(8) uint32_t pc[VK_PC_SIZE / 4];
    size_t pc_size;
    uint32_t groups[3];
    VkDescriptorSet texel_sets[2]; /* for the texel layout; null otherwise */
} vk_launch;

bool tsr__vk_mm_supported(vk_device *d, const tsr_tensor *n);
/* Plans the launches of a MUL_MAT, MUL_MAT_ID or FLASH_ATTN_EXT node into
 * out[0..*n_out). err_addr/site: the stream's error word and the node's site. */
void tsr__vk_mm_plan(vk_device *d, const tsr_tensor *n, uint64_t err_addr, uint32_t site,
                     vk_launch *out, int *n_out);
tsr__vk_shader_id tsr__vk_mm_shader(vk_device *d, const tsr_tensor *n);

/* Groups of `wg` invocations covering n items, folded into (gx, gy). */
void tsr__vk_grid_1d(const vk_device *d, uint64_t n, uint32_t wg, uint32_t groups[3]);

#endif /* TESSERA_VK_IMPL_H */
