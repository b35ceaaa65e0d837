/* Host allocator passed explicitly at creation of every top-level object
 * (device, runtime). Every host allocation the library makes for that object
 * goes through it, so tests can route it through CMocka's test_malloc and catch
 * leaks. The allocator's functions must be thread-safe: backends allocate from
 * worker threads. */
#ifndef OASISKV_ALLOCATOR_H
#define OASISKV_ALLOCATOR_H

#include "oasiskv/api.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct okv_allocator_t {
  void *self; /* user context, passed back to every call */
  void *(*malloc_fn)(void *self, size_t bytes);
  void *(*calloc_fn)(void *self, size_t count, size_t bytes);
  void *(*realloc_fn)(void *self, void *ptr, size_t bytes);
  void (*free_fn)(void *self, void *ptr);
} okv_allocator_t;

/* The C library's malloc/calloc/realloc/free. */
OKV_API okv_allocator_t okv_allocator_system(void);

/* Convenience wrappers; a NULL allocator means okv_allocator_system(). */
OKV_API void *okv_malloc(const okv_allocator_t *a, size_t bytes);
OKV_API void *okv_calloc(const okv_allocator_t *a, size_t count, size_t bytes);
OKV_API void *okv_realloc(const okv_allocator_t *a, void *ptr, size_t bytes);
OKV_API void okv_free(const okv_allocator_t *a, void *ptr);

#ifdef __cplusplus
}
#endif
#endif
