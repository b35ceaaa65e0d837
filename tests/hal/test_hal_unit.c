/* Unit tests of the backend-independent HAL pieces: statuses, allocators,
 * tier names, the backend registry and device parameter validation. */
#include <stdlib.h>
#include <string.h>

#include "tests/common/test_common.h"

/* ---- Statuses ---- */

static void test_status_ok_is_null(void **state) {
  (void)state;
  okv_status_t s = okv_status_make(OKV_STATUS_OK, "ignored %d", 1);
  assert_null(s);
  assert_int_equal(okv_status_code(OKV_OK), OKV_STATUS_OK);
  assert_string_equal(okv_status_message(OKV_OK), "OK");
  okv_status_free(OKV_OK); /* accepted */
  assert_int_equal(okv_status_consume(OKV_OK), OKV_STATUS_OK);
  assert_null(okv_status_annotate(OKV_OK, "context"));
}

static void test_status_make_formats(void **state) {
  (void)state;
  okv_status_t s = okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "%s tier full: %d of %d", "device", 3, 4);
  assert_non_null(s);
  assert_int_equal(okv_status_code(s), OKV_STATUS_OUT_OF_MEMORY);
  assert_string_equal(okv_status_message(s), "device tier full: 3 of 4");
  assert_int_equal(okv_status_consume(s), OKV_STATUS_OUT_OF_MEMORY);
}

static void test_status_annotate_prefixes(void **state) {
  (void)state;
  okv_status_t s = okv_status_make(OKV_STATUS_NOT_FOUND, "file %s", "a.bin");
  s = okv_status_annotate(s, "loading layer %d", 7);
  assert_int_equal(okv_status_code(s), OKV_STATUS_NOT_FOUND);
  assert_string_equal(okv_status_message(s), "loading layer 7: file a.bin");
  okv_status_free(s);
}

