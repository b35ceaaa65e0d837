/* GPU kernel launches, shared by the CUDA and HIP backends: packing the
 * descriptors' host arrays into the stream's staging area, uploading them,
 * filling the argument structs of kernels/okv_gpu_args.h and launching the
 * kernels of kernels/okv_kernels.cu (attention + block mass, block summaries,
 * summary append and reduce, block scoring, top-K); the gather kernel of
 * okv_gpu_copy_blocks goes through the same helpers.
 * Owns: the argument structs it fills (on the stack, passed by value) and the
 * launch geometry (grid, threads, dynamic shared memory).
 * May touch: a stream's staging and records through gpu_stream.c (under the
 * stream mutex, taken by okv_gpu_stream_enter), the vendor launch and
 * upload calls, the device's kernel functions and smem limit (read). */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "gpu_internal.h"
#include "okv_gpu_args.h"

/* The host side of the layout pins of kernels/okv_gpu_args.h (the kernels
 * check the same table in kernels/okv_kernels.cu). */
OKV_GPU_ARGS_PIN_LAYOUT()

/* ---- Packing, upload and launch ---- */

uint64_t okv_gpu_pack(okv_gpu_pack_t *p, const void *src, size_t bytes) {
  const size_t off = p->used;
  if (bytes > 0 && src) memcpy((unsigned char *)p->st->host + off, src, bytes);
  p->used += okv_gpu_align(bytes);
  return p->st->dptr + off;
}

okv_status_t okv_gpu_pack_upload(okv_gpu_stream_t *s, okv_gpu_pack_t *p, size_t upload_bytes) {
  if (upload_bytes == 0) return OKV_OK;
  return okv_gpu_stream_dev(s)->vendor->copy_htod_async(p->st->dptr, p->st->host, upload_bytes, s->vstream);
}

okv_status_t okv_gpu_op_begin(okv_gpu_stream_t *s, size_t staging_bytes, okv_gpu_pack_t *p) {
  OKV_RETURN_IF_ERROR(okv_gpu_stream_enter(s));
  okv_status_t st = okv_gpu_staging_get(s, staging_bytes, &p->st);
  if (st != OKV_OK) pthread_mutex_unlock(&s->mutex);
  return st;
}

okv_status_t okv_gpu_op_end(okv_gpu_stream_t *s, okv_status_t st, okv_gpu_staging_t *staging,
                            okv_hal_buffer_t *const *bufs, uint32_t n_bufs) {
  if (st == OKV_OK) {
    st = okv_gpu_stream_retire(s, staging, bufs, n_bufs);
  } else if (staging) {
    okv_status_t r = okv_gpu_stream_retire(s, staging, NULL, 0);
    okv_status_free(r);
  }
  pthread_mutex_unlock(&s->mutex);
  return st;
}

okv_status_t okv_gpu_launch(okv_gpu_stream_t *s, okv_gpu_fn_t fn, uint32_t gx, uint32_t gy, uint32_t threads,
                            uint32_t smem, void *args) {
  okv_gpu_device_t *dev = okv_gpu_stream_dev(s);
  const uint32_t grid[3] = {gx, gy, 1};
  okv_status_t st = dev->vendor->launch(dev->fn[fn], grid, threads, smem, s->vstream, args);
  return okv_status_annotate(st, "launching %s", okv_gpu_kernel_names[fn]);
}

/* ---- Kernels ---- */

