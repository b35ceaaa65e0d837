/* Shared by the libFuzzer harnesses in tests/fuzz/ and by their replay test
 * (tests/model/test_fuzz_replay.c), which compiles the same harness code with
 * OKV_FUZZ_NO_ENTRY so every saved regression input is checked by `meson test`
 * without clang.
 *
 * A harness is one function okv_fuzz_<name>(data, size) that must never crash,
 * hang or leak on any input, and that checks the documented contract of the
 * code under test with OKV_FUZZ_CHECK. */
#ifndef OASISKV_TESTS_FUZZ_COMMON_H
#define OASISKV_TESTS_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "oasiskv/oasiskv.h"

/* Supplied by the driver: tests/fuzz/fuzz_driver.c (prints and aborts, which
 * libFuzzer reports as a crash) or the replay test (fails the CMocka test). */
void okv_fuzz_fail(const char *file, int line, const char *what);
/* Allocator for the objects a harness creates per input (NULL: system). */
const okv_allocator_t *okv_fuzz_allocator(void);

#define OKV_FUZZ_CHECK(cond)                               \
  do {                                                     \
    if (!(cond)) okv_fuzz_fail(__FILE__, __LINE__, #cond); \
  } while (0)

/* The harnesses (return 0, as libFuzzer expects). */
int okv_fuzz_checkpoint(const uint8_t *data, size_t size);
int okv_fuzz_tokenizer_load(const uint8_t *data, size_t size);
int okv_fuzz_tokenizer_codec(const uint8_t *data, size_t size);
int okv_fuzz_cli_options(const uint8_t *data, size_t size);
int okv_fuzz_gguf(const uint8_t *data, size_t size);
int okv_fuzz_tokenizer_gguf(const uint8_t *data, size_t size);
int okv_fuzz_remote_msg(const uint8_t *data, size_t size);

/* Checks what every error status must be: a known code other than OK and a
 * non-empty message, on one line unless `echoed` (input the message may
 * quote) holds a line break itself. Frees the status; returns its code. */
static inline okv_status_code_t okv_fuzz_status_quoting(okv_status_t s, const char *echoed) {
  okv_status_code_t c = okv_status_code(s);
  if (s) {
    const char *m = okv_status_message(s);
    OKV_FUZZ_CHECK(c > OKV_STATUS_OK && c < OKV_STATUS_CODE_COUNT);
    OKV_FUZZ_CHECK(m != NULL && m[0] != '\0');
    if (!echoed || (!strchr(echoed, '\n') && !strchr(echoed, '\r'))) OKV_FUZZ_CHECK(strchr(m, '\n') == NULL);
  }
  okv_status_free(s);
  return c;
}
static inline okv_status_code_t okv_fuzz_status(okv_status_t s) { return okv_fuzz_status_quoting(s, NULL); }

/* Writes data to an anonymous in-memory file and names it by its
 * /proc/self/fd path, for the loaders that take a path. Returns the fd to
 * close afterwards, or -1. */
static inline int okv_fuzz_memfile(const void *data, size_t size, char *path, size_t cap) {
  int fd = memfd_create("okv-fuzz", MFD_CLOEXEC);
  if (fd < 0) return -1;
  const unsigned char *p = data;
  size_t left = size;
  while (left > 0) {
    ssize_t w = write(fd, p, left);
    if (w <= 0) {
      close(fd);
      return -1;
    }
    p += w;
    left -= (size_t)w;
  }
  snprintf(path, cap, "/proc/self/fd/%d", fd);
  return fd;
}

/* Little-endian readers of fuzz input. */
static inline uint32_t okv_fuzz_le32(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint16_t okv_fuzz_le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

#endif
