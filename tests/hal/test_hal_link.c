/* The cpu backend's emulated HOST<->DEVICE link (okv_hal_device_params_t
 * link_bytes_per_s / link_latency_s, okv_hal_device_set_link): a copy op takes
 * at least latency + bytes / bandwidth, one copy engine per direction shared
 * by every stream, DEVICE->DEVICE unpaced, 0 = unpaced. Lower bounds are exact
 * (the pacing sleeps until the reserved interval ends); upper bounds are
 * generous because the machine running the tests may be loaded. */
#include <math.h>
#include <string.h>
#include <time.h>

#include "hal/hal_internal.h"
#include "tests/common/test_common.h"

#define MIB       (1024.0 * 1024.0)
#define SLACK_S   0.5 /* upper-bound allowance for a loaded machine */
#define CLOCK_EPS 1e-4

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct link_fixture_t {
  okv_allocator_t alloc;
  okv_hal_device_t *dev;
  okv_hal_buffer_t *host, *device, *device2;
  okv_hal_stream_t *s1, *s2;
} link_fixture_t;

static void open_device(link_fixture_t *f, double bytes_per_s, double latency_s) {
  memset(f, 0, sizeof *f);
  f->alloc = okv_test_allocator();
  okv_hal_device_params_t p;
  okv_hal_device_params_init(&p);
  p.link_bytes_per_s = bytes_per_s;
  p.link_latency_s = latency_s;
  OKV_ASSERT_OK(okv_hal_device_create("cpu", &p, &f->alloc, &f->dev));
  OKV_ASSERT_OK(okv_hal_buffer_alloc(f->dev, OKV_TIER_HOST, 16u << 20, &f->host));
  OKV_ASSERT_OK(okv_hal_buffer_alloc(f->dev, OKV_TIER_DEVICE, 16u << 20, &f->device));
  OKV_ASSERT_OK(okv_hal_buffer_alloc(f->dev, OKV_TIER_DEVICE, 16u << 20, &f->device2));
  OKV_ASSERT_OK(okv_hal_stream_create(f->dev, &f->s1));
  OKV_ASSERT_OK(okv_hal_stream_create(f->dev, &f->s2));
  unsigned char *h = okv_hal_buffer_host_ptr(f->host);
  for (size_t i = 0; i < (16u << 20); i++) h[i] = (unsigned char)(i * 131u + 7u);
}

static void close_device(link_fixture_t *f) {
  OKV_ASSERT_OK(okv_hal_stream_release(f->s1));
  OKV_ASSERT_OK(okv_hal_stream_release(f->s2));
  OKV_ASSERT_OK(okv_hal_buffer_release(f->host));
  OKV_ASSERT_OK(okv_hal_buffer_release(f->device));
  OKV_ASSERT_OK(okv_hal_buffer_release(f->device2));
  OKV_ASSERT_OK(okv_hal_device_release(f->dev));
}

/* Seconds for one copy of `bytes` src -> dst on s1, enqueue to synchronize. */
static double timed_copy(link_fixture_t *f, okv_hal_buffer_t *src, okv_hal_buffer_t *dst, uint64_t bytes) {
  double t0 = now_s();
  OKV_ASSERT_OK(okv_hal_copy_async(f->s1, src, 0, dst, 0, bytes));
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->s1));
  return now_s() - t0;
}

/* 8 MiB HOST->DEVICE at 1 GB/s: >= 8.39 ms, and the bytes arrive. */
static void test_link_paces_copy(void **state) {
  (void)state;
  link_fixture_t f;
  open_device(&f, 1e9, 0.0);
  okv_hal_device_info_t info;
  OKV_ASSERT_OK(okv_hal_device_info(f.dev, &info));
  assert_true(info.link_bytes_per_s == 1e9);
  assert_true(info.link_latency_s == 0.0);
  const uint64_t bytes = 8u << 20;
  double t = timed_copy(&f, f.host, f.device, bytes);
  double expect = (double)bytes / 1e9; /* 8.389 ms */
  assert_true(t >= expect - CLOCK_EPS);
  assert_true(t <= expect + SLACK_S);
  assert_memory_equal(okv_hal_buffer_host_ptr(f.device), okv_hal_buffer_host_ptr(f.host), bytes);
  /* DEVICE->HOST is paced the same way. */
  t = timed_copy(&f, f.device, f.host, bytes);
  assert_true(t >= expect - CLOCK_EPS);
  close_device(&f);
}

