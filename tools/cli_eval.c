#include <stdio.h>
#include "tools/cli.h"
int okv_cli_eval(int argc, char **argv) {
  (void)argc; (void)argv;
  fprintf(stderr, "oasiskv eval: not built yet\n");
  return 1;
}
