/* Helpers shared by the model tests (see model_test_util.h). */
#include "tests/model/model_test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/test_common.h"
#include "tests/model/reference.h"

const char *okv_mtest_shared_dir(int argc, char **argv, int index, const char *probe_rel) {
  const char *shared = argc > index ? argv[index] : "../shared";
  if (probe_rel) {
    char path[4096];
    okv_ref_shared_path(shared, probe_rel, path, sizeof path);
  }
  return shared;
}

void *okv_mtest_read_file(const char *path, size_t *out_n) {
  FILE *fp = fopen(path, "rb");
  assert_non_null(fp);
  fseek(fp, 0, SEEK_END);
  long n = ftell(fp);
  fseek(fp, 0, SEEK_SET);
  void *d = malloc((size_t)n + 64);
  assert_int_equal(fread(d, 1, (size_t)n, fp), (size_t)n);
  fclose(fp);
  *out_n = (size_t)n;
  return d;
}

void okv_mtest_write_file(const char *path, const void *data, size_t n) {
  FILE *fp = fopen(path, "wb");
  assert_non_null(fp);
  assert_int_equal(fwrite(data, 1, n, fp), n);
  fclose(fp);
}

void okv_mtest_temp_path(char *dir_template, const char *name, char *out, size_t cap) {
  assert_non_null(mkdtemp(dir_template));
  snprintf(out, cap, "%s/%s", dir_template, name);
}

okv_model_t *okv_mtest_load_model(const char *shared, const char *rel) {
  okv_allocator_t a = okv_test_allocator();
  char path[4096];
  okv_ref_shared_path(shared, rel, path, sizeof path);
  okv_model_t *m = NULL;
  OKV_ASSERT_OK(okv_model_load(path, &a, &m));
  return m;
}

size_t okv_mtest_decode(const okv_tokenizer_t *tokenizer, const uint32_t *ids, size_t n, char *out, size_t cap) {
  size_t w = 0;
  for (size_t i = 1; i < n; ++i) {
    char piece[128];
    size_t nb = 0;
    OKV_ASSERT_OK(okv_tokenizer_piece(tokenizer, ids[i - 1], ids[i], piece, sizeof piece, &nb));
    assert_true(w + nb < cap);
    memcpy(out + w, piece, nb);
    w += nb;
  }
  out[w] = '\0';
  return w;
}

const okv_mtest_top5_t okv_mtest_top5[5] = {
    {1, {403, 385, 410, 317, 407}, {17.02352, 15.40621, 13.10826, 12.76917, 12.41809}},
    {403, {407, 383, 261, 403, 432}, {18.45999, 14.29106, 10.89797, 10.66205, 10.31380}},
    {407, {261, 407, 383, 286, 272}, {17.13696, 11.71021, 11.16944, 10.21106, 9.92219}},
    {261, {378, 276, 328, 323, 376}, {18.87440, 11.02817, 9.88017, 8.78938, 8.19414}},
    {378, {432, 383, 322, 353, 323}, {17.79940, 14.28126, 9.70965, 9.58729, 9.13424}},
};
