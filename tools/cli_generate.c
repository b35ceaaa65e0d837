#include <stdio.h>
#include "tools/cli.h"
int okv_cli_generate(int argc, char **argv) {
  (void)argc; (void)argv;
  fprintf(stderr, "oasiskv generate: not built yet\n");
  return 1;
}