okv_status_t okv_gpu_attention(okv_hal_stream_t *stream, const okv_attention_desc_t *d) {
  okv_gpu_stream_t *s = (okv_gpu_stream_t *)stream;
  okv_gpu_device_t *dev = okv_gpu_stream_dev(s);
  const uint32_t D = d->head_dim, G = d->group_size, T = d->n_query_tokens;
  const uint64_t U = (uint64_t)d->n_seqs * d->n_kv_heads;
  const uint64_t n_rows = (uint64_t)T * G;
  if (U == 0 || n_rows == 0 || D == 0) return OKV_OK;
  if (U > 0x7fffffffu)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "n_seqs*n_kv_heads: %llu exceeds the GPU grid",
                           (unsigned long long)U);
  /* Shared memory in floats (layout in kernels/okv_gpu_args.h): the K, V tile
   * plus R query rows. */
  const uint64_t budget_f = dev->smem_max_bytes / 4u;
  const uint64_t fixed_f = OKV_GPU_ATTENTION_SMEM_TILE_FLOATS(D);
  const uint64_t row_f = OKV_GPU_ATTENTION_SMEM_ROW_FLOATS(D);
  if (budget_f <= fixed_f + row_f)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "head_dim: %u needs more shared memory than the %u bytes a %s thread block has", D,
                           dev->smem_max_bytes, dev->vendor->name);
  uint64_t r_max = (budget_f - fixed_f) / row_f;
  if (r_max > OKV_GPU_ATTENTION_MAX_ROWS) r_max = OKV_GPU_ATTENTION_MAX_ROWS;
  if (r_max > n_rows) r_max = n_rows;
  const uint64_t n_chunks = (n_rows + r_max - 1) / r_max;
  const uint64_t R = (n_rows + n_chunks - 1) / n_chunks;
  if (n_chunks > 65535u)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "group_size: %u query heads per KV head exceed the GPU grid",
                           G);
  const uint32_t smem = (uint32_t)(4u * (R * row_f + fixed_f));

  /* Table mode: the kernel reads each head's working set from its table; only the two per-sequence
   * arrays travel with the launch. */
  const bool tables = d->tables != NULL;
  const size_t n_ws = tables ? 0 : d->ws_offsets[U];
  const size_t off_bytes = tables ? 0 : (size_t)(U + 1) * 4u, slot_bytes = n_ws * 4u, valid_bytes = n_ws;
  const size_t seq_bytes = tables ? (size_t)d->n_seqs * 4u : 0;
  const bool mass = d->block_mass != NULL && n_ws > 0;
  const size_t lse_bytes = mass ? (size_t)d->n_seqs * T * d->n_kv_heads * G * 4u : 0;
  const size_t upload =
      okv_gpu_align(off_bytes) + okv_gpu_align(slot_bytes) + okv_gpu_align(valid_bytes) + 2u * okv_gpu_align(seq_bytes);

  okv_gpu_pack_t p = {0};
  OKV_RETURN_IF_ERROR(okv_gpu_op_begin(s, upload + okv_gpu_align(lse_bytes), &p));
  okv_gpu_attention_args_t a = {0};
  a.kv_pool = okv_gpu_addr(d->kv_pool, 0);
  a.block_bytes = okv_block_bytes(d->kv_dtype, D);
  if (tables) {
    a.table_slots = d->table_slots;
    a.tables = okv_gpu_addr(d->tables, d->tables_offset);
    a.slot_map = okv_gpu_addr(d->slot_map, d->slot_map_offset);
    a.table_index = okv_gpu_pack(&p, d->table_index, seq_bytes);
    a.seq_tokens = okv_gpu_pack(&p, d->seq_tokens, seq_bytes);
    a.table_bytes = okv_slot_table_bytes(d->table_slots, d->table_words);
  } else {
    a.ws_offsets = okv_gpu_pack(&p, d->ws_offsets, off_bytes);
    a.ws_slots = okv_gpu_pack(&p, d->ws_slots, slot_bytes);
    a.ws_valid = okv_gpu_pack(&p, d->ws_valid, valid_bytes);
  }
  a.n_slots = d->n_slots;
  a.lse = mass ? okv_gpu_pack(&p, NULL, lse_bytes) : 0;
  a.q = okv_gpu_addr(d->q, d->q_offset);
  a.inflight_kv = d->n_inflight > 0 ? okv_gpu_addr(d->inflight_kv, d->inflight_offset) : 0;
  a.out = okv_gpu_addr(d->out, d->out_offset);
  a.block_mass = mass ? okv_gpu_addr(d->block_mass, d->mass_offset) : 0;
  a.n_seqs = d->n_seqs;
  a.n_kv_heads = d->n_kv_heads;
  a.group_size = G;
  a.head_dim = D;
  a.n_query_tokens = T;
  a.kv_dtype = (uint32_t)d->kv_dtype;
  a.n_inflight = d->n_inflight;
  a.rows_per_cta = (uint32_t)R;
  a.scale = 1.0f / sqrtf((float)D);
  okv_status_t st = okv_gpu_pack_upload(s, &p, upload);
  if (st == OKV_OK)
    st = okv_gpu_launch(s, OKV_GPU_FN_ATTENTION, (uint32_t)U, (uint32_t)n_chunks, OKV_GPU_ATTENTION_THREADS, smem, &a);
  if (st == OKV_OK && mass)
    st = okv_gpu_launch(s, OKV_GPU_FN_ATTENTION_MASS, (uint32_t)U, T, OKV_GPU_MASS_THREADS, 0, &a);
  okv_hal_buffer_t *bufs[7] = {d->kv_pool,
                               d->q,
                               d->n_inflight > 0 ? d->inflight_kv : NULL,
                               d->out,
                               mass ? d->block_mass : NULL,
                               tables ? d->tables : NULL,
                               tables ? d->slot_map : NULL};
  return okv_gpu_op_end(s, st, p.st, bufs, 7);
}

