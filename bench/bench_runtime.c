/* `oasiskv bench runtime`: cost of the runtime's own bookkeeping (head-wise
 * maps, selection with capped eviction, transfer plans, scheduling; no
 * kernels) per decode step, against the attention kernel's time at the same
 * shape, measured in one run; and bytes moved per step against the cap's bound.
 *
 * Shape: Llama-3.1-8B's per-layer attention (32 query heads, 8 KV heads,
 * head_dim 128, bf16 KV), 8 sequences × 16K-token contexts, as many layers as
 * fit in about 4 GiB of HOST tier, K = 128 blocks, fetch ratio 0.05 (C = 7),
 * OASIS mode with one draft token (T = 2). Queries drift from step to step
 * (q = base + noise) so that selections change as in decode.
 *
 *   overhead_fraction = bookkeeping_seconds / attention_seconds (runtime stats;
 *                       target <= 0.02; the earlier bar was 0.05)
 *   cap_bytes_per_step = C × KV heads × layers × block bytes × sequences
 */
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <time.h>
#include <unistd.h>

#include "oasiskv/oasiskv.h"
#include "cli.h"
#include "cli_model.h"

typedef struct bench_opts_t {
  const char *backend;
  uint32_t n_seqs, context_tokens, n_layers, budget_blocks, steps, warmup;
  double host_gib, fetch_ratio, noise;
  bool json, recall;
  bool device_selection; /* --selection device (the default; host with --fetch-ratio auto unless asked) */
  bool selection_given;
  const char *project; /* --project SHAPE: project the measured cost onto a model's shape */
  okv_scoring_t scoring;
  okv_dtype_t summary_dtype;
  uint32_t groups;
  double locality; /* 0 = i.i.d. keys; > 0: keys drift slowly along the context (docs/kernels.md) */
} bench_opts_t;

/* --layers: at most this many (and without --layers, as many as fit in --host-gib of HOST tier, up to it). */
#define BENCH_MAX_LAYERS 128u

static double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t g_lcg = 0x853c49e6748fea9bull;
static float bench_rand(void) { /* uniform in [-1, 1) */
  g_lcg = g_lcg * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(g_lcg >> 40) * (1.0 / 8388608.0) - 1.0);
}

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: oasiskv bench runtime [--backend NAME] [--seqs N] [--context TOKENS] [--layers N]\n"
      "                             [--host-gib G] [--budget K] [--fetch-ratio R] [--steps N]\n"
      "                             [--warmup N] [--noise X] [--recall] [--project SHAPE] [--json]\n"
      "                             [--scoring c4|q8|flat|two-level] [--groups N] [--summary-dtype auto|f32|bf16|f16]\n"
      "                             [--locality X] [--selection host|device]\n"
      "  Defaults: cpu, 8 sequences x 16384 tokens, layers that fit in 4 GiB of host tier,\n"
      "  K = 128, fetch ratio 0.05, 4 measured steps after 2 warm-up steps.\n"
      "  --layers N: 1..128. --host-gib G (default 4) bounds the HOST tier that N sequences x layers x\n"
      "  context need, and also the DEVICE tier (slot pool, summaries) and the f32 prefill: a run that\n"
      "  needs more of any is refused.\n"
      "  --noise X (default 0.5, in [0, 100]): each step's queries are a fixed base per layer plus X times\n"
      "  uniform noise of the base's scale, so that predictions change from step to step as in decode.\n"
      "  --locality X (default 0, in [0, 1]): 0 gives i.i.d. keys; above 0, each key is X times a slow\n"
      "  random walk along the context plus i.i.d. noise, so that neighbouring blocks are alike.\n"
      "  --steps N + --warmup N: at most 524279 in all. A step's fetches land at the next step's commit, so\n"
      "  with --warmup 0 the first measured step moves no block.\n"
      "  --scoring S (default c4, the runtime's): how the prediction scores blocks (docs/kernels.md\n"
      "  \"Scoring at long context\"); --groups N: for c4 and q8 the candidates rescored beyond K per KV\n"
      "  head (default ceil(K / 4), at least min(K, 8): 32 at K = 128; K + it at most 512), for two-level\n"
      "  the groups kept (default floor(K / 4), at least 1).\n"
      "  --selection device (default): selection and its commit run as kernels on DEVICE slot tables\n"
      "  (okv_runtime_config_t.device_selection); host runs them on the host's maps (the default with\n"
      "  --fetch-ratio auto, whose spare slots device selection does not support).\n");
}

/* The CLI's decimal readers (tools/cli.h); this command words its own error lines. */
static bool parse_u32(const char *s, uint32_t *out) {
  uint64_t v = 0;
  if (okv_cli_decimal_u64(s, &v) != OKV_CLI_NUM_OK || v > UINT32_MAX) return false;
  *out = (uint32_t)v;
  return true;
}

static bool parse_f64(const char *s, double *out) { return okv_cli_decimal_f64(s, out) == OKV_CLI_NUM_OK; }

