/* libFuzzer harness: the remote tier's message parser, okv_remote_msg_parse
 * (remote/remote_msg.c), which sees every byte a peer sends. Input: one whole
 * message. Checks the contract: a refusal is INVALID_ARGUMENT with a one-line
 * message and leaves the output cleared; an accepted message is canonical, so
 * encoding its parsed fields again with the encoders gives back exactly the
 * input bytes (nothing the parser accepts carries unchecked bytes), every
 * READ entry lies inside the message and sums to total_bytes, and every
 * proper prefix of it and the message with one more byte are refused. */
#include <stdlib.h>
#include <string.h>

#include "remote/remote_msg.h"
#include "tests/fuzz/fuzz_common.h"

/* Re-encodes a parsed message into out (capacity cap); returns its size. */
static size_t reencode(const okv_remote_msg_t *m, uint8_t *out, size_t cap) {
  size_t n = 0;
  switch (m->type) {
    case OKV_REMOTE_MSG_HELLO:
      return okv_remote_msg_encode_hello(out, cap, m->u.hello.token, m->u.hello.token_bytes, m->u.hello.flags);
    case OKV_REMOTE_MSG_HELLO_OK:
      return okv_remote_msg_encode_hello_ok(out, cap, m->u.hello_ok.flags, m->u.hello_ok.max_read_entries,
                                            m->u.hello_ok.max_inflight_bytes, m->u.hello_ok.address,
                                            m->u.hello_ok.address_bytes);
    case OKV_REMOTE_MSG_OPEN:
    case OKV_REMOTE_MSG_CLOSE:
    case OKV_REMOTE_MSG_CLOSE_OK:
    case OKV_REMOTE_MSG_SUBMIT_OK: return okv_remote_msg_encode_empty(out, cap, m->type, m->request_id);
    case OKV_REMOTE_MSG_SUBMIT:
      return okv_remote_msg_encode_submit(out, cap, m->u.submit.payload, m->u.submit.payload_bytes);
    case OKV_REMOTE_MSG_OPEN_OK:
      n = okv_remote_msg_encode_open_ok(out, cap, m->request_id, m->u.open_ok.kv_bytes, m->u.open_ok.admission_bytes,
                                        m->u.open_ok.remote_base, m->u.open_ok.rkey, m->u.open_ok.rkey_bytes);
      if (n == 0 || cap - n < m->u.open_ok.admission_bytes) return 0;
      memcpy(out + n, m->u.open_ok.admission, m->u.open_ok.admission_bytes);
      return n + m->u.open_ok.admission_bytes;
    case OKV_REMOTE_MSG_READ: {
      uint32_t k = m->u.read.n_entries;
      uint64_t *off = malloc(k * sizeof *off), *len = malloc(k * sizeof *len);
      OKV_FUZZ_CHECK(off && len);
      for (uint32_t i = 0; i < k; ++i) okv_remote_msg_read_entry(m, i, &off[i], &len[i]);
      n = okv_remote_msg_encode_read(out, cap, m->request_id, m->seq, m->u.read.first_index, k, off, len);
      free(off);
      free(len);
      return n;
    }
    case OKV_REMOTE_MSG_DATA:
      n = okv_remote_msg_encode_data(out, cap, m->request_id, m->seq, m->u.data.first_index, m->u.data.n_entries,
                                     m->u.data.payload_bytes);
      if (n == 0 || cap - n < m->u.data.payload_bytes) return 0;
      memcpy(out + n, m->u.data.payload, m->u.data.payload_bytes);
      return n + m->u.data.payload_bytes;
    case OKV_REMOTE_MSG_ERROR: {
      char text[OKV_REMOTE_ERROR_TEXT_MAX_BYTES + 1];
      memcpy(text, m->u.error.text, m->u.error.text_bytes);
      text[m->u.error.text_bytes] = 0;
      return okv_remote_msg_encode_error(out, cap, m->request_id, m->u.error.code, m->u.error.flags, text);
    }
    default: return 0;
  }
}

int okv_fuzz_remote_msg(const uint8_t *data, size_t size) {
  okv_remote_msg_t m;
  memset(&m, 0xA5, sizeof m);
  okv_status_t s = okv_remote_msg_parse(data, size, &m);
  if (s) {
    OKV_FUZZ_CHECK(okv_fuzz_status(s) == OKV_STATUS_INVALID_ARGUMENT);
    OKV_FUZZ_CHECK(m.type == 0 && m.request_id == 0 && m.seq == 0);
    return 0;
  }
  OKV_FUZZ_CHECK(m.type >= OKV_REMOTE_MSG_HELLO && m.type < OKV_REMOTE_MSG_TYPE_COUNT);
  const uint8_t *end = data + size;
  if (m.type == OKV_REMOTE_MSG_READ) {
    OKV_FUZZ_CHECK(m.u.read.entries >= data && m.u.read.entries + 16 * (size_t)m.u.read.n_entries == end);
    uint64_t total = 0;
    for (uint32_t i = 0; i < m.u.read.n_entries; ++i) {
      uint64_t off, len;
      okv_remote_msg_read_entry(&m, i, &off, &len);
      OKV_FUZZ_CHECK(len >= 1 && len <= OKV_REMOTE_GET_MAX_BYTES && off <= UINT64_MAX - len);
      total += len;
    }
    OKV_FUZZ_CHECK(total == m.u.read.total_bytes);
  }
  if (m.type == OKV_REMOTE_MSG_DATA) OKV_FUZZ_CHECK(m.u.data.payload + m.u.data.payload_bytes == end);
  if (m.type == OKV_REMOTE_MSG_OPEN_OK)
    OKV_FUZZ_CHECK(m.u.open_ok.admission + m.u.open_ok.admission_bytes == end &&
                   m.u.open_ok.rkey + m.u.open_ok.rkey_bytes == m.u.open_ok.admission);
  /* Canonical: the encoders give back the very bytes. */
  uint8_t *again = malloc(size + 1);
  OKV_FUZZ_CHECK(again != NULL);
  size_t n = reencode(&m, again, size + 1);
  OKV_FUZZ_CHECK(n == size);
  OKV_FUZZ_CHECK(memcmp(again, data, size) == 0);
  /* Exact length: a prefix (a few of them) and one byte more are refused. */
  okv_remote_msg_t p;
  size_t cuts[3] = {0, size / 2, size - 1};
  for (int i = 0; i < 3; ++i) OKV_FUZZ_CHECK(okv_fuzz_status(okv_remote_msg_parse(again, cuts[i], &p)) != 0);
  uint8_t *longer = malloc(size + 1);
  OKV_FUZZ_CHECK(longer != NULL);
  memcpy(longer, data, size);
  longer[size] = 0;
  OKV_FUZZ_CHECK(okv_fuzz_status(okv_remote_msg_parse(longer, size + 1, &p)) != 0);
  free(longer);
  free(again);
  return 0;
}

#ifndef OKV_FUZZ_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return okv_fuzz_remote_msg(data, size); }
#endif
