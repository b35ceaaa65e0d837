/* `oasiskv bench serve`: decode throughput at equal DEVICE memory.
 *
 * Continuous-batching decode at a real model's attention shape (--shape:
 * KV heads, query heads, head_dim, bf16 KV; the layer count scaled down to fit
 * the machine), requests of --context tokens each decoding --decode tokens, a
 * fixed DEVICE capacity (--device-gib, the HAL's DEVICE tier limit), and the
 * model's non-attention work per step emulated as a streaming read of the
 * scaled layers' weight bytes (once per step for the whole batch, so a larger
 * batch amortises it). Modes, one run each on a fresh device:
 *   dense     runtime OKV_MODE_DENSE: admits the sequences whose whole KV fits in DEVICE
 *   offload   every block of every sequence streamed from HOST each step through a bounded
 *             double buffer in DEVICE (FlexGen-style; HAL copies + the attention kernel, here)
 *   ondemand, proxy, oasis   the runtime's sparse modes: as many sequences as their working
 *             sets + summaries fit in DEVICE
 * On the cpu backend the HOST<->DEVICE link is EMULATED (okv_hal_device_params_t
 * link_*): --link-gbps, by default the measured DRAM stream bandwidth / 65 (an
 * H100's HBM:PCIe ratio). Keys and queries come from bench/attn_gen.c or, with
 * --trace, from a real model's trace (tools/kv_trace.h) tiled to the shape.
 * docs/performance.md describes the method, the emulation's limits and results. */
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attn_gen.h"
#include "cli.h"
#include "cli_model.h"
#include "kv_trace.h"
#include "oasiskv/oasiskv.h"

#define CMD                    "oasiskv bench serve"
#define SERVE_MAX_CTX          16u
#define SERVE_EXTENT           64u /* the runtime's HOST extent (blocks), for sizing its host store */
#define SERVE_NOMINAL_GPU_LINK 50e9
#define SERVE_MAX_REPEAT       31u

/* ---- Shapes and modes ---- */

typedef struct serve_shape_t {
  const char *name;
  uint32_t n_layers, n_q_heads, n_kv_heads, head_dim;
  double params;      /* all weights; bf16, read once per decode step */
  double head_params; /* of which the output projection (vocab x dim), read after the last layer */
} serve_shape_t;

static const serve_shape_t k_shapes[] = {
    {"llama3-8b", 32, 32, 8, 128, 8.03e9, 128256.0 * 4096}, /* Llama-3.1-8B */
    {"qwen3-8b", 36, 32, 8, 128, 8.19e9, 151936.0 * 4096},  /* Qwen3-8B */
    {"tiny", 8, 8, 2, 64, 0.2e9, 0.0},                      /* a small shape for tests and quick runs */
};

typedef enum serve_mode_e { SM_DENSE, SM_OFFLOAD, SM_ONDEMAND, SM_PROXY, SM_OASIS, SM_COUNT } serve_mode_t;
static const char *const k_mode_names[SM_COUNT] = {"dense", "offload", "ondemand", "proxy", "oasis"};

static okv_mode_t runtime_mode(serve_mode_t m) {
  switch (m) {
    case SM_DENSE: return OKV_MODE_DENSE;
    case SM_ONDEMAND: return OKV_MODE_ONDEMAND;
    case SM_PROXY: return OKV_MODE_PROXY;
    default: return OKV_MODE_OASIS;
  }
}

/* ---- Options ---- */

typedef struct serve_opts_t {
  const serve_shape_t *shape;
  const char *device, *trace_path, *json_path, *csv_path, *plot_path;
  uint32_t layers, decode, warmup, budget, max_seqs, offload_seqs, offload_steps, recall_steps, recall_seqs, halve_at;
  uint32_t contexts[16], n_contexts;
  bool modes[SM_COUNT];
  double device_gib, link_gbps, link_ratio, link_latency_us, time_budget_s, draft_rho;
  double ratios[16]; /* fetch ratios run by the capped modes (proxy, oasis) */
  bool ratio_auto[16];
  uint32_t n_ratios;
  uint32_t repeat; /* runs of every (mode, ratio) per context, interleaved; the tables give the median run */
  bool link_given;
  uint32_t interleave; /* > 0: a round's runtime configurations alive at once, this many steps each in turn */
  bool fetch_share;    /* proxy / oasis with a fixed ratio: measure the fetched blocks' attention share every step */
  uint64_t seed;
} serve_opts_t;

static void usage(FILE *f) {
  fprintf(f,
          "usage: oasiskv bench serve [options]\n"
          "  --shape S            llama3-8b | qwen3-8b | tiny (default llama3-8b): KV/query heads, head_dim, bf16 KV\n"
          "  --layers N           layers actually run (default 2; the model's weights scaled to them)\n"
          "  --context T          prompt tokens per request (default 16384)\n"
          "  --contexts A,B,..    several contexts, one run each (default: --context; with --plot:\n"
          "                       4096,8192,16384,32768)\n"
          "  --decode N           measured decode steps (tokens per request; default 8)\n"
          "  --warmup N           unmeasured steps first (default: ceil(K/C) + 2 for proxy and oasis, whose\n"
          "                       working sets start as the prompt's last K blocks, the largest over the\n"
          "                       --fetch-ratio list; 2 otherwise, offload 1)\n"
          "  --device-gib G       DEVICE capacity, the same for every mode (default 0.6)\n"
          "  --budget K           working-set blocks per KV head (default 128)\n"
          "  --fetch-ratio R[,..] cap C = ceil(R*K) new blocks per KV head per step, R in (0,1], or auto[:MAX]\n"
          "                       (the runtime's self-tuning cap, at most MAX, by default 0.05); default 0.05; a list\n"
          "                       runs proxy and oasis once per ratio (a sweep)\n"
          "  --link-gbps G        EMULATED HOST<->DEVICE link, GB/s (default: measured DRAM stream bandwidth /\n"
          "                       --link-ratio; 0 = unpaced); cpu backend only\n"
          "  --link-ratio X       DRAM:link ratio of the default link (default 65, an H100's HBM:PCIe)\n"
          "  --link-latency-us U  per copy operation (default 10)\n"
          "  --halve-link-at N    halve the link before measured step N (0 = never)\n"
          "  --modes LIST         any of dense,offload,ondemand,proxy,oasis (default all)\n"
          "  --max-seqs N         upper bound of the concurrency search (default 256)\n"
          "  --offload-seqs N     batch of the offload baseline (default: dense's)\n"
          "  --offload-steps N    measured steps of offload, at most --decode (default 3: alike, link-bound)\n"
          "  --recall-steps N     extra steps sampled for recall (default 2; 0 = skip)\n"
          "  --recall-seqs N      sequences sampled per recall step (default 2)\n"
          "  --time-budget S      stop measuring a mode after S seconds (default 15; >= 1 step)\n"
          "  --repeat N           run every mode (and ratio) N times, interleaved, and report each one's median\n"
          "                       run by tokens/s (1..31, default 1; odd N gives a true median; the rounds'\n"
          "                       order is balanced over a multiple of the configurations, twice that if odd)\n"
          "  --interleave N       (default off; N in 1..4096) run a round's configurations side by side: every\n"
          "                       runtime mode and ratio set up at once, then N decode steps of each in turn, in\n"
          "                       a balanced order that changes every turn; a slow phase of the machine then\n"
          "                       falls on all of them alike. Dense and ondemand warm up as long as proxy and\n"
          "                       oasis. Each runtime is synchronised after its N steps and that wait counts in\n"
          "                       its time and stall (an upper bound: part of it would overlap its next step;\n"
          "                       JSON sync_seconds_per_step). Needs every configuration's memory at once;\n"
          "                       offload runs on its own\n"
          "  --fetch-share        proxy and oasis at fixed ratios also measure, every step on one layer, the\n"
          "                       attention share of the blocks each commit fetched (JSON fetched_share; 1 = an\n"
          "                       average resident block; auto measures it during its probes on its own). Costs\n"
          "                       a second pass over that layer's keys\n"
          "  --trace FILE         keys/queries from `oasiskv eval --trace` instead of the generator\n"
          "  --draft-rho X        generator: draft innovation correlation in [0,1] (default 0.7)\n"
          "  --seed S             generator seed (default 1)\n"
          "  --device D           cpu|cuda|hip (default cpu; on GPUs the link is real)\n"
          "  --json FILE|-  --csv FILE|-  --plot FILE.png (tokens/s vs context, one line per mode)\n");
}

static bool parse_list_u32(const char *s, uint32_t *out, uint32_t cap, uint32_t *n) {
  *n = 0;
  if (okv_cli_list_has_empty(s)) return false;
  const char *p = s;
  while (*p) {
    char *end;
    errno = 0;
    unsigned long v = strtoul(p, &end, 10);
    if (end == p || errno || v == 0 || v > (1u << 20) || *n >= cap) return false;
    out[(*n)++] = (uint32_t)v;
    if (*end == ',')
      p = end + 1;
    else if (*end == '\0')
      p = end;
    else
      return false;
  }
  return *n > 0;
}

static bool parse_modes(const char *s, bool *modes) {
  memset(modes, 0, SM_COUNT * sizeof *modes);
  char buf[256];
  if (strlen(s) >= sizeof buf || okv_cli_list_has_empty(s)) return false;
  strcpy(buf, s);
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    int m = -1;
    for (int i = 0; i < SM_COUNT; i++)
      if (!strcmp(tok, k_mode_names[i])) m = i;
    if (m < 0) return false;
    modes[m] = true;
  }
  for (int i = 0; i < SM_COUNT; i++)
    if (modes[i]) return true;
  return false;
}

/* A comma-separated list of fetch ratios, each in (0, 1], "auto" or "auto:MAX" (1 to 16 entries). */
static bool parse_ratios(const char *v, serve_opts_t *o) {
  char buf[512];
  if (strlen(v) >= sizeof buf || okv_cli_list_has_empty(v)) {
    fprintf(stderr, CMD ": --fetch-ratio: expected 1..16 comma-separated ratios in (0, 1] or 'auto', got '%s'\n", v);
    return false;
  }
  strcpy(buf, v);
  o->n_ratios = 0;
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (o->n_ratios == 16) {
      fprintf(stderr, CMD ": --fetch-ratio: at most 16 ratios\n");
      return false;
    }
    uint32_t i = o->n_ratios++;
    if (!okv_cli_parse_fetch_ratio(CMD, tok, &o->ratios[i])) return false; /* "auto[:MAX]" gives -MAX */
    o->ratio_auto[i] = o->ratios[i] < 0;
    for (uint32_t j = 0; j < i; j++)
      if (o->ratios[j] == o->ratios[i]) { /* the same configuration twice: one row would shadow the other */
        fprintf(stderr,
                CMD ": --fetch-ratio: '%s' is listed twice (each ratio runs once; --repeat N runs it N times)\n", tok);
        return false;
      }
  }
  return o->n_ratios > 0;
}

/* Returns 0 to run, 2 on a bad option (printed). --help is handled by the caller. */
static int parse_args(int argc, char **argv, serve_opts_t *o) {
  memset(o, 0, sizeof *o);
  o->shape = &k_shapes[0];
  o->device = "cpu";
  o->layers = 2;
  o->contexts[0] = 16384;
  o->decode = 8;
  o->offload_steps = 3;
  o->warmup = UINT32_MAX; /* auto: see warmup_steps */
  o->budget = 128;
  o->max_seqs = 256;
  o->recall_steps = 2;
  o->recall_seqs = 2;
  o->device_gib = 0.6;
  o->link_ratio = 65.0;
  o->link_latency_us = 10.0;
  o->ratios[0] = 0.05;
  o->n_ratios = 1;
  o->time_budget_s = 15.0;
  o->draft_rho = 0.7;
  o->seed = 1;
  o->repeat = 1;
  for (int i = 0; i < SM_COUNT; i++) o->modes[i] = true;
  const char *shape_s = NULL, *contexts_s = NULL, *modes_s = NULL;
  uint32_t context = 0;
  for (int i = 1; i < argc; ++i) {
    const char *v = NULL;
    int r;
    OKV_CLI_OPT_STRING("--shape", shape_s)
    OKV_CLI_OPT_PARSED("--layers", okv_cli_parse_u32(CMD, "--layers", v, 1, 256, &o->layers))
    OKV_CLI_OPT_PARSED("--context", okv_cli_parse_u32(CMD, "--context", v, 16, 1u << 19, &context))
    OKV_CLI_OPT_STRING("--contexts", contexts_s)
    OKV_CLI_OPT_PARSED("--decode", okv_cli_parse_u32(CMD, "--decode", v, 1, 4096, &o->decode))
    OKV_CLI_OPT_PARSED("--warmup", okv_cli_parse_u32(CMD, "--warmup", v, 0, 4096, &o->warmup))
    OKV_CLI_OPT_PARSED("--device-gib", okv_cli_parse_double(CMD, "--device-gib", v, &o->device_gib))
    OKV_CLI_OPT_PARSED("--budget", okv_cli_parse_u32(CMD, "--budget", v, 1, OKV_TOPK_MAX, &o->budget))
    OKV_CLI_OPT_PARSED("--fetch-ratio", parse_ratios(v, o))
    OKV_CLI_OPT_PARSED("--link-gbps", (o->link_given = okv_cli_parse_double(CMD, "--link-gbps", v, &o->link_gbps)))
    OKV_CLI_OPT_PARSED("--link-ratio", okv_cli_parse_double(CMD, "--link-ratio", v, &o->link_ratio))
    OKV_CLI_OPT_PARSED("--link-latency-us", okv_cli_parse_double(CMD, "--link-latency-us", v, &o->link_latency_us))
    OKV_CLI_OPT_PARSED("--halve-link-at", okv_cli_parse_u32(CMD, "--halve-link-at", v, 0, 4096, &o->halve_at))
    OKV_CLI_OPT_STRING("--modes", modes_s)
    OKV_CLI_OPT_PARSED("--max-seqs", okv_cli_parse_u32(CMD, "--max-seqs", v, 1, 4096, &o->max_seqs))
    OKV_CLI_OPT_PARSED("--offload-seqs", okv_cli_parse_u32(CMD, "--offload-seqs", v, 1, 4096, &o->offload_seqs))
    OKV_CLI_OPT_PARSED("--offload-steps", okv_cli_parse_u32(CMD, "--offload-steps", v, 1, 4096, &o->offload_steps))
    OKV_CLI_OPT_PARSED("--recall-steps", okv_cli_parse_u32(CMD, "--recall-steps", v, 0, 64, &o->recall_steps))
    OKV_CLI_OPT_PARSED("--recall-seqs", okv_cli_parse_u32(CMD, "--recall-seqs", v, 1, 64, &o->recall_seqs))
    OKV_CLI_OPT_PARSED("--time-budget", okv_cli_parse_double(CMD, "--time-budget", v, &o->time_budget_s))
    OKV_CLI_OPT_PARSED("--repeat", okv_cli_parse_u32(CMD, "--repeat", v, 1, SERVE_MAX_REPEAT, &o->repeat))
    OKV_CLI_OPT_PARSED("--interleave", okv_cli_parse_u32(CMD, "--interleave", v, 1, 4096, &o->interleave))
    OKV_CLI_OPT_STRING("--trace", o->trace_path)
    OKV_CLI_OPT_PARSED("--draft-rho", okv_cli_parse_double(CMD, "--draft-rho", v, &o->draft_rho))
    OKV_CLI_OPT_PARSED("--seed", okv_cli_parse_u64(CMD, "--seed", v, &o->seed))
    OKV_CLI_OPT_STRING("--device", o->device)
    if (!strcmp(argv[i], "--fetch-share")) {
      o->fetch_share = true;
      continue;
    }
    OKV_CLI_OPT_STRING("--json", o->json_path)
    OKV_CLI_OPT_STRING("--csv", o->csv_path)
    OKV_CLI_OPT_STRING("--plot", o->plot_path)
    fprintf(stderr, CMD ": unknown option '%s' (see --help)\n", argv[i]);
    return 2;
  }
  if (shape_s) {
    o->shape = NULL;
    for (size_t i = 0; i < sizeof k_shapes / sizeof k_shapes[0]; i++)
      if (!strcmp(shape_s, k_shapes[i].name)) o->shape = &k_shapes[i];
    if (!o->shape) {
      fprintf(stderr, CMD ": --shape: unknown shape '%s' (llama3-8b, qwen3-8b, tiny)\n", shape_s);
      return 2;
    }
  }
  if (o->layers > o->shape->n_layers) {
    fprintf(stderr, CMD ": --layers %u exceeds %s's %u layers\n", o->layers, o->shape->name, o->shape->n_layers);
    return 2;
  }
  if (contexts_s) {
    if (!parse_list_u32(contexts_s, o->contexts, 16, &o->n_contexts)) {
      fprintf(stderr, CMD ": --contexts: expected up to 16 comma-separated token counts, got '%s'\n", contexts_s);
      return 2;
    }
  } else if (context) {
    o->contexts[0] = context;
    o->n_contexts = 1;
  } else if (o->plot_path) {
    static const uint32_t dflt[] = {4096, 8192, 16384, 32768};
    memcpy(o->contexts, dflt, sizeof dflt);
    o->n_contexts = 4;
  } else {
    o->n_contexts = 1;
  }
  for (uint32_t i = 0; i < o->n_contexts; i++)
    if (o->contexts[i] < 16 || o->contexts[i] > (1u << 19)) {
      fprintf(stderr, CMD ": context %u must be in 16..524288\n", o->contexts[i]);
      return 2;
    }
  if (modes_s && !parse_modes(modes_s, o->modes)) {
    fprintf(stderr, CMD ": --modes: expected a list of dense,offload,ondemand,proxy,oasis, got '%s'\n", modes_s);
    return 2;
  }
  if (!(o->device_gib > 0 && o->device_gib <= 4096)) {
    fprintf(stderr, CMD ": --device-gib must be in (0, 4096]\n");
    return 2;
  }
  /* A link slower than 1 MB/s or a copy latency above 1 s would make one step take minutes to hours (the
   * time budget is checked between steps, not within one). */
  if (o->link_given && !(o->link_gbps == 0 || (o->link_gbps >= 1e-3 && o->link_gbps <= 1e4))) {
    fprintf(stderr, CMD ": --link-gbps must be 0 (unpaced) or in [0.001, 10000] GB/s\n");
    return 2;
  }
  if (!(o->link_ratio > 0 && o->link_ratio <= 1e4) || !(o->link_latency_us >= 0 && o->link_latency_us <= 1e5) ||
      !(o->time_budget_s > 0)) {
    fprintf(stderr, CMD ": --link-ratio must be in (0, 10000], --link-latency-us in [0, 100000], --time-budget > 0\n");
    return 2;
  }
  if (o->halve_at > o->decode) {
    fprintf(stderr, CMD ": --halve-link-at %u is past the %u measured steps (--decode)\n", o->halve_at, o->decode);
    return 2;
  }
  if (o->json_path && o->csv_path && !strcmp(o->json_path, "-") && !strcmp(o->csv_path, "-")) {
    fprintf(stderr, CMD ": --json - and --csv - would both write to stdout; give one of them a file\n");
    return 2;
  }
  for (uint32_t i = 1; i < o->n_contexts; i++)
    if (o->contexts[i] <= o->contexts[i - 1]) {
      fprintf(stderr, CMD ": --contexts must be strictly increasing, got %u after %u\n", o->contexts[i],
              o->contexts[i - 1]);
      return 2;
    }
  if (!(o->draft_rho >= 0 && o->draft_rho <= 1)) {
    fprintf(stderr, CMD ": --draft-rho must be in [0, 1]\n");
    return 2;
  }
  if (!okv_cli_parse_device(CMD, o->device)) return 2;
  if (strcmp(o->device, "cpu") != 0 && o->link_given && o->link_gbps > 0) {
    fprintf(stderr, CMD ": --link-gbps emulates a link on the cpu backend; the %s link is real\n", o->device);
    return 2;
  }
  if (o->plot_path && !strcmp(o->plot_path, "-")) {
    fprintf(stderr, CMD ": --plot needs a file name\n");
    return 2;
  }
  return 0;
}