static int parse_args(int argc, char **argv, bench_opts_t *o) {
  o->backend = "cpu";
  o->n_seqs = 8;
  o->context_tokens = 16384;
  o->n_layers = 0;
  o->budget_blocks = 128;
  o->steps = 4;
  o->warmup = 2;
  o->host_gib = 4.0;
  o->fetch_ratio = 0.05;
  o->noise = 0.5;
  o->json = false;
  o->recall = false;
  o->device_selection = true;
  o->selection_given = false;
  okv_runtime_config_t defaults;
  okv_runtime_config_init(&defaults);
  o->scoring = defaults.scoring;             /* the runtime's default */
  o->summary_dtype = OKV_SUMMARY_DTYPE_AUTO; /* as the KV (bf16 here) */
  o->groups = 0;
  o->locality = 0;
  o->project = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    bool ok = true;
    if (strcmp(a, "--json") == 0) {
      o->json = true;
      continue;
    } else if (strcmp(a, "--recall") == 0) {
      o->recall = true;
      continue;
    } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 1;
    }
    static const char *const valued[] = {"--backend",     "--seqs",          "--context",  "--layers",
                                         "--budget",      "--steps",         "--warmup",   "--host-gib",
                                         "--fetch-ratio", "--noise",         "--project",  "--scoring",
                                         "--groups",      "--summary-dtype", "--locality", "--selection"};
    bool known = false;
    for (size_t j = 0; j < sizeof valued / sizeof valued[0]; j++) known |= strcmp(a, valued[j]) == 0;
    if (!known) {
      char shown[96];
      fprintf(stderr, "oasiskv bench runtime: unknown option '%s' (see --help)\n",
              okv_cli_shown(a, shown, sizeof shown));
      return 2;
    }
    if (v == NULL) {
      fprintf(stderr, "oasiskv bench runtime: %s needs a value\n", a);
      return 2;
    }
    if (strcmp(a, "--backend") == 0)
      o->backend = v;
    else if (strcmp(a, "--seqs") == 0)
      ok = parse_u32(v, &o->n_seqs) && o->n_seqs > 0 && o->n_seqs <= 65536;
    else if (strcmp(a, "--context") == 0)
      ok = parse_u32(v, &o->context_tokens) && o->context_tokens > 0;
    else if (strcmp(a, "--layers") == 0)
      ok = parse_u32(v, &o->n_layers) && o->n_layers >= 1 && o->n_layers <= BENCH_MAX_LAYERS;
    else if (strcmp(a, "--budget") == 0)
      ok = parse_u32(v, &o->budget_blocks) && o->budget_blocks >= 1 && o->budget_blocks <= OKV_TOPK_MAX;
    else if (strcmp(a, "--steps") == 0)
      ok = parse_u32(v, &o->steps) && o->steps > 0;
    else if (strcmp(a, "--warmup") == 0)
      ok = parse_u32(v, &o->warmup);
    else if (strcmp(a, "--host-gib") == 0)
      ok = parse_f64(v, &o->host_gib) && o->host_gib > 0 && o->host_gib <= 4096;
    else if (strcmp(a, "--fetch-ratio") == 0) {
      /* auto[:MAX] -> -MAX; the parser prints its own error line */
      if (!okv_cli_parse_fetch_ratio("oasiskv bench runtime", v, &o->fetch_ratio)) return 2;
    } else if (strcmp(a, "--project") == 0)
      o->project = v;
    else if (strcmp(a, "--scoring") == 0) {
      if (!okv_cli_parse_scoring("oasiskv bench runtime", v, &o->scoring)) return 2; /* prints its error line */
    } else if (strcmp(a, "--groups") == 0)
      ok = parse_u32(v, &o->groups) && o->groups > 0;
    else if (strcmp(a, "--summary-dtype") == 0) {
      ok = true;
      if (strcmp(v, "auto") == 0)
        o->summary_dtype = OKV_SUMMARY_DTYPE_AUTO;
      else if (strcmp(v, "f32") == 0)
        o->summary_dtype = OKV_DTYPE_F32;
      else if (strcmp(v, "bf16") == 0)
        o->summary_dtype = OKV_DTYPE_BF16;
      else if (strcmp(v, "f16") == 0)
        o->summary_dtype = OKV_DTYPE_F16;
      else
        ok = false;
    } else if (strcmp(a, "--locality") == 0)
      ok = parse_f64(v, &o->locality) && o->locality >= 0 && o->locality <= 1;
    else if (strcmp(a, "--selection") == 0) {
      ok = strcmp(v, "host") == 0 || strcmp(v, "device") == 0;
      o->device_selection = strcmp(v, "device") == 0;
      o->selection_given = true;
    } else if (strcmp(a, "--noise") == 0)
      ok = parse_f64(v, &o->noise) && o->noise >= 0 && o->noise <= 100; /* q stays finite in f32 */
    else {
      char shown[96];
      fprintf(stderr, "oasiskv bench runtime: unknown option '%s' (see --help)\n",
              okv_cli_shown(a, shown, sizeof shown));
      return 2;
    }
    if (!ok) {
      char bounds[48] = "";
      if (strcmp(a, "--layers") == 0 || strcmp(a, "--budget") == 0)
        snprintf(bounds, sizeof bounds, " (an integer in [1, %u])",
                 strcmp(a, "--layers") == 0 ? (unsigned)BENCH_MAX_LAYERS : (unsigned)OKV_TOPK_MAX);
      const char *range = bounds[0]                    ? bounds
                          : strcmp(a, "--seqs") == 0   ? " (an integer in [1, 65536])"
                          : strcmp(a, "--steps") == 0  ? " (an integer >= 1; --steps + --warmup at most 524279)"
                          : strcmp(a, "--groups") == 0 ? " (an integer >= 1, at most --budget)"
                          : strcmp(a, "--context") == 0
                              ? " (tokens, an integer >= 1; above the runtime's 1048576 less the steps it is clamped)"
                          : strcmp(a, "--warmup") == 0        ? " (an integer >= 0; --steps + --warmup at most 524279)"
                          : strcmp(a, "--summary-dtype") == 0 ? " (auto, f32, bf16 or f16)"
                          : strcmp(a, "--selection") == 0     ? " (host or device)"
                          : strcmp(a, "--host-gib") == 0      ? " (GiB, in (0, 4096])"
                          : strcmp(a, "--locality") == 0      ? " (a number in [0, 1])"
                          : strcmp(a, "--noise") == 0         ? " (a number in [0, 100])"
                                                              : "";
      char shown[96];
      fprintf(stderr, "oasiskv bench runtime: bad value '%s' for %s%s\n", okv_cli_shown(v, shown, sizeof shown), a,
              range);
      return 2;
    }
    i++;
  }
  /* A name this build does not have is a usage error (exit 2) naming the backends it has. */
  if (!okv_cli_parse_device("oasiskv bench runtime", o->backend)) return 2;
  if (o->fetch_ratio < 0 && !o->selection_given) o->device_selection = false; /* the self-tuning cap: host */
  /* What the runtime's config would refuse, said in the options' own terms (exit 2 like every bad option). */
  if (o->fetch_ratio < 0 && o->device_selection) {
    fprintf(stderr,
            "oasiskv bench runtime: --selection device does not support --fetch-ratio auto (its spare "
            "slots); use --selection host or a fixed ratio\n");
    return 2;
  }
  if (o->groups > 0 && o->scoring == OKV_SCORING_FLAT) { /* said first: no value of --groups would do */
    fprintf(stderr,
            "oasiskv bench runtime: --groups applies to --scoring q8, c4 and two-level (flat scores every "
            "block)\n");
    return 2;
  }
  if (o->groups > o->budget_blocks) {
    fprintf(stderr, "oasiskv bench runtime: --groups %u must be at most --budget (%u)\n", o->groups, o->budget_blocks);
    return 2;
  }
  return 0;
}

