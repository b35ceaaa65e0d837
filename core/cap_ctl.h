/* Internal: the self-tuning cap's controller (cfg.fetch_ratio_auto; docs/api.md
 * "Fetch ratio"). A bounded coordinate search over C in [1, ceiling] on the
 * measured cost of a decoded token (step wall time / sequences), where ceiling
 * is the link-derived C (the largest C whose transfers fit the link between a
 * layer's uses, at most ceil(fetch_ratio * K)):
 *
 * - C changes only between measurement windows: after a change, one step
 *   settles (the C a step chooses applies to transfers the next step commits),
 *   then OKV_CAP_CTL_WINDOW steps are measured and their median is the cost.
 * - A probe moves C down (C - max(1, C / 2)) or up (C + max(1, C / 2)) and is
 *   compared with the window measured just before it at the base C. Fewer
 *   fetches are kept when they make a token at least OKV_CAP_CTL_DOWN_GAIN
 *   cheaper (the blocks were not worth their cost); more fetches are kept when
 *   a token costs at most OKV_CAP_CTL_UP_COST more (they are near free, and
 *   fetching buys recall). An accepted probe continues in its direction.
 * - Up probes only when the selection deferred predicted blocks in the base
 *   window (demand the cap refused) and C is below the ceiling.
 * - A rejected probe returns to the base C and holds it for `backoff` windows
 *   (1, doubling per rejection up to OKV_CAP_CTL_MAX_HOLD), re-measuring the
 *   base; then the other direction is probed (periodic re-probes).
 * - A ceiling below C clamps C at once; a link bandwidth that moved by more
 *   than OKV_CAP_CTL_LINK_CHANGE since the last reference restarts the search
 *   (backoff 1, a fresh base window).
 *
 * Pure: no clock, no runtime; tests drive it with synthetic measurements. */
#ifndef OASISKV_CORE_CAP_CTL_H
#define OASISKV_CORE_CAP_CTL_H

#include <stdbool.h>
#include <stdint.h>

#define OKV_CAP_CTL_WINDOW      3    /* measured steps per window (median) */
#define OKV_CAP_CTL_SETTLE      1    /* steps skipped after C changes */
#define OKV_CAP_CTL_DOWN_GAIN   0.03 /* a down probe must be this much cheaper per token */
#define OKV_CAP_CTL_UP_COST     0.03 /* an up probe may be this much dearer per token */
#define OKV_CAP_CTL_MAX_HOLD    8    /* windows at most between a rejected probe and the next */
#define OKV_CAP_CTL_LINK_CHANGE 0.25 /* relative link change that restarts the search */

/* One step's measurements. */
typedef struct okv_cap_obs_t {
  uint32_t ceiling;        /* link-derived C for the next step, >= 1 (clamped by the caller to C_max) */
  double token_seconds;    /* the step's wall time / its sequences; <= 0 or NaN: not measured */
  uint64_t deferred;       /* predicted blocks the cap deferred in the step (all layers, heads) */
  double link_bytes_per_s; /* current link estimate; <= 0: none */
} okv_cap_obs_t;

typedef enum { OKV_CAP_BASE = 0, OKV_CAP_PROBE_DOWN = 1, OKV_CAP_PROBE_UP = 2 } okv_cap_phase_t;

typedef struct okv_cap_ctl_t {
  uint32_t c;      /* C in use */
  uint32_t c_base; /* accepted C */
  okv_cap_phase_t phase;
  double j_base;   /* base window's cost per token (0: none yet) */
  uint32_t settle; /* steps left to skip */
  double win[OKV_CAP_CTL_WINDOW];
  uint32_t n_win;
  uint64_t win_deferred;
  uint32_t hold;    /* base windows left before the next probe */
  uint32_t backoff; /* hold after the next rejection */
  int next_dir;     /* -1: probe down next, +1: up */
  double link_ref;  /* link estimate the search started from (0: none) */
  /* Counters (tests, docs). */
  uint32_t windows, probes, accepted;
} okv_cap_ctl_t;

/* Starts at C = c_start (>= 1), probing down first. */
void okv_cap_ctl_init(okv_cap_ctl_t *ctl, uint32_t c_start);

/* Feeds one step's measurements; returns the C for the next step, in
 * [1, max(1, obs->ceiling)]. */
uint32_t okv_cap_ctl_update(okv_cap_ctl_t *ctl, const okv_cap_obs_t *obs);

#endif