/* ---- Keys, values and queries: the generator or a trace tiled to the shape ---- */

typedef struct serve_src_t {
  uint32_t L, H, G, D, nq;
  okv_attn_gen_t *gen; /* always (values; keys and queries without a trace) */
  const okv_kv_trace_t *trace;
  uint32_t ctx;      /* prompt tokens of the current context */
  uint32_t n_decode; /* decode positions replayed after the prompt (warmup + measured + recall) */
  float *tmpl_k;     /* generator: the shared prompt keys [L][ctx][H][D] (for exact attention) */
  float q_scale;     /* trace: sqrt(D / trace head_dim), so logits keep the model's scale */
} serve_src_t;

/* Trace tiling of (seq, bench head h): the query window qw and, for a bench
 * position, the trace (window, position) of its key. The prompt is
 * [other windows, whole, newest last][qw positions 0..p0) and decode step i is
 * qw's position p0 + i, p0 = n(qw) - 1 - n_decode. */
static uint32_t trace_qwin(const serve_src_t *x, uint32_t seq, uint32_t h) {
  return (uint32_t)(((uint64_t)seq * x->H + h) % x->trace->n_windows);
}

static uint32_t trace_p0(const serve_src_t *x, uint32_t qw) {
  uint32_t n = x->trace->n_positions[qw];
  return n > x->n_decode + 1 ? n - 1 - x->n_decode : 0;
}

/* The trace (window, position) of bench position pos of (seq, h). */
static void trace_map(const serve_src_t *x, uint32_t seq, uint32_t h, uint32_t pos, uint32_t *w, uint32_t *p) {
  uint32_t qw = trace_qwin(x, seq, h), p0 = trace_p0(x, qw);
  if (pos + p0 >= x->ctx) { /* the query window: its prefix and the decoded positions */
    *w = qw;
    *p = pos + p0 - x->ctx;
    return;
  }
  /* Walk back from the start of qw's prefix through windows qw-1, qw-2, ... (wrapping, qw skipped). */
  uint32_t back = x->ctx - p0 - pos; /* >= 1 tokens before qw's prefix */
  uint32_t nw = x->trace->n_windows, cw = qw;
  for (uint32_t guard = 0; guard < (1u << 24); guard++) {
    cw = (cw + nw - 1) % nw;
    if (cw == qw && nw > 1) continue;
    uint32_t n = x->trace->n_positions[cw];
    if (back <= n) {
      *w = cw;
      *p = n - back;
      return;
    }
    back -= n;
  }
  *w = qw;
  *p = 0;
}

/* Key of bench (seq, layer, h) at pos into k[D]. */
static void src_key(const serve_src_t *x, uint32_t seq, uint32_t layer, uint32_t h, uint32_t pos, float *k) {
  if (!x->trace) {
    if (pos < x->ctx && x->tmpl_k) {
      memcpy(k, x->tmpl_k + (((size_t)layer * x->ctx + pos) * x->H + h) * x->D, x->D * sizeof(float));
    } else {
      okv_attn_gen_kv(x->gen, layer, h, pos < x->ctx ? 0 : (uint64_t)seq + 1, pos, k, NULL);
    }
    return;
  }
  const okv_kv_trace_shape_t *ts = &x->trace->shape;
  uint32_t w, p;
  trace_map(x, seq, h, pos, &w, &p);
  if (p >= x->trace->n_positions[w]) p = x->trace->n_positions[w] - 1;
  const float *tk = okv_kv_trace_k(x->trace, w, p, layer % ts->n_layers) + (size_t)(h % ts->n_kv_heads) * ts->head_dim;
  memset(k, 0, x->D * sizeof(float));
  memcpy(k, tk, ts->head_dim * sizeof(float));
}

/* Value of bench (seq, layer, h) at pos into v[D] (generator values in both cases). */
static void src_value(const serve_src_t *x, uint32_t seq, uint32_t layer, uint32_t h, uint32_t pos, float *v) {
  okv_attn_gen_kv(x->gen, layer, h, pos < x->ctx ? 0 : (uint64_t)seq + 1, pos, NULL, v);
}

/* Queries of bench (seq, layer) for the token at pos, all heads: q [H*G][D]; draft = the look-ahead token's. */
static void src_query(const serve_src_t *x, uint32_t seq, uint32_t layer, uint32_t pos, bool draft, float *q) {
  for (uint32_t h = 0; h < x->H; h++) {
    float *qh = q + (size_t)h * x->G * x->D;
    if (!x->trace) {
      if (draft)
        okv_attn_gen_draft_query(x->gen, seq, layer, h, pos, qh);
      else
        okv_attn_gen_query(x->gen, seq, layer, h, pos, qh);
      continue;
    }
    const okv_kv_trace_shape_t *ts = &x->trace->shape;
    uint32_t w, p, gt = ts->n_q_heads / ts->n_kv_heads;
    trace_map(x, seq, h, pos, &w, &p);
    if (p >= x->trace->n_positions[w]) p = x->trace->n_positions[w] - 1;
    const float *tq =
        draft && x->trace->qd
            ? okv_kv_trace_qd(x->trace, w, p, layer % ts->n_layers)
            : okv_kv_trace_q(x->trace, w, p + (draft && p + 1 < x->trace->n_positions[w]), layer % ts->n_layers);
    for (uint32_t g = 0; g < x->G; g++) {
      const float *src = tq + ((size_t)(h % ts->n_kv_heads) * gt + g % gt) * ts->head_dim;
      float *dst = qh + (size_t)g * x->D;
      memset(dst, 0, x->D * sizeof(float));
      for (uint32_t i = 0; i < ts->head_dim; i++) dst[i] = src[i] * x->q_scale;
    }
  }
}

/* The prompt of `seq`: k, v f32 [L][ctx][H][D] (the runtime's prefill layout). */
static void src_prefill(const serve_src_t *x, uint32_t seq, float *k, float *v) {
  for (uint32_t l = 0; l < x->L; l++)
    for (uint32_t t = 0; t < x->ctx; t++)
      for (uint32_t h = 0; h < x->H; h++) {
        size_t o = (((size_t)l * x->ctx + t) * x->H + h) * x->D;
        src_key(x, seq, l, h, t, k + o); /* generator: a copy of the shared prompt keys */
        src_value(x, seq, l, h, t, v + o);
      }
}

/* ---- The model's non-attention work: a streaming read of its weights ---- */

static volatile uint64_t g_sink;

/* Reads `bytes` of buf (8-byte words) with every OpenMP thread. */
static void stream_read(const void *buf, size_t bytes) {
  const uint64_t *w = buf;
  long n = (long)(bytes / 8);
  uint64_t acc = 0;
#pragma omp parallel for reduction(+ : acc) schedule(static)
  for (long i = 0; i < n; i++) acc += w[i];
  g_sink += acc;
}

/* The weights of one layer and the way they are read: on the cpu backend a host
 * buffer read by every core; on a GPU a DEVICE->DEVICE copy of half the bytes
 * (a read and a write of that half: the same HBM traffic). */
typedef struct serve_weights_t {
  void *host;
  size_t bytes;      /* per layer */
  size_t head_bytes; /* the output projection's share for the layers run, read once after the last layer */
  okv_hal_buffer_t *dev_a, *dev_b;
  okv_hal_stream_t *stream;
} serve_weights_t;

/* Reads n weight bytes, in pieces of at most one layer's buffer. */
static okv_status_t weights_read_bytes(serve_weights_t *w, size_t n) {
  while (n >= 8) {
    size_t c = (n < w->bytes ? n : w->bytes) & ~(size_t)7;
    n -= c;
    if (w->host) {
      stream_read(w->host, c);
      continue;
    }
    if (!w->stream) return OKV_OK;
    OKV_RETURN_IF_ERROR(okv_hal_copy_async(w->stream, w->dev_a, 0, w->dev_b, 0, c / 2));
    OKV_RETURN_IF_ERROR(okv_hal_stream_synchronize(w->stream));
  }
  return OKV_OK;
}

static okv_status_t weights_read(serve_weights_t *w, double fraction) {
  return weights_read_bytes(w, (size_t)((double)w->bytes * fraction));
}

/* ---- Exact attention (recall reference) ---- */

/* Block attention mass of the G query heads of KV head h (q [H*G][D]) over the
 * keys key [n][D] (the tokens 0..n-1), summed per block and averaged over the
 * G heads: mass [ceil(n / 16)]. Double precision. */
static void exact_mass(const serve_src_t *x, uint32_t h, uint32_t n, const float *q, const float *key, double *mass,
                       double *logit) {
  uint32_t nb = (n + 15) / 16, D = x->D;
  for (uint32_t b = 0; b < nb; b++) mass[b] = 0;
  double scale = 1.0 / sqrt((double)D);
  for (uint32_t g = 0; g < x->G; g++) {
    const float *qg = q + ((size_t)h * x->G + g) * D;
    double mx = -INFINITY;
    for (uint32_t t = 0; t < n; t++) {
      const float *k = key + (size_t)t * D;
      double s = 0;
      for (uint32_t i = 0; i < D; i++) s += (double)qg[i] * k[i];
      logit[t] = s * scale;
      if (logit[t] > mx) mx = logit[t];
    }
    double z = 0;
    for (uint32_t t = 0; t < n; t++) z += (logit[t] = exp(logit[t] - mx));
    for (uint32_t t = 0; t < n; t++) mass[t / 16] += logit[t] / z / x->G;
  }
}

/* Hits of `resident` (n_res blocks) among the exact top-K of mass over blocks
 * 0..nb-2 (the active block nb-1 is always resident and not ranked); K' =
 * min(K, nb - 1) is added to *total. */
static void recall_count(const double *mass, uint32_t nb, uint32_t K, const uint32_t *resident, uint32_t n_res,
                         uint8_t *is_res, uint32_t *order, uint64_t *hits, uint64_t *total) {
  if (nb < 2) return;
  uint32_t n = nb - 1, k = K < n ? K : n;
  memset(is_res, 0, nb);
  for (uint32_t i = 0; i < n_res; i++)
    if (resident[i] < nb) is_res[resident[i]] = 1;
  for (uint32_t b = 0; b < n; b++) order[b] = b;
  /* Partial selection of the k largest (ties: lower block first). */
  for (uint32_t i = 0; i < k; i++) {
    uint32_t best = i;
    for (uint32_t j = i + 1; j < n; j++)
      if (mass[order[j]] > mass[order[best]] || (mass[order[j]] == mass[order[best]] && order[j] < order[best]))
        best = j;
    uint32_t t = order[i];
    order[i] = order[best];
    order[best] = t;
    *hits += is_res[order[i]];
  }
  *total += k;
}

/* ---- One mode's run ---- */

