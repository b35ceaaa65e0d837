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
}

static void window_restart(okv_cap_ctl_t *ctl) {
  ctl->n_win = 0;
  ctl->win_deferred = 0;
  ctl->settle = OKV_CAP_CTL_SETTLE;
}

/* Back to the base C with no base measurement: the next window measures it. */
static void rebase(okv_cap_ctl_t *ctl) {
  ctl->c = ctl->c_base;
  ctl->phase = OKV_CAP_BASE;
  ctl->j_base = 0;
  ctl->hold = 0;
  window_restart(ctl);
}

static double median(double *v, uint32_t n) {
  for (uint32_t i = 1; i < n; i++) /* insertion sort: n = OKV_CAP_CTL_WINDOW */
    for (uint32_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
      double t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static uint32_t stride(uint32_t c) { return c / 2 > 1 ? c / 2 : 1; }

static void reject(okv_cap_ctl_t *ctl, int next_dir) {
  ctl->c = ctl->c_base;
  ctl->hold = ctl->backoff;
  ctl->backoff = ctl->backoff * 2 > OKV_CAP_CTL_MAX_HOLD ? OKV_CAP_CTL_MAX_HOLD : ctl->backoff * 2;
  ctl->next_dir = next_dir;
  ctl->settle = OKV_CAP_CTL_SETTLE;
}

static void accept(okv_cap_ctl_t *ctl, double j, int dir) {
  ctl->c_base = ctl->c;
  ctl->j_base = j;
  ctl->backoff = 1;
  ctl->hold = 0;
  ctl->next_dir = dir;
  ctl->accepted++;
}

uint32_t okv_cap_ctl_update(okv_cap_ctl_t *ctl, const okv_cap_obs_t *obs) {
  uint32_t ceiling = obs->ceiling < 1 ? 1 : obs->ceiling;
  double link = obs->link_bytes_per_s;
  if (link > 0 && isfinite(link)) {
    if (ctl->link_ref <= 0) {
      ctl->link_ref = link;
    } else if (fabs(link / ctl->link_ref - 1.0) > OKV_CAP_CTL_LINK_CHANGE) { /* a new link: search again */
      ctl->link_ref = link;
      ctl->backoff = 1;
      ctl->next_dir = -1;
      rebase(ctl);
    }
  }
  if (ctl->c > ceiling || ctl->c_base > ceiling) { /* the link no longer carries C: clamp now */
    if (ctl->c_base > ceiling) ctl->c_base = ceiling;
    rebase(ctl);
  }
  if (ctl->settle > 0) {
    ctl->settle--;
    return ctl->c;
  }
  double j = obs->token_seconds;
  if (!(j > 0) || !isfinite(j)) return ctl->c;
  ctl->win[ctl->n_win++] = j;
  ctl->win_deferred += obs->deferred;
  if (ctl->n_win < OKV_CAP_CTL_WINDOW) return ctl->c;
  double cost = median(ctl->win, ctl->n_win);
  uint64_t deferred = ctl->win_deferred;
  ctl->n_win = 0;
  ctl->win_deferred = 0;
  ctl->windows++;
  switch (ctl->phase) {
    case OKV_CAP_BASE:
      ctl->j_base = cost;
      if (ctl->hold > 0 && --ctl->hold > 0) return ctl->c;
      break;
    case OKV_CAP_PROBE_DOWN:
      ctl->phase = OKV_CAP_BASE;
      if (cost < ctl->j_base * (1.0 - OKV_CAP_CTL_DOWN_GAIN))
        accept(ctl, cost, -1);
      else
        reject(ctl, +1);
      break;
    case OKV_CAP_PROBE_UP:
      ctl->phase = OKV_CAP_BASE;
      if (cost <= ctl->j_base * (1.0 + OKV_CAP_CTL_UP_COST))
        accept(ctl, cost, +1);
      else
        reject(ctl, -1);
      break;
  }
  if (ctl->hold > 0 || ctl->c != ctl->c_base) return ctl->c; /* rejected: hold the base first */
  /* Next probe from the base, whose cost (and deferred demand) this window measured. */
  bool can_up = deferred > 0 && ctl->c_base<ceiling, can_down = ctl->c_base> 1;
  int dir = ctl->next_dir;
  if (dir > 0 && !can_up) dir = -1;
  if (dir < 0 && !can_down) dir = can_up ? +1 : 0;
  if (dir == 0) return ctl->c; /* nothing to probe: measure the base again */
  uint32_t s = stride(ctl->c_base);
  if (dir > 0) {
    ctl->c = ctl->c_base + s > ceiling ? ceiling : ctl->c_base + s;
    ctl->phase = OKV_CAP_PROBE_UP;
  } else {
    ctl->c = ctl->c_base - s;
    ctl->phase = OKV_CAP_PROBE_DOWN;
  }
  ctl->probes++;
  ctl->settle = OKV_CAP_CTL_SETTLE;
  return ctl->c;
}