static void test_status_truncates_long_messages(void **state) {
  (void)state;
  char big[2000];
  memset(big, 'x', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  okv_status_t s = okv_status_make(OKV_STATUS_INTERNAL, "%s", big);
  assert_int_equal(strlen(okv_status_message(s)), 511);
  s = okv_status_annotate(s, "%s", big); /* still bounded */
  assert_int_equal(strlen(okv_status_message(s)), 511);
  assert_int_equal(okv_status_message(s)[0], 'x');
  okv_status_free(s);
}

/* An enum value and the name its naming function must give it. */
typedef struct named_t {
  int value;
  const char *name;
} named_t;

static void test_status_code_names(void **state) {
  (void)state;
  static const named_t names[] = {
      {OKV_STATUS_OK, "OK"},
      {OKV_STATUS_INVALID_ARGUMENT, "INVALID_ARGUMENT"},
      {OKV_STATUS_OUT_OF_MEMORY, "OUT_OF_MEMORY"},
      {OKV_STATUS_UNAVAILABLE, "UNAVAILABLE"},
      {OKV_STATUS_COPY_FAILED, "COPY_FAILED"},
      {OKV_STATUS_INTERNAL, "INTERNAL"},
      {OKV_STATUS_NOT_FOUND, "NOT_FOUND"},
      {OKV_STATUS_IO_ERROR, "IO_ERROR"},
      {OKV_STATUS_CODE_COUNT, "UNKNOWN"},
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    assert_string_equal(okv_status_code_name((okv_status_code_t)names[i].value), names[i].name);
  /* An out-of-range code becomes INTERNAL rather than an unnamed value. */
  okv_status_t s = okv_status_make((okv_status_code_t)99, "bad code");
  assert_int_equal(okv_status_consume(s), OKV_STATUS_INTERNAL);
}

/* ---- Allocators ---- */

static void test_allocator_system_and_null(void **state) {
  (void)state;
  okv_allocator_t sys = okv_allocator_system();
  assert_non_null(sys.malloc_fn);
  assert_non_null(sys.free_fn);
  unsigned char *p = okv_calloc(NULL, 100, 3);
  assert_non_null(p);
  for (int i = 0; i < 300; ++i) assert_int_equal(p[i], 0);
  p = okv_realloc(&sys, p, 1000);
  assert_non_null(p);
  p[999] = 7;
  okv_free(&sys, p);
  okv_free(NULL, NULL); /* accepted */
  void *q = okv_malloc(NULL, 16);
  assert_non_null(q);
  okv_free(NULL, q);
}

static void test_allocator_routes_calls(void **state) {
  (void)state;
  /* The test allocator goes through test_malloc: a leak here would fail the test. */
  okv_allocator_t a = okv_test_allocator();
  int *v = okv_calloc(&a, 8, sizeof(int));
  assert_non_null(v);
  for (int i = 0; i < 8; ++i) assert_int_equal(v[i], 0);
  v = okv_realloc(&a, v, 16 * sizeof(int));
  v[15] = 3;
  okv_free(&a, v);
}

/* ---- Tiers and registry ---- */

static void test_tier_names(void **state) {
  (void)state;
  static const named_t names[] = {
      {OKV_TIER_DEVICE, "device"}, {OKV_TIER_HOST, "host"}, {OKV_TIER_REMOTE, "remote"},
      {OKV_TIER_COUNT, "unknown"}, {-1, "unknown"},
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    assert_string_equal(okv_tier_name((okv_tier_t)names[i].value), names[i].name);
  assert_int_equal(OKV_TIER_BIT(OKV_TIER_HOST), 2u);
}

static void test_backend_registry(void **state) {
  (void)state;
  size_t n = okv_hal_backend_count();
  assert_true(n >= 1);
  assert_string_equal(okv_hal_backend_name(0), "cpu");
  assert_null(okv_hal_backend_name(n));
  for (size_t i = 0; i < n; ++i) { /* every listed name is distinct and known to the registry */
    const char *name = okv_hal_backend_name(i);
    assert_non_null(name);
    assert_true(name[0] != '\0');
    for (size_t j = 0; j < i; ++j) assert_string_not_equal(name, okv_hal_backend_name(j));
    size_t n_dev = 99;
    okv_status_code_t code = okv_status_consume(okv_hal_backend_enumerate(name, NULL, 0, &n_dev));
    assert_true(code == OKV_STATUS_OK || code == OKV_STATUS_UNAVAILABLE); /* compiled in: never NOT_FOUND */
  }
  size_t count = 99;
  OKV_ASSERT_CODE(okv_hal_backend_enumerate("no-such-backend", NULL, 0, &count), OKV_STATUS_NOT_FOUND);
  assert_int_equal(count, 0);
  OKV_ASSERT_CODE(okv_hal_backend_enumerate("cpu", NULL, 0, NULL), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_hal_backend_enumerate("cpu", NULL, 2, &count), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_OK(okv_hal_backend_enumerate("cpu", NULL, 0, &count));
  assert_int_equal(count, 1);
  okv_hal_device_info_t info;
  OKV_ASSERT_OK(okv_hal_backend_enumerate("cpu", &info, 1, &count));
  assert_string_equal(info.backend, "cpu");
  assert_true(strlen(info.name) > 0);
  assert_true(info.alloc_tiers & OKV_TIER_BIT(OKV_TIER_DEVICE));
  assert_true(info.alloc_tiers & OKV_TIER_BIT(OKV_TIER_HOST));
  assert_false(info.alloc_tiers & OKV_TIER_BIT(OKV_TIER_REMOTE));
  assert_true(info.physical_bytes[OKV_TIER_HOST] > 0);
}

static void test_device_params(void **state) {
  (void)state;
  okv_hal_device_params_t p;
  memset(&p, 0x5a, sizeof(p));
  okv_hal_device_params_init(&p);
  assert_int_equal(p.ordinal, 0);
  assert_int_equal(p.n_threads, 0);
  for (int t = 0; t < OKV_TIER_COUNT; ++t) assert_int_equal(p.capacity_bytes[t], 0);

  okv_allocator_t a = okv_test_allocator();
  okv_hal_device_t *dev = (okv_hal_device_t *)0x1;
  OKV_ASSERT_CODE(okv_hal_device_create("nope", NULL, &a, &dev), OKV_STATUS_NOT_FOUND);
  assert_null(dev);
  OKV_ASSERT_CODE(okv_hal_device_create("cpu", NULL, &a, NULL), OKV_STATUS_INVALID_ARGUMENT);
  p.n_threads = -1;
  OKV_ASSERT_CODE(okv_hal_device_create("cpu", &p, &a, &dev), OKV_STATUS_INVALID_ARGUMENT);
  p.n_threads = 0;
  p.ordinal = -2;
  OKV_ASSERT_CODE(okv_hal_device_create("cpu", &p, &a, &dev), OKV_STATUS_INVALID_ARGUMENT);
  p.ordinal = 1;
  OKV_ASSERT_CODE(okv_hal_device_create("cpu", &p, &a, &dev), OKV_STATUS_UNAVAILABLE);
  assert_null(dev);

  /* Defaults: the CPU DEVICE arena is 1 GiB, HOST is unlimited. */
  OKV_ASSERT_OK(okv_hal_device_create("cpu", NULL, &a, &dev));
  uint64_t cap = 0, used = 1;
  OKV_ASSERT_OK(okv_hal_device_tier_usage(dev, OKV_TIER_DEVICE, &cap, &used));
  assert_int_equal(cap, 1ull << 30);
  assert_int_equal(used, 0);
  OKV_ASSERT_OK(okv_hal_device_tier_usage(dev, OKV_TIER_HOST, &cap, &used));
  assert_int_equal(cap, UINT64_MAX);
  OKV_ASSERT_CODE(okv_hal_device_tier_usage(dev, OKV_TIER_COUNT, &cap, &used), OKV_STATUS_INVALID_ARGUMENT);
  const okv_allocator_t *da = okv_hal_device_allocator(dev);
  assert_non_null(da);
  assert_ptr_equal(da->malloc_fn, a.malloc_fn);
  OKV_ASSERT_OK(okv_hal_device_release(dev));
  assert_null(okv_hal_device_allocator(dev));

  /* n_threads shows up in the device name. */
  okv_hal_device_params_init(&p);
  p.n_threads = 3;
  OKV_ASSERT_OK(okv_hal_device_create("cpu", &p, &a, &dev));
  okv_hal_device_info_t info;
  OKV_ASSERT_OK(okv_hal_device_info(dev, &info));
  assert_non_null(strstr(info.name, "(3 threads)"));
  OKV_ASSERT_OK(okv_hal_device_release(dev));
}

/* The live-handle registry grows, shrinks and reuses slots without losing a handle. */
static void test_live_registry_many_handles(void **state) {
  (void)state;
  okv_allocator_t a = okv_test_allocator();
  okv_hal_device_t *dev = NULL;
  OKV_ASSERT_OK(okv_hal_device_create("cpu", NULL, &a, &dev));
  enum { N = 700 };
  okv_hal_buffer_t **bufs = test_calloc(N, sizeof(*bufs));
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < N; ++i) OKV_ASSERT_OK(okv_hal_buffer_alloc(dev, OKV_TIER_HOST, 16 + (uint64_t)i, &bufs[i]));
    for (int i = 0; i < N; ++i) assert_int_equal(okv_hal_buffer_size(bufs[i]), 16 + (uint64_t)i);
    /* Release every other one, check both halves, then the rest. */
    for (int i = 0; i < N; i += 2) OKV_ASSERT_OK(okv_hal_buffer_release(bufs[i]));
    for (int i = 1; i < N; i += 2) assert_int_equal(okv_hal_buffer_size(bufs[i]), 16 + (uint64_t)i);
    for (int i = 1; i < N; i += 2) OKV_ASSERT_OK(okv_hal_buffer_release(bufs[i]));
    uint64_t cap = 0, used = 1;
    OKV_ASSERT_OK(okv_hal_device_tier_usage(dev, OKV_TIER_HOST, &cap, &used));
    assert_int_equal(used, 0);
  }
  test_free(bufs);
  OKV_ASSERT_OK(okv_hal_device_release(dev));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_status_ok_is_null),          cmocka_unit_test(test_status_make_formats),
      cmocka_unit_test(test_status_annotate_prefixes),   cmocka_unit_test(test_status_truncates_long_messages),
      cmocka_unit_test(test_status_code_names),          cmocka_unit_test(test_allocator_system_and_null),
      cmocka_unit_test(test_allocator_routes_calls),     cmocka_unit_test(test_tier_names),
      cmocka_unit_test(test_backend_registry),           cmocka_unit_test(test_device_params),
      cmocka_unit_test(test_live_registry_many_handles),
  };
  return cmocka_run_group_tests_name("hal_unit", tests, NULL, NULL);
}
