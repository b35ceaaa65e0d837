/* The remote tier's wire format (remote/remote_msg.c): every encoder's frame
 * parses back to its fields (hand-written byte layouts checked too), and
 * okv_remote_msg_parse refuses each single violation of a valid frame:
 * truncated, extended, bad magic / version / type / reserved fields, bodies of
 * the wrong size, counts and sizes out of range, overflowing ranges,
 * non-printable error text, reserved request ids. Also the constant-time token
 * comparison. No UCX here (suite unit). */
#include <stdlib.h>
#include <string.h>

#include "remote/remote_msg.h"
#include "remote/remote_ucx.h"
#include "tests/common/test_common.h"

static uint8_t buf[OKV_REMOTE_CLIENT_MSG_MAX_BYTES + 64];

/* Parses n bytes of `b`, expecting failure: the message must be one nonempty line. */
static void expect_bad(const void *b, size_t n) {
  okv_remote_msg_t m;
  okv_status_t s = okv_remote_msg_parse(b, n, &m);
  if (!s) {
    print_error("parse accepted a bad frame of %zu bytes (type %u)\n", n, (unsigned)m.type);
    fail();
  }
  assert_int_equal(okv_status_code(s), OKV_STATUS_INVALID_ARGUMENT);
  const char *msg = okv_status_message(s);
  assert_non_null(strstr(msg, "malformed message"));
  assert_null(strchr(msg, '\n'));
  okv_status_free(s);
  assert_int_equal(m.type, 0); /* cleared on failure */
}

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
  put32(p, (uint32_t)v);
  put32(p + 4, (uint32_t)(v >> 32));
}

/* A frame mutated at byte `at` to `v` (32-bit) must fail. */
static void expect_bad_u32(const uint8_t *good, size_t n, size_t at, uint32_t v) {
  static uint8_t tmp[sizeof buf];
  memcpy(tmp, good, n);
  put32(tmp + at, v);
  expect_bad(tmp, n);
}
static void expect_bad_u64(const uint8_t *good, size_t n, size_t at, uint64_t v) {
  static uint8_t tmp[sizeof buf];
  memcpy(tmp, good, n);
  put64(tmp + at, v);
  expect_bad(tmp, n);
}

/* Every prefix and one extra byte of a valid frame fail. */
static void expect_exact_length(const uint8_t *good, size_t n) {
  for (size_t k = 0; k < n; k += (n > 200 ? 7 : 1)) expect_bad(good, k);
  static uint8_t tmp[sizeof buf];
  memcpy(tmp, good, n);
  tmp[n] = 0;
  expect_bad(tmp, n + 1);
}

static void test_header_layout(void **state) {
  (void)state;
  size_t n = okv_remote_msg_encode_empty(buf, sizeof buf, OKV_REMOTE_MSG_OPEN, 0x0102030405060708ull);
  assert_int_equal(n, 32);
  /* Hand-written: "OKVR", version 1, type 3, body 0, reserved 0, request id LE, seq 0. */
  static const uint8_t want[32] = {'O', 'K', 'V', 'R', 1, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                   8,   7,   6,   5,   4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0};
  assert_memory_equal(buf, want, 32);
  okv_remote_msg_t m;
  OKV_ASSERT_OK(okv_remote_msg_parse(buf, n, &m));
  assert_int_equal(m.type, OKV_REMOTE_MSG_OPEN);
  assert_true(m.request_id == 0x0102030405060708ull);
  expect_exact_length(buf, n);
  expect_bad_u32(buf, n, 0, 0x52564B4E);       /* magic */
  expect_bad_u32(buf, n, 4, 2u | (3u << 16));  /* version 2 */
  expect_bad_u32(buf, n, 4, 1u | (0u << 16));  /* type 0 */
  expect_bad_u32(buf, n, 4, 1u | (10u << 16)); /* type past the last */
  expect_bad_u32(buf, n, 4, 1u | (0xffffu << 16));
  expect_bad_u32(buf, n, 8, 1);          /* body bytes without a body */
  expect_bad_u32(buf, n, 8, UINT32_MAX); /* huge declared body */
  expect_bad_u32(buf, n, 12, 1);         /* reserved */
  expect_bad_u64(buf, n, 16, 0);         /* OPEN of request 0 */
  expect_bad_u64(buf, n, 24, 0x800);     /* a seq outside READ and DATA (found by the fuzzer) */
  /* Empty types refuse a body. */
  n = okv_remote_msg_encode_empty(buf, sizeof buf, OKV_REMOTE_MSG_CLOSE, 5);
  buf[8] = 4;
  memset(buf + 32, 0, 4);
  expect_bad(buf, 36);
  expect_bad(NULL, 0);
}