okv_status_t okv_gpu_summarize_blocks(okv_hal_stream_t *stream, const okv_summary_desc_t *d) {
  okv_gpu_stream_t *s = (okv_gpu_stream_t *)stream;
  if (d->n_blocks == 0 || d->head_dim == 0) return OKV_OK;
  const size_t n = d->n_blocks;
  const size_t upload = okv_gpu_align(n * 8u) * 2u + okv_gpu_align(n);
  okv_gpu_pack_t p = {0};
  OKV_RETURN_IF_ERROR(okv_gpu_op_begin(s, upload, &p));
  okv_gpu_summary_args_t a = {0};
  a.kv = okv_gpu_addr(d->kv, 0);
  a.block_bytes = okv_block_bytes(d->kv_dtype, d->head_dim);
  a.summaries = okv_gpu_addr(d->summaries, 0);
  a.block_index = okv_gpu_pack(&p, d->block_index, n * 8u);
  a.summary_index = okv_gpu_pack(&p, d->summary_index, n * 8u);
  a.valid = okv_gpu_pack(&p, d->valid, n);
  a.n_blocks = d->n_blocks;
  a.head_dim = d->head_dim;
  a.kv_dtype = (uint32_t)d->kv_dtype;
  a.summary_dtype = (uint32_t)d->summary_dtype;
  okv_status_t st = okv_gpu_pack_upload(s, &p, upload);
  if (st == OKV_OK)
    st = okv_gpu_launch(s, OKV_GPU_FN_SUMMARIZE, okv_gpu_grid_cap(n), 1, OKV_GPU_SUMMARY_THREADS, 0, &a);
  okv_hal_buffer_t *bufs[2] = {d->kv, d->summaries};
  return okv_gpu_op_end(s, st, p.st, bufs, 2);
}

/* True when some summary index appears twice (then entries apply in order). */
static bool gpu_has_duplicates(const okv_allocator_t *al, const uint64_t *idx, uint32_t n, bool *out_oom) {
  *out_oom = false;
  if (n < 2) return false;
  size_t cap = 16;
  while (cap < (size_t)n * 2) cap *= 2;
  uint64_t *table = okv_malloc(al, cap * sizeof(uint64_t));
  if (!table) {
    *out_oom = true;
    return true;
  }
  memset(table, 0xff, cap * sizeof(uint64_t)); /* UINT64_MAX = empty */
  bool dup = false;
  for (uint32_t i = 0; i < n && !dup; ++i) {
    const uint64_t key = idx[i];
    if (key == UINT64_MAX) { /* cannot be stored: treat as possibly repeated */
      dup = true;
      break;
    }
    size_t h = (size_t)((key * 0x9e3779b97f4a7c15ull) >> 17) & (cap - 1);
    while (table[h] != UINT64_MAX && table[h] != key) h = (h + 1) & (cap - 1);
    if (table[h] == key) dup = true;
    table[h] = key;
  }
  okv_free(al, table);
  return dup;
}

