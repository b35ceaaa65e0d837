/* oasiskv serve: the prefill node of prefill/decode disaggregation. It loads a model, listens as a KV
 * server (include/oasiskv/remote.h) and runs each client's prefill job (tools/model/remote_prefill.h):
 * a dense prefill of the job's tokens, then it publishes the request's full KV region and its admission
 * blob (block summaries and the initial working set for the client's budget K) and answers with the
 * request's id, reserved for that client. A request is freed when its client closes it or disconnects.
 * Runs until SIGTERM or SIGINT. docs/remote.md "oasiskv serve". */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cli_model.h"
#include "cli_remote.h"
#include "model/remote_prefill.h"

#define CMD "oasiskv serve"

static void usage(FILE *f) {
  fprintf(f,
          "usage: oasiskv serve [options]\n"
          "  --model M          llama2.c checkpoint or GGUF file (as oasiskv eval)\n"
          "  --tokenizer T      its tokenizer (as oasiskv eval)\n"
          "  --context N        positions the model covers (default: its own)\n"
          "  --device D         cpu|cuda|hip: where prefills run (default cpu)\n"
          "  --listen ADDR:PORT numeric IPv4 address and port (default 127.0.0.1:7000; port 0: an ephemeral\n"
          "                     port); a non-loopback address needs --token-file\n"
          "  --token-file F     access token (the file's first line, 1..256 printable bytes); every client\n"
          "                     must present it\n"
          "  --verbose          log every connection, job and request (default: refusals and failures)\n"
          "Prints 'oasiskv serve: listening on ADDR:PORT' once it accepts clients; runs until SIGTERM/SIGINT.\n");
}

/* A job queued by the progress thread for the main thread. */
typedef struct serve_job_t {
  struct serve_job_t *next;
  uint64_t ticket;
  char client[96];
  uint32_t n;
  uint8_t payload[];
} serve_job_t;

typedef struct serve_t {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  serve_job_t *head, *tail;
  bool verbose;
} serve_t;

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) {
  (void)sig;
  g_stop = 1;
}

static void log_cb(void *user, okv_remote_log_level_t level, const char *message) {
  const serve_t *sv = user;
  if (level == OKV_REMOTE_LOG_INFO && !sv->verbose) return;
  fprintf(stderr, CMD ": %s%s\n", level == OKV_REMOTE_LOG_WARN ? "warning: " : "", message);
}

static void submit_cb(void *user, uint64_t ticket, const char *client, const void *payload, uint32_t n) {
  serve_t *sv = user;
  serve_job_t *j = malloc(sizeof *j + n);
  if (!j) return; /* the client's submit times out; nothing else to do under the server's lock */
  j->next = NULL;
  j->ticket = ticket;
  snprintf(j->client, sizeof j->client, "%s", client);
  j->n = n;
  memcpy(j->payload, payload, n);
  pthread_mutex_lock(&sv->mu);
  if (sv->tail)
    sv->tail->next = j;
  else
    sv->head = j;
  sv->tail = j;
  pthread_cond_signal(&sv->cv);
  pthread_mutex_unlock(&sv->mu);
}

/* Runs one job: prefill, publish as request `ticket` (unique per server), answer. */
static void run_job(okv_remote_server_t *server, const okv_cli_model_t *cm, uint64_t fingerprint, const serve_job_t *j,
                    bool verbose) {
  okv_prefill_job_t job;
  okv_kv_blocks_t kv;
  memset(&kv, 0, sizeof kv);
  void *blob = NULL;
  uint64_t blob_bytes = 0;
  okv_status_t s = okv_prefill_job_parse(j->payload, j->n, NULL, &job);
  if (!s && job.model_fingerprint != fingerprint)
    s = okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                        "the decode node's model (fingerprint %016llx) is not this server's model '%s' (%016llx)",
                        (unsigned long long)job.model_fingerprint, cm->model_path, (unsigned long long)fingerprint);
  if (!s) s = okv_prefill_job_run(cm->model, cm->device, &job, NULL, &kv, &blob, &blob_bytes);
  uint64_t kv_bytes = (uint64_t)kv.shape.n_layers * kv.shape.n_kv_heads * kv.n_blocks * kv.block_bytes;
  if (!s) s = okv_remote_server_publish(server, j->ticket, kv.data, kv_bytes, blob, blob_bytes);
  okv_status_t d;
  if (s) { /* the server logs the failure (a warning) when it answers the client */
    d = okv_remote_server_submit_done(server, j->ticket, 0, okv_status_code(s), okv_status_message(s));
  } else {
    if (verbose)
      fprintf(stderr, CMD ": %s: job %llu: prefilled %u tokens (K %u): %llu KV bytes, %llu admission bytes\n",
              j->client, (unsigned long long)j->ticket, job.prefill_tokens, job.budget_blocks,
              (unsigned long long)kv_bytes, (unsigned long long)blob_bytes);
    d = okv_remote_server_submit_done(server, j->ticket, j->ticket, OKV_STATUS_OK, NULL);
  }
  if (d && verbose) fprintf(stderr, CMD ": job %llu: %s\n", (unsigned long long)j->ticket, okv_status_message(d));
  okv_status_free(d);
  okv_status_free(s);
  okv_prefill_job_free(&job);
  okv_kv_blocks_free(&kv);
  if (blob) {
    okv_allocator_t a = okv_allocator_system();
    okv_free(&a, blob);
  }
}

