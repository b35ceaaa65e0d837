/* The self-tuning cap's controller (see core/cap_ctl.h). */
#include "cap_ctl.h"

#include <math.h>
#include <string.h>

void okv_cap_ctl_init(okv_cap_ctl_t *ctl, uint32_t c_start) {
  memset(ctl, 0, sizeof *ctl);
  ctl->c = ctl->c_base = c_start < 1 ? 1 : c_start;
  ctl->phase = OKV_CAP_BASE;
  ctl->settle = OKV_CAP_CTL_SETTLE;
  ctl->backoff = 1;
  ctl->next_dir = -1;
  ctl->marginal_share = NAN;
}

bool okv_cap_ctl_wants_share(const okv_cap_ctl_t *ctl) { return ctl->phase != OKV_CAP_BASE && ctl->settle == 0; }

/* Sets C for the next step; a change is followed by the settle steps. */
static void set_c(okv_cap_ctl_t *ctl, uint32_t c) {
  if (c != ctl->c) ctl->settle = OKV_CAP_CTL_SETTLE;
  ctl->c = c;
}

/* Back to the base C in a fresh base window. */
static void to_base(okv_cap_ctl_t *ctl) {
  set_c(ctl, ctl->c_base);
  ctl->phase = OKV_CAP_BASE;
  ctl->n_win = 0;
  ctl->win_deferred = 0;
  ctl->n_pairs = 0;
  ctl->arm = 0;
}

