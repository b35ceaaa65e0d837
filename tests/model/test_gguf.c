/* GGUF: the reader (tools/model/gguf.c), the llama-architecture loader
 * (tools/model/gguf_model.c) and the dequantisers, with files written by the
 * test writer (gguf_writer.c) and the shared stories260K.gguf.
 *  - dequantisation of hand-computed blocks of F16, BF16, Q8_0 and Q4_0;
 *  - metadata of every type, alignment, versions;
 *  - stories260K.gguf against stories260K.bin: same tensors bit for bit, RoPE
 *    tables within one ulp, dense logits (bit for bit with the .bin's RoPE
 *    tables; measured difference otherwise), greedy text;
 *  - stories15M.bin converted to F32, F16, BF16, Q8_0 and Q4_0: dense NLL;
 *  - bad files (truncations at every section boundary, lengths, counts and
 *    offsets past the end or overflowing, unknown types and architectures, a
 *    vocabulary disagreeing with the embedding, ...): each refused with one
 *    line, through a counting allocator whose largest block is at most the
 *    file's size.
 * argv[1]: the shared directory. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/common/test_common.h"
#include "tests/model/gguf_writer.h"
#include "tests/model/model_test_util.h"
#include "tools/model/gguf.h"

static const char *g_shared;

/* <shared>/<rel> into out; skips the test when it does not exist. */
static bool shared_path(const char *rel, char *out, size_t cap) {
  snprintf(out, cap, "%s/%s", g_shared, rel);
  struct stat st;
  if (stat(out, &st) != 0) {
    print_message("skipping: %s not found\n", out);
    return false;
  }
  return true;
}

/* ---- a counting allocator ---- */

typedef struct count_alloc_t {
  size_t max_single, outstanding, n_calls;
} count_alloc_t;

static void note(count_alloc_t *c, size_t n) {
  if (n > c->max_single) c->max_single = n;
  c->n_calls++;
}
static void *ca_malloc(void *self, size_t n) {
  note(self, n);
  void *p = malloc(n ? n : 1);
  if (p) ((count_alloc_t *)self)->outstanding++;
  return p;
}
static void *ca_calloc(void *self, size_t c, size_t n) {
  note(self, c * n);
  void *p = calloc(c ? c : 1, n ? n : 1);
  if (p) ((count_alloc_t *)self)->outstanding++;
  return p;
}
static void *ca_realloc(void *self, void *p, size_t n) {
  note(self, n);
  if (!p) ((count_alloc_t *)self)->outstanding++;
  return realloc(p, n ? n : 1);
}
static void ca_free(void *self, void *p) {
  if (p) ((count_alloc_t *)self)->outstanding--;
  free(p);
}
static okv_allocator_t counting(count_alloc_t *c) {
  memset(c, 0, sizeof *c);
  okv_allocator_t a = {c, ca_malloc, ca_calloc, ca_realloc, ca_free};
  return a;
}

/* ---- dequantisation of hand-computed blocks ---- */

static void test_fp16_bf16(void **state) {
  (void)state;
  const struct {
    uint16_t h;
    float f;
  } f16[] = {{0x3C00, 1.0f},       {0xC000, -2.0f},    {0x7BFF, 65504.0f},        {0x0001, 0x1p-24f},
             {0x03FF, 0x3FFp-24f}, {0x0400, 0x1p-14f}, {0x3555, 0.333251953125f}, {0x3800, 0.5f},
             {0xFBFF, -65504.0f},  {0x2C00, 0.0625f}};
  for (size_t i = 0; i < sizeof f16 / sizeof f16[0]; ++i) {
    assert_true(okv_f16_to_f32(f16[i].h) == f16[i].f);
    assert_int_equal(okv_f32_to_f16(f16[i].f), f16[i].h); /* the writer's conversion */
  }
  assert_true(okv_f16_to_f32(0x8000) == 0.0f && signbit(okv_f16_to_f32(0x8000)));
  assert_true(isinf(okv_f16_to_f32(0x7C00)) && okv_f16_to_f32(0xFC00) < 0);
  assert_true(isnan(okv_f16_to_f32(0x7E00)));
  /* f32 -> f16 rounding: to nearest, ties to even; overflow to inf. */
  assert_int_equal(okv_f32_to_f16(1.0f + 0x1p-11f), 0x3C00); /* tie, even stays */
  assert_int_equal(okv_f32_to_f16(1.0f + 0x3p-11f), 0x3C02); /* tie, rounds up to even */
  assert_int_equal(okv_f32_to_f16(0x1p-25f), 0x0000);        /* tie at half the smallest subnormal */
  assert_int_equal(okv_f32_to_f16(0x3p-25f), 0x0002);        /* 1.5 units: to even 2 */
  assert_int_equal(okv_f32_to_f16(65519.0f), 0x7BFF);        /* below the halfway point */
  assert_int_equal(okv_f32_to_f16(65520.0f), 0x7C00);        /* halfway: to inf */
  const struct {
    uint16_t h;
    float f;
  } bf[] = {{0x3F80, 1.0f}, {0xC040, -3.0f}, {0x4049, 3.140625f}, {0x0001, 0x1p-133f}, {0x7F7F, 0x1.FEp127f}};
  for (size_t i = 0; i < sizeof bf / sizeof bf[0]; ++i) {
    assert_true(okv_bf16_to_f32(bf[i].h) == bf[i].f);
    assert_int_equal(okv_f32_to_bf16(bf[i].f), bf[i].h);
  }
  assert_int_equal(okv_f32_to_bf16(1.0f + 0x1p-8f), 0x3F80); /* tie: even */
  assert_int_equal(okv_f32_to_bf16(1.0f + 0x3p-8f), 0x3F82);
}

