/* `oasiskv info`: version, backends compiled in, and for each backend its
 * devices (or why it is unavailable) with per-tier capacities and copy
 * capabilities. `--json` prints the same as one JSON object. `--link-gbps` /
 * `--link-latency-us` open the cpu device with an emulated link and show it. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "oasiskv/oasiskv.h"
#include "cli.h"

#define OKV_INFO_MAX_DEVICES 16

/* "1.00 GiB", "512.0 MiB", "64 B". */
static void fmt_bytes(uint64_t bytes, char *out, size_t n) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) {
    snprintf(out, n, "%" PRIu64 " B", bytes);
  } else {
    snprintf(out, n, v >= 100.0 ? "%.0f %s" : v >= 10.0 ? "%.1f %s" : "%.2f %s", v, units[u]);
  }
}

/* Capacity limits come from a device instance (defaults); 0 when it cannot be created. */
typedef struct tier_view_t {
  bool have_limits;
  uint64_t capacity_bytes[OKV_TIER_COUNT];
  double link_bytes_per_s, link_latency_s; /* the emulated link of the device instance (0 = unpaced / real) */
  char create_error[256];
} tier_view_t;

/* `link`: the emulated link asked for with --link-gbps / --link-latency-us, {bytes per second, seconds}; applied
 * to the cpu backend only (a GPU's link is real). */
static void load_limits(const char *backend, int ordinal, const double link[2], tier_view_t *v) {
  memset(v, 0, sizeof(*v));
  okv_hal_device_params_t p;
  okv_hal_device_params_init(&p);
  p.ordinal = ordinal;
  if (!strcmp(backend, "cpu")) {
    p.link_bytes_per_s = link[0];
    p.link_latency_s = link[1];
  }
  okv_hal_device_t *dev = NULL;
  okv_status_t s = okv_hal_device_create(backend, &p, NULL, &dev);
  if (s != OKV_OK) {
    snprintf(v->create_error, sizeof(v->create_error), "%s", okv_status_message(s));
    okv_status_free(s);
    return;
  }
  v->have_limits = true;
  for (int t = 0; t < OKV_TIER_COUNT; ++t) {
    uint64_t used = 0;
    OKV_IGNORE_ERROR(okv_hal_device_tier_usage(dev, (okv_tier_t)t, &v->capacity_bytes[t], &used));
  }
  okv_hal_device_info_t di;
  if (okv_status_consume(okv_hal_device_info(dev, &di)) == OKV_STATUS_OK) {
    v->link_bytes_per_s = di.link_bytes_per_s;
    v->link_latency_s = di.link_latency_s;
  }
  OKV_IGNORE_ERROR(okv_hal_device_release(dev));
}

static void print_device_text(const okv_hal_device_info_t *info, const tier_view_t *v) {
  printf("  device %d: %s\n", info->ordinal, info->name);
  printf("    tiers:");
  for (int t = 0; t < OKV_TIER_COUNT; ++t) {
    if (!(info->alloc_tiers & OKV_TIER_BIT(t))) continue;
    char phys[32] = "unknown", cap[32] = "";
    if (info->physical_bytes[t]) fmt_bytes(info->physical_bytes[t], phys, sizeof(phys));
    if (v->have_limits && v->capacity_bytes[t] != UINT64_MAX) {
      fmt_bytes(v->capacity_bytes[t], cap, sizeof(cap));
      printf("  %s %s (limit; %s physical)", okv_tier_name((okv_tier_t)t), cap, phys);
    } else {
      printf("  %s %s%s", okv_tier_name((okv_tier_t)t), phys, v->have_limits ? " (no limit)" : "");
    }
  }
  printf("\n    copies:");
  for (int s = 0; s < OKV_TIER_COUNT; ++s) {
    for (int d = 0; d < OKV_TIER_COUNT; ++d) {
      if (info->copy_mask[s] & OKV_TIER_BIT(d))
        printf(" %s->%s", okv_tier_name((okv_tier_t)s), okv_tier_name((okv_tier_t)d));
    }
  }
  printf("\n");
  if (info->simd[0]) printf("    simd: %s\n", info->simd);
  if (v->link_bytes_per_s > 0)
    printf("    link: EMULATED HOST<->DEVICE, %.3f GB/s per direction, %.1f us per copy\n", v->link_bytes_per_s / 1e9,
           v->link_latency_s * 1e6);
  if (!v->have_limits) printf("    (could not open the device: %s)\n", v->create_error);
}

