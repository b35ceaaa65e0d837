/* The HOST-tier store's writes (core/host_store.h): the block-wise bulk write
 * of a prefill (okv_host_store_write_block) must leave the same bytes as token
 * by token writes (okv_host_store_write_token) in every KV dtype, for full and
 * partial blocks, with special values (NaN, infinities, -0, subnormals, bf16 /
 * f16 halfway cases), and both must hold the documented layout and rounding.
 * Runs on the cpu device (the store's HOST buffer only). */
#include "tests/common/test_common.h"

#include <math.h>
#include <string.h>

#include "core/host_store.h"

enum { HD = 20, H = 3, N_TOK = 37 }; /* 2 full blocks + a partial one of 5 tokens */

static void store_open(okv_hal_device_t *dev, const okv_allocator_t *a, okv_dtype_t dt, okv_host_store_t *s,
                       const unsigned char *garbage) {
  OKV_ASSERT_OK(okv_host_store_init(s, dev, a, 2, 2, dt, HD)); /* 4 blocks */
  memcpy(s->ptr, garbage, 4u * s->block_bytes);
}

static void test_bulk_equals_tokens(void **state) {
  (void)state;
  okv_allocator_t a = okv_test_allocator();
  okv_hal_device_t *dev = NULL;
  OKV_ASSERT_OK(okv_hal_device_create("cpu", NULL, &a, &dev));
  okv_test_rng_t rng;
  okv_test_rng_seed(&rng, 12);
  /* Prefill layout [n_tokens][H][HD]: head 1's rows are H * HD floats apart. */
  static float k[N_TOK][H][HD], v[N_TOK][H][HD];
  for (int t = 0; t < N_TOK; t++)
    for (int h = 0; h < H; h++)
      for (int d = 0; d < HD; d++) {
        k[t][h][d] = 4.0f * okv_test_rng_normal(&rng);
        v[t][h][d] = 4.0f * okv_test_rng_normal(&rng);
      }
  const float specials[] = {NAN,     -NAN,           INFINITY,        -INFINITY, -0.0f, 1e-40f,
                            -3e-39f, 1.0f + 0x1p-8f, 1.0f + 0x1p-11f, 65520.0f,  1e30f, 0x1.0101p0f};
  for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) {
    k[(i * 5) % N_TOK][1][(i * 7) % HD] = specials[i];
    v[(i * 3 + 1) % N_TOK][1][(i * 11) % HD] = specials[i];
  }
  const okv_dtype_t dts[3] = {OKV_DTYPE_F32, OKV_DTYPE_F16, OKV_DTYPE_BF16};
  for (int di = 0; di < 3; di++) {
    okv_dtype_t dt = dts[di];
    size_t es = okv_dtype_size(dt), bb = (size_t)okv_block_bytes(dt, HD);
    unsigned char *garbage = test_malloc(4u * bb);
    for (size_t i = 0; i < 4u * bb; i++) garbage[i] = (unsigned char)(okv_test_rng_u64(&rng) >> 56);
    okv_host_store_t tok, bulk;
    store_open(dev, &a, dt, &tok, garbage);
    store_open(dev, &a, dt, &bulk, garbage);
    const uint64_t host_block[3] = {3, 0, 2}; /* logical block b -> host block, out of order */
    for (uint32_t t = 0; t < N_TOK; t++)
      okv_host_store_write_token(&tok, host_block[t / 16u], t % 16u, k[t][1], v[t][1]);
    for (uint32_t b = 0; b < 3; b++) {
      uint32_t n = N_TOK - 16u * b < 16u ? N_TOK - 16u * b : 16u;
      okv_host_store_write_block(&bulk, host_block[b], n, k[16u * b][1], v[16u * b][1], (size_t)H * HD);
    }
    assert_memory_equal(tok.ptr, bulk.ptr, 4u * bb);
    /* The layout and rounding themselves: Kt[d][t], V[t][d], converted like okv_f32_to_*; untouched bytes
     * (block 1, positions 5..15 of the partial block) keep their value. */
    for (uint32_t t = 0; t < N_TOK; t++) {
      const unsigned char *blk = bulk.ptr + host_block[t / 16u] * bb;
      uint32_t p = t % 16u;
      for (uint32_t d = 0; d < HD; d++)
        for (int kvi = 0; kvi < 2; kvi++) {
          float x = kvi == 0 ? k[t][1][d] : v[t][1][d];
          size_t at = kvi == 0 ? (size_t)d * 16u + p : 16u * HD + (size_t)p * HD + d;
          unsigned char want[4];
          if (dt == OKV_DTYPE_F32) {
            memcpy(want, &x, 4);
          } else {
            uint16_t h = dt == OKV_DTYPE_F16 ? okv_f32_to_f16(x) : okv_f32_to_bf16(x);
            memcpy(want, &h, 2);
          }
          assert_memory_equal(blk + at * es, want, es);
        }
    }
    assert_memory_equal(bulk.ptr + 1u * bb, garbage + 1u * bb, bb);
    const unsigned char *last = bulk.ptr + 2u * bb; /* 5 tokens */
    for (uint32_t d = 0; d < HD; d++)
      assert_memory_equal(last + ((size_t)d * 16u + 5u) * es, garbage + 2u * bb + ((size_t)d * 16u + 5u) * es,
                          11u * es);
    assert_memory_equal(last + (16u * HD + 5u * HD) * es, garbage + 2u * bb + (16u * HD + 5u * HD) * es, 11u * HD * es);
    okv_host_store_free(&tok, &a);
    okv_host_store_free(&bulk, &a);
    test_free(garbage);
  }
  OKV_ASSERT_OK(okv_hal_device_release(dev));
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_bulk_equals_tokens)};
  return cmocka_run_group_tests_name("core_host_store", tests, NULL, NULL);
}
