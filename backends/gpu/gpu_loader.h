/* The one loader of the GPU vendor libraries (libcuda.so.1, libamdhip64.so):
 * dlopen of the first soname that opens, then resolution of a symbol table
 * described by an X-macro list, then the vendor's initialisation call; once
 * per process, later calls returning the first outcome.
 *
 * A vendor backend writes its symbols once, as an X-macro list
 *   SYM(return type, field, "exported symbol", "fallback symbol" or NULL, (parameters))
 * (backends/cuda/cuda_symbols.h, backends/hip/hip_symbols.h), and expands it
 * twice: with OKV_GPU_SYMBOL_FIELD into its function-pointer table type, and
 * with OKV_GPU_SYMBOL_ENTRY into the okv_gpu_symbol_t array this loader walks.
 * Not installed. */
#ifndef OASISKV_GPU_LOADER_H
#define OASISKV_GPU_LOADER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "oasiskv/status.h"

#if defined(__GNUC__)
#define OKV_GPU_LOADER_HIDDEN __attribute__((visibility("hidden")))
#else
#define OKV_GPU_LOADER_HIDDEN
#endif

/* One function pointer of a vendor table: where it lives in the table and the
 * names to look up (fallback tried when the first is absent). */
typedef struct okv_gpu_symbol_t {
  const char *name;
  const char *fallback; /* or NULL */
  size_t offset;        /* of the function pointer within the table */
} okv_gpu_symbol_t;

/* Expansions of a vendor's X-macro list (see above). */
#define OKV_GPU_SYMBOL_FIELD(ret, field, sym, alt, params) ret(*field) params;
#define OKV_GPU_SYMBOL_ENTRY(table_type, field, sym, alt)  {sym, alt, offsetof(table_type, field)},

/* A vendor library and the outcome of loading it (static storage, one per
 * vendor; initialise with OKV_GPU_LIBRARY_INIT). */
typedef struct okv_gpu_library_t {
  const char *backend;        /* "cuda" / "hip": prefix of every message */
  const char *const *sonames; /* tried in order; sonames[0] names the library in messages */
  size_t n_sonames;
  const char *too_old_hint;        /* said when a symbol is missing, e.g. "driver too old?" */
  const okv_gpu_symbol_t *symbols; /* resolved into `table` */
  size_t n_symbols;
  void *table; /* the vendor's function-pointer table (all NULL until loaded) */
  size_t table_bytes;
  /* Called once every symbol resolved (e.g. cuInit / hipInit); its status
   * becomes the outcome. NULL = nothing to initialise. */
  okv_status_t (*init)(void);

  /* Outcome, guarded by `mutex`. */
  pthread_mutex_t mutex;
  bool done;
  okv_status_code_t code;
  char message[384];
} okv_gpu_library_t;

#define OKV_GPU_LIBRARY_INIT(backend_, sonames_, hint_, symbols_, table_, init_)                            \
  {                                                                                                         \
    .backend = (backend_), .sonames = (sonames_), .n_sonames = sizeof(sonames_) / sizeof((sonames_)[0]),    \
    .too_old_hint = (hint_), .symbols = (symbols_), .n_symbols = sizeof(symbols_) / sizeof((symbols_)[0]),  \
    .table = &(table_), .table_bytes = sizeof(table_), .init = (init_), .mutex = PTHREAD_MUTEX_INITIALIZER, \
  }

/* Loads `lib` once per process and returns the outcome: OKV_OK, or
 * UNAVAILABLE "<backend>: <soname> not found: <dlerror>" / "<backend>:
 * <soname> lacks <symbol> (<hint>)" (the table stays all NULL and the library
 * is closed), or the status of `init` (the library stays open, as it does on
 * success: for the life of the process). Thread-safe. */
OKV_GPU_LOADER_HIDDEN okv_status_t okv_gpu_library_load(okv_gpu_library_t *lib);

#endif /* OASISKV_GPU_LOADER_H */