okv_status_t okv_gpu_summary_append_ex(okv_hal_stream_t *stream, const okv_summary_append_desc_t *d) {
  okv_gpu_stream_t *s = (okv_gpu_stream_t *)stream;
  const uint32_t n = d->n, head_dim = d->head_dim;
  if (n == 0 || head_dim == 0) return OKV_OK;
  const okv_allocator_t *al = &stream->device->allocator;
  bool oom = false;
  const bool dup = gpu_has_duplicates(al, d->summary_index, n, &oom);
  (void)oom; /* without the table the in-order launch is used: correct, slower */
  const size_t key_bytes = (size_t)n * head_dim * 4u;
  const size_t upload = okv_gpu_align(n * 8u) + okv_gpu_align(key_bytes) + okv_gpu_align(n);
  okv_gpu_pack_t p = {0};
  OKV_RETURN_IF_ERROR(okv_gpu_op_begin(s, upload, &p));
  okv_gpu_append_args_t a = {0};
  a.summaries = okv_gpu_addr(d->summaries, 0);
  a.summary_index = okv_gpu_pack(&p, d->summary_index, n * 8u);
  /* Keys rounded through the KV dtype, so the summary bounds the stored key. */
  float *kr = (float *)((unsigned char *)p.st->host + p.used);
  a.keys = okv_gpu_pack(&p, NULL, key_bytes);
  const size_t n_el = (size_t)n * head_dim;
  for (size_t i = 0; i < n_el; ++i) {
    float k = d->keys[i];
    if (d->kv_dtype == OKV_DTYPE_F16) {
      k = okv_f16_to_f32(okv_f32_to_f16(k));
    } else if (d->kv_dtype == OKV_DTYPE_BF16) {
      k = okv_bf16_to_f32(okv_f32_to_bf16(k));
    }
    kr[i] = k;
  }
  a.first = okv_gpu_pack(&p, d->first, n);
  a.n = n;
  a.head_dim = head_dim;
  a.summary_dtype = (uint32_t)d->summary_dtype;
  okv_status_t st = okv_gpu_pack_upload(s, &p, upload);
  if (st == OKV_OK)
    st =
        okv_gpu_launch(s, OKV_GPU_FN_SUMMARY_APPEND, dup ? 1u : okv_gpu_grid_cap(n), 1, OKV_GPU_SUMMARY_THREADS, 0, &a);
  okv_hal_buffer_t *bufs[1] = {d->summaries};
  return okv_gpu_op_end(s, st, p.st, bufs, 1);
}

okv_status_t okv_gpu_summary_append(okv_hal_stream_t *stream, okv_hal_buffer_t *summaries, uint32_t head_dim,
                                    okv_dtype_t kv_dtype, uint32_t n, const uint64_t *summary_index, const float *keys,
                                    const uint8_t *first) {
  const okv_summary_append_desc_t d = {.summaries = summaries,
                                       .head_dim = head_dim,
                                       .kv_dtype = kv_dtype,
                                       .n = n,
                                       .summary_index = summary_index,
                                       .keys = keys,
                                       .first = first,
                                       .summary_dtype = OKV_DTYPE_F32};
  return okv_gpu_summary_append_ex(stream, &d);
}

/* Token writes: the host converts keys and values to the KV dtype into the staging area (n x 2 x head_dim
 * elements, K then V per entry), uploads them with the slot indices and positions, and the kernel places
 * each element in its slot. */
