/* Internal: the self-tuning cap's controller (cfg.fetch_ratio_auto; docs/api.md
 * "Fetch ratio"). A bounded coordinate search over C in [1, ceiling] on the
 * measured cost of a decoded token (step wall time / sequences), where ceiling
 * is the link-derived C (the largest C whose transfers fit the link between a
 * layer's uses, at most ceil(fetch_ratio * K)), at most the heads' spares:
 *
 * - Every change of C is followed by OKV_CAP_CTL_SETTLE unmeasured steps (the C
 *   a step chooses applies to transfers the next step commits).
 * - A base window measures OKV_CAP_CTL_WINDOW steps at the accepted C (the
 *   selection's deferred demand in it decides whether an up probe is possible).
 * - A probe is paired: C alternates between the probe's C (C - max(1, C / 2)
 *   down, C + max(1, C / 2) up) and the accepted C, one measured step each, for
 *   OKV_CAP_CTL_PAIRS pairs; each pair gives the ratio of the probe step's cost
 *   to the base step's right after it. Adjacent steps share the machine's state,
 *   so slow phases (other tenants, a hypervisor taking the CPU) divide out, where
 *   two windows measured a second apart would differ by them.
 * - What the fetches buy: during a probe the runtime measures, on one layer, the
 *   attention share of the blocks each measured step's commit fetched (the real
 *   token's attention probability of the block times its head's working-set
 *   blocks: 1 = an average resident block). The marginal share of a probe is the
 *   difference of the two arms' shares over the difference of their fetched
 *   blocks, each arm taken as its means per measured step (steps that carried
 *   a measurement): what the blocks the probe adds (up) or drops (down) draw.
 *   It is defined when the arms' mean fetched blocks per step, times the
 *   pairs, differ by at least OKV_CAP_CTL_MIN_MARGINAL_BLOCKS.
 * - Fewer fetches are kept when every pair says they are cheaper and the
 *   median ratio is at most 1 - OKV_CAP_CTL_DOWN_GAIN (the blocks were not worth
 *   their cost), or when the dropped blocks' marginal share is below
 *   OKV_CAP_CTL_MIN_SHARE and the median ratio is at most 1 + OKV_CAP_CTL_UP_COST
 *   (they drew less than an average block, and dropping them costs nothing
 *   measurable). More fetches are kept when the median ratio is at most
 *   1 + OKV_CAP_CTL_UP_COST and the added blocks' marginal share is at least
 *   OKV_CAP_CTL_MIN_SHARE (or undefined: no share measured). Without shares, C
 *   thus drifts up on noise, to what the link and the spares carry; with them it
 *   stops where the next fetches would bring blocks attention hardly reads.
 * - Up probes only when the selection deferred predicted blocks in the base
 *   window (demand the cap refused) and C is below the ceiling.
 * - After an accepted probe one base window, then the next probe continues in
 *   its direction; a rejected probe holds the base for `backoff` windows (1,
 *   doubling per rejection up to OKV_CAP_CTL_MAX_HOLD), then probes the other
 *   direction (periodic re-probes).
 * - A ceiling below C clamps C at once; a link bandwidth that moved by more
 *   than OKV_CAP_CTL_LINK_CHANGE since the last reference, with a ceiling other
 *   than the reference's, restarts the search (backoff 1, a fresh base window).
 *
 * Pure: no clock, no runtime; tests drive it with synthetic measurements. */
#ifndef OASISKV_CORE_CAP_CTL_H
#define OASISKV_CORE_CAP_CTL_H

#include <stdbool.h>
#include <stdint.h>

#define OKV_CAP_CTL_WINDOW              3    /* measured steps per base window */
#define OKV_CAP_CTL_PAIRS               3    /* (probe, base) step pairs per probe (median of their ratios) */
#define OKV_CAP_CTL_SETTLE              1    /* steps skipped after C changes */
#define OKV_CAP_CTL_DOWN_GAIN           0.03 /* a down probe this much cheaper per token (median; every pair) */
#define OKV_CAP_CTL_UP_COST             0.03 /* an up probe may be this much dearer per token */
#define OKV_CAP_CTL_MAX_HOLD            8    /* windows at most between a rejected probe and the next */
#define OKV_CAP_CTL_LINK_CHANGE         0.25 /* relative link change that restarts the search */
#define OKV_CAP_CTL_MIN_SHARE           1.0  /* marginal fetched blocks must draw an average block's attention share */
#define OKV_CAP_CTL_MIN_MARGINAL_BLOCKS 8u   /* fetched blocks the arms must differ by for a marginal share */

