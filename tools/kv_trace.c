/* Attention traces (kv_trace.h): the writer used by `oasiskv eval --trace`
 * and the loader used by `oasiskv bench serve --trace`. */
#include "kv_trace.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool host_little_endian(void) {
  const uint32_t one = 1;
  unsigned char b;
  memcpy(&b, &one, 1);
  return b == 1;
}

static uint64_t record_floats(const okv_kv_trace_shape_t *s) {
  uint64_t q = (uint64_t)s->n_q_heads * s->head_dim;
  return (uint64_t)s->n_kv_heads * s->head_dim + q + (s->has_draft ? q : 0);
}

static okv_status_t shape_check(const okv_kv_trace_shape_t *s) {
  if (s->n_layers == 0 || s->n_layers > 4096 || s->n_q_heads == 0 || s->n_q_heads > 4096 || s->n_kv_heads == 0 ||
      s->n_kv_heads > 4096 || s->head_dim == 0 || s->head_dim > 256)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "trace shape: layers %u, query heads %u, KV heads %u, head_dim %u out of range", s->n_layers,
                           s->n_q_heads, s->n_kv_heads, s->head_dim);
  if (s->n_q_heads % s->n_kv_heads)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "trace shape: %u query heads is not a multiple of %u KV heads",
                           s->n_q_heads, s->n_kv_heads);
  return OKV_OK;
}

/* ---- Writer ---- */

okv_status_t okv_kv_trace_open(const char *path, const okv_kv_trace_shape_t *shape, okv_kv_trace_writer_t *w) {
  if (!path || !shape || !w) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "trace: NULL argument");
  memset(w, 0, sizeof *w);
  OKV_RETURN_IF_ERROR(shape_check(shape));
  if (!host_little_endian())
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "trace: the format is little-endian; this host is not");
  FILE *f = fopen(path, "wb");
  if (!f) return okv_status_make(OKV_STATUS_IO_ERROR, "trace '%s': %s", path, strerror(errno));
  unsigned char hdr[OKV_KV_TRACE_HEADER];
  memset(hdr, 0, sizeof hdr);
  memcpy(hdr, OKV_KV_TRACE_MAGIC, 8);
  uint32_t fields[6] = {OKV_KV_TRACE_VERSION, shape->n_layers, shape->n_q_heads,
                        shape->n_kv_heads,    shape->head_dim, shape->has_draft ? OKV_KV_TRACE_FLAG_DRAFT : 0u};
  memcpy(hdr + 8, fields, sizeof fields);
  if (fwrite(hdr, 1, sizeof hdr, f) != sizeof hdr) {
    fclose(f);
    return okv_status_make(OKV_STATUS_IO_ERROR, "trace '%s': writing the header failed", path);
  }
  w->f = f;
  w->shape = *shape;
  return OKV_OK;
}

okv_status_t okv_kv_trace_write(okv_kv_trace_writer_t *w, uint32_t window, uint32_t position, uint32_t layer,
                                const float *k, const float *q, const float *qd) {
  if (!w || !w->f || !k || !q || (w->shape.has_draft && !qd))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "trace write: NULL writer or vector");
  if (layer >= w->shape.n_layers)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "trace write: layer %u >= %u", layer, w->shape.n_layers);
  uint32_t h[4] = {window, position, layer, 0};
  size_t nk = (size_t)w->shape.n_kv_heads * w->shape.head_dim, nq = (size_t)w->shape.n_q_heads * w->shape.head_dim;
  bool ok = fwrite(h, sizeof h, 1, w->f) == 1 && fwrite(k, sizeof(float), nk, w->f) == nk &&
            fwrite(q, sizeof(float), nq, w->f) == nq &&
            (!w->shape.has_draft || fwrite(qd, sizeof(float), nq, w->f) == nq);
  if (!ok) return okv_status_make(OKV_STATUS_IO_ERROR, "trace write: %s", strerror(errno));
  w->n_records++;
  return OKV_OK;
}

okv_status_t okv_kv_trace_close(okv_kv_trace_writer_t *w) {
  if (!w || !w->f) return OKV_OK;
  bool ok = fflush(w->f) == 0;
  ok = (fclose(w->f) == 0) && ok;
  w->f = NULL;
  return ok ? OKV_OK : okv_status_make(OKV_STATUS_IO_ERROR, "trace: closing the file failed: %s", strerror(errno));
}

/* ---- Loader ---- */

