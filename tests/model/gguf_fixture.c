/* Writes a GGUF file of a llama2.c model for the CLI tests (test_gguf_cli.sh):
 *   gguf_fixture MODEL.bin TOKENIZER.bin OUT.gguf [--add-eos] [--no-bos]
 * F32 tensors, the tokenizer's pieces and scores as tokenizer.ggml.* (see
 * gguf_writer.h), tokenizer.ggml.add_eos_token = true with --add-eos and
 * add_bos_token = false with --no-bos. Exit 0 on success, 1 with one stderr
 * line otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_writer.h"
#include "model/model.h"
#include "model_test_util.h"

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: gguf_fixture MODEL.bin TOKENIZER.bin OUT.gguf [--add-eos] [--no-bos]\n");
    return 1;
  }
  bool add_eos = false, no_bos = false;
  for (int i = 4; i < argc; i++) {
    if (strcmp(argv[i], "--add-eos") == 0) {
      add_eos = true;
    } else if (strcmp(argv[i], "--no-bos") == 0) {
      no_bos = true;
    } else {
      fprintf(stderr, "gguf_fixture: unknown option '%s'\n", argv[i]);
      return 1;
    }
  }
  okv_model_t *m = NULL;
  okv_status_t s = okv_model_load(argv[1], NULL, &m);
  if (s != OKV_OK) {
    fprintf(stderr, "gguf_fixture: %s\n", okv_status_message(s));
    okv_status_free(s);
    return 1;
  }
  size_t tok_n = 0;
  void *tok = okv_mtest_read_file(argv[2], &tok_n);
  if (tok == NULL) {
    fprintf(stderr, "gguf_fixture: cannot read '%s'\n", argv[2]);
    okv_model_free(m);
    return 1;
  }
  okv_gw_t *w = okv_gw_from_model(m, OKV_GGML_TYPE_F32, tok, tok_n);
  if (add_eos) okv_gw_kv_bool(w, "tokenizer.ggml.add_eos_token", true);
  if (no_bos) okv_gw_kv_bool(w, "tokenizer.ggml.add_bos_token", false);
  okv_gw_write(w, argv[3]);
  okv_gw_free(w);
  free(tok);
  okv_model_free(m);
  return 0;
}
