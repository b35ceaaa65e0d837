/* GPU memory, shared by the CUDA and HIP backends: buffers in the DEVICE tier
 * (device memory, zeroed) and the HOST tier (pinned, device-mapped host
 * memory), blocking reads and writes, and the two copies: okv_gpu_copy (one
 * asynchronous vendor copy) and okv_gpu_copy_blocks (all blocks in one launch
 * of the gather kernel, pairs uploaded through the stream's staging).
 * Owns: the backend's part of okv_hal_buffer_t (host_ptr, device_ptr).
 * May touch: the vendor memory and copy calls, a stream's records and staging
 * through gpu_stream.c / gpu_launch.c helpers (under the stream mutex). */
#include <stdio.h>
#include <string.h>

#include "gpu_internal.h"
#include "okv_gpu_args.h"

/* ---- Buffers ---- */

okv_status_t okv_gpu_buffer_alloc(okv_hal_device_t *device, okv_tier_t tier, uint64_t bytes,
                                  okv_hal_buffer_t **out_buffer) {
  okv_gpu_device_t *dev = okv_gpu_dev(device);
  const okv_gpu_vendor_t *v = dev->vendor;
  okv_hal_buffer_t *b = okv_calloc(&device->allocator, 1, sizeof(*b));
  if (!b) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "host: could not allocate a buffer object");
  okv_status_t s = okv_gpu_bind(dev);
  if (s == OKV_OK && tier == OKV_TIER_DEVICE) {
    uint64_t dptr = 0;
    s = v->mem_alloc(bytes, &dptr);
    if (s == OKV_OK) {
      s = v->memset_zero(dptr, bytes);
      if (s != OKV_OK) v->mem_free(dptr);
    }
    if (s == OKV_OK) b->device_ptr = (void *)(uintptr_t)dptr;
  } else if (s == OKV_OK && tier == OKV_TIER_HOST) {
    void *host = NULL;
    uint64_t dptr = 0;
    s = v->host_alloc(bytes, &host, &dptr);
    if (s == OKV_OK) {
      memset(host, 0, (size_t)bytes);
      b->host_ptr = host;
      b->device_ptr = (void *)(uintptr_t)dptr;
    }
  } else if (s == OKV_OK) {
    s = okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "tier: the %s backend cannot allocate the %s tier", v->name,
                        okv_tier_name(tier));
  }
  if (s != OKV_OK) {
    okv_free(&device->allocator, b);
    return okv_status_annotate(s, "allocating %llu bytes in the %s tier", (unsigned long long)bytes,
                               okv_tier_name(tier));
  }
  b->tier = tier;
  b->size = bytes;
  *out_buffer = b;
  return OKV_OK;
}

void okv_gpu_buffer_destroy(okv_hal_buffer_t *buffer) {
  okv_gpu_device_t *dev = okv_gpu_dev(buffer->device);
  if (okv_status_consume(okv_gpu_bind(dev)) == OKV_STATUS_OK) {
    if (buffer->tier == OKV_TIER_DEVICE) {
      dev->vendor->mem_free((uint64_t)(uintptr_t)buffer->device_ptr);
    } else {
      dev->vendor->host_free(buffer->host_ptr);
    }
  }
  okv_free(&buffer->device->allocator, buffer);
}

okv_status_t okv_gpu_buffer_write(okv_hal_buffer_t *buffer, uint64_t offset, const void *src, uint64_t bytes) {
  if (buffer->host_ptr) {
    memcpy((unsigned char *)buffer->host_ptr + offset, src, (size_t)bytes);
    return OKV_OK;
  }
  okv_gpu_device_t *dev = okv_gpu_dev(buffer->device);
  OKV_RETURN_IF_ERROR(okv_gpu_bind(dev));
  return dev->vendor->copy_htod(okv_gpu_addr(buffer, offset), src, bytes);
}

okv_status_t okv_gpu_buffer_read(okv_hal_buffer_t *buffer, uint64_t offset, void *dst, uint64_t bytes) {
  if (buffer->host_ptr) {
    memcpy(dst, (const unsigned char *)buffer->host_ptr + offset, (size_t)bytes);
    return OKV_OK;
  }
  okv_gpu_device_t *dev = okv_gpu_dev(buffer->device);
  OKV_RETURN_IF_ERROR(okv_gpu_bind(dev));
  return dev->vendor->copy_dtoh(dst, okv_gpu_addr(buffer, offset), bytes);
}

/* ---- Copies ---- */

okv_status_t okv_gpu_copy(okv_hal_stream_t *stream, okv_hal_buffer_t *src, uint64_t src_offset, okv_hal_buffer_t *dst,
                          uint64_t dst_offset, uint64_t bytes) {
  okv_gpu_stream_t *s = (okv_gpu_stream_t *)stream;
  OKV_RETURN_IF_ERROR(okv_gpu_stream_enter(s));
  const okv_gpu_vendor_t *v = okv_gpu_stream_dev(s)->vendor;
  okv_status_t st = v->copy_async(okv_gpu_addr(dst, dst_offset), okv_gpu_addr(src, src_offset), bytes, s->vstream);
  if (st == OKV_OK) {
    okv_hal_buffer_t *bufs[2] = {src, dst};
    st = okv_gpu_stream_retire(s, NULL, bufs, 2);
  }
  pthread_mutex_unlock(&s->mutex);
  return st;
}

okv_status_t okv_gpu_copy_blocks(okv_hal_stream_t *stream, okv_hal_buffer_t *src, okv_hal_buffer_t *dst,
                                 uint64_t block_bytes, size_t n_blocks, const okv_block_copy_t *pairs) {
  okv_gpu_stream_t *s = (okv_gpu_stream_t *)stream;
  uint32_t vec = 16;
  while (vec > 1) {
    bool ok =
        (block_bytes % vec) == 0 && ((uintptr_t)src->device_ptr % vec) == 0 && ((uintptr_t)dst->device_ptr % vec) == 0;
    for (size_t i = 0; ok && i < n_blocks; ++i)
      ok = (pairs[i].src_offset % vec) == 0 && (pairs[i].dst_offset % vec) == 0;
    if (ok) break;
    vec /= 2;
  }
  const size_t pair_bytes = n_blocks * sizeof(okv_block_copy_t);
  okv_gpu_pack_t p = {0};
  OKV_RETURN_IF_ERROR(okv_gpu_op_begin(s, okv_gpu_align(pair_bytes), &p));
  okv_gpu_gather_args_t a = {0};
  a.src = okv_gpu_addr(src, 0);
  a.dst = okv_gpu_addr(dst, 0);
  a.pairs = okv_gpu_pack(&p, pairs, pair_bytes);
  a.n_blocks = n_blocks;
  a.block_bytes = block_bytes;
  a.vec_bytes = vec;
  okv_status_t st = okv_gpu_pack_upload(s, &p, pair_bytes);
  if (st == OKV_OK)
    st = okv_gpu_launch(s, OKV_GPU_FN_GATHER, okv_gpu_grid_cap(n_blocks), 1, OKV_GPU_GATHER_THREADS, 0, &a);
  okv_hal_buffer_t *bufs[2] = {src, dst};
  return okv_gpu_op_end(s, st, p.st, bufs, 2);
}
