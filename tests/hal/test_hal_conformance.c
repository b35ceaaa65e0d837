/* HAL conformance suite: written once against the public HAL API and run per
 * backend (argv[1] = "cpu", "cuda", "hip"). Every check is byte-exact against
 * a host-side model of what the buffers must hold. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "oasiskv/fault.h"
#include "hal/hal_impl.h"
#include "tests/common/test_common.h"

static const char *g_backend = "cpu";

typedef struct fixture_t {
  okv_allocator_t alloc;
  okv_hal_device_t *dev;
  okv_hal_stream_t *stream;
  okv_hal_device_info_t info;
  okv_test_rng_t rng;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = test_calloc(1, sizeof(*f));
  f->alloc = okv_test_allocator();
  okv_hal_device_params_t p;
  okv_hal_device_params_init(&p);
  p.capacity_bytes[OKV_TIER_DEVICE] = 256ull << 20;
  p.capacity_bytes[OKV_TIER_HOST] = 256ull << 20;
  okv_status_t s = okv_hal_device_create(g_backend, &p, &f->alloc, &f->dev);
  if (s != OKV_OK) {
    print_error("device create: %s\n", okv_status_message(s));
    okv_status_free(s);
    test_free(f);
    return -1;
  }
  s = okv_hal_stream_create(f->dev, &f->stream);
  if (s == OKV_OK) s = okv_hal_device_info(f->dev, &f->info);
  if (s != OKV_OK) {
    print_error("stream create: %s\n", okv_status_message(s));
    okv_status_free(s);
    return -1;
  }
  okv_test_rng_seed(&f->rng, 0xC0FFEE);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  int rc = 0;
  if (okv_status_consume(okv_hal_stream_release(f->stream)) != OKV_STATUS_OK) rc = -1;
  /* Everything a test allocated must be back: usage 0 in every tier. */
  for (int t = 0; t < OKV_TIER_COUNT; ++t) {
    uint64_t cap = 0, used = 0;
    if (okv_status_consume(okv_hal_device_tier_usage(f->dev, (okv_tier_t)t, &cap, &used)) != OKV_STATUS_OK ||
        used != 0) {
      print_error("tier %s: %llu bytes still used after the test\n", okv_tier_name((okv_tier_t)t),
                  (unsigned long long)used);
      rc = -1;
    }
  }
  if (okv_status_consume(okv_hal_device_release(f->dev)) != OKV_STATUS_OK) rc = -1;
  test_free(f);
  return rc;
}

/* ---- Helpers ---- */

static okv_hal_buffer_t *buf_new(fixture_t *f, okv_tier_t tier, uint64_t bytes) {
  okv_hal_buffer_t *b = NULL;
  OKV_ASSERT_OK(okv_hal_buffer_alloc(f->dev, tier, bytes, &b));
  assert_non_null(b);
  return b;
}

static void buf_free(okv_hal_buffer_t *b) { OKV_ASSERT_OK(okv_hal_buffer_release(b)); }

static void fill_random(okv_test_rng_t *r, unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = (unsigned char)(okv_test_rng_u64(r) >> 56);
}

/* Writes random bytes to the whole buffer and returns a host copy (test_malloc). */
static unsigned char *buf_randomize(fixture_t *f, okv_hal_buffer_t *b) {
  size_t n = (size_t)okv_hal_buffer_size(b);
  unsigned char *h = test_malloc(n);
  fill_random(&f->rng, h, n);
  OKV_ASSERT_OK(okv_hal_buffer_write(b, 0, h, n));
  return h;
}

static void buf_expect(okv_hal_buffer_t *b, const unsigned char *expected) {
  size_t n = (size_t)okv_hal_buffer_size(b);
  unsigned char *h = test_malloc(n);
  OKV_ASSERT_OK(okv_hal_buffer_read(b, 0, h, n));
  size_t bad = n;
  for (size_t i = 0; i < n; ++i) {
    if (h[i] != expected[i]) {
      bad = i;
      break;
    }
  }
  test_free(h);
  if (bad != n) {
    print_error("byte %zu of a %s buffer of %zu bytes differs\n", bad, okv_tier_name(okv_hal_buffer_tier(b)), n);
    fail();
  }
}

/* A buffer and the host image of what it must hold. */
typedef struct mbuf_t {
  okv_hal_buffer_t *buf;
  unsigned char *host;
} mbuf_t;

/* A buffer of random bytes and their host image. */
static mbuf_t mbuf_new(fixture_t *f, okv_tier_t tier, uint64_t bytes) {
  mbuf_t m;
  m.buf = buf_new(f, tier, bytes);
  m.host = buf_randomize(f, m.buf);
  return m;
}

static void mbuf_expect(const mbuf_t *m) { buf_expect(m->buf, m->host); }

static void mbuf_free(mbuf_t *m) {
  test_free(m->host);
  buf_free(m->buf);
}

static bool tier_allocatable(const fixture_t *f, okv_tier_t t) { return (f->info.alloc_tiers & OKV_TIER_BIT(t)) != 0; }

/* ---- Device and capacity ---- */

static void test_device_info(void **state) {
  fixture_t *f = *state;
  assert_string_equal(f->info.backend, g_backend);
  assert_true(strlen(f->info.name) > 0);
  assert_true(tier_allocatable(f, OKV_TIER_DEVICE));
  assert_true(tier_allocatable(f, OKV_TIER_HOST));
  /* The four directions every backend must support. */
  assert_true(f->info.copy_mask[OKV_TIER_HOST] & OKV_TIER_BIT(OKV_TIER_DEVICE));
  assert_true(f->info.copy_mask[OKV_TIER_DEVICE] & OKV_TIER_BIT(OKV_TIER_HOST));
  assert_true(f->info.copy_mask[OKV_TIER_DEVICE] & OKV_TIER_BIT(OKV_TIER_DEVICE));
  assert_true(f->info.copy_mask[OKV_TIER_HOST] & OKV_TIER_BIT(OKV_TIER_HOST));
  /* SIMD level: a name on the cpu backend, empty where kernels run on a GPU. */
  assert_true(memchr(f->info.simd, '\0', sizeof(f->info.simd)) != NULL);
  if (!strcmp(g_backend, "cpu")) {
    assert_true(!strcmp(f->info.simd, "baseline") || !strcmp(f->info.simd, "avx2+fma") ||
                !strcmp(f->info.simd, "avx512"));
  } else {
    assert_string_equal(f->info.simd, "");
  }
  uint64_t cap = 0, used = 1;
  OKV_ASSERT_OK(okv_hal_device_tier_usage(f->dev, OKV_TIER_DEVICE, &cap, &used));
  assert_int_equal(cap, 256ull << 20);
  assert_int_equal(used, 0);
}

static void test_capacity_exhaustion(void **state) {
  fixture_t *f = *state;
  const uint64_t limit = (1ull << 20) + 4096;
  const okv_tier_t tiers[2] = {OKV_TIER_DEVICE, OKV_TIER_HOST};
  for (int i = 0; i < 2; ++i) {
    okv_tier_t t = tiers[i];
    okv_hal_device_params_t p;
    okv_hal_device_params_init(&p);
    p.capacity_bytes[t] = limit;
    okv_hal_device_t *dev = NULL;
    OKV_ASSERT_OK(okv_hal_device_create(g_backend, &p, &f->alloc, &dev));
    uint64_t cap = 0, used = 0;
    OKV_ASSERT_OK(okv_hal_device_tier_usage(dev, t, &cap, &used));
    assert_int_equal(cap, limit);

    okv_hal_buffer_t *a = NULL, *b = NULL, *c = NULL;
    OKV_ASSERT_OK(okv_hal_buffer_alloc(dev, t, 1ull << 20, &a));
    OKV_ASSERT_OK(okv_hal_buffer_alloc(dev, t, 4096, &b)); /* exact fit */
    OKV_ASSERT_OK(okv_hal_device_tier_usage(dev, t, &cap, &used));
    assert_int_equal(used, limit);

    okv_status_t s = okv_hal_buffer_alloc(dev, t, 1, &c); /* one byte more */
    assert_int_equal(okv_status_code(s), OKV_STATUS_OUT_OF_MEMORY);
    assert_non_null(strstr(okv_status_message(s), okv_tier_name(t)));
    okv_status_free(s);
    assert_null(c);
    OKV_ASSERT_OK(okv_hal_device_tier_usage(dev, t, &cap, &used));
    assert_int_equal(used, limit); /* nothing left allocated by the failure */

    /* Fresh buffers are zeroed. */
    unsigned char probe[4096];
    memset(probe, 0xff, sizeof(probe));
    OKV_ASSERT_OK(okv_hal_buffer_read(b, 0, probe, sizeof(probe)));
    for (size_t k = 0; k < sizeof(probe); ++k) assert_int_equal(probe[k], 0);
    OKV_ASSERT_OK(okv_hal_buffer_read(a, (1ull << 20) - 4096, probe, sizeof(probe)));
    for (size_t k = 0; k < sizeof(probe); ++k) assert_int_equal(probe[k], 0);

    OKV_ASSERT_OK(okv_hal_buffer_release(a));
    OKV_ASSERT_OK(okv_hal_device_tier_usage(dev, t, &cap, &used));
    assert_int_equal(used, 4096);
    OKV_ASSERT_OK(okv_hal_buffer_alloc(dev, t, 1ull << 20, &c)); /* room again */
    OKV_ASSERT_OK(okv_hal_buffer_release(c));
    OKV_ASSERT_OK(okv_hal_buffer_release(b));
    OKV_ASSERT_OK(okv_hal_device_tier_usage(dev, t, &cap, &used));
    assert_int_equal(used, 0);
    OKV_ASSERT_OK(okv_hal_device_release(dev));
  }
}