/* One batched copy is one op: latency once, plus bytes / bandwidth. */
static void test_link_batch_latency_once(void **state) {
  (void)state;
  link_fixture_t f;
  open_device(&f, 1e9, 0.010);
  enum { N = 128 };
  const uint64_t bb = 64u << 10; /* 128 x 64 KiB = 8 MiB */
  okv_block_copy_t pairs[N];
  for (size_t i = 0; i < N; i++) {
    pairs[i].src_offset = (uint64_t)((i * 37u) % N) * bb;
    pairs[i].dst_offset = (uint64_t)i * bb;
  }
  double t0 = now_s();
  OKV_ASSERT_OK(okv_hal_copy_blocks_async(f.s1, f.host, f.device, bb, N, pairs));
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f.s1));
  double t = now_s() - t0;
  double expect = 0.010 + (double)(N * bb) / 1e9; /* 18.39 ms; N latencies would be 1.29 s */
  assert_true(t >= expect - CLOCK_EPS);
  assert_true(t <= expect + SLACK_S);
  const unsigned char *h = okv_hal_buffer_host_ptr(f.host), *d = okv_hal_buffer_host_ptr(f.device);
  for (size_t i = 0; i < N; i++) assert_memory_equal(d + pairs[i].dst_offset, h + pairs[i].src_offset, bb);
  close_device(&f);
}

/* 0 = unpaced: the same 8 MiB copy takes far less than it would at 0.1 GB/s
 * (84 ms); DEVICE->DEVICE is never paced, even on a slow link. */
static void test_link_zero_and_device_to_device_unpaced(void **state) {
  (void)state;
  link_fixture_t f;
  open_device(&f, 0.0, 0.0);
  const uint64_t bytes = 8u << 20;
  double best = 1e9;
  for (int i = 0; i < 3; i++) { /* best of 3: one slow run on a busy machine does not fail it */
    double t = timed_copy(&f, f.host, f.device, bytes);
    if (t < best) best = t;
  }
  assert_true(best < (double)bytes / 1e8);
  close_device(&f);

  open_device(&f, 1e7, 0.0); /* 8 MiB would take 0.84 s over this link */
  best = 1e9;
  for (int i = 0; i < 3; i++) {
    double t = timed_copy(&f, f.device, f.device2, bytes);
    if (t < best) best = t;
  }
  assert_true(best < 0.3);
  close_device(&f);
}

/* Two streams copying the same direction share one engine (serialised); the
 * two directions overlap. 4 MiB at 0.025 GB/s = 168 ms per copy: long enough
 * that thread wake-ups on a loaded machine do not blur the difference. */
static void test_link_one_engine_per_direction(void **state) {
  (void)state;
  link_fixture_t f;
  open_device(&f, 0.025e9, 0.0);
  const uint64_t bytes = 4u << 20;
  double one = (double)bytes / 0.025e9;
  double t0 = now_s();
  OKV_ASSERT_OK(okv_hal_copy_async(f.s1, f.host, 0, f.device, 0, bytes));
  OKV_ASSERT_OK(okv_hal_copy_async(f.s2, f.host, bytes, f.device, bytes, bytes));
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f.s1));
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f.s2));
  double same = now_s() - t0;
  assert_true(same >= 2.0 * one - CLOCK_EPS);
  assert_true(same <= 2.0 * one + SLACK_S);

  t0 = now_s();
  OKV_ASSERT_OK(okv_hal_copy_async(f.s1, f.host, 0, f.device, 0, bytes));
  OKV_ASSERT_OK(okv_hal_copy_async(f.s2, f.device2, 0, f.host, 8u << 20, bytes));
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f.s1));
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f.s2));
  double opposite = now_s() - t0;
  assert_true(opposite >= one - CLOCK_EPS);
  assert_true(opposite < 1.6 * one); /* overlapped: serialised would be 2 x one */
  close_device(&f);
}

/* okv_hal_device_set_link: halving the bandwidth doubles a copy's time; the
 * info follows; bad values are refused and change nothing. */
