#include "tests/common/test_common.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t t_alloc_mutex = PTHREAD_MUTEX_INITIALIZER;

void *okv_test_locked_malloc(size_t n, const char *file, int line) {
  pthread_mutex_lock(&t_alloc_mutex);
  void *p = _test_malloc(n, file, line);
  pthread_mutex_unlock(&t_alloc_mutex);
  return p;
}
void *okv_test_locked_calloc(size_t c, size_t n, const char *file, int line) {
  pthread_mutex_lock(&t_alloc_mutex);
  void *p = _test_calloc(c, n, file, line);
  pthread_mutex_unlock(&t_alloc_mutex);
  return p;
}
void *okv_test_locked_realloc(void *p, size_t n, const char *file, int line) {
  pthread_mutex_lock(&t_alloc_mutex);
  void *q = _test_realloc(p, n, file, line);
  pthread_mutex_unlock(&t_alloc_mutex);
  return q;
}
void okv_test_locked_free(void *p, const char *file, int line) {
  pthread_mutex_lock(&t_alloc_mutex);
  _test_free(p, file, line);
  pthread_mutex_unlock(&t_alloc_mutex);
}

static void *t_malloc(void *self, size_t n) {
  (void)self;
  return test_malloc(n);
}
static void *t_calloc(void *self, size_t c, size_t n) {
  (void)self;
  return test_calloc(c, n);
}
static void *t_realloc(void *self, void *p, size_t n) {
  (void)self;
  return test_realloc(p, n);
}
static void t_free(void *self, void *p) {
  (void)self;
  test_free(p);
}

okv_allocator_t okv_test_allocator(void) {
  okv_allocator_t a = {NULL, t_malloc, t_calloc, t_realloc, t_free};
  return a;
}

void okv_test_rng_seed(okv_test_rng_t *r, uint64_t seed) { r->s = seed ? seed : 0x9E3779B97F4A7C15ull; }

uint64_t okv_test_rng_u64(okv_test_rng_t *r) {
  uint64_t x = r->s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  r->s = x;
  return x * 0x2545F4914F6CDD1Dull;
}

uint32_t okv_test_rng_below(okv_test_rng_t *r, uint32_t n) { return n ? (uint32_t)(okv_test_rng_u64(r) % n) : 0; }

double okv_test_rng_uniform(okv_test_rng_t *r) { return (double)(okv_test_rng_u64(r) >> 11) * 0x1.0p-53; }

float okv_test_rng_normal(okv_test_rng_t *r) {
  double u1 = okv_test_rng_uniform(r), u2 = okv_test_rng_uniform(r);
  if (u1 < 1e-300) u1 = 1e-300;
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

const char *okv_test_backend_or_skip(int argc, char **argv) {
  const char *name = argc > 1 ? argv[1] : "cpu";
  size_t n = 0;
  okv_status_t s = okv_hal_backend_enumerate(name, NULL, 0, &n);
  if (s != OKV_OK || n == 0) {
    fprintf(stderr, "SKIP: backend '%s' unavailable: %s\n", name,
            s != OKV_OK ? okv_status_message(s) : "no devices found");
    okv_status_free(s);
    exit(OKV_TEST_SKIP_EXIT);
  }
  const char *reason = getenv("OKV_TEST_SKIP_REASON"); /* tests/meson.build: known unsupported */
  if (reason != NULL && reason[0] != '\0') {
    fprintf(stderr, "SKIP: %s on backend '%s': %s\n", argc > 0 ? argv[0] : "test", name, reason);
    exit(OKV_TEST_SKIP_EXIT);
  }
  return name;
}
