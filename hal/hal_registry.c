/* Backend table, device creation, and the process-wide registry of live HAL
 * handles that turns use-after-release and double release into
 * INVALID_ARGUMENT instead of undefined behaviour. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hal/hal_fault.h"
#include "hal/hal_internal.h"

/* ---- Backends compiled in ---- */

static const okv_hal_backend_t *const okv_hal_backends[] = {
    &okv_cpu_backend,
#ifdef OKV_HAVE_CUDA
    &okv_cuda_backend,
#endif
#ifdef OKV_HAVE_HIP
    &okv_hip_backend,
#endif
};

#define OKV_HAL_N_BACKENDS (sizeof(okv_hal_backends) / sizeof(okv_hal_backends[0]))

size_t okv_hal_backend_count(void) { return OKV_HAL_N_BACKENDS; }

const char *okv_hal_backend_name(size_t i) {
  return i < OKV_HAL_N_BACKENDS ? okv_hal_backends[i]->name : NULL;
}

static const okv_hal_backend_t *okv_hal_backend_find(const char *name) {
  if (!name) return NULL;
  for (size_t i = 0; i < OKV_HAL_N_BACKENDS; ++i) {
    if (!strcmp(okv_hal_backends[i]->name, name)) return okv_hal_backends[i];
  }
  return NULL;
}

static okv_status_t okv_hal_backend_not_found(const char *name) {
  char list[128] = "";
  size_t used = 0;
  for (size_t i = 0; i < OKV_HAL_N_BACKENDS && used + 1 < sizeof(list); ++i) {
    int n = snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "", okv_hal_backends[i]->name);
    if (n < 0) break;
    used += (size_t)n;
  }
  return okv_status_make(OKV_STATUS_NOT_FOUND, "backend_name: no backend '%s' in this build (built: %s)",
                         name ? name : "(null)", list);
}

okv_status_t okv_hal_backend_enumerate(const char *backend_name, okv_hal_device_info_t *out_infos,
                                       size_t capacity, size_t *out_count) {
  if (!out_count) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "out_count: NULL");
  *out_count = 0;
  if (capacity > 0 && !out_infos)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "out_infos: NULL with capacity %zu", capacity);
  const okv_hal_backend_t *b = okv_hal_backend_find(backend_name);
  if (!b) return okv_hal_backend_not_found(backend_name);
  return b->enumerate(out_infos, capacity, out_count);
}

/* ---- Live-handle registry: an open-addressing hash set of pointers ---- */

#define OKV_LIVE_EMPTY ((uintptr_t)0)
#define OKV_LIVE_TOMB ((uintptr_t)1)

static pthread_mutex_t okv_live_mutex = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t *okv_live_slots;   /* system allocator; capacity a power of two */
static size_t okv_live_cap;
static size_t okv_live_count;       /* live entries */
static size_t okv_live_used;        /* live + tombstones */

