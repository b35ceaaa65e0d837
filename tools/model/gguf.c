/* GGUF reader (see gguf.h). Method source: the GGUF specification (ggml
 * docs/gguf.md) and its type table (gguf-py constants, GGML_QUANT_SIZES).
 *
 * open() parses the whole file twice with the same code: the first pass
 * (on a handle on the stack) validates every length, count, offset and type
 * against the file size and counts the strings of string arrays, allocating
 * nothing; the second fills
 * the index (offsets of each KV, each tensor info and each array string,
 * 8 bytes per entry, each smaller than the record it indexes). Lookups by key
 * and by tensor name binary-search index arrays sorted by name. */
#include "model/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_HEADER_BYTES      24u
#define GGUF_DEFAULT_ALIGNMENT 32u
/* Smallest records: a KV is a key length (8), a type (4) and a value of at
 * least 1 byte; a tensor info a name length (8), n_dims (4), a type (4) and an
 * offset (8). Counts larger than what fits in the rest of the file are refused
 * before anything else. */
#define GGUF_MIN_KV_BYTES          13u
#define GGUF_MIN_TENSOR_INFO_BYTES 24u
#define GGUF_MAX_DIMS              4u

struct okv_gguf_t {
  okv_allocator_t alloc;
  const unsigned char *base;
  uint64_t size;
  void *map; /* mmap'd region (open) or NULL (open_memory) */
  size_t map_len;
  uint32_t version, alignment;
  uint64_t n_kv, n_tensors, n_strs;
  uint64_t data_off;
  uint64_t *kv_off;        /* [n_kv] offset of each KV (its key length), file order */
  uint64_t *kv_str_base;   /* [n_kv] index into str_off of a string array's first element */
  uint64_t *kv_sorted;     /* [n_kv] KV indices sorted by key */
  uint64_t *tensor_off;    /* [n_tensors] offset of each tensor info, file order */
  uint64_t *tensor_sorted; /* [n_tensors] tensor indices sorted by name */
  uint64_t *str_off;       /* [n_strs] offset of each string array element (its length) */
  char name[256];
};

/* ---- ggml type table ---- */

typedef struct ggml_type_info_t {
  const char *name;
  uint32_t block; /* elements per block */
  uint32_t bytes; /* bytes per block */
} ggml_type_info_t;

static const ggml_type_info_t k_types[] = {
    [0] = {"F32", 1, 4},         [1] = {"F16", 1, 2},         [2] = {"Q4_0", 32, 18},      [3] = {"Q4_1", 32, 20},
    [6] = {"Q5_0", 32, 22},      [7] = {"Q5_1", 32, 24},      [8] = {"Q8_0", 32, 34},      [9] = {"Q8_1", 32, 40},
    [10] = {"Q2_K", 256, 84},    [11] = {"Q3_K", 256, 110},   [12] = {"Q4_K", 256, 144},   [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},   [15] = {"Q8_K", 256, 292},   [16] = {"IQ2_XXS", 256, 66}, [17] = {"IQ2_XS", 256, 74},
    [18] = {"IQ3_XXS", 256, 98}, [19] = {"IQ1_S", 256, 50},   [20] = {"IQ4_NL", 32, 18},   [21] = {"IQ3_S", 256, 110},
    [22] = {"IQ2_S", 256, 82},   [23] = {"IQ4_XS", 256, 136}, [24] = {"I8", 1, 1},         [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},        [27] = {"I64", 1, 8},        [28] = {"F64", 1, 8},        [29] = {"IQ1_M", 256, 56},
    [30] = {"BF16", 1, 2},       [34] = {"TQ1_0", 256, 54},   [35] = {"TQ2_0", 256, 66},   [39] = {"MXFP4", 32, 17},
};

static const ggml_type_info_t *type_info(uint32_t type) {
  if (type >= sizeof k_types / sizeof k_types[0] || !k_types[type].name) return NULL;
  return &k_types[type];
}

const char *okv_ggml_type_name(uint32_t type) {
  const ggml_type_info_t *t = type_info(type);
  return t ? t->name : NULL;
}

okv_status_t okv_ggml_type_size(uint32_t type, uint64_t n_elems, uint64_t *out_bytes) {
  const ggml_type_info_t *t = type_info(type);
  if (!t) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "unknown ggml tensor type %u", type);
  if (n_elems % t->block != 0)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "%llu elements of type %s are not a multiple of its block (%u)",
                           (unsigned long long)n_elems, t->name, t->block);
  uint64_t blocks = n_elems / t->block;
  if (blocks > UINT64_MAX / t->bytes)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "%llu elements of type %s overflow 64 bits of bytes",
                           (unsigned long long)n_elems, t->name);
  *out_bytes = blocks * t->bytes;
  return OKV_OK;
}

