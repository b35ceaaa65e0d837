#include <stdio.h>
#include <stdlib.h>

#include "oasiskv/oasiskv.h"

int main(int argc, char **argv) {
  okv_hal_device_t *dev = NULL;
  okv_runtime_t *rt = NULL;
  okv_status_t st = okv_hal_device_create(argc > 1 ? argv[1] : "cpu", NULL, NULL, &dev);
  okv_runtime_config_t cfg;
  okv_runtime_config_init(&cfg); /* mode OASIS, K = 128, fetch ratio 0.05 */
  cfg.n_layers = 2, cfg.n_q_heads = 8, cfg.n_kv_heads = 2, cfg.head_dim = 64;
  cfg.budget_blocks = 8, cfg.max_seqs = 2, cfg.max_context_tokens = 4096;
  if (st == OKV_OK) st = okv_runtime_create(dev, &cfg, NULL, &rt);
  uint32_t n_prefill = 1000, seq = 0, T = 2; /* T: the real token + one draft token */
  size_t kv = (size_t)cfg.n_kv_heads * cfg.head_dim, qo = T * (size_t)cfg.n_q_heads * cfg.head_dim;
  float *pk = calloc(cfg.n_layers * n_prefill * kv, 4), *pv = calloc(cfg.n_layers * n_prefill * kv, 4);
  for (size_t i = 0; i < cfg.n_layers * n_prefill * kv; i++) pk[i] = pv[i] = (float)(i % 7) - 3.0f;
  okv_prefill_t prefill = {n_prefill, pk, pv}; /* K/V of the prompt, [layer][token][kv_head][dim] */
  if (st == OKV_OK) st = okv_runtime_seq_add(rt, &prefill, &seq);
  float *k = calloc(kv, 4), *v = calloc(kv, 4), *draft_kv = calloc(2 * kv, 4);
  float *q = calloc(qo, 4), *out = calloc(qo, 4);
  okv_step_stats_t stats = {0};
  for (int step = 0; step < 8 && st == OKV_OK; step++) {
    st = okv_runtime_step_begin(rt, 1, &seq, T);
    for (uint32_t l = 0; l < cfg.n_layers && st == OKV_OK; l++) {
      q[step % qo] = 1.0f; /* the model writes q, k, v and draft_kv of layer l here */
      st = okv_runtime_step_layer(rt, l, k, v, q, draft_kv, out); /* out feeds the rest of layer l */
    }
    if (st == OKV_OK) st = okv_runtime_step_end(rt, &stats);
  }
  printf("%s; last step: %llu hits, %llu blocks moved\n", okv_status_message(st),
         (unsigned long long)stats.hits, (unsigned long long)stats.blocks_moved);
  int rc = okv_status_consume(st) == OKV_STATUS_OK ? 0 : 1;
  free(pk), free(pv), free(k), free(v), free(draft_kv), free(q), free(out);
  okv_runtime_destroy(rt);
  if (dev) okv_status_free(okv_hal_device_release(dev));
  return rc;
}