void okv_kv_trace_free(okv_kv_trace_t *t) {
  if (!t) return;
  free(t->n_positions);
  free(t->first);
  free(t->k);
  free(t->q);
  free(t->qd);
  memset(t, 0, sizeof *t);
}

static okv_status_t read_all(const char *path, unsigned char **out, size_t *out_n) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return okv_status_make(errno == ENOENT ? OKV_STATUS_NOT_FOUND : OKV_STATUS_IO_ERROR, "trace '%s': %s", path,
                           strerror(errno));
  unsigned char *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n + (1u << 20) > cap) {
      cap = cap ? cap * 2 : (16u << 20);
      unsigned char *nb = realloc(buf, cap);
      if (!nb) {
        free(buf);
        fclose(f);
        return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "trace '%s': out of memory after %zu bytes", path, n);
      }
      buf = nb;
    }
    size_t r = fread(buf + n, 1, 1u << 20, f);
    n += r;
    if (r < (1u << 20)) break;
  }
  bool err = ferror(f);
  fclose(f);
  if (err) {
    free(buf);
    return okv_status_make(OKV_STATUS_IO_ERROR, "trace '%s': read failed", path);
  }
  *out = buf;
  *out_n = n;
  return OKV_OK;
}

okv_status_t okv_kv_trace_load(const char *path, okv_kv_trace_t *out) {
  if (!path || !out) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "trace load: NULL argument");
  memset(out, 0, sizeof *out);
  if (!host_little_endian())
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "trace: the format is little-endian; this host is not");
  unsigned char *buf = NULL;
  size_t n = 0;
  OKV_RETURN_IF_ERROR(read_all(path, &buf, &n));
  okv_status_t st = OKV_OK;
  unsigned char *seen = NULL;
  uint32_t fields[6];
  /* The magic first (as much of it as the file holds), then the header's length: a file cut inside its header
   * is a truncated trace, not another kind of file. */
  if (n == 0) {
    st = okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "trace '%s': empty file, not a trace file", path);
    goto done;
  }
  if (memcmp(buf, OKV_KV_TRACE_MAGIC, n < 8 ? n : 8) != 0) {
    st = okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "trace '%s': not a trace file (magic at byte 0)", path);
    goto done;
  }
  if (n < OKV_KV_TRACE_HEADER) {
    st = okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "trace '%s': truncated header (%zu of %u bytes)", path, n,
                         OKV_KV_TRACE_HEADER);
    goto done;
  }
  memcpy(fields, buf + 8, sizeof fields);
  if (fields[0] != OKV_KV_TRACE_VERSION) {
    st = okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "trace '%s': version %u at byte 8, expected %u", path, fields[0],
                         OKV_KV_TRACE_VERSION);
    goto done;
  }
  okv_kv_trace_shape_t s = {fields[1], fields[2], fields[3], fields[4], (fields[5] & OKV_KV_TRACE_FLAG_DRAFT) != 0};
  st = shape_check(&s);
  if (st) {
    st = okv_status_annotate(st, "trace '%s' (header)", path);
    goto done;
  }
  out->shape = s;
  uint64_t rec_bytes = 16u + 4u * record_floats(&s);
  uint64_t body = n - OKV_KV_TRACE_HEADER;
  if (body % rec_bytes != 0) {
    st = okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                         "trace '%s': %llu bytes of records is not a multiple of the record size %llu (truncated?)",
                         path, (unsigned long long)body, (unsigned long long)rec_bytes);
    goto done;
  }
  uint64_t n_rec = body / rec_bytes;
  if (n_rec == 0) {
    st = okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "trace '%s' has no records", path);
    goto done;
  }
  /* Pass 1: windows and their lengths. */
  uint32_t n_win = 0;
  for (uint64_t r = 0; r < n_rec; r++) {
    uint32_t h[4];
    memcpy(h, buf + OKV_KV_TRACE_HEADER + r * rec_bytes, sizeof h);
    if (h[0] >= OKV_KV_TRACE_MAX_WINDOWS || h[2] >= s.n_layers || h[1] >= (1u << 24)) {
      st = okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "trace '%s': record at byte %llu: window %u, position %u or layer %u out of range", path,
                           (unsigned long long)(OKV_KV_TRACE_HEADER + r * rec_bytes), h[0], h[1], h[2]);
      goto done;
    }
    if (h[0] + 1 > n_win) n_win = h[0] + 1;
  }
  out->n_windows = n_win;
  out->n_positions = calloc(n_win, sizeof *out->n_positions);
  out->first = calloc(n_win, sizeof *out->first);
  if (!out->n_positions || !out->first) {
    st = okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "trace '%s': out of memory", path);
    goto done;
  }
  for (uint64_t r = 0; r < n_rec; r++) {
    uint32_t h[4];
    memcpy(h, buf + OKV_KV_TRACE_HEADER + r * rec_bytes, sizeof h);
    if (h[1] + 1 > out->n_positions[h[0]]) out->n_positions[h[0]] = h[1] + 1;
  }
  uint64_t total = 0;
  for (uint32_t w = 0; w < n_win; w++) {
    out->first[w] = total;
    total += (uint64_t)out->n_positions[w] * s.n_layers;
  }
  if (total != n_rec) {
    st = okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                         "trace '%s': %llu records, but its windows and positions need %llu (missing or repeated "
                         "records)",
                         path, (unsigned long long)n_rec, (unsigned long long)total);
    goto done;
  }
  size_t nk = (size_t)s.n_kv_heads * s.head_dim, nq = (size_t)s.n_q_heads * s.head_dim;
  out->k = malloc(total * nk * sizeof(float));
  out->q = malloc(total * nq * sizeof(float));
  out->qd = s.has_draft ? malloc(total * nq * sizeof(float)) : NULL;
  seen = calloc(total, 1);
  if (!out->k || !out->q || (s.has_draft && !out->qd) || !seen) {
    st = okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "trace '%s': out of memory for %llu records", path,
                         (unsigned long long)total);
    goto done;
  }
  /* Pass 2: place every record; each (window, position, layer) exactly once, finite. */
  for (uint64_t r = 0; r < n_rec; r++) {
    const unsigned char *p = buf + OKV_KV_TRACE_HEADER + r * rec_bytes;
    uint32_t h[4];
    memcpy(h, p, sizeof h);
    uint64_t idx = out->first[h[0]] + (uint64_t)h[1] * s.n_layers + h[2];
    if (seen[idx]) {
      st = okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "trace '%s': window %u position %u layer %u appears twice",
                           path, h[0], h[1], h[2]);
      goto done;
    }
    seen[idx] = 1;
    p += 16;
    memcpy(out->k + idx * nk, p, nk * sizeof(float));
    p += nk * sizeof(float);
    memcpy(out->q + idx * nq, p, nq * sizeof(float));
    p += nq * sizeof(float);
    if (s.has_draft) memcpy(out->qd + idx * nq, p, nq * sizeof(float));
    const float *vs[3] = {out->k + idx * nk, out->q + idx * nq, s.has_draft ? out->qd + idx * nq : NULL};
    size_t ns[3] = {nk, nq, nq};
    for (int a = 0; a < 3; a++)
      for (size_t i = 0; vs[a] && i < ns[a]; i++)
        if (!isfinite(vs[a][i])) {
          st = okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "trace '%s': a non-finite value at window %u position %u",
                               path, h[0], h[1]);
          goto done;
        }
  }
  for (uint64_t i = 0; i < total; i++)
    if (!seen[i]) {
      st = okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "trace '%s': a (window, position, layer) record is missing",
                           path);
      goto done;
    }