static uint16_t le16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t le32(const unsigned char *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t le64(const unsigned char *p) { return (uint64_t)le32(p) | ((uint64_t)le32(p + 4) << 32); }

okv_status_t okv_ggml_dequantize(uint32_t type, const void *src, uint64_t n, float *dst) {
  const unsigned char *s = src;
  switch (type) {
    case OKV_GGML_TYPE_F32:
      for (uint64_t i = 0; i < n; ++i) {
        uint32_t b = le32(s + 4 * i);
        memcpy(&dst[i], &b, sizeof b);
      }
      return OKV_OK;
    case OKV_GGML_TYPE_F16:
      for (uint64_t i = 0; i < n; ++i) dst[i] = okv_f16_to_f32(le16(s + 2 * i));
      return OKV_OK;
    case OKV_GGML_TYPE_BF16:
      for (uint64_t i = 0; i < n; ++i) dst[i] = okv_bf16_to_f32(le16(s + 2 * i));
      return OKV_OK;
    case OKV_GGML_TYPE_Q8_0:
    case OKV_GGML_TYPE_Q4_0: break;
    default: {
      const char *name = okv_ggml_type_name(type);
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                             "ggml tensor type %s (%u) is not supported (F32, F16, BF16, Q8_0, Q4_0 are)",
                             name ? name : "unknown", type);
    }
  }
  if (n % 32 != 0)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "%llu elements are not a multiple of the block size 32",
                           (unsigned long long)n);
  for (uint64_t b = 0; b < n / 32; ++b) {
    float *y = dst + 32 * b;
    if (type == OKV_GGML_TYPE_Q8_0) {
      const unsigned char *blk = s + 34 * b;
      const float d = okv_f16_to_f32(le16(blk));
      for (int j = 0; j < 32; ++j) y[j] = (float)(int8_t)blk[2 + j] * d;
    } else {
      const unsigned char *blk = s + 18 * b;
      const float d = okv_f16_to_f32(le16(blk));
      for (int j = 0; j < 16; ++j) {
        y[j] = (float)((int)(blk[2 + j] & 0x0F) - 8) * d;
        y[j + 16] = (float)((int)(blk[2 + j] >> 4) - 8) * d;
      }
    }
  }
  return OKV_OK;
}

const char *okv_gguf_quote(const char *s, size_t n, char *out, size_t cap) {
  static const char hex[] = "0123456789abcdef";
  size_t w = 0;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = (unsigned char)s[i];
    const size_t need = c >= 0x20 && c < 0x7f && c != '\\' ? 1 : 4;
    if (w + need + 4 > cap) { /* room for "..." and the NUL */
      memcpy(out + w, "...", 3);
      w += 3;
      break;
    }
    if (need == 1) {
      out[w++] = (char)c;
    } else {
      out[w++] = '\\';
      out[w++] = 'x';
      out[w++] = hex[c >> 4];
      out[w++] = hex[c & 15];
    }
  }
  out[w] = '\0';
  return out;
}

/* A caller's key or name for a message (it may come from another file). */
typedef struct quoted_t {
  char s[96];
} quoted_t;
static quoted_t quoted(const char *key) {
  quoted_t q;
  okv_gguf_quote(key, strlen(key), q.s, sizeof q.s);
  return q;
}

/* ---- parsing ---- */

static const uint32_t k_scalar_bytes[] = {
    [OKV_GGUF_U8] = 1,  [OKV_GGUF_I8] = 1,  [OKV_GGUF_U16] = 2,  [OKV_GGUF_I16] = 2,    [OKV_GGUF_U32] = 4,
    [OKV_GGUF_I32] = 4, [OKV_GGUF_F32] = 4, [OKV_GGUF_BOOL] = 1, [OKV_GGUF_STRING] = 0, [OKV_GGUF_ARRAY] = 0,
    [OKV_GGUF_U64] = 8, [OKV_GGUF_I64] = 8, [OKV_GGUF_F64] = 8,
};

static const char *value_type_name(uint32_t t) {
  static const char *const names[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                      "bool", "string", "array", "u64", "i64", "f64"};
  return t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

typedef struct cursor_t {
  const unsigned char *p;
  uint64_t size, off;
  const char *name;
} cursor_t;

static okv_status_t truncated(const cursor_t *c, const char *what, uint64_t need) {
  return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                         "gguf '%s': truncated in %s at byte %llu (needs %llu bytes, the file has %llu)", c->name, what,
                         (unsigned long long)c->off, (unsigned long long)need, (unsigned long long)c->size);
}

static okv_status_t take(cursor_t *c, const char *what, uint64_t n, const unsigned char **out) {
  if (c->size - c->off < n) return truncated(c, what, n);
  *out = c->p + c->off;
  c->off += n;
  return OKV_OK;
}

static okv_status_t rd_u32(cursor_t *c, const char *what, uint32_t *v) {
  const unsigned char *q = NULL;
  OKV_RETURN_IF_ERROR(take(c, what, 4, &q));
  *v = le32(q);
  return OKV_OK;
}