/* One step's measurements. */
typedef struct okv_cap_obs_t {
  uint32_t ceiling;        /* link-derived C for the next step, >= 1 (clamped by the caller to C_max) */
  double token_seconds;    /* the step's wall time / its sequences; <= 0 or NaN: not measured */
  uint64_t deferred;       /* predicted blocks the cap deferred in the step (all layers, heads) */
  double link_bytes_per_s; /* current link estimate; <= 0: none */
  /* What the step's fetches bought (0 blocks: not measured): the summed attention share of the blocks the
   * step's commits fetched, on the layers sampled (okv_cap_ctl_wants_share), and their number. */
  double fetch_share;
  uint64_t fetch_share_blocks;
  bool fetch_share_measured; /* the step measured (its commit may have fetched nothing: 0 blocks, measured) */
} okv_cap_obs_t;

typedef enum { OKV_CAP_BASE = 0, OKV_CAP_PROBE_DOWN = 1, OKV_CAP_PROBE_UP = 2 } okv_cap_phase_t;

typedef struct okv_cap_ctl_t {
  uint32_t c;      /* C in use */
  uint32_t c_base; /* accepted C */
  okv_cap_phase_t phase;
  double j_base;   /* latest base window's cost per token, its median (0: none yet) */
  uint32_t settle; /* steps left to skip */
  double win[OKV_CAP_CTL_WINDOW];
  uint32_t n_win; /* base window: measured steps so far */
  uint64_t win_deferred;
  /* A probe: which arm runs (0: the probe's C, 1: the base C), the probe's C, the cost of the current
   * pair's probe step, and the pairs' ratios so far. */
  uint32_t arm, c_probe, n_pairs;
  double j_arm;
  double ratio[OKV_CAP_CTL_PAIRS];
  double arm_share[2];    /* per arm (0: the probe's C, 1: the base C): summed fetched share of the probe */
  uint64_t arm_blocks[2]; /* and the fetched blocks measured */
  uint32_t arm_steps[2];  /* and the steps that carried a measurement */
  double marginal_share;  /* the last finished probe's marginal share (NaN: undefined) */
  uint32_t hold;          /* base windows left before the next probe */
  uint32_t backoff;       /* hold after the next rejection */
  int next_dir;           /* -1: probe down next, +1: up */
  double link_ref;        /* link estimate the search started from (0: none) */
  uint32_t ceiling_ref;   /* the ceiling at link_ref */
  /* Counters (tests, docs). */
  uint32_t windows, probes, accepted;
} okv_cap_ctl_t;

/* Starts at C = c_start (>= 1), probing down first. */
void okv_cap_ctl_init(okv_cap_ctl_t *ctl, uint32_t c_start);

/* Applies a ceiling at once, between steps (a new sequence took spare slots back): C, the accepted C and
 * a probe's C above it end at the ceiling (a probe ends), in a fresh base window after one settle step;
 * nothing changes when all are within it. update() applies its own ceiling the same way. */
void okv_cap_ctl_clamp(okv_cap_ctl_t *ctl, uint32_t ceiling);

/* True when the next step is a measured step of a probe: the one kind of step whose fetched blocks' attention
 * share the search uses (the runtime measures it only then; it costs a second pass over one layer's keys). */
bool okv_cap_ctl_wants_share(const okv_cap_ctl_t *ctl);

/* Feeds one step's measurements; returns the C for the next step, in
 * [1, max(1, obs->ceiling)]. */
uint32_t okv_cap_ctl_update(okv_cap_ctl_t *ctl, const okv_cap_obs_t *obs);

#endif
