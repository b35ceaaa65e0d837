/* docs/api.md's usage example must be tests/core/api_example.c verbatim (that
 * file is compiled and run as its own test). argv[1] = docs/api.md, argv[2] = the example. */
#include "tests/common/test_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *g_doc_path, *g_example_path;

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = test_malloc((size_t)n + 1);
  size_t got = fread(buf, 1, (size_t)n, f);
  buf[got] = '\0';
  fclose(f);
  return buf;
}

static void test_doc_matches_example(void **state) {
  (void)state;
  char *doc = slurp(g_doc_path), *ex = slurp(g_example_path);
  assert_non_null(doc);
  assert_non_null(ex);
  const char *marker = "<!-- begin tests/core/api_example.c -->\n```c\n";
  char *start = strstr(doc, marker);
  assert_non_null(start);
  start += strlen(marker);
  char *end = strstr(start, "```\n<!-- end tests/core/api_example.c -->");
  assert_non_null(end);
  size_t n = (size_t)(end - start);
  if (n != strlen(ex) || memcmp(start, ex, n) != 0) {
    print_error("docs/api.md's example differs from tests/core/api_example.c\n");
    test_free(doc);
    test_free(ex);
    fail();
  }
  /* About 30 lines. */
  size_t lines = 0;
  for (const char *p = ex; *p; p++) lines += *p == '\n';
  assert_true(lines >= 20 && lines <= 50);
  test_free(doc);
  test_free(ex);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s docs/api.md tests/core/api_example.c\n", argv[0]);
    return 2;
  }
  g_doc_path = argv[1];
  g_example_path = argv[2];
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_doc_matches_example)};
  return cmocka_run_group_tests_name("core_api_doc", tests, NULL, NULL);
}
