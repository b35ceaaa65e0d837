/* The loader of the GPU vendor libraries (see gpu_loader.h), shared by the
 * CUDA and HIP backends.
 * Owns: the outcome fields of each okv_gpu_library_t and the dlopen handle
 * (kept open for the life of the process once the symbols resolved).
 * May touch: the vendor's function-pointer table (written once, under the
 * library's mutex) and the vendor's init hook. Nothing of the HAL. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "gpu_loader.h"

/* dlsym of `sym`, else of `alt` when not NULL. */
static void *gpu_dlsym(void *handle, const char *sym, const char *alt) {
  void *p = dlsym(handle, sym);
  if (!p && alt) p = dlsym(handle, alt);
  return p;
}

/* Opens, resolves and initialises; sets lib->code / lib->message. Caller holds the mutex. */
static void gpu_library_load_locked(okv_gpu_library_t *lib) {
  void *handle = NULL;
  for (size_t i = 0; i < lib->n_sonames && !handle; ++i) {
    handle = dlopen(lib->sonames[i], RTLD_NOW | RTLD_LOCAL);
    if (!handle && i == 0) {
      const char *e = dlerror();
      snprintf(lib->message, sizeof(lib->message), "%s", e ? e : "unknown error");
    }
  }
  if (!handle) {
    char first[sizeof(lib->message) - 64];
    snprintf(first, sizeof(first), "%.300s", lib->message);
    lib->code = OKV_STATUS_UNAVAILABLE;
    snprintf(lib->message, sizeof(lib->message), "%s: %s not found: %s", lib->backend, lib->sonames[0], first);
    return;
  }
  for (size_t i = 0; i < lib->n_symbols; ++i) {
    const okv_gpu_symbol_t *sym = &lib->symbols[i];
    void *p = gpu_dlsym(handle, sym->name, sym->fallback);
    if (!p) {
      memset(lib->table, 0, lib->table_bytes);
      lib->code = OKV_STATUS_UNAVAILABLE;
      snprintf(lib->message, sizeof(lib->message), "%s: %s lacks %s (%s)", lib->backend, lib->sonames[0], sym->name,
               lib->too_old_hint);
      dlclose(handle);
      return;
    }
    memcpy((unsigned char *)lib->table + sym->offset, &p, sizeof(p));
  }
  okv_status_t s = lib->init ? lib->init() : OKV_OK;
  if (s != OKV_OK) {
    lib->code = okv_status_code(s);
    snprintf(lib->message, sizeof(lib->message), "%s", okv_status_message(s));
    okv_status_free(s);
  }
  /* The library stays open for the life of the process. */
}

okv_status_t okv_gpu_library_load(okv_gpu_library_t *lib) {
  pthread_mutex_lock(&lib->mutex);
  if (!lib->done) {
    lib->code = OKV_STATUS_OK;
    lib->message[0] = '\0';
    gpu_library_load_locked(lib);
    lib->done = true;
  }
  okv_status_code_t code = lib->code;
  pthread_mutex_unlock(&lib->mutex);
  if (code == OKV_STATUS_OK) return OKV_OK;
  return okv_status_make(code, "%s", lib->message);
}
