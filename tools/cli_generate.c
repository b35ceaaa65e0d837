/* oasiskv generate: text generation with the KV cache offloaded through the
 * runtime. The prompt's tokens are fed as decode steps (their K/V committed
 * one by one); while in the prompt, the draft token is the next prompt token
 * (known exactly), afterwards the chosen drafter proposes it. With --prefill
 * (or --remote / --disaggregated: on a KV server) the prompt's tokens but the
 * last are prefilled densely and admitted as a remote sequence, as eval
 * --prefill-tokens does, and decoding starts at the last prompt token. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cli_model.h"
#include "cli_remote.h"
#include "model/remote_prefill.h"
#include "model/tokenizer_gguf.h"
#include "cli_text.h"

#define CMD "oasiskv generate"

static void usage(FILE *f) {
  fprintf(f,
          "usage: oasiskv generate [options]\n"
          "  --model M          llama2.c checkpoint or GGUF file (llama architecture; default: $OKV_MODEL,\n"
          "                     ../shared/models/stories260K.bin)\n"
          "  --tokenizer T      its tokenizer (default: a GGUF model's own, else $OKV_TOKENIZER,\n"
          "                     ../shared/models/tok512.bin)\n"
          "  --context N        positions the model covers (default: its seq_len / GGUF context_length)\n"
          "  --prompt TEXT      text to continue (default: empty, start from BOS)\n"
          "  --steps N          positions including the prompt's, N >= 1 (default 256); generation stops at\n"
          "                     the end of the context (--context), with a note on stderr if N is larger\n"
          "  --temperature X    0 = greedy, deterministic (default 0)\n"
          "  --seed S           sampling seed (default 1)\n"
          "  --mode M           dense|oasis|proxy|ondemand (default oasis)\n"
          "  --drafter D        self|ngram, the look-ahead token of mode oasis (default self)\n"
          "  --budget K         working-set blocks per KV head (default 8)\n"
          "  --fetch-ratio R    cap C = ceil(R*K) new blocks per KV head per step, R in (0,1] (default 0.05);\n"
          "                     auto[:MAX]: chosen per step from the measured link, at most MAX (default 0.05)\n"
          "  --device D         cpu|cuda|hip (default cpu)\n"
          "  --prefill          prefill the prompt's tokens but the last densely in process and admit them as a\n"
          "                     remote sequence (summaries + top-K initial working set, the rest read through an\n"
          "                     in-memory KV source), as eval --prefill-tokens; the prompt needs 2+ tokens\n"
          "  --remote ADDR:PORT prefill on a KV server (oasiskv serve, same model) instead; this node admits the\n"
          "                     prompt sparsely and reads further blocks over UCX\n"
          "  --token-file F     the server's access token (with --remote)\n"
          "  --disaggregated    start an oasiskv serve on 127.0.0.1 (ephemeral port) with this model, use it as\n"
          "                     --remote, stop it at the end\n"
          "Text goes to stdout (prompt included; byte tokens that are control characters or invalid UTF-8\n"
          "are not printed), one stats line to stderr (a second with the admission when prefilling).\n");
}

static uint32_t sample(const float *logits, uint32_t n, double temperature, uint64_t *rng, double *probs) {
  if (temperature <= 0.0) return okv_logits_argmax(logits, n);
  double mx = logits[0];
  for (uint32_t i = 1; i < n; ++i) mx = logits[i] > mx ? logits[i] : mx;
  double z = 0.0;
  for (uint32_t i = 0; i < n; ++i) z += (probs[i] = exp(((double)logits[i] - mx) / temperature));
  double u = (double)(okv_cli_rng_next(rng) >> 11) * 0x1.0p-53 * z, c = 0.0;
  for (uint32_t i = 0; i < n; ++i) {
    c += probs[i];
    if (u < c) return i;
  }
  return n - 1;
}

/* --steps: a whole number >= 1. Any larger value is accepted: generation stops at the end of the context (the
 * model's seq_len or --context), which is known only once the model is loaded (a note says so then). */
static bool parse_steps(const char *v, uint32_t *out) {
  uint64_t n = 0;
  if (!okv_cli_parse_u64(CMD, "--steps", v, &n)) return false;
  if (n < 1) {
    fprintf(stderr, CMD ": --steps must be at least 1 (generation stops at the end of the context), got %s\n", v);
    return false;
  }
  *out = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
  return true;
}

/* --temperature: a number >= 0. */
static bool parse_temperature(const char *v, double *out) {
  if (!okv_cli_parse_double(CMD, "--temperature", v, out)) return false;
  if (*out < 0.0) {
    fprintf(stderr, CMD ": --temperature must be >= 0, got %s\n", v);
    return false;
  }
  return true;
}

