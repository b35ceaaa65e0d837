/* Live-handle registry: the process-wide set of live HAL objects that turns
 * use-after-release and double release into INVALID_ARGUMENT instead of
 * undefined behaviour, and the reference counts of the resource base.
 * Owns: the open-addressing hash set of pointers (okv_live_*), its mutex, and
 * okv_hal_resource_t's ref_count / kind fields.
 * May touch: only the okv_hal_resource_t base of an object; never a device,
 * buffer, stream or event field, and never a backend. Destroying an object
 * whose last reference went is the caller's job (out_last). */
#include <stdint.h>
#include <stdlib.h>

#include "hal_internal.h"

/* ---- An open-addressing hash set of pointers ---- */

#define OKV_LIVE_EMPTY ((uintptr_t)0)
#define OKV_LIVE_TOMB  ((uintptr_t)1)

static pthread_mutex_t live_mutex = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t *live_slots; /* system allocator; capacity a power of two */
static size_t live_cap;
static size_t live_count; /* live entries */
static size_t live_used;  /* live + tombstones */

static size_t live_hash(uintptr_t p) {
  uint64_t x = (uint64_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return (size_t)x;
}

/* Index of p, or SIZE_MAX. Caller holds the mutex. */
static size_t live_find_locked(uintptr_t p) {
  if (!live_cap) return SIZE_MAX;
  size_t mask = live_cap - 1;
  for (size_t i = live_hash(p) & mask, n = 0; n < live_cap; i = (i + 1) & mask, ++n) {
    if (live_slots[i] == OKV_LIVE_EMPTY) return SIZE_MAX;
    if (live_slots[i] == p) return i;
  }
  return SIZE_MAX;
}

static void live_put_locked(uintptr_t *slots, size_t cap, uintptr_t p) {
  size_t mask = cap - 1;
  size_t i = live_hash(p) & mask;
  while (slots[i] != OKV_LIVE_EMPTY && slots[i] != OKV_LIVE_TOMB) i = (i + 1) & mask;
  slots[i] = p;
}

/* Returns false when the table could not grow (out of memory). */
static bool live_insert_locked(uintptr_t p) {
  if (live_find_locked(p) != SIZE_MAX) return true;
  if ((live_used + 1) * 2 > live_cap) {
    /* Rehash (dropping tombstones) into a table at most 1/4 full of live entries. */
    size_t cap = live_cap ? live_cap : 64;
    while ((live_count + 1) * 4 > cap) cap *= 2;
    uintptr_t *slots = calloc(cap, sizeof(uintptr_t));
    if (!slots) return false;
    for (size_t i = 0; i < live_cap; ++i) {
      if (live_slots[i] != OKV_LIVE_EMPTY && live_slots[i] != OKV_LIVE_TOMB) live_put_locked(slots, cap, live_slots[i]);
    }
    free(live_slots);
    live_slots = slots;
    live_cap = cap;
    live_used = live_count;
  }
  live_put_locked(live_slots, live_cap, p);
  ++live_count;
  ++live_used;
  return true;
}

static void live_remove_locked(uintptr_t p) {
  size_t i = live_find_locked(p);
  if (i == SIZE_MAX) return;
  live_slots[i] = OKV_LIVE_TOMB;
  --live_count;
  if (live_count == 0) {
    /* Nothing live: drop the table so no memory outlives the last object. */
    free(live_slots);
    live_slots = NULL;
    live_cap = 0;
    live_used = 0;
  }
}

/* ---- Resources and handle checks ---- */

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
  pthread_mutex_lock(&live_mutex);
  /* If the table cannot grow the handle stays unregistered: every call on it
   * then fails with INVALID_ARGUMENT, which is safe. okv_hal_resource_register
   * below reports that case to hal/ callers. */
  (void)live_insert_locked((uintptr_t)res);
  pthread_mutex_unlock(&live_mutex);
}

static okv_status_t live_check_locked(const void *obj, okv_hal_kind_t kind, const char *arg_name) {
  const char *name = arg_name ? arg_name : "handle";
  if (!obj) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "%s: NULL %s handle", name, okv_hal_kind_name(kind));
  if (live_find_locked((uintptr_t)obj) == SIZE_MAX)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "%s: invalid or released handle (%s %p)", name,
                           okv_hal_kind_name(kind), obj);
  const okv_hal_resource_t *res = obj;
  if (res->kind != kind)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "%s: handle is a %s, expected a %s", name,
                           okv_hal_kind_name(res->kind), okv_hal_kind_name(kind));
  return OKV_OK;
}

okv_status_t okv_hal_check_live(const void *obj, okv_hal_kind_t kind, const char *arg_name) {
  pthread_mutex_lock(&live_mutex);
  okv_status_t s = live_check_locked(obj, kind, arg_name);
  pthread_mutex_unlock(&live_mutex);
  return s;
}

okv_status_t okv_hal_live_retain(void *obj, okv_hal_kind_t kind, const char *arg_name) {
  pthread_mutex_lock(&live_mutex);
  okv_status_t s = live_check_locked(obj, kind, arg_name);
  if (s == OKV_OK) atomic_fetch_add(&((okv_hal_resource_t *)obj)->ref_count, 1);
  pthread_mutex_unlock(&live_mutex);
  return s;
}

okv_status_t okv_hal_live_release(void *obj, okv_hal_kind_t kind, const char *arg_name, bool *out_last) {
  *out_last = false;
  pthread_mutex_lock(&live_mutex);
  okv_status_t s = live_check_locked(obj, kind, arg_name);
  if (s == OKV_OK) {
    int prev = atomic_fetch_sub(&((okv_hal_resource_t *)obj)->ref_count, 1);
    if (prev <= 1) {
      live_remove_locked((uintptr_t)obj);
      *out_last = true;
    }
  }
  pthread_mutex_unlock(&live_mutex);
  return s;
}

void okv_hal_live_forget(const void *obj) {
  pthread_mutex_lock(&live_mutex);
  live_remove_locked((uintptr_t)obj);
  pthread_mutex_unlock(&live_mutex);
}

okv_status_t okv_hal_resource_register(okv_hal_resource_t *res, okv_hal_kind_t kind) {
  atomic_store(&res->ref_count, 1);
  res->kind = kind;
  pthread_mutex_lock(&live_mutex);
  bool ok = live_insert_locked((uintptr_t)res);
  pthread_mutex_unlock(&live_mutex);
  return ok ? OKV_OK : okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "host: could not grow the live-handle registry");
}
