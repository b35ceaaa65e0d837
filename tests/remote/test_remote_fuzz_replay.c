/* Replays the remote message harness's saved inputs (tests/fuzz/corpus/remote_msg/ and
 * tests/fuzz/regressions/remote_msg/) through the same harness code libFuzzer runs
 * (tests/fuzz/fuzz_remote_msg.c, compiled with OKV_FUZZ_NO_ENTRY), in the normal build.
 * argv[1]: tests/fuzz. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/test_common.h"
#include "tests/fuzz/fuzz_common.h"

static const char *g_fuzz_dir;

void okv_fuzz_fail(const char *file, int line, const char *what) {
  print_error("%s:%d: harness check failed: %s\n", file, line, what);
  fail();
}

const okv_allocator_t *okv_fuzz_allocator(void) { return NULL; }

/* Runs the harness on every regular file of <fuzz dir>/<sub>/remote_msg/; returns the count. */
static size_t replay_dir(const char *sub) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/%s/remote_msg", g_fuzz_dir, sub);
  DIR *d = opendir(dir);
  if (!d) return 0;
  size_t n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.' || strstr(e->d_name, ".md")) continue;
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint8_t *buf = malloc(1 << 20);
    assert_non_null(buf);
    size_t len = fread(buf, 1, 1 << 20, f);
    fclose(f);
    uint8_t *in = malloc(len ? len : 1); /* exactly sized, like libFuzzer's copy */
    assert_non_null(in);
    memcpy(in, buf, len);
    free(buf);
    okv_fuzz_remote_msg(in, len);
    free(in);
    ++n;
  }
  closedir(d);
  return n;
}

static void test_replay(void **state) {
  (void)state;
  size_t r = replay_dir("regressions"), c = replay_dir("corpus");
  printf("remote_msg: %zu regression inputs, %zu seeds replayed\n", r, c);
  assert_true(c >= 10); /* the seeds exist: the directory argument is right */
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_remote_fuzz_replay tests/fuzz\n");
    return 2;
  }
  g_fuzz_dir = argv[1];
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_replay)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