static void test_hello(void **state) {
  (void)state;
  const char *tok = "s3cret-token";
  size_t n = okv_remote_msg_encode_hello(buf, sizeof buf, tok, 12, OKV_REMOTE_HELLO_WANTS_GET);
  assert_int_equal(n, 32 + 8 + 12);
  okv_remote_msg_t m;
  OKV_ASSERT_OK(okv_remote_msg_parse(buf, n, &m));
  assert_int_equal(m.type, OKV_REMOTE_MSG_HELLO);
  assert_int_equal(m.u.hello.token_bytes, 12);
  assert_memory_equal(m.u.hello.token, tok, 12);
  assert_int_equal(m.u.hello.flags, OKV_REMOTE_HELLO_WANTS_GET);
  expect_exact_length(buf, n);
  expect_bad_u32(buf, n, 32, 13);  /* token length past the body */
  expect_bad_u32(buf, n, 32, 11);  /* body longer than the token */
  expect_bad_u32(buf, n, 32, 257); /* over 256 */
  expect_bad_u32(buf, n, 36, 2);   /* unknown flag */
  expect_bad_u64(buf, n, 16, 7);   /* HELLO with a request id */
  expect_bad_u64(buf, n, 24, 1);   /* ... or a seq */
  /* A token of 0 and of 256 bytes are valid; 257 cannot be encoded. */
  assert_int_equal(okv_remote_msg_encode_hello(buf, sizeof buf, NULL, 0, 0), 40);
  OKV_ASSERT_OK(okv_remote_msg_parse(buf, 40, &m));
  assert_int_equal(m.u.hello.token_bytes, 0);
  char big[257];
  memset(big, 'a', sizeof big);
  assert_int_equal(okv_remote_msg_encode_hello(buf, sizeof buf, big, 256, 0), 40 + 256);
  OKV_ASSERT_OK(okv_remote_msg_parse(buf, 296, &m));
  assert_int_equal(okv_remote_msg_encode_hello(buf, sizeof buf, big, 257, 0), 0);
}

static void test_hello_ok(void **state) {
  (void)state;
  uint8_t addr[100];
  for (int i = 0; i < 100; ++i) addr[i] = (uint8_t)(3 * i);
  size_t n = okv_remote_msg_encode_hello_ok(buf, sizeof buf, OKV_REMOTE_HELLO_OK_GET, 4096, 1 << 24, addr, 100);
  assert_int_equal(n, 32 + 24 + 100);
  okv_remote_msg_t m;
  OKV_ASSERT_OK(okv_remote_msg_parse(buf, n, &m));
  assert_int_equal(m.u.hello_ok.flags, OKV_REMOTE_HELLO_OK_GET);
  assert_int_equal(m.u.hello_ok.max_read_entries, 4096);
  assert_true(m.u.hello_ok.max_inflight_bytes == (1u << 24));
  assert_int_equal(m.u.hello_ok.address_bytes, 100);
  assert_memory_equal(m.u.hello_ok.address, addr, 100);
  expect_exact_length(buf, n);
  expect_bad_u32(buf, n, 32, 0);    /* an address without the GET flag */
  expect_bad_u32(buf, n, 32, 3);    /* unknown flag */
  expect_bad_u32(buf, n, 36, 0);    /* max_read_entries 0 */
  expect_bad_u32(buf, n, 36, 4097); /* ... over 4096 */
  expect_bad_u64(buf, n, 40, 0);    /* max_inflight_bytes 0 */
  expect_bad_u32(buf, n, 48, 99);   /* address length off by one */
  expect_bad_u32(buf, n, 52, 1);    /* reserved */
  /* Without gets: no address; the GET flag needs one. */
  n = okv_remote_msg_encode_hello_ok(buf, sizeof buf, 0, 64, 1, NULL, 0);
  OKV_ASSERT_OK(okv_remote_msg_parse(buf, n, &m));
  assert_int_equal(m.u.hello_ok.address_bytes, 0);
  expect_bad_u32(buf, n, 32, OKV_REMOTE_HELLO_OK_GET);
}