typedef struct serve_result_t {
  serve_mode_t mode;
  uint32_t context, concurrent, steps, recall_samples;
  double tokens_per_second, step_seconds, load_seconds;
  double bytes_per_step, fetch_bytes_per_step, append_bytes_per_step, link_budget_bytes_per_step, cap_bytes_per_step;
  double link_utilization, recall;
  double fetched_share;  /* mean attention share of a fetched block (runtime stats), NaN when none was measured */
  double marginal_share; /* auto: okv_cap_state_t.marginal_share after the run's last step (NaN: none) */
  /* Foreground time that is neither the model's work (weights), attention nor writing the new tokens, / step
   * time: waits for fetched blocks, for the pipeline, for the append batch and attention beyond their
   * kernels (stream wake-ups), and the runtime's own bookkeeping (offload: waits for its copies). */
  double stall_fraction;
  double runtime_stall_fraction; /* what the runtime counts (stats stall_seconds) + the wait in step_end */
  double weights_seconds_per_step, attention_seconds_per_step;
  double layer_seconds_per_step;    /* runtime modes: wall time inside okv_runtime_step_layer */
  double step_end_seconds_per_step; /* runtime modes: wall time inside okv_runtime_step_end */
  double sync_seconds_per_step;     /* --interleave: wall time in okv_runtime_synchronize after a turn, / step */
  double append_seconds_per_step;   /* runtime stats append_seconds (HOST writes of the new tokens) */
  double fetch_ratio;               /* with auto: its maximum */
  bool fetch_auto;
  double cap_blocks_mean;   /* auto: the mean C the runtime chose (okv_runtime_cap_state), sampled each step */
  double spare_blocks_mean; /* auto: the heads' mean spare slots, a head's C per step at most (cap_state) */
  bool at_max_seqs;         /* the concurrency search reached --max-seqs (a lower bound of what fits) */
  uint32_t link_halved_at; /* --halve-link-at: the measured step (1-based) before which the link was halved; 0: never */
  double link_bps_sum;     /* the link's bandwidth summed over measured steps (it changes with --halve-link-at) */
  double step_list[64];
  uint32_t n_step_list;
  /* Runtime modes, per measured step (first 64): HOST->DEVICE fetch bytes; auto: the mean C over layers and the
   * link ceiling the controller searched under (okv_cap_state_t.cap_ceiling_blocks). */
  double fetch_list[64], cap_list[64], ceiling_list[64];
  /* --repeat: every run's tokens/s, in run order (in the median run's record) */
  double tps_runs[SERVE_MAX_REPEAT];
  const struct serve_result_t *run_of[SERVE_MAX_REPEAT]; /* every run's record, in run order */
  uint32_t n_runs;
  uint32_t round_position; /* --repeat: 0-based place of this run in its round (the order rotates each round) */
  char note[160];
} serve_result_t;

typedef struct serve_t {
  serve_opts_t o;
  serve_src_t src;
  uint32_t L, H, G, D, nq, K;
  okv_dtype_t dt;
  uint64_t block_bytes, summary_bytes;
  double dram_bps; /* measured */
  double link_bps; /* emulated link (cpu) or nominal (GPU) */
  double link_lat_s;
  bool emulated; /* the link is paced by the cpu backend */
  uint64_t device_bytes;
  serve_weights_t w;
  uint32_t fit[SM_COUNT]; /* concurrency per mode for the current context */
  double cur_ratio;       /* the fetch ratio of the run in progress */
  bool cur_auto;
} serve_t;

static uint32_t n_blocks_of(uint32_t tokens) { return (tokens + 15u) / 16u; }

/* Unmeasured steps first: --warmup, else until a capped mode's working sets can have turned over once,
 * ceil(K / C) + 2 steps (they start as the last K blocks of the prompt; at most C new blocks per KV head per
 * step replace them), and 2 for the other modes (offload: 1, its steps are long and alike). */
/* Steps for one turnover of a K-block working set at a ratio's C: ceil(K / C) + 2. With auto, the runtime's
 * starting C, ceil(min(0.05, MAX) * K). */
static uint32_t turnover_steps(const serve_t *s, double ratio, bool autor) {
  double r = autor ? fmin(0.05, fabs(ratio)) : ratio; /* auto: the list holds -MAX */
  uint32_t C = (uint32_t)ceil(r * s->K - 1e-9);
  if (C < 1) C = 1;
  return (s->K + C - 1) / C + 2;
}

/* Warm-up steps of a mode: proxy and oasis warm up for the longest turnover of the run's fetch ratios, every
 * ratio alike, so that the configurations of a sweep are measured at the same decode positions after the same
 * number of steps (a ratio with a larger C would otherwise be measured earlier, a self-tuning cap that runs
 * below its starting C less warmed). */
static uint32_t warmup_steps(const serve_t *s, serve_mode_t m) {
  if (s->o.warmup != UINT32_MAX) return s->o.warmup;
  if (m == SM_OFFLOAD) return 1;
  /* --interleave: dense and ondemand warm up as long as proxy and oasis, so that every configuration's measured
   * steps fall in the same turns. */
  bool capped_run = s->o.interleave && (s->o.modes[SM_PROXY] || s->o.modes[SM_OASIS]);
  if (m != SM_PROXY && m != SM_OASIS && !capped_run) return 2;
  uint32_t w = 0;
  for (uint32_t i = 0; i < s->o.n_ratios; i++) {
    uint32_t x = turnover_steps(s, s->o.ratios[i], s->o.ratio_auto[i]);
    w = x > w ? x : w;
  }
  return w;
}

/* Decode positions any mode replays: the longest warm-up, the measured and the recall steps (the trace's
 * windows must hold them all). */
static uint32_t decode_positions(const serve_t *s) {
  uint32_t w = warmup_steps(s, SM_DENSE), x = warmup_steps(s, SM_OASIS);
  return (x > w ? x : w) + s->o.decode + s->o.recall_steps;
}

/* Decode steps a run of mode m makes at the current fetch ratio (s->cur_ratio; dense, ondemand and offload do
 * not depend on it): its warm-up, the measured steps and, where recall is sampled (ondemand, proxy, oasis), the
 * recall steps. Each appends one token to every sequence. */
static uint32_t mode_steps(const serve_t *s, serve_mode_t m) {
  uint32_t w = warmup_steps(s, m);
  if (m == SM_OFFLOAD) return w + (s->o.offload_steps < s->o.decode ? s->o.offload_steps : s->o.decode);
  return w + s->o.decode + (m == SM_DENSE ? 0u : s->o.recall_steps);
}

/* Tokens a sequence of mode m may hold (the runtime's max_context_tokens): the prompt, every step's token and
 * a block of margin. */
static uint32_t max_ctx(const serve_t *s, serve_mode_t m, uint32_t ctx) {
  return ctx + mode_steps(s, m) + SERVE_MAX_CTX;
}

/* The runtime's HOST store for B sequences of mode m (whole extents per (layer, KV head)), bytes. */
static uint64_t host_store_bytes(const serve_t *s, serve_mode_t m, uint32_t B, uint32_t ctx) {
  uint32_t mb = n_blocks_of(max_ctx(s, m, ctx)), e = mb < SERVE_EXTENT ? mb : SERVE_EXTENT;
  return (uint64_t)B * s->L * s->H * ((mb + e - 1) / e) * e * s->block_bytes;
}

static okv_status_t make_device(const serve_t *s, uint64_t device_bytes, bool with_link, okv_hal_device_t **out) {
  okv_hal_device_params_t p;
  okv_hal_device_params_init(&p);
  p.capacity_bytes[OKV_TIER_DEVICE] = device_bytes;
  if (with_link && s->emulated) {
    p.link_bytes_per_s = s->link_bps;
    p.link_latency_s = s->link_lat_s;
  }
  return okv_hal_device_create(s->o.device, &p, NULL, out);
}

static void runtime_config(const serve_t *s, serve_mode_t m, uint32_t B, uint32_t ctx, okv_runtime_config_t *c) {
  okv_runtime_config_init(c);
  c->n_layers = s->L;
  c->n_q_heads = s->nq;
  c->n_kv_heads = s->H;
  c->head_dim = s->D;
  c->kv_dtype = s->dt;
  c->block_tokens = OKV_BLOCK_TOKENS;
  c->mode = runtime_mode(m);
  c->budget_blocks = s->K;
  okv_cli_apply_fetch_ratio(s->cur_ratio, c); /* negative: the self-tuning cap with maximum -ratio */
  c->max_seqs = B;
  c->max_context_tokens = max_ctx(s, m, ctx);
  c->host_capacity_bytes = host_store_bytes(s, m, B, ctx);
  c->track_recall = false;
  /* auto measures on its probes only, as a server would run it; the flag is for the fixed ratios */
  c->track_fetch_share = s->o.fetch_share && (m == SM_PROXY || m == SM_OASIS) && !s->cur_auto;
}

/* DEVICE bytes of the HAL device for B sequences of mode m: the budget; dense is
 * not charged for the block summaries the runtime keeps in every mode (a dense
 * server has none). GPU: plus the emulated weights. */
static uint64_t device_capacity(const serve_t *s, serve_mode_t m, uint32_t B, uint32_t ctx) {
  uint64_t cap = s->device_bytes;
  if (m == SM_DENSE) cap += host_store_bytes(s, m, B, ctx) / s->block_bytes * s->summary_bytes;
  if (!s->w.host) cap += s->w.bytes + 8192;
  return cap;
}

/* Whether B sequences of ctx prompt tokens fit in mode m's DEVICE budget for the whole run: at the length they
 * reach after its last step (dense holds every block in DEVICE, so the blocks the steps append count). */
static bool fits(const serve_t *s, serve_mode_t m, uint32_t B, uint32_t ctx) {
  okv_hal_device_t *dev = NULL;
  okv_runtime_t *rt = NULL;
  bool ok = false;
  okv_runtime_config_t c;
  runtime_config(s, m, B, ctx, &c);
  okv_hal_buffer_t *weights = NULL;
  okv_status_t st = make_device(s, device_capacity(s, m, B, ctx), false, &dev);
  if (st == OKV_OK && !s->w.host) /* GPU: the emulated weights take their DEVICE bytes first, as in the run */
    st = okv_hal_buffer_alloc(dev, OKV_TIER_DEVICE, s->w.bytes + 8192, &weights);
  if (st == OKV_OK) st = okv_runtime_create(dev, &c, NULL, &rt);
  if (st == OKV_OK) {
    uint32_t n = 0;
    st = okv_runtime_seq_capacity(rt, ctx + mode_steps(s, m), &n);
    ok = st == OKV_OK && n >= B;
  }
  okv_status_free(st);
  okv_runtime_destroy(rt);
  if (weights) OKV_IGNORE_ERROR(okv_hal_buffer_release(weights));
  if (dev) OKV_IGNORE_ERROR(okv_hal_device_release(dev));
  return ok;
}

/* An upper bound of the concurrency search: DEVICE bytes over the least a sequence needs (its KV in dense,
 * K + 1 slots per head otherwise), capped at --max-seqs. */
static uint32_t fit_bound(const serve_t *s, serve_mode_t m, uint32_t ctx) {
  uint64_t per = m == SM_DENSE ? (uint64_t)s->L * s->H * n_blocks_of(max_ctx(s, m, ctx)) * s->block_bytes
                               : (uint64_t)s->L * s->H * (s->K + 1u) * s->block_bytes;
  uint64_t ub = (m == SM_DENSE ? device_capacity(s, m, 1, ctx) * 2 : s->device_bytes) / per + 2;
  return ub < s->o.max_seqs ? (uint32_t)ub : s->o.max_seqs;
}

/* The largest B <= max that fits (0 when none). */
static uint32_t fit_search(const serve_t *s, serve_mode_t m, uint32_t ctx, uint32_t max) {
  if (!fits(s, m, 1, ctx)) return 0;
  uint32_t lo = 1, hi = max;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo + 1) / 2;
    if (fits(s, m, mid, ctx))
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/* Per-step inputs of a runtime mode, generated before the timed loop so the
 * generator's cost is not in the step time: for step i (position ctx + i) and
 * layer l, q [B][T][nq][D], draft_kv [B][T-1][2][H][D], k_new/v_new [B][H][D]. */
typedef struct step_inputs_t {
  uint32_t n_steps, B, T;
  size_t q_n, d_n, kv_n; /* floats per (step, layer) */
  float *q, *draft, *k, *v;
} step_inputs_t;

static void inputs_free(step_inputs_t *in) {
  free(in->q);
  free(in->draft);
  free(in->k);
  free(in->v);
  memset(in, 0, sizeof *in);
}

static bool inputs_make(const serve_t *s, uint32_t n_steps, uint32_t B, uint32_t T, step_inputs_t *in) {
  memset(in, 0, sizeof *in);
  in->n_steps = n_steps;
  in->B = B;
  in->T = T;
  size_t HD = (size_t)s->H * s->D, QD = (size_t)s->nq * s->D;
  in->q_n = (size_t)B * T * QD;
  in->d_n = (size_t)B * (T - 1) * 2 * HD;
  in->kv_n = (size_t)B * HD;
  size_t per = (size_t)n_steps * s->L;
  in->q = malloc(per * in->q_n * sizeof(float));
  in->draft = malloc(per * (in->d_n ? in->d_n : 1) * sizeof(float));
  in->k = malloc(per * in->kv_n * sizeof(float));
  in->v = malloc(per * in->kv_n * sizeof(float));
  if (!in->q || !in->draft || !in->k || !in->v) {
    inputs_free(in);
    return false;
  }
  const serve_src_t *x = &s->src;
  for (uint32_t i = 0; i < n_steps; i++)
    for (uint32_t l = 0; l < s->L; l++) {
      size_t si = (size_t)i * s->L + l;
      uint32_t pos = x->ctx + i;
      for (uint32_t b = 0; b < B; b++) {
        float *q = in->q + si * in->q_n + (size_t)b * T * QD;
        src_query(x, b, l, pos, false, q);
        if (T > 1) src_query(x, b, l, pos, true, q + QD);
        for (uint32_t h = 0; h < s->H; h++) {
          src_key(x, b, l, h, pos, in->k + si * in->kv_n + (size_t)b * HD + (size_t)h * s->D);
          src_value(x, b, l, h, pos, in->v + si * in->kv_n + (size_t)b * HD + (size_t)h * s->D);
          if (T > 1) {
            float *d = in->draft + si * in->d_n + (size_t)b * 2 * HD;
            src_key(x, b, l, h, pos + 1, d + (size_t)h * s->D);
            src_value(x, b, l, h, pos + 1, d + HD + (size_t)h * s->D);
          }
        }
      }
    }
  return true;
}

static void fail(serve_result_t *r, const char *what, okv_status_t st) {
  snprintf(r->note, sizeof r->note, "%s: %s", what, st ? okv_status_message(st) : "failed");
  okv_status_free(st);
}

/* Recall sampling state of the recall steps. */
typedef struct recall_t {
  uint32_t *res;   /* [n_samples][L][H][cap] resident blocks */
  uint32_t *n_res; /* [n_samples][L][H] */
  uint32_t cap, n_samples;
  uint64_t hits, total;
} recall_t;

/* Exact top-K recall of one sampled (seq, step) over every layer and head, added to rc: q_step = the step's
 * real queries of seq, f32 [L][nq][D]; res / n_res = the blocks attention read, [L][H][cap] / [L][H]; the
 * token at `pos` is the step's (keys 0..pos). */
static void recall_sample(const serve_t *s, uint32_t seq, uint32_t pos, const float *q_step, const uint32_t *res,
                          const uint32_t *n_res, uint32_t cap, recall_t *rc) {
  uint32_t n = pos + 1, nb = n_blocks_of(n);
  double *mass = malloc(nb * sizeof(double)), *logit = malloc(n * sizeof(double));
  float *keys = malloc((size_t)n * s->D * sizeof(float));
  uint8_t *is_res = malloc(nb);
  uint32_t *order = malloc(nb * sizeof(uint32_t));
  if (mass && logit && keys && is_res && order) {
    for (uint32_t l = 0; l < s->L; l++)
      for (uint32_t h = 0; h < s->H; h++) {
        for (uint32_t t = 0; t < n; t++) src_key(&s->src, seq, l, h, t, keys + (size_t)t * s->D);
        exact_mass(&s->src, h, n, q_step + (size_t)l * s->nq * s->D, keys, mass, logit);
        size_t k = (size_t)l * s->H + h;
        recall_count(mass, nb, s->K, res + k * cap, n_res[k] < cap ? n_res[k] : cap, is_res, order, &rc->hits,
                     &rc->total);
      }
  }
  free(mass);
  free(logit);
  free(keys);
  free(is_res);
  free(order);
}

/* dense, ondemand, proxy, oasis: one run of the runtime, as a state that steps one decode step at a time, so
 * that --interleave can keep several configurations alive and step them in turn. */
