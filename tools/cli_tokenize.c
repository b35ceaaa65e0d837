/* oasiskv tokenize: the token ids (or pieces) of standard input, on one line,
 * as llama.cpp's tokenize tool prints them. Only the vocabulary is read: a
 * GGUF file without tensors is enough, and no weights are loaded. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_model.h"
#include "model/gguf.h"
#include "model/tokenizer_gguf.h"

#define CMD "oasiskv tokenize"

/* Largest input read (the encoder's own limit is about 1 GiB). */
#define MAX_INPUT_BYTES ((size_t)1 << 30)

static void usage(FILE *f) {
  fprintf(f,
          "usage: oasiskv tokenize [options] < TEXT\n"
          "  --model M          GGUF file (a vocabulary-only one is enough) or llama2.c checkpoint\n"
          "                     (default: $OKV_MODEL, ../shared/models/stories260K.bin)\n"
          "  --tokenizer T      the tokenizer instead: a GGUF file or a llama2.c tokenizer file (default: a GGUF\n"
          "                     model's own, else $OKV_TOKENIZER, ../shared/models/tok512.bin)\n"
          "  --no-bos           add no BOS/EOS (default: those the vocabulary asks for, e.g. BOS for Llama)\n"
          "  --pieces           print the vocabulary's pieces instead of ids (bytes below 0x21, 0x7F, '\\' and\n"
          "                     invalid UTF-8 written as \\xNN)\n"
          "Reads all of standard input as one UTF-8 text; prints the ids separated by spaces on one line.\n");
}

static bool is_gguf(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return false;
  char magic[4] = {0};
  bool yes = fread(magic, 1, 4, f) == 4 && memcmp(magic, "GGUF", 4) == 0;
  fclose(f);
  return yes;
}

/* The vocabulary size a model file declares: a GGUF file's token_embd.weight
 * rows, else its tokenizer.ggml.tokens count; a llama2.c checkpoint's
 * |vocab_size| header field. */
static okv_status_t model_vocab_size(const char *path, uint32_t *out) {
  if (is_gguf(path)) {
    okv_gguf_t *g = NULL;
    OKV_RETURN_IF_ERROR(okv_gguf_open(path, NULL, &g));
    okv_gguf_tensor_t te;
    okv_status_t s = okv_gguf_tensor_find(g, "token_embd.weight", &te);
    if (!s) {
      *out = te.n_dims >= 2 && te.dims[1] <= UINT32_MAX ? (uint32_t)te.dims[1] : 0;
    } else {
      okv_status_free(s);
      okv_gguf_type_t elem;
      uint64_t n = 0;
      const void *d = NULL;
      s = okv_gguf_get_arr(g, "tokenizer.ggml.tokens", &elem, &n, &d);
      *out = !s && n <= UINT32_MAX ? (uint32_t)n : 0;
    }
    okv_gguf_close(g);
    if (s || *out == 0)
      return okv_status_annotate(s ? s : okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "bad vocabulary size"),
                                 "gguf '%s': no vocabulary size (token_embd.weight or tokenizer.ggml.tokens)", path);
    return OKV_OK;
  }
  FILE *f = fopen(path, "rb");
  if (!f)
    return okv_status_make(errno == ENOENT ? OKV_STATUS_NOT_FOUND : OKV_STATUS_IO_ERROR, "model '%s': %s", path,
                           strerror(errno));
  int32_t h[7];
  size_t got = fread(h, sizeof h[0], 7, f);
  fclose(f);
  int64_t v = got == 7 ? (int64_t)h[5] : 0;
  if (v < 0) v = -v;
  if (v <= 0 || v > (1 << 24))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "checkpoint '%s': no valid vocab_size in its header", path);
  *out = (uint32_t)v;
  return OKV_OK;
}

/* Loads the tokenizer of a GGUF file. */
static okv_status_t load_gguf_tokenizer(const char *path, okv_tokenizer_t **out) {
  okv_gguf_t *g = NULL;
  OKV_RETURN_IF_ERROR(okv_gguf_open(path, NULL, &g));
  okv_status_t s = okv_tokenizer_load_gguf(g, NULL, out);
  okv_gguf_close(g);
  return s;
}

/* The tokenizer the options name (see usage). */
static okv_status_t open_tokenizer(const char *model_flag, const char *tok_flag, okv_tokenizer_t **out) {
  char model[4096], tok[4096];
  OKV_RETURN_IF_ERROR(okv_model_path_resolve(OKV_MODEL_PATH_MODEL, model_flag, model, sizeof model));
  if (!tok_flag && is_gguf(model)) return load_gguf_tokenizer(model, out);
  OKV_RETURN_IF_ERROR(okv_model_path_resolve(OKV_MODEL_PATH_TOKENIZER, tok_flag, tok, sizeof tok));
  uint32_t vocab = 0;
  OKV_RETURN_IF_ERROR(model_vocab_size(model, &vocab));
  if (is_gguf(tok)) {
    OKV_RETURN_IF_ERROR(load_gguf_tokenizer(tok, out));
    if (okv_tokenizer_vocab_size(*out) != vocab) {
      okv_status_t s = okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "tokenizer '%s' has %u tokens, model '%s' %u", tok,
                                       okv_tokenizer_vocab_size(*out), model, vocab);
      okv_tokenizer_free(*out);
      *out = NULL;
      return s;
    }
    return OKV_OK;
  }
  return okv_tokenizer_load(tok, vocab, NULL, out);
}

