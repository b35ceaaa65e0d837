/* GPU devices, shared by the CUDA and HIP backends (docs/gpu.md): the kernel
 * entry names, enumeration, device creation (vendor context, embedded kernel
 * module, kernel functions, shared-memory opt-in), destruction, and the
 * okv_hal_device_vtable_t that routes every hook to backends/gpu/.
 * Owns: okv_gpu_device_t (context, module, kernel functions, smem limit) and
 * the backend's part of okv_hal_device_info_t.
 * May touch: the vendor table (load, device, context, module, function
 * calls) and the host allocator. Buffers, streams and events live in
 * gpu_memory.c and gpu_stream.c. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gpu_internal.h"
#include "okv_gpu_args.h"

const char *const okv_gpu_kernel_names[OKV_GPU_FN_COUNT] = {
    [OKV_GPU_FN_GATHER] = "okv_gpu_gather_blocks",
    [OKV_GPU_FN_ATTENTION] = "okv_gpu_attention",
    [OKV_GPU_FN_ATTENTION_MASS] = "okv_gpu_attention_mass",
    [OKV_GPU_FN_SUMMARIZE] = "okv_gpu_summarize_blocks",
    [OKV_GPU_FN_SUMMARY_APPEND] = "okv_gpu_summary_append",
    [OKV_GPU_FN_SCORE] = "okv_gpu_score_blocks",
    [OKV_GPU_FN_TOPK] = "okv_gpu_topk",
    [OKV_GPU_FN_SUMMARY_REDUCE] = "okv_gpu_summary_reduce",
    [OKV_GPU_FN_KV_WRITE] = "okv_gpu_kv_write",
    [OKV_GPU_FN_SELECT] = "okv_gpu_select",
    [OKV_GPU_FN_SLOT_COMMIT] = "okv_gpu_slot_commit",
};

static void gpu_fill_info(const okv_gpu_vendor_t *v, int ordinal, okv_hal_device_info_t *info) {
  memset(info, 0, sizeof(*info));
  snprintf(info->backend, sizeof(info->backend), "%s", v->name);
  info->ordinal = ordinal;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  info->physical_bytes[OKV_TIER_HOST] = (pages > 0 && page > 0) ? (uint64_t)pages * (uint64_t)page : 0;
  info->alloc_tiers = OKV_TIER_BIT(OKV_TIER_DEVICE) | OKV_TIER_BIT(OKV_TIER_HOST);
  const uint32_t both = OKV_TIER_BIT(OKV_TIER_DEVICE) | OKV_TIER_BIT(OKV_TIER_HOST);
  info->copy_mask[OKV_TIER_DEVICE] = both;
  info->copy_mask[OKV_TIER_HOST] = both;
}

okv_status_t okv_gpu_enumerate(const okv_gpu_vendor_t *v, okv_hal_device_info_t *out_infos, size_t capacity,
                               size_t *out_count) {
  if (!out_count) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "out_count: NULL");
  *out_count = 0;
  if (capacity > 0 && !out_infos)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "out_infos: NULL with capacity %zu", capacity);
  OKV_RETURN_IF_ERROR(v->load());
  int n = 0;
  OKV_RETURN_IF_ERROR(v->device_count(&n));
  if (n <= 0) return okv_status_make(OKV_STATUS_UNAVAILABLE, "%s: no GPU found by %s", v->name, v->library_name);
  for (int i = 0; i < n && (size_t)i < capacity; ++i) {
    gpu_fill_info(v, i, &out_infos[i]);
    uint32_t smem = 0;
    OKV_RETURN_IF_ERROR(v->device_describe(i, &out_infos[i], &smem));
  }
  *out_count = (size_t)n;
  return OKV_OK;
}

static const okv_hal_device_vtable_t gpu_vtable;

static void gpu_device_free(okv_gpu_device_t *dev, const okv_allocator_t *a) {
  if (dev->module) {
    if (okv_status_consume(okv_gpu_bind(dev)) == OKV_STATUS_OK) dev->vendor->module_unload(dev->module);
  }
  if (dev->ctx_open) dev->vendor->context_close(dev->ordinal, dev->ctx);
  okv_free(a, dev);
}

okv_status_t okv_gpu_create(const okv_gpu_vendor_t *v, const okv_hal_device_params_t *params,
                            const okv_allocator_t *allocator, okv_hal_device_t **out_device) {
  *out_device = NULL;
  OKV_RETURN_IF_ERROR(v->load());
  int n = 0;
  OKV_RETURN_IF_ERROR(v->device_count(&n));
  const int ordinal = params ? params->ordinal : 0;
  if (n <= 0) return okv_status_make(OKV_STATUS_UNAVAILABLE, "%s: no GPU found by %s", v->name, v->library_name);
  if (ordinal < 0 || ordinal >= n)
    return okv_status_make(OKV_STATUS_UNAVAILABLE, "ordinal: %s device %d requested, %d present", v->name, ordinal, n);
  okv_gpu_device_t *dev = okv_calloc(allocator, 1, sizeof(*dev));
  if (!dev) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "host: could not allocate a %s device", v->name);
  dev->vendor = v;
  dev->ordinal = ordinal;
  gpu_fill_info(v, ordinal, &dev->base.info);
  okv_status_t s = v->device_describe(ordinal, &dev->base.info, &dev->smem_max_bytes);
  if (s == OKV_OK) s = v->context_open(ordinal, &dev->ctx);
  dev->ctx_open = s == OKV_OK;
  if (s != OKV_OK) {
    okv_free(allocator, dev);
    return s;
  }
  s = okv_gpu_bind(dev);
  if (s == OKV_OK) s = v->module_load(&dev->module);
  for (int f = 0; s == OKV_OK && f < OKV_GPU_FN_COUNT; ++f)
    s = v->module_function(dev->module, okv_gpu_kernel_names[f], &dev->fn[f]);
  if (s == OKV_OK && dev->smem_max_bytes > 48u * 1024u) {
    s = v->function_set_smem(dev->fn[OKV_GPU_FN_ATTENTION], dev->smem_max_bytes);
    if (s == OKV_OK)
      s = v->function_set_smem(dev->fn[OKV_GPU_FN_TOPK], dev->smem_max_bytes - OKV_GPU_TOPK_STATIC_SMEM_BYTES);
  }
  if (s != OKV_OK) {
    gpu_device_free(dev, allocator);
    return s;
  }
  dev->base.vtable = &gpu_vtable;
  *out_device = &dev->base;
  return OKV_OK;
}

static void gpu_device_destroy(okv_hal_device_t *device) {
  okv_gpu_device_t *dev = okv_gpu_dev(device);
  gpu_device_free(dev, &device->allocator);
}

static const okv_hal_device_vtable_t gpu_vtable = {
    .device_destroy = gpu_device_destroy,
    .buffer_alloc = okv_gpu_buffer_alloc,
    .buffer_destroy = okv_gpu_buffer_destroy,
    .buffer_write = okv_gpu_buffer_write,
    .buffer_read = okv_gpu_buffer_read,
    .stream_create = okv_gpu_stream_create,
    .stream_destroy = okv_gpu_stream_destroy,
    .stream_synchronize = okv_gpu_stream_synchronize,
    .event_create = okv_gpu_event_create,
    .event_destroy = okv_gpu_event_destroy,
    .event_record = okv_gpu_event_record,
    .event_query = okv_gpu_event_query,
    .event_wait = okv_gpu_event_wait,
    .stream_wait_event = okv_gpu_stream_wait_event,
    .event_elapsed = okv_gpu_event_elapsed,
    .copy = okv_gpu_copy,
    .copy_blocks = okv_gpu_copy_blocks,
    .enqueue_failure = okv_gpu_enqueue_failure,
    .attention = okv_gpu_attention,
    .summarize_blocks = okv_gpu_summarize_blocks,
    .summary_append = okv_gpu_summary_append,
    .score_blocks = okv_gpu_score_blocks,
    .topk = okv_gpu_topk,
    .summary_append_ex = okv_gpu_summary_append_ex,
    .summary_reduce = okv_gpu_summary_reduce,
    .kv_write = okv_gpu_kv_write,
    .select = okv_gpu_select,
    .slot_commit = okv_gpu_slot_commit,
};