okv_status_t okv_gpu_kv_write(okv_hal_stream_t *stream, const okv_kv_write_desc_t *d) {
  okv_gpu_stream_t *s = (okv_gpu_stream_t *)stream;
  const uint32_t n = d->n, D = d->head_dim;
  if (n == 0 || D == 0) return OKV_OK;
  const size_t eb = okv_dtype_size(d->kv_dtype), elem_bytes = (size_t)n * 2u * D * eb;
  const size_t upload = okv_gpu_align((size_t)n * 8u) + okv_gpu_align(n) + okv_gpu_align(elem_bytes);
  okv_gpu_pack_t p = {0};
  OKV_RETURN_IF_ERROR(okv_gpu_op_begin(s, upload, &p));
  okv_gpu_kv_write_args_t a = {0};
  a.kv = okv_gpu_addr(d->kv, 0);
  a.block_bytes = okv_block_bytes(d->kv_dtype, D);
  a.slot_index = okv_gpu_pack(&p, d->slot_index, (size_t)n * 8u);
  a.pos = okv_gpu_pack(&p, d->pos, n);
  unsigned char *el = (unsigned char *)p.st->host + p.used;
  a.elems = okv_gpu_pack(&p, NULL, elem_bytes);
  for (uint32_t i = 0; i < n; ++i) {
    for (uint32_t e = 0; e < 2u * D; ++e) {
      const float x = e < D ? d->keys[(size_t)i * D + e] : d->values[(size_t)i * D + (e - D)];
      unsigned char *at = el + ((size_t)i * 2u * D + e) * eb;
      if (d->kv_dtype == OKV_DTYPE_F32) {
        memcpy(at, &x, 4u);
      } else {
        const uint16_t h = d->kv_dtype == OKV_DTYPE_F16 ? okv_f32_to_f16(x) : okv_f32_to_bf16(x);
        memcpy(at, &h, 2u);
      }
    }
  }
  a.n = n;
  a.head_dim = D;
  a.elem_bytes = (uint32_t)eb;
  okv_status_t st = okv_gpu_pack_upload(s, &p, upload);
  if (st == OKV_OK) st = okv_gpu_launch(s, OKV_GPU_FN_KV_WRITE, okv_gpu_grid_cap(n), 1, OKV_GPU_SUMMARY_THREADS, 0, &a);
  okv_hal_buffer_t *bufs[1] = {d->kv};
  return okv_gpu_op_end(s, st, p.st, bufs, 1);
}

/* Thread blocks of a slot-table kernel over n heads (one thread per head, grid-stride beyond the cap). */
static uint32_t select_grid(uint32_t n) {
  return okv_gpu_grid_cap(((uint64_t)n + OKV_GPU_SELECT_THREADS - 1u) / OKV_GPU_SELECT_THREADS);
}

/* Selection on slot tables: the per-head active block and cap are uploaded; one thread per head. */
okv_status_t okv_gpu_select(okv_hal_stream_t *stream, const okv_select_desc_t *d) {
  okv_gpu_stream_t *s = (okv_gpu_stream_t *)stream;
  const uint32_t n = d->n_heads;
  const size_t upload = okv_gpu_align((size_t)n * 8u);
  okv_gpu_pack_t p = {0};
  OKV_RETURN_IF_ERROR(okv_gpu_op_begin(s, upload, &p));
  okv_gpu_select_args_t a = {0};
  a.tables = okv_gpu_addr(d->table, d->table_offset);
  a.table_bytes = okv_slot_table_bytes(d->n_slots, d->bitmap_words);
  a.predicted = okv_gpu_addr(d->predicted, d->predicted_offset);
  a.counts = okv_gpu_addr(d->predicted_counts, d->counts_offset);
  uint32_t *params = (uint32_t *)((unsigned char *)p.st->host + p.used);
  a.head_params = okv_gpu_pack(&p, NULL, (size_t)n * 8u);
  for (uint32_t h = 0; h < n; h++) {
    params[2u * h] = d->active_block[h];
    params[2u * h + 1u] = d->cap[h];
  }
  a.plan = okv_gpu_addr(d->plan, d->plan_offset);
  a.result = okv_gpu_addr(d->result, d->result_offset);
  a.n_heads = n;
  a.n_slots = d->n_slots;
  a.bitmap_words = d->bitmap_words;
  a.budget_blocks = d->budget_blocks;
  a.step = d->step;
  a.predicted_stride = d->predicted_stride;
  a.plan_stride = d->plan_stride;
  okv_status_t st = okv_gpu_pack_upload(s, &p, upload);
  if (st == OKV_OK) st = okv_gpu_launch(s, OKV_GPU_FN_SELECT, select_grid(n), 1, OKV_GPU_SELECT_THREADS, 0, &a);
  okv_hal_buffer_t *bufs[5] = {d->table, d->predicted, d->predicted_counts, d->plan, d->result};
  return okv_gpu_op_end(s, st, p.st, bufs, 5);
}

