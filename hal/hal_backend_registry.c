/* Backend registry: the table of backends compiled into this build (cpu, and
 * cuda / hip when built with OKV_HAVE_CUDA / OKV_HAVE_HIP), lookup by name and
 * device enumeration.
 * Owns: hal_backends[] and the public okv_hal_backend_* entry points.
 * May touch: the okv_hal_backend_t entries (backends/ define them) and nothing
 * else; device creation (hal_device.c) finds its backend through
 * okv_hal_backend_lookup. */
#include <stdio.h>
#include <string.h>

#include "hal_internal.h"

static const okv_hal_backend_t *const hal_backends[] = {
    &okv_cpu_backend,
#ifdef OKV_HAVE_CUDA
    &okv_cuda_backend,
#endif
#ifdef OKV_HAVE_HIP
    &okv_hip_backend,
#endif
};

#define OKV_HAL_N_BACKENDS (sizeof(hal_backends) / sizeof(hal_backends[0]))

size_t okv_hal_backend_count(void) { return OKV_HAL_N_BACKENDS; }

const char *okv_hal_backend_name(size_t i) { return i < OKV_HAL_N_BACKENDS ? hal_backends[i]->name : NULL; }

static const okv_hal_backend_t *hal_backend_find(const char *name) {
  if (!name) return NULL;
  for (size_t i = 0; i < OKV_HAL_N_BACKENDS; ++i) {
    if (!strcmp(hal_backends[i]->name, name)) return hal_backends[i];
  }
  return NULL;
}

static okv_status_t hal_backend_not_found(const char *name) {
  char list[128] = "";
  size_t used = 0;
  for (size_t i = 0; i < OKV_HAL_N_BACKENDS && used + 1 < sizeof(list); ++i) {
    int n = snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "", hal_backends[i]->name);
    if (n < 0) break;
    used += (size_t)n;
  }
  return okv_status_make(OKV_STATUS_NOT_FOUND, "backend_name: no backend '%s' in this build (built: %s)",
                         name ? name : "(null)", list);
}

okv_status_t okv_hal_backend_lookup(const char *name, const okv_hal_backend_t **out_backend) {
  *out_backend = hal_backend_find(name);
  return *out_backend ? OKV_OK : hal_backend_not_found(name);
}

okv_status_t okv_hal_backend_enumerate(const char *backend_name, okv_hal_device_info_t *out_infos, size_t capacity,
                                       size_t *out_count) {
  if (!out_count) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "out_count: NULL");
  *out_count = 0;
  if (capacity > 0 && !out_infos)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "out_infos: NULL with capacity %zu", capacity);
  const okv_hal_backend_t *b = NULL;
  OKV_RETURN_IF_ERROR(okv_hal_backend_lookup(backend_name, &b));
  return b->enumerate(out_infos, capacity, out_count);
}