static json_object *device_json(const okv_hal_device_info_t *info, const tier_view_t *v) {
  json_object *d = json_object_new_object();
  json_object_object_add(d, "ordinal", json_object_new_int(info->ordinal));
  json_object_object_add(d, "name", json_object_new_string(info->name));
  if (info->simd[0]) json_object_object_add(d, "simd", json_object_new_string(info->simd));
  json_object *tiers = json_object_new_object();
  for (int t = 0; t < OKV_TIER_COUNT; ++t) {
    if (!(info->alloc_tiers & OKV_TIER_BIT(t))) continue;
    json_object *jt = json_object_new_object();
    json_object_object_add(jt, "physical_bytes", json_object_new_int64((int64_t)info->physical_bytes[t]));
    if (v->have_limits) {
      json_object_object_add(
          jt, "capacity_bytes",
          v->capacity_bytes[t] == UINT64_MAX ? NULL : json_object_new_int64((int64_t)v->capacity_bytes[t]));
    }
    json_object *copies = json_object_new_array();
    for (int d2 = 0; d2 < OKV_TIER_COUNT; ++d2) {
      if (info->copy_mask[t] & OKV_TIER_BIT(d2))
        json_object_array_add(copies, json_object_new_string(okv_tier_name((okv_tier_t)d2)));
    }
    json_object_object_add(jt, "copies_to", copies);
    json_object_object_add(tiers, okv_tier_name((okv_tier_t)t), jt);
  }
  json_object_object_add(d, "tiers", tiers);
  if (v->link_bytes_per_s > 0) {
    json_object *jl = json_object_new_object();
    json_object_object_add(jl, "emulated", json_object_new_boolean(1));
    json_object_object_add(jl, "bytes_per_second", json_object_new_double(v->link_bytes_per_s));
    json_object_object_add(jl, "latency_seconds", json_object_new_double(v->link_latency_s));
    json_object_object_add(d, "link", jl);
  }
  if (!v->have_limits) json_object_object_add(d, "open_error", json_object_new_string(v->create_error));
  return d;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: oasiskv info [--json] [--link-gbps G] [--link-latency-us U] [--model FILE]\n"
          "  prints the version, the backends compiled in, and per backend its devices\n"
          "  (or why it is unavailable) with tier capacities and copy capabilities\n"
          "  --json   one JSON object on stdout\n"
          "  --model FILE\n"
          "           instead, a model file (GGUF or llama2.c checkpoint): shape (layers, query/KV heads,\n"
          "           head_dim, ffn, vocab), context length, RoPE theta/scaling, tensor types, tokenizer,\n"
          "           and whether eval/generate can load it\n"
          "  --link-gbps G, --link-latency-us U\n"
          "           open the cpu device with an EMULATED HOST<->DEVICE link of G GB/s (1e9 bytes/s) and U\n"
          "           microseconds per copy (docs/performance.md) and show it\n");
}

int okv_cli_info(int argc, char **argv) {
  bool as_json = false;
  const char *model_path = NULL; /* --model FILE: describe a model file instead (tools/cli_info_model.c) */
  double link[2] = {0.0, 0.0};   /* bytes per second, seconds */
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--json")) {
      as_json = true;
    } else if (!strcmp(argv[i], "--model")) {
      if (i + 1 >= argc) {
        fprintf(stderr, "oasiskv info: option --model needs a value\n");
        return 2;
      }
      model_path = argv[++i];
    } else if (!strcmp(argv[i], "--link-gbps") || !strcmp(argv[i], "--link-latency-us")) {
      const bool gbps = !strcmp(argv[i], "--link-gbps");
      char *end = NULL;
      double x = i + 1 < argc ? strtod(argv[i + 1], &end) : NAN;
      if (i + 1 >= argc || end == argv[i + 1] || *end != '\0' || !isfinite(x) || x < 0) {
        fprintf(stderr, "oasiskv info: %s needs a finite number >= 0\n", argv[i]);
        return 2;
      }
      link[gbps ? 0 : 1] = gbps ? x * 1e9 : x * 1e-6;
      ++i;
    } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "oasiskv info: unknown option '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }

  if (model_path) return okv_cli_info_model(model_path, as_json);

  json_object *root = NULL, *jbackends = NULL;
  size_t n_backends = okv_hal_backend_count();
  if (as_json) {
    root = json_object_new_object();
    json_object_object_add(root, "version", json_object_new_string(OKV_VERSION_STRING));
    jbackends = json_object_new_array();
  } else {
    printf("oasiskv %s\n", OKV_VERSION_STRING);
    printf("backends compiled in:");
    for (size_t i = 0; i < n_backends; ++i) printf(" %s", okv_hal_backend_name(i));
    printf("\n");
  }

  for (size_t i = 0; i < n_backends; ++i) {
    const char *name = okv_hal_backend_name(i);
    okv_hal_device_info_t infos[OKV_INFO_MAX_DEVICES];
    size_t count = 0;
    okv_status_t s = okv_hal_backend_enumerate(name, infos, OKV_INFO_MAX_DEVICES, &count);
    json_object *jb = NULL;
    if (as_json) {
      jb = json_object_new_object();
      json_object_object_add(jb, "name", json_object_new_string(name));
      json_object_array_add(jbackends, jb);
    }
    if (s != OKV_OK || count == 0) {
      const char *why = s != OKV_OK ? okv_status_message(s) : "no devices found";
      if (as_json) {
        json_object_object_add(jb, "available", json_object_new_boolean(0));
        json_object_object_add(jb, "reason", json_object_new_string(why));
      } else {
        printf("backend %s: unavailable: %s\n", name, why);
      }
      okv_status_free(s);
      continue;
    }
    size_t shown = count < OKV_INFO_MAX_DEVICES ? count : OKV_INFO_MAX_DEVICES;
    json_object *jdevs = NULL;
    if (as_json) {
      json_object_object_add(jb, "available", json_object_new_boolean(1));
      jdevs = json_object_new_array();
      json_object_object_add(jb, "devices", jdevs);
    } else {
      printf("backend %s: %zu device%s\n", name, count, count == 1 ? "" : "s");
    }
    for (size_t k = 0; k < shown; ++k) {
      tier_view_t v;
      load_limits(name, infos[k].ordinal, link, &v);
      if (as_json) {
        json_object_array_add(jdevs, device_json(&infos[k], &v));
      } else {
        print_device_text(&infos[k], &v);
      }
    }
  }

  if (as_json) {
    json_object_object_add(root, "backends", jbackends);
    printf("%s\n", json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(root);
  }
  return 0;
}