done:
  free(seen);
  free(buf);
  if (st) okv_kv_trace_free(out);
  return st;
}

static int64_t record_index(const okv_kv_trace_t *t, uint32_t window, uint32_t position, uint32_t layer) {
  if (!t || window >= t->n_windows || position >= t->n_positions[window] || layer >= t->shape.n_layers) return -1;
  return (int64_t)(t->first[window] + (uint64_t)position * t->shape.n_layers + layer);
}

const float *okv_kv_trace_k(const okv_kv_trace_t *t, uint32_t window, uint32_t position, uint32_t layer) {
  int64_t i = record_index(t, window, position, layer);
  return i < 0 ? NULL : t->k + (size_t)i * t->shape.n_kv_heads * t->shape.head_dim;
}

const float *okv_kv_trace_q(const okv_kv_trace_t *t, uint32_t window, uint32_t position, uint32_t layer) {
  int64_t i = record_index(t, window, position, layer);
  return i < 0 ? NULL : t->q + (size_t)i * t->shape.n_q_heads * t->shape.head_dim;
}

const float *okv_kv_trace_qd(const okv_kv_trace_t *t, uint32_t window, uint32_t position, uint32_t layer) {
  int64_t i = record_index(t, window, position, layer);
  return i < 0 || !t->qd ? NULL : t->qd + (size_t)i * t->shape.n_q_heads * t->shape.head_dim;
}