static double median(double *v, uint32_t n) {
  for (uint32_t i = 1; i < n; i++) /* insertion sort: n is a window or the pairs */
    for (uint32_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
      double t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static uint32_t stride(uint32_t c) { return c / 2 > 1 ? c / 2 : 1; }

/* The probe's marginal share: what the blocks by which its arms' fetches differ drew, from each arm's means
 * per measured step (an arm's steps without a measurement, e.g. after a failed transfer, do not dilute it);
 * NaN when undefined. */
static double marginal_share(const okv_cap_ctl_t *ctl) {
  uint32_t mp = ctl->arm_steps[0], mb = ctl->arm_steps[1];
  if (mp == 0 || mb == 0) return NAN;
  double np = (double)ctl->arm_blocks[0] / mp, nb = (double)ctl->arm_blocks[1] / mb;
  /* the difference of fetched blocks over the pairs, in blocks: enough to say what they drew */
  if (fabs(np - nb) * OKV_CAP_CTL_PAIRS < OKV_CAP_CTL_MIN_MARGINAL_BLOCKS) return NAN;
  return (ctl->arm_share[0] / mp - ctl->arm_share[1] / mb) / (np - nb);
}

/* The probe's verdict from its pairs' ratios (probe step cost / base step cost) and its marginal share. */
static bool probe_accepted(okv_cap_ctl_t *ctl) {
  double worst = 0;
  for (uint32_t i = 0; i < ctl->n_pairs; i++) worst = ctl->ratio[i] > worst ? ctl->ratio[i] : worst;
  double m = median(ctl->ratio, ctl->n_pairs);
  double mu = ctl->marginal_share = marginal_share(ctl);
  bool not_dearer = m <= 1.0 + OKV_CAP_CTL_UP_COST;
  if (ctl->phase == OKV_CAP_PROBE_DOWN)
    return (worst < 1.0 && m <= 1.0 - OKV_CAP_CTL_DOWN_GAIN) || (mu < OKV_CAP_CTL_MIN_SHARE && not_dearer);
  return not_dearer && !(mu < OKV_CAP_CTL_MIN_SHARE); /* NaN: no share measured, cost alone decides */
}

/* A measured step of a probe's arm. */
static void probe_step(okv_cap_ctl_t *ctl, double j, const okv_cap_obs_t *obs) {
  if (obs->fetch_share_measured && isfinite(obs->fetch_share)) {
    ctl->arm_share[ctl->arm] += obs->fetch_share;
    ctl->arm_blocks[ctl->arm] += obs->fetch_share_blocks;
    ctl->arm_steps[ctl->arm]++;
  }
  if (ctl->arm == 0) { /* the probe's step: the base step of the pair follows */
    ctl->j_arm = j;
    ctl->arm = 1;
    set_c(ctl, ctl->c_base);
    return;
  }
  ctl->ratio[ctl->n_pairs++] = ctl->j_arm / j;
  if (ctl->n_pairs < OKV_CAP_CTL_PAIRS) {
    ctl->arm = 0;
    set_c(ctl, ctl->c_probe);
    return;
  }
  int dir = ctl->phase == OKV_CAP_PROBE_DOWN ? -1 : +1;
  if (probe_accepted(ctl)) {
    ctl->c_base = ctl->c_probe;
    ctl->backoff = 1;
    ctl->hold = 0;
    ctl->next_dir = dir;
    ctl->accepted++;
  } else {
    ctl->hold = ctl->backoff;
    ctl->backoff = ctl->backoff * 2 > OKV_CAP_CTL_MAX_HOLD ? OKV_CAP_CTL_MAX_HOLD : ctl->backoff * 2;
    ctl->next_dir = -dir;
  }
  to_base(ctl);
}

/* A base window is complete: hold, or start the next probe. */
static void base_window_done(okv_cap_ctl_t *ctl, uint32_t ceiling) {
  ctl->j_base = median(ctl->win, ctl->n_win);
  uint64_t deferred = ctl->win_deferred;
  ctl->n_win = 0;
  ctl->win_deferred = 0;
  ctl->windows++;
  if (ctl->hold > 0 && --ctl->hold > 0) return;
  bool can_up = deferred > 0 && ctl->c_base < ceiling;
  bool can_down = ctl->c_base > 1;
  int dir = ctl->next_dir;
  if (dir > 0 && !can_up) dir = -1;
  if (dir < 0 && !can_down) dir = can_up ? +1 : 0;
  if (dir == 0) return; /* nothing to probe: measure the base again */
  uint32_t s = stride(ctl->c_base);
  ctl->c_probe = dir > 0 ? (ctl->c_base + s > ceiling ? ceiling : ctl->c_base + s) : ctl->c_base - s;
  ctl->phase = dir > 0 ? OKV_CAP_PROBE_UP : OKV_CAP_PROBE_DOWN;
  ctl->arm = 0;
  ctl->n_pairs = 0;
  ctl->arm_share[0] = ctl->arm_share[1] = 0;
  ctl->arm_blocks[0] = ctl->arm_blocks[1] = 0;
  ctl->arm_steps[0] = ctl->arm_steps[1] = 0;
  ctl->probes++;
  set_c(ctl, ctl->c_probe);
}

/* Ends any probe and restarts at the accepted C: no hold, no base measurement, one settle step (what was
 * measured so far ran under another link or ceiling). */
static void restart(okv_cap_ctl_t *ctl) {
  ctl->hold = 0;
  ctl->j_base = 0;
  to_base(ctl);
  ctl->settle = OKV_CAP_CTL_SETTLE;
}

void okv_cap_ctl_clamp(okv_cap_ctl_t *ctl, uint32_t ceiling) {
  if (ceiling < 1) ceiling = 1;
  bool probe_over = ctl->phase != OKV_CAP_BASE && ctl->c_probe > ceiling;
  if (ctl->c > ceiling || ctl->c_base > ceiling || probe_over) { /* the ceiling no longer allows C: clamp now */
    if (ctl->c_base > ceiling) ctl->c_base = ceiling;
    restart(ctl);
  }
}

uint32_t okv_cap_ctl_update(okv_cap_ctl_t *ctl, const okv_cap_obs_t *obs) {
  uint32_t ceiling = obs->ceiling < 1 ? 1 : obs->ceiling;
  double link = obs->link_bytes_per_s;
  if (link > 0 && isfinite(link)) {
    if (ctl->link_ref <= 0) {
      ctl->link_ref = link;
      ctl->ceiling_ref = ceiling;
    } else if (fabs(link / ctl->link_ref - 1.0) > OKV_CAP_CTL_LINK_CHANGE && ceiling != ctl->ceiling_ref) {
      /* A new link, and with it a new ceiling: search again. An estimate that moves while the ceiling stays
       * (jitter of small batches, a link that carries more than C_max or the spares anyway) changes nothing
       * the search could act on, and restarting on it would reset the hold every few windows. */
      ctl->link_ref = link;
      ctl->ceiling_ref = ceiling;
      ctl->backoff = 1;
      ctl->next_dir = -1;
      restart(ctl);
    }
  }
  okv_cap_ctl_clamp(ctl, ceiling);
  if (ctl->settle > 0) {
    ctl->settle--;
    return ctl->c;
  }
  double j = obs->token_seconds;
  if (!(j > 0) || !isfinite(j)) return ctl->c;
  if (ctl->phase != OKV_CAP_BASE) {
    probe_step(ctl, j, obs);
    return ctl->c;
  }
  ctl->win[ctl->n_win++] = j;
  ctl->win_deferred += obs->deferred;
  if (ctl->n_win == OKV_CAP_CTL_WINDOW) base_window_done(ctl, ceiling);
  return ctl->c;
}
