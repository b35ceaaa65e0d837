#include <stdio.h>
#include "tools/cli.h"
int okv_cli_info(int argc, char **argv) {
  (void)argc; (void)argv;
  fprintf(stderr, "oasiskv info: not built yet\n");
  return 1;
}