int okv_cli_serve(int argc, char **argv) {
  const char *model_flag = NULL, *tok_flag = NULL, *device = "cpu", *listen_s = "127.0.0.1:7000", *token_path = NULL;
  uint32_t context = 0;
  bool verbose = false;
  for (int i = 1; i < argc; ++i) {
    const char *v = NULL;
    int r;
    OKV_CLI_OPT_HELP(usage(stdout))
    OKV_CLI_OPT_FLAG("--verbose", verbose)
    OKV_CLI_OPT_STRING("--model", model_flag)
    OKV_CLI_OPT_STRING("--tokenizer", tok_flag)
    OKV_CLI_OPT_STRING("--device", device)
    OKV_CLI_OPT_STRING("--listen", listen_s)
    OKV_CLI_OPT_STRING("--token-file", token_path)
    OKV_CLI_OPT_PARSED("--context", okv_cli_parse_u32(CMD, "--context", v, 1, 1u << 20, &context))
    fprintf(stderr, CMD ": unknown option '%s' (see --help)\n", argv[i]);
    return 2;
  }
  char addr[64];
  uint16_t port = 0;
  if (!okv_cli_parse_hostport(CMD, "--listen", listen_s, true, addr, &port)) return 2;
  bool loopback = !strncmp(addr, "127.", 4);
  char token[257] = {0};
  if (token_path && !okv_cli_read_token(CMD, token_path, token)) return 2;
  if (!loopback && !token_path) {
    fprintf(stderr, CMD ": refusing to listen on %s (not loopback) without --token-file\n", addr);
    return 2;
  }
  if (!okv_cli_parse_device(CMD, device)) return 2;
  okv_cli_model_t cm;
  if (!okv_cli_model_open_ex(CMD, model_flag, tok_flag, device, context, &cm)) return 1;
  const uint64_t fingerprint = okv_prefill_model_fingerprint(cm.model); /* jobs of another model are refused */

  serve_t sv;
  memset(&sv, 0, sizeof sv);
  pthread_mutex_init(&sv.mu, NULL);
  pthread_cond_init(&sv.cv, NULL);
  sv.verbose = verbose;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  /* A reader of our stdout that goes away (eval --disaggregated reads the port line only) must not kill
   * the server: writes to it fail instead. */
  signal(SIGPIPE, SIG_IGN);

  okv_remote_server_config_t cfg;
  okv_remote_server_config_init(&cfg);
  cfg.listen_addr = addr;
  cfg.port = port;
  cfg.token = token_path ? token : NULL;
  cfg.allow_get = loopback; /* one-sided gets (shared memory) only on loopback: docs/remote.md "Security" */
  cfg.log_fn = log_cb;
  cfg.log_user = &sv;
  cfg.submit_fn = submit_cb;
  cfg.submit_user = &sv;
  okv_remote_server_t *server = NULL;
  okv_status_t s = okv_remote_server_create(&cfg, NULL, &server);
  if (s) {
    okv_cli_print_status(CMD, s);
    okv_cli_model_close(&cm);
    return 1;
  }
  printf(CMD ": listening on %s:%u\n", addr, (unsigned)okv_remote_server_port(server));
  fflush(stdout);
  while (!g_stop) {
    pthread_mutex_lock(&sv.mu);
    serve_job_t *j = sv.head;
    if (j) {
      sv.head = j->next;
      if (!sv.head) sv.tail = NULL;
    } else {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 100 * 1000 * 1000; /* wakes up to check for a signal */
      if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec += 1;
        ts.tv_nsec -= 1000000000L;
      }
      pthread_cond_timedwait(&sv.cv, &sv.mu, &ts);
    }
    pthread_mutex_unlock(&sv.mu);
    if (j) {
      run_job(server, &cm, fingerprint, j, verbose);
      free(j);
    }
  }
  okv_remote_server_destroy(server); /* closes every connection: clients see UNAVAILABLE */
  while (sv.head) {
    serve_job_t *j = sv.head;
    sv.head = j->next;
    free(j);
  }
  pthread_cond_destroy(&sv.cv);
  pthread_mutex_destroy(&sv.mu);
  okv_cli_model_close(&cm);
  if (verbose) fprintf(stderr, CMD ": stopped\n");
  return 0;
}