static size_t okv_live_hash(uintptr_t p) {
  uint64_t x = (uint64_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return (size_t)x;
}

/* Index of p, or SIZE_MAX. Caller holds the mutex. */
static size_t okv_live_find_locked(uintptr_t p) {
  if (!okv_live_cap) return SIZE_MAX;
  size_t mask = okv_live_cap - 1;
  for (size_t i = okv_live_hash(p) & mask, n = 0; n < okv_live_cap; i = (i + 1) & mask, ++n) {
    if (okv_live_slots[i] == OKV_LIVE_EMPTY) return SIZE_MAX;
    if (okv_live_slots[i] == p) return i;
  }
  return SIZE_MAX;
}

static void okv_live_put_locked(uintptr_t *slots, size_t cap, uintptr_t p) {
  size_t mask = cap - 1;
  size_t i = okv_live_hash(p) & mask;
  while (slots[i] != OKV_LIVE_EMPTY && slots[i] != OKV_LIVE_TOMB) i = (i + 1) & mask;
  slots[i] = p;
}

/* Returns false when the table could not grow (out of memory). */
static bool okv_live_insert_locked(uintptr_t p) {
  if (okv_live_find_locked(p) != SIZE_MAX) return true;
  if ((okv_live_used + 1) * 2 > okv_live_cap) {
    /* Rehash (dropping tombstones) into a table at most 1/4 full of live entries. */
    size_t cap = okv_live_cap ? okv_live_cap : 64;
    while ((okv_live_count + 1) * 4 > cap) cap *= 2;
    uintptr_t *slots = calloc(cap, sizeof(uintptr_t));
    if (!slots) return false;
    for (size_t i = 0; i < okv_live_cap; ++i) {
      if (okv_live_slots[i] != OKV_LIVE_EMPTY && okv_live_slots[i] != OKV_LIVE_TOMB)
        okv_live_put_locked(slots, cap, okv_live_slots[i]);
    }
    free(okv_live_slots);
    okv_live_slots = slots;
    okv_live_cap = cap;
    okv_live_used = okv_live_count;
  }
  okv_live_put_locked(okv_live_slots, okv_live_cap, p);
  ++okv_live_count;
  ++okv_live_used;
  return true;
}

static void okv_live_remove_locked(uintptr_t p) {
  size_t i = okv_live_find_locked(p);
  if (i == SIZE_MAX) return;
  okv_live_slots[i] = OKV_LIVE_TOMB;
  --okv_live_count;
  if (okv_live_count == 0) {
    /* Nothing live: drop the table so no memory outlives the last object. */
    free(okv_live_slots);
    okv_live_slots = NULL;
    okv_live_cap = 0;
    okv_live_used = 0;
  }
}

const char *okv_hal_kind_name(okv_hal_kind_t kind) {
  switch (kind) {
    case OKV_HAL_KIND_DEVICE: return "device";
    case OKV_HAL_KIND_BUFFER: return "buffer";
    case OKV_HAL_KIND_STREAM: return "stream";
    case OKV_HAL_KIND_EVENT: return "event";
    default: return "unknown object";
  }
}

void okv_hal_resource_init(okv_hal_resource_t *res, okv_hal_kind_t kind) {
  if (!res) return;
  atomic_store(&res->ref_count, 1);
  res->kind = kind;
  pthread_mutex_lock(&okv_live_mutex);
  /* If the table cannot grow the handle stays unregistered: every call on it
   * then fails with INVALID_ARGUMENT, which is safe. okv_hal_resource_register
   * below reports that case to hal/ callers. */
  (void)okv_live_insert_locked((uintptr_t)res);
  pthread_mutex_unlock(&okv_live_mutex);
}

static okv_status_t okv_live_check_locked(const void *obj, okv_hal_kind_t kind, const char *arg_name) {
  const char *name = arg_name ? arg_name : "handle";
  if (!obj) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "%s: NULL %s handle", name, okv_hal_kind_name(kind));
  if (okv_live_find_locked((uintptr_t)obj) == SIZE_MAX)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "%s: invalid or released handle (%s %p)", name,
                           okv_hal_kind_name(kind), obj);
  const okv_hal_resource_t *res = obj;
  if (res->kind != kind)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "%s: handle is a %s, expected a %s", name,
                           okv_hal_kind_name(res->kind), okv_hal_kind_name(kind));
  return OKV_OK;
}

okv_status_t okv_hal_check_live(const void *obj, okv_hal_kind_t kind, const char *arg_name) {
  pthread_mutex_lock(&okv_live_mutex);
  okv_status_t s = okv_live_check_locked(obj, kind, arg_name);
  pthread_mutex_unlock(&okv_live_mutex);
  return s;
}

okv_status_t okv_hal_live_retain(void *obj, okv_hal_kind_t kind, const char *arg_name) {
  pthread_mutex_lock(&okv_live_mutex);
  okv_status_t s = okv_live_check_locked(obj, kind, arg_name);
  if (s == OKV_OK) atomic_fetch_add(&((okv_hal_resource_t *)obj)->ref_count, 1);
  pthread_mutex_unlock(&okv_live_mutex);
  return s;
}

okv_status_t okv_hal_live_release(void *obj, okv_hal_kind_t kind, const char *arg_name, bool *out_last) {
  *out_last = false;
  pthread_mutex_lock(&okv_live_mutex);
  okv_status_t s = okv_live_check_locked(obj, kind, arg_name);
  if (s == OKV_OK) {
    int prev = atomic_fetch_sub(&((okv_hal_resource_t *)obj)->ref_count, 1);
    if (prev <= 1) {
      okv_live_remove_locked((uintptr_t)obj);
      *out_last = true;
    }
  }
  pthread_mutex_unlock(&okv_live_mutex);
  return s;
}