static okv_status_t rd_u64(cursor_t *c, const char *what, uint64_t *v) {
  const unsigned char *q = NULL;
  OKV_RETURN_IF_ERROR(take(c, what, 8, &q));
  *v = le64(q);
  return OKV_OK;
}

/* A string: u64 length, bytes. The length is checked against the rest of the file. */
static okv_status_t rd_str(cursor_t *c, const char *what, const char **ptr, uint64_t *len) {
  uint64_t at = c->off, n;
  OKV_RETURN_IF_ERROR(rd_u64(c, what, &n));
  if (n > c->size - c->off)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "gguf '%s': %s length %llu at byte %llu runs past the end of the file (%llu bytes)", c->name,
                           what, (unsigned long long)n, (unsigned long long)at, (unsigned long long)c->size);
  *ptr = (const char *)c->p + c->off;
  *len = n;
  c->off += n;
  return OKV_OK;
}

/* Skips one value of type t (validated). For string arrays, records each
 * element's offset at g->str_off[*n_strs] when the index exists, and counts. */
static okv_status_t skip_value(okv_gguf_t *g, cursor_t *c, const char *key, size_t key_len, uint32_t t,
                               uint64_t *n_strs) {
  char qk[96];
  if (t > OKV_GGUF_F64)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "gguf '%s': key '%s' has unknown value type %u", c->name,
                           okv_gguf_quote(key, key_len, qk, sizeof qk), t);
  const unsigned char *q = NULL;
  if (t == OKV_GGUF_STRING) {
    const char *s;
    uint64_t n;
    return rd_str(c, "string value", &s, &n);
  }
  if (t != OKV_GGUF_ARRAY) return take(c, "value", k_scalar_bytes[t], &q);
  uint32_t et;
  uint64_t n;
  OKV_RETURN_IF_ERROR(rd_u32(c, "array element type", &et));
  OKV_RETURN_IF_ERROR(rd_u64(c, "array length", &n));
  if (et > OKV_GGUF_F64 || et == OKV_GGUF_ARRAY)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "gguf '%s': array '%s' has %s element type %u", c->name,
                           okv_gguf_quote(key, key_len, qk, sizeof qk),
                           et == OKV_GGUF_ARRAY ? "unsupported (nested array)" : "unknown", et);
  const uint64_t rest = c->size - c->off;
  const uint64_t min_elem = et == OKV_GGUF_STRING ? 8 : k_scalar_bytes[et];
  if (n > rest / min_elem)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "gguf '%s': array '%s' declares %llu %s elements, more than the %llu bytes left can hold",
                           c->name, okv_gguf_quote(key, key_len, qk, sizeof qk), (unsigned long long)n,
                           value_type_name(et), (unsigned long long)rest);
  if (et != OKV_GGUF_STRING) return take(c, "array", n * min_elem, &q);
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t at = c->off, len;
    const char *s;
    OKV_RETURN_IF_ERROR(rd_str(c, "array string", &s, &len));
    if (g->str_off) g->str_off[*n_strs] = at;
    ++*n_strs;
  }
  return OKV_OK;
}

/* Key or tensor name at a record offset (validated at open). */
static const char *name_at(const okv_gguf_t *g, uint64_t off, uint64_t *len) {
  *len = le64(g->base + off);
  return (const char *)g->base + off + 8;
}

static int name_cmp(const char *a, uint64_t na, const char *b, uint64_t nb) {
  int r = memcmp(a, b, (size_t)(na < nb ? na : nb));
  if (r) return r;
  return na < nb ? -1 : na > nb ? 1 : 0;
}

/* Sorts idx[0..n) by the name at offs[idx[i]] (heapsort: no allocation). */
static int cmp_idx(const okv_gguf_t *g, const uint64_t *offs, uint64_t a, uint64_t b) {
  uint64_t na, nb;
  const char *sa = name_at(g, offs[a], &na), *sb = name_at(g, offs[b], &nb);
  return name_cmp(sa, na, sb, nb);
}

static void sift_down(const okv_gguf_t *g, const uint64_t *offs, uint64_t *idx, uint64_t root, uint64_t n) {
  for (;;) {
    uint64_t child = 2 * root + 1;
    if (child >= n) return;
    if (child + 1 < n && cmp_idx(g, offs, idx[child], idx[child + 1]) < 0) ++child;
    if (cmp_idx(g, offs, idx[root], idx[child]) >= 0) return;
    uint64_t t = idx[root];
    idx[root] = idx[child];
    idx[child] = t;
    root = child;
  }
}

static void sort_by_name(const okv_gguf_t *g, const uint64_t *offs, uint64_t *idx, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) idx[i] = i;
  if (n < 2) return;
  for (uint64_t i = n / 2; i-- > 0;) sift_down(g, offs, idx, i, n);
  for (uint64_t end = n - 1; end > 0; --end) {
    uint64_t t = idx[0];
    idx[0] = idx[end];
    idx[end] = t;
    sift_down(g, offs, idx, 0, end);
  }
}