okv_status_t okv_gpu_slot_commit(okv_hal_stream_t *stream, const okv_slot_commit_desc_t *d) {
  okv_gpu_stream_t *s = (okv_gpu_stream_t *)stream;
  const uint32_t n = d->n_heads;
  const size_t upload = okv_gpu_align(n);
  okv_gpu_pack_t p = {0};
  OKV_RETURN_IF_ERROR(okv_gpu_op_begin(s, upload, &p));
  okv_gpu_slot_commit_args_t a = {0};
  a.tables = okv_gpu_addr(d->table, d->table_offset);
  a.table_bytes = okv_slot_table_bytes(d->n_slots, d->bitmap_words);
  a.plan = okv_gpu_addr(d->plan, d->plan_offset);
  a.result = okv_gpu_addr(d->result, d->result_offset);
  a.landed = okv_gpu_pack(&p, d->landed, n);
  a.n_heads = n;
  a.n_slots = d->n_slots;
  a.bitmap_words = d->bitmap_words;
  a.plan_stride = d->plan_stride;
  okv_status_t st = okv_gpu_pack_upload(s, &p, upload);
  if (st == OKV_OK) st = okv_gpu_launch(s, OKV_GPU_FN_SLOT_COMMIT, select_grid(n), 1, OKV_GPU_SELECT_THREADS, 0, &a);
  okv_hal_buffer_t *bufs[3] = {d->table, d->plan, d->result};
  return okv_gpu_op_end(s, st, p.st, bufs, 3);
}

okv_status_t okv_gpu_summary_reduce(okv_hal_stream_t *stream, const okv_summary_reduce_desc_t *d) {
  okv_gpu_stream_t *s = (okv_gpu_stream_t *)stream;
  const size_t n = d->n;
  if (n == 0 || d->head_dim == 0) return OKV_OK;
  const size_t upload = okv_gpu_align(n * 8u) * 2u + okv_gpu_align(n * 4u);
  okv_gpu_pack_t p = {0};
  OKV_RETURN_IF_ERROR(okv_gpu_op_begin(s, upload, &p));
  okv_gpu_reduce_args_t a = {0};
  a.src = okv_gpu_addr(d->src, 0);
  a.dst = okv_gpu_addr(d->dst, 0);
  a.src_first = okv_gpu_pack(&p, d->src_first, n * 8u);
  a.dst_index = okv_gpu_pack(&p, d->dst_index, n * 8u);
  a.src_n = okv_gpu_pack(&p, d->src_n, n * 4u);
  a.n = d->n;
  a.head_dim = d->head_dim;
  a.src_dtype = (uint32_t)d->src_dtype;
  a.dst_dtype = (uint32_t)d->dst_dtype;
  okv_status_t st = okv_gpu_pack_upload(s, &p, upload);
  if (st == OKV_OK)
    st = okv_gpu_launch(s, OKV_GPU_FN_SUMMARY_REDUCE, okv_gpu_grid_cap(n), 1, OKV_GPU_SUMMARY_THREADS, 0, &a);
  okv_hal_buffer_t *bufs[2] = {d->src, d->dst};
  return okv_gpu_op_end(s, st, p.st, bufs, 2);
}