static void test_dequantize_blocks(void **state) {
  (void)state;
  /* Q8_0: d = 0.5 (f16 0x3800), q_j = j - 16; then d = 2^-4, q = 127, -128, 1, -1, 0... */
  unsigned char q8[1 + 2 * 34];
  unsigned char *b = q8 + 1; /* unaligned on purpose */
  b[0] = 0x00;
  b[1] = 0x38;
  for (int j = 0; j < 32; ++j) b[2 + j] = (unsigned char)(int8_t)(j - 16);
  b[34] = 0x00;
  b[35] = 0x2C;
  const int8_t q2[4] = {127, -128, 1, -1};
  for (int j = 0; j < 32; ++j) b[36 + j] = (unsigned char)(j < 4 ? q2[j] : 0);
  float y[64];
  OKV_ASSERT_OK(okv_ggml_dequantize(OKV_GGML_TYPE_Q8_0, b, 64, y));
  for (int j = 0; j < 32; ++j) assert_true(y[j] == 0.5f * (float)(j - 16));
  assert_true(y[32] == 7.9375f && y[33] == -8.0f && y[34] == 0.0625f && y[35] == -0.0625f);
  for (int j = 36; j < 64; ++j) assert_true(y[j] == 0.0f);
  /* Q4_0: d = 0.25 (0x3400); byte j holds element j (low nibble j & 15) and element j+16 (high nibble 15 - j). */
  unsigned char q4[1 + 18];
  b = q4 + 1;
  b[0] = 0x00;
  b[1] = 0x34;
  for (int j = 0; j < 16; ++j) b[2 + j] = (unsigned char)((j & 15) | ((15 - j) << 4));
  OKV_ASSERT_OK(okv_ggml_dequantize(OKV_GGML_TYPE_Q4_0, b, 32, y));
  for (int j = 0; j < 16; ++j) {
    assert_true(y[j] == 0.25f * (float)(j - 8));
    assert_true(y[j + 16] == 0.25f * (float)(7 - j));
  }
  /* F16 / BF16 / F32 rows, unaligned. */
  unsigned char h[1 + 6] = {0, 0x00, 0x3C, 0x00, 0xC0, 0x55, 0x35};
  OKV_ASSERT_OK(okv_ggml_dequantize(OKV_GGML_TYPE_F16, h + 1, 3, y));
  assert_true(y[0] == 1.0f && y[1] == -2.0f && y[2] == 0.333251953125f);
  unsigned char bfb[1 + 4] = {0, 0x80, 0x3F, 0x40, 0xC0};
  OKV_ASSERT_OK(okv_ggml_dequantize(OKV_GGML_TYPE_BF16, bfb + 1, 2, y));
  assert_true(y[0] == 1.0f && y[1] == -3.0f);
  unsigned char f32b[1 + 4] = {0, 0x00, 0x00, 0xC0, 0x3F};
  OKV_ASSERT_OK(okv_ggml_dequantize(OKV_GGML_TYPE_F32, f32b + 1, 1, y));
  assert_true(y[0] == 1.5f);
  /* Refusals: a partial block, a type it does not convert (named). */
  OKV_ASSERT_CODE(okv_ggml_dequantize(OKV_GGML_TYPE_Q8_0, q8 + 1, 31, y), OKV_STATUS_INVALID_ARGUMENT);
  okv_status_t s = okv_ggml_dequantize(12, q8, 256, y);
  assert_int_equal(okv_status_code(s), OKV_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(okv_status_message(s), "Q4_K"));
  okv_status_free(s);
  /* Sizes. */
  uint64_t n = 0;
  OKV_ASSERT_OK(okv_ggml_type_size(OKV_GGML_TYPE_Q4_0, 64, &n));
  assert_int_equal(n, 36);
  OKV_ASSERT_OK(okv_ggml_type_size(OKV_GGML_TYPE_Q8_0, 64, &n));
  assert_int_equal(n, 68);
  OKV_ASSERT_OK(okv_ggml_type_size(12 /* Q4_K */, 512, &n));
  assert_int_equal(n, 288);
  OKV_ASSERT_CODE(okv_ggml_type_size(OKV_GGML_TYPE_F32, UINT64_MAX / 2, &n), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_ggml_type_size(99, 32, &n), OKV_STATUS_INVALID_ARGUMENT);
  assert_null(okv_ggml_type_name(99));
  assert_string_equal(okv_ggml_type_name(30), "BF16");
}

/* The writer's quantisers against the reader's dequantisers: every element
 * within the format's bound of its f32 source. */
static void test_quantize_roundtrip(void **state) {
  (void)state;
  enum { N = 32 * 64 };
  float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
  unsigned char *q = malloc(N * 4);
  okv_test_rng_t r;
  okv_test_rng_seed(&r, 7);
  for (int i = 0; i < N; ++i) {
    double u = (double)(okv_test_rng_u64(&r) >> 11) * 0x1p-53;
    x[i] = (float)((u - 0.5) * (i % 32 == 5 ? 8.0 : 1.0)) * (float)(1 + i / 256);
  }
  const uint32_t types[] = {OKV_GGML_TYPE_F32, OKV_GGML_TYPE_F16, OKV_GGML_TYPE_BF16, OKV_GGML_TYPE_Q8_0,
                            OKV_GGML_TYPE_Q4_0};
  for (size_t t = 0; t < 5; ++t) {
    okv_gw_quantize(types[t], x, N, q);
    OKV_ASSERT_OK(okv_ggml_dequantize(types[t], q, N, y));
    for (int blk = 0; blk < N / 32; ++blk) {
      float amax = 0.0f;
      for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(x[blk * 32 + j]));
      for (int j = 0; j < 32; ++j) {
        const int i = blk * 32 + j;
        const double err = fabs((double)y[i] - x[i]);
        switch (types[t]) {
          case OKV_GGML_TYPE_F32: assert_true(err == 0.0); break;
          case OKV_GGML_TYPE_F16: assert_true(err <= fabs(x[i]) * 0x1p-11 + 0x1p-25); break;
          case OKV_GGML_TYPE_BF16: assert_true(err <= fabs(x[i]) * 0x1p-8); break;
          /* half a step of d = amax/127, plus |q| <= 127 times d's f16 rounding (<= d * 2^-11) */
          case OKV_GGML_TYPE_Q8_0: assert_true(err <= amax / 127.0 * (0.5 + 127 * 0x1p-11) * 1.001); break;
          /* d = amax/8: at most one step at the clamped end, plus |q - 8| <= 8 times d's rounding */
          default: assert_true(err <= amax / 8.0 * (1.0 + 8 * 0x1p-11) * 1.001); break;
        }
      }
    }
  }
  free(x);
  free(y);
  free(q);
}

/* ---- the reader ---- */

static void assert_msg(okv_status_t s, okv_status_code_t code, const char *needle) {
  const char *m = okv_status_message(s);
  if (okv_status_code(s) != code || !strstr(m, needle) || strchr(m, '\n')) {
    print_error("expected %s with '%s', got %s: %s\n", okv_status_code_name(code), needle,
                okv_status_code_name(okv_status_code(s)), m);
    okv_status_free(s);
    fail();
  }
  okv_status_free(s);
}

