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

/* ---- An open-addressing hash set of pointers ----
 *
 * Writers (insert, remove) hold live_mutex. Readers that only ask "is this handle live, and of what kind"
 * (okv_hal_check_live: every API call's argument check) take no lock: the slots are atomics, a table is
 * published with a release store, and a table replaced by a larger one is retired, not freed (readers may
 * still probe it; it holds what was live when it was replaced), so a lock-free probe never touches freed
 * memory. Retired tables stay reachable from live_retired for the process's life: they sum to less than the
 * live table. Retain and release keep the mutex: a release that drops the last reference removes the handle
 * under it, so a retain can never revive an object being destroyed. */

#define OKV_LIVE_EMPTY ((uintptr_t)0)
#define OKV_LIVE_TOMB  ((uintptr_t)1)

typedef struct live_table_t {
  struct live_table_t *retired; /* the table this one replaced (kept: see above) */
  size_t cap;                   /* a power of two */
  _Atomic uintptr_t slots[];
} live_table_t;

static pthread_mutex_t live_mutex = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(live_table_t *) live_table; /* system allocator; NULL until the first handle */
static size_t live_count;                  /* live entries (live_mutex) */
static size_t live_used;                   /* live + tombstones (live_mutex) */

static size_t live_hash(uintptr_t p) {
  uint64_t x = (uint64_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return (size_t)x;
}

/* The slot of p in t, or SIZE_MAX; lock-free (acquire loads: a found handle's base was written before it was
 * published). */
static size_t live_find(const live_table_t *t, uintptr_t p) {
  if (t == NULL) return SIZE_MAX;
  size_t mask = t->cap - 1;
  for (size_t i = live_hash(p) & mask, n = 0; n < t->cap; i = (i + 1) & mask, ++n) {
    uintptr_t v = atomic_load_explicit(&t->slots[i], memory_order_acquire);
    if (v == OKV_LIVE_EMPTY) return SIZE_MAX;
    if (v == p) return i;
  }
  return SIZE_MAX;
}

static live_table_t *live_current(void) { return atomic_load_explicit(&live_table, memory_order_acquire); }

static void live_put_locked(live_table_t *t, uintptr_t p) {
  size_t mask = t->cap - 1;
  size_t i = live_hash(p) & mask;
  for (;;) {
    uintptr_t v = atomic_load_explicit(&t->slots[i], memory_order_relaxed);
    if (v == OKV_LIVE_EMPTY || v == OKV_LIVE_TOMB) break;
    i = (i + 1) & mask;
  }
  atomic_store_explicit(&t->slots[i], p, memory_order_release);
}

static bool live_insert_locked(uintptr_t p) {
  live_table_t *t = live_current();
  if (live_find(t, p) != SIZE_MAX) return true;
  size_t cap = t ? t->cap : 0;
  if ((live_used + 1) * 2 > cap) {
    /* A new table (dropping tombstones) at most 1/4 full of live entries, filled before it is published;
     * the old one is retired, not freed. */
    size_t ncap = cap ? cap : 64;
    while ((live_count + 1) * 4 > ncap) ncap *= 2;
    live_table_t *nt = calloc(1, sizeof *nt + ncap * sizeof(_Atomic uintptr_t));
    if (!nt) return false;
    nt->cap = ncap;
    nt->retired = t;
    for (size_t i = 0; i < cap; ++i) {
      uintptr_t v = atomic_load_explicit(&t->slots[i], memory_order_relaxed);
      if (v != OKV_LIVE_EMPTY && v != OKV_LIVE_TOMB) live_put_locked(nt, v);
    }
    atomic_store_explicit(&live_table, nt, memory_order_release);
    t = nt;
    live_used = live_count;
  }
  live_put_locked(t, p);
  ++live_count;
  ++live_used;
  return true;
}

static void live_remove_locked(uintptr_t p) {
  live_table_t *t = live_current();
  size_t i = live_find(t, p);
  if (i == SIZE_MAX) return;
  atomic_store_explicit(&t->slots[i], OKV_LIVE_TOMB, memory_order_release);
  --live_count;
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
  pthread_mutex_lock(&live_mutex);
  /* If the table cannot grow the handle stays unregistered: every call on it
   * then fails with INVALID_ARGUMENT, which is safe. okv_hal_resource_register
   * below reports that case to hal/ callers. */
  (void)live_insert_locked((uintptr_t)res);
  pthread_mutex_unlock(&live_mutex);
}

/* Lock-free (see above); with live_mutex held it is exact. */
static okv_status_t live_check(const void *obj, okv_hal_kind_t kind, const char *arg_name) {
  const char *name = arg_name ? arg_name : "handle";
  if (!obj) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "%s: NULL %s handle", name, okv_hal_kind_name(kind));
  if (live_find(live_current(), (uintptr_t)obj) == SIZE_MAX)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "%s: invalid or released handle (%s %p)", name,
                           okv_hal_kind_name(kind), obj);
  const okv_hal_resource_t *res = obj;
  if (res->kind != kind)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "%s: handle is a %s, expected a %s", name,
                           okv_hal_kind_name(res->kind), okv_hal_kind_name(kind));
  return OKV_OK;
}

okv_status_t okv_hal_check_live(const void *obj, okv_hal_kind_t kind, const char *arg_name) {
  return live_check(obj, kind, arg_name); /* no lock: every API call's argument check runs this */
}

okv_status_t okv_hal_live_retain(void *obj, okv_hal_kind_t kind, const char *arg_name) {
  pthread_mutex_lock(&live_mutex);
  okv_status_t s = live_check(obj, kind, arg_name);
  if (s == OKV_OK) atomic_fetch_add(&((okv_hal_resource_t *)obj)->ref_count, 1);
  pthread_mutex_unlock(&live_mutex);
  return s;
}

okv_status_t okv_hal_live_release(void *obj, okv_hal_kind_t kind, const char *arg_name, bool *out_last) {
  *out_last = false;
  pthread_mutex_lock(&live_mutex);
  okv_status_t s = live_check(obj, kind, arg_name);
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