static void test_open_ok(void **state) {
  (void)state;
  uint8_t rkey[40], adm[300];
  for (int i = 0; i < 40; ++i) rkey[i] = (uint8_t)(200 - i);
  for (int i = 0; i < 300; ++i) adm[i] = (uint8_t)(i * 7);
  size_t n = okv_remote_msg_encode_open_ok(buf, sizeof buf, 9, 1ull << 33, 300, 0x7f0000001000ull, rkey, 40);
  assert_int_equal(n, 32 + 32 + 40);
  memcpy(buf + n, adm, 300); /* the admission bytes follow in the same message */
  n += 300;
  okv_remote_msg_t m;
  OKV_ASSERT_OK(okv_remote_msg_parse(buf, n, &m));
  assert_int_equal(m.type, OKV_REMOTE_MSG_OPEN_OK);
  assert_true(m.request_id == 9);
  assert_true(m.u.open_ok.kv_bytes == (1ull << 33));
  assert_true(m.u.open_ok.admission_bytes == 300);
  assert_true(m.u.open_ok.remote_base == 0x7f0000001000ull);
  assert_int_equal(m.u.open_ok.rkey_bytes, 40);
  assert_memory_equal(m.u.open_ok.rkey, rkey, 40);
  assert_memory_equal(m.u.open_ok.admission, adm, 300);
  expect_exact_length(buf, n);
  expect_bad_u64(buf, n, 32, 0);              /* kv_bytes 0 */
  expect_bad_u64(buf, n, 40, 299);            /* admission size disagrees */
  expect_bad_u64(buf, n, 40, 1ull << 40);     /* admission over 2 GiB */
  expect_bad_u64(buf, n, 48, UINT64_MAX - 5); /* base + kv_bytes overflows */
  expect_bad_u32(buf, n, 56, 41);             /* rkey size disagrees */
  expect_bad_u32(buf, n, 56, 5000);           /* rkey over 4096 */
  expect_bad_u32(buf, n, 60, 1);              /* reserved */
  expect_bad_u64(buf, n, 16, 0);              /* request 0 */
}

static void test_read(void **state) {
  (void)state;
  uint64_t offs[3] = {0, 8192, UINT64_MAX - 8192}, lens[3] = {8192, 1, 8192};
  size_t n = okv_remote_msg_encode_read(buf, sizeof buf, 4, 77, 10, 3, offs, lens);
  assert_int_equal(n, 32 + 8 + 48);
  okv_remote_msg_t m;
  OKV_ASSERT_OK(okv_remote_msg_parse(buf, n, &m));
  assert_int_equal(m.type, OKV_REMOTE_MSG_READ);
  assert_true(m.seq == 77);
  assert_int_equal(m.u.read.first_index, 10);
  assert_int_equal(m.u.read.n_entries, 3);
  assert_true(m.u.read.total_bytes == 8192 + 1 + 8192);
  for (uint32_t i = 0; i < 3; ++i) {
    uint64_t o, b;
    okv_remote_msg_read_entry(&m, i, &o, &b);
    assert_true(o == offs[i] && b == lens[i]);
  }
  expect_exact_length(buf, n);
  expect_bad_u32(buf, n, 36, 0);                /* 0 entries */
  expect_bad_u32(buf, n, 36, 4);                /* more entries than the body holds */
  expect_bad_u32(buf, n, 36, 2);                /* fewer */
  expect_bad_u32(buf, n, 32, (1u << 31) - 2);   /* first_index + n past 2^31 */
  expect_bad_u64(buf, n, 48, 0);                /* an entry of 0 bytes */
  expect_bad_u64(buf, n, 48, (1ull << 30) + 1); /* an entry over 1 GiB */
  expect_bad_u64(buf, n, 72, UINT64_MAX - 100); /* offset + bytes overflows */
  expect_bad_u64(buf, n, 16, 0);                /* request 0 */
  /* The largest READ is the largest client message; one entry more does not encode. */
  static uint64_t o2[OKV_REMOTE_READ_MAX_ENTRIES + 1], l2[OKV_REMOTE_READ_MAX_ENTRIES + 1];
  for (uint32_t i = 0; i <= OKV_REMOTE_READ_MAX_ENTRIES; ++i) {
    o2[i] = 8192ull * i;
    l2[i] = 8192;
  }
  n = okv_remote_msg_encode_read(buf, sizeof buf, 1, 1, 0, OKV_REMOTE_READ_MAX_ENTRIES, o2, l2);
  assert_int_equal(n, OKV_REMOTE_CLIENT_MSG_MAX_BYTES);
  OKV_ASSERT_OK(okv_remote_msg_parse(buf, n, &m));
  assert_int_equal(okv_remote_msg_encode_read(buf, sizeof buf, 1, 1, 0, OKV_REMOTE_READ_MAX_ENTRIES + 1, o2, l2), 0);
}