static void test_reader_metadata(void **state) {
  (void)state;
  okv_gw_t *w = okv_gw_new();
  okv_gw_kv_u32(w, "general.alignment", 64);
  okv_gw_kv_str(w, "s", "hello");
  okv_gw_kv_u32(w, "u", 4000000000u);
  okv_gw_kv_i32(w, "neg", -3);
  okv_gw_kv_i32(w, "pos", 77);
  okv_gw_kv_f32(w, "f", 0.25f);
  okv_gw_kv_bool(w, "b", true);
  const char *strs[] = {"", "a", "bc", "def"};
  okv_gw_kv_arr_str(w, "arr.s", strs, 4);
  const float fs[] = {1.5f, -2.0f};
  okv_gw_kv_arr_f32(w, "arr.f", fs, 2);
  float t1[32], t2[64];
  for (int i = 0; i < 32; ++i) t1[i] = (float)i;
  for (int i = 0; i < 64; ++i) t2[i] = (float)-i;
  const uint64_t d1[1] = {32}, d2[2] = {32, 2};
  okv_gw_tensor(w, "one", 1, d1, OKV_GGML_TYPE_F32, t1);
  okv_gw_tensor(w, "two", 2, d2, OKV_GGML_TYPE_Q8_0, t2);
  size_t n = 0;
  okv_gw_layout_t lay;
  unsigned char *file = okv_gw_serialize(w, &n, &lay);
  okv_gw_free(w);
  count_alloc_t ca;
  okv_allocator_t a = counting(&ca);
  okv_gguf_t *g = NULL;
  OKV_ASSERT_OK(okv_gguf_open_memory(file, n, "meta", &a, &g));
  assert_true(ca.max_single <= n);
  assert_int_equal(okv_gguf_version(g), 3);
  assert_int_equal(okv_gguf_alignment(g), 64);
  assert_int_equal(okv_gguf_kv_count(g), 9);
  assert_int_equal(okv_gguf_tensor_count(g), 2);
  uint32_t u = 0;
  OKV_ASSERT_OK(okv_gguf_get_u32(g, "u", &u));
  assert_int_equal(u, 4000000000u);
  OKV_ASSERT_OK(okv_gguf_get_u32(g, "pos", &u));
  assert_int_equal(u, 77);
  assert_msg(okv_gguf_get_u32(g, "neg", &u), OKV_STATUS_INVALID_ARGUMENT, "negative");
  assert_msg(okv_gguf_get_u32(g, "s", &u), OKV_STATUS_INVALID_ARGUMENT, "'s' has type string");
  assert_msg(okv_gguf_get_u32(g, "absent", &u), OKV_STATUS_NOT_FOUND, "absent");
  assert_msg(okv_gguf_get_u32(g, "two\nlines", &u), OKV_STATUS_NOT_FOUND, "'two\\x0alines'"); /* quoted: one line */
  char qb[16];
  assert_string_equal(okv_gguf_quote("ab\x01\\c", 5, qb, sizeof qb), "ab\\x01\\x5cc");
  assert_string_equal(okv_gguf_quote("0123456789abcdef", 16, qb, sizeof qb), "0123456789ab..."); /* 15 + NUL */
  float f = 0;
  OKV_ASSERT_OK(okv_gguf_get_f32(g, "f", &f));
  assert_true(f == 0.25f);
  bool bo = false;
  OKV_ASSERT_OK(okv_gguf_get_bool(g, "b", &bo));
  assert_true(bo);
  const char *p;
  size_t len;
  OKV_ASSERT_OK(okv_gguf_get_str(g, "s", &p, &len));
  assert_int_equal(len, 5);
  assert_memory_equal(p, "hello", 5);
  okv_gguf_type_t et;
  uint64_t cnt;
  const void *data;
  OKV_ASSERT_OK(okv_gguf_get_arr(g, "arr.f", &et, &cnt, &data));
  assert_int_equal(et, OKV_GGUF_F32);
  assert_int_equal(cnt, 2);
  float f2[2];
  memcpy(f2, data, sizeof f2);
  assert_true(f2[0] == 1.5f && f2[1] == -2.0f);
  for (uint64_t i = 0; i < 4; ++i) {
    OKV_ASSERT_OK(okv_gguf_get_arr_str(g, "arr.s", i, &p, &len));
    assert_int_equal(len, strlen(strs[i]));
    assert_memory_equal(p, strs[i], len);
  }
  assert_msg(okv_gguf_get_arr_str(g, "arr.s", 4, &p, &len), OKV_STATUS_INVALID_ARGUMENT, "out of range");
  assert_msg(okv_gguf_get_arr_str(g, "arr.f", 0, &p, &len), OKV_STATUS_INVALID_ARGUMENT, "array of strings");
  okv_gguf_tensor_t t;
  OKV_ASSERT_OK(okv_gguf_tensor_find(g, "two", &t));
  assert_int_equal(t.type, OKV_GGML_TYPE_Q8_0);
  assert_int_equal(t.n_dims, 2);
  assert_true(t.dims[0] == 32 && t.dims[1] == 2 && t.dims[2] == 1);
  assert_int_equal(t.n_bytes, 68);
  assert_int_equal((const unsigned char *)t.data - file, lay.tensor_off[1]);
  assert_int_equal(((const unsigned char *)t.data - file) % 64, 0);
  OKV_ASSERT_OK(okv_gguf_tensor_at(g, 0, &t));
  assert_int_equal(t.name_len, 3);
  assert_memory_equal(t.name, "one", 3);
  assert_memory_equal(t.data, t1, sizeof t1);
  assert_msg(okv_gguf_tensor_find(g, "three", &t), OKV_STATUS_NOT_FOUND, "three");
  OKV_ASSERT_CODE(okv_gguf_tensor_at(g, 2, &t), OKV_STATUS_INVALID_ARGUMENT);
  okv_gguf_close(g);
  assert_int_equal(ca.outstanding, 0);
  /* Version 2 reads the same; 1 and a byte-swapped 3 are refused. */
  file[4] = 2;
  OKV_ASSERT_OK(okv_gguf_open_memory(file, n, "v2", NULL, &g));
  okv_gguf_close(g);
  file[4] = 1;
  assert_msg(okv_gguf_open_memory(file, n, "v1", NULL, &g), OKV_STATUS_INVALID_ARGUMENT, "unsupported version 1");
  file[4] = 0;
  file[7] = 3;
  assert_msg(okv_gguf_open_memory(file, n, "be", NULL, &g), OKV_STATUS_INVALID_ARGUMENT, "big-endian");
  file[7] = 0;
  file[4] = 3;
  file[0] = 'X';
  assert_msg(okv_gguf_open_memory(file, n, "magic", NULL, &g), OKV_STATUS_INVALID_ARGUMENT, "not a GGUF file");
  assert_null(g);
  free(file);
}

/* ---- a tiny llama model, and its bad variants ---- */

enum { TD = 32, TH = 64, TL = 2, TQH = 4, TKVH = 2, THD = 8, TV = 40, TCTX = 64 };

typedef struct tiny_opts_t {
  const char *arch;
  uint32_t n_tokens; /* tokenizer.ggml.tokens entries (0: none) */
  uint32_t type;     /* the matrices' type */
  bool rope_freqs;
  const char *scaling; /* rope.scaling.type, NULL: none written */
  float scaling_factor;
  const char *skip;      /* a tensor left out */
  const char *extra;     /* an unexpected tensor */
  const char *misshapen; /* a tensor written with dims swapped */
  uint32_t odd_type;     /* when nonzero: attn_q of this type (raw bytes) */
  bool tied;             /* no output.weight */
} tiny_opts_t;

static tiny_opts_t tiny_default(void) {
  tiny_opts_t o;
  memset(&o, 0, sizeof o);
  o.arch = "llama";
  o.n_tokens = TV;
  o.type = OKV_GGML_TYPE_F32;
  return o;
}

static float tiny_val(uint64_t i, uint64_t salt) {
  uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (salt * 0xD1B54A32D192ED03ull);
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return (float)((double)(x >> 11) * 0x1p-53 - 0.5);
}

static void tiny_tensor(okv_gw_t *w, const tiny_opts_t *o, const char *name, uint64_t ne0, uint64_t ne1, uint32_t type,
                        uint64_t salt) {
  if (o->skip && !strcmp(o->skip, name)) return;
  uint64_t n = ne0 * (ne1 ? ne1 : 1);
  float *v = malloc(n * sizeof *v);
  for (uint64_t i = 0; i < n; ++i) v[i] = ne1 ? tiny_val(i, salt) : 1.0f + 0.1f * tiny_val(i, salt);
  uint64_t dims[2] = {ne0, ne1};
  if (o->misshapen && !strcmp(o->misshapen, name)) {
    dims[0] = ne1 ? ne1 : ne0;
    dims[1] = ne1 ? ne0 : 2;
    ne1 = 1;
  }
  if (o->odd_type && strstr(name, "attn_q")) {
    uint64_t bytes = 0;
    okv_status_free(okv_ggml_type_size(o->odd_type, n, &bytes));
    unsigned char *raw = calloc(bytes ? bytes : 1, 1);
    okv_gw_tensor_raw(w, name, 2, dims, o->odd_type, raw, (size_t)bytes);
    free(raw);
  } else {
    okv_gw_tensor(w, name, ne1 ? 2 : 1, dims, ne1 ? type : OKV_GGML_TYPE_F32, v);
  }
  free(v);
}