typedef struct rrun_t {
  serve_t *s;
  serve_mode_t m;
  uint32_t ctx, B, T;
  bool autor; /* the run's fetch ratio is auto (s->cur_* change between the interleaved runs) */
  serve_result_t *r;
  okv_runtime_config_t c;
  serve_weights_t w; /* the shared host weights; on a GPU this run's DEVICE copies of them */
  okv_hal_device_t *dev;
  okv_runtime_t *rt;
  float *out;
  uint32_t *ids, n_ids;
  step_inputs_t in;
  recall_t rc;
  uint32_t warmup, n_steps, i, measured, recall_left;
  double t_meas, t_weights, link_now;
  okv_step_stats_t cum;
  bool done; /* every step made, or failed (r->note says why) */
} rrun_t;

static void rr_close(rrun_t *x) {
  free(x->rc.res);
  free(x->rc.n_res);
  inputs_free(&x->in);
  free(x->out);
  for (uint32_t b = 0; b < x->n_ids; b++) OKV_IGNORE_ERROR(okv_runtime_seq_remove(x->rt, x->ids[b]));
  free(x->ids);
  okv_runtime_destroy(x->rt);
  if (x->w.stream) OKV_IGNORE_ERROR(okv_hal_stream_release(x->w.stream));
  if (x->w.dev_a) OKV_IGNORE_ERROR(okv_hal_buffer_release(x->w.dev_a));
  if (x->w.dev_b) OKV_IGNORE_ERROR(okv_hal_buffer_release(x->w.dev_b));
  if (x->dev) OKV_IGNORE_ERROR(okv_hal_device_release(x->dev));
  memset(x, 0, sizeof *x);
}

/* Sets a run up at the current fetch ratio (s->cur_ratio, s->cur_auto) and concurrency (s->fit[m]): device,
 * runtime, the prompts loaded, the step inputs made. False (x->done, r->note set) when it cannot run; the
 * caller closes x either way. */
static bool rr_open(serve_t *s, serve_mode_t m, uint32_t ctx, serve_result_t *r, rrun_t *x) {
  memset(x, 0, sizeof *x);
  x->s = s;
  x->m = m;
  x->ctx = ctx;
  x->r = r;
  x->autor = s->cur_auto;
  x->done = true; /* until the set-up succeeds */
  x->w = s->w;
  x->w.dev_a = x->w.dev_b = NULL;
  x->w.stream = NULL;
  uint32_t B = x->B = s->fit[m];
  r->concurrent = B;
  r->fetch_auto = s->cur_auto; /* set before any early return: a failed row still names its ratio */
  r->fetch_ratio = s->cur_auto ? -s->cur_ratio : s->cur_ratio; /* with auto: its maximum */
  if (B == 0) {
    snprintf(r->note, sizeof r->note, "not one sequence fits in %.3g GiB of DEVICE", s->o.device_gib);
    return false;
  }
  const uint32_t T = x->T = m == SM_OASIS ? 2u : 1u;
  runtime_config(s, m, B, ctx, &x->c);
  float *pk = NULL, *pv = NULL;
  x->ids = calloc(B, sizeof *x->ids);
  /* The prompts are loaded over an unpaced link (prefill is not what is measured); the link is set after. */
  okv_status_t st = make_device(s, device_capacity(s, m, B, ctx), false, &x->dev);
  if (st) {
    fail(r, "device", st);
    return false;
  }
  if (!s->w.host) { /* GPU: the emulated weights live in DEVICE */
    st = okv_hal_buffer_alloc(x->dev, OKV_TIER_DEVICE, s->w.bytes / 2 + 4096, &x->w.dev_a);
    if (!st) st = okv_hal_buffer_alloc(x->dev, OKV_TIER_DEVICE, s->w.bytes / 2 + 4096, &x->w.dev_b);
    if (!st) st = okv_hal_stream_create(x->dev, &x->w.stream);
    if (st) {
      fail(r, "weights", st);
      return false;
    }
  }
  st = okv_runtime_create(x->dev, &x->c, NULL, &x->rt);
  if (st) {
    fail(r, "runtime", st);
    return false;
  }
  /* Prompts: the generator's is shared by every sequence; a trace's differs per sequence. */
  size_t pf = (size_t)s->L * ctx * s->H * s->D;
  pk = malloc(pf * sizeof(float));
  pv = malloc(pf * sizeof(float));
  x->out = malloc((size_t)B * T * s->nq * s->D * sizeof(float));
  bool ok = x->ids && pk && pv && x->out;
  if (!ok) snprintf(r->note, sizeof r->note, "out of host memory");
  double t0 = okv_cli_now_s();
  for (uint32_t b = 0; ok && b < B; b++) {
    if (b == 0 || s->src.trace) src_prefill(&s->src, b, pk, pv);
    okv_prefill_t p = {ctx, pk, pv};
    st = okv_runtime_seq_add(x->rt, &p, &x->ids[b]);
    if (st) {
      fail(r, "seq_add", st);
      ok = false;
      break;
    }
    x->n_ids++;
  }
  r->load_seconds = okv_cli_now_s() - t0;
  free(pk);
  free(pv);
  if (!ok) return false;
  if (s->emulated) {
    st = okv_hal_device_set_link(x->dev, s->link_bps, s->link_lat_s);
    if (st) {
      fail(r, "link", st);
      return false;
    }
  }
  x->warmup = warmup_steps(s, m);
  x->n_steps = x->warmup + s->o.decode + s->o.recall_steps;
  if (!inputs_make(s, x->n_steps, B, T, &x->in)) {
    snprintf(r->note, sizeof r->note, "out of host memory for the step inputs");
    return false;
  }
  x->recall_left = s->o.recall_steps;
  x->rc.cap = s->K + 2u + (m == SM_DENSE ? n_blocks_of(max_ctx(s, m, ctx)) : 0u);
  x->rc.n_samples = s->o.recall_seqs < B ? s->o.recall_seqs : B;
  if (m != SM_DENSE && x->recall_left > 0) {
    x->rc.res = malloc((size_t)x->rc.n_samples * s->L * s->H * x->rc.cap * sizeof(uint32_t));
    x->rc.n_res = malloc((size_t)x->rc.n_samples * s->L * s->H * sizeof(uint32_t));
    if (!x->rc.res || !x->rc.n_res) x->recall_left = 0;
  } else {
    x->recall_left = 0;
  }
  x->link_now = s->link_bps; /* halved by --halve-link-at */
  x->done = false;
  return true;
}

/* Makes the run's next decode step (a warm-up, measured or recall step); sets x->done after its last one or
 * on a failure (r->note says why). With `sync` (--interleave, a turn's last step) the runtime is synchronised
 * after the step (its background pipeline idle, okv_runtime_synchronize) and that wait counts in the step's
 * time, so that no run's background work falls into another run's steps. */
static void rr_step(rrun_t *x, bool sync) {
  serve_t *s = x->s;
  serve_result_t *r = x->r;
  recall_t *rc = &x->rc;
  const uint32_t B = x->B, T = x->T, i = x->i;
  if (x->done) return;
  if (i >= x->n_steps) {
    x->done = true;
    return;
  }
  bool warm = i < x->warmup;
  bool recall_step = !warm && (x->measured >= s->o.decode || x->t_meas > s->o.time_budget_s);
  if (recall_step && x->recall_left == 0) {
    x->done = true;
    return;
  }
  okv_status_t st = OKV_OK;
  if (!warm && !recall_step && s->o.halve_at && x->measured + 1 == s->o.halve_at && s->emulated) {
    okv_hal_device_info_t info;
    OKV_IGNORE_ERROR(okv_hal_device_info(x->dev, &info));
    st = okv_hal_device_set_link(x->dev, info.link_bytes_per_s / 2, info.link_latency_s);
    if (st) {
      fail(r, "halving the link", st);
      x->done = true;
      return;
    }
    x->link_now /= 2;
    r->link_halved_at = s->o.halve_at;
  }
  if (i == x->warmup) okv_runtime_stats_reset(x->rt);
  double ts = okv_cli_now_s(), tw = 0, tl = 0;
  st = okv_runtime_step_begin(x->rt, B, x->ids, T);
  for (uint32_t l = 0; l < s->L && st == OKV_OK; l++) {
    size_t si = (size_t)i * s->L + l;
    double w0 = okv_cli_now_s();
    st = weights_read(&x->w, 0.5); /* attention projections and what comes before attention */
    tw += okv_cli_now_s() - w0;
    if (st) break;
    w0 = okv_cli_now_s();
    st = okv_runtime_step_layer(x->rt, l, x->in.k + si * x->in.kv_n, x->in.v + si * x->in.kv_n,
                                x->in.q + si * x->in.q_n, T > 1 ? x->in.draft + si * x->in.d_n : NULL, x->out);
    tl += okv_cli_now_s() - w0;
    if (st) break;
    if (recall_step) /* the working set attention just used (the layer's selection is waited for) */
      for (uint32_t j = 0; j < rc->n_samples && st == OKV_OK; j++) {
        uint32_t seq = (x->recall_left * rc->n_samples + j) % B;
        for (uint32_t h = 0; h < s->H && st == OKV_OK; h++) {
          size_t k = ((size_t)j * s->L + l) * s->H + h;
          st = okv_runtime_seq_resident(x->rt, x->ids[seq], l, h, rc->res + k * rc->cap, rc->cap, &rc->n_res[k]);
        }
      }
    if (st) break;
    w0 = okv_cli_now_s();
    st = weights_read(&x->w, 0.5); /* the feed-forward and the output projection */
    tw += okv_cli_now_s() - w0;
  }
  if (!st) { /* the LM head after the last layer (the background selection of the last layer overlaps it) */
    double w0 = okv_cli_now_s();
    st = weights_read_bytes(&x->w, x->w.head_bytes);
    tw += okv_cli_now_s() - w0;
  }
  okv_step_stats_t ss;
  double te = okv_cli_now_s();
  okv_status_t st_end = okv_runtime_step_end(x->rt, &ss); /* no wait for the pipeline (a wait would be a stall) */
  te = okv_cli_now_s() - te;
  if (!st)
    st = st_end;
  else
    okv_status_free(st_end);
  double tsync = 0;
  if (!st && sync) {
    tsync = okv_cli_now_s();
    st = okv_runtime_synchronize(x->rt);
    tsync = okv_cli_now_s() - tsync;
  }
  if (st) {
    fail(r, "step", st);
    x->done = true;
    return;
  }
  double dt = okv_cli_now_s() - ts;
  x->i++;
  if (recall_step) {
    for (uint32_t j = 0; j < rc->n_samples; j++) {
      uint32_t seq = (x->recall_left * rc->n_samples + j) % B;
      /* This step's real queries of seq, per layer: [L][nq][D]. */
      float *qs = malloc((size_t)s->L * s->nq * s->D * sizeof(float));
      if (!qs) break;
      for (uint32_t l = 0; l < s->L; l++)
        memcpy(qs + (size_t)l * s->nq * s->D,
               x->in.q + ((size_t)i * s->L + l) * x->in.q_n + (size_t)seq * T * s->nq * s->D,
               (size_t)s->nq * s->D * sizeof(float));
      recall_sample(s, seq, x->ctx + i, qs, rc->res + (size_t)j * s->L * s->H * rc->cap,
                    rc->n_res + (size_t)j * s->L * s->H, rc->cap, rc);
      free(qs);
      r->recall_samples++;
    }
    x->recall_left--;
  } else if (!warm) {
    okv_step_stats_t *cum = &x->cum;
    cum->bytes_moved[OKV_TIER_HOST][OKV_TIER_DEVICE] += ss.bytes_moved[OKV_TIER_HOST][OKV_TIER_DEVICE];
    cum->append_bytes += ss.append_bytes;
    cum->stall_seconds += ss.stall_seconds + te;
    okv_cap_state_t cs;
    double cap = 0, ceiling = 0;
    if (x->autor && okv_status_consume(okv_runtime_cap_state(x->rt, &cs)) == OKV_STATUS_OK) {
      cap = cs.cap_blocks;
      ceiling = cs.cap_ceiling_blocks;
      r->spare_blocks_mean += cs.spare_blocks;
      r->marginal_share = cs.marginal_share;
    }
    r->cap_blocks_mean += cap;
    r->link_bps_sum += x->link_now;
    if (r->n_step_list < 64) {
      r->fetch_list[r->n_step_list] = (double)ss.bytes_moved[OKV_TIER_HOST][OKV_TIER_DEVICE];
      r->cap_list[r->n_step_list] = cap;
      r->ceiling_list[r->n_step_list] = ceiling;
    }
    cum->attention_seconds += ss.attention_seconds;
    cum->append_seconds += ss.append_seconds;
    cum->fetched_share += ss.fetched_share;
    cum->fetched_share_blocks += ss.fetched_share_blocks;
    r->layer_seconds_per_step += tl;
    r->step_end_seconds_per_step += te;
    r->sync_seconds_per_step += tsync;
    x->t_meas += dt;
    x->t_weights += tw;
    if (r->n_step_list < 64) r->step_list[r->n_step_list++] = dt;
    x->measured++;
  }
  if (x->i >= x->n_steps) x->done = true;
}

/* The run's figures from its measured steps (after its last step). */
static void rr_finish(rrun_t *x) {
  serve_t *s = x->s;
  serve_result_t *r = x->r;
  uint32_t measured = x->measured;
  r->steps = measured;
  if (measured == 0) {
    if (!r->note[0]) snprintf(r->note, sizeof r->note, "no step measured");
    return;
  }
  double t_meas = x->t_meas;
  r->step_seconds = t_meas / measured;
  r->cap_blocks_mean /= measured;
  r->spare_blocks_mean /= measured;
  r->tokens_per_second = (double)x->B * measured / t_meas;
  r->fetch_bytes_per_step = (double)x->cum.bytes_moved[OKV_TIER_HOST][OKV_TIER_DEVICE] / measured;
  r->append_bytes_per_step = (double)x->cum.append_bytes / measured;
  r->fetched_share = x->cum.fetched_share_blocks > 0 ? x->cum.fetched_share / (double)x->cum.fetched_share_blocks : NAN;
  r->bytes_per_step = r->fetch_bytes_per_step + r->append_bytes_per_step;
  /* With --interleave the wait for the pipeline after the step is a stall of the run's own (it would overlap
   * the run's next step otherwise). */
  r->runtime_stall_fraction = (x->cum.stall_seconds + r->sync_seconds_per_step) / t_meas;
  double busy = x->t_weights + x->cum.attention_seconds + x->cum.append_seconds;
  r->stall_fraction = t_meas > busy ? (t_meas - busy) / t_meas : 0.0;
  r->weights_seconds_per_step = x->t_weights / measured;
  r->attention_seconds_per_step = x->cum.attention_seconds / measured;
  r->layer_seconds_per_step /= measured;
  r->step_end_seconds_per_step /= measured;
  r->sync_seconds_per_step /= measured;
  r->append_seconds_per_step = x->cum.append_seconds / measured;
  if (x->m != SM_DENSE) { /* with auto: the bound of its maximum ratio */
    uint32_t C = (uint32_t)ceil(x->c.fetch_ratio * s->K - 1e-9);
    if (C < 1) C = 1;
    r->cap_bytes_per_step = (double)C * s->H * s->L * s->block_bytes * x->B;
  }
  /* Dense reads every block (recall 1 by construction), reported only where recall is sampled at all. */
  if (x->m == SM_DENSE)
    r->recall = s->o.recall_steps > 0 ? 1.0 : NAN;
  else
    r->recall = x->rc.total ? (double)x->rc.hits / (double)x->rc.total : NAN;
}

/* One run on its own: set up, every step, the figures, torn down. */
static void run_runtime(serve_t *s, serve_mode_t m, uint32_t ctx, serve_result_t *r) {
  rrun_t x;
  if (rr_open(s, m, ctx, r, &x))
    while (!x.done) rr_step(&x, false);
  rr_finish(&x);
  rr_close(&x);
}

/* ---- offload: every block streamed from HOST each step (FlexGen-style baseline) ---- */