static void test_link_set_at_run_time(void **state) {
  (void)state;
  link_fixture_t f;
  open_device(&f, 0.5e9, 0.0);
  const uint64_t bytes = 4u << 20;
  double t = timed_copy(&f, f.host, f.device, bytes);
  assert_true(t >= (double)bytes / 0.5e9 - CLOCK_EPS);
  OKV_ASSERT_OK(okv_hal_device_set_link(f.dev, 0.25e9, 0.002));
  okv_hal_device_info_t info;
  OKV_ASSERT_OK(okv_hal_device_info(f.dev, &info));
  assert_true(info.link_bytes_per_s == 0.25e9);
  assert_true(info.link_latency_s == 0.002);
  t = timed_copy(&f, f.host, f.device, bytes);
  assert_true(t >= 0.002 + (double)bytes / 0.25e9 - CLOCK_EPS);
  assert_true(t <= 0.002 + (double)bytes / 0.25e9 + SLACK_S);
  OKV_ASSERT_CODE(okv_hal_device_set_link(f.dev, -1.0, 0.0), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_hal_device_set_link(f.dev, NAN, 0.0), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_hal_device_set_link(f.dev, 1e9, INFINITY), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_hal_device_set_link(NULL, 1e9, 0.0), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_OK(okv_hal_device_info(f.dev, &info));
  assert_true(info.link_bytes_per_s == 0.25e9); /* unchanged by the refused calls */
  close_device(&f);
}

/* Parameter checks: values must be finite and >= 0; a backend whose link is
 * real (no link emulation: cuda, hip) refuses any non-zero value, naming the
 * field, before a device is created. */
static void test_link_params_checked(void **state) {
  (void)state;
  okv_hal_device_params_t p;
  okv_hal_device_params_init(&p);
  assert_true(p.link_bytes_per_s == 0.0 && p.link_latency_s == 0.0);
  const okv_hal_backend_t *cpu = NULL;
  OKV_ASSERT_OK(okv_hal_backend_lookup("cpu", &cpu));
  assert_true(cpu->link_emulation);
  const okv_hal_backend_t gpu = {.name = "cuda", .link_emulation = false}; /* as the cuda and hip entries are */
  OKV_ASSERT_OK(okv_hal_device_params_check(&gpu, &p));                    /* zeros: fine everywhere */
  p.link_bytes_per_s = 50e9;
  okv_status_t s = okv_hal_device_params_check(&gpu, &p);
  assert_int_equal(okv_status_code(s), OKV_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(okv_status_message(s), "link_bytes_per_s"));
  assert_non_null(strstr(okv_status_message(s), "real"));
  okv_status_free(s);
  OKV_ASSERT_OK(okv_hal_device_params_check(cpu, &p));
  p.link_bytes_per_s = 0.0;
  p.link_latency_s = 1e-6;
  OKV_ASSERT_CODE(okv_hal_device_params_check(&gpu, &p), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_OK(okv_hal_device_params_check(cpu, &p));
  const double bad[] = {-1.0, NAN, INFINITY, -INFINITY};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    okv_hal_device_params_init(&p);
    p.link_bytes_per_s = bad[i];
    OKV_ASSERT_CODE(okv_hal_device_params_check(cpu, &p), OKV_STATUS_INVALID_ARGUMENT);
    okv_hal_device_params_init(&p);
    p.link_latency_s = bad[i];
    OKV_ASSERT_CODE(okv_hal_device_params_check(cpu, &p), OKV_STATUS_INVALID_ARGUMENT);
  }
  /* Through the public entry: a bad value creates nothing. */
  okv_allocator_t a = okv_test_allocator();
  okv_hal_device_t *dev = (okv_hal_device_t *)0x1;
  okv_hal_device_params_init(&p);
  p.link_bytes_per_s = -5.0;
  OKV_ASSERT_CODE(okv_hal_device_create("cpu", &p, &a, &dev), OKV_STATUS_INVALID_ARGUMENT);
  assert_null(dev);
  /* Every GPU backend compiled into this build refuses the knob at creation (before touching a driver). */
  for (size_t i = 0; i < okv_hal_backend_count(); i++) {
    const char *name = okv_hal_backend_name(i);
    if (!strcmp(name, "cpu")) continue;
    p.link_bytes_per_s = 50e9;
    OKV_ASSERT_CODE(okv_hal_device_create(name, &p, &a, &dev), OKV_STATUS_INVALID_ARGUMENT);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_link_params_checked),
      cmocka_unit_test(test_link_paces_copy),
      cmocka_unit_test(test_link_batch_latency_once),
      cmocka_unit_test(test_link_zero_and_device_to_device_unpaced),
      cmocka_unit_test(test_link_one_engine_per_direction),
      cmocka_unit_test(test_link_set_at_run_time),
  };
  return cmocka_run_group_tests_name("hal_link", tests, NULL, NULL);
}
