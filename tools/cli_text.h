/* Safe printing of generated text: the bytes a terminal should see of the
 * decoded token pieces. Like llama2.c's safe_printf, a raw byte token that is
 * neither printable nor whitespace (<0x00>, <0x07>, ...) is not printed; in
 * addition, since a character outside the vocabulary arrives as one byte
 * token per UTF-8 byte, the filter joins those bytes across pieces and prints
 * a valid multi-byte UTF-8 character exactly, and drops invalid UTF-8 (lone
 * continuation bytes, truncated or overlong sequences, surrogates, code points
 * above U+10FFFF) and the C0/C1 control characters other than whitespace. */
#ifndef OASISKV_TOOLS_CLI_TEXT_H
#define OASISKV_TOOLS_CLI_TEXT_H

#include <stddef.h>
#include <stdint.h>

typedef struct okv_cli_text_filter_t {
  unsigned char pending[4]; /* an incomplete UTF-8 character held back */
  uint8_t n_pending;        /* bytes in pending */
  uint8_t need;             /* its full length (2..4); 0 when nothing is pending */
} okv_cli_text_filter_t;

void okv_cli_text_filter_init(okv_cli_text_filter_t *f);

/* Filters the n bytes of piece into out, which must hold at least n + 4
 * bytes; returns how many bytes were written (no NUL terminator). The end of
 * an incomplete character is awaited in the next piece. */
size_t okv_cli_text_filter(okv_cli_text_filter_t *f, const char *piece, size_t n, char *out);

/* The end of the text: an incomplete character still held back is dropped. */
void okv_cli_text_filter_finish(okv_cli_text_filter_t *f);

#endif