/* Writes token `pos` (f32 k, v [D]) into its slot of a bf16 block at `base` (Kt[D][16] then V[16][D]). */
static void slot_write(uint16_t *base, uint32_t D, uint32_t pos, const float *k, const float *v) {
  uint32_t t = pos % OKV_BLOCK_TOKENS;
  for (uint32_t d = 0; d < D; d++) {
    base[(size_t)d * OKV_BLOCK_TOKENS + t] = okv_f32_to_bf16(k[d]);
    base[(size_t)OKV_BLOCK_TOKENS * D + (size_t)t * D + d] = okv_f32_to_bf16(v[d]);
  }
}

/* The host KV of offload: [B][L][H][mb] bf16 blocks, (seq, layer) contiguous so one copy streams a unit. */
static uint64_t off_block(const serve_t *s, uint32_t mb, uint32_t b, uint32_t l, uint32_t h, uint32_t blk) {
  return ((((uint64_t)b * s->L + l) * s->H + h) * mb + blk);
}

/* The copy side of offload's double buffer within one step: unit u = layer * B + seq. */
typedef struct off_copier_t {
  okv_hal_stream_t *xs;
  okv_hal_buffer_t *host, *stage[2];
  okv_hal_event_t *e_copy[2], *e_att[2];
  okv_block_copy_t *pairs; /* [H * mb] */
  uint32_t mb, nb, B, n_units, next;
  double moved; /* bytes enqueued */
} off_copier_t;

/* Enqueues the copies of units next..limit (each one batch of the unit's H x nb blocks into stage v % 2,
 * after unit v - 2's attention, whose e_att record the caller has enqueued) and records e_copy. */
static okv_status_t off_copies(const serve_t *s, off_copier_t *c, uint32_t limit) {
  for (; c->next < c->n_units && c->next <= limit; c->next++) {
    uint32_t v = c->next, vb = v % c->B, vl = v / c->B;
    if (v >= 2) OKV_RETURN_IF_ERROR(okv_hal_stream_wait_event(c->xs, c->e_att[v % 2]));
    for (uint32_t h = 0, j = 0; h < s->H; h++)
      for (uint32_t blk = 0; blk < c->nb; blk++, j++) {
        c->pairs[j].src_offset = off_block(s, c->mb, vb, vl, h, blk) * s->block_bytes;
        c->pairs[j].dst_offset = ((uint64_t)h * c->mb + blk) * s->block_bytes;
      }
    OKV_RETURN_IF_ERROR(
        okv_hal_copy_blocks_async(c->xs, c->host, c->stage[v % 2], s->block_bytes, (size_t)s->H * c->nb, c->pairs));
    OKV_RETURN_IF_ERROR(okv_hal_event_record(c->e_copy[v % 2], c->xs));
    c->moved += (double)s->H * c->nb * s->block_bytes;
  }
  return OKV_OK;
}

static void run_offload(serve_t *s, uint32_t ctx, serve_result_t *r) {
  uint32_t B = s->o.offload_seqs ? s->o.offload_seqs : (s->fit[SM_DENSE] ? s->fit[SM_DENSE] : 1u);
  r->concurrent = B;
  const uint32_t L = s->L, H = s->H, D = s->D, mb = n_blocks_of(max_ctx(s, SM_OFFLOAD, ctx));
  const uint64_t bb = s->block_bytes, unit_bytes = (uint64_t)H * mb * bb;
  const size_t QD = (size_t)s->nq * D, HD = (size_t)H * D;
  okv_hal_device_t *dev = NULL;
  okv_hal_buffer_t *host = NULL, *stage[2] = {NULL, NULL}, *qbuf = NULL, *obuf = NULL;
  okv_hal_stream_t *cs = NULL, *xs = NULL;
  okv_hal_event_t *e_copy[2] = {NULL, NULL}, *e_att[2] = {NULL, NULL}, **e_t = NULL;
  step_inputs_t in = {0};
  float *pk = NULL, *pv = NULL;
  okv_block_copy_t *pairs = NULL;
  uint32_t *ws_off = NULL, *ws_slot = NULL;
  uint8_t *ws_valid = NULL;
  okv_status_t st = make_device(s, s->device_bytes + (s->w.host ? 0 : s->w.bytes + 8192), true, &dev);
  if (st) {
    fail(r, "device", st);
    goto done;
  }
  if (!s->w.host) {
    st = okv_hal_buffer_alloc(dev, OKV_TIER_DEVICE, s->w.bytes / 2 + 4096, &s->w.dev_a);
    if (!st) st = okv_hal_buffer_alloc(dev, OKV_TIER_DEVICE, s->w.bytes / 2 + 4096, &s->w.dev_b);
    if (!st) st = okv_hal_stream_create(dev, &s->w.stream);
    if (st) {
      fail(r, "weights", st);
      goto done;
    }
  }
  /* DEVICE: a double buffer of one (sequence, layer) each, queries and outputs of a step. */
  st = okv_hal_buffer_alloc(dev, OKV_TIER_DEVICE, unit_bytes, &stage[0]);
  if (!st) st = okv_hal_buffer_alloc(dev, OKV_TIER_DEVICE, unit_bytes, &stage[1]);
  if (!st) st = okv_hal_buffer_alloc(dev, OKV_TIER_DEVICE, (uint64_t)L * B * QD * 4u, &qbuf);
  if (!st) st = okv_hal_buffer_alloc(dev, OKV_TIER_DEVICE, (uint64_t)L * B * QD * 4u, &obuf);
  if (!st) st = okv_hal_buffer_alloc(dev, OKV_TIER_HOST, (uint64_t)B * L * unit_bytes, &host);
  if (!st) st = okv_hal_stream_create(dev, &cs);
  if (!st) st = okv_hal_stream_create(dev, &xs);
  for (int i = 0; i < 2 && !st; i++) {
    st = okv_hal_event_create(dev, &e_copy[i]);
    if (!st) st = okv_hal_event_create(dev, &e_att[i]);
  }
  e_t = calloc((size_t)2 * L * B, sizeof *e_t);
  for (uint32_t i = 0; i < 2 * L * B && !st && e_t; i++) st = okv_hal_event_create(dev, &e_t[i]);
  if (st || !e_t) {
    fail(r, "offload buffers (DEVICE double buffer, HOST KV)", st);
    goto done;
  }
  uint16_t *hp = okv_hal_buffer_host_ptr(host);
  if (!hp) {
    snprintf(r->note, sizeof r->note, "the HOST tier is not host-addressable");
    goto done;
  }
  /* Load: the prompts in slot layout, straight into the HOST tier. */
  double t0 = okv_cli_now_s();
  size_t pf = (size_t)L * ctx * HD;
  pk = malloc(pf * sizeof(float));
  pv = malloc(pf * sizeof(float));
  pairs = malloc((size_t)H * mb * sizeof *pairs);
  ws_off = malloc((H + 1) * sizeof *ws_off);
  ws_slot = malloc((size_t)H * mb * sizeof *ws_slot);
  ws_valid = malloc((size_t)H * mb);
  if (!pk || !pv || !pairs || !ws_off || !ws_slot || !ws_valid) {
    snprintf(r->note, sizeof r->note, "out of host memory");
    goto done;
  }
  for (uint32_t b = 0; b < B; b++) {
    if (b == 0 || s->src.trace) src_prefill(&s->src, b, pk, pv);
    for (uint32_t l = 0; l < L; l++)
      for (uint32_t t = 0; t < ctx; t++)
        for (uint32_t h = 0; h < H; h++) {
          size_t o = (((size_t)l * ctx + t) * H + h) * D;
          slot_write(hp + off_block(s, mb, b, l, h, t / 16) * (bb / 2), D, t, pk + o, pv + o);
        }
  }
  r->load_seconds = okv_cli_now_s() - t0;
  free(pk);
  free(pv);
  pk = pv = NULL;
  uint32_t n_meas = s->o.offload_steps < s->o.decode ? s->o.offload_steps : s->o.decode;
  uint32_t warmup = warmup_steps(s, SM_OFFLOAD), n_steps = warmup + n_meas;
  if (!inputs_make(s, n_steps, B, 1, &in)) {
    snprintf(r->note, sizeof r->note, "out of host memory for the step inputs");
    goto done;
  }
  double t_meas = 0, t_weights = 0, t_stall = 0, t_att = 0, bytes = 0;
  uint32_t measured = 0;
  for (uint32_t i = 0; i < n_steps; i++) {
    bool warm = i < warmup;
    if (!warm && (measured >= n_meas || t_meas > s->o.time_budget_s)) break;
    uint32_t pos = ctx + i, nb = n_blocks_of(pos + 1);
    double ts = okv_cli_now_s(), tw = 0, stall = 0, att = 0, moved = 0;
    /* The new tokens (all layers: no copy of this step is in flight yet) and the queries. */
    for (uint32_t l = 0; l < L; l++) {
      size_t si = (size_t)i * L + l;
      for (uint32_t b = 0; b < B; b++)
        for (uint32_t h = 0; h < H; h++)
          slot_write(hp + off_block(s, mb, b, l, h, pos / 16) * (bb / 2), D, pos,
                     in.k + si * in.kv_n + (size_t)b * HD + (size_t)h * D,
                     in.v + si * in.kv_n + (size_t)b * HD + (size_t)h * D);
      st = okv_hal_buffer_write(qbuf, (uint64_t)l * B * QD * 4u, in.q + si * in.q_n, (uint64_t)B * QD * 4u);
      if (st) break;
    }
    /* Working set of a unit: every block of every head, slots h*mb + blk of the stage. */
    uint32_t k = 0;
    for (uint32_t h = 0; h < H; h++) {
      ws_off[h] = k;
      for (uint32_t blk = 0; blk < nb; blk++, k++) {
        ws_slot[k] = h * mb + blk;
        ws_valid[k] = (uint8_t)(blk + 1 < nb ? 16u : pos + 1 - blk * 16u);
      }
    }
    ws_off[H] = k;
    off_copier_t oc = {
        xs, host, {stage[0], stage[1]}, {e_copy[0], e_copy[1]}, {e_att[0], e_att[1]}, pairs, mb, nb, B, L * B, 0, 0.0};
    for (uint32_t l = 0; l < L && !st; l++) {
      double w0 = okv_cli_now_s();
      st = weights_read(&s->w, 0.5);
      tw += okv_cli_now_s() - w0;
      double tl = okv_cli_now_s();
      for (uint32_t b = 0; b < B && !st; b++) {
        uint32_t u = l * B + b;
        st = off_copies(s, &oc, u); /* up to copy u */
        if (st) break;
        okv_attention_desc_t d = {.n_seqs = 1,
                                  .n_kv_heads = H,
                                  .group_size = s->G,
                                  .head_dim = D,
                                  .n_query_tokens = 1,
                                  .kv_dtype = s->dt,
                                  .kv_pool = stage[u % 2],
                                  .n_slots = (uint64_t)H * mb,
                                  .ws_offsets = ws_off,
                                  .ws_slots = ws_slot,
                                  .ws_valid = ws_valid,
                                  .q = qbuf,
                                  .q_offset = ((uint64_t)l * B + b) * QD * 4u,
                                  .n_inflight = 0,
                                  .out = obuf,
                                  .out_offset = ((uint64_t)l * B + b) * QD * 4u};
        st = okv_hal_stream_wait_event(cs, e_copy[u % 2]);
        if (!st) st = okv_hal_event_record(e_t[2 * u], cs);
        if (!st) st = okv_hal_attention_async(cs, &d);
        if (!st) st = okv_hal_event_record(e_t[2 * u + 1], cs);
        if (!st) st = okv_hal_event_record(e_att[u % 2], cs);
        if (!st) st = off_copies(s, &oc, u + 2); /* stages of units u + 1, u + 2 (u's attention is enqueued) */
      }
      /* The layer's span: what of it is not attention itself is waiting for the link. */
      if (!st) st = okv_hal_event_wait(e_att[(l * B + B - 1) % 2]);
      double wait = okv_cli_now_s() - tl, busy = 0;
      for (uint32_t b = 0; b < B && !st; b++) {
        double e = 0;
        uint32_t u = l * B + b;
        st = okv_hal_event_elapsed(e_t[2 * u], e_t[2 * u + 1], &e);
        busy += e;
      }
      att += busy;
      stall += wait > busy ? wait - busy : 0;
      w0 = okv_cli_now_s();
      if (!st) st = weights_read(&s->w, 0.5);
      tw += okv_cli_now_s() - w0;
    }
    double wh = okv_cli_now_s();
    if (!st) st = weights_read_bytes(&s->w, s->w.head_bytes); /* the LM head after the last layer */
    tw += okv_cli_now_s() - wh;
    moved = oc.moved;
    if (!st) st = okv_hal_stream_synchronize(xs);
    if (!st) st = okv_hal_stream_synchronize(cs);
    if (st) {
      fail(r, "offload step", st);
      goto done;
    }
    double dt = okv_cli_now_s() - ts;
    if (!warm) {
      t_meas += dt;
      t_weights += tw;
      t_stall += stall;
      t_att += att;
      bytes += moved;
      if (r->n_step_list < 64) r->step_list[r->n_step_list++] = dt;
      measured++;
    }
  }
  r->steps = measured;
  if (measured == 0) {
    snprintf(r->note, sizeof r->note, "no step measured");
    goto done;
  }
  r->step_seconds = t_meas / measured;
  r->tokens_per_second = (double)B * measured / t_meas;
  r->fetch_bytes_per_step = bytes / measured;
  r->bytes_per_step = r->fetch_bytes_per_step;
  r->runtime_stall_fraction = t_stall / t_meas; /* the layers' spans minus their attention kernels */
  r->stall_fraction = t_meas > t_weights + t_att ? (t_meas - t_weights - t_att) / t_meas : 0.0;
  r->weights_seconds_per_step = t_weights / measured;
  r->attention_seconds_per_step = t_att / measured;
  r->recall = s->o.recall_steps > 0 ? 1.0 : NAN; /* every block is attended; reported where recall is sampled */
done:
  inputs_free(&in);
  free(pk);
  free(pv);
  free(pairs);
  free(ws_off);
  free(ws_slot);
  free(ws_valid);
  if (xs) OKV_IGNORE_ERROR(okv_hal_stream_synchronize(xs)); /* drain before the buffers go */
  if (cs) OKV_IGNORE_ERROR(okv_hal_stream_synchronize(cs));
  for (int i = 0; i < 2; i++) {
    if (e_copy[i]) OKV_IGNORE_ERROR(okv_hal_event_release(e_copy[i]));
    if (e_att[i]) OKV_IGNORE_ERROR(okv_hal_event_release(e_att[i]));
    if (stage[i]) OKV_IGNORE_ERROR(okv_hal_buffer_release(stage[i]));
  }
  for (uint32_t i = 0; e_t && i < 2 * L * B; i++)
    if (e_t[i]) OKV_IGNORE_ERROR(okv_hal_event_release(e_t[i]));
  free(e_t);
  if (cs) OKV_IGNORE_ERROR(okv_hal_stream_release(cs));
  if (xs) OKV_IGNORE_ERROR(okv_hal_stream_release(xs));
  if (qbuf) OKV_IGNORE_ERROR(okv_hal_buffer_release(qbuf));
  if (obuf) OKV_IGNORE_ERROR(okv_hal_buffer_release(obuf));
  if (host) OKV_IGNORE_ERROR(okv_hal_buffer_release(host));
  if (s->w.stream) OKV_IGNORE_ERROR(okv_hal_stream_release(s->w.stream));
  if (s->w.dev_a) OKV_IGNORE_ERROR(okv_hal_buffer_release(s->w.dev_a));
  if (s->w.dev_b) OKV_IGNORE_ERROR(okv_hal_buffer_release(s->w.dev_b));
  s->w.stream = NULL;
  s->w.dev_a = s->w.dev_b = NULL;
  if (dev) OKV_IGNORE_ERROR(okv_hal_device_release(dev));
}

/* ---- Bandwidth, outputs ---- */

/* DRAM stream bandwidth (bytes/s): the best of 3 reads of buf by every core. */
static double measure_host_bandwidth(const void *buf, size_t bytes) {
  double best = 0;
  for (int i = 0; i < 3; i++) {
    double t0 = okv_cli_now_s();
    stream_read(buf, bytes);
    double t = okv_cli_now_s() - t0;
    if (t > 0 && bytes / t > best) best = (double)bytes / t;
  }
  return best;
}

