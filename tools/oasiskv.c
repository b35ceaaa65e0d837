/* oasiskv: command-line front end of the OasisKV runtime. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "oasiskv/version.h"
#include "cli.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: oasiskv <command> [options]\n"
          "commands:\n"
          "  info              version, backends compiled in, devices and tiers\n"
          "  eval              teacher-forced evaluation of a model with its KV cache offloaded\n"
          "  generate          generate text with the KV cache offloaded\n"
          "  tokenize          token ids (or pieces) of standard input, on one line\n"
          "  serve             KV server (prefill node): prefills requests, serves their KV over UCX\n"
          "  bench kernels     kernel roofline benchmark\n"
          "  bench runtime     runtime bookkeeping overhead benchmark\n"
          "  bench remote      remote-tier block reads over UCX against ucx_perftest\n"
          "  bench serve       decode throughput at equal device memory (emulated link on cpu)\n"
          "  version           print the version\n"
          "run 'oasiskv <command> --help' for a command's options\n");
}

static int run(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "info")) return okv_cli_info(argc - 1, argv + 1);
  if (!strcmp(cmd, "eval")) return okv_cli_eval(argc - 1, argv + 1);
  if (!strcmp(cmd, "generate")) return okv_cli_generate(argc - 1, argv + 1);
  if (!strcmp(cmd, "tokenize")) return okv_cli_tokenize(argc - 1, argv + 1);
  if (!strcmp(cmd, "serve")) return okv_cli_serve(argc - 1, argv + 1);
  if (!strcmp(cmd, "bench")) {
    if (argc >= 3 && !strcmp(argv[2], "kernels")) return okv_cli_bench_kernels(argc - 2, argv + 2);
    if (argc >= 3 && !strcmp(argv[2], "runtime")) return okv_cli_bench_runtime(argc - 2, argv + 2);
    if (argc >= 3 && !strcmp(argv[2], "remote")) return okv_cli_bench_remote(argc - 2, argv + 2);
    if (argc >= 3 && !strcmp(argv[2], "serve")) return okv_cli_bench_serve(argc - 2, argv + 2);
    if (argc >= 3 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h") || !strcmp(argv[2], "help"))) {
      printf(
          "usage: oasiskv bench kernels|runtime|serve|remote [options]\n"
          "run 'oasiskv bench <name> --help' for a benchmark's options\n");
      return 0;
    }
    fprintf(stderr, "oasiskv bench: expected 'kernels', 'runtime', 'serve' or 'remote'\n");
    return 2;
  }
  if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
    printf("oasiskv %s\n", OKV_VERSION_STRING);
    return 0;
  }
  if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
    usage(stdout);
    return 0;
  }
  fprintf(stderr, "oasiskv: unknown command '%s'\n", cmd);
  usage(stderr);
  return 2;
}

/* A command that succeeded but whose output could not be written (a full disk, a closed pipe) fails: exit 1 with
 * one line on stderr. A command that failed keeps its own status and message. */
int main(int argc, char **argv) {
  int rc = run(argc, argv);
  errno = 0;
  if (fflush(stdout) != 0 || ferror(stdout)) {
    if (rc == 0) {
      fprintf(stderr, "oasiskv: writing the output failed: %s\n", errno ? strerror(errno) : "stream error");
      rc = 1;
    }
  }
  return rc;
}