static okv_gw_t *tiny_model(const tiny_opts_t *o) {
  okv_gw_t *w = okv_gw_new();
  okv_gw_kv_str(w, "general.architecture", o->arch);
  char key[96];
#define ARCH_KEY(k) (snprintf(key, sizeof key, "%s.%s", o->arch, k), key)
  okv_gw_kv_u32(w, ARCH_KEY("context_length"), TCTX);
  okv_gw_kv_u32(w, ARCH_KEY("embedding_length"), TD);
  okv_gw_kv_u32(w, ARCH_KEY("feed_forward_length"), TH);
  okv_gw_kv_u32(w, ARCH_KEY("block_count"), TL);
  okv_gw_kv_u32(w, ARCH_KEY("attention.head_count"), TQH);
  okv_gw_kv_u32(w, ARCH_KEY("attention.head_count_kv"), TKVH);
  okv_gw_kv_u32(w, ARCH_KEY("rope.dimension_count"), THD);
  okv_gw_kv_f32(w, ARCH_KEY("rope.freq_base"), 500000.0f);
  okv_gw_kv_f32(w, ARCH_KEY("attention.layer_norm_rms_epsilon"), 1e-6f);
  if (o->scaling) {
    okv_gw_kv_str(w, ARCH_KEY("rope.scaling.type"), o->scaling);
    okv_gw_kv_f32(w, ARCH_KEY("rope.scaling.factor"), o->scaling_factor);
  }
#undef ARCH_KEY
  if (o->n_tokens) {
    char **toks = malloc(o->n_tokens * sizeof *toks);
    for (uint32_t i = 0; i < o->n_tokens; ++i) {
      toks[i] = malloc(16);
      snprintf(toks[i], 16, "t%u", i);
    }
    okv_gw_kv_str(w, "tokenizer.ggml.model", "llama");
    okv_gw_kv_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks, o->n_tokens);
    for (uint32_t i = 0; i < o->n_tokens; ++i) free(toks[i]);
    free(toks);
  }
  tiny_tensor(w, o, "token_embd.weight", TD, TV, o->type, 1);
  tiny_tensor(w, o, "output_norm.weight", TD, 0, 0, 2);
  if (!o->tied) tiny_tensor(w, o, "output.weight", TD, TV, o->type, 3);
  if (o->rope_freqs) {
    const float fac[THD / 2] = {1.0f, 2.0f, 4.0f, 8.0f};
    const uint64_t d[1] = {THD / 2};
    okv_gw_tensor(w, "rope_freqs.weight", 1, d, OKV_GGML_TYPE_F32, fac);
  }
  for (uint32_t l = 0; l < TL; ++l) {
    char name[64];
    const struct {
      const char *s;
      uint64_t ne0, ne1;
    } ts[] = {{"attn_norm", TD, 0},       {"attn_q", TD, TD},      {"attn_k", TD, TKVH * THD},
              {"attn_v", TD, TKVH * THD}, {"attn_output", TD, TD}, {"ffn_norm", TD, 0},
              {"ffn_gate", TD, TH},       {"ffn_down", TH, TD},    {"ffn_up", TD, TH}};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) {
      snprintf(name, sizeof name, "blk.%u.%s.weight", l, ts[i].s);
      tiny_tensor(w, o, name, ts[i].ne0, ts[i].ne1, o->type, 10 + 10 * l + i);
    }
  }
  if (o->extra) {
    float z[TD] = {0};
    const uint64_t d[1] = {TD};
    okv_gw_tensor(w, o->extra, 1, d, OKV_GGML_TYPE_F32, z);
  }
  return w;
}

/* The reader's handle: a fixed size (about 400 bytes, a copy of the name
 * included), the one allocation not bounded by the file's own records. A file
 * refused by the reader itself allocates nothing (its first pass runs before
 * the handle exists). */
#define HANDLE_BYTES 512u

/* Opens and loads `file` through a counting allocator: returns the status
 * code, asserts on a failure a one-line message holding `needle`, that no
 * single allocation exceeded the file's size (or the fixed handle) and
 * nothing leaked. */
static okv_status_code_t load_counted(const unsigned char *file, size_t n, const char *needle) {
  count_alloc_t ca;
  okv_allocator_t a = counting(&ca);
  okv_model_t *m = (okv_model_t *)(uintptr_t)1;
  okv_status_t s = okv_model_load_memory(file, n, "bad", &a, &m);
  okv_status_code_t code = okv_status_code(s);
  if (s) {
    assert_null(m);
    if (needle)
      assert_msg(s, code, needle);
    else
      okv_status_free(s);
    if (ca.max_single > (n > HANDLE_BYTES ? n : HANDLE_BYTES)) {
      print_error("a refused file of %zu bytes made an allocation of %zu bytes\n", n, ca.max_single);
      fail();
    }
  } else {
    okv_model_free(m);
  }
  assert_int_equal(ca.outstanding, 0);
  return code;
}

static void expect_refused(const tiny_opts_t *o, const char *needle) {
  okv_gw_t *w = tiny_model(o);
  size_t n = 0;
  unsigned char *file = okv_gw_serialize(w, &n, NULL);
  okv_gw_free(w);
  assert_int_equal(load_counted(file, n, needle), OKV_STATUS_INVALID_ARGUMENT);
  free(file);
}

static void test_tiny_model_loads(void **state) {
  (void)state;
  tiny_opts_t o = tiny_default();
  okv_gw_t *w = tiny_model(&o);
  size_t n = 0;
  unsigned char *file = okv_gw_serialize(w, &n, NULL);
  okv_gw_free(w);
  okv_allocator_t ta = okv_test_allocator();
  okv_model_t *m = NULL;
  OKV_ASSERT_OK(okv_model_load_memory(file, n, "tiny", &ta, &m));
  const okv_model_config_t *c = &m->config;
  assert_int_equal(c->dim, TD);
  assert_int_equal(c->hidden_dim, TH);
  assert_int_equal(c->n_layers, TL);
  assert_int_equal(c->n_q_heads, TQH);
  assert_int_equal(c->n_kv_heads, TKVH);
  assert_int_equal(c->head_dim, THD);
  assert_int_equal(c->vocab_size, TV);
  assert_int_equal(c->seq_len, TCTX);
  assert_true(c->rms_eps == 1e-6f && c->rope_theta == 500000.0f && c->rope_pos_scale == 1.0f);
  assert_false(c->shared_classifier);
  assert_null(m->rope_freq_factors);
  /* Weights land where okv_model_t says: blk.1.ffn_down (salt 10 + 10 + 7) element 5 is at w2 + 1*D*H + 5. */
  assert_true(m->w2[(size_t)TD * TH + 5] == tiny_val(5, 27));
  assert_true(m->wk[(size_t)TKVH * THD * TD + 3] == tiny_val(3, 22));
  assert_true(m->classifier[7] == tiny_val(7, 3));
  assert_true(m->rms_final[0] == 1.0f + 0.1f * tiny_val(0, 2));
  /* RoPE: theta 500000 computed (no tables in the file). */
  for (uint32_t p = 0; p < TCTX; p += 7)
    for (uint32_t j = 0; j < THD / 2; ++j) {
      double ang = p * pow(500000.0, -2.0 * j / THD);
      assert_true(fabs(m->rope_cos[p * 4 + j] - cos(ang)) < 1e-5);
      assert_true(fabs(m->rope_sin[p * 4 + j] - sin(ang)) < 1e-5);
    }
  okv_model_free(m);
  /* Tied classifier; a context override. */
  o.tied = true;
  w = tiny_model(&o);
  free(file);
  file = okv_gw_serialize(w, &n, NULL);
  okv_gw_free(w);
  okv_gguf_t *g = NULL;
  OKV_ASSERT_OK(okv_gguf_open_memory(file, n, "tied", &ta, &g));
  okv_model_load_options_t opt = {.context_length = 1000};
  OKV_ASSERT_OK(okv_model_load_gguf(g, &opt, &ta, &m));
  assert_true(m->config.shared_classifier && m->classifier == m->token_embedding);
  assert_int_equal(m->config.seq_len, 1000);
  okv_model_config_t cc;
  uint64_t f32_bytes = 0;
  OKV_ASSERT_OK(okv_model_gguf_config(g, NULL, &cc, &f32_bytes));
  assert_int_equal(cc.seq_len, TCTX);
  const uint64_t weights =
      (uint64_t)TV * TD + 2 * TL * TD + TL * (2 * TD * TD + 2 * TKVH * THD * TD + 3 * TD * TH) + TD;
  assert_int_equal(f32_bytes, 4 * (weights + 2 * TCTX * THD / 2));
  okv_model_free(m);
  okv_gguf_close(g);
  free(file);
}

