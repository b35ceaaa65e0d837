/* okv_status_t: an owned {code, message} object; OKV_OK is NULL.
 *
 * Statuses are allocated with the C library's malloc, not an object allocator:
 * they routinely outlive the object that produced them. When malloc fails, a
 * static out-of-memory status is returned instead; okv_status_free ignores it. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oasiskv/status.h"

#define OKV_STATUS_MESSAGE_MAX 512

struct okv_status_s {
  okv_status_code_t code;
  char message[OKV_STATUS_MESSAGE_MAX];
};

static struct okv_status_s status_oom_static = {OKV_STATUS_OUT_OF_MEMORY,
                                                "out of memory while reporting an error (status allocation failed)"};

static int status_is_static(okv_status_t s) { return s == &status_oom_static; }

static okv_status_t status_vmake(okv_status_code_t code, const char *fmt, va_list ap) {
  if (code == OKV_STATUS_OK) return OKV_OK;
  struct okv_status_s *s = malloc(sizeof(*s));
  if (!s) return &status_oom_static;
  s->code = (code > OKV_STATUS_OK && code < OKV_STATUS_CODE_COUNT) ? code : OKV_STATUS_INTERNAL;
  if (fmt) {
    vsnprintf(s->message, sizeof(s->message), fmt, ap);
  } else {
    s->message[0] = '\0';
  }
  return s;
}

okv_status_t okv_status_make(okv_status_code_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  okv_status_t s = status_vmake(code, fmt, ap);
  va_end(ap);
  return s;
}

okv_status_code_t okv_status_code(okv_status_t s) { return s ? s->code : OKV_STATUS_OK; }

const char *okv_status_message(okv_status_t s) { return s ? s->message : "OK"; }

const char *okv_status_code_name(okv_status_code_t code) {
  switch (code) {
    case OKV_STATUS_OK: return "OK";
    case OKV_STATUS_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case OKV_STATUS_OUT_OF_MEMORY: return "OUT_OF_MEMORY";
    case OKV_STATUS_UNAVAILABLE: return "UNAVAILABLE";
    case OKV_STATUS_COPY_FAILED: return "COPY_FAILED";
    case OKV_STATUS_INTERNAL: return "INTERNAL";
    case OKV_STATUS_NOT_FOUND: return "NOT_FOUND";
    case OKV_STATUS_IO_ERROR: return "IO_ERROR";
    default: return "UNKNOWN";
  }
}

void okv_status_free(okv_status_t s) {
  if (!s || status_is_static(s)) return;
  free(s);
}

okv_status_code_t okv_status_consume(okv_status_t s) {
  okv_status_code_t c = okv_status_code(s);
  okv_status_free(s);
  return c;
}

okv_status_t okv_status_annotate(okv_status_t s, const char *fmt, ...) {
  if (!s || status_is_static(s) || !fmt) return s;
  char prefix[OKV_STATUS_MESSAGE_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof(prefix), fmt, ap);
  va_end(ap);
  char joined[2 * OKV_STATUS_MESSAGE_MAX + 2];
  snprintf(joined, sizeof(joined), "%s: %s", prefix, s->message);
  memcpy(s->message, joined, OKV_STATUS_MESSAGE_MAX - 1);
  s->message[OKV_STATUS_MESSAGE_MAX - 1] = '\0';
  return s;
}