/* A ratio as a JSON number written as the user would write it (0.05, not 0.050000000000000003). */
static json_object *json_ratio(double v) {
  char b[32];
  snprintf(b, sizeof b, "%.15g", v);
  return json_object_new_double_s(v, b);
}

static int fail_status(const char *what, okv_status_t st) {
  fprintf(stderr, "oasiskv bench runtime: %s: %s: %s\n", what, okv_status_code_name(okv_status_code(st)),
          okv_status_message(st));
  okv_status_free(st);
  return 1;
}

/* ---- --project: the measured host cost at a real model's shape (a projection) ---- */

typedef struct proj_shape_t {
  const char *name;
  uint32_t n_layers, n_kv_heads, head_dim;
  double params; /* weights, read once per decode step (bf16) */
} proj_shape_t;

static const proj_shape_t k_proj_shapes[] = {
    {"llama3-8b", 32, 8, 128, 8.03e9}, /* Llama-3.1-8B */
    {"qwen3-8b", 36, 8, 128, 8.19e9},  /* Qwen3-8B */
};

/* H100 SXM HBM3 bandwidth, bytes per second: the GPU step estimate is
 * (weights + batch x working set) / this, i.e. a memory-bound decode step. */
#define PROJ_HBM_BYTES_PER_S 3.35e12

static const proj_shape_t *proj_find(const char *name) {
  for (size_t i = 0; i < sizeof k_proj_shapes / sizeof k_proj_shapes[0]; i++)
    if (strcmp(name, k_proj_shapes[i].name) == 0) return &k_proj_shapes[i];
  return NULL;
}

/* Prints (or adds to `jout`) host bookkeeping per step = ns_per_head x layers x
 * KV heads x batch, beside the GPU step estimate
 * (2 x params + batch x (K + 1) x block_bytes(bf16) x layers x KV heads) / HBM bandwidth. */
static void proj_report(const proj_shape_t *sh, double ns_per_head, uint32_t K, json_object *jout) {
  uint64_t block_bytes = okv_block_bytes(OKV_DTYPE_BF16, sh->head_dim);
  json_object *rows = jout ? json_object_new_array() : NULL;
  if (!jout) {
    printf(
        "\nPROJECTION (not a measurement) at %s: %u layers x %u KV heads, measured %.0f ns per KV head per step;\n"
        "GPU step = (2 x %.2fe9 weight bytes + batch x (K+1) x %llu B x layers x KV heads) / %.2f TB/s HBM\n",
        sh->name, sh->n_layers, sh->n_kv_heads, ns_per_head, sh->params / 1e9, (unsigned long long)block_bytes,
        PROJ_HBM_BYTES_PER_S / 1e12);
    printf("%6s %16s %16s %10s\n", "batch", "host_ms/step", "gpu_ms/step", "host/gpu");
  }
  for (uint32_t b = 1; b <= 256; b *= 2) {
    double host_ms = ns_per_head * sh->n_layers * sh->n_kv_heads * b / 1e6;
    double bytes = 2.0 * sh->params + (double)b * (K + 1) * (double)block_bytes * sh->n_layers * sh->n_kv_heads;
    double gpu_ms = bytes / PROJ_HBM_BYTES_PER_S * 1e3;
    if (jout) {
      json_object *r = json_object_new_object();
      json_object_object_add(r, "batch", json_object_new_int64(b));
      json_object_object_add(r, "host_bookkeeping_ms", json_object_new_double(host_ms));
      json_object_object_add(r, "gpu_step_ms_estimate", json_object_new_double(gpu_ms));
      json_object_array_add(rows, r);
    } else {
      printf("%6u %16.2f %16.2f %10.2f\n", b, host_ms, gpu_ms, host_ms / gpu_ms);
    }
  }
  if (jout) {
    json_object *p = json_object_new_object();
    json_object_object_add(p, "kind", json_object_new_string("projection, not a measurement"));
    json_object_object_add(p, "shape", json_object_new_string(sh->name));
    json_object_object_add(p, "n_layers", json_object_new_int64(sh->n_layers));
    json_object_object_add(p, "n_kv_heads", json_object_new_int64(sh->n_kv_heads));
    json_object_object_add(p, "hbm_bytes_per_second", json_object_new_double(PROJ_HBM_BYTES_PER_S));
    json_object_object_add(p, "formula",
                           json_object_new_string("host = ns_per_head * layers * kv_heads * batch; gpu = (2 * params + "
                                                  "batch * (K+1) * block_bytes * layers * kv_heads) / hbm"));
    json_object_object_add(p, "rows", rows);
    json_object_object_add(jout, "projection", p);
  }
}