static void test_data(void **state) {
  (void)state;
  size_t n = okv_remote_msg_encode_data(buf, sizeof buf, 3, 12, 5, 2, 24);
  assert_int_equal(n, 48);
  for (int i = 0; i < 24; ++i) buf[48 + i] = (uint8_t)i;
  n += 24;
  okv_remote_msg_t m;
  OKV_ASSERT_OK(okv_remote_msg_parse(buf, n, &m));
  assert_int_equal(m.type, OKV_REMOTE_MSG_DATA);
  assert_true(m.seq == 12);
  assert_int_equal(m.u.data.first_index, 5);
  assert_int_equal(m.u.data.n_entries, 2);
  assert_true(m.u.data.payload_bytes == 24);
  assert_int_equal(m.u.data.payload[23], 23);
  expect_exact_length(buf, n);
  expect_bad_u64(buf, n, 40, 23); /* payload disagrees with the body */
  expect_bad_u32(buf, n, 36, 0);  /* no entries */
  expect_bad_u32(buf, n, 36, 25); /* more entries than payload bytes */
  expect_bad_u32(buf, n, 32, UINT32_MAX);
}

static void test_error(void **state) {
  (void)state;
  size_t n = okv_remote_msg_encode_error(buf, sizeof buf, 0, OKV_STATUS_NOT_FOUND, OKV_REMOTE_ERROR_CLOSING,
                                         "request 5 is\nnot published");
  okv_remote_msg_t m;
  OKV_ASSERT_OK(okv_remote_msg_parse(buf, n, &m));
  assert_int_equal(m.type, OKV_REMOTE_MSG_ERROR);
  assert_int_equal(m.u.error.code, OKV_STATUS_NOT_FOUND);
  assert_int_equal(m.u.error.flags, OKV_REMOTE_ERROR_CLOSING);
  assert_int_equal(m.u.error.text_bytes, 26);
  assert_memory_equal(m.u.error.text, "request 5 is?not published", 26); /* control bytes become '?' */
  expect_exact_length(buf, n);
  expect_bad_u32(buf, n, 32, 0);                     /* code OK */
  expect_bad_u32(buf, n, 32, OKV_STATUS_CODE_COUNT); /* unknown code */
  expect_bad_u32(buf, n, 36, 0);                     /* empty text */
  expect_bad_u32(buf, n, 36, 25);                    /* text length disagrees */
  expect_bad_u32(buf, n, 40, 2);                     /* unknown flag */
  expect_bad_u32(buf, n, 44, 1);                     /* reserved */
  buf[53] = 0x07;                                    /* a control byte in the text */
  expect_bad(buf, n);
  buf[53] = 0xc3; /* non-ASCII */
  expect_bad(buf, n);
  assert_int_equal(okv_remote_msg_encode_error(buf, sizeof buf, 0, OKV_STATUS_INTERNAL, 4, "x"), 0);
  assert_int_equal(okv_remote_msg_encode_error(buf, sizeof buf, 0, OKV_STATUS_OK, 0, "x"), 0);
  /* Long texts are cut at 400 bytes. */
  char longtext[1000];
  memset(longtext, 'x', sizeof longtext - 1);
  longtext[sizeof longtext - 1] = 0;
  n = okv_remote_msg_encode_error(buf, sizeof buf, 0, OKV_STATUS_INTERNAL, 0, longtext);
  assert_int_equal(n, 32 + 16 + 400);
  OKV_ASSERT_OK(okv_remote_msg_parse(buf, n, &m));
}

