/* Shared test support for the CMocka suites. */
#ifndef OASISKV_TEST_COMMON_H
#define OASISKV_TEST_COMMON_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "oasiskv/oasiskv.h"

/* Exit code Meson reads as "skipped". */
#define OKV_TEST_SKIP_EXIT 77

/* An allocator routed through CMocka's test_malloc/test_free, so leaks fail the test. */
okv_allocator_t okv_test_allocator(void);

/* CMocka's test_malloc family keeps one unsynchronised list of blocks, while the
 * library allocates from its worker threads: every test_* allocation call in the
 * suites goes through these serialised wrappers instead. */
void *okv_test_locked_malloc(size_t n, const char *file, int line);
void *okv_test_locked_calloc(size_t c, size_t n, const char *file, int line);
void *okv_test_locked_realloc(void *p, size_t n, const char *file, int line);
void okv_test_locked_free(void *p, const char *file, int line);
#undef test_malloc
#undef test_calloc
#undef test_realloc
#undef test_free
#define test_malloc(n)     okv_test_locked_malloc((n), __FILE__, __LINE__)
#define test_calloc(c, n)  okv_test_locked_calloc((c), (n), __FILE__, __LINE__)
#define test_realloc(p, n) okv_test_locked_realloc((p), (n), __FILE__, __LINE__)
#define test_free(p)       okv_test_locked_free((p), __FILE__, __LINE__)

/* Asserts that `s` is OK; on failure prints its message and fails the test. */
#define OKV_ASSERT_OK(expr)                                                                                      \
  do {                                                                                                           \
    okv_status_t s_ = (expr);                                                                                    \
    if (s_ != OKV_OK) {                                                                                          \
      print_error("%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #expr, okv_status_code_name(okv_status_code(s_)), \
                  okv_status_message(s_));                                                                       \
      okv_status_free(s_);                                                                                       \
      fail();                                                                                                    \
    }                                                                                                            \
  } while (0)

/* Asserts that `expr` returns a status with `code`, and frees it. */
#define OKV_ASSERT_CODE(expr, code)                                                                           \
  do {                                                                                                        \
    okv_status_t s_ = (expr);                                                                                 \
    okv_status_code_t c_ = okv_status_code(s_);                                                               \
    if (c_ != (code)) {                                                                                       \
      print_error("%s:%d: %s -> %s (%s), expected %s\n", __FILE__, __LINE__, #expr, okv_status_code_name(c_), \
                  okv_status_message(s_), okv_status_code_name(code));                                        \
      okv_status_free(s_);                                                                                    \
      fail();                                                                                                 \
    }                                                                                                         \
    okv_status_free(s_);                                                                                      \
  } while (0)

/* One invalid variant of a valid value: d = good, then `mutate` (on d), then
 * `check`, which expects the failure. For lists of one-line mutations of a
 * valid descriptor or config. */
#define OKV_EXPECT_MUTATION(d, good, mutate, check) \
  do {                                              \
    (d) = (good);                                   \
    mutate;                                         \
    check;                                          \
  } while (0)

/* A test run with its suite's per-test fixture: the suite's setup() before
 * it and teardown() after (each test gets a fresh fixture). */
#define OKV_FIXTURE_TEST(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

/* Deterministic xorshift64* RNG for tests. */
typedef struct okv_test_rng_t {
  uint64_t s;
} okv_test_rng_t;
void okv_test_rng_seed(okv_test_rng_t *r, uint64_t seed);
uint64_t okv_test_rng_u64(okv_test_rng_t *r);
uint32_t okv_test_rng_below(okv_test_rng_t *r, uint32_t n); /* uniform in [0, n) */
double okv_test_rng_uniform(okv_test_rng_t *r);             /* [0, 1) */
float okv_test_rng_normal(okv_test_rng_t *r);               /* N(0, 1) */

/* The backend a conformance test runs on: argv[1] if given, else "cpu".
 * If the backend is compiled in but unavailable at run time, prints the reason
 * and exits 77 (skipped). */
const char *okv_test_backend_or_skip(int argc, char **argv);

#endif
