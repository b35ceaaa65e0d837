/* Helpers shared by the model tests (tests/model/test_*.c): the shared
 * directory from argv, whole-file read/write for corrupting checkpoints and
 * tokenizers, loading a shared model, decoding token ids, and the known
 * answers of stories260K. Failures are CMocka assertion failures. Test code only. */
#ifndef OASISKV_TESTS_MODEL_MODEL_TEST_UTIL_H
#define OASISKV_TESTS_MODEL_MODEL_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "tools/model/model.h"

/* argv[index] when given, else "../shared". When probe_rel is not NULL the
 * test program exits 77 (skipped) unless <shared>/<probe_rel> exists. */
const char *okv_mtest_shared_dir(int argc, char **argv, int index, const char *probe_rel);

/* The whole file in a malloc'd buffer with 64 bytes of slack; *out_n its size. */
void *okv_mtest_read_file(const char *path, size_t *out_n);
/* Writes n bytes of data as the whole file at path. */
void okv_mtest_write_file(const char *path, const void *data, size_t n);
/* Makes a fresh directory from dir_template ("/tmp/...-XXXXXX", rewritten in
 * place) and writes <dir>/<name> into out (cap bytes). The caller unlinks the
 * file and removes the directory. */
void okv_mtest_temp_path(char *dir_template, const char *name, char *out, size_t cap);

/* Loads <shared>/<rel> with the CMocka allocator (exits 77 when absent). */
okv_model_t *okv_mtest_load_model(const char *shared, const char *rel);

/* The text of ids[1..n-1] (ids[0] is the BOS), piece by piece as generate
 * decodes it, NUL-terminated in out (cap bytes); returns its length. */
size_t okv_mtest_decode(const okv_tokenizer_t *tokenizer, const uint32_t *ids, size_t n, char *out, size_t cap);

/* Top-5 dense logits of "Once upon a time" (BOS + 4 tokens) on stories260K,
 * from the known answers file: the token fed at each position, then the five
 * best next ids and their logits, best first. */
typedef struct okv_mtest_top5_t {
  uint32_t token;
  uint32_t top_ids[5];
  double top_logits[5];
} okv_mtest_top5_t;
extern const okv_mtest_top5_t okv_mtest_top5[5];

#endif
