/* libFuzzer harness: the llama2.c tokenizer loader (tools/model/tokenizer.c).
 * Input: one selector byte, then a tokenizer file. The vocabulary size the
 * loader is asked for is the number of well-formed records in the file plus
 * (selector - 128), so selector 0x80 asks for exactly what the file holds and
 * other values exercise the "another vocabulary size" errors. The file is
 * loaded from memory and through a path (both must agree); a loaded
 * tokenizer has every piece decoded into exactly-sized heap buffers and a few
 * of its pieces encoded. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_common.h"
#include "tools/model/model.h"

/* Records (score, length, bytes) that fit in the file, stopping at the first
 * that does not; the loader's stricter checks (length range, NUL bytes) are
 * not applied here. */
static uint32_t count_records(const uint8_t *d, size_t n) {
  if (n < 4) return 0;
  size_t off = 4;
  uint32_t count = 0;
  while (n - off >= 8 && count < (1u << 24)) {
    int32_t len = (int32_t)okv_fuzz_le32(d + off + 4);
    if (len < 0 || (size_t)len > n - off - 8) break;
    off += 8 + (size_t)len;
    ++count;
  }
  return count;
}

/* Decodes `token` after `prev` into a buffer of exactly `cap` bytes. */
static void check_piece(const okv_tokenizer_t *t, uint32_t prev, uint32_t token, size_t cap) {
  char *buf = malloc(cap);
  OKV_FUZZ_CHECK(buf != NULL);
  size_t nb = (size_t)-1;
  okv_status_code_t c = okv_fuzz_status(okv_tokenizer_piece(t, prev, token, buf, cap, &nb));
  if (c == OKV_STATUS_OK) {
    OKV_FUZZ_CHECK(nb < cap);
    OKV_FUZZ_CHECK(buf[nb] == '\0');
    if (token >= okv_tokenizer_vocab_size(t) || token <= OKV_TOKEN_EOS) OKV_FUZZ_CHECK(nb == 0);
  } else {
    OKV_FUZZ_CHECK(c == OKV_STATUS_INVALID_ARGUMENT);
  }
  free(buf);
}

int okv_fuzz_tokenizer_load(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const okv_allocator_t *alloc = okv_fuzz_allocator();
  const uint8_t *file = data + 1;
  size_t n = size - 1;
  uint32_t records = count_records(file, n);
  int64_t want = (int64_t)records + (int64_t)data[0] - 128;
  uint32_t vocab = want > 0 ? (uint32_t)want : 0;

  okv_tokenizer_t *t = (okv_tokenizer_t *)&size; /* must be reset to NULL on failure */
  okv_status_code_t code = okv_fuzz_status(okv_tokenizer_load_memory(file, n, "fuzz", vocab, alloc, &t));
  if (code != OKV_STATUS_OK) {
    OKV_FUZZ_CHECK(t == NULL);
    OKV_FUZZ_CHECK(code == OKV_STATUS_INVALID_ARGUMENT);
  } else {
    OKV_FUZZ_CHECK(t != NULL);
    OKV_FUZZ_CHECK(vocab == records); /* exactly the file's tokens, no more, no fewer */
    OKV_FUZZ_CHECK(okv_tokenizer_vocab_size(t) == vocab);
  }

  char path[64];
  int fd = okv_fuzz_memfile(file, n, path, sizeof path);
  if (fd >= 0) {
    okv_tokenizer_t *t2 = (okv_tokenizer_t *)&size;
    okv_status_code_t code2 = okv_fuzz_status(okv_tokenizer_load(path, vocab, alloc, &t2));
    close(fd);
    OKV_FUZZ_CHECK(code2 == code);
    if (code2 == OKV_STATUS_OK) {
      OKV_FUZZ_CHECK(okv_tokenizer_vocab_size(t2) == vocab);
      okv_tokenizer_free(t2);
    } else {
      OKV_FUZZ_CHECK(t2 == NULL);
    }
  }
  if (code != OKV_STATUS_OK) return 0;

  /* Every piece, after BOS (dummy-prefix stripping) and after another token,
   * into exact-size buffers and into too-small ones; ids past the vocabulary. */
  uint32_t limit = vocab < 2048 ? vocab : 2048;
  for (uint32_t id = 0; id < limit; ++id) {
    check_piece(t, OKV_TOKEN_BOS, id, 1);
    check_piece(t, OKV_TOKEN_BOS, id, 2);
    check_piece(t, 3, id, 4097);
  }
  check_piece(t, 0, vocab, 8);
  check_piece(t, 0, UINT32_MAX, 8);

  /* Encode the concatenation of the first pieces (whatever the bytes are: the
   * encoder validates UTF-8 itself). */
  char text[256];
  size_t tn = 0;
  for (uint32_t id = 0; id < limit && tn < sizeof text; ++id) {
    char piece[4097];
    size_t nb = 0;
    if (okv_fuzz_status(okv_tokenizer_piece(t, 3, id, piece, sizeof piece, &nb)) != OKV_STATUS_OK) continue;
    if (nb > sizeof text - tn) nb = sizeof text - tn;
    memcpy(text + tn, piece, nb);
    tn += nb;
  }
  uint32_t ids[260];
  size_t n_ids = 0;
  okv_status_code_t ce = okv_fuzz_status(okv_tokenizer_encode(t, text, tn, true, ids, 260, &n_ids));
  OKV_FUZZ_CHECK(ce == OKV_STATUS_OK || ce == OKV_STATUS_INVALID_ARGUMENT);
  if (ce == OKV_STATUS_OK) {
    OKV_FUZZ_CHECK(n_ids >= 1 && n_ids <= tn + 2);
    for (size_t i = 0; i < n_ids; ++i) OKV_FUZZ_CHECK(ids[i] < vocab || (i == 0 && ids[i] == OKV_TOKEN_BOS));
  }
  okv_tokenizer_free(t);
  return 0;
}

#ifndef OKV_FUZZ_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return okv_fuzz_tokenizer_load(data, size); }
#endif