/* DEVICE bandwidth of a GPU (bytes/s): a DEVICE->DEVICE copy reads and writes each byte. */
static double measure_device_bandwidth(const char *backend, size_t bytes) {
  okv_hal_device_t *dev = NULL;
  okv_hal_buffer_t *a = NULL, *b = NULL;
  okv_hal_stream_t *st = NULL;
  okv_hal_event_t *e0 = NULL, *e1 = NULL;
  double best = 0;
  okv_status_t s = okv_hal_device_create(backend, NULL, NULL, &dev);
  if (!s) s = okv_hal_buffer_alloc(dev, OKV_TIER_DEVICE, bytes, &a);
  if (!s) s = okv_hal_buffer_alloc(dev, OKV_TIER_DEVICE, bytes, &b);
  if (!s) s = okv_hal_stream_create(dev, &st);
  if (!s) s = okv_hal_event_create(dev, &e0);
  if (!s) s = okv_hal_event_create(dev, &e1);
  for (int i = 0; i < 4 && !s; i++) {
    double t = 0;
    s = okv_hal_event_record(e0, st);
    if (!s) s = okv_hal_copy_async(st, a, 0, b, 0, bytes);
    if (!s) s = okv_hal_event_record(e1, st);
    if (!s) s = okv_hal_stream_synchronize(st);
    if (!s) s = okv_hal_event_elapsed(e0, e1, &t);
    if (!s && i > 0 && t > 0 && 2.0 * bytes / t > best) best = 2.0 * bytes / t;
  }
  okv_status_free(s);
  if (e0) OKV_IGNORE_ERROR(okv_hal_event_release(e0));
  if (e1) OKV_IGNORE_ERROR(okv_hal_event_release(e1));
  if (st) OKV_IGNORE_ERROR(okv_hal_stream_release(st));
  if (a) OKV_IGNORE_ERROR(okv_hal_buffer_release(a));
  if (b) OKV_IGNORE_ERROR(okv_hal_buffer_release(b));
  if (dev) OKV_IGNORE_ERROR(okv_hal_device_release(dev));
  return best;
}

static void finish_result(const serve_t *s, serve_result_t *r) {
  /* The link the measured steps had: its mean over them when --halve-link-at changed it. */
  double link = r->steps > 0 && r->link_bps_sum > 0 ? r->link_bps_sum / r->steps : s->link_bps;
  r->link_budget_bytes_per_step = link * r->step_seconds;
  r->link_utilization = r->link_budget_bytes_per_step > 0 ? r->bytes_per_step / r->link_budget_bytes_per_step : NAN;
}

static void json_num(json_object *o, const char *k, double v) {
  json_object_object_add(o, k, isfinite(v) ? json_object_new_double(v) : NULL);
}

static json_object *num_list(const double *v, uint32_t n) {
  json_object *a = json_object_new_array();
  for (uint32_t i = 0; i < n; i++) json_object_array_add(a, json_object_new_double(v[i]));
  return a;
}

/* One run of a --repeat configuration: its throughput, stall and per-step lists. */
static json_object *run_json(const serve_result_t *r) {
  json_object *o = json_object_new_object();
  json_num(o, "tokens_per_second", r->tokens_per_second);
  json_num(o, "stall_fraction", r->stall_fraction);
  json_num(o, "bytes_per_step", r->bytes_per_step);
  json_object_object_add(o, "round_position", json_object_new_int64(r->round_position));
  json_num(o, "weights_seconds_per_step", r->weights_seconds_per_step);
  json_object_object_add(o, "step_seconds_each", num_list(r->step_list, r->n_step_list));
  if (r->mode != SM_OFFLOAD) json_object_object_add(o, "fetch_bytes_each", num_list(r->fetch_list, r->n_step_list));
  if (r->fetch_auto && (r->mode == SM_PROXY || r->mode == SM_OASIS)) {
    json_object_object_add(o, "cap_blocks_each", num_list(r->cap_list, r->n_step_list));
    json_object_object_add(o, "cap_ceiling_each", num_list(r->ceiling_list, r->n_step_list));
  }
  if (r->note[0]) json_object_object_add(o, "note", json_object_new_string(r->note));
  return o;
}

static json_object *result_json(const serve_t *s, const serve_result_t *r) {
  json_object *o = json_object_new_object();
  json_object_object_add(o, "mode", json_object_new_string(k_mode_names[r->mode]));
  json_object_object_add(o, "shape", json_object_new_string(s->o.shape->name));
  json_object_object_add(o, "source", json_object_new_string(s->src.trace ? "trace" : "generator"));
  json_object_object_add(o, "device", json_object_new_string(s->o.device));
  json_object_object_add(o, "context_tokens", json_object_new_int64(r->context));
  json_object_object_add(o, "n_layers", json_object_new_int64(s->L));
  json_object_object_add(o, "n_layers_model", json_object_new_int64(s->o.shape->n_layers));
  json_object_object_add(o, "n_kv_heads", json_object_new_int64(s->H));
  json_object_object_add(o, "n_q_heads", json_object_new_int64(s->nq));
  json_object_object_add(o, "head_dim", json_object_new_int64(s->D));
  json_object_object_add(o, "block_bytes", json_object_new_int64((int64_t)s->block_bytes));
  json_object_object_add(o, "budget_blocks", json_object_new_int64(s->K));
  bool capped = r->mode == SM_PROXY || r->mode == SM_OASIS;
  bool autor = capped && r->fetch_auto;
  if (autor)
    json_object_object_add(o, "fetch_ratio", json_object_new_string("auto"));
  else
    json_num(o, "fetch_ratio", capped ? r->fetch_ratio : NAN);
  if (autor) json_num(o, "fetch_ratio_max", r->fetch_ratio);
  if (autor) json_num(o, "cap_blocks_mean", r->cap_blocks_mean);
  if (autor) json_num(o, "spare_blocks_mean", r->spare_blocks_mean);
  json_num(o, "device_gib", s->o.device_gib);
  json_object_object_add(o, "concurrent_sequences", json_object_new_int64(r->concurrent));
  json_object_object_add(o, "concurrency_at_max_seqs", json_object_new_boolean(r->at_max_seqs));
  json_object_object_add(o, "steps", json_object_new_int64(r->steps));
  json_object_object_add(o, "interleaved", json_object_new_boolean(s->o.interleave && r->mode != SM_OFFLOAD));
  json_object_object_add(o, "warmup_steps", json_object_new_int64(warmup_steps(s, r->mode)));
  json_num(o, "tokens_per_second", r->tokens_per_second);
  if (r->n_runs > 1) { /* --repeat: this object is the median run; every run's tokens/s */
    json_object *tr = json_object_new_array();
    for (uint32_t i = 0; i < r->n_runs; i++) json_object_array_add(tr, json_object_new_double(r->tps_runs[i]));
    json_object_object_add(o, "tokens_per_second_runs", tr);
    json_object *ra = json_object_new_array(); /* each run's steps, to see what made a run slow */
    for (uint32_t i = 0; i < r->n_runs; i++) json_object_array_add(ra, run_json(r->run_of[i]));
    json_object_object_add(o, "runs", ra);
  }
  json_num(o, "step_seconds", r->step_seconds);
  json_num(o, "bytes_per_step", r->bytes_per_step);
  json_num(o, "fetch_bytes_per_step", r->fetch_bytes_per_step);
  json_num(o, "append_bytes_per_step", r->append_bytes_per_step);
  json_num(o, "cap_bytes_per_step", capped && r->cap_bytes_per_step > 0 ? r->cap_bytes_per_step : NAN);
  json_num(o, "link_bytes_per_second", s->link_bps);
  json_object_object_add(o, "link_halved_at_step", r->link_halved_at ? json_object_new_int64(r->link_halved_at) : NULL);
  json_object_object_add(o, "link_emulated", json_object_new_boolean(s->emulated));
  json_num(o, "link_budget_bytes_per_step", r->link_budget_bytes_per_step);
  json_num(o, "link_utilization", r->link_utilization);
  json_num(o, "stall_fraction", r->stall_fraction);
  json_num(o, "runtime_stall_fraction", r->runtime_stall_fraction);
  json_num(o, "recall", r->recall);
  json_object_object_add(o, "recall_samples", json_object_new_int64(r->recall_samples));
  json_num(o, "fetched_share", capped ? r->fetched_share : NAN);
  if (autor) json_num(o, "marginal_share", r->marginal_share);
  json_num(o, "load_seconds", r->load_seconds);
  json_num(o, "weights_seconds_per_step", r->weights_seconds_per_step);
  json_num(o, "attention_seconds_per_step", r->attention_seconds_per_step);
  if (r->mode != SM_OFFLOAD) {
    json_num(o, "step_layer_seconds_per_step", r->layer_seconds_per_step);
    json_num(o, "step_end_seconds_per_step", r->step_end_seconds_per_step);
    json_num(o, "append_seconds_per_step", r->append_seconds_per_step);
    if (s->o.interleave) json_num(o, "sync_seconds_per_step", r->sync_seconds_per_step);
  }
  json_num(o, "dram_bytes_per_second", s->dram_bps);
  json_object *sl = json_object_new_array();
  for (uint32_t i = 0; i < r->n_step_list; i++) json_object_array_add(sl, json_object_new_double(r->step_list[i]));
  json_object_object_add(o, "step_seconds_each", sl);
  if (r->mode != SM_OFFLOAD) { /* runtime modes */
    json_object *fl = json_object_new_array(), *cl = json_object_new_array(), *ml = json_object_new_array();
    for (uint32_t i = 0; i < r->n_step_list; i++) {
      json_object_array_add(fl, json_object_new_double(r->fetch_list[i]));
      if (autor) json_object_array_add(cl, json_object_new_double(r->cap_list[i]));
      if (autor) json_object_array_add(ml, json_object_new_double(r->ceiling_list[i]));
    }
    json_object_object_add(o, "fetch_bytes_each", fl);
    if (autor) {
      json_object_object_add(o, "cap_blocks_each", cl);
      json_object_object_add(o, "cap_ceiling_each", ml);
    } else {
      json_object_put(cl);
      json_object_put(ml);
    }
  }
  if (r->note[0]) json_object_object_add(o, "note", json_object_new_string(r->note));
  return o;
}

/* v with fmt into b, or "-" when it is not a number (recall without --recall-steps). */
static void fmt_num(char *b, size_t n, const char *fmt, double v) {
  if (isfinite(v))
    snprintf(b, n, fmt, v);
  else
    snprintf(b, n, "-");
}

/* The CSV's fetch_ratio (a number, "auto", or "-" for the uncapped modes) and fetch_ratio_max (auto's
 * maximum ratio, else "-") of r. */
static void csv_ratio(const serve_result_t *r, char *ratio, char *max, size_t n) {
  bool capped = r->mode == SM_PROXY || r->mode == SM_OASIS;
  if (!capped)
    snprintf(ratio, n, "-");
  else if (r->fetch_auto)
    snprintf(ratio, n, "auto");
  else
    snprintf(ratio, n, "%g", r->fetch_ratio);
  if (capped && r->fetch_auto)
    snprintf(max, n, "%g", r->fetch_ratio);
  else
    snprintf(max, n, "-");
}

static void print_csv(FILE *f, const serve_t *s, const serve_result_t *rs, size_t n) {
  fprintf(f,
          "mode,context_tokens,fetch_ratio,fetch_ratio_max,concurrent_sequences,tokens_per_second,step_seconds,"
          "bytes_per_step,fetch_bytes_per_step,append_bytes_per_step,link_budget_bytes_per_step,cap_bytes_per_step,"
          "link_utilization,stall_fraction,recall,load_seconds,steps,note\n");
  for (size_t i = 0; i < n; i++) {
    const serve_result_t *r = &rs[i];
    char ratio[32], max[32];
    csv_ratio(r, ratio, max, sizeof ratio);
    fprintf(f, "%s,%u,%s,%s,%u", k_mode_names[r->mode], r->context, ratio, max, r->concurrent);
    const double v[] = {r->tokens_per_second,     r->step_seconds,
                        r->bytes_per_step,        r->fetch_bytes_per_step,
                        r->append_bytes_per_step, r->link_budget_bytes_per_step,
                        r->cap_bytes_per_step,    r->link_utilization,
                        r->stall_fraction,        r->recall,
                        r->load_seconds};
    for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) {
      char b[32];
      fmt_num(b, sizeof b, "%.6g", v[k]);
      fprintf(f, ",%s", b);
    }
    fprintf(f, ",%u,\"%s\"\n", r->steps, r->note);
  }
  (void)s;
}

static void ratio_text(const serve_result_t *r, char *buf, size_t n) {
  if (r->mode == SM_DENSE || r->mode == SM_OFFLOAD || r->mode == SM_ONDEMAND)
    snprintf(buf, n, "-");
  else if (r->fetch_auto && r->fetch_ratio == OKV_CLI_AUTO_FETCH_RATIO_MAX)
    snprintf(buf, n, "auto");
  else if (r->fetch_auto)
    snprintf(buf, n, "auto:%g", r->fetch_ratio);
  else
    snprintf(buf, n, "%g", r->fetch_ratio);
}

/* --repeat: the median over rounds of a's tokens/s / b's in the same round (the rounds run every configuration
 * once, so a slow phase of the machine divides out); 0 without rounds or with a failed run. The best fixed
 * ratio is the largest of several noisy medians and so biased upwards; the paired ratio shrinks the noise
 * that bias feeds on. */