/* Server-to-client types are valid frames for the parser; the session code refuses them from a client. */
/* SUBMIT (a job payload, ids 0) and SUBMIT_OK (empty, the published request's id). */
static void test_submit(void **state) {
  (void)state;
  uint8_t job[100];
  for (int i = 0; i < 100; ++i) job[i] = (uint8_t)(i * 3 + 1);
  size_t n = okv_remote_msg_encode_submit(buf, sizeof buf, job, 100);
  assert_int_equal(n, 32 + 100);
  okv_remote_msg_t m;
  OKV_ASSERT_OK(okv_remote_msg_parse(buf, n, &m));
  assert_int_equal(m.type, OKV_REMOTE_MSG_SUBMIT);
  assert_true(m.request_id == 0 && m.seq == 0);
  assert_int_equal(m.u.submit.payload_bytes, 100);
  assert_memory_equal(m.u.submit.payload, job, 100);
  expect_exact_length(buf, n);
  expect_bad_u64(buf, n, 16, 5); /* a request id */
  expect_bad_u64(buf, n, 24, 1); /* a seq */
  /* Empty and oversized payloads: the encoder refuses them, the parser too. */
  assert_int_equal(okv_remote_msg_encode_submit(buf, sizeof buf, job, 0), 0);
  static uint8_t big[OKV_REMOTE_SUBMIT_MAX_BYTES + 1];
  assert_int_equal(okv_remote_msg_encode_submit(buf, sizeof buf, big, OKV_REMOTE_SUBMIT_MAX_BYTES + 1), 0);
  n = okv_remote_msg_encode_submit(buf, sizeof buf, big, OKV_REMOTE_SUBMIT_MAX_BYTES);
  assert_int_equal(n, 32 + OKV_REMOTE_SUBMIT_MAX_BYTES);
  assert_true(n <= OKV_REMOTE_CLIENT_MSG_MAX_BYTES); /* the server accepts a whole SUBMIT */
  OKV_ASSERT_OK(okv_remote_msg_parse(buf, n, &m));
  put32(buf + 8, OKV_REMOTE_SUBMIT_MAX_BYTES + 1);
  buf[n] = 0;
  expect_bad(buf, n + 1);
  n = okv_remote_msg_encode_empty(buf, sizeof buf, OKV_REMOTE_MSG_SUBMIT, 0);
  expect_bad(buf, n); /* an empty SUBMIT */
  n = okv_remote_msg_encode_empty(buf, sizeof buf, OKV_REMOTE_MSG_SUBMIT_OK, 77);
  OKV_ASSERT_OK(okv_remote_msg_parse(buf, n, &m));
  assert_int_equal(m.type, OKV_REMOTE_MSG_SUBMIT_OK);
  assert_true(m.request_id == 77);
  expect_exact_length(buf, n);
  expect_bad_u64(buf, n, 16, 0); /* SUBMIT_OK names a request */
  assert_string_equal(okv_remote_msg_type_name(OKV_REMOTE_MSG_SUBMIT), "SUBMIT");
  assert_string_equal(okv_remote_msg_type_name(OKV_REMOTE_MSG_SUBMIT_OK), "SUBMIT_OK");
}

static void test_type_names(void **state) {
  (void)state;
  assert_string_equal(okv_remote_msg_type_name(OKV_REMOTE_MSG_READ), "READ");
  assert_string_equal(okv_remote_msg_type_name(0), "unknown");
  assert_string_equal(okv_remote_msg_type_name(99), "unknown");
}

static void test_token_equal(void **state) {
  (void)state;
  const uint8_t *a = (const uint8_t *)"abcdef", *b = (const uint8_t *)"abcdeg";
  assert_true(okv_remote_token_equal(a, 6, a, 6));
  assert_false(okv_remote_token_equal(a, 6, b, 6));
  assert_false(okv_remote_token_equal(a, 5, a, 6)); /* a prefix is not equal */
  assert_false(okv_remote_token_equal(a, 6, a, 5));
  assert_true(okv_remote_token_equal(a, 0, b, 0));
  uint8_t z[4] = {0, 0, 0, 0};
  assert_false(okv_remote_token_equal(z, 4, z, 3)); /* trailing zero bytes still count */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_header_layout), cmocka_unit_test(test_hello),      cmocka_unit_test(test_hello_ok),
      cmocka_unit_test(test_open_ok),       cmocka_unit_test(test_read),       cmocka_unit_test(test_data),
      cmocka_unit_test(test_error),         cmocka_unit_test(test_type_names), cmocka_unit_test(test_token_equal),
      cmocka_unit_test(test_submit),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
