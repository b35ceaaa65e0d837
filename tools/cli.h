/* Subcommands of the oasiskv CLI. Each returns the process exit code. */
#ifndef OASISKV_TOOLS_CLI_H
#define OASISKV_TOOLS_CLI_H

int okv_cli_info(int argc, char **argv);          /* tools/cli_info.c */
int okv_cli_bench_kernels(int argc, char **argv); /* bench/bench_kernels.c */
int okv_cli_bench_runtime(int argc, char **argv); /* bench/bench_runtime.c */
int okv_cli_eval(int argc, char **argv);          /* tools/cli_eval.c */
int okv_cli_generate(int argc, char **argv);      /* tools/cli_generate.c */

#endif