/* All of stdin in a malloc'd buffer (NUL-terminated). */
static bool read_stdin(char **out, size_t *out_n) {
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap + 1);
  while (buf) {
    if (n == cap) {
      if (cap >= MAX_INPUT_BYTES) {
        fprintf(stderr, CMD ": standard input is longer than %zu bytes\n", MAX_INPUT_BYTES);
        free(buf);
        return false;
      }
      cap *= 2;
      char *nb = realloc(buf, cap + 1);
      if (!nb) break;
      buf = nb;
    }
    size_t got = fread(buf + n, 1, cap - n, stdin);
    n += got;
    if (got == 0) {
      if (ferror(stdin)) {
        fprintf(stderr, CMD ": reading standard input failed\n");
        free(buf);
        return false;
      }
      buf[n] = '\0';
      *out = buf;
      *out_n = n;
      return true;
    }
  }
  free(buf);
  fprintf(stderr, CMD ": out of memory reading standard input\n");
  return false;
}

/* A piece on one line without spaces: printable bytes and valid UTF-8 as
 * they are, the rest as \xNN. */
static void print_piece(const char *p, size_t n) {
  for (size_t i = 0; i < n;) {
    unsigned char c = (unsigned char)p[i];
    size_t l = c < 0x80                   ? 1
               : (c >= 0xC2 && c <= 0xDF) ? 2
               : (c >= 0xE0 && c <= 0xEF) ? 3
               : (c >= 0xF0 && c <= 0xF4) ? 4
                                          : 0;
    bool ok = l > 0 && l <= n - i;
    for (size_t j = 1; ok && j < l; ++j) ok = ((unsigned char)p[i + j] & 0xC0) == 0x80;
    if (l == 1) ok = c > 0x20 && c != 0x7F && c != '\\';
    if (ok) {
      fwrite(p + i, 1, l, stdout);
      i += l;
    } else {
      printf("\\x%02X", c);
      ++i;
    }
  }
}

int okv_cli_tokenize(int argc, char **argv) {
  const char *model_flag = NULL, *tok_flag = NULL, *v = NULL;
  bool bos = true, pieces = false;
  int r;
  for (int i = 1; i < argc; ++i) {
    OKV_CLI_OPT_HELP(usage(stdout))
    OKV_CLI_OPT_STRING("--model", model_flag)
    OKV_CLI_OPT_STRING("--tokenizer", tok_flag)
    if (!strcmp(argv[i], "--no-bos")) {
      bos = false;
      continue;
    }
    if (!strcmp(argv[i], "--pieces")) {
      pieces = true;
      continue;
    }
    fprintf(stderr, CMD ": unknown option '%s' (see --help)\n", argv[i]);
    return 2;
  }
  okv_tokenizer_t *t = NULL;
  okv_status_t s = open_tokenizer(model_flag, tok_flag, &t);
  if (s) {
    okv_cli_print_status(CMD, s);
    return 1;
  }
  char *text = NULL;
  size_t n = 0;
  if (!read_stdin(&text, &n)) {
    okv_tokenizer_free(t);
    return 1;
  }
  size_t cap = n + 4, count = 0;
  uint32_t *ids = malloc(cap * sizeof *ids);
  s = ids ? okv_tokenizer_encode(t, text, n, bos, ids, cap, &count)
          : okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "out of memory for %zu ids", cap);
  if (!s && count > cap) { /* user-defined pieces can add a dummy prefix each: room for all, once more */
    free(ids);
    cap = count;
    ids = malloc(cap * sizeof *ids);
    s = ids ? okv_tokenizer_encode(t, text, n, bos, ids, cap, &count)
            : okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "out of memory for %zu ids", cap);
  }
  int rc = 0;
  if (s) {
    okv_cli_print_status(CMD, okv_status_annotate(s, "standard input"));
    rc = 1;
  } else {
    for (size_t i = 0; i < count; ++i) {
      if (i) fputc(' ', stdout);
      const char *p;
      size_t pl;
      if (pieces && okv_tokenizer_token_text(t, ids[i], &p, &pl) == OKV_OK)
        print_piece(p, pl);
      else
        printf("%u", ids[i]);
    }
    fputc('\n', stdout);
    if (fflush(stdout) != 0 || ferror(stdout)) {
      fprintf(stderr, CMD ": writing standard output failed\n");
      rc = 1;
    }
  }
  free(ids);
  free(text);
  okv_tokenizer_free(t);
  return rc;
}
