/* The system allocator and the okv_malloc/... wrappers (NULL = system). */
#include <stdlib.h>

#include "oasiskv/allocator.h"

static void *sys_malloc(void *self, size_t bytes) {
  (void)self;
  return malloc(bytes);
}
static void *sys_calloc(void *self, size_t count, size_t bytes) {
  (void)self;
  return calloc(count, bytes);
}
static void *sys_realloc(void *self, void *ptr, size_t bytes) {
  (void)self;
  return realloc(ptr, bytes);
}
static void sys_free(void *self, void *ptr) {
  (void)self;
  free(ptr);
}

okv_allocator_t okv_allocator_system(void) {
  okv_allocator_t a = {NULL, sys_malloc, sys_calloc, sys_realloc, sys_free};
  return a;
}

void *okv_malloc(const okv_allocator_t *a, size_t bytes) {
  if (!a || !a->malloc_fn) return malloc(bytes);
  return a->malloc_fn(a->self, bytes);
}

void *okv_calloc(const okv_allocator_t *a, size_t count, size_t bytes) {
  if (!a || !a->calloc_fn) {
    if (a && a->malloc_fn) {
      /* Allocator without calloc: malloc + zero, overflow-checked. */
      if (bytes && count > (size_t)-1 / bytes) return NULL;
      unsigned char *p = a->malloc_fn(a->self, count * bytes);
      if (p) {
        for (size_t i = 0; i < count * bytes; ++i) p[i] = 0;
      }
      return p;
    }
    return calloc(count, bytes);
  }
  return a->calloc_fn(a->self, count, bytes);
}

void *okv_realloc(const okv_allocator_t *a, void *ptr, size_t bytes) {
  if (!a || !a->realloc_fn) return realloc(ptr, bytes);
  return a->realloc_fn(a->self, ptr, bytes);
}

void okv_free(const okv_allocator_t *a, void *ptr) {
  if (!ptr) return;
  if (!a || !a->free_fn) {
    free(ptr);
    return;
  }
  a->free_fn(a->self, ptr);
}