static void test_alloc_invalid(void **state) {
  fixture_t *f = *state;
  okv_hal_buffer_t *b = NULL;
  OKV_ASSERT_CODE(okv_hal_buffer_alloc(f->dev, OKV_TIER_DEVICE, 0, &b), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_hal_buffer_alloc(f->dev, OKV_TIER_COUNT, 64, &b), OKV_STATUS_INVALID_ARGUMENT);
  if (!tier_allocatable(f, OKV_TIER_REMOTE))
    OKV_ASSERT_CODE(okv_hal_buffer_alloc(f->dev, OKV_TIER_REMOTE, 64, &b), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_hal_buffer_alloc(f->dev, OKV_TIER_DEVICE, 64, NULL), OKV_STATUS_INVALID_ARGUMENT);
  /* Far over the limit, and a size whose arithmetic would overflow. */
  OKV_ASSERT_CODE(okv_hal_buffer_alloc(f->dev, OKV_TIER_DEVICE, 1ull << 40, &b), OKV_STATUS_OUT_OF_MEMORY);
  OKV_ASSERT_CODE(okv_hal_buffer_alloc(f->dev, OKV_TIER_DEVICE, UINT64_MAX, &b), OKV_STATUS_OUT_OF_MEMORY);
  assert_null(b);

  b = buf_new(f, OKV_TIER_HOST, 100);
  assert_int_equal(okv_hal_buffer_size(b), 100);
  assert_int_equal(okv_hal_buffer_tier(b), OKV_TIER_HOST);
  assert_non_null(okv_hal_buffer_host_ptr(b)); /* HOST buffers always have one */
  unsigned char x[8] = {0};
  OKV_ASSERT_CODE(okv_hal_buffer_write(b, 96, x, 8), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_hal_buffer_read(b, UINT64_MAX - 2, x, 8), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_hal_buffer_read(b, 101, x, 0), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_OK(okv_hal_buffer_write(b, 92, x, 8));
  OKV_ASSERT_OK(okv_hal_buffer_read(b, 100, x, 0));
  buf_free(b);
}

/* ---- Copies ---- */

static void test_copy_all_directions(void **state) {
  fixture_t *f = *state;
  const okv_tier_t tiers[2] = {OKV_TIER_DEVICE, OKV_TIER_HOST};
  for (int si = 0; si < 2; ++si) {
    for (int di = 0; di < 2; ++di) {
      okv_tier_t st = tiers[si], dt = tiers[di];
      for (int iter = 0; iter < 12; ++iter) {
        uint64_t src_bytes = 1 + okv_test_rng_below(&f->rng, 70000);
        uint64_t dst_bytes = 1 + okv_test_rng_below(&f->rng, 70000);
        mbuf_t src = mbuf_new(f, st, src_bytes), dst = mbuf_new(f, dt, dst_bytes);
        uint64_t max_len = src_bytes < dst_bytes ? src_bytes : dst_bytes;
        uint64_t len = 1 + okv_test_rng_below(&f->rng, (uint32_t)max_len);
        uint64_t so = okv_test_rng_below(&f->rng, (uint32_t)(src_bytes - len + 1));
        uint64_t d_o = okv_test_rng_below(&f->rng, (uint32_t)(dst_bytes - len + 1));
        OKV_ASSERT_OK(okv_hal_copy_async(f->stream, src.buf, so, dst.buf, d_o, len));
        OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
        memcpy(dst.host + d_o, src.host + so, len);
        mbuf_expect(&dst);
        mbuf_expect(&src); /* the source is untouched */
        mbuf_free(&src);
        mbuf_free(&dst);
      }
    }
  }
}

static void test_copy_ranges_validated(void **state) {
  fixture_t *f = *state;
  mbuf_t src = mbuf_new(f, OKV_TIER_HOST, 4096), dst = mbuf_new(f, OKV_TIER_DEVICE, 1024);
  okv_hal_buffer_t *s = src.buf, *d = dst.buf;
  OKV_ASSERT_CODE(okv_hal_copy_async(f->stream, s, 0, d, 0, 1025), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_hal_copy_async(f->stream, s, 4000, d, 0, 100), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_hal_copy_async(f->stream, s, UINT64_MAX, d, 0, 2), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_hal_copy_async(f->stream, s, 0, d, 1000, UINT64_MAX - 500), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_OK(okv_hal_copy_async(f->stream, s, 17, d, 3, 0));      /* no-op */
  OKV_ASSERT_OK(okv_hal_copy_async(f->stream, s, 4096, d, 1024, 0)); /* empty range at the end */
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
  mbuf_expect(&dst);
  mbuf_free(&src);
  mbuf_free(&dst);
}

static void test_copy_blocks_random(void **state) {
  fixture_t *f = *state;
  const uint64_t bb = 8192; /* one K+V block: 16 tokens x head_dim 128 x bf16 */
  const uint32_t n_src = 200, n_dst = 64;
  mbuf_t msrc = mbuf_new(f, OKV_TIER_HOST, n_src * bb), mdst = mbuf_new(f, OKV_TIER_DEVICE, n_dst * bb);
  okv_hal_buffer_t *src = msrc.buf, *dst = mdst.buf;
  const unsigned char *hs = msrc.host;
  unsigned char *hd = mdst.host;
  okv_block_copy_t pairs[64], keep[64];
  for (int round = 0; round < 6; ++round) {
    /* Distinct destination slots (a random permutation prefix), random source blocks. */
    uint32_t perm[64];
    for (uint32_t i = 0; i < n_dst; ++i) perm[i] = i;
    for (uint32_t i = n_dst - 1; i > 0; --i) {
      uint32_t j = okv_test_rng_below(&f->rng, i + 1), tmp = perm[i];
      perm[i] = perm[j];
      perm[j] = tmp;
    }
    size_t n = 1 + okv_test_rng_below(&f->rng, n_dst);
    for (size_t i = 0; i < n; ++i) {
      pairs[i].src_offset = (uint64_t)okv_test_rng_below(&f->rng, n_src) * bb;
      pairs[i].dst_offset = (uint64_t)perm[i] * bb;
    }
    memcpy(keep, pairs, n * sizeof(pairs[0]));
    OKV_ASSERT_OK(okv_hal_copy_blocks_async(f->stream, src, dst, bb, n, pairs));
    memset(pairs, 0xee, sizeof(pairs)); /* the pairs must have been copied at enqueue */
    OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
    for (size_t i = 0; i < n; ++i) memcpy(hd + keep[i].dst_offset, hs + keep[i].src_offset, bb);
    buf_expect(dst, hd);
  }

  /* Unaligned offsets and odd block sizes are plain byte ranges. */
  for (size_t i = 0; i < 5; ++i) {
    pairs[i].src_offset = 1 + 1000 * i;
    pairs[i].dst_offset = 3 + 777 * (4 - i);
    keep[i] = pairs[i];
  }
  OKV_ASSERT_OK(okv_hal_copy_blocks_async(f->stream, src, dst, 333, 5, pairs));
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
  for (size_t i = 0; i < 5; ++i) memcpy(hd + keep[i].dst_offset, hs + keep[i].src_offset, 333);
  buf_expect(dst, hd);

  /* Empty list: a no-op (NULL pairs accepted). */
  OKV_ASSERT_OK(okv_hal_copy_blocks_async(f->stream, src, dst, bb, 0, NULL));
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
  buf_expect(dst, hd);

  /* One out-of-range pair anywhere: INVALID_ARGUMENT and nothing copied. */
  for (size_t i = 0; i < 8; ++i) {
    pairs[i].src_offset = (uint64_t)i * bb;
    pairs[i].dst_offset = (uint64_t)(63 - i) * bb;
  }
  pairs[5].dst_offset = (uint64_t)n_dst * bb - bb + 1; /* one byte past the end */
  OKV_ASSERT_CODE(okv_hal_copy_blocks_async(f->stream, src, dst, bb, 8, pairs), OKV_STATUS_INVALID_ARGUMENT);
  pairs[5].dst_offset = 0;
  pairs[7].src_offset = UINT64_MAX - 10; /* overflow-safe check */
  OKV_ASSERT_CODE(okv_hal_copy_blocks_async(f->stream, src, dst, bb, 8, pairs), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_hal_copy_blocks_async(f->stream, src, dst, 0, 8, pairs), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_hal_copy_blocks_async(f->stream, src, dst, bb, 3, NULL), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
  buf_expect(dst, hd);
  mbuf_free(&msrc);
  mbuf_free(&mdst);
}

static void test_copy_blocks_large_batch(void **state) {
  fixture_t *f = *state;
  /* > 1 MiB in one batch (the CPU backend goes parallel here), every slot written. */
  const uint64_t bb = 16384;
  const uint32_t n = 256;
  mbuf_t src = mbuf_new(f, OKV_TIER_HOST, n * bb), dst = mbuf_new(f, OKV_TIER_DEVICE, n * bb);
  okv_block_copy_t *pairs = test_malloc(n * sizeof(*pairs));
  for (uint32_t i = 0; i < n; ++i) {
    pairs[i].src_offset = (uint64_t)i * bb;
    pairs[i].dst_offset = (uint64_t)((i * 37u) % n) * bb; /* 37 is coprime with 256: a permutation */
    memcpy(dst.host + pairs[i].dst_offset, src.host + pairs[i].src_offset, bb);
  }
  OKV_ASSERT_OK(okv_hal_copy_blocks_async(f->stream, src.buf, dst.buf, bb, n, pairs));
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
  mbuf_expect(&dst);
  test_free(pairs);
  mbuf_free(&src);
  mbuf_free(&dst);
}

/* ---- Ordering ---- */

static void test_stream_order(void **state) {
  fixture_t *f = *state;
  const uint64_t n = 1 << 20;
  okv_hal_buffer_t *a = buf_new(f, OKV_TIER_HOST, n), *b = buf_new(f, OKV_TIER_DEVICE, n),
                   *c = buf_new(f, OKV_TIER_DEVICE, n), *d = buf_new(f, OKV_TIER_HOST, n),
                   *x = buf_new(f, OKV_TIER_HOST, n);
  unsigned char *ha = buf_randomize(f, a), *hx = buf_randomize(f, x);
  /* A chain a -> b -> c -> d: each copy reads what the previous one wrote. */
  OKV_ASSERT_OK(okv_hal_copy_async(f->stream, a, 0, b, 0, n));
  OKV_ASSERT_OK(okv_hal_copy_async(f->stream, b, 0, c, 0, n));
  OKV_ASSERT_OK(okv_hal_copy_async(f->stream, c, 0, d, 0, n));
  /* Then a is overwritten from x: only after the chain has read it (write-after-read). */
  OKV_ASSERT_OK(okv_hal_copy_async(f->stream, x, 0, a, 0, n));
  /* And the tail of b is overwritten from the head of a (the new a). */
  OKV_ASSERT_OK(okv_hal_copy_async(f->stream, a, 0, b, n / 2, n / 2));
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
  buf_expect(d, ha);
  buf_expect(a, hx);
  unsigned char *hb = test_malloc(n);
  memcpy(hb, ha, n / 2);
  memcpy(hb + n / 2, hx, n / 2);
  buf_expect(b, hb);
  test_free(hb);
  test_free(ha);
  test_free(hx);
  buf_free(a);
  buf_free(b);
  buf_free(c);
  buf_free(d);
  buf_free(x);
}

/* A second stream of the fixture's device and an event, for the cross-stream cases. */
static void second_stream_and_event(fixture_t *f, okv_hal_stream_t **s2, okv_hal_event_t **ev) {
  OKV_ASSERT_OK(okv_hal_stream_create(f->dev, s2));
  OKV_ASSERT_OK(okv_hal_event_create(f->dev, ev));
}

static void test_cross_stream_event_wait(void **state) {
  fixture_t *f = *state;
  const uint64_t n = 8u << 20;
  okv_hal_stream_t *s2 = NULL;
  okv_hal_event_t *ev = NULL;
  second_stream_and_event(f, &s2, &ev);
  okv_hal_buffer_t *src = buf_new(f, OKV_TIER_HOST, n), *mid = buf_new(f, OKV_TIER_DEVICE, n),
                   *out = buf_new(f, OKV_TIER_HOST, n);
  for (int round = 0; round < 3; ++round) {
    unsigned char *hs = buf_randomize(f, src);
    /* Stream 1 produces mid (a large copy, so an unordered reader would see stale data). */
    OKV_ASSERT_OK(okv_hal_copy_async(f->stream, src, 0, mid, 0, n));
    OKV_ASSERT_OK(okv_hal_event_record(ev, f->stream));
    /* Stream 2 consumes it after waiting on the event. */
    OKV_ASSERT_OK(okv_hal_stream_wait_event(s2, ev));
    OKV_ASSERT_OK(okv_hal_copy_async(s2, mid, 0, out, 0, n));
    OKV_ASSERT_OK(okv_hal_stream_synchronize(s2));
    bool done = false;
    OKV_ASSERT_OK(okv_hal_event_query(ev, &done));
    assert_true(done); /* stream 2 finished, so the event it waited for has too */
    buf_expect(out, hs);
    test_free(hs);
  }
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
  buf_free(src);
  buf_free(mid);
  buf_free(out);
  OKV_ASSERT_OK(okv_hal_event_release(ev));
  OKV_ASSERT_OK(okv_hal_stream_release(s2));
}

/* Batched submission (okv_hal_stream_batch_begin / _end): results and order as without a batch, and every
 * wait inside a batch returns: a synchronize, an event wait, a polled event query, another stream waiting on
 * an event recorded in the batch. Batches nest; an end with no batch open is refused. */
static void test_stream_batches(void **state) {
  fixture_t *f = *state;
  const uint64_t n = 1u << 20;
  okv_hal_stream_t *s2 = NULL;
  okv_hal_event_t *ev = NULL;
  second_stream_and_event(f, &s2, &ev);
  okv_hal_buffer_t *a = buf_new(f, OKV_TIER_HOST, n), *b = buf_new(f, OKV_TIER_DEVICE, n),
                   *c = buf_new(f, OKV_TIER_HOST, n), *d = buf_new(f, OKV_TIER_HOST, n);
  assert_int_equal(okv_status_consume(okv_hal_stream_batch_end(f->stream)), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_OK(okv_hal_stream_batch_begin(f->stream));
  OKV_ASSERT_OK(okv_hal_stream_batch_begin(f->stream)); /* nested */
  for (int round = 0; round < 4; ++round) {
    unsigned char *ha = buf_randomize(f, a);
    OKV_ASSERT_OK(okv_hal_copy_async(f->stream, a, 0, b, 0, n));
    if (round == 0) { /* a synchronize */
      OKV_ASSERT_OK(okv_hal_copy_async(f->stream, b, 0, c, 0, n));
      OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
      buf_expect(c, ha);
    } else if (round == 1) { /* an event wait */
      OKV_ASSERT_OK(okv_hal_copy_async(f->stream, b, 0, c, 0, n));
      OKV_ASSERT_OK(okv_hal_event_record(ev, f->stream));
      OKV_ASSERT_OK(okv_hal_event_wait(ev));
      buf_expect(c, ha);
    } else if (round == 2) { /* a polled query (bounded: 10 s) */
      OKV_ASSERT_OK(okv_hal_copy_async(f->stream, b, 0, c, 0, n));
      OKV_ASSERT_OK(okv_hal_event_record(ev, f->stream));
      bool done = false;
      for (int i = 0; i < 10000 && !done; ++i) {
        OKV_ASSERT_OK(okv_hal_event_query(ev, &done));
        if (!done) usleep(1000);
      }
      assert_true(done);
      buf_expect(c, ha);
    } else { /* another stream (not batched) waits for an event of the batched one */
      OKV_ASSERT_OK(okv_hal_event_record(ev, f->stream));
      OKV_ASSERT_OK(okv_hal_stream_wait_event(s2, ev));
      OKV_ASSERT_OK(okv_hal_copy_async(s2, b, 0, d, 0, n));
      OKV_ASSERT_OK(okv_hal_stream_synchronize(s2));
      buf_expect(d, ha);
    }
    test_free(ha);
  }
  OKV_ASSERT_OK(okv_hal_stream_batch_end(f->stream));
  /* Still in the outer batch: work enqueued now runs once it ends, without a wait in between. */
  unsigned char *ha = buf_randomize(f, a);
  OKV_ASSERT_OK(okv_hal_copy_async(f->stream, a, 0, c, 0, n));
  OKV_ASSERT_OK(okv_hal_event_record(ev, f->stream));
  OKV_ASSERT_OK(okv_hal_stream_batch_end(f->stream));
  assert_int_equal(okv_status_consume(okv_hal_stream_batch_end(f->stream)), OKV_STATUS_INVALID_ARGUMENT);
  bool done = false;
  for (int i = 0; i < 10000 && !done; ++i) { /* bounded: 10 s */
    OKV_ASSERT_OK(okv_hal_event_query(ev, &done));
    if (!done) usleep(1000);
  }
  assert_true(done);
  buf_expect(c, ha);
  test_free(ha);
  buf_free(a);
  buf_free(b);
  buf_free(c);
  buf_free(d);
  OKV_ASSERT_OK(okv_hal_event_release(ev));
  OKV_ASSERT_OK(okv_hal_stream_release(s2));
}

static void test_event_states_and_elapsed(void **state) {
  fixture_t *f = *state;
  okv_hal_event_t *e[3] = {NULL, NULL, NULL};
  for (int i = 0; i < 3; ++i) OKV_ASSERT_OK(okv_hal_event_create(f->dev, &e[i]));
  /* Never recorded: done, and waiting returns at once. */
  bool done = false;
  OKV_ASSERT_OK(okv_hal_event_query(e[0], &done));
  assert_true(done);
  OKV_ASSERT_OK(okv_hal_event_wait(e[0]));
  double dt = -1.0;
  assert_int_not_equal(okv_status_consume(okv_hal_event_elapsed(e[0], e[1], &dt)), OKV_STATUS_OK);

  const uint64_t n = 4u << 20;
  okv_hal_buffer_t *a = buf_new(f, OKV_TIER_HOST, n), *b = buf_new(f, OKV_TIER_DEVICE, n);
  OKV_ASSERT_OK(okv_hal_event_record(e[0], f->stream));
  OKV_ASSERT_OK(okv_hal_copy_async(f->stream, a, 0, b, 0, n));
  OKV_ASSERT_OK(okv_hal_event_record(e[1], f->stream));
  OKV_ASSERT_OK(okv_hal_copy_async(f->stream, b, 0, a, 0, n));
  OKV_ASSERT_OK(okv_hal_event_record(e[2], f->stream));
  OKV_ASSERT_OK(okv_hal_event_wait(e[2]));
  for (int i = 0; i < 3; ++i) {
    OKV_ASSERT_OK(okv_hal_event_query(e[i], &done));
    assert_true(done); /* in-order: the earlier events completed first */
  }
  double t01 = 0, t12 = 0, t02 = 0;
  OKV_ASSERT_OK(okv_hal_event_elapsed(e[0], e[1], &t01));
  OKV_ASSERT_OK(okv_hal_event_elapsed(e[1], e[2], &t12));
  OKV_ASSERT_OK(okv_hal_event_elapsed(e[0], e[2], &t02));
  assert_true(t01 > 0.0);
  assert_true(t12 > 0.0);
  assert_true(t02 >= t01 && t02 >= t12);
  assert_true(t02 < 10.0); /* seconds, not milliseconds or nanoseconds */
  OKV_ASSERT_CODE(okv_hal_event_elapsed(e[0], e[1], NULL), OKV_STATUS_INVALID_ARGUMENT);

  /* Re-recording resets the event: it completes again after new work. */
  OKV_ASSERT_OK(okv_hal_event_record(e[0], f->stream));
  OKV_ASSERT_OK(okv_hal_event_wait(e[0]));
  OKV_ASSERT_OK(okv_hal_event_elapsed(e[2], e[0], &dt));
  assert_true(dt >= 0.0);

  buf_free(a);
  buf_free(b);
  for (int i = 0; i < 3; ++i) OKV_ASSERT_OK(okv_hal_event_release(e[i]));
}

/* ---- Lifetime ---- */

static void test_release_while_enqueued(void **state) {
  fixture_t *f = *state;
  const uint64_t n = 2u << 20;
  okv_hal_buffer_t *src = buf_new(f, OKV_TIER_HOST, n), *dst = buf_new(f, OKV_TIER_DEVICE, n);
  unsigned char *hs = buf_randomize(f, src);
  /* The stream retains the source until the copy has run. */
  OKV_ASSERT_OK(okv_hal_copy_async(f->stream, src, 0, dst, 0, n));
  buf_free(src);
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
  buf_expect(dst, hs);

  /* Releasing a stream waits for its queued work. */
  okv_hal_stream_t *s2 = NULL;
  OKV_ASSERT_OK(okv_hal_stream_create(f->dev, &s2));
  okv_hal_buffer_t *out = buf_new(f, OKV_TIER_HOST, n);
  OKV_ASSERT_OK(okv_hal_copy_async(s2, dst, 0, out, 0, n));
  OKV_ASSERT_OK(okv_hal_stream_release(s2));
  buf_expect(out, hs);
  test_free(hs);
  buf_free(dst);
  buf_free(out);
}

static void test_invalid_handles(void **state) {
  fixture_t *f = *state;
  okv_hal_buffer_t *b = buf_new(f, OKV_TIER_DEVICE, 256), *h = buf_new(f, OKV_TIER_HOST, 256);
  /* Retain/release count. */
  OKV_ASSERT_OK(okv_hal_buffer_retain(b));
  OKV_ASSERT_OK(okv_hal_buffer_release(b));
  OKV_ASSERT_OK(okv_hal_buffer_release(b));
  /* Double release and any use of a released handle. */
  OKV_ASSERT_CODE(okv_hal_buffer_release(b), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_hal_buffer_retain(b), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_hal_copy_async(f->stream, h, 0, b, 0, 16), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_hal_buffer_write(b, 0, "x", 1), OKV_STATUS_INVALID_ARGUMENT);
  assert_int_equal(okv_hal_buffer_size(b), 0);
  assert_null(okv_hal_buffer_host_ptr(b));

  /* NULL, a bogus pointer, and a handle of the wrong kind. */
  okv_hal_resource_t fake = {0};
  OKV_ASSERT_CODE(okv_hal_buffer_release(NULL), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_hal_stream_release((okv_hal_stream_t *)&fake), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_hal_event_release((okv_hal_event_t *)h), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_hal_stream_synchronize((okv_hal_stream_t *)h), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_hal_stream_batch_begin((okv_hal_stream_t *)h), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_hal_stream_batch_end(NULL), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_hal_device_release((okv_hal_device_t *)f->stream), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_hal_copy_async((okv_hal_stream_t *)h, h, 0, h, 0, 1), OKV_STATUS_INVALID_ARGUMENT);

  /* Streams, events and devices. */
  okv_hal_stream_t *s2 = NULL;
  okv_hal_event_t *ev = NULL;
  OKV_ASSERT_OK(okv_hal_stream_create(f->dev, &s2));
  OKV_ASSERT_OK(okv_hal_event_create(f->dev, &ev));
  OKV_ASSERT_OK(okv_hal_stream_release(s2));
  OKV_ASSERT_CODE(okv_hal_stream_release(s2), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_hal_event_record(ev, s2), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_OK(okv_hal_event_release(ev));
  OKV_ASSERT_CODE(okv_hal_event_release(ev), OKV_STATUS_INVALID_ARGUMENT);
  bool done = false;
  OKV_ASSERT_CODE(okv_hal_event_query(ev, &done), OKV_STATUS_INVALID_ARGUMENT);

  okv_hal_device_t *d2 = NULL;
  OKV_ASSERT_OK(okv_hal_device_create(g_backend, NULL, &f->alloc, &d2));
  OKV_ASSERT_OK(okv_hal_device_release(d2));
  OKV_ASSERT_CODE(okv_hal_device_release(d2), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_hal_stream_create(d2, &s2), OKV_STATUS_INVALID_ARGUMENT);

  /* Objects of another device are refused. */
  OKV_ASSERT_OK(okv_hal_device_create(g_backend, NULL, &f->alloc, &d2));
  okv_hal_buffer_t *other = NULL;
  OKV_ASSERT_OK(okv_hal_buffer_alloc(d2, OKV_TIER_HOST, 256, &other));
  OKV_ASSERT_CODE(okv_hal_copy_async(f->stream, h, 0, other, 0, 16), OKV_STATUS_INVALID_ARGUMENT);
  /* The device outlives its last handle release while objects still hold it. */
  OKV_ASSERT_OK(okv_hal_device_release(d2));
  OKV_ASSERT_OK(okv_hal_buffer_write(other, 0, "abc", 3));
  OKV_ASSERT_OK(okv_hal_buffer_release(other));
  buf_free(h);
}

/* ---- Fault injection ---- */

typedef struct fault_plan_t {
  int fail_alloc_left;
  int fail_copy_left;
  int copies_seen;
} fault_plan_t;

static bool hook_fail_alloc(void *user, okv_tier_t tier, uint64_t bytes) {
  fault_plan_t *p = user;
  (void)bytes;
  if (tier == OKV_TIER_DEVICE && p->fail_alloc_left > 0) {
    --p->fail_alloc_left;
    return true;
  }
  return false;
}

static bool hook_fail_copy(void *user, okv_tier_t src, okv_tier_t dst, size_t n_blocks, uint64_t bytes) {
  fault_plan_t *p = user;
  (void)src;
  (void)dst;
  (void)n_blocks;
  (void)bytes;
  ++p->copies_seen;
  if (p->fail_copy_left > 0) {
    --p->fail_copy_left;
    return true;
  }
  return false;
}

static void test_fault_hooks(void **state) {
  fixture_t *f = *state;
  fault_plan_t plan = {1, 0, 0};
  okv_hal_fault_hooks_t hooks = {&plan, hook_fail_alloc, hook_fail_copy, NULL};
  OKV_ASSERT_OK(okv_hal_device_set_fault_hooks(f->dev, &hooks));

  /* Failed allocation: OUT_OF_MEMORY naming the tier, nothing accounted. */
  okv_hal_buffer_t *b = NULL;
  okv_status_t s = okv_hal_buffer_alloc(f->dev, OKV_TIER_DEVICE, 4096, &b);
  assert_int_equal(okv_status_code(s), OKV_STATUS_OUT_OF_MEMORY);
  assert_non_null(strstr(okv_status_message(s), "device"));
  okv_status_free(s);
  assert_null(b);
  uint64_t cap = 0, used = 1;
  OKV_ASSERT_OK(okv_hal_device_tier_usage(f->dev, OKV_TIER_DEVICE, &cap, &used));
  assert_int_equal(used, 0);

  const uint64_t n = 64 * 1024;
  okv_hal_buffer_t *src = buf_new(f, OKV_TIER_HOST, n), *dst = buf_new(f, OKV_TIER_DEVICE, n);
  unsigned char *hs = buf_randomize(f, src), *hd = buf_randomize(f, dst);
  okv_hal_event_t *ev = NULL;
  OKV_ASSERT_OK(okv_hal_event_create(f->dev, &ev));

  /* A failed copy: the call succeeds, the next event reports COPY_FAILED, nothing was copied. */
  plan.fail_copy_left = 1;
  OKV_ASSERT_OK(okv_hal_copy_async(f->stream, src, 0, dst, 0, n));
  OKV_ASSERT_OK(okv_hal_event_record(ev, f->stream));
  OKV_ASSERT_CODE(okv_hal_event_wait(ev), OKV_STATUS_COPY_FAILED);
  bool done = false;
  OKV_ASSERT_CODE(okv_hal_event_query(ev, &done), OKV_STATUS_COPY_FAILED); /* stays reported on the event */
  assert_true(done);
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream)); /* already reported: cleared */
  buf_expect(dst, hd);

  /* The next event on the same stream is OK again, and copies work. */
  OKV_ASSERT_OK(okv_hal_copy_async(f->stream, src, 0, dst, 0, n));
  OKV_ASSERT_OK(okv_hal_event_record(ev, f->stream));
  OKV_ASSERT_OK(okv_hal_event_wait(ev));
  buf_expect(dst, hs);

  /* A failed batched copy, reported by synchronize when no event was recorded. */
  buf_free(dst);
  dst = buf_new(f, OKV_TIER_DEVICE, n);
  memset(hd, 0, n);
  okv_block_copy_t pairs[2] = {{0, 4096}, {8192, 0}};
  plan.fail_copy_left = 1;
  OKV_ASSERT_OK(okv_hal_copy_blocks_async(f->stream, src, dst, 1024, 2, pairs));
  OKV_ASSERT_CODE(okv_hal_stream_synchronize(f->stream), OKV_STATUS_COPY_FAILED);
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
  buf_expect(dst, hd);
  assert_int_equal(plan.copies_seen, 3);

  /* Hooks removed: nothing fails any more. */
  OKV_ASSERT_OK(okv_hal_device_set_fault_hooks(f->dev, NULL));
  plan.fail_alloc_left = 5;
  b = buf_new(f, OKV_TIER_DEVICE, 4096);
  buf_free(b);

  test_free(hs);
  test_free(hd);
  buf_free(src);
  buf_free(dst);
  OKV_ASSERT_OK(okv_hal_event_release(ev));
}

/* fail_op: every operation kind fails as hal_fault.h documents, only the
 * chosen kind is affected, and the device works again afterwards. */
typedef struct op_plan_t {
  int kind; /* okv_hal_op_t to fail, -1 none */
  int left; /* failures left */
  uint64_t seen[OKV_HAL_OP_COUNT];
} op_plan_t;

static bool hook_fail_op(void *user, okv_hal_op_t op, okv_tier_t src, okv_tier_t dst) {
  op_plan_t *p = user;
  (void)src;
  (void)dst;
  p->seen[op]++;
  if ((int)op == p->kind && p->left > 0) {
    p->left--;
    return true;
  }
  return false;
}

static void test_fault_op_hooks(void **state) {
  fixture_t *f = *state;
  op_plan_t plan = {-1, 0, {0}};
  okv_hal_fault_hooks_t hooks = {&plan, NULL, NULL, hook_fail_op};
  OKV_ASSERT_OK(okv_hal_device_set_fault_hooks(f->dev, &hooks));
  const uint64_t n = 4096;
  okv_hal_buffer_t *src = buf_new(f, OKV_TIER_HOST, n), *dst = buf_new(f, OKV_TIER_DEVICE, n);
  unsigned char *hs = buf_randomize(f, src), *hd = buf_randomize(f, dst);
  unsigned char *tmp = test_malloc(n);
  okv_hal_event_t *ev = NULL;
  OKV_ASSERT_OK(okv_hal_event_create(f->dev, &ev));
  assert_int_equal(plan.seen[OKV_HAL_OP_EVENT_CREATE], 1);

  /* Synchronous kinds: the call itself fails with the documented code. */
  okv_hal_buffer_t *b = NULL;
  plan.kind = OKV_HAL_OP_BUFFER_ALLOC, plan.left = 1;
  OKV_ASSERT_CODE(okv_hal_buffer_alloc(f->dev, OKV_TIER_DEVICE, 64, &b), OKV_STATUS_OUT_OF_MEMORY);
  assert_null(b);
  plan.kind = OKV_HAL_OP_BUFFER_WRITE, plan.left = 1;
  memset(tmp, 0x5A, n);
  OKV_ASSERT_CODE(okv_hal_buffer_write(dst, 0, tmp, n), OKV_STATUS_COPY_FAILED);
  buf_expect(dst, hd); /* nothing written */
  plan.kind = OKV_HAL_OP_BUFFER_READ, plan.left = 1;
  OKV_ASSERT_CODE(okv_hal_buffer_read(dst, 0, tmp, n), OKV_STATUS_COPY_FAILED);
  okv_hal_stream_t *st2 = NULL;
  plan.kind = OKV_HAL_OP_STREAM_CREATE, plan.left = 1;
  OKV_ASSERT_CODE(okv_hal_stream_create(f->dev, &st2), OKV_STATUS_UNAVAILABLE);
  assert_null(st2);
  okv_hal_event_t *ev2 = NULL;
  plan.kind = OKV_HAL_OP_EVENT_CREATE, plan.left = 1;
  OKV_ASSERT_CODE(okv_hal_event_create(f->dev, &ev2), OKV_STATUS_UNAVAILABLE);
  assert_null(ev2);
  plan.kind = OKV_HAL_OP_EVENT_RECORD, plan.left = 1;
  OKV_ASSERT_CODE(okv_hal_event_record(ev, f->stream), OKV_STATUS_INTERNAL);
  plan.kind = OKV_HAL_OP_EVENT_WAIT, plan.left = 1;
  OKV_ASSERT_OK(okv_hal_event_record(ev, f->stream));
  OKV_ASSERT_CODE(okv_hal_event_wait(ev), OKV_STATUS_INTERNAL);
  OKV_ASSERT_OK(okv_hal_event_wait(ev)); /* the event itself completed */
  plan.kind = OKV_HAL_OP_STREAM_SYNC, plan.left = 1;
  OKV_ASSERT_OK(okv_hal_copy_async(f->stream, src, 0, dst, 0, n));
  OKV_ASSERT_CODE(okv_hal_stream_synchronize(f->stream), OKV_STATUS_INTERNAL);
  buf_expect(dst, hs); /* the stream's work did run */

  /* Asynchronous kinds: the call returns OK, the stream reports the error, nothing ran. */
  unsigned char *zeros = test_calloc(1, n);
  OKV_ASSERT_OK(okv_hal_buffer_write(dst, 0, zeros, n));
  plan.kind = OKV_HAL_OP_COPY, plan.left = 1;
  OKV_ASSERT_OK(okv_hal_copy_async(f->stream, src, 0, dst, 0, n));
  OKV_ASSERT_CODE(okv_hal_stream_synchronize(f->stream), OKV_STATUS_COPY_FAILED);
  buf_expect(dst, zeros);
  plan.kind = OKV_HAL_OP_KERNEL, plan.left = 1;
  okv_hal_buffer_t *sums = buf_new(f, OKV_TIER_DEVICE, okv_summary_bytes(4));
  OKV_ASSERT_OK(okv_hal_buffer_write(sums, 0, zeros, okv_summary_bytes(4)));
  uint64_t idx = 0;
  float key[4] = {1, 2, 3, 4};
  uint8_t first = 1;
  OKV_ASSERT_OK(okv_hal_summary_append_async(f->stream, sums, 4, OKV_DTYPE_F32, 1, &idx, key, &first));
  OKV_ASSERT_CODE(okv_hal_stream_synchronize(f->stream), OKV_STATUS_INTERNAL);
  buf_expect(sums, zeros); /* the kernel did not run */
  /* Afterwards (no failure left) the same kernel runs. */
  OKV_ASSERT_OK(okv_hal_summary_append_async(f->stream, sums, 4, OKV_DTYPE_F32, 1, &idx, key, &first));
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
  float got[8];
  OKV_ASSERT_OK(okv_hal_buffer_read(sums, 0, got, sizeof got));
  for (int i = 0; i < 4; i++) assert_true(got[i] == key[i] && got[4 + i] == key[i]);
  for (int k = 0; k < OKV_HAL_OP_COUNT; k++) assert_true(plan.seen[k] > 0); /* every kind was observed */
  assert_string_equal(okv_hal_op_name(OKV_HAL_OP_KERNEL), "kernel");
  assert_string_equal(okv_hal_op_name((okv_hal_op_t)99), "unknown");

  OKV_ASSERT_OK(okv_hal_device_set_fault_hooks(f->dev, NULL));
  buf_free(sums);
  test_free(zeros);
  test_free(tmp);
  test_free(hs);
  test_free(hd);
  buf_free(src);
  buf_free(dst);
  OKV_ASSERT_OK(okv_hal_event_release(ev));
}

/* ---- Kernels through the stream (dispatch, pointer resolution, retention) ---- */

static okv_hal_buffer_t *buf_from(fixture_t *f, okv_tier_t tier, const void *data, uint64_t bytes) {
  okv_hal_buffer_t *b = buf_new(f, tier, bytes);
  OKV_ASSERT_OK(okv_hal_buffer_write(b, 0, data, bytes));
  return b;
}

static void test_kernels_dispatch(void **state) {
  fixture_t *f = *state;
  enum { D = 4, G = 2 };
  /* Slot 1 of a two-slot f32 pool holds a block with 2 valid tokens: Kt[D][16], then V[16][D]. */
  float pool[2][2 * 16 * D];
  memset(pool, 0, sizeof(pool));
  const float k[2][D] = {{1, -2, 0.5f, 3}, {-1, 0.25f, 2, -0.5f}};
  const float v[2][D] = {{0.1f, 0.2f, 0.3f, 0.4f}, {-1, 2, -3, 4}};
  for (int j = 0; j < 2; ++j) {
    for (int i = 0; i < D; ++i) {
      pool[1][i * 16 + j] = k[j][i];
      pool[1][16 * D + j * D + i] = v[j][i];
    }
  }
  const float q[G][D] = {{0.5f, 1, -1, 0.25f}, {-0.3f, 0.7f, 0.2f, 1.5f}};
  float qbuf[4 + G * D]; /* q at byte offset 16 */
  memset(qbuf, 0, sizeof(qbuf));
  memcpy(qbuf + 4, q, sizeof(q));
  okv_hal_buffer_t *kv = buf_from(f, OKV_TIER_DEVICE, pool, sizeof(pool));
  okv_hal_buffer_t *qb = buf_from(f, OKV_TIER_DEVICE, qbuf, sizeof(qbuf));
  okv_hal_buffer_t *out = buf_new(f, OKV_TIER_DEVICE, (8 + G * D) * sizeof(float));
  okv_hal_buffer_t *summ = buf_new(f, OKV_TIER_DEVICE, 3 * 2 * D * sizeof(float));
  okv_hal_buffer_t *scores = buf_new(f, OKV_TIER_DEVICE, 16 * sizeof(float));

  uint32_t ws_offsets[2] = {0, 1}, ws_slots[1] = {1};
  uint8_t ws_valid[1] = {2};
  okv_attention_desc_t ad = {0};
  ad.n_seqs = 1, ad.n_kv_heads = 1, ad.group_size = G, ad.head_dim = D, ad.n_query_tokens = 1;
  ad.kv_dtype = OKV_DTYPE_F32, ad.kv_pool = kv, ad.n_slots = 2;
  ad.ws_offsets = ws_offsets, ad.ws_slots = ws_slots, ad.ws_valid = ws_valid;
  ad.q = qb, ad.q_offset = 16, ad.out = out, ad.out_offset = 32;
  OKV_ASSERT_OK(okv_hal_attention_async(f->stream, &ad));
  ws_slots[0] = 0; /* host arrays are copied at enqueue */
  ws_valid[0] = 16;

  /* Summary 0 rebuilt from the pool; summary 2 built by two appends. */
  uint64_t block_index[1] = {1}, summary_index[1] = {0};
  uint8_t valid[1] = {2};
  okv_summary_desc_t sd = {.head_dim = D,
                           .kv_dtype = OKV_DTYPE_F32,
                           .kv = kv,
                           .summaries = summ,
                           .n_blocks = 1,
                           .block_index = block_index,
                           .valid = valid,
                           .summary_index = summary_index};
  OKV_ASSERT_OK(okv_hal_summarize_blocks_async(f->stream, &sd));
  const float ka[D] = {2, 2, -2, 0}, kb[D] = {1, 3, -4, 5};
  uint64_t app_index[1] = {2};
  uint8_t first_yes[1] = {1}, first_no[1] = {0};
  OKV_ASSERT_OK(okv_hal_summary_append_async(f->stream, summ, D, OKV_DTYPE_F32, 1, app_index, ka, first_yes));
  OKV_ASSERT_OK(okv_hal_summary_append_async(f->stream, summ, D, OKV_DTYPE_F32, 1, app_index, kb, first_no));

  /* Score the three summaries with query head 0's q into scores[1..4). */
  uint64_t seg_summary_first[1] = {0}, seg_score_first[1] = {1};
  uint32_t seg_n_blocks[1] = {3};
  okv_score_desc_t scd = {.n_seqs = 1,
                          .n_kv_heads = 1,
                          .group_size = 1,
                          .head_dim = D,
                          .n_query_tokens = 1,
                          .t_begin = 0,
                          .t_end = 1,
                          .q = qb,
                          .q_offset = 16,
                          .summaries = summ,
                          .seg_summary_first = seg_summary_first,
                          .seg_n_blocks = seg_n_blocks,
                          .scores = scores,
                          .seg_score_first = seg_score_first};
  OKV_ASSERT_OK(okv_hal_score_blocks_async(f->stream, &scd));
  /* The caller may drop its references right away: the stream holds them. */
  buf_free(kv);
  buf_free(qb);
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));

  /* Attention: double-precision reference. */
  float got[8 + G * D];
  OKV_ASSERT_OK(okv_hal_buffer_read(out, 0, got, sizeof(got)));
  for (int g = 0; g < G; ++g) {
    double l[2], m, z = 0;
    for (int j = 0; j < 2; ++j) {
      l[j] = 0;
      for (int i = 0; i < D; ++i) l[j] += (double)q[g][i] * k[j][i];
      l[j] /= sqrt((double)D);
    }
    m = l[0] > l[1] ? l[0] : l[1];
    for (int j = 0; j < 2; ++j) z += exp(l[j] - m);
    for (int i = 0; i < D; ++i) {
      double o = 0;
      for (int j = 0; j < 2; ++j) o += exp(l[j] - m) / z * v[j][i];
      assert_true(fabs(got[8 + g * D + i] - o) < 1e-5);
    }
  }
  for (int i = 0; i < 8; ++i) assert_true(got[i] == 0.0f); /* nothing before out_offset */

  /* Summaries: exact min/max. */
  float sm[3][2][D];
  OKV_ASSERT_OK(okv_hal_buffer_read(summ, 0, sm, sizeof(sm)));
  for (int i = 0; i < D; ++i) {
    assert_true(sm[0][0][i] == fminf(k[0][i], k[1][i]));
    assert_true(sm[0][1][i] == fmaxf(k[0][i], k[1][i]));
    assert_true(sm[2][0][i] == fminf(ka[i], kb[i]));
    assert_true(sm[2][1][i] == fmaxf(ka[i], kb[i]));
  }
  /* Scores: Quest bound sum_i max(q_i min_i, q_i max_i) / sqrt(D). */
  float sc[16];
  OKV_ASSERT_OK(okv_hal_buffer_read(scores, 0, sc, sizeof(sc)));
  assert_true(sc[0] == 0.0f && sc[4] == 0.0f);
  for (int b = 0; b < 3; ++b) {
    double e = 0;
    for (int i = 0; i < D; ++i) {
      double lo = (double)q[0][i] * sm[b][0][i], hi = (double)q[0][i] * sm[b][1][i];
      e += lo > hi ? lo : hi;
    }
    e /= sqrt((double)D);
    assert_true(fabs(sc[1 + b] - e) < 1e-5);
  }

  /* Top-K with an exclude set, ties to the lower index, outputs at offsets. */
  const float tk_scores[16] = {0, 0, 0.5f, 0.9f, 0.1f, 0.7f, 0.7f, -1, 0, 0, 1.0f, 3.0f, 0, 0, 0, 0};
  OKV_ASSERT_OK(okv_hal_buffer_write(scores, 0, tk_scores, sizeof(tk_scores)));
  okv_hal_buffer_t *idx = buf_new(f, OKV_TIER_DEVICE, 8 + 2 * 3 * sizeof(uint32_t));
  okv_hal_buffer_t *cnt = buf_new(f, OKV_TIER_HOST, 4 + 2 * sizeof(uint32_t));
  uint64_t tk_first[2] = {2, 10};
  uint32_t tk_n[2] = {6, 2}, excl_offsets[3] = {0, 1, 1}, excl_blocks[1] = {1};
  okv_topk_desc_t td = {.n_segments = 2,
                        .k = 3,
                        .scores = scores,
                        .seg_score_first = tk_first,
                        .seg_n = tk_n,
                        .excl_offsets = excl_offsets,
                        .excl_blocks = excl_blocks,
                        .out_indices = idx,
                        .out_offset = 8,
                        .out_counts = cnt,
                        .counts_offset = 4};
  OKV_ASSERT_OK(okv_hal_topk_async(f->stream, &td));
  excl_blocks[0] = 3;
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
  uint32_t gi[2 + 6], gc[3];
  OKV_ASSERT_OK(okv_hal_buffer_read(idx, 0, gi, sizeof(gi)));
  OKV_ASSERT_OK(okv_hal_buffer_read(cnt, 0, gc, sizeof(gc)));
  const uint32_t want_i[6] = {3, 4, 0, 1, 0, UINT32_MAX};
  for (int i = 0; i < 6; ++i) assert_int_equal(gi[2 + i], want_i[i]);
  assert_int_equal(gc[1], 3);
  assert_int_equal(gc[2], 2);

  buf_free(out);
  buf_free(summ);
  buf_free(scores);
  buf_free(idx);
  buf_free(cnt);
}

/* Token writes (okv_hal_kv_write_tokens_async): each entry's K and V, converted to the KV dtype (round to
 * nearest even), land at Kt[d][pos] and V[pos][d] of its slot, byte-exact; every other byte keeps its value;
 * host arrays are copied at enqueue; invalid descriptors are refused with nothing written. */
static void test_kv_write(void **state) {
  fixture_t *f = *state;
  enum { D = 12, N_SLOTS = 3, N = 4 };
  const okv_dtype_t dtypes[3] = {OKV_DTYPE_F32, OKV_DTYPE_F16, OKV_DTYPE_BF16};
  for (int di = 0; di < 3; ++di) {
    const okv_dtype_t dt = dtypes[di];
    const size_t es = okv_dtype_size(dt), bb = (size_t)okv_block_bytes(dt, D);
    mbuf_t kv = mbuf_new(f, OKV_TIER_DEVICE, N_SLOTS * bb);
    uint64_t slot[N] = {2, 0, 2, 1};
    uint8_t pos[N] = {0, 15, 7, 3};
    float keys[N][D], values[N][D];
    for (int i = 0; i < N; ++i)
      for (int d = 0; d < D; ++d) {
        keys[i][d] = (float)okv_test_rng_normal(&f->rng) * 3.0f;
        values[i][d] = (float)okv_test_rng_normal(&f->rng) * 3.0f;
      }
    keys[1][2] = 1.0f + 0x1p-8f; /* a halfway case for bf16 (ties to even) */
    okv_kv_write_desc_t wd = {.kv = kv.buf,
                              .head_dim = D,
                              .kv_dtype = dt,
                              .n = N,
                              .slot_index = slot,
                              .pos = pos,
                              .keys = &keys[0][0],
                              .values = &values[0][0]};
    OKV_ASSERT_OK(okv_hal_kv_write_tokens_async(f->stream, &wd));
    float want_k[N][D], want_v[N][D];
    memcpy(want_k, keys, sizeof keys);
    memcpy(want_v, values, sizeof values);
    keys[0][0] = 1e6f; /* copied at enqueue: changes after the call are not seen */
    pos[0] = 9;
    OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
    for (int i = 0; i < N; ++i) {
      const uint8_t p = i == 0 ? 0 : pos[i];
      for (int d = 0; d < D; ++d) {
        for (int kvi = 0; kvi < 2; ++kvi) {
          const float x = kvi == 0 ? want_k[i][d] : want_v[i][d];
          const size_t at = kvi == 0 ? (size_t)d * 16u + p : 16u * D + (size_t)p * D + d;
          unsigned char *dst = kv.host + slot[i] * bb + at * es;
          if (dt == OKV_DTYPE_F32) {
            memcpy(dst, &x, 4);
          } else {
            const uint16_t h = dt == OKV_DTYPE_F16 ? okv_f32_to_f16(x) : okv_f32_to_bf16(x);
            memcpy(dst, &h, 2);
          }
        }
      }
    }
    mbuf_expect(&kv);
    if (dt == OKV_DTYPE_BF16) { /* 1 + 2^-8 is halfway between two bf16 values: ties to the even one, 1.0 */
      uint16_t h;
      OKV_ASSERT_OK(okv_hal_buffer_read(kv.buf, 0 * bb + (2u * 16u + 15u) * 2u, &h, 2));
      assert_int_equal(h, 0x3F80);
    }
    /* Refused, nothing written. */
    okv_kv_write_desc_t bad = wd;
    pos[0] = 16;
    OKV_ASSERT_CODE(okv_hal_kv_write_tokens_async(f->stream, &bad), OKV_STATUS_INVALID_ARGUMENT);
    pos[0] = 0;
    slot[3] = N_SLOTS;
    OKV_ASSERT_CODE(okv_hal_kv_write_tokens_async(f->stream, &bad), OKV_STATUS_INVALID_ARGUMENT);
    slot[3] = 1;
    bad.values = NULL;
    OKV_ASSERT_CODE(okv_hal_kv_write_tokens_async(f->stream, &bad), OKV_STATUS_INVALID_ARGUMENT);
    bad = wd;
    bad.head_dim = 0;
    OKV_ASSERT_CODE(okv_hal_kv_write_tokens_async(f->stream, &bad), OKV_STATUS_INVALID_ARGUMENT);
    bad = wd;
    bad.kv_dtype = OKV_DTYPE_COUNT;
    OKV_ASSERT_CODE(okv_hal_kv_write_tokens_async(f->stream, &bad), OKV_STATUS_INVALID_ARGUMENT);
    OKV_ASSERT_CODE(okv_hal_kv_write_tokens_async(f->stream, NULL), OKV_STATUS_INVALID_ARGUMENT);
    bad = wd;
    bad.n = 0; /* a no-op */
    bad.keys = NULL;
    OKV_ASSERT_OK(okv_hal_kv_write_tokens_async(f->stream, &bad));
    OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
    mbuf_expect(&kv);
    mbuf_free(&kv);
  }
}

/* ---- Concurrency: handles, accounting and streams used from several threads ---- */

typedef struct worker_arg_t {
  okv_hal_device_t *dev;
  uint64_t seed;
  int failures;
} worker_arg_t;

static void *hammer(void *p) {
  worker_arg_t *w = p;
  okv_test_rng_t r;
  okv_test_rng_seed(&r, w->seed);
  okv_hal_stream_t *s = NULL;
  if (okv_status_consume(okv_hal_stream_create(w->dev, &s)) != OKV_STATUS_OK) {
    ++w->failures;
    return NULL;
  }
  unsigned char pattern[512], back[512];
  for (int it = 0; it < 60; ++it) {
    uint64_t n = 64 + okv_test_rng_below(&r, 448);
    okv_hal_buffer_t *a = NULL, *b = NULL;
    if (okv_status_consume(okv_hal_buffer_alloc(w->dev, OKV_TIER_HOST, n, &a)) != OKV_STATUS_OK ||
        okv_status_consume(okv_hal_buffer_alloc(w->dev, OKV_TIER_DEVICE, n, &b)) != OKV_STATUS_OK) {
      ++w->failures;
      break;
    }
    for (uint64_t i = 0; i < n; ++i) pattern[i] = (unsigned char)(okv_test_rng_u64(&r) >> 56);
    okv_status_free(okv_hal_buffer_write(a, 0, pattern, n));
    okv_status_free(okv_hal_buffer_retain(b));
    okv_status_free(okv_hal_copy_async(s, a, 0, b, 0, n));
    okv_status_free(okv_hal_buffer_release(a)); /* the stream still holds it */
    if (okv_status_consume(okv_hal_stream_synchronize(s)) != OKV_STATUS_OK) ++w->failures;
    okv_status_free(okv_hal_buffer_read(b, 0, back, n));
    if (memcmp(back, pattern, n) != 0) ++w->failures;
    if (okv_status_consume(okv_hal_buffer_release(b)) != OKV_STATUS_OK) ++w->failures;
    if (okv_status_consume(okv_hal_buffer_release(b)) != OKV_STATUS_OK) ++w->failures;
    if (okv_status_consume(okv_hal_buffer_release(b)) != OKV_STATUS_INVALID_ARGUMENT) ++w->failures;
    if (okv_status_consume(okv_hal_buffer_release(a)) != OKV_STATUS_INVALID_ARGUMENT) ++w->failures;
  }
  if (okv_status_consume(okv_hal_stream_release(s)) != OKV_STATUS_OK) ++w->failures;
  return NULL;
}

static void test_concurrent_use(void **state) {
  fixture_t *f = *state;
  (void)f;
  /* CMocka's test allocator is not thread-safe: this device uses the system one. */
  okv_hal_device_t *dev = NULL;
  OKV_ASSERT_OK(okv_hal_device_create(g_backend, NULL, NULL, &dev));
  enum { N = 4 };
  pthread_t th[N];
  worker_arg_t args[N];
  for (int i = 0; i < N; ++i) {
    args[i] = (worker_arg_t){dev, 1000 + (uint64_t)i, 0};
    assert_int_equal(pthread_create(&th[i], NULL, hammer, &args[i]), 0);
  }
  for (int i = 0; i < N; ++i) {
    pthread_join(th[i], NULL);
    assert_int_equal(args[i].failures, 0);
  }
  for (int t = 0; t < OKV_TIER_COUNT; ++t) {
    uint64_t cap = 0, used = 1;
    OKV_ASSERT_OK(okv_hal_device_tier_usage(dev, (okv_tier_t)t, &cap, &used));
    assert_int_equal(used, 0);
  }
  OKV_ASSERT_OK(okv_hal_device_release(dev));
}

int main(int argc, char **argv) {
  g_backend = okv_test_backend_or_skip(argc, argv);
  const struct CMUnitTest tests[] = {
      OKV_FIXTURE_TEST(test_device_info),
      OKV_FIXTURE_TEST(test_capacity_exhaustion),
      OKV_FIXTURE_TEST(test_alloc_invalid),
      OKV_FIXTURE_TEST(test_copy_all_directions),
      OKV_FIXTURE_TEST(test_copy_ranges_validated),
      OKV_FIXTURE_TEST(test_copy_blocks_random),
      OKV_FIXTURE_TEST(test_copy_blocks_large_batch),
      OKV_FIXTURE_TEST(test_stream_order),
      OKV_FIXTURE_TEST(test_cross_stream_event_wait),
      OKV_FIXTURE_TEST(test_stream_batches),
      OKV_FIXTURE_TEST(test_event_states_and_elapsed),
      OKV_FIXTURE_TEST(test_release_while_enqueued),
      OKV_FIXTURE_TEST(test_invalid_handles),
      OKV_FIXTURE_TEST(test_fault_hooks),
      OKV_FIXTURE_TEST(test_fault_op_hooks),
      OKV_FIXTURE_TEST(test_kernels_dispatch),
      OKV_FIXTURE_TEST(test_kv_write),
      OKV_FIXTURE_TEST(test_concurrent_use),
  };
  return cmocka_run_group_tests_name("hal_conformance", tests, NULL, NULL);
}
