#include <stdio.h>
#include "tools/cli.h"
int okv_cli_bench_runtime(int argc, char **argv) {
  (void)argc; (void)argv;
  fprintf(stderr, "oasiskv bench runtime: not built yet\n");
  return 1;
}