/* Binary search; returns the index (into offs) or UINT64_MAX. */
static uint64_t find_sorted(const okv_gguf_t *g, const uint64_t *offs, const uint64_t *idx, uint64_t n,
                            const char *key) {
  size_t kl = strlen(key);
  uint64_t lo = 0, hi = n;
  while (lo < hi) {
    uint64_t mid = lo + (hi - lo) / 2, nl;
    const char *s = name_at(g, offs[idx[mid]], &nl);
    int r = name_cmp(s, nl, key, kl);
    if (r == 0) return idx[mid];
    if (r < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return UINT64_MAX;
}

/* Reads an integer KV value at `off` (value type t) as signed/unsigned 64. */
static bool int_value(const unsigned char *p, uint32_t t, int64_t *sv, uint64_t *uv, bool *is_signed) {
  *is_signed = false;
  switch (t) {
    case OKV_GGUF_U8: *uv = p[0]; return true;
    case OKV_GGUF_U16: *uv = le16(p); return true;
    case OKV_GGUF_U32: *uv = le32(p); return true;
    case OKV_GGUF_U64: *uv = le64(p); return true;
    default: break;
  }
  *is_signed = true;
  switch (t) {
    case OKV_GGUF_I8: *sv = (int8_t)p[0]; return true;
    case OKV_GGUF_I16: *sv = (int16_t)le16(p); return true;
    case OKV_GGUF_I32: *sv = (int32_t)le32(p); return true;
    case OKV_GGUF_I64: *sv = (int64_t)le64(p); return true;
    default: return false;
  }
}

/* The one parser of both passes (see the file comment). */
static okv_status_t parse(okv_gguf_t *g, bool fill) {
  cursor_t c = {g->base, g->size, 0, g->name};
  const unsigned char *q = NULL;
  OKV_RETURN_IF_ERROR(take(&c, "header", 4, &q));
  if (memcmp(q, "GGUF", 4) != 0)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "gguf '%s': not a GGUF file (magic %02x %02x %02x %02x)",
                           g->name, q[0], q[1], q[2], q[3]);
  OKV_RETURN_IF_ERROR(rd_u32(&c, "header", &g->version));
  if (g->version != 2 && g->version != 3) {
    const bool swapped = g->version == 0x02000000u || g->version == 0x03000000u;
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "gguf '%s': unsupported version %u%s (2 and 3 are read)",
                           g->name, g->version, swapped ? " (a big-endian file)" : "");
  }
  OKV_RETURN_IF_ERROR(rd_u64(&c, "header", &g->n_tensors));
  OKV_RETURN_IF_ERROR(rd_u64(&c, "header", &g->n_kv));
  {
    const uint64_t rest = c.size - c.off;
    if (g->n_kv > rest / GGUF_MIN_KV_BYTES)
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                             "gguf '%s': %llu metadata entries cannot fit in the %llu bytes after the header", g->name,
                             (unsigned long long)g->n_kv, (unsigned long long)rest);
    if (g->n_tensors > rest / GGUF_MIN_TENSOR_INFO_BYTES)
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                             "gguf '%s': %llu tensor infos cannot fit in the %llu bytes after the header", g->name,
                             (unsigned long long)g->n_tensors, (unsigned long long)rest);
  }
  uint64_t n_strs = 0;
  g->alignment = GGUF_DEFAULT_ALIGNMENT;
  for (uint64_t i = 0; i < g->n_kv; ++i) {
    const uint64_t at = c.off;
    const char *key;
    uint64_t klen;
    uint32_t t;
    OKV_RETURN_IF_ERROR(rd_str(&c, "metadata key", &key, &klen));
    OKV_RETURN_IF_ERROR(rd_u32(&c, "metadata value type", &t));
    const uint64_t val_off = c.off, str_base = n_strs;
    OKV_RETURN_IF_ERROR(skip_value(g, &c, key, (size_t)klen, t, &n_strs));
    if (fill) {
      g->kv_off[i] = at;
      g->kv_str_base[i] = str_base;
    }
    if (klen == 17 && memcmp(key, "general.alignment", 17) == 0) {
      int64_t sv = 0;
      uint64_t uv = 0;
      bool is_signed;
      if (!int_value(g->base + val_off, t, &sv, &uv, &is_signed))
        return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "gguf '%s': general.alignment has type %s, not an integer",
                               g->name, value_type_name(t));
      if (is_signed) uv = sv < 0 ? 0 : (uint64_t)sv;
      if (uv == 0 || uv > (1u << 30) || (uv & (uv - 1)) != 0)
        return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                               "gguf '%s': general.alignment %lld is not a power of two in [1, 2^30]", g->name,
                               is_signed ? (long long)sv : (long long)uv);
      g->alignment = (uint32_t)uv;
    }
  }
  if (!fill) g->n_strs = n_strs;
  /* Tensor infos. */
  for (uint64_t i = 0; i < g->n_tensors; ++i) {
    const uint64_t at = c.off;
    const char *name;
    uint64_t nlen, off;
    uint32_t n_dims, type;
    OKV_RETURN_IF_ERROR(rd_str(&c, "tensor name", &name, &nlen));
    char qn[96]; /* the name, printable, for messages */
    okv_gguf_quote(name, (size_t)nlen, qn, sizeof qn);
    OKV_RETURN_IF_ERROR(rd_u32(&c, "tensor info", &n_dims));
    if (n_dims > GGUF_MAX_DIMS)
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "gguf '%s': tensor '%s' has %u dimensions (at most 4)",
                             g->name, qn, n_dims);
    uint64_t n_elems = 1, dim0 = 1;
    bool overflow = false;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t dim;
      OKV_RETURN_IF_ERROR(rd_u64(&c, "tensor dimensions", &dim));
      if (dim > (uint64_t)INT64_MAX) overflow = true;
      if (dim != 0 && n_elems > UINT64_MAX / dim) overflow = true;
      n_elems *= dim;
      if (d == 0) dim0 = dim;
    }
    OKV_RETURN_IF_ERROR(rd_u32(&c, "tensor info", &type));
    OKV_RETURN_IF_ERROR(rd_u64(&c, "tensor info", &off));
    if (overflow)
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "gguf '%s': tensor '%s' element count overflows 64 bits",
                             g->name, qn);
    const ggml_type_info_t *ti = type_info(type);
    if (!ti)
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "gguf '%s': tensor '%s' has unknown ggml type %u", g->name,
                             qn, type);
    if (dim0 % ti->block != 0)
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                             "gguf '%s': tensor '%s' of type %s has rows of %llu elements, not a multiple of %u",
                             g->name, qn, ti->name, (unsigned long long)dim0, ti->block);
    uint64_t n_bytes;
    okv_status_t s = okv_ggml_type_size(type, n_elems, &n_bytes);
    if (s) return okv_status_annotate(s, "gguf '%s': tensor '%s'", g->name, qn);
    if (off % g->alignment != 0)
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                             "gguf '%s': tensor '%s' data offset %llu is not a multiple of the alignment %u", g->name,
                             qn, (unsigned long long)off, g->alignment);
    if (fill) g->tensor_off[i] = at;
  }
  /* The data section: after the infos, padded to the alignment. */
  uint64_t end = c.off;
  uint64_t pad = (g->alignment - end % g->alignment) % g->alignment;
  g->data_off = end + pad; /* end <= size, pad < 2^30: no overflow */
  if (g->n_tensors > 0 && g->data_off > g->size)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "gguf '%s': truncated before the data section (starts at byte %llu, the file has %llu)",
                           g->name, (unsigned long long)g->data_off, (unsigned long long)g->size);
  return OKV_OK;
}

