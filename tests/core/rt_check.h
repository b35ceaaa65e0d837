/* Test support for tests/core: checks on the runtime's internal state that
 * several suites share. Header-only; reads core/runtime_internal.h. */
#ifndef OASISKV_TESTS_CORE_RT_CHECK_H
#define OASISKV_TESTS_CORE_RT_CHECK_H

#include "tests/core/rt_ref.h"

#include "core/runtime_internal.h"

/* Every committed token of sequence `seq_id` (history h), exactly, in the HOST tier (f32 K/V). */
static inline void rt_check_host_tokens(const okv_runtime_t *rt, uint32_t seq_id, const rt_hist_t *h) {
  uint32_t hd = h->head_dim;
  for (uint32_t l = 0; l < h->n_layers; l++)
    for (uint32_t kvh = 0; kvh < h->n_kv_heads; kvh++)
      for (uint32_t t = 0; t < h->n_tokens[l]; t++) {
        uint32_t hb = okv_runtime_debug_host_block(rt, seq_id, l, kvh, t / 16);
        assert_true(hb != UINT32_MAX);
        const float *blk = (const float *)(rt->host.ptr + (uint64_t)hb * rt->block_bytes);
        const float *k = h->k + rt_hist_off(h, l, t) + kvh * hd;
        const float *v = h->v + rt_hist_off(h, l, t) + kvh * hd;
        for (uint32_t e = 0; e < hd; e++) {
          assert_true(blk[e * 16 + t % 16] == k[e]);
          assert_true(blk[16 * hd + (t % 16) * hd + e] == v[e]);
        }
      }
}

#endif