static double serve_paired_ratio(const serve_result_t *a, const serve_result_t *b) {
  if (a->n_runs < 2 || a->n_runs != b->n_runs) return 0.0;
  double r[SERVE_MAX_REPEAT];
  for (uint32_t i = 0; i < a->n_runs; i++) {
    if (!(a->tps_runs[i] > 0) || !(b->tps_runs[i] > 0)) return 0.0;
    r[i] = a->tps_runs[i] / b->tps_runs[i];
  }
  for (uint32_t i = 1; i < a->n_runs; i++)
    for (uint32_t j = i; j > 0 && r[j] < r[j - 1]; j--) {
      double t = r[j];
      r[j] = r[j - 1];
      r[j - 1] = t;
    }
  return r[(a->n_runs - 1) / 2]; /* the lower middle for even N, as the median runs are chosen */
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void print_table(const serve_t *s, const serve_result_t *rs, size_t n, uint32_t ctx) {
  printf("%-9s %6s %5s %9s %9s %10s %10s %9s %7s %7s %7s\n", "mode", "ratio", "seqs", "tok/s", "step_ms", "MB/step",
         "link_MB", "link_use", "stall", "recall", "load_s");
  const serve_result_t *dense = NULL, *oasis = NULL, *best_fixed = NULL, *autor = NULL;
  for (size_t i = 0; i < n; i++) {
    const serve_result_t *r = &rs[i];
    if (r->context != ctx) continue;
    char ratio[32];
    ratio_text(r, ratio, sizeof ratio);
    if (r->mode == SM_DENSE && r->steps) dense = r;
    if (r->mode == SM_OASIS && r->steps) {
      if (!oasis || r->tokens_per_second > oasis->tokens_per_second) oasis = r;
      if (r->fetch_auto) autor = r;
      if (!r->fetch_auto && (!best_fixed || r->tokens_per_second > best_fixed->tokens_per_second)) best_fixed = r;
    }
    if (r->steps == 0) {
      printf("%-9s %6s %5u   -- %s\n", k_mode_names[r->mode], ratio, r->concurrent, r->note);
      continue;
    }
    char use[32], recall[32];
    fmt_num(use, sizeof use, "%.3f", r->link_utilization);
    fmt_num(recall, sizeof recall, "%.3f", r->recall);
    printf("%-9s %6s %5u %9.1f %9.1f %10.2f %10.2f %9s %6.1f%% %7s %7.1f", k_mode_names[r->mode], ratio, r->concurrent,
           r->tokens_per_second, 1e3 * r->step_seconds, r->bytes_per_step / 1e6, r->link_budget_bytes_per_step / 1e6,
           use, 100.0 * r->stall_fraction, recall, r->load_seconds);
    for (uint32_t k = 0; r->n_runs > 1 && k < r->n_runs; k++) printf("%s%.1f", k ? " " : "  runs: ", r->tps_runs[k]);
    printf("%s%s\n", r->note[0] ? "  " : "", r->note);
  }
  if (dense && oasis && dense->tokens_per_second > 0) {
    char ratio[32];
    ratio_text(oasis, ratio, sizeof ratio);
    printf(
        "oasis/dense tokens/s at %u tokens: %.2fx (oasis at fetch ratio %s; target >= 2.5x); oasis stall "
        "%.1f%% of step time (target <= 5%%)\n",
        ctx, oasis->tokens_per_second / dense->tokens_per_second, ratio, 100.0 * oasis->stall_fraction);
    if (dense->at_max_seqs || oasis->at_max_seqs)
      printf("  (concurrency stopped at --max-seqs %u, so this ratio is not one at equal DEVICE memory)\n",
             s->o.max_seqs);
  }
  if (s->o.interleave) {
    double sync_max = 0;
    for (size_t i = 0; i < n; i++)
      if (rs[i].context == ctx && rs[i].mode != SM_OFFLOAD && rs[i].steps)
        sync_max = rs[i].sync_seconds_per_step > sync_max ? rs[i].sync_seconds_per_step : sync_max;
    printf(
        "interleaved: step_ms and stall include each runtime's wait for its pipeline after its turn (up to %.1f ms "
        "per step here; JSON sync_seconds_per_step), an upper bound of what a run on its own would show\n",
        1e3 * sync_max);
  }
  for (size_t i = 0; autor && best_fixed && i < n; i++) { /* one comparison per auto setting (auto, auto:MAX) */
    const serve_result_t *a = &rs[i];
    if (a->context != ctx || a->mode != SM_OASIS || !a->fetch_auto || a->steps == 0) continue;
    char med[48] = "", label[32];
    ratio_text(a, label, sizeof label);
    if (a->n_runs > 1) snprintf(med, sizeof med, "medians of %u runs; ", a->n_runs);
    printf("oasis fetch ratio %s: %.1f tok/s = %.1f%% of the best fixed ratio (%g: %.1f tok/s; %starget >= 95%%)\n",
           label, a->tokens_per_second, 100.0 * a->tokens_per_second / best_fixed->tokens_per_second,
           best_fixed->fetch_ratio, best_fixed->tokens_per_second, med);
    double paired = serve_paired_ratio(a, best_fixed);
    if (paired > 0)
      printf("  paired by round (%s / %g within each of the %u rounds, median): %.1f%%\n", label,
             best_fixed->fetch_ratio, a->n_runs, 100.0 * paired);
  }
  /* --repeat: the machine's own noise, read off work that is the same in every run (the weights read: the same
   * bytes per step whatever the mode, ratio or batch), so that a difference between configurations can be
   * weighed against it. */
  double w_lo = 0, w_hi = 0, w_all[SM_COUNT * 16 * SERVE_MAX_REPEAT];
  uint32_t n_w = 0;
  for (size_t i = 0; i < n; i++)
    for (uint32_t k = 0; rs[i].context == ctx && rs[i].n_runs > 1 && k < rs[i].n_runs; k++) {
      double w = rs[i].run_of[k]->weights_seconds_per_step;
      if (!(w > 0) || rs[i].run_of[k]->steps == 0 || n_w == sizeof w_all / sizeof w_all[0]) continue;
      w_all[n_w++] = w;
      w_lo = n_w == 1 || w < w_lo ? w : w_lo;
      w_hi = n_w == 1 || w > w_hi ? w : w_hi;
    }
  if (n_w > 1) {
    qsort(w_all, n_w, sizeof w_all[0], cmp_double);
    printf(
        "machine noise: the weights read (the same bytes in every run) took %.1f-%.1f ms per step over the %u "
        "runs (median %.1f); differences between configurations within that spread (%.0f%%) may be noise\n",
        1e3 * w_lo, 1e3 * w_hi, n_w, 1e3 * w_all[(n_w - 1) / 2], 100.0 * (w_hi - w_lo) / w_all[(n_w - 1) / 2]);
  }
  (void)s;
}

static bool have_gnuplot(void) {
  const char *path = getenv("PATH");
  char buf[4096];
  while (path && *path) {
    const char *c = strchr(path, ':');
    size_t n = c ? (size_t)(c - path) : strlen(path);
    snprintf(buf, sizeof buf, "%.*s/gnuplot", (int)n, n ? path : ".");
    if (access(buf, X_OK) == 0) return true;
    path = c ? c + 1 : NULL;
  }
  return false;
}

/* tokens/s against context length, one line per mode, into png (a temporary path). */
static bool plot_png(const char *png, const serve_t *s, const serve_result_t *rs, size_t n) {
  if (strchr(png, '\'') || strchr(png, '\n')) {
    fprintf(stderr, CMD ": --plot path must not contain quotes or newlines\n");
    return false;
  }
  FILE *g = popen("gnuplot 2>&1", "w");
  if (!g) {
    fprintf(stderr, CMD ": cannot start gnuplot: %s\n", strerror(errno));
    return false;
  }
  fprintf(g,
          "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) { set terminal pngcairo size 900,600 } "
          "else { set terminal png size 900,600 }\n"
          "set output '%s'\nset logscale x 2\nset logscale y\nset grid\nset key top right\n"
          "set xlabel 'context (tokens)'\nset ylabel 'decoded tokens/s'\n"
          "set title 'oasiskv bench serve: %s, %u layers, %.2g GiB DEVICE, link %.3g GB/s%s'\n",
          png, s->o.shape->name, s->L, s->o.device_gib, s->link_bps / 1e9, s->emulated ? " (emulated)" : "");
  /* One line per (mode, fetch ratio) series, in the order of the runs. */
  char names[64][48];
  size_t n_series = 0;
  for (size_t i = 0; i < n && n_series < 64; i++) {
    char ratio[24], name[48];
    ratio_text(&rs[i], ratio, sizeof ratio);
    bool many = (rs[i].mode == SM_PROXY || rs[i].mode == SM_OASIS) && s->o.n_ratios > 1;
    snprintf(name, sizeof name, "%s%s%s", k_mode_names[rs[i].mode], many ? " " : "", many ? ratio : "");
    bool seen = false;
    for (size_t j = 0; j < n_series; j++) seen |= !strcmp(names[j], name);
    if (!seen) strcpy(names[n_series++], name);
  }
  fprintf(g, "plot ");
  for (size_t j = 0; j < n_series; j++)
    fprintf(g, "%s'-' using 1:2 with linespoints lw 2 title '%s'", j ? ", " : "", names[j]);
  fputc('\n', g);
  for (size_t j = 0; j < n_series; j++) {
    for (size_t i = 0; i < n; i++) {
      char ratio[24], name[48];
      ratio_text(&rs[i], ratio, sizeof ratio);
      bool many = (rs[i].mode == SM_PROXY || rs[i].mode == SM_OASIS) && s->o.n_ratios > 1;
      snprintf(name, sizeof name, "%s%s%s", k_mode_names[rs[i].mode], many ? " " : "", many ? ratio : "");
      if (!strcmp(name, names[j]) && rs[i].steps > 0 && rs[i].tokens_per_second > 0)
        fprintf(g, "%u %.6g\n", rs[i].context, rs[i].tokens_per_second);
    }
    fprintf(g, "e\n");
  }
  fprintf(g, "set output\n");
  int rc = pclose(g);
  struct stat st;
  if (rc != 0 || stat(png, &st) != 0 || st.st_size == 0) {
    fprintf(stderr, CMD ": gnuplot failed to draw '%s' (exit status %d)\n", png, rc);
    return false;
  }
  return true;
}

/* ---- The command ---- */

/* The configuration at place `pos` of row `row` of a balanced Latin square (Williams) over n configurations:
 * place j of row r runs configuration (w_j + r) mod n, w = 0, 1, n-1, 2, n-2, ...; rows n..2n-1 take the rows
 * reversed when n is odd. Over n rows every configuration runs once in every place; each one follows every
 * other one once over n rows for even n, over 2n for odd n. */
static uint32_t williams(uint32_t n, uint32_t row, uint32_t pos) {
  uint32_t j = (row / n) % 2 && n % 2 ? n - 1 - pos : pos;
  uint32_t w = j == 0 ? 0 : j % 2 ? (j + 1) / 2 : n - j / 2;
  return (w + row) % n;
}

/* The host memory one runtime run of mode m touches (HOST store, step inputs and, on the cpu backend, the
 * DEVICE slots its sequences use and their block summaries; a GPU's DEVICE tier is not host memory), for
 * --interleave's check that every configuration fits together. The DEVICE capacity itself is not counted: the
 * cpu backend's pages are used only where slots are written. */
static uint64_t run_bytes(const serve_t *s, serve_mode_t m, uint32_t B, uint32_t ctx) {
  uint64_t T = m == SM_OASIS ? 2u : 1u, HD = (uint64_t)s->H * s->D;
  uint64_t per = (uint64_t)B * (T * s->nq * s->D + (T - 1) * 2 * HD + 2 * HD) * sizeof(float);
  uint64_t bytes = host_store_bytes(s, m, B, ctx) + (uint64_t)mode_steps(s, m) * s->L * per;
  if (s->w.host) { /* cpu: DEVICE is host memory */
    uint64_t heads = (uint64_t)B * s->L * s->H, nb = n_blocks_of(max_ctx(s, m, ctx));
    uint64_t C = (uint64_t)ceil(fabs(s->cur_ratio) * s->K - 1e-9), slots = m == SM_DENSE ? nb : s->K + 2u + C;
    uint64_t dev = heads * (slots < nb ? slots : nb) * s->block_bytes + heads * nb * s->summary_bytes;
    uint64_t cap = device_capacity(s, m, B, ctx);
    bytes += dev < cap ? dev : cap;
  }
  return bytes;
}

/* MemAvailable of /proc/meminfo, bytes; 0 when unknown. */
static uint64_t mem_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  unsigned long long kb = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
  fclose(f);
  return (uint64_t)kb * 1024u;
}

/* Selects configuration c of a context's list: its mode's fetch ratio and concurrency. */
typedef struct serve_cfgs_t {
  uint32_t mode[SM_COUNT * 16], ratio[SM_COUNT * 16], fit[SM_COUNT * 16], n;
} serve_cfgs_t;

static serve_mode_t cfg_use(serve_t *s, const serve_cfgs_t *k, uint32_t c) {
  serve_mode_t m = (serve_mode_t)k->mode[c];
  s->cur_ratio = s->o.ratios[k->ratio[c]];
  s->cur_auto = s->o.ratio_auto[k->ratio[c]];
  if (m != SM_OFFLOAD) s->fit[m] = k->fit[c];
  return m;
}

/* After a run: the --max-seqs note and the progress line. */
static void run_report(const serve_t *s, serve_result_t *r, uint32_t rep, double seconds, bool *any_failed) {
  const serve_opts_t *o = &s->o;
  *any_failed |= r->steps == 0;
  /* The concurrency search stops at --max-seqs: more sequences may fit than were run. */
  r->at_max_seqs = r->mode != SM_OFFLOAD && r->concurrent == o->max_seqs;
  if (r->at_max_seqs && !r->note[0])
    snprintf(r->note, sizeof r->note, "concurrency capped at --max-seqs %u (more may fit)", o->max_seqs);
  char run_s[32] = "", ratio_s[40] = "";
  if (o->repeat > 1) snprintf(run_s, sizeof run_s, " [run %u/%u]", rep + 1, o->repeat);
  if (r->mode == SM_PROXY || r->mode == SM_OASIS) {
    char rt[24];
    ratio_text(r, rt, sizeof rt);
    snprintf(ratio_s, sizeof ratio_s, " (fetch ratio %s)", rt);
  }
  fprintf(stderr, CMD ": %s%s at %u tokens%s: %u seqs, %.1f tok/s (%.1f s%s)%s%s\n", k_mode_names[r->mode], ratio_s,
          r->context, run_s, r->concurrent, r->tokens_per_second, seconds, o->interleave ? " of its own steps" : "",
          r->note[0] ? ": " : "", r->note);
}

/* One --interleave round: offload on its own, then every runtime configuration set up (in the round's order),
 * stepped --interleave decode steps each in turn (the order of turn t a row of the same balanced square,
 * shifted by the round) until all are done, and torn down. Returns false when the configurations do not fit in
 * memory together (nothing was run; the message is printed). */
static bool round_interleaved(serve_t *s, const serve_cfgs_t *k, uint32_t ctx, uint32_t rep, serve_result_t *runs,
                              bool *any_failed) {
  uint64_t need = 0, avail = mem_available();
  for (uint32_t c = 0; c < k->n; c++)
    if (k->mode[c] != SM_OFFLOAD) {
      serve_mode_t m = cfg_use(s, k, c);
      need += run_bytes(s, m, s->fit[m], ctx);
    }
  if (avail > 0 && need > avail / 10 * 9) {
    fprintf(stderr,
            CMD
            ": --interleave: the configurations at %u tokens need about %.1f GiB at once and %.1f GiB are "
            "available; run fewer --fetch-ratio entries or --modes, a shorter --context, a smaller --max-seqs or "
            "--device-gib, or without --interleave\n",
            ctx, need / 1073741824.0, avail / 1073741824.0);
    return false;
  }
  rrun_t *xs = calloc(k->n, sizeof *xs);
  double *secs = calloc(k->n, sizeof *secs);
  if (!xs || !secs) {
    free(xs);
    free(secs);
    fprintf(stderr, CMD ": out of host memory\n");
    return false;
  }
  for (uint32_t pos = 0; pos < k->n; pos++) {
    uint32_t c = williams(k->n, rep, pos);
    serve_mode_t m = cfg_use(s, k, c);
    serve_result_t *r = &runs[(size_t)rep * k->n + c];
    memset(r, 0, sizeof *r);
    r->mode = m;
    r->round_position = pos;
    r->context = ctx;
    double t0 = okv_cli_now_s();
    if (m == SM_OFFLOAD) {
      run_offload(s, ctx, r);
      finish_result(s, r);
      run_report(s, r, rep, okv_cli_now_s() - t0, any_failed);
      xs[c].done = true;
      continue;
    }
    rr_open(s, m, ctx, r, &xs[c]);
  }
  for (uint32_t turn = 0;; turn++) {
    bool any = false;
    for (uint32_t pos = 0; pos < k->n; pos++) {
      uint32_t c = williams(k->n, rep + turn, pos);
      if (xs[c].done) continue;
      double t0 = okv_cli_now_s();
      for (uint32_t j = 0; j < s->o.interleave && !xs[c].done; j++) rr_step(&xs[c], j + 1 == s->o.interleave);
      secs[c] += okv_cli_now_s() - t0;
      any = true;
    }
    if (!any) break;
  }
  for (uint32_t c = 0; c < k->n; c++) {
    if (k->mode[c] == SM_OFFLOAD) continue;
    serve_result_t *r = &runs[(size_t)rep * k->n + c];
    rr_finish(&xs[c]);
    rr_close(&xs[c]);
    finish_result(s, r);
    run_report(s, r, rep, secs[c], any_failed);
  }
  free(xs);
  free(secs);
  return true;
}