int okv_cli_generate(int argc, char **argv) {
  const char *model_flag = NULL, *tok_flag = NULL, *prompt = "", *device = "cpu", *mode_s = "oasis",
             *drafter_s = "self";
  uint32_t steps = 256, budget = 8, context = 0;
  uint64_t seed = 1;
  double temperature = 0.0, fetch_ratio = 0.05;
  const char *remote_s = NULL, *token_path = NULL;
  bool prefill_flag = false, disaggregated = false;
  const char *steps_s = NULL; /* --steps as given */
  for (int i = 1; i < argc; ++i) {
    const char *v = NULL;
    int r;
    OKV_CLI_OPT_HELP(usage(stdout))
    OKV_CLI_OPT_STRING("--model", model_flag)
    OKV_CLI_OPT_STRING("--tokenizer", tok_flag)
    OKV_CLI_OPT_STRING("--prompt", prompt)
    OKV_CLI_OPT_STRING("--device", device)
    OKV_CLI_OPT_STRING("--mode", mode_s)
    OKV_CLI_OPT_STRING("--drafter", drafter_s)
    OKV_CLI_OPT_PARSED("--steps", parse_steps(steps_s = v, &steps))
    OKV_CLI_OPT_PARSED("--context", okv_cli_parse_u32(CMD, "--context", v, 1, 1u << 20, &context))
    OKV_CLI_OPT_PARSED("--budget", okv_cli_parse_u32(CMD, "--budget", v, 1, OKV_TOPK_MAX, &budget))
    OKV_CLI_OPT_PARSED("--seed", okv_cli_parse_u64(CMD, "--seed", v, &seed))
    OKV_CLI_OPT_PARSED("--temperature", parse_temperature(v, &temperature))
    OKV_CLI_OPT_PARSED("--fetch-ratio", okv_cli_parse_fetch_ratio(CMD, v, &fetch_ratio))
    OKV_CLI_OPT_FLAG("--prefill", prefill_flag)
    OKV_CLI_OPT_STRING("--remote", remote_s)
    OKV_CLI_OPT_STRING("--token-file", token_path)
    OKV_CLI_OPT_FLAG("--disaggregated", disaggregated)
    fprintf(stderr, CMD ": unknown option '%s' (see --help)\n", argv[i]);
    return 2;
  }
  okv_mode_t mode;
  if (!okv_cli_parse_mode(CMD, mode_s, &mode)) return 2;
  okv_drafter_t drafter;
  okv_status_t s = okv_drafter_parse(drafter_s, &drafter);
  if (s) {
    okv_cli_print_status(CMD, s);
    return 2;
  }
  if (drafter == OKV_DRAFTER_ORACLE) {
    fprintf(stderr, CMD ": drafter 'oracle' needs the true next token: it exists in eval only (use self or ngram)\n");
    return 2;
  }
  if (!okv_cli_parse_device(CMD, device)) return 2;
  okv_cli_remote_t remote;
  if (!okv_cli_remote_options(CMD, remote_s, token_path, disaggregated, &remote)) return 2;
  const bool prefill_on = prefill_flag || okv_cli_remote_wanted(&remote);
  if (mode != OKV_MODE_OASIS) drafter = OKV_DRAFTER_NONE;

  okv_cli_model_t cm;
  if (!okv_cli_model_open_ex(CMD, model_flag, tok_flag, device, context, &cm)) return 1;
  const okv_model_config_t *mc = &cm.model->config;
  int rc = 1;
  size_t prompt_bytes = strlen(prompt), n_prompt = 0;
  uint32_t *tokens = calloc(prompt_bytes + 2 > mc->seq_len ? prompt_bytes + 2 : mc->seq_len, sizeof *tokens);
  float *logits = calloc(mc->vocab_size, sizeof *logits);
  double *probs = calloc(mc->vocab_size, sizeof *probs);
  okv_runtime_t *rt = NULL;
  okv_engine_t *eng = NULL;
  uint32_t seq = 0;
  bool seq_added = false;
  okv_eval_prefill_t prefill = {0};
  okv_prefill_seq_t pseq = {0};
  uint32_t P = 0; /* prefilled tokens: positions [0, P) */
  if (!tokens || !logits || !probs) {
    fprintf(stderr, CMD ": out of memory\n");
    goto done;
  }
  s = okv_tokenizer_encode(cm.tokenizer, prompt, prompt_bytes, true, tokens, prompt_bytes + 2, &n_prompt);
  if (s) {
    okv_cli_print_status(CMD, okv_status_annotate(s, "--prompt"));
    goto done;
  }
  const bool gguf_vocab = okv_tokenizer_kind(cm.tokenizer) != OKV_TOKENIZER_LLAMA2C;
  /* A vocabulary that appends EOS to every text (add_eos_token) would end the generation at once. */
  n_prompt = okv_tokenizer_strip_added_eos(cm.tokenizer, tokens, n_prompt);
  /* Without BOS (add_bos_token false) the prompt's first token is text to show; an empty prompt starts
   * from the vocabulary's BOS token all the same. */
  bool show_first = false;
  if (gguf_vocab && n_prompt == 0)
    tokens[n_prompt++] = okv_tokenizer_bos_id(cm.tokenizer);
  else if (gguf_vocab && tokens[0] != okv_tokenizer_bos_id(cm.tokenizer))
    show_first = true;
  if (n_prompt > mc->seq_len) {
    fprintf(stderr, CMD ": the prompt is %zu tokens (BOS included), longer than the model's seq_len %u\n", n_prompt,
            mc->seq_len);
    goto done;
  }
  if (steps > mc->seq_len) { /* as llama.cpp: generation stops when the context is full, with a note */
    if (steps_s)
      fprintf(stderr,
              CMD
              ": note: --steps %s is more than the context's %u positions (the prompt's included): generation "
              "stops when the context is full\n",
              steps_s, mc->seq_len);
    steps = mc->seq_len;
  }
  if (steps < n_prompt) { /* the prompt is fed whole: say so rather than run more steps than asked */
    if (steps_s)
      fprintf(stderr,
              CMD
              ": note: --steps %s is fewer than the prompt's %zu tokens (BOS included): the prompt is fed whole "
              "and nothing is generated\n",
              steps_s, (size_t)n_prompt);
    steps = (uint32_t)n_prompt;
  }
  /* A prefill takes a window of P + 2 tokens (okv_eval_prefill, the job format): the prompt, then the last
   * prompt token repeated (carried, never prefilled; generation overwrites it). */
  if (prefill_on && (n_prompt < 2 || n_prompt + 1 > mc->seq_len)) {
    fprintf(stderr,
            CMD
            ": --prefill, --remote and --disaggregated prefill the prompt's tokens but the last: the prompt "
            "needs 2..%u tokens (BOS included), it has %zu\n",
            mc->seq_len - 1, n_prompt);
    goto done;
  }
  if (prefill_on) {
    P = (uint32_t)n_prompt - 1;
    tokens[n_prompt] = tokens[P];
  }
  if (okv_cli_remote_wanted(&remote) &&
      !okv_cli_remote_open(CMD, cm.model_path, cm.tokenizer_path, device, context, &remote))
    goto done;

  okv_runtime_config_t rc_cfg;
  okv_cli_runtime_config(mc, mode, budget, fetch_ratio, 1, &rc_cfg);
  if (remote.client) { /* the KV server prefills the prompt */
    prefill.n_windows = 1;
    prefill.prefill_tokens = P;
    prefill.remote = remote.client;
    prefill.remote_timeout_s = OKV_CLI_REMOTE_TIMEOUT_S;
    prefill.model_fingerprint = okv_prefill_model_fingerprint(cm.model);
  } else if (prefill_on) { /* the prefill node's dense pass, in process */
    okv_eval_window_t win = {tokens, P + 2u};
    s = okv_eval_prefill(cm.model, cm.device, &win, 1, P, NULL, &prefill);
    if (s) {
      okv_cli_print_status(CMD, okv_status_annotate(s, "--prefill"));
      goto done;
    }
  }
  s = okv_runtime_create(cm.device, &rc_cfg, NULL, &rt);
  if (!s) s = okv_engine_create(cm.model, rt, 1, drafter != OKV_DRAFTER_NONE ? 1 : 0, NULL, &eng);
  if (!s) {
    s = prefill_on ? okv_prefill_admit(rt, &rc_cfg, &prefill, 0, tokens, NULL, &pseq, &seq)
                   : okv_runtime_seq_add(rt, NULL, &seq);
    seq_added = s == OKV_OK;
  }
  if (s) {
    okv_cli_print_status(CMD, s);
    goto done;
  }
  if (prefill_on) okv_runtime_stats_reset(rt); /* count the decode steps only, as eval does */
  uint64_t rng = seed ? seed : 0x9E3779B97F4A7C15ull;
  double t0 = okv_cli_now_s();
  uint32_t n_tokens = (uint32_t)n_prompt, n_steps = 0;
  okv_cli_text_filter_t shown;
  okv_cli_text_filter_init(&shown);
  if (show_first) {
    char piece[512], text[sizeof piece + 4];
    size_t nb = 0;
    okv_status_t ps = okv_tokenizer_piece(cm.tokenizer, OKV_TOKEN_NONE, tokens[0], piece, sizeof piece, &nb);
    if (ps)
      okv_status_free(ps);
    else
      fwrite(text, 1, okv_cli_text_filter(&shown, piece, nb, text), stdout);
  }
  for (uint32_t p = 0; p + 1 < steps; ++p) {
    uint32_t tok = tokens[p], draft = 0;
    if (p >= P) { /* positions [0, P) were prefilled: their text is only shown */
      if (drafter != OKV_DRAFTER_NONE) {
        if (p + 1 < n_prompt) {
          draft = tokens[p + 1];
        } else if (drafter == OKV_DRAFTER_SELF) {
          s = okv_engine_peek(eng, 1, &seq, &tok, logits);
          if (s) break;
          draft = okv_logits_argmax(logits, mc->vocab_size);
        } else {
          draft = okv_drafter_ngram_next(tokens, p + 1);
        }
      }
      s = okv_engine_step(eng, 1, &seq, &tok, drafter != OKV_DRAFTER_NONE ? 1 : 0, &draft, logits, NULL);
      if (s) break;
      ++n_steps;
    }
    uint32_t next = p + 1 < n_prompt ? tokens[p + 1] : sample(logits, mc->vocab_size, temperature, &rng, probs);
    if (next == OKV_TOKEN_BOS && okv_tokenizer_kind(cm.tokenizer) == OKV_TOKENIZER_LLAMA2C) break;
    if (okv_tokenizer_kind(cm.tokenizer) != OKV_TOKENIZER_LLAMA2C &&
        (next == okv_tokenizer_eos_id(cm.tokenizer) || next == okv_tokenizer_bos_id(cm.tokenizer)))
      break; /* a GGUF vocabulary's end (or start) of text */
    if (p + 1 >= n_tokens) tokens[n_tokens++] = next;
    char piece[512], text[sizeof piece + 4];
    size_t nb = 0;
    okv_status_t ps = okv_tokenizer_piece(cm.tokenizer, tok, next, piece, sizeof piece, &nb);
    if (ps)
      okv_status_free(ps);
    else
      fwrite(text, 1, okv_cli_text_filter(&shown, piece, nb, text), stdout);
    fflush(stdout);
  }
  okv_cli_text_filter_finish(&shown);
  double elapsed = okv_cli_now_s() - t0;
  fputc('\n', stdout);
  fflush(stdout);
  if (s) {
    okv_cli_print_status(CMD, s);
    goto done;
  }
  okv_step_stats_t st;
  char ratio_s[32];
  okv_cli_format_fetch_ratio(fetch_ratio, ratio_s, sizeof ratio_s);
  s = okv_runtime_stats(rt, UINT32_MAX, &st);
  if (s) {
    okv_cli_print_status(CMD, s);
    goto done;
  }
  fprintf(stderr,
          "generate: %u steps in %.3f s (%.1f tok/s), mode %s%s%s, K %u, fetch ratio %s: hits %llu, misses %llu, "
          "blocks moved %llu, bytes moved %llu, stall %.4f s\n",
          n_steps, elapsed, elapsed > 0 ? n_steps / elapsed : 0.0, okv_cli_mode_name(mode),
          drafter != OKV_DRAFTER_NONE ? "+" : "", drafter != OKV_DRAFTER_NONE ? okv_drafter_name(drafter) : "",
          rc_cfg.budget_blocks, ratio_s, (unsigned long long)st.hits, (unsigned long long)st.misses,
          (unsigned long long)st.blocks_moved, (unsigned long long)st.bytes_moved[OKV_TIER_HOST][OKV_TIER_DEVICE],
          st.stall_seconds);
  if (prefill_on) { /* what admission moved and what decode read through the KV source (eval's fields) */
    char where[160] = "in process";
    if (remote.client) okv_cli_remote_describe(&remote, where, sizeof where);
    fprintf(stderr,
            "generate: prefilled %u tokens (%s): admitted_bytes %llu, full_kv_bytes %llu, admission_ratio %.3f, "
            "remote_blocks %llu, remote_bytes %llu, remote_stall %.4f s\n",
            P, where, (unsigned long long)pseq.admitted_bytes, (unsigned long long)pseq.full_kv_bytes,
            pseq.admitted_bytes ? (double)pseq.full_kv_bytes / (double)pseq.admitted_bytes : 0.0,
            (unsigned long long)st.remote_blocks, (unsigned long long)st.remote_bytes, st.remote_stall_seconds);
  }
  rc = 0;
done:
  if (seq_added) OKV_IGNORE_ERROR(okv_runtime_seq_remove(rt, seq));
  okv_engine_destroy(eng);
  okv_runtime_destroy(rt);
  okv_prefill_seq_close(&prefill, &pseq); /* after the runtime: it reads through the source until then */
  okv_eval_prefill_free(&prefill);
  if (!okv_cli_remote_close(CMD, &remote) && rc == 0) rc = 1;
  free(probs);
  free(logits);
  free(tokens);
  okv_cli_model_close(&cm);
  return rc;
}