/* Parses one tensor info at a validated offset. */
static void tensor_at_off(const okv_gguf_t *g, uint64_t at, okv_gguf_tensor_t *t) {
  const unsigned char *p = g->base + at;
  memset(t, 0, sizeof *t);
  uint64_t nlen = le64(p);
  t->name = (const char *)p + 8;
  t->name_len = (size_t)nlen;
  p += 8 + nlen;
  t->n_dims = le32(p);
  p += 4;
  uint64_t n = 1;
  for (uint32_t d = 0; d < 4; ++d) {
    t->dims[d] = d < t->n_dims ? le64(p + 8 * d) : 1;
    n *= t->dims[d];
  }
  p += 8 * t->n_dims;
  t->type = le32(p);
  uint64_t off = le64(p + 4);
  okv_status_free(okv_ggml_type_size(t->type, n, &t->n_bytes)); /* validated at open */
  t->data = g->base + g->data_off + off;
}

/* Checks each tensor's extent and the uniqueness of keys and tensor names
 * (after the index is filled and sorted). */
static okv_status_t check_index(okv_gguf_t *g) {
  for (uint64_t i = 0; i < g->n_tensors; ++i) {
    /* The info's fields (validated by parse), the extent checked before any pointer is formed. */
    const unsigned char *p = g->base + g->tensor_off[i];
    const uint64_t nlen = le64(p);
    const uint32_t n_dims = le32(p + 8 + nlen);
    uint64_t n = 1, n_bytes = 0;
    for (uint32_t d = 0; d < n_dims; ++d) n *= le64(p + 8 + nlen + 4 + 8 * d);
    const uint32_t type = le32(p + 8 + nlen + 4 + 8 * n_dims);
    const uint64_t off = le64(p + 8 + nlen + 4 + 8 * n_dims + 4);
    okv_status_free(okv_ggml_type_size(type, n, &n_bytes)); /* validated by parse */
    const uint64_t room = g->size - g->data_off;
    if (off > room || n_bytes > room - off) {
      char qn[96];
      okv_gguf_quote((const char *)p + 8, (size_t)nlen, qn, sizeof qn);
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                             "gguf '%s': tensor '%s' (%llu bytes at data offset %llu) runs past the end of the file "
                             "(%llu bytes of data)",
                             g->name, qn, (unsigned long long)n_bytes, (unsigned long long)off,
                             (unsigned long long)room);
    }
  }
  for (uint64_t i = 1; i < g->n_kv; ++i) {
    uint64_t na, nb;
    const char *a = name_at(g, g->kv_off[g->kv_sorted[i - 1]], &na);
    const char *b = name_at(g, g->kv_off[g->kv_sorted[i]], &nb);
    if (name_cmp(a, na, b, nb) == 0) {
      char qa[96];
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "gguf '%s': duplicate metadata key '%s'", g->name,
                             okv_gguf_quote(a, (size_t)na, qa, sizeof qa));
    }
  }
  for (uint64_t i = 1; i < g->n_tensors; ++i) {
    uint64_t na, nb;
    const char *a = name_at(g, g->tensor_off[g->tensor_sorted[i - 1]], &na);
    const char *b = name_at(g, g->tensor_off[g->tensor_sorted[i]], &nb);
    if (name_cmp(a, na, b, nb) == 0) {
      char qa[96];
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "gguf '%s': duplicate tensor name '%s'", g->name,
                             okv_gguf_quote(a, (size_t)na, qa, sizeof qa));
    }
  }
  return OKV_OK;
}