int okv_cli_bench_runtime(int argc, char **argv) {
  bench_opts_t o;
  int rc = parse_args(argc, argv, &o);
  if (rc != 0) return rc == 1 ? 0 : rc;
  const proj_shape_t *proj = NULL;
  if (o.project != NULL && (proj = proj_find(o.project)) == NULL) {
    char shown[96];
    fprintf(stderr, "oasiskv bench runtime: --project: unknown shape '%s' (llama3-8b, qwen3-8b)\n",
            okv_cli_shown(o.project, shown, sizeof shown));
    return 2;
  }
  const uint32_t H = 8, nq = 32, hd = 128, T = 2;
  const okv_dtype_t dt = OKV_DTYPE_BF16;
  uint64_t block_bytes = okv_block_bytes(dt, hd);
  /* The runtime holds at most 1,048,576 tokens per sequence and the steps append to the context. */
  const uint32_t ctx_limit = 16u * 65536u - 16u;
  if ((uint64_t)o.steps + o.warmup >= ctx_limit / 2) {
    fprintf(stderr, "oasiskv bench runtime: --steps + --warmup = %llu is too many (at most %u)\n",
            (unsigned long long)o.steps + o.warmup, ctx_limit / 2 - 1);
    return 2;
  }
  uint32_t asked_context = 0; /* a clamped --context: said when the run starts (a refusal names it itself) */
  if ((uint64_t)o.context_tokens + o.steps + o.warmup > ctx_limit) {
    asked_context = o.context_tokens;
    o.context_tokens = ctx_limit - o.steps - o.warmup;
  }
  uint32_t max_ctx = o.context_tokens + (o.steps + o.warmup) + 16u;
  uint32_t max_blocks = (max_ctx + 15u) / 16u;
  uint32_t ext = max_blocks < 64u ? max_blocks : 64u;
  uint64_t per_seq_layer = (uint64_t)H * ((max_blocks + ext - 1u) / ext) * ext * block_bytes;
  uint64_t host_bytes = (uint64_t)(o.host_gib * 1073741824.0);
  uint32_t L = o.n_layers;
  if (L == 0) {
    uint64_t fit = host_bytes / (per_seq_layer * o.n_seqs);
    L = fit == 0 ? 1u : (fit > BENCH_MAX_LAYERS ? BENCH_MAX_LAYERS : (uint32_t)fit);
  }
  uint64_t limit = host_bytes;
  host_bytes = per_seq_layer * o.n_seqs * L;
  uint32_t C_max = (uint32_t)ceil(fabs(o.fetch_ratio) * o.budget_blocks - 1e-9); /* with auto: its maximum */
  if (C_max < 1) C_max = 1;
  /* DEVICE: the summaries of every HOST block, the slot pool (K + 1 + C per sequence, layer and KV head) and
   * the score buffers; on the cpu backend host memory as well. */
  uint64_t summaries = host_bytes / block_bytes * okv_summary_bytes(hd);
  uint64_t pool = (uint64_t)o.n_seqs * L * H * (o.budget_blocks + 1u + C_max) * block_bytes;
  uint64_t scores = (uint64_t)o.n_seqs * H * max_blocks * 4u * 2u;
  uint64_t prefill = (uint64_t)L * o.context_tokens * H * hd * 2u * sizeof(float); /* f32 K and V, all layers */
  const uint64_t device = summaries + pool + scores, need[3] = {host_bytes, device, prefill};
  static const char *const what[3] = {"of HOST tier", "of DEVICE (slot pool, summaries, scores)",
                                      "for the f32 prefill K/V"};
  for (int i = 0; i < 3; i++) {
    if (need[i] <= limit) continue;
    fprintf(stderr,
            "oasiskv bench runtime: %u seqs x %u layers x %u tokens%s need %.2f GiB %s, more than --host-gib %g "
            "(fewer --seqs, --layers or --context tokens, or a larger --host-gib)\n",
            o.n_seqs, L, o.context_tokens, asked_context ? " (--context clamped to the runtime's limit)" : "",
            (double)need[i] / 1073741824.0, what[i], o.host_gib);
    return 2;
  }
  /* --host-gib bounds each part; the machine bounds their sum: the HOST tier and the f32 prefill are host
   * memory, and so is the DEVICE tier on the cpu backend. More than the machine has was killed by the OS
   * after minutes of loading, without a word. */
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  const uint64_t in_ram = host_bytes + prefill + (strcmp(o.backend, "cpu") == 0 ? device : 0);
  if (pages > 0 && page > 0 && in_ram > (uint64_t)pages * (uint64_t)page) {
    fprintf(stderr,
            "oasiskv bench runtime: %u seqs x %u layers x %u tokens need %.2f GiB of host memory (HOST tier, f32 "
            "prefill%s), more than this machine's %.2f GiB\n",
            o.n_seqs, L, o.context_tokens, (double)in_ram / 1073741824.0,
            strcmp(o.backend, "cpu") == 0 ? ", DEVICE tier" : "", (double)pages * (double)page / 1073741824.0);
    return 2;
  }

  okv_runtime_config_t cfg;
  okv_runtime_config_init(&cfg);
  cfg.n_layers = L;
  cfg.n_q_heads = nq;
  cfg.n_kv_heads = H;
  cfg.head_dim = hd;
  cfg.kv_dtype = dt;
  cfg.mode = OKV_MODE_OASIS;
  cfg.budget_blocks = o.budget_blocks;
  okv_cli_apply_fetch_ratio(o.fetch_ratio, &cfg);
  cfg.max_seqs = o.n_seqs;
  cfg.max_context_tokens = max_ctx;
  cfg.host_capacity_bytes = host_bytes;
  cfg.track_recall = o.recall;
  cfg.scoring = o.scoring;
  cfg.device_selection = o.device_selection;
  cfg.scoring_groups = o.groups;
  cfg.summary_dtype = o.summary_dtype;
  okv_status_t st = okv_runtime_config_validate(&cfg);
  if (st != OKV_OK) return fail_status("config", st);
  uint32_t C = (uint32_t)ceil(cfg.fetch_ratio * o.budget_blocks - 1e-9); /* with auto: the maximum */
  if (C < 1) C = 1;
  const bool cap_auto = cfg.fetch_ratio_auto;
  double cap_used_sum = 0; /* auto: the C the runtime's jobs used (okv_runtime_cap_state), summed over measured steps */

  okv_hal_device_params_t params;
  okv_hal_device_params_init(&params);
  params.capacity_bytes[OKV_TIER_DEVICE] = summaries + pool + scores + (256u << 20);
  okv_hal_device_t *dev = NULL;
  st = okv_hal_device_create(o.backend, &params, NULL, &dev);
  if (st != OKV_OK) return fail_status("device", st);
  okv_runtime_t *rt = NULL;
  st = okv_runtime_create(dev, &cfg, NULL, &rt);
  if (st != OKV_OK) {
    OKV_IGNORE_ERROR(okv_hal_device_release(dev));
    return fail_status("runtime", st);
  }
  /* The run starts: a clamped context and a context that needs no selection are said now (a refusal above named
   * the clamp itself, in one line). */
  if (asked_context > 0)
    fprintf(stderr,
            "oasiskv bench runtime: --context %u + %u steps (warm-up included) exceeds the %u tokens the bench can "
            "give a sequence (the runtime's 1,048,576 less one block of headroom); using %u\n",
            asked_context, o.steps + o.warmup, ctx_limit, o.context_tokens);
  /* K blocks besides the active one: a context of up to K + 1 blocks never misses. */
  const bool fits =
      (uint64_t)o.context_tokens + o.steps + o.warmup <= ((uint64_t)o.budget_blocks + 1u) * OKV_BLOCK_TOKENS;
  const bool within_k = (uint64_t)o.context_tokens + o.steps + o.warmup <= (uint64_t)o.budget_blocks * OKV_BLOCK_TOKENS;
  if (fits) /* up to K blocks no selection runs; at K + 1 it runs and finds every block resident */
    fprintf(stderr,
            "oasiskv bench runtime: note: --context %u with the steps fits in the working set (K = %u blocks): "
            "every block stays resident and %s, so this measures dense decode%s\n",
            o.context_tokens, o.budget_blocks,
            within_k ? "no selection runs" : "no block is ever missed (prediction and selection run, fetch nothing)",
            within_k ? "" : " plus a prediction that changes nothing");
  const uint32_t kept_groups = okv_runtime_config(rt)->scoring_groups;
  if (!fits && o.warmup == 0)
    fprintf(stderr,
            "oasiskv bench runtime: note: with --warmup 0 the first measured step moves no block (a step's fetches "
            "land at the next step's commit), so bytes per step are understated\n");
  if ((o.scoring == OKV_SCORING_C4 || o.scoring == OKV_SCORING_Q8) && o.groups > 0 && kept_groups > 0 &&
      kept_groups < o.groups)
    fprintf(stderr,
            "oasiskv bench runtime: note: --groups %u is cut to %u candidates beyond K: K + the margin is at most "
            "%u blocks per KV head\n",
            o.groups, kept_groups, OKV_TOPK_MAX);
  if (!fits && o.scoring != OKV_SCORING_FLAT && kept_groups == 0) /* core/scoring.c's fallback, said */
    fprintf(stderr,
            "oasiskv bench runtime: note: --scoring %s scores every block exactly here, as flat does: K + the "
            "margin (or the groups kept) would cover a KV head's whole context, or K = %u leaves no margin "
            "(scoring_groups reads 0)\n",
            okv_scoring_name(o.scoring), OKV_TOPK_MAX);
  if (!fits && o.scoring == OKV_SCORING_TWO_LEVEL && kept_groups > 0 &&
      (uint64_t)kept_groups * OKV_SCORING_GROUP_BLOCKS < o.budget_blocks)
    fprintf(stderr,
            "oasiskv bench runtime: note: two-level scoring keeps %u groups of %u blocks per KV head, %u blocks, "
            "fewer than K = %u: each prediction holds at most %u blocks (--groups %u or more keeps K)\n",
            kept_groups, OKV_SCORING_GROUP_BLOCKS, kept_groups * OKV_SCORING_GROUP_BLOCKS, o.budget_blocks,
            kept_groups * OKV_SCORING_GROUP_BLOCKS,
            (o.budget_blocks + OKV_SCORING_GROUP_BLOCKS - 1u) / OKV_SCORING_GROUP_BLOCKS);

  /* Prefill: one random context, loaded for every sequence. */
  double t_load = bench_now();
  size_t kv = (size_t)H * hd;
  size_t pf_elems = (size_t)L * o.context_tokens * kv;
  float *pk = malloc(pf_elems * sizeof(float)), *pv = malloc(pf_elems * sizeof(float));
  size_t qn = (size_t)o.n_seqs * T * nq * hd;
  float *q = malloc(qn * sizeof(float)), *qbase = malloc((size_t)L * qn * sizeof(float));
  float *out = malloc(qn * sizeof(float)), *draft = malloc((size_t)o.n_seqs * 2 * kv * sizeof(float));
  float *k_new = malloc((size_t)o.n_seqs * kv * sizeof(float)), *v_new = malloc((size_t)o.n_seqs * kv * sizeof(float));
  uint32_t *ids = malloc(o.n_seqs * sizeof(uint32_t));
  json_object *jout = NULL;
  if (!pk || !pv || !q || !qbase || !out || !draft || !k_new || !v_new || !ids) {
    fprintf(stderr, "oasiskv bench runtime: out of host memory for inputs\n");
    rc = 1;
    goto done;
  }
  /* One layer of random K/V, repeated for every layer (loading, not content, is what is timed here). */
  size_t layer_elems = (size_t)o.context_tokens * kv;
  for (size_t i = 0; i < layer_elems; i++) {
    pk[i] = bench_rand();
    pv[i] = bench_rand();
  }
  if (o.locality > 0) {
    /* Keys with locality: each head's key is a slow random walk along the context plus i.i.d. noise,
     * k_t = a * w_t + (1 - a) * u_t with w_t = 0.98 w_{t-1} + 0.2 u'_t, a = --locality, so neighbouring blocks
     * (and a block's 16 keys) are alike, as in real attention; queries stay i.i.d. */
    float *w = calloc(kv, sizeof(float));
    if (w == NULL) {
      fprintf(stderr, "oasiskv bench runtime: out of host memory for inputs\n");
      rc = 1;
      goto done;
    }
    float a = (float)o.locality;
    for (size_t t = 0; t < o.context_tokens; t++)
      for (size_t j = 0; j < kv; j++) {
        w[j] = 0.98f * w[j] + 0.2f * bench_rand();
        pk[t * kv + j] = a * 4.0f * w[j] + (1.0f - a) * pk[t * kv + j];
      }
    free(w);
  }
  for (uint32_t l = 1; l < L; l++) {
    memcpy(pk + l * layer_elems, pk, layer_elems * sizeof(float));
    memcpy(pv + l * layer_elems, pv, layer_elems * sizeof(float));
  }
  okv_prefill_t pf = {o.context_tokens, pk, pv};
  for (uint32_t s = 0; s < o.n_seqs; s++) {
    st = okv_runtime_seq_add(rt, &pf, &ids[s]);
    if (st != OKV_OK) {
      rc = fail_status("seq_add", st);
      goto done;
    }
  }
  free(pk);
  free(pv);
  pk = pv = NULL;
  t_load = bench_now() - t_load;
  for (size_t i = 0; i < (size_t)L * qn; i++) qbase[i] = 4.0f * bench_rand();

  double t_steps = 0;
  for (uint32_t step = 0; step < o.warmup + o.steps; step++) {
    if (step == o.warmup) okv_runtime_stats_reset(rt);
    double t0 = bench_now();
    st = okv_runtime_step_begin(rt, o.n_seqs, ids, T);
    for (uint32_t l = 0; l < L && st == OKV_OK; l++) {
      for (size_t i = 0; i < qn; i++) q[i] = qbase[(size_t)l * qn + i] + (float)o.noise * 4.0f * bench_rand();
      for (size_t i = 0; i < (size_t)o.n_seqs * kv; i++) {
        k_new[i] = bench_rand();
        v_new[i] = bench_rand();
      }
      for (size_t i = 0; i < (size_t)o.n_seqs * 2 * kv; i++) draft[i] = bench_rand();
      st = okv_runtime_step_layer(rt, l, k_new, v_new, q, draft, out);
      if (okv_status_code(st) == OKV_STATUS_COPY_FAILED) {
        okv_status_free(st);
        st = OKV_OK;
      }
    }
    if (st == OKV_OK) st = okv_runtime_step_end(rt, NULL);
    if (st != OKV_OK) {
      rc = fail_status("step", st);
      goto done;
    }
    if (step >= o.warmup) t_steps += bench_now() - t0;
    okv_cap_state_t cs;
    if (step >= o.warmup && cap_auto) {
      st = okv_runtime_cap_state(rt, &cs);
      if (st != OKV_OK) {
        rc = fail_status("cap state", st);
        goto done;
      }
      cap_used_sum += cs.cap_blocks;
    }
  }

  okv_step_stats_t cum;
  st = okv_runtime_stats(rt, UINT32_MAX, &cum);
  if (st != OKV_OK) {
    rc = fail_status("stats", st);
    goto done;
  }
  double n_steps = (double)o.steps;
  double overhead = cum.attention_seconds > 0 ? cum.bookkeeping_seconds / cum.attention_seconds : 0.0;
  double scoring_fraction = cum.attention_seconds > 0 ? cum.predict_seconds / cum.attention_seconds : 0.0;
  double ns_per_head = cum.bookkeeping_seconds / n_steps * 1e9 / ((double)o.n_seqs * L * H);
  double bytes_per_step = (double)cum.bytes_moved[OKV_TIER_HOST][OKV_TIER_DEVICE] / n_steps;
  /* The bound of bytes per step: with auto, at its maximum C (the C used varies by step and layer). */
  double cap_bytes = (double)C * H * L * (double)block_bytes * o.n_seqs;
  double cap_used = cap_auto ? cap_used_sum / n_steps : (double)C; /* mean over measured steps and layers */
  okv_hal_device_info_t info;
  OKV_IGNORE_ERROR(okv_hal_device_info(dev, &info));

  if (o.json) {
    jout = json_object_new_object();
    json_object_object_add(jout, "backend", json_object_new_string(o.backend));
    json_object_object_add(jout, "device", json_object_new_string(info.name));
    json_object_object_add(jout, "n_seqs", json_object_new_int64(o.n_seqs));
    json_object_object_add(jout, "context_tokens", json_object_new_int64(o.context_tokens));
    json_object_object_add(jout, "n_layers", json_object_new_int64(L));
    json_object_object_add(jout, "n_kv_heads", json_object_new_int64(H));
    json_object_object_add(jout, "n_q_heads", json_object_new_int64(nq));
    json_object_object_add(jout, "head_dim", json_object_new_int64(hd));
    json_object_object_add(jout, "kv_dtype", json_object_new_string(okv_dtype_name(dt)));
    json_object_object_add(jout, "budget_blocks", json_object_new_int64(o.budget_blocks));
    if (cap_auto) { /* the self-tuning cap: the C it used, and its maximum */
      json_object_object_add(jout, "fetch_ratio", json_object_new_string("auto"));
      json_object_object_add(jout, "fetch_ratio_max", json_ratio(cfg.fetch_ratio));
      json_object_object_add(jout, "cap_blocks", json_object_new_double(cap_used));
    } else {
      json_object_object_add(jout, "fetch_ratio", json_ratio(cfg.fetch_ratio));
      json_object_object_add(jout, "cap_blocks", json_object_new_int64(C));
    }
    json_object_object_add(jout, "cap_max_blocks", json_object_new_int64(C));
    json_object_object_add(jout, "steps", json_object_new_int64(o.steps));
    json_object_object_add(jout, "load_seconds", json_object_new_double(t_load));
    json_object_object_add(jout, "step_seconds", json_object_new_double(t_steps / n_steps));
    json_object_object_add(jout, "bookkeeping_seconds_per_step",
                           json_object_new_double(cum.bookkeeping_seconds / n_steps));
    json_object_object_add(jout, "attention_seconds_per_step", json_object_new_double(cum.attention_seconds / n_steps));
    json_object_object_add(jout, "stall_seconds_per_step", json_object_new_double(cum.stall_seconds / n_steps));
    json_object_object_add(jout, "overhead_fraction", json_object_new_double(overhead));
    json_object_object_add(jout, "scoring_fraction", json_object_new_double(scoring_fraction));
    json_object_object_add(jout, "predict_seconds_per_step", json_object_new_double(cum.predict_seconds / n_steps));
    json_object_object_add(jout, "scoring", json_object_new_string(okv_scoring_name(o.scoring)));
    json_object_object_add(jout, "selection", json_object_new_string(o.device_selection ? "device" : "host"));
    /* the value in effect (0: every block scored exactly) */
    json_object_object_add(jout, "scoring_groups", json_object_new_int64(okv_runtime_config(rt)->scoring_groups));
    json_object_object_add(jout, "summary_dtype",
                           json_object_new_string(okv_dtype_name(okv_runtime_config(rt)->summary_dtype)));
    json_object_object_add(jout, "locality", json_ratio(o.locality)); /* as given: 0.3, not 0.29999999999999999 */
    json_object_object_add(jout, "noise", json_ratio(o.noise));       /* the queries' noise (--noise) */
    json_object_object_add(
        jout, "bookkeeping_ns_per_head",
        json_object_new_double(cum.bookkeeping_seconds / n_steps * 1e9 / ((double)o.n_seqs * L * H)));
    const double per_head_ns = 1e9 / n_steps / ((double)o.n_seqs * L * H);
    json_object_object_add(jout, "select_ns_per_head", json_object_new_double(cum.select_seconds * per_head_ns));
    json_object_object_add(jout, "commit_ns_per_head", json_object_new_double(cum.commit_seconds * per_head_ns));
    json_object_object_add(jout, "working_set_ns_per_head",
                           json_object_new_double(cum.working_set_seconds * per_head_ns));
    json_object_object_add(jout, "predict_setup_ns_per_head",
                           json_object_new_double(cum.predict_setup_seconds * per_head_ns));
    json_object_object_add(jout, "append_ns_per_head",
                           json_object_new_double(cum.append_bookkeeping_seconds * per_head_ns));
    json_object_object_add(jout, "handoff_ns_per_head", json_object_new_double(cum.handoff_seconds * per_head_ns));
    json_object_object_add(jout, "bytes_per_step", json_object_new_double(bytes_per_step));
    json_object_object_add(jout, "cap_bytes_per_step", json_object_new_double(cap_bytes));
    json_object_object_add(jout, "append_bytes_per_step", json_object_new_double((double)cum.append_bytes / n_steps));
    json_object_object_add(jout, "hits", json_object_new_int64((int64_t)cum.hits));
    json_object_object_add(jout, "misses", json_object_new_int64((int64_t)cum.misses));
    json_object_object_add(jout, "admitted", json_object_new_int64((int64_t)cum.admitted));
    json_object_object_add(jout, "deferred", json_object_new_int64((int64_t)cum.deferred));
    if (o.recall) /* null when no step had a top-K to recall (every block resident, no selection) */
      json_object_object_add(
          jout, "recall", cum.recall_total ? json_object_new_double((double)cum.recall_hits / cum.recall_total) : NULL);
    if (o.recall && cum.topk_agreement_total > 0)
      json_object_object_add(jout, "topk_agreement",
                             json_object_new_double((double)cum.topk_agreement_hits / cum.topk_agreement_total));
    json_object *layers = json_object_new_array();
    for (uint32_t l = 0; l < L; l++) {
      okv_step_stats_t ls;
      OKV_IGNORE_ERROR(okv_runtime_stats(rt, l, &ls));
      json_object *jl = json_object_new_object();
      json_object_object_add(jl, "layer", json_object_new_int64(l));
      /* The table's columns (bookkeep_us, attention_us), in seconds like the run's totals. */
      json_object_object_add(jl, "bookkeeping_seconds_per_step",
                             json_object_new_double(ls.bookkeeping_seconds / n_steps));
      json_object_object_add(jl, "attention_seconds_per_step", json_object_new_double(ls.attention_seconds / n_steps));
      json_object_object_add(
          jl, "overhead_fraction",
          json_object_new_double(ls.attention_seconds > 0 ? ls.bookkeeping_seconds / ls.attention_seconds : 0.0));
      json_object_object_add(jl, "bytes_per_step",
                             json_object_new_double((double)ls.bytes_moved[OKV_TIER_HOST][OKV_TIER_DEVICE] / n_steps));
      json_object_array_add(layers, jl);
    }
    json_object_object_add(jout, "layers", layers);
    if (proj) proj_report(proj, ns_per_head, o.budget_blocks, jout);
    printf("%s\n", json_object_to_json_string_ext(jout, JSON_C_TO_STRING_PRETTY));
  } else {
    char cap_desc[96];
    if (cap_auto)
      snprintf(cap_desc, sizeof cap_desc, "auto (at most %u, %.2f used on average)", C, cap_used);
    else
      snprintf(cap_desc, sizeof cap_desc, "%u", C);
    printf(
        "oasiskv bench runtime: %s (%s), %u seqs x %u tokens, %u layers, %u/%u heads x %u, %s, K = %u, C = %s, "
        "%u steps (load %.1f s)\n",
        o.backend, info.name, o.n_seqs, o.context_tokens, L, nq, H, hd, okv_dtype_name(dt), o.budget_blocks, cap_desc,
        o.steps, t_load);
    printf("%-6s %14s %14s %10s %14s %14s\n", "layer", "bookkeep_us", "attention_us", "overhead", "bytes/step",
           "cap_bytes/step");
    double cap_layer = cap_bytes / L;
    for (uint32_t l = 0; l < L; l++) {
      okv_step_stats_t ls;
      OKV_IGNORE_ERROR(okv_runtime_stats(rt, l, &ls));
      printf("%-6u %14.1f %14.1f %10.4f %14.0f %14.0f\n", l, 1e6 * ls.bookkeeping_seconds / n_steps,
             1e6 * ls.attention_seconds / n_steps,
             ls.attention_seconds > 0 ? ls.bookkeeping_seconds / ls.attention_seconds : 0.0,
             (double)ls.bytes_moved[OKV_TIER_HOST][OKV_TIER_DEVICE] / n_steps, cap_layer);
    }
    printf("%-6s %14.1f %14.1f %10.4f %14.0f %14.0f\n", "all", 1e6 * cum.bookkeeping_seconds / n_steps,
           1e6 * cum.attention_seconds / n_steps, overhead, bytes_per_step, cap_bytes);
    printf(
        "step %.1f ms, stall %.2f ms/step; over the %u measured steps: hits %llu, misses %llu, admitted %llu, "
        "deferred %llu",
        1e3 * t_steps / n_steps, 1e3 * cum.stall_seconds / n_steps, o.steps, (unsigned long long)cum.hits,
        (unsigned long long)cum.misses, (unsigned long long)cum.admitted, (unsigned long long)cum.deferred);
    if (o.recall && cum.recall_total > 0) printf(", recall %.4f", (double)cum.recall_hits / cum.recall_total);
    if (o.recall && cum.recall_total == 0) printf(", recall - (no top-K to recall: every block resident)");
    if (o.recall && cum.topk_agreement_total > 0)
      printf(" (of the flat top-K), top-K agreement with flat %.4f",
             (double)cum.topk_agreement_hits / cum.topk_agreement_total);
    printf("\noverhead_fraction %.4f (target <= 0.02); bytes/step %.0f <= cap %.0f: %s\n", overhead, bytes_per_step,
           cap_bytes, bytes_per_step <= cap_bytes ? "yes" : "NO");
    const double per_head_ns = 1e9 / n_steps / ((double)o.n_seqs * L * H);
    const double parts = cum.select_seconds + cum.commit_seconds + cum.working_set_seconds + cum.predict_setup_seconds +
                         cum.append_bookkeeping_seconds + cum.handoff_seconds;
    double rest_ns = ns_per_head - parts * per_head_ns; /* the recall pass, the fetched-share measurement */
    if (fabs(rest_ns) < 0.5) rest_ns = 0;               /* rounding of equal sums, not a negative time */
    printf(
        "bookkeeping %.0f ns per KV head per step (target <= 500; %s selection): selection %.0f, commit %.0f, "
        "working set %.0f, prediction set-up %.0f, append %.0f, hand-off %.0f, %s %.0f\n",
        ns_per_head, o.device_selection ? "device" : "host", cum.select_seconds * per_head_ns,
        cum.commit_seconds * per_head_ns, cum.working_set_seconds * per_head_ns,
        cum.predict_setup_seconds * per_head_ns, cum.append_bookkeeping_seconds * per_head_ns,
        cum.handoff_seconds * per_head_ns, o.recall ? "the recall pass" : "the rest", rest_ns);
    const uint32_t groups = okv_runtime_config(rt)->scoring_groups;
    printf("scoring %s, %s summaries", okv_scoring_name(o.scoring),
           okv_dtype_name(okv_runtime_config(rt)->summary_dtype));
    if (groups > 0)
      printf(o.scoring == OKV_SCORING_Q8 || o.scoring == OKV_SCORING_C4 ? ", %u candidates rescored beyond K"
                                                                        : ", %u groups kept",
             groups);
    else if (o.scoring != OKV_SCORING_FLAT)
      printf(" (every block scored exactly: %s falls back to flat at this context and budget)",
             okv_scoring_name(o.scoring));
    printf(": prediction %.2f ms/step, scoring_fraction %.3f (target <= 1.0)\n", 1e3 * cum.predict_seconds / n_steps,
           scoring_fraction);
    if (proj) proj_report(proj, ns_per_head, o.budget_blocks, NULL);
  }
done:
  if (rc == 0 && (fflush(stdout) != 0 || ferror(stdout))) { /* a full disk or a closed pipe: not a result */
    fprintf(stderr, "oasiskv bench runtime: writing the output failed: %s\n", strerror(errno));
    rc = 1;
  }
  if (jout) json_object_put(jout);
  free(pk);
  free(pv);
  free(q);
  free(qbase);
  free(out);
  free(draft);
  free(k_new);
  free(v_new);
  free(ids);
  okv_runtime_destroy(rt);
  OKV_IGNORE_ERROR(okv_hal_device_release(dev));
  return rc;
}