/* Llama 3's rope_freqs and linear scaling: angle = (p / factor) * theta^(-2j/hd) / freq_j. */
static void test_rope_freqs_and_scaling(void **state) {
  (void)state;
  tiny_opts_t o = tiny_default();
  o.rope_freqs = true;
  o.scaling = "linear";
  o.scaling_factor = 2.0f;
  okv_gw_t *w = tiny_model(&o);
  size_t n = 0;
  unsigned char *file = okv_gw_serialize(w, &n, NULL);
  okv_gw_free(w);
  okv_allocator_t ta = okv_test_allocator();
  okv_model_t *m = NULL;
  OKV_ASSERT_OK(okv_model_load_memory(file, n, "llama3ish", &ta, &m));
  assert_non_null(m->rope_freq_factors);
  assert_true(m->rope_freq_factors[3] == 8.0f);
  assert_true(m->config.rope_pos_scale == 0.5f);
  for (uint32_t p = 0; p < TCTX; ++p)
    for (uint32_t j = 0; j < THD / 2; ++j) {
      double ang = p * 0.5 * pow(500000.0, -2.0 * j / THD) / (double)(1u << j);
      assert_true(fabs(m->rope_cos[p * 4 + j] - cos(ang)) < 1e-5);
      assert_true(fabs(m->rope_sin[p * 4 + j] - sin(ang)) < 1e-5);
    }
  okv_model_free(m);
  free(file);
  o.scaling = "yarn";
  expect_refused(&o, "rope.scaling.type 'yarn' is not supported");
}

static void test_bad_models(void **state) {
  (void)state;
  tiny_opts_t o = tiny_default();
  o.arch = "qwen2";
  expect_refused(&o, "architecture 'qwen2' is not supported");
  o = tiny_default();
  o.n_tokens = TV - 1;
  expect_refused(&o, "the vocabulary has 39 tokens but token_embd.weight has 40 rows");
  o = tiny_default();
  o.skip = "blk.1.ffn_up.weight";
  expect_refused(&o, "missing tensor blk.1.ffn_up.weight");
  o = tiny_default();
  o.extra = "blk.0.attn_q.bias";
  expect_refused(&o, "unexpected tensor 'blk.0.attn_q.bias'");
  o = tiny_default();
  o.extra = "blk.2.attn_norm.weight"; /* a layer past block_count */
  expect_refused(&o, "unexpected tensor 'blk.2.attn_norm.weight'");
  o = tiny_default();
  o.misshapen = "blk.0.attn_k.weight";
  expect_refused(&o, "tensor 'blk.0.attn_k.weight' has shape [16, 32");
  o = tiny_default();
  o.odd_type = 3; /* Q4_1: the reader knows its size, the loader refuses it by name */
  expect_refused(&o, "has type Q4_1, which is not supported");
  o = tiny_default();
  o.skip = "token_embd.weight";
  expect_refused(&o, "no tensor token_embd.weight");
  /* Missing and out-of-range hyperparameters. */
  okv_gw_t *w = okv_gw_new();
  okv_gw_kv_str(w, "general.architecture", "llama");
  size_t n = 0;
  unsigned char *file = okv_gw_serialize(w, &n, NULL);
  okv_gw_free(w);
  assert_int_equal(load_counted(file, n, "missing hyperparameter llama.block_count"), OKV_STATUS_INVALID_ARGUMENT);
  free(file);
  w = okv_gw_new();
  file = okv_gw_serialize(w, &n, NULL);
  okv_gw_free(w);
  assert_int_equal(load_counted(file, n, "no general.architecture"), OKV_STATUS_INVALID_ARGUMENT);
  free(file);
  /* A context override past the limit. */
  o = tiny_default();
  w = tiny_model(&o);
  file = okv_gw_serialize(w, &n, NULL);
  okv_gw_free(w);
  okv_gguf_t *g = NULL;
  OKV_ASSERT_OK(okv_gguf_open_memory(file, n, "tiny", NULL, &g));
  okv_model_load_options_t opt = {.context_length = (1u << 20) + 1};
  okv_model_t *m = NULL;
  assert_msg(okv_model_load_gguf(g, &opt, NULL, &m), OKV_STATUS_INVALID_ARGUMENT, "context length");
  okv_gguf_close(g);
  free(file);
}

static void put_le64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = (unsigned char)(v >> (8 * i));
}

/* Offset of the tensor info of `name` (its name length field) in a serialised file. */
static size_t find_info(const unsigned char *file, size_t n, const char *name) {
  size_t ln = strlen(name);
  for (size_t i = 0; i + 8 + ln <= n; ++i) {
    uint64_t v = 0;
    for (int k = 7; k >= 0; --k) v = (v << 8) | file[i + k];
    if (v == ln && !memcmp(file + i + 8, name, ln)) return i;
  }
  fail_msg("no info for %s", name);
  return 0;
}