static uint64_t *alloc_index(okv_gguf_t *g, uint64_t n, bool *ok) {
  if (n == 0) return NULL;
  uint64_t *p = okv_malloc(&g->alloc, (size_t)n * sizeof(uint64_t)); /* n * 8 <= file size (see parse) */
  if (!p) *ok = false;
  return p;
}

/* The second pass and the index (g passed the first). */
static okv_status_t open_common(okv_gguf_t *g) {
  okv_status_t s = OKV_OK;
  bool ok = true;
  g->kv_off = alloc_index(g, g->n_kv, &ok);
  g->kv_str_base = alloc_index(g, g->n_kv, &ok);
  g->kv_sorted = alloc_index(g, g->n_kv, &ok);
  g->tensor_off = alloc_index(g, g->n_tensors, &ok);
  g->tensor_sorted = alloc_index(g, g->n_tensors, &ok);
  g->str_off = alloc_index(g, g->n_strs, &ok);
  if (!ok)
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "gguf '%s': out of memory for the index of %llu entries", g->name,
                           (unsigned long long)(g->n_kv + g->n_tensors + g->n_strs));
  s = parse(g, true);
  if (s) return s; /* cannot differ from the first pass; kept for safety */
  sort_by_name(g, g->kv_off, g->kv_sorted, g->n_kv);
  sort_by_name(g, g->tensor_off, g->tensor_sorted, g->n_tensors);
  return check_index(g);
}

/* Runs the first pass on a handle on the stack, so that a file refused there
 * costs no allocation at all, then allocates the handle (its fixed size is
 * the only allocation not bounded by the file's records). */
static okv_status_t handle_new(const okv_allocator_t *a, const char *name, const void *base, uint64_t size,
                               okv_gguf_t **out) {
  okv_gguf_t tmp;
  memset(&tmp, 0, sizeof tmp);
  tmp.alloc = a ? *a : okv_allocator_system();
  snprintf(tmp.name, sizeof tmp.name, "%s", name ? name : "<memory>");
  tmp.base = base;
  tmp.size = size;
  OKV_RETURN_IF_ERROR(parse(&tmp, false));
  okv_gguf_t *g = okv_calloc(&tmp.alloc, 1, sizeof *g);
  if (!g) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "gguf '%s': out of memory", tmp.name);
  *g = tmp;
  *out = g;
  return OKV_OK;
}

okv_status_t okv_gguf_open_memory(const void *data, size_t n_bytes, const char *name, const okv_allocator_t *a,
                                  okv_gguf_t **out) {
  if (out) *out = NULL;
  if ((!data && n_bytes) || !out)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_gguf_open_memory: NULL data or out");
  if (n_bytes < GGUF_HEADER_BYTES)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "gguf '%s': truncated header (%zu bytes, needs %u)",
                           name ? name : "<memory>", n_bytes, GGUF_HEADER_BYTES);
  okv_gguf_t *g = NULL;
  OKV_RETURN_IF_ERROR(handle_new(a, name, data, n_bytes, &g));
  okv_status_t s = open_common(g);
  if (s) {
    okv_gguf_close(g);
    return s;
  }
  *out = g;
  return OKV_OK;
}