int okv_cli_bench_serve(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    }
  serve_t s;
  memset(&s, 0, sizeof s);
  int rc = parse_args(argc, argv, &s.o);
  if (rc) return rc;
  const serve_opts_t *o = &s.o;
  s.cur_auto = o->ratio_auto[0];
  s.cur_ratio = o->ratios[0];
  if (o->plot_path && !have_gnuplot()) {
    fprintf(stderr, CMD ": --plot needs gnuplot, which is not installed (Debian: apt-get install gnuplot-nox)\n");
    return 1;
  }
  if (strcmp(o->device, "cpu") != 0) { /* a GPU backend that cannot open a device says why, before any work */
    okv_hal_device_t *probe = NULL;
    okv_status_t ps = okv_hal_device_create(o->device, NULL, NULL, &probe);
    if (ps) {
      okv_cli_print_status(CMD, okv_status_annotate(ps, "device '%s'", o->device));
      return 1;
    }
    OKV_IGNORE_ERROR(okv_hal_device_release(probe));
  }
  rc = 1;
  s.L = o->layers;
  s.H = o->shape->n_kv_heads;
  s.nq = o->shape->n_q_heads;
  s.G = s.nq / s.H;
  s.D = o->shape->head_dim;
  s.K = o->budget;
  s.dt = OKV_DTYPE_BF16;
  s.block_bytes = okv_block_bytes(s.dt, s.D);
  s.summary_bytes = okv_summary_bytes(s.D);
  s.device_bytes = (uint64_t)(o->device_gib * 1073741824.0);
  bool cpu = !strcmp(o->device, "cpu");
  okv_kv_trace_t trace;
  memset(&trace, 0, sizeof trace);
  serve_result_t *results = calloc((size_t)o->n_contexts * SM_COUNT * o->n_ratios, sizeof *results);
  /* every run of every context (calloc: pages are touched only by the runs made) */
  serve_result_t *runs = calloc((size_t)o->n_contexts * o->repeat * SM_COUNT * o->n_ratios, sizeof *runs);
  bool any_failed = false;
  size_t n_results = 0;
  okv_cli_output_t out_json = {0}, out_csv = {0}, out_png = {0};
  bool have_json = false, have_csv = false, have_png = false;
  void *wbuf = NULL;
  okv_attn_gen_params_t gp;
  okv_attn_gen_params_init(&gp);
  gp.n_layers = s.L;
  gp.n_kv_heads = s.H;
  gp.group_size = s.G;
  gp.head_dim = s.D;
  gp.seed = o->seed;
  gp.draft_rho = o->draft_rho;
  okv_status_t st = okv_attn_gen_create(&gp, &s.src.gen);
  if (st) {
    okv_cli_print_status(CMD, st);
    goto done;
  }
  s.src.L = s.L;
  s.src.H = s.H;
  s.src.G = s.G;
  s.src.D = s.D;
  s.src.nq = s.nq;
  if (o->trace_path) {
    st = okv_kv_trace_load(o->trace_path, &trace);
    if (st) {
      okv_cli_print_status(CMD, okv_status_annotate(st, "--trace"));
      goto done;
    }
    if (trace.shape.head_dim > s.D) {
      fprintf(stderr, CMD ": --trace: the trace's head_dim %u exceeds %s's %u\n", trace.shape.head_dim, o->shape->name,
              s.D);
      goto done;
    }
    for (uint32_t w = 0; w < trace.n_windows; w++)
      if (trace.n_positions[w] < decode_positions(&s) + 2) {
        fprintf(stderr,
                CMD
                ": --trace: window %u has %u positions; the run replays %u decode steps (fewer steps or "
                "longer windows)\n",
                w, trace.n_positions[w], decode_positions(&s));
        goto done;
      }
    s.src.trace = &trace;
    s.src.q_scale = (float)sqrt((double)s.D / (double)trace.shape.head_dim);
  }
  if (!results || !runs) {
    fprintf(stderr, CMD ": out of host memory\n");
    goto done;
  }
  /* The non-attention work: every weight byte read once per step, scaled to the layers run. */
  s.w.bytes = (size_t)((o->shape->params - o->shape->head_params) * 2.0 / o->shape->n_layers) & ~(size_t)63;
  s.w.head_bytes = (size_t)(o->shape->head_params * 2.0 * s.L / o->shape->n_layers) & ~(size_t)63;
  if (cpu) {
    size_t mbytes = s.w.bytes > (256u << 20) ? s.w.bytes : (256u << 20);
    wbuf = malloc(mbytes);
    if (!wbuf) {
      fprintf(stderr, CMD ": out of host memory for %zu bytes of emulated weights\n", mbytes);
      goto done;
    }
    memset(wbuf, 1, mbytes);
    s.w.host = wbuf;
    s.dram_bps = measure_host_bandwidth(wbuf, mbytes);
    s.emulated = !(o->link_given && o->link_gbps == 0);
    s.link_bps = o->link_given && o->link_gbps > 0 ? o->link_gbps * 1e9 : s.dram_bps / o->link_ratio;
  } else {
    s.dram_bps = measure_device_bandwidth(o->device, 256u << 20);
    s.emulated = false;
    s.link_bps = SERVE_NOMINAL_GPU_LINK;
  }
  s.link_lat_s = o->link_latency_us * 1e-6;
  if (o->halve_at && !s.emulated) {
    fprintf(stderr, CMD ": --halve-link-at needs the emulated link (cpu backend, --link-gbps not 0)\n");
    rc = 2;
    goto done;
  }
  /* Outputs: opened before the runs so a bad path fails early. */
  if (o->json_path && !(have_json = okv_cli_output_open(CMD, o->json_path, &out_json))) goto done;
  if (o->csv_path && !(have_csv = okv_cli_output_open(CMD, o->csv_path, &out_csv))) goto done;
  if (o->plot_path && !(have_png = okv_cli_output_reserve(CMD, o->plot_path, &out_png))) goto done;
  bool quiet = (o->json_path && !strcmp(o->json_path, "-")) || (o->csv_path && !strcmp(o->csv_path, "-"));
  FILE *info = quiet ? stderr : stdout;
  fprintf(info,
          CMD
          ": %s attention (%u query / %u KV heads, head_dim %u, bf16 KV), %u of its %u layers run (scaled "
          "down for this machine);\n  non-attention work: a streaming read of %.0f MB of weights per layer "
          "((%.3g params - %.3g of the LM head) x 2 B / %u layers) and %.0f MB of LM head after the last layer "
          "(its share for %u layers), once per step for the whole batch\n",
          o->shape->name, s.nq, s.H, s.D, s.L, o->shape->n_layers, s.w.bytes / 1e6, o->shape->params,
          o->shape->head_params, o->shape->n_layers, s.w.head_bytes / 1e6, s.L);
  fprintf(info, "  device %s, DEVICE %.3g GiB for every mode; %s bandwidth %.1f GB/s (measured)\n", o->device,
          o->device_gib, cpu ? "DRAM stream" : "HBM (device copy)", s.dram_bps / 1e9);
  if (s.emulated)
    fprintf(info, "  link: EMULATED %.3f GB/s per direction%s, %.0f us per copy\n", s.link_bps / 1e9,
            o->link_given ? "" : " (DRAM / --link-ratio)", o->link_latency_us);
  else
    fprintf(info, "  link: %s; utilisation against %.3g GB/s\n",
            cpu ? "unpaced (--link-gbps 0)" : "the GPU's real link", s.link_bps / 1e9);
  char warm[64];
  if (o->warmup == UINT32_MAX)
    snprintf(warm, sizeof warm, "%u (proxy, oasis; every ratio alike) / %u", warmup_steps(&s, SM_OASIS),
             warmup_steps(&s, SM_DENSE));
  else
    snprintf(warm, sizeof warm, "%u", o->warmup);
  fprintf(info, "  K = %u blocks, %s warm-up + %u measured steps, keys/queries: %s; fetch ratio", s.K, warm, o->decode,
          o->trace_path ? o->trace_path : "generator");
  for (uint32_t i = 0; i < o->n_ratios; i++) {
    if (o->ratio_auto[i] && -o->ratios[i] == OKV_CLI_AUTO_FETCH_RATIO_MAX)
      fprintf(info, "%s auto", i ? "," : "");
    else if (o->ratio_auto[i])
      fprintf(info, "%s auto:%g", i ? "," : "", -o->ratios[i]);
    else
      fprintf(info, "%s %g", i ? "," : "", o->ratios[i]);
  }
  fprintf(info, "\n");
  uint32_t n_runtime_cfgs = (o->modes[SM_DENSE] ? 1u : 0u) + (o->modes[SM_ONDEMAND] ? 1u : 0u) +
                            ((o->modes[SM_PROXY] ? 1u : 0u) + (o->modes[SM_OASIS] ? 1u : 0u)) * o->n_ratios;
  if (o->interleave && n_runtime_cfgs < 2)
    fprintf(info, "  --interleave: %s runtime configuration, nothing to interleave (offload always runs on its own)\n",
            n_runtime_cfgs ? "one" : "no");
  else if (o->interleave)
    fprintf(info,
            "  interleaved: every runtime configuration of a round alive at once, %u decode step%s of each in turn, "
            "each synchronised after them (that wait counted in its last step)\n",
            o->interleave, o->interleave > 1 ? "s" : "");

  for (uint32_t ci = 0; ci < o->n_contexts; ci++) {
    uint32_t ctx = o->contexts[ci];
    s.src.ctx = ctx;
    s.src.n_decode = decode_positions(&s);
    free(s.src.tmpl_k);
    s.src.tmpl_k = NULL;
    if (!s.src.trace) { /* the shared prompt's keys, for exact attention (recall) */
      s.src.tmpl_k = malloc((size_t)s.L * ctx * s.H * s.D * sizeof(float));
      if (!s.src.tmpl_k) {
        fprintf(stderr, CMD ": out of host memory for the prompt keys\n");
        goto done;
      }
      for (uint32_t l = 0; l < s.L; l++)
        for (uint32_t t = 0; t < ctx; t++)
          for (uint32_t h = 0; h < s.H; h++)
            okv_attn_gen_kv(s.src.gen, l, h, 0, t, s.src.tmpl_k + (((size_t)l * ctx + t) * s.H + h) * s.D, NULL);
    }
    /* Concurrency at equal DEVICE memory, per mode (and per fetch ratio: C slots per head are reserved). */
    fprintf(info,
            "\ncontext %u tokens + up to %u decode steps (the longest warm-up of the ratios, measured, recall):\n", ctx,
            decode_positions(&s));
    if ((o->modes[SM_PROXY] || o->modes[SM_OASIS] || o->modes[SM_ONDEMAND]) &&
        n_blocks_of(ctx + decode_positions(&s)) <= s.K)
      fprintf(info,
              "note: at most %u blocks per KV head here, no more than K = %u: proxy, ondemand and oasis keep every "
              "block resident (nothing is selected or fetched, and every fetch ratio runs alike); use a longer "
              "--context or a smaller --budget\n",
              n_blocks_of(ctx + decode_positions(&s)), s.K);
    memset(s.fit, 0, sizeof s.fit);
    if (o->modes[SM_OFFLOAD] && !o->offload_seqs && !o->modes[SM_DENSE])
      s.fit[SM_DENSE] = fit_search(&s, SM_DENSE, ctx, fit_bound(&s, SM_DENSE, ctx));
    /* Every (mode, ratio) configuration, run --repeat times in interleaved rounds so that slow phases of the
     * machine fall on all of them alike; the concurrency search runs once per configuration. */
    serve_cfgs_t cfgs = {{0}, {0}, {0}, 0};
    serve_result_t *ctx_runs = runs + (size_t)ci * o->repeat * SM_COUNT * o->n_ratios;
    for (int m = 0; m < SM_COUNT; m++) {
      if (!o->modes[m]) continue;
      uint32_t n_r = m == SM_PROXY || m == SM_OASIS ? o->n_ratios : 1;
      for (uint32_t ri = 0; ri < n_r; ri++) {
        cfgs.mode[cfgs.n] = (uint32_t)m;
        cfgs.ratio[cfgs.n++] = ri;
      }
    }
    const uint32_t n_cfg = cfgs.n;
    for (uint32_t c = 0; c < n_cfg; c++) { /* every concurrency search before the first measured run */
      serve_mode_t m = (serve_mode_t)cfgs.mode[c];
      s.cur_ratio = o->ratios[cfgs.ratio[c]];
      s.cur_auto = o->ratio_auto[cfgs.ratio[c]];
      if (m != SM_OFFLOAD) s.fit[m] = cfgs.fit[c] = fit_search(&s, m, ctx, fit_bound(&s, m, ctx));
    }
    /* The order of a round is a row of a balanced Latin square (williams()): a configuration's place and its
     * predecessor vary from round to round. With --interleave a round runs its configurations side by side. */
    for (uint32_t rep = 0; rep < o->repeat; rep++) {
      if (o->interleave) {
        if (!round_interleaved(&s, &cfgs, ctx, rep, ctx_runs, &any_failed)) goto done;
        continue;
      }
      for (uint32_t pos = 0; pos < n_cfg; pos++) {
        uint32_t c = williams(n_cfg, rep, pos);
        serve_mode_t m = cfg_use(&s, &cfgs, c);
        serve_result_t *r = &ctx_runs[(size_t)rep * n_cfg + c];
        memset(r, 0, sizeof *r);
        r->mode = m;
        r->round_position = pos;
        r->context = ctx;
        double t0 = okv_cli_now_s();
        if (m == SM_OFFLOAD)
          run_offload(&s, ctx, r);
        else
          run_runtime(&s, m, ctx, r);
        finish_result(&s, r);
        run_report(&s, r, rep, okv_cli_now_s() - t0, &any_failed);
      }
    }
    for (uint32_t c = 0; c < n_cfg; c++) { /* the median run by tokens/s stands for the configuration */
      uint32_t idx[SERVE_MAX_REPEAT];
      for (uint32_t rep = 0; rep < o->repeat; rep++) idx[rep] = rep;
      for (uint32_t i = 1; i < o->repeat; i++)
        for (uint32_t j = i; j > 0 && ctx_runs[(size_t)idx[j] * n_cfg + c].tokens_per_second <
                                          ctx_runs[(size_t)idx[j - 1] * n_cfg + c].tokens_per_second;
             j--) {
          uint32_t t = idx[j];
          idx[j] = idx[j - 1];
          idx[j - 1] = t;
        }
      serve_result_t *r = &results[n_results++];
      *r = ctx_runs[(size_t)idx[(o->repeat - 1) / 2] * n_cfg + c];
      r->n_runs = o->repeat;
      for (uint32_t rep = 0; rep < o->repeat; rep++) {
        r->tps_runs[rep] = ctx_runs[(size_t)rep * n_cfg + c].tokens_per_second;
        r->run_of[rep] = &ctx_runs[(size_t)rep * n_cfg + c];
      }
    }
    if (!quiet) print_table(&s, results, n_results, ctx);
  }
  if (any_failed) { /* a run that could not run is an error (its note says why): no output is left */
    if (have_json || have_csv || have_png)
      fprintf(stderr, CMD ": a configuration could not run (its row says why): no --json, --csv or --plot written\n");
    else
      fprintf(stderr, CMD ": a configuration could not run (its row says why)\n");
    goto done;
  }
  if (have_json) {
    json_c_set_serialization_double_format("%.8g", JSON_C_OPTION_GLOBAL);
    json_object *arr = json_object_new_array();
    for (size_t i = 0; i < n_results; i++) json_object_array_add(arr, result_json(&s, &results[i]));
    fprintf(out_json.f, "%s\n",
            json_object_to_json_string_ext(arr, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(arr);
  }
  if (have_csv) print_csv(out_csv.f, &s, results, n_results);
  if (have_png && !plot_png(out_png.tmp_path, &s, results, n_results)) goto done;
  if (have_json) {
    have_json = false;
    if (!okv_cli_output_commit(CMD, &out_json)) goto done;
  }
  if (have_csv) {
    have_csv = false;
    if (!okv_cli_output_commit(CMD, &out_csv)) goto done;
  }
  if (have_png) {
    have_png = false;
    if (!okv_cli_output_commit(CMD, &out_png)) goto done;
  }
  rc = 0;
done:
  if (have_json) okv_cli_output_abort(&out_json);
  if (have_csv) okv_cli_output_abort(&out_csv);
  if (have_png) okv_cli_output_abort(&out_png);
  free(results);
  free(runs);
  free(wbuf);
  free(s.src.tmpl_k);
  okv_attn_gen_destroy(s.src.gen);
  okv_kv_trace_free(&trace);
  return rc;
}