static void test_bad_files(void **state) {
  (void)state;
  tiny_opts_t o = tiny_default();
  o.type = OKV_GGML_TYPE_Q8_0;
  okv_gw_t *w = tiny_model(&o);
  size_t n = 0;
  okv_gw_layout_t L;
  unsigned char *file = okv_gw_serialize(w, &n, &L);
  okv_gw_free(w);
  assert_int_equal(load_counted(file, n, NULL), OKV_STATUS_OK);
  /* Truncated at (and one byte before) every section boundary. */
  size_t cuts[256], n_cuts = 0;
  cuts[n_cuts++] = 0;
  cuts[n_cuts++] = 4;
  cuts[n_cuts++] = L.header_end - 1;
  cuts[n_cuts++] = L.header_end;
  for (size_t i = 0; i < L.n_kv; ++i) {
    cuts[n_cuts++] = L.kv_end[i] - 1;
    cuts[n_cuts++] = L.kv_end[i];
  }
  cuts[n_cuts++] = L.infos_end - 1;
  cuts[n_cuts++] = L.infos_end;
  cuts[n_cuts++] = L.data_start;
  for (size_t i = 0; i < L.n_tensors && n_cuts + 2 < 256; ++i) {
    cuts[n_cuts++] = L.tensor_off[i];
    cuts[n_cuts++] = L.tensor_off[i] + 1;
  }
  cuts[n_cuts++] = n - 1;
  for (size_t i = 0; i < n_cuts; ++i) {
    if (cuts[i] >= n) continue;
    okv_status_code_t c = load_counted(file, cuts[i], NULL);
    if (c != OKV_STATUS_INVALID_ARGUMENT) fail_msg("truncated at %zu of %zu: accepted", cuts[i], n);
    /* The reader alone says why, on one line. */
    okv_gguf_t *g = NULL;
    count_alloc_t ca;
    okv_allocator_t a = counting(&ca);
    okv_status_t s = okv_gguf_open_memory(file, cuts[i], "cut", &a, &g);
    const char *msg = okv_status_message(s);
    assert_int_equal(ca.outstanding, 0);
    if (cuts[i] < L.data_start) {
      assert_true(strstr(msg, "truncated") || strstr(msg, "past the end") || strstr(msg, "cannot fit"));
      assert_int_equal(ca.n_calls, 0); /* refused by the first pass: nothing allocated */
    } else {
      assert_non_null(strstr(msg, "runs past the end of the file"));
    }
    okv_status_free(s);
  }
  unsigned char *bad = malloc(n);
  /* A string length past the end: the first key's length. */
  memcpy(bad, file, n);
  put_le64(bad + 24, (uint64_t)n);
  assert_int_equal(load_counted(bad, n, "metadata key length"), OKV_STATUS_INVALID_ARGUMENT);
  put_le64(bad + 24, UINT64_MAX);
  assert_int_equal(load_counted(bad, n, "runs past the end"), OKV_STATUS_INVALID_ARGUMENT);
  /* Counts that would overflow or cannot fit. */
  memcpy(bad, file, n);
  put_le64(bad + 16, UINT64_MAX);
  assert_int_equal(load_counted(bad, n, "metadata entries cannot fit"), OKV_STATUS_INVALID_ARGUMENT);
  memcpy(bad, file, n);
  put_le64(bad + 8, (uint64_t)1 << 61);
  assert_int_equal(load_counted(bad, n, "tensor infos cannot fit"), OKV_STATUS_INVALID_ARGUMENT);
  /* A tensor's offset past the end, and not aligned. */
  const size_t qi = find_info(file, n, "blk.1.attn_q.weight");
  const size_t off_field = qi + 8 + 19 + 4 + 16 + 4;
  memcpy(bad, file, n);
  put_le64(bad + off_field, (uint64_t)n);
  assert_int_equal(load_counted(bad, n, "'blk.1.attn_q.weight'"), OKV_STATUS_INVALID_ARGUMENT);
  put_le64(bad + off_field, UINT64_MAX - 31);
  assert_int_equal(load_counted(bad, n, "runs past the end of the file"), OKV_STATUS_INVALID_ARGUMENT);
  put_le64(bad + off_field, 8);
  assert_int_equal(load_counted(bad, n, "is not a multiple of the alignment 32"), OKV_STATUS_INVALID_ARGUMENT);
  /* Dims whose product or byte size overflows; too many dims; an unknown type. */
  memcpy(bad, file, n);
  put_le64(bad + qi + 8 + 19 + 4, (uint64_t)1 << 40);
  put_le64(bad + qi + 8 + 19 + 4 + 8, (uint64_t)1 << 40);
  assert_int_equal(load_counted(bad, n, "element count overflows 64 bits"), OKV_STATUS_INVALID_ARGUMENT);
  put_le64(bad + qi + 8 + 19 + 4, (uint64_t)1 << 62); /* 2^62 F32 elements: 2^64 bytes */
  put_le64(bad + qi + 8 + 19 + 4 + 8, 1);
  bad[qi + 8 + 19 + 4 + 16] = OKV_GGML_TYPE_F32;
  assert_int_equal(load_counted(bad, n, "overflow 64 bits of bytes"), OKV_STATUS_INVALID_ARGUMENT);
  memcpy(bad, file, n);
  bad[qi + 8 + 19] = 5;
  assert_int_equal(load_counted(bad, n, "has 5 dimensions"), OKV_STATUS_INVALID_ARGUMENT);
  memcpy(bad, file, n);
  bad[qi + 8 + 19 + 4 + 16] = 99;
  assert_int_equal(load_counted(bad, n, "tensor 'blk.1.attn_q.weight' has unknown ggml type 99"),
                   OKV_STATUS_INVALID_ARGUMENT);
  /* Q8_0 rows must be whole blocks. */
  memcpy(bad, file, n);
  put_le64(bad + qi + 8 + 19 + 4, 16);
  put_le64(bad + qi + 8 + 19 + 4 + 8, 64);
  assert_int_equal(load_counted(bad, n, "rows of 16 elements, not a multiple of 32"), OKV_STATUS_INVALID_ARGUMENT);
  /* An unknown value type; an array of arrays; an array count overflowing. */
  memcpy(bad, file, n);
  bad[24 + 8 + strlen("general.architecture")] = 13;
  assert_int_equal(load_counted(bad, n, "unknown value type 13"), OKV_STATUS_INVALID_ARGUMENT);
  free(bad);
  free(file);
  w = okv_gw_new();
  const float fs[2] = {1, 2};
  okv_gw_kv_arr_f32(w, "a", fs, 2);
  file = okv_gw_serialize(w, &n, NULL);
  okv_gw_free(w);
  /* key "a" at 24: length (8) + 1 byte, type (4), element type (4), count (8) */
  put_le64(file + 24 + 9 + 4 + 4, (uint64_t)1 << 62);
  assert_int_equal(load_counted(file, n, "array 'a' declares 4611686018427387904 f32 elements"),
                   OKV_STATUS_INVALID_ARGUMENT);
  file[24 + 9 + 4] = OKV_GGUF_ARRAY;
  assert_int_equal(load_counted(file, n, "nested array"), OKV_STATUS_INVALID_ARGUMENT);
  free(file);
  /* Alignment not a power of two; duplicate keys and tensor names. */
  w = okv_gw_new();
  okv_gw_kv_u32(w, "general.alignment", 48);
  file = okv_gw_serialize(w, &n, NULL);
  okv_gw_free(w);
  assert_int_equal(load_counted(file, n, "general.alignment 48 is not a power of two"), OKV_STATUS_INVALID_ARGUMENT);
  free(file);
  w = okv_gw_new();
  okv_gw_kv_u32(w, "k", 1);
  okv_gw_kv_u32(w, "k", 2);
  file = okv_gw_serialize(w, &n, NULL);
  okv_gw_free(w);
  assert_int_equal(load_counted(file, n, "duplicate metadata key 'k'"), OKV_STATUS_INVALID_ARGUMENT);
  free(file);
  w = okv_gw_new();
  const uint64_t d1[1] = {32};
  float z[32] = {0};
  okv_gw_tensor(w, "t", 1, d1, OKV_GGML_TYPE_F32, z);
  okv_gw_tensor(w, "t", 1, d1, OKV_GGML_TYPE_F32, z);
  file = okv_gw_serialize(w, &n, NULL);
  okv_gw_free(w);
  assert_int_equal(load_counted(file, n, "duplicate tensor name 't'"), OKV_STATUS_INVALID_ARGUMENT);
  free(file);
  /* Files: missing, and a directory. */
  okv_gguf_t *g = NULL;
  OKV_ASSERT_CODE(okv_gguf_open("/nonexistent/x.gguf", NULL, &g), OKV_STATUS_NOT_FOUND);
  OKV_ASSERT_CODE(okv_gguf_open("/tmp", NULL, &g), OKV_STATUS_IO_ERROR);
  assert_null(g);
}