okv_status_t okv_gguf_open(const char *path, const okv_allocator_t *a, okv_gguf_t **out) {
  if (out) *out = NULL;
  if (!path || !out) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_gguf_open: NULL path or out");
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    return okv_status_make(e == ENOENT ? OKV_STATUS_NOT_FOUND : OKV_STATUS_IO_ERROR, "gguf '%s': %s", path,
                           strerror(e));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return okv_status_make(OKV_STATUS_IO_ERROR, "gguf '%s': fstat: %s", path, strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return okv_status_make(OKV_STATUS_IO_ERROR, "gguf '%s': not a regular file", path);
  }
  if ((uint64_t)st.st_size < GGUF_HEADER_BYTES) {
    close(fd);
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "gguf '%s': truncated header (%lld bytes, needs %u)", path,
                           (long long)st.st_size, GGUF_HEADER_BYTES);
  }
  if ((uint64_t)st.st_size > SIZE_MAX) {
    close(fd);
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "gguf '%s': too large for this address space", path);
  }
  void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  int e = errno;
  close(fd);
  if (map == MAP_FAILED) return okv_status_make(OKV_STATUS_IO_ERROR, "gguf '%s': mmap: %s", path, strerror(e));
  okv_gguf_t *g = NULL;
  okv_status_t s = handle_new(a, path, map, (uint64_t)st.st_size, &g);
  if (s) {
    munmap(map, (size_t)st.st_size);
    return s;
  }
  g->map = map;
  g->map_len = (size_t)st.st_size;
  s = open_common(g);
  if (s) {
    okv_gguf_close(g);
    return s;
  }
  *out = g;
  return OKV_OK;
}

void okv_gguf_close(okv_gguf_t *g) {
  if (!g) return;
  okv_allocator_t a = g->alloc;
  uint64_t *arrays[] = {g->kv_off, g->kv_str_base, g->kv_sorted, g->tensor_off, g->tensor_sorted, g->str_off};
  for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; ++i)
    if (arrays[i]) okv_free(&a, arrays[i]);
  if (g->map) munmap(g->map, g->map_len);
  okv_free(&a, g);
}

const char *okv_gguf_name(const okv_gguf_t *g) { return g->name; }
uint32_t okv_gguf_version(const okv_gguf_t *g) { return g->version; }
uint64_t okv_gguf_file_size(const okv_gguf_t *g) { return g->size; }
uint32_t okv_gguf_alignment(const okv_gguf_t *g) { return g->alignment; }

/* ---- metadata lookups ---- */

/* Finds `key`: its value type and the offset of its value. */
static okv_status_t find_kv(const okv_gguf_t *g, const char *key, uint64_t *out_i, uint32_t *out_type,
                            uint64_t *out_val) {
  if (!g || !key) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_gguf: NULL handle or key");
  uint64_t i = find_sorted(g, g->kv_off, g->kv_sorted, g->n_kv, key);
  if (i == UINT64_MAX)
    return okv_status_make(OKV_STATUS_NOT_FOUND, "gguf '%s': no metadata key '%s'", g->name, quoted(key).s);
  uint64_t klen;
  name_at(g, g->kv_off[i], &klen);
  uint64_t at = g->kv_off[i] + 8 + klen;
  *out_i = i;
  *out_type = le32(g->base + at);
  *out_val = at + 4;
  return OKV_OK;
}

static okv_status_t wrong_type(const okv_gguf_t *g, const char *key, uint32_t t, const char *want) {
  return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "gguf '%s': key '%s' has type %s, expected %s", g->name,
                         quoted(key).s, value_type_name(t), want);
}

okv_status_t okv_gguf_get_u32(const okv_gguf_t *g, const char *key, uint32_t *out) {
  uint64_t i = 0, v = 0;
  uint32_t t = 0;
  OKV_RETURN_IF_ERROR(find_kv(g, key, &i, &t, &v));
  int64_t sv = 0;
  uint64_t uv = 0;
  bool is_signed;
  if (!int_value(g->base + v, t, &sv, &uv, &is_signed)) return wrong_type(g, key, t, "an integer");
  if (is_signed && sv < 0)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "gguf '%s': key '%s' = %lld is negative", g->name,
                           quoted(key).s, (long long)sv);
  if (is_signed) uv = (uint64_t)sv;
  if (uv > UINT32_MAX)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "gguf '%s': key '%s' = %llu does not fit 32 bits", g->name,
                           quoted(key).s, (unsigned long long)uv);
  *out = (uint32_t)uv;
  return OKV_OK;
}

okv_status_t okv_gguf_get_f32(const okv_gguf_t *g, const char *key, float *out) {
  uint64_t i = 0, v = 0;
  uint32_t t = 0;
  OKV_RETURN_IF_ERROR(find_kv(g, key, &i, &t, &v));
  if (t == OKV_GGUF_F32) {
    uint32_t b = le32(g->base + v);
    memcpy(out, &b, sizeof b);
    return OKV_OK;
  }
  if (t == OKV_GGUF_F64) {
    uint64_t b = le64(g->base + v);
    double d;
    memcpy(&d, &b, sizeof d);
    *out = (float)d;
    return OKV_OK;
  }
  return wrong_type(g, key, t, "f32 or f64");
}