okv_status_t okv_gpu_score_blocks(okv_hal_stream_t *stream, const okv_score_desc_t *d) {
  okv_gpu_stream_t *s = (okv_gpu_stream_t *)stream;
  const uint64_t U = (uint64_t)d->n_seqs * d->n_kv_heads;
  if (U == 0 || d->head_dim == 0 || d->group_size == 0 || d->t_end <= d->t_begin) return OKV_OK;
  /* Jobs (grid.x): the segments, or the ranges. */
  const bool ranges = d->n_ranges > 0, list = d->list_blocks != NULL;
  const uint64_t J = ranges ? d->n_ranges : U;
  const uint64_t n_runs = list ? d->seg_run_offsets[U] : 0;
  const uint32_t *job_n = ranges ? d->range_n_blocks : d->seg_n_blocks;
  uint32_t max_n = 0;
  for (uint64_t j = 0; j < J; ++j) max_n = job_n[j] > max_n ? job_n[j] : max_n;
  if (max_n == 0) return OKV_OK;
  const uint64_t gy = (max_n + OKV_GPU_SCORE_BLOCKS_PER_CTA - 1) / OKV_GPU_SCORE_BLOCKS_PER_CTA;
  if (J > 0x7fffffffu || gy > 65535u)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "%s: %u blocks per %s exceed the GPU grid",
                           ranges ? "range_n_blocks" : "seg_n_blocks", max_n, ranges ? "range" : "segment");
  const size_t upload =
      okv_gpu_align(J * 8u) * 2u + okv_gpu_align(J * 4u) * (ranges ? 2u : 1u) +
      (list ? okv_gpu_align((U + 1u) * 4u) + okv_gpu_align(n_runs * 4u) * 2u + okv_gpu_align(n_runs * 8u) : 0u);
  okv_gpu_pack_t p = {0};
  OKV_RETURN_IF_ERROR(okv_gpu_op_begin(s, upload, &p));
  okv_gpu_score_args_t a = {0};
  a.q = okv_gpu_addr(d->q, d->q_offset);
  a.summaries = okv_gpu_addr(d->summaries, 0);
  a.scores = okv_gpu_addr(d->scores, 0);
  if (ranges) {
    a.range_summary_first = okv_gpu_pack(&p, d->range_summary_first, J * 8u);
    a.range_score_first = okv_gpu_pack(&p, d->range_score_first, J * 8u);
    a.range_n_blocks = okv_gpu_pack(&p, d->range_n_blocks, J * 4u);
    a.range_seg = okv_gpu_pack(&p, d->range_seg, J * 4u);
    a.n_ranges = d->n_ranges;
  } else {
    /* List mode reads no seg_summary_first (the runs map each listed block to its summary). */
    a.seg_summary_first = okv_gpu_pack(&p, list ? d->seg_score_first : d->seg_summary_first, U * 8u);
    a.seg_score_first = okv_gpu_pack(&p, d->seg_score_first, U * 8u);
    a.seg_n_blocks = okv_gpu_pack(&p, d->seg_n_blocks, U * 4u);
  }
  if (list) {
    a.list_blocks = okv_gpu_addr(d->list_blocks, d->list_offset);
    a.list_stride = d->list_stride;
    a.seg_run_offsets = okv_gpu_pack(&p, d->seg_run_offsets, (U + 1u) * 4u);
    if (n_runs > 0) {
      a.run_first_block = okv_gpu_pack(&p, d->run_first_block, n_runs * 4u);
      a.run_n_blocks = okv_gpu_pack(&p, d->run_n_blocks, n_runs * 4u);
      a.run_summary_first = okv_gpu_pack(&p, d->run_summary_first, n_runs * 8u);
    }
  }
  a.n_seqs = d->n_seqs;
  a.n_kv_heads = d->n_kv_heads;
  a.group_size = d->group_size;
  a.head_dim = d->head_dim;
  a.n_query_tokens = d->n_query_tokens;
  a.t_begin = d->t_begin;
  a.t_end = d->t_end;
  a.scale = 1.0f / sqrtf((float)d->head_dim);
  a.summary_dtype = (uint32_t)d->summary_dtype;
  okv_status_t st = okv_gpu_pack_upload(s, &p, upload);
  if (st == OKV_OK) st = okv_gpu_launch(s, OKV_GPU_FN_SCORE, (uint32_t)J, (uint32_t)gy, OKV_GPU_SCORE_THREADS, 0, &a);
  okv_hal_buffer_t *bufs[4] = {d->q, d->summaries, d->scores, d->list_blocks};
  return okv_gpu_op_end(s, st, p.st, bufs, list ? 4 : 3);
}