/* ---- dense runs ---- */

static okv_hal_device_t *cpu_device(void) {
  okv_hal_device_params_t p;
  okv_hal_device_params_init(&p);
  p.n_threads = 1;
  okv_hal_device_t *dev = NULL;
  OKV_ASSERT_OK(okv_hal_device_create("cpu", &p, NULL, &dev));
  return dev;
}

/* Dense NLL of one window; its logits into *ref (free with okv_eval_reference_free). */
static double dense_nll(const okv_model_t *m, okv_hal_device_t *dev, const uint32_t *toks, uint32_t n,
                        okv_eval_reference_t *ref) {
  okv_eval_window_t win = {toks, n};
  okv_eval_config_t c;
  memset(&c, 0, sizeof c);
  c.mode = OKV_MODE_DENSE;
  c.budget_blocks = 8;
  c.fetch_ratio = 1.0;
  okv_eval_result_t r;
  OKV_ASSERT_OK(okv_eval_run(m, dev, &win, 1, &c, NULL, NULL, ref, &r));
  return r.mean_nll;
}

/* The first `n` tokens (BOS first) of the shared text under a llama2.c tokenizer. */
static uint32_t *text_tokens(const char *tok_rel, uint32_t vocab, uint32_t n) {
  char path[4096];
  if (!shared_path(tok_rel, path, sizeof path)) return NULL;
  okv_tokenizer_t *tk = NULL;
  OKV_ASSERT_OK(okv_tokenizer_load(path, vocab, NULL, &tk));
  char tp[4096];
  if (!shared_path("data/tinystories_val.txt", tp, sizeof tp)) {
    okv_tokenizer_free(tk);
    return NULL;
  }
  FILE *f = fopen(tp, "rb");
  assert_non_null(f);
  char buf[8192];
  size_t nb = fread(buf, 1, sizeof buf, f);
  fclose(f);
  while (nb && ((unsigned char)buf[nb - 1] & 0xC0) == 0x80) --nb;
  while (nb && (unsigned char)buf[nb - 1] >= 0x80) --nb;
  uint32_t *t = malloc(4 * (nb + 2));
  size_t nt = 0;
  OKV_ASSERT_OK(okv_tokenizer_encode(tk, buf, nb, true, t, nb + 2, &nt));
  assert_true(nt >= n);
  okv_tokenizer_free(tk);
  return t;
}

/* Greedy decoding from BOS, dense, n tokens. */
static void greedy(const okv_model_t *m, okv_hal_device_t *dev, uint32_t n, uint32_t *out) {
  okv_runtime_config_t rc;
  okv_model_runtime_config(&m->config, &rc);
  const uint32_t blocks = (m->config.seq_len + OKV_BLOCK_TOKENS - 1) / OKV_BLOCK_TOKENS;
  rc.mode = OKV_MODE_DENSE;
  rc.budget_blocks = blocks;
  rc.dense_threshold_blocks = blocks;
  rc.max_seqs = 1;
  rc.max_context_tokens = blocks * OKV_BLOCK_TOKENS;
  okv_runtime_t *rt = NULL;
  okv_engine_t *e = NULL;
  uint32_t seq = 0;
  OKV_ASSERT_OK(okv_runtime_create(dev, &rc, NULL, &rt));
  OKV_ASSERT_OK(okv_engine_create(m, rt, 1, 0, NULL, &e));
  OKV_ASSERT_OK(okv_runtime_seq_add(rt, NULL, &seq));
  float *logits = malloc(m->config.vocab_size * sizeof *logits);
  out[0] = OKV_TOKEN_BOS;
  for (uint32_t p = 0; p + 1 < n; ++p) {
    OKV_ASSERT_OK(okv_engine_step(e, 1, &seq, &out[p], 0, NULL, logits, NULL));
    out[p + 1] = okv_logits_argmax(logits, m->config.vocab_size);
  }
  free(logits);
  okv_engine_destroy(e);
  okv_runtime_destroy(rt);
}

static void test_stories260k_gguf(void **state) {
  (void)state;
  char gp[4096], bp[4096];
  if (!shared_path("gguf/stories260K.gguf", gp, sizeof gp) || !shared_path("models/stories260K.bin", bp, sizeof bp))
    skip();
  okv_allocator_t ta = okv_test_allocator();
  okv_model_t *b = NULL, *g = NULL, *g128 = NULL;
  OKV_ASSERT_OK(okv_model_load(bp, &ta, &b));
  OKV_ASSERT_OK(okv_model_load(gp, &ta, &g128)); /* the path loader dispatches on the magic */
  assert_int_equal(g128->config.seq_len, 128);   /* the file's context_length */
  okv_model_load_options_t o = {.context_length = 512};
  OKV_ASSERT_OK(okv_model_load_ex(gp, &o, &ta, &g));
  const okv_model_config_t *c = &g->config;
  assert_true(c->dim == 64 && c->hidden_dim == 172 && c->n_layers == 5 && c->n_q_heads == 8 && c->n_kv_heads == 4);
  assert_true(c->head_dim == 8 && c->vocab_size == 512 && c->seq_len == 512);
  assert_true(c->rms_eps == b->config.rms_eps && c->rope_theta == 10000.0f);
  /* Every tensor bit for bit: the file stores Q/K rows in the adjacent-pair order the .bin uses. */
  const uint64_t D = 64, H = 172, L = 5, kvd = 32, V = 512;
  assert_memory_equal(g->token_embedding, b->token_embedding, V * D * 4);
  assert_memory_equal(g->classifier, b->classifier, V * D * 4);
  assert_memory_equal(g->rms_att, b->rms_att, L * D * 4);
  assert_memory_equal(g->wq, b->wq, L * D * D * 4);
  assert_memory_equal(g->wk, b->wk, L * kvd * D * 4);
  assert_memory_equal(g->wv, b->wv, L * kvd * D * 4);
  assert_memory_equal(g->wo, b->wo, L * D * D * 4);
  assert_memory_equal(g->rms_ffn, b->rms_ffn, L * D * 4);
  assert_memory_equal(g->w1, b->w1, L * H * D * 4);
  assert_memory_equal(g->w2, b->w2, L * D * H * 4);
  assert_memory_equal(g->w3, b->w3, L * H * D * 4);
  assert_memory_equal(g->rms_final, b->rms_final, D * 4);
  /* RoPE: computed here, stored by llama2.c's exporter; they differ by at most one ulp (6e-8 below 1). */
  double max_rope = 0.0;
  uint32_t n_diff = 0;
  for (uint32_t i = 0; i < 512 * 4; ++i) {
    double d1 = fabs((double)g->rope_cos[i] - b->rope_cos[i]), d2 = fabs((double)g->rope_sin[i] - b->rope_sin[i]);
    max_rope = fmax(max_rope, fmax(d1, d2));
    n_diff += (d1 > 0) + (d2 > 0);
  }
  print_message("stories260K RoPE tables: %u of 4096 entries differ from the .bin's, max %.3g\n", n_diff, max_rope);
  assert_true(max_rope <= 0x1p-24);
  /* Dense logits on 256 tokens of text. */
  uint32_t *toks = text_tokens("models/tok512.bin", 512, 256);
  if (!toks) skip();
  okv_hal_device_t *dev = cpu_device();
  okv_eval_reference_t rb, rg, rs;
  const double nb = dense_nll(b, dev, toks, 256, &rb), ng = dense_nll(g, dev, toks, 256, &rg);
  double max_logit = 0.0;
  for (size_t i = 0; i < (size_t)255 * V; ++i) max_logit = fmax(max_logit, fabs((double)rg.logits[i] - rb.logits[i]));
  print_message("stories260K dense NLL: .bin %.9f, GGUF %.9f; logits max |diff| %.3g\n", nb, ng, max_logit);
  assert_true(fabs(nb - ng) <= 1e-6);
  assert_true(max_logit <= 1e-4);
  /* With the .bin's RoPE tables, the GGUF model's logits are the .bin's bit for bit: the RoPE tables
   * are the only difference. */
  const float *rc = g->rope_cos, *rsn = g->rope_sin;
  g->rope_cos = b->rope_cos;
  g->rope_sin = b->rope_sin;
  const double ns = dense_nll(g, dev, toks, 256, &rs);
  assert_true(ns == nb);
  assert_memory_equal(rs.logits, rb.logits, (size_t)255 * V * sizeof(float));
  g->rope_cos = rc;
  g->rope_sin = rsn;
  /* Greedy text from BOS: the same 120 tokens. */
  uint32_t tb[120], tg[120];
  greedy(b, dev, 120, tb);
  greedy(g, dev, 120, tg);
  assert_memory_equal(tb, tg, sizeof tb);
  okv_eval_reference_free(&rb);
  okv_eval_reference_free(&rg);
  okv_eval_reference_free(&rs);
  OKV_ASSERT_OK(okv_hal_device_release(dev));
  free(toks);
  okv_model_free(b);
  okv_model_free(g);
  okv_model_free(g128);
}