okv_status_t okv_gguf_get_bool(const okv_gguf_t *g, const char *key, bool *out) {
  uint64_t i = 0, v = 0;
  uint32_t t = 0;
  OKV_RETURN_IF_ERROR(find_kv(g, key, &i, &t, &v));
  if (t != OKV_GGUF_BOOL) return wrong_type(g, key, t, "bool");
  *out = g->base[v] != 0;
  return OKV_OK;
}

okv_status_t okv_gguf_get_str(const okv_gguf_t *g, const char *key, const char **out_ptr, size_t *out_len) {
  uint64_t i = 0, v = 0;
  uint32_t t = 0;
  OKV_RETURN_IF_ERROR(find_kv(g, key, &i, &t, &v));
  if (t != OKV_GGUF_STRING) return wrong_type(g, key, t, "string");
  *out_len = (size_t)le64(g->base + v);
  *out_ptr = (const char *)g->base + v + 8;
  return OKV_OK;
}

okv_status_t okv_gguf_get_arr(const okv_gguf_t *g, const char *key, okv_gguf_type_t *out_elem, uint64_t *out_n,
                              const void **out_data) {
  uint64_t i = 0, v = 0;
  uint32_t t = 0;
  OKV_RETURN_IF_ERROR(find_kv(g, key, &i, &t, &v));
  if (t != OKV_GGUF_ARRAY) return wrong_type(g, key, t, "array");
  if (out_elem) *out_elem = (okv_gguf_type_t)le32(g->base + v);
  if (out_n) *out_n = le64(g->base + v + 4);
  if (out_data) *out_data = g->base + v + 12;
  return OKV_OK;
}

okv_status_t okv_gguf_get_arr_str(const okv_gguf_t *g, const char *key, uint64_t idx, const char **out_ptr,
                                  size_t *out_len) {
  uint64_t i = 0, v = 0;
  uint32_t t = 0;
  OKV_RETURN_IF_ERROR(find_kv(g, key, &i, &t, &v));
  if (t != OKV_GGUF_ARRAY || le32(g->base + v) != OKV_GGUF_STRING) return wrong_type(g, key, t, "array of strings");
  uint64_t n = le64(g->base + v + 4);
  if (idx >= n)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "gguf '%s': index %llu out of range of '%s' (%llu strings)",
                           g->name, (unsigned long long)idx, quoted(key).s, (unsigned long long)n);
  uint64_t at = g->str_off[g->kv_str_base[i] + idx];
  *out_len = (size_t)le64(g->base + at);
  *out_ptr = (const char *)g->base + at + 8;
  return OKV_OK;
}

uint64_t okv_gguf_kv_count(const okv_gguf_t *g) { return g ? g->n_kv : 0; }

okv_status_t okv_gguf_kv_at(const okv_gguf_t *g, uint64_t i, const char **out_key, size_t *out_key_len,
                            okv_gguf_type_t *out_type, okv_gguf_type_t *out_elem, uint64_t *out_n) {
  if (!g || i >= g->n_kv)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_gguf_kv_at: index %llu out of range (%llu entries)",
                           (unsigned long long)i, (unsigned long long)(g ? g->n_kv : 0));
  uint64_t klen;
  const char *k = name_at(g, g->kv_off[i], &klen);
  const unsigned char *p = g->base + g->kv_off[i] + 8 + klen;
  uint32_t t = le32(p);
  if (out_key) *out_key = k;
  if (out_key_len) *out_key_len = (size_t)klen;
  if (out_type) *out_type = (okv_gguf_type_t)t;
  if (out_elem) *out_elem = t == OKV_GGUF_ARRAY ? (okv_gguf_type_t)le32(p + 4) : (okv_gguf_type_t)0;
  if (out_n) *out_n = t == OKV_GGUF_ARRAY ? le64(p + 8) : 0;
  return OKV_OK;
}

/* ---- tensors ---- */

uint64_t okv_gguf_tensor_count(const okv_gguf_t *g) { return g ? g->n_tensors : 0; }

okv_status_t okv_gguf_tensor_at(const okv_gguf_t *g, uint64_t i, okv_gguf_tensor_t *out) {
  if (!g || !out || i >= g->n_tensors)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_gguf_tensor_at: index %llu out of range (%llu tensors)",
                           (unsigned long long)i, (unsigned long long)(g ? g->n_tensors : 0));
  tensor_at_off(g, g->tensor_off[i], out);
  return OKV_OK;
}

okv_status_t okv_gguf_tensor_find(const okv_gguf_t *g, const char *name, okv_gguf_tensor_t *out) {
  if (!g || !name || !out) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_gguf_tensor_find: NULL argument");
  uint64_t i = find_sorted(g, g->tensor_off, g->tensor_sorted, g->n_tensors, name);
  if (i == UINT64_MAX)
    return okv_status_make(OKV_STATUS_NOT_FOUND, "gguf '%s': no tensor '%s'", g->name, quoted(name).s);
  tensor_at_off(g, g->tensor_off[i], out);
  return OKV_OK;
}
