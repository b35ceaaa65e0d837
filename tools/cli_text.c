/* Safe printing of generated text (see cli_text.h). */
#include "cli_text.h"

#include <stdbool.h>
#include <string.h>

/* Printable ASCII or whitespace (isprint || isspace in the C locale). */
static bool ascii_shown(unsigned char c) {
  return (c >= 0x20 && c < 0x7F) || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* Length of the UTF-8 character a lead byte starts, 0 for a byte that starts
 * none (a continuation byte, the overlong leads C0/C1, F5..FF). */
static unsigned lead_length(unsigned char c) {
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) return 3;
  if (c >= 0xF0 && c <= 0xF4) return 4;
  return 0;
}

/* Whether c may follow lead (no overlong form, surrogate or code point above
 * U+10FFFF). */
static bool second_ok(unsigned char lead, unsigned char c) {
  switch (lead) {
    case 0xE0: return c >= 0xA0 && c <= 0xBF;
    case 0xED: return c >= 0x80 && c <= 0x9F;
    case 0xF0: return c >= 0x90 && c <= 0xBF;
    case 0xF4: return c >= 0x80 && c <= 0x8F;
    default: return (c & 0xC0) == 0x80;
  }
}

void okv_cli_text_filter_init(okv_cli_text_filter_t *f) { memset(f, 0, sizeof *f); }

void okv_cli_text_filter_finish(okv_cli_text_filter_t *f) { okv_cli_text_filter_init(f); }

size_t okv_cli_text_filter(okv_cli_text_filter_t *f, const char *piece, size_t n, char *out) {
  size_t w = 0;
  for (size_t i = 0; i < n; ++i) {
    unsigned char c = (unsigned char)piece[i];
    if (f->need) {
      bool ok = f->n_pending == 1 ? second_ok(f->pending[0], c) : (c & 0xC0) == 0x80;
      if (ok) {
        f->pending[f->n_pending++] = c;
        if (f->n_pending == f->need) {
          /* U+0080..U+009F are the C1 control characters. */
          bool c1 = f->need == 2 && f->pending[0] == 0xC2 && f->pending[1] < 0xA0;
          if (!c1) {
            memcpy(out + w, f->pending, f->need);
            w += f->need;
          }
          f->need = f->n_pending = 0;
        }
        continue;
      }
      f->need = f->n_pending = 0; /* a truncated character: dropped; c is looked at afresh */
    }
    if (c < 0x80) {
      if (ascii_shown(c)) out[w++] = (char)c;
      continue;
    }
    unsigned len = lead_length(c);
    if (len) {
      f->pending[0] = c;
      f->n_pending = 1;
      f->need = (uint8_t)len;
    }
    /* else a lone continuation byte or an invalid lead: dropped */
  }
  return w;
}