/* stories15M.bin converted to each type: the dense NLL of a short window. */
static void test_stories15m_types(void **state) {
  (void)state;
  char bp[4096], tp[4096];
  if (!shared_path("models/stories15M.bin", bp, sizeof bp) || !shared_path("models/tok32000.bin", tp, sizeof tp))
    skip();
  enum { NT = 48 };
  okv_model_t *b = NULL;
  OKV_ASSERT_OK(okv_model_load(bp, NULL, &b));
  uint32_t *toks = text_tokens("models/tok32000.bin", 32000, NT);
  if (!toks) skip();
  size_t tok_n = 0;
  unsigned char *tok_file = okv_mtest_read_file(tp, &tok_n);
  okv_hal_device_t *dev = cpu_device();
  const double nll_bin = dense_nll(b, dev, toks, NT, NULL);
  char dir[] = "/tmp/okv-gguf-XXXXXX", path[4200];
  okv_mtest_temp_path(dir, "m.gguf", path, sizeof path);
  const uint32_t types[] = {OKV_GGML_TYPE_F32, OKV_GGML_TYPE_F16, OKV_GGML_TYPE_BF16, OKV_GGML_TYPE_Q8_0,
                            OKV_GGML_TYPE_Q4_0};
  double nll[5];
  size_t bytes[5];
  for (size_t t = 0; t < 5; ++t) {
    okv_gw_t *w = okv_gw_from_model(b, types[t], t == 0 ? tok_file : NULL, tok_n);
    okv_model_t *m = NULL;
    if (t == 0) { /* through a file (mmap); the others from memory, to spare the disk */
      okv_gw_write(w, path);
      struct stat st;
      assert_int_equal(stat(path, &st), 0);
      bytes[t] = (size_t)st.st_size;
      OKV_ASSERT_OK(okv_model_load(path, NULL, &m));
      unlink(path);
    } else {
      void *file = okv_gw_serialize(w, &bytes[t], NULL);
      OKV_ASSERT_OK(okv_model_load_memory(file, bytes[t], "stories15M", NULL, &m));
      free(file);
    }
    okv_gw_free(w);
    assert_int_equal(m->config.vocab_size, 32000);
    assert_int_equal(m->config.seq_len, 256);
    assert_true(m->config.shared_classifier);
    if (t == 0) assert_memory_equal(m->wq, b->wq, 6 * 288 * 288 * 4); /* F32: the weights unchanged */
    nll[t] = dense_nll(m, dev, toks, NT, NULL);
    okv_model_free(m);
  }
  rmdir(dir);
  const double rel[5] = {(nll[0] - nll_bin) / nll_bin, (nll[1] - nll[0]) / nll[0], (nll[2] - nll[0]) / nll[0],
                         (nll[3] - nll[0]) / nll[0], (nll[4] - nll[0]) / nll[0]};
  print_message(
      "stories15M dense NLL over %d tokens: .bin %.6f; GGUF F32 %.6f (%+.2e vs .bin), F16 %.6f (%+.4f%%), "
      "BF16 %.6f (%+.4f%%), Q8_0 %.6f (%+.4f%%), Q4_0 %.6f (%+.4f%%); file MB %.1f %.1f %.1f %.1f %.1f\n",
      NT - 1, nll_bin, nll[0], rel[0], nll[1], 100 * rel[1], nll[2], 100 * rel[2], nll[3], 100 * rel[3], nll[4],
      100 * rel[4], bytes[0] / 1e6, bytes[1] / 1e6, bytes[2] / 1e6, bytes[3] / 1e6, bytes[4] / 1e6);
  assert_true(fabs(rel[0]) <= 1e-5);                 /* only the RoPE tables differ (last-bit) */
  assert_true(fabs(rel[1]) <= 5e-4);                 /* F16 within 0.05% */
  assert_true(fabs(rel[3]) <= 5e-3);                 /* Q8_0 within 0.5% */
  assert_true(fabs(rel[2]) <= 5e-3);                 /* BF16: measured +0.049% */
  assert_true(fabs(rel[4]) <= 0.25);                 /* Q4_0 (embedding/classifier included): measured +12.8% */
  assert_true(nll[4] != nll[0] && nll[3] != nll[0]); /* the quantisation is real */
  /* File sizes follow the types: F16/BF16 half of F32, Q8_0 34/128, Q4_0 18/128 of the matrices. */
  assert_true(bytes[1] < bytes[0] * 0.51 && bytes[2] == bytes[1]);
  assert_true(bytes[3] < bytes[0] * 0.27 && bytes[4] < bytes[0] * 0.15);
  OKV_ASSERT_OK(okv_hal_device_release(dev));
  free(tok_file);
  free(toks);
  okv_model_free(b);
}

int main(int argc, char **argv) {
  g_shared = okv_mtest_shared_dir(argc, argv, 1, NULL);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fp16_bf16),          cmocka_unit_test(test_dequantize_blocks),
      cmocka_unit_test(test_quantize_roundtrip), cmocka_unit_test(test_reader_metadata),
      cmocka_unit_test(test_tiny_model_loads),   cmocka_unit_test(test_rope_freqs_and_scaling),
      cmocka_unit_test(test_bad_models),         cmocka_unit_test(test_bad_files),
      cmocka_unit_test(test_stories260k_gguf),   cmocka_unit_test(test_stories15m_types),
  };
  return cmocka_run_group_tests_name("gguf", tests, NULL, NULL);
}
