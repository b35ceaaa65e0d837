/* The libFuzzer side of the harnesses: a failed check prints and aborts
 * (reported as a crash, the input saved as an artifact); objects use the
 * system allocator, so AddressSanitizer's leak checker sees them. */
#include <stdio.h>
#include <stdlib.h>

#include "tests/fuzz/fuzz_common.h"

/* From the sanitizer runtime: prints "SUMMARY: <text>" on the report stream,
 * which libFuzzer keeps open under -close_fd_mask (stderr itself is closed). */
void __sanitizer_report_error_summary(const char *error_summary) __attribute__((weak));

void okv_fuzz_fail(const char *file, int line, const char *what) {
  char msg[512];
  snprintf(msg, sizeof msg, "okv-fuzz: check failed: %s (%s:%d)", what, file, line);
  fprintf(stderr, "%s\n", msg);
  fflush(stderr);
  if (__sanitizer_report_error_summary) __sanitizer_report_error_summary(msg);
  abort();
}

const okv_allocator_t *okv_fuzz_allocator(void) { return NULL; }