void okv_hal_live_forget(const void *obj) {
  pthread_mutex_lock(&okv_live_mutex);
  okv_live_remove_locked((uintptr_t)obj);
  pthread_mutex_unlock(&okv_live_mutex);
}

okv_status_t okv_hal_resource_register(okv_hal_resource_t *res, okv_hal_kind_t kind) {
  atomic_store(&res->ref_count, 1);
  res->kind = kind;
  pthread_mutex_lock(&okv_live_mutex);
  bool ok = okv_live_insert_locked((uintptr_t)res);
  pthread_mutex_unlock(&okv_live_mutex);
  return ok ? OKV_OK
            : okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "host: could not grow the live-handle registry");
}

/* ---- Devices ---- */

void okv_hal_device_params_init(okv_hal_device_params_t *params) {
  if (!params) return;
  memset(params, 0, sizeof(*params));
  params->ordinal = 0;
  params->n_threads = 0;
}

static int okv_hal_online_cpus(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

okv_status_t okv_hal_device_create(const char *backend_name, const okv_hal_device_params_t *params,
                                   const okv_allocator_t *allocator, okv_hal_device_t **out_device) {
  if (!out_device) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "out_device: NULL");
  *out_device = NULL;
  okv_hal_device_params_t defaults;
  okv_hal_device_params_init(&defaults);
  if (!params) params = &defaults;
  if (params->ordinal < 0)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "params->ordinal: %d is negative", params->ordinal);
  if (params->n_threads < 0)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "params->n_threads: %d is negative", params->n_threads);
  if (allocator && (!allocator->malloc_fn || !allocator->free_fn))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "allocator: malloc_fn and free_fn are required");
  const okv_hal_backend_t *b = okv_hal_backend_find(backend_name);
  if (!b) return okv_hal_backend_not_found(backend_name);

  okv_allocator_t alloc = allocator ? *allocator : okv_allocator_system();
  okv_hal_device_t *dev = NULL;
  OKV_RETURN_IF_ERROR(okv_status_annotate(b->create(params, &alloc, &dev), "creating a %s device", b->name));
  if (!dev || !dev->vtable)
    return okv_status_make(OKV_STATUS_INTERNAL, "backend '%s' returned no device", b->name);

  dev->fault_hooks = NULL;
  dev->allocator = alloc;
  for (int t = 0; t < OKV_TIER_COUNT; ++t) {
    uint64_t cap = params->capacity_bytes[t];
    if (cap == 0) cap = dev->capacity_bytes[t];
    if (cap == 0) cap = (t == OKV_TIER_DEVICE && dev->info.physical_bytes[t]) ? dev->info.physical_bytes[t] : UINT64_MAX;
    dev->capacity_bytes[t] = cap;
    dev->used_bytes[t] = 0;
  }
  dev->n_threads = params->n_threads > 0 ? params->n_threads : okv_hal_online_cpus();
  if (pthread_mutex_init(&dev->usage_mutex, NULL) != 0) {
    dev->vtable->device_destroy(dev);
    return okv_status_make(OKV_STATUS_INTERNAL, "device: pthread_mutex_init failed");
  }
  okv_status_t s = okv_hal_resource_register(&dev->base, OKV_HAL_KIND_DEVICE);
  if (s != OKV_OK) {
    pthread_mutex_destroy(&dev->usage_mutex);
    dev->vtable->device_destroy(dev);
    return s;
  }
  *out_device = dev;
  return OKV_OK;
}

okv_status_t okv_hal_device_retain(okv_hal_device_t *device) {
  return okv_hal_live_retain(device, OKV_HAL_KIND_DEVICE, "device");
}

okv_status_t okv_hal_device_release(okv_hal_device_t *device) {
  bool last = false;
  OKV_RETURN_IF_ERROR(okv_hal_live_release(device, OKV_HAL_KIND_DEVICE, "device", &last));
  if (last) okv_hal_device_destroy(device);
  return OKV_OK;
}
