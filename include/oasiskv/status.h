/* OasisKV status type: every fallible call returns okv_status_t.
 *
 * OKV_OK is NULL (== 0). Any other value is an owned status object carrying a
 * code and a formatted one-line message; the caller owns it and must pass it to
 * okv_status_free() (or propagate it). The library never aborts, exits or prints
 * on bad input; it returns a status instead.
 *
 * Thread safety: status objects are plain values; creating/freeing them is
 * thread-safe. A status is not shared between threads unless the caller does so.
 */
#ifndef OASISKV_STATUS_H
#define OASISKV_STATUS_H

#include "oasiskv/api.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum okv_status_code_e {
  OKV_STATUS_OK = 0,
  OKV_STATUS_INVALID_ARGUMENT = 1, /* a caller error: bad shape, handle, offset, config field */
  OKV_STATUS_OUT_OF_MEMORY = 2,    /* a tier (named in the message) or the host allocator is full */
  OKV_STATUS_UNAVAILABLE = 3,      /* backend/driver/GPU absent; the message says why */
  OKV_STATUS_COPY_FAILED = 4,      /* an asynchronous copy did not complete */
  OKV_STATUS_INTERNAL = 5,         /* a bug or a vendor error we cannot classify */
  OKV_STATUS_NOT_FOUND = 6,        /* a named thing (backend, sequence id, file) does not exist */
  OKV_STATUS_IO_ERROR = 7,         /* reading or writing a file failed */
  OKV_STATUS_CODE_COUNT
} okv_status_code_t;

typedef struct okv_status_s *okv_status_t;

#define OKV_OK ((okv_status_t)0)

/* Creates a status with `code` and a printf-style message (truncated to 511
 * bytes). Returns OKV_OK when code is OKV_STATUS_OK. Never fails: if the
 * message cannot be allocated a static out-of-memory status is returned, which
 * okv_status_free() accepts. */
OKV_API okv_status_t okv_status_make(okv_status_code_t code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* The code of `s` (OKV_STATUS_OK for OKV_OK). */
OKV_API okv_status_code_t okv_status_code(okv_status_t s);

/* The message of `s` ("OK" for OKV_OK). Borrowed: valid until okv_status_free(s). */
OKV_API const char *okv_status_message(okv_status_t s);

/* The stable name of a code, e.g. "INVALID_ARGUMENT". */
OKV_API const char *okv_status_code_name(okv_status_code_t code);

/* Frees `s`; OKV_OK and the static statuses are accepted. */
OKV_API void okv_status_free(okv_status_t s);

/* Returns the code of `s` and frees it: `if (okv_status_consume(s) != OKV_STATUS_OK) ...` */
OKV_API okv_status_code_t okv_status_consume(okv_status_t s);

/* Prefixes the message of `s` with a formatted context ("while X: <old message>")
 * and returns it (same code). OKV_OK passes through unchanged. */
OKV_API okv_status_t okv_status_annotate(okv_status_t s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#define OKV_RETURN_IF_ERROR(expr)                          \
  do {                                                     \
    okv_status_t okv_status_tmp_ = (expr);                 \
    if (okv_status_tmp_ != OKV_OK) return okv_status_tmp_; \
  } while (0)

/* Like OKV_RETURN_IF_ERROR, prefixing the message with a printf-style context:
 *   OKV_RETURN_IF_ERROR_CTX(okv_hal_event_wait(ev), "layer %u", layer); */
#define OKV_RETURN_IF_ERROR_CTX(expr, ...)                                                   \
  do {                                                                                       \
    okv_status_t okv_status_tmp_ = (expr);                                                   \
    if (okv_status_tmp_ != OKV_OK) return okv_status_annotate(okv_status_tmp_, __VA_ARGS__); \
  } while (0)

/* Drops a status on purpose: cleanup and drain paths where the failure was
 * already reported or has no one to report to. Say why beside each use. */
#define OKV_IGNORE_ERROR(expr) okv_status_free(expr)

#define OKV_IS_OK(s) ((s) == OKV_OK)

#ifdef __cplusplus
}
#endif
#endif /* OASISKV_STATUS_H */