okv_status_t okv_gpu_topk(okv_hal_stream_t *stream, const okv_topk_desc_t *d) {
  okv_gpu_stream_t *s = (okv_gpu_stream_t *)stream;
  okv_gpu_device_t *dev = okv_gpu_stream_dev(s);
  const uint32_t U = d->n_segments;
  if (U == 0 || d->k == 0) return OKV_OK;
  uint32_t max_n = 0;
  for (uint32_t u = 0; u < U; ++u) max_n = d->seg_n[u] > max_n ? d->seg_n[u] : max_n;
  const uint64_t bitmap_bytes = 4ull * ((max_n + 31ull) / 32ull);
  const uint64_t smem_cap =
      dev->smem_max_bytes > OKV_GPU_TOPK_STATIC_SMEM_BYTES ? dev->smem_max_bytes - OKV_GPU_TOPK_STATIC_SMEM_BYTES : 0;
  if (bitmap_bytes > smem_cap || U > 0x7fffffffu)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "seg_n: %u blocks in one segment exceed the GPU top-K limit",
                           max_n);
  const size_t n_excl = d->excl_offsets ? d->excl_offsets[U] : 0;
  const size_t n_map = (size_t)okv_topk_index_map_len(d);
  const size_t upload = okv_gpu_align((size_t)U * 8u) + okv_gpu_align((size_t)U * 4u) +
                        (d->excl_offsets ? okv_gpu_align(((size_t)U + 1) * 4u) + okv_gpu_align(n_excl * 4u) : 0) +
                        okv_gpu_align(n_map * 4u);
  okv_gpu_pack_t p = {0};
  OKV_RETURN_IF_ERROR(okv_gpu_op_begin(s, upload, &p));
  okv_gpu_topk_args_t a = {0};
  a.scores = okv_gpu_addr(d->scores, 0);
  a.seg_score_first = okv_gpu_pack(&p, d->seg_score_first, (size_t)U * 8u);
  a.seg_n = okv_gpu_pack(&p, d->seg_n, (size_t)U * 4u);
  if (d->excl_offsets) {
    a.excl_offsets = okv_gpu_pack(&p, d->excl_offsets, ((size_t)U + 1) * 4u);
    a.excl_blocks = okv_gpu_pack(&p, d->excl_blocks, n_excl * 4u);
  }
  if (n_map > 0) a.index_map = okv_gpu_pack(&p, d->index_map, n_map * 4u);
  if (d->index_map_buffer != NULL) a.index_map = okv_gpu_addr(d->index_map_buffer, d->index_map_offset);
  a.ascending = d->ascending ? 1u : 0u;
  a.out_indices = okv_gpu_addr(d->out_indices, d->out_offset);
  a.out_counts = d->out_counts ? okv_gpu_addr(d->out_counts, d->counts_offset) : 0;
  a.n_segments = U;
  a.k = d->k;
  okv_status_t st = okv_gpu_pack_upload(s, &p, upload);
  if (st == OKV_OK) st = okv_gpu_launch(s, OKV_GPU_FN_TOPK, U, 1, OKV_GPU_TOPK_THREADS, (uint32_t)bitmap_bytes, &a);
  okv_hal_buffer_t *bufs[4] = {d->scores, d->out_indices, d->out_counts, d->index_map_buffer};
  return okv_gpu_op_end(s, st, p.st, bufs, 4);
}
