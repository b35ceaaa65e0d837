/* Pure tests of the self-tuning cap's controller (core/cap_ctl.h): hand-computed
 * walks with synthetic measurements (cost per token, deferred demand, link
 * ceiling), and bounds under a long random workload with a fixed seed. No device. */
#include "tests/common/test_common.h"

#include <math.h>

#include "core/cap_ctl.h"

/* One step: returns the C for the next step. */
static uint32_t feed(okv_cap_ctl_t *ctl, uint32_t ceiling, double token_s, uint64_t deferred, double link) {
  okv_cap_obs_t o = {.ceiling = ceiling, .token_seconds = token_s, .deferred = deferred, .link_bytes_per_s = link};
  uint32_t c = okv_cap_ctl_update(ctl, &o);
  assert_true(c >= 1);
  assert_true(c <= (ceiling < 1 ? 1 : ceiling));
  assert_int_equal(c, ctl->c);
  return c;
}

/* A base window: the steps left to settle after a change of C (none when C stayed) then OKV_CAP_CTL_WINDOW
 * measured steps, all at cost j; returns the last C and checks that C does not change before the window's
 * last step. */
static uint32_t window(okv_cap_ctl_t *ctl, uint32_t ceiling, double j, uint64_t deferred) {
  assert_int_equal(ctl->phase, OKV_CAP_BASE);
  uint32_t c0 = ctl->c, n = ctl->settle + OKV_CAP_CTL_WINDOW;
  assert_int_equal(ctl->n_win, 0);
  for (uint32_t i = 0; i + 1 < n; i++) assert_int_equal(feed(ctl, ceiling, j, deferred, 1e9), c0);
  return feed(ctl, ceiling, j, deferred, 1e9);
}

/* A whole probe, pair by pair: the probe's step costs jp[i] and the base step after it jb[i] (unmeasured
 * settle steps in between cost 100, which must not count). Checks that C alternates between the probe's C
 * and the base's, and returns the C after the probe's last step (back at the base, the old or the new). */
static uint32_t probe_pairs(okv_cap_ctl_t *ctl, uint32_t ceiling, const double *jp, const double *jb,
                            uint64_t deferred) {
  assert_true(ctl->phase != OKV_CAP_BASE);
  uint32_t cp = ctl->c_probe, cb = ctl->c_base, c = ctl->c;
  for (uint32_t i = 0; i < OKV_CAP_CTL_PAIRS; i++) {
    assert_int_equal(c, cp);
    while (ctl->settle > 0) assert_int_equal(feed(ctl, ceiling, 100.0, deferred, 1e9), cp);
    c = feed(ctl, ceiling, jp[i], deferred, 1e9); /* the probe's step */
    assert_int_equal(c, cb);
    while (ctl->settle > 0) assert_int_equal(feed(ctl, ceiling, 100.0, deferred, 1e9), cb);
    c = feed(ctl, ceiling, jb[i], deferred, 1e9); /* the base step of the pair */
  }
  assert_int_equal(ctl->phase, OKV_CAP_BASE);
  return c;
}

/* Every pair at the same costs. */
static uint32_t probe(okv_cap_ctl_t *ctl, uint32_t ceiling, double jp, double jb, uint64_t deferred) {
  double p[OKV_CAP_CTL_PAIRS], b[OKV_CAP_CTL_PAIRS];
  for (uint32_t i = 0; i < OKV_CAP_CTL_PAIRS; i++) p[i] = jp, b[i] = jb;
  return probe_pairs(ctl, ceiling, p, b, deferred);
}

/* Fetches that do not pay: each smaller C is cheaper per token, so C walks down
 * 7 -> 4 -> 2 -> 1 (stride max(1, C/2)); at 1 nothing is cheaper. */
static void test_shrinks_when_fetches_do_not_pay(void **state) {
  (void)state;
  okv_cap_ctl_t ctl;
  okv_cap_ctl_init(&ctl, 7);
  assert_int_equal(ctl.c, 7);
  assert_int_equal(window(&ctl, 7, 1.00, 10), 4);      /* base measured: probe down 7 - 3 */
  assert_int_equal(probe(&ctl, 7, 0.90, 1.00, 10), 4); /* every pair 10% cheaper (>= 3%): kept */
  assert_int_equal(ctl.c_base, 4);
  assert_int_equal(window(&ctl, 7, 0.90, 10), 2);      /* one base window, then on down: 4 - 2 */
  assert_int_equal(probe(&ctl, 7, 0.85, 0.90, 10), 2); /* 5.6% cheaper: kept */
  assert_int_equal(window(&ctl, 7, 0.85, 10), 1);
  assert_int_equal(probe(&ctl, 7, 0.84, 0.85, 10), 2); /* 1.2% cheaper: not worth it, back to 2 */
  assert_int_equal(ctl.c_base, 2);
  assert_int_equal(ctl.hold, 1);
  assert_int_equal(ctl.backoff, 2);
  /* One base window at 2 (hold 1), then the other direction: up to 3 (demand was deferred). */
  assert_int_equal(window(&ctl, 7, 0.85, 10), 3);
  /* 3 costs 10% more than 2 (> 3%): rejected, back to 2 and hold 2 windows. */
  assert_int_equal(probe(&ctl, 7, 0.935, 0.85, 10), 2);
  assert_int_equal(ctl.hold, 2);
  assert_int_equal(ctl.backoff, 4);
  assert_int_equal(window(&ctl, 7, 0.85, 10), 2);      /* hold 2 -> 1 */
  assert_int_equal(window(&ctl, 7, 0.85, 10), 1);      /* hold 1 -> 0: probe down again (periodic re-probe) */
  assert_int_equal(probe(&ctl, 7, 0.85, 0.85, 10), 2); /* not cheaper: back, hold 4 */
  assert_int_equal(ctl.hold, 4);
  assert_int_equal(ctl.backoff, OKV_CAP_CTL_MAX_HOLD);
  assert_int_equal(ctl.accepted, 2);
  assert_int_equal(ctl.probes, 5);
}

/* Fewer fetches are kept only when every pair says so: a probe whose median pair is 20% cheaper but whose
 * third pair is not cheaper stays at the base; an up probe is kept on its median (one dear pair of three
 * does not stop it). */
static void test_down_needs_every_pair(void **state) {
  (void)state;
  okv_cap_ctl_t ctl;
  okv_cap_ctl_init(&ctl, 4);
  assert_int_equal(window(&ctl, 7, 1.0, 1), 2);
  const double p1[OKV_CAP_CTL_PAIRS] = {0.8, 0.8, 1.01}, b1[OKV_CAP_CTL_PAIRS] = {1.0, 1.0, 1.0};
  assert_int_equal(probe_pairs(&ctl, 7, p1, b1, 1), 4);
  assert_int_equal(ctl.c_base, 4);
  assert_int_equal(ctl.accepted, 0);
  /* A slow phase of the machine that doubles both steps of a pair divides out: 1.6 / 2.0 is 20% cheaper. */
  assert_int_equal(window(&ctl, 7, 1.0, 1), 6); /* hold 1 -> 0: the other direction, 4 + 2 */
  const double p2[OKV_CAP_CTL_PAIRS] = {1.0, 1.5, 1.02}, b2[OKV_CAP_CTL_PAIRS] = {1.0, 1.0, 1.0};
  assert_int_equal(probe_pairs(&ctl, 7, p2, b2, 1), 6); /* median 1.02 <= 1.03: kept despite one dear pair */
  assert_int_equal(ctl.c_base, 6);
  assert_int_equal(window(&ctl, 7, 1.0, 1), 7); /* on up: 6 + 3, at most the ceiling */
  const double p3[OKV_CAP_CTL_PAIRS] = {1.6, 0.9, 0.9}, b3[OKV_CAP_CTL_PAIRS] = {2.0, 1.0, 1.0};
  assert_int_equal(probe_pairs(&ctl, 7, p3, b3, 1), 7); /* cheaper too: an up probe is kept */
  assert_int_equal(window(&ctl, 7, 1.0, 1), 4);         /* at the ceiling: down, 7 - 3 */
  assert_int_equal(probe_pairs(&ctl, 7, p3, b3, 1), 4); /* every pair >= 10% cheaper, with one slow pair */
  assert_int_equal(ctl.c_base, 4);
  assert_int_equal(ctl.accepted, 3);
}

/* Fetches near free (cost within 3%) while the cap defers demand: C grows back
 * 1 -> 2 -> 3 -> 4 -> 6 -> 7 and stops at the ceiling. */
static void test_grows_back_when_fetches_are_free(void **state) {
  (void)state;
  okv_cap_ctl_t ctl;
  okv_cap_ctl_init(&ctl, 1);
  assert_int_equal(window(&ctl, 7, 1.00, 5), 2);      /* base; nothing below 1: probe up */
  assert_int_equal(probe(&ctl, 7, 1.02, 1.00, 5), 2); /* 2% dearer: kept */
  assert_int_equal(window(&ctl, 7, 1.02, 5), 3);      /* continue up */
  assert_int_equal(probe(&ctl, 7, 1.02, 1.00, 5), 3);
  assert_int_equal(window(&ctl, 7, 1.00, 5), 4);
  assert_int_equal(probe(&ctl, 7, 1.03, 1.00, 5), 4);
  assert_int_equal(window(&ctl, 7, 1.00, 5), 6); /* stride 4 / 2 = 2 */
  assert_int_equal(probe(&ctl, 7, 1.03, 1.00, 5), 6);
  assert_int_equal(window(&ctl, 7, 1.00, 5), 7); /* 6 + 3 capped at the ceiling 7 */
  assert_int_equal(probe(&ctl, 7, 1.03, 1.00, 5), 7);
  assert_int_equal(ctl.c_base, 7);
  /* At the ceiling an up probe is impossible: the next probe goes down. */
  assert_int_equal(window(&ctl, 7, 1.00, 5), 4);
  assert_int_equal(probe(&ctl, 7, 1.00, 1.00, 5), 7); /* 4 is not cheaper: back to 7 */
  assert_int_equal(ctl.c_base, 7);
}

/* No demand deferred: no up probe, whatever the cost says. */
static void test_no_growth_without_demand(void **state) {
  (void)state;
  okv_cap_ctl_t ctl;
  okv_cap_ctl_init(&ctl, 2);
  assert_int_equal(window(&ctl, 7, 1.0, 0), 1);     /* probe down first */
  assert_int_equal(probe(&ctl, 7, 1.0, 1.0, 0), 2); /* not cheaper: back */
  for (int i = 0; i < 200; i++) assert_true(feed(&ctl, 7, 1.0, 0, 1e9) <= 2);
  /* Demand appears: up probes follow once the hold ends, and flat costs keep them. */
  uint32_t max_c = 0;
  for (int i = 0; i < 400; i++) {
    uint32_t c = feed(&ctl, 7, 1.0, 3, 1e9);
    if (c > max_c) max_c = c;
  }
  assert_int_equal(max_c, 7);
  assert_int_equal(ctl.c_base, 7);
}

/* The link halves: the ceiling clamps C at once, the search restarts from the
 * clamped C (fresh base window, backoff 1); when the link comes back, C can grow. */
static void test_reacts_to_halved_link(void **state) {
  (void)state;
  okv_cap_ctl_t ctl;
  okv_cap_ctl_init(&ctl, 7);
  assert_int_equal(window(&ctl, 7, 1.0, 9), 4);
  assert_int_equal(probe(&ctl, 7, 1.0, 1.0, 9), 7); /* rejected: hold 1, backoff 2 */
  assert_int_equal(ctl.backoff, 2);
  /* Half the link: its ceiling is 3 (and the estimate moved by 50% > 25%). */
  assert_int_equal(feed(&ctl, 3, 1.0, 9, 0.5e9), 3);
  assert_int_equal(ctl.c_base, 3);
  assert_int_equal(ctl.backoff, 1);
  assert_int_equal(ctl.hold, 0);
  assert_int_equal(ctl.settle, 0); /* the settle step was this one */
  assert_true(ctl.link_ref == 0.5e9);
  /* The next full window measures the base at 3, then probes down to 2. */
  for (uint32_t i = 0; i < OKV_CAP_CTL_WINDOW - 1; i++) assert_int_equal(feed(&ctl, 3, 1.0, 9, 0.5e9), 3);
  assert_int_equal(feed(&ctl, 3, 1.0, 9, 0.5e9), 2);
  /* A ceiling falling below a probe's C ends the probe: back to the (clamped) base. */
  assert_int_equal(feed(&ctl, 1, 1.0, 9, 0.5e9), 1);
  assert_int_equal(ctl.c_base, 1);
  assert_int_equal(ctl.phase, OKV_CAP_BASE);
  /* An up probe whose C a lower ceiling no longer allows ends too, on its base arm. */
  okv_cap_ctl_t up;
  okv_cap_ctl_init(&up, 4);
  assert_int_equal(window(&up, 7, 1.0, 9), 2);
  assert_int_equal(probe(&up, 7, 1.2, 1.0, 9), 4); /* down rejected */
  assert_int_equal(window(&up, 7, 1.0, 9), 6);     /* up: 4 + 2 */
  assert_int_equal(feed(&up, 7, 1.0, 9, 1e9), 6);  /* settle */
  assert_int_equal(feed(&up, 7, 1.0, 9, 1e9), 4);  /* probe step measured: base arm */
  assert_int_equal(feed(&up, 5, 1.0, 9, 1e9), 4);  /* ceiling 5 < 6: the probe ends, base 4 kept */
  assert_int_equal(up.phase, OKV_CAP_BASE);
  assert_int_equal(up.c_base, 4);
  /* The link doubles back: the search restarts and grows while the cost stays flat. */
  assert_int_equal(feed(&ctl, 7, 1.0, 9, 1e9), 1); /* the link estimate moved: a fresh base window */
  assert_int_equal(ctl.settle, 0);
  assert_true(ctl.link_ref == 1e9);
  uint32_t c = 0;
  for (int i = 0; i < 300; i++) c = feed(&ctl, 7, 1.0, 9, 1e9);
  assert_true(ctl.c_base >= 4);
  assert_true(c <= 7);
}

/* Unmeasured steps (0, negative, NaN cost) count neither towards a window nor towards a probe's pair. */
static void test_unmeasured_steps_skipped(void **state) {
  (void)state;
  okv_cap_ctl_t ctl;
  okv_cap_ctl_init(&ctl, 4);
  assert_int_equal(feed(&ctl, 7, 1.0, 1, 0), 4); /* settle */
  assert_int_equal(feed(&ctl, 7, 0.0, 1, 0), 4);
  assert_int_equal(feed(&ctl, 7, NAN, 1, 0), 4);
  assert_int_equal(feed(&ctl, 7, -1.0, 1, 0), 4);
  assert_int_equal(ctl.n_win, 0);
  assert_int_equal(feed(&ctl, 7, 1.0, 1, 0), 4);
  assert_int_equal(feed(&ctl, 7, 1.0, 1, 0), 4);
  assert_int_equal(feed(&ctl, 7, 1.0, 1, 0), 2); /* three measured: base done, probe down */
  assert_int_equal(feed(&ctl, 7, 1.0, 1, 0), 2); /* settle */
  assert_int_equal(feed(&ctl, 7, NAN, 1, 0), 2); /* the probe's step is still to come */
  assert_int_equal(feed(&ctl, 7, 0.5, 1, 0), 4); /* measured: the pair's base step next */
  assert_int_equal(feed(&ctl, 7, 1.0, 1, 0), 4); /* settle */
  assert_int_equal(feed(&ctl, 7, -1.0, 1, 0), 4);
  assert_int_equal(ctl.n_pairs, 0);
  assert_int_equal(feed(&ctl, 7, 1.0, 1, 0), 2); /* the first pair: 0.5 */
  assert_int_equal(ctl.n_pairs, 1);
  assert_true(ctl.ratio[0] == 0.5);
}

/* Bounds under random measurements and ceilings (fixed seed): 1 <= C <= max(1, ceiling), always. */
static int g_unmeasured_pair = -1; /* probe_share: the pair whose probe step carries no measurement */

/* A whole probe with fetched shares: every probe step costs jp and measures np fetched blocks drawing sp in
 * all, every base step of a pair jb, nb and sb. Settle steps report a share of 1000 that must not count,
 * and okv_cap_ctl_wants_share says which steps are measured. Returns the C after the probe. */
static uint32_t probe_share(okv_cap_ctl_t *ctl, uint32_t ceiling, double jp, double jb, double sp, uint64_t np,
                            double sb, uint64_t nb) {
  assert_true(ctl->phase != OKV_CAP_BASE);
  okv_cap_obs_t settle = {.ceiling = ceiling,
                          .token_seconds = 100.0,
                          .deferred = 5,
                          .link_bytes_per_s = 1e9,
                          .fetch_share = 1000.0,
                          .fetch_share_blocks = 8,
                          .fetch_share_measured = true};
  okv_cap_obs_t po = settle, bo = settle, none = settle;
  po.token_seconds = jp, po.fetch_share = sp, po.fetch_share_blocks = np;
  bo.token_seconds = jb, bo.fetch_share = sb, bo.fetch_share_blocks = nb;
  none.token_seconds = jp, none.fetch_share = 0, none.fetch_share_blocks = 0, none.fetch_share_measured = false;
  for (uint32_t i = 0; i < OKV_CAP_CTL_PAIRS; i++) {
    while (ctl->settle > 0) {
      assert_false(okv_cap_ctl_wants_share(ctl));
      okv_cap_ctl_update(ctl, &settle);
    }
    assert_true(okv_cap_ctl_wants_share(ctl));
    okv_cap_ctl_update(ctl, (int)i == g_unmeasured_pair ? &none : &po);
    while (ctl->settle > 0) {
      assert_false(okv_cap_ctl_wants_share(ctl));
      okv_cap_ctl_update(ctl, &settle);
    }
    assert_true(okv_cap_ctl_wants_share(ctl));
    okv_cap_ctl_update(ctl, &bo);
  }
  assert_int_equal(ctl->phase, OKV_CAP_BASE);
  assert_false(okv_cap_ctl_wants_share(ctl)); /* base windows measure no share */
  return ctl->c;
}

/* What the fetches buy decides where cost cannot: the marginal share of a probe is the difference of its
 * arms' summed shares over the difference of their fetched blocks (3 pairs each). */
static void test_fetched_share_decides(void **state) {
  (void)state;
  okv_cap_ctl_t ctl;
  okv_cap_ctl_init(&ctl, 4);
  assert_int_equal(window(&ctl, 7, 1.0, 5), 2); /* probe down 4 -> 2 */
  /* Not cheaper (ratio 1.0), but the 20 blocks per step that 4 fetches beyond 2 draw (16 - 10) / 20 = 0.3
   * of an average block each (< 1): fewer fetches are kept. Without shares this probe is rejected. */
  assert_int_equal(probe_share(&ctl, 7, 1.0, 1.0, 10.0, 20, 16.0, 40), 2);
  assert_int_equal(ctl.c_base, 2);
  assert_true(fabs(ctl.marginal_share - 0.3) < 1e-12);
  assert_int_equal(ctl.accepted, 1);
  /* On down: 2 -> 1. The dropped blocks drew (24 - 4) / (20 - 10) = 2 average blocks each, and 1 is not
   * cheaper: rejected. */
  assert_int_equal(window(&ctl, 7, 1.0, 5), 1);
  assert_int_equal(probe_share(&ctl, 7, 1.0, 1.0, 4.0, 10, 24.0, 20), 2);
  assert_true(fabs(ctl.marginal_share - 2.0) < 1e-12);
  assert_int_equal(ctl.c_base, 2);
  /* Then up, 2 -> 3: free (1% dearer), but the added blocks draw (29 - 24) / (30 - 20) = 0.5: rejected. */
  assert_int_equal(window(&ctl, 7, 1.0, 5), 3);
  assert_int_equal(probe_share(&ctl, 7, 1.01, 1.0, 29.0, 30, 24.0, 20), 2);
  assert_true(fabs(ctl.marginal_share - 0.5) < 1e-12);
  /* Up again after the hold, with added blocks that draw (36 - 24) / (30 - 20) = 1.2 each: kept. */
  assert_int_equal(window(&ctl, 7, 1.0, 5), 2);                           /* hold 2 -> 1 */
  assert_int_equal(window(&ctl, 7, 1.0, 5), 1);                           /* hold 1 -> 0: the other direction, down */
  assert_int_equal(probe_share(&ctl, 7, 1.0, 1.0, 4.0, 10, 24.0, 20), 2); /* valuable: rejected, hold 4 */
  for (int w = 0; w < 3; w++) assert_int_equal(window(&ctl, 7, 1.0, 5), 2);
  assert_int_equal(window(&ctl, 7, 1.0, 5), 3);
  assert_int_equal(probe_share(&ctl, 7, 1.02, 1.0, 36.0, 30, 24.0, 20), 3);
  assert_true(fabs(ctl.marginal_share - 1.2) < 1e-12);
  assert_int_equal(ctl.c_base, 3);
  /* Arms whose fetched blocks differ by fewer than OKV_CAP_CTL_MIN_MARGINAL_BLOCKS give no marginal share:
   * cost alone decides (here: up, 3 -> 4, free, kept although the few blocks drew nothing). */
  assert_int_equal(window(&ctl, 7, 1.0, 5), 4);
  assert_int_equal(probe_share(&ctl, 7, 1.0, 1.0, 0.0, 20 + OKV_CAP_CTL_MIN_MARGINAL_BLOCKS / 3u - 1u, 0.0, 20), 4);
  assert_true(isnan(ctl.marginal_share));
  assert_int_equal(ctl.c_base, 4);
  /* A probe step without a measurement (a failed transfer, a peek) does not dilute its arm. Up 4 -> 6 (on
   * up after the accepted probe) with 8 blocks at share 2 per step in both arms plus 8 at 1.2 in the
   * probe's, its second probe step unmeasured: 1.2 per added block, kept (raw totals would give
   * (51.2 - 48) / (32 - 24) = 0.4 and reject it). */
  assert_int_equal(window(&ctl, 7, 1.0, 5), 6);
  g_unmeasured_pair = 1;
  assert_int_equal(probe_share(&ctl, 7, 1.0, 1.0, 25.6, 16, 16.0, 8), 6);
  assert_true(fabs(ctl.marginal_share - 1.2) < 1e-12);
  /* Up 6 -> 7: the 24 added blocks per step draw (23.2 - 16) / 24 = 0.3: rejected (hold 1), then down. */
  assert_int_equal(window(&ctl, 7, 1.0, 5), 7);
  g_unmeasured_pair = -1;
  assert_int_equal(probe_share(&ctl, 7, 1.0, 1.0, 23.2, 32, 16.0, 8), 6);
  assert_true(fabs(ctl.marginal_share - 0.3) < 1e-12);
  /* Down 6 -> 3 with the first probe step unmeasured: (10 - 16) / (20 - 40) = 0.3 per dropped block, kept
   * (raw totals: (20 - 48) / (40 - 120) = 0.35). */
  assert_int_equal(window(&ctl, 7, 1.0, 5), 3);
  g_unmeasured_pair = 0;
  assert_int_equal(probe_share(&ctl, 7, 1.0, 1.0, 10.0, 20, 16.0, 40), 3);
  g_unmeasured_pair = -1;
  assert_true(fabs(ctl.marginal_share - 0.3) < 1e-12);
  assert_int_equal(ctl.c_base, 3);
}

/* A link estimate that jitters by 40% while the ceiling stays restarts nothing: the hold after rejected probes
 * keeps doubling (1, 2, 4, 8 windows). With the ceiling moving too, the same jitter restarts the search. */
static void test_link_jitter_keeps_hold(void **state) {
  (void)state;
  okv_cap_ctl_t ctl;
  okv_cap_ctl_init(&ctl, 1);
  double links[2] = {1e9, 0.6e9};
  uint32_t k = 0;
  for (uint32_t expect = 2; expect <= OKV_CAP_CTL_MAX_HOLD; expect *= 2) {
    /* windows until the next up probe (1 -> 2, 10% dearer: rejected) */
    for (uint32_t i = 0; ctl.phase == OKV_CAP_BASE; i++) {
      feed(&ctl, 7, 1.0, 3, links[k++ % 2]);
      assert_true(i < 100); /* restarting on every step, the search would never probe */
    }
    okv_cap_obs_t o = {.ceiling = 7, .deferred = 3};
    for (uint32_t i = 0; ctl.phase != OKV_CAP_BASE; i++) {
      o.token_seconds = ctl.c == 2 ? 1.1 : 1.0;
      o.link_bytes_per_s = links[k++ % 2];
      okv_cap_ctl_update(&ctl, &o);
      assert_true(i < 100);
    }
    assert_int_equal(ctl.c_base, 1);
    assert_int_equal(ctl.backoff, expect > OKV_CAP_CTL_MAX_HOLD ? OKV_CAP_CTL_MAX_HOLD : expect);
  }
  assert_true(ctl.link_ref == 1e9);
  /* The same jitter with a ceiling that follows the link: restarts (backoff back to 1). */
  feed(&ctl, 7, 1.0, 3, 1e9);
  feed(&ctl, 4, 1.0, 3, 0.6e9);
  assert_int_equal(ctl.backoff, 1);
  assert_true(ctl.link_ref == 0.6e9);
  assert_int_equal(ctl.ceiling_ref, 4);
}

static void test_bounds_random(void **state) {
  (void)state;
  okv_cap_ctl_t ctl;
  okv_cap_ctl_init(&ctl, 0); /* 0 starts at 1 */
  assert_int_equal(ctl.c, 1);
  uint64_t x = 12345;
  uint32_t ceiling = 7;
  for (int i = 0; i < 20000; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t r = (uint32_t)(x >> 33);
    if (r % 50 == 0) ceiling = r % 12; /* 0..11; 0 reads as 1 */
    double j = (r % 1000) / 500.0;     /* 0 (unmeasured) .. 2 */
    double link = (r % 7 == 0) ? (double)(r % 5) * 1e8 : 3e8;
    feed(&ctl, ceiling, j, r % 3, link);
    assert_true(ctl.c_base >= 1 && ctl.c_base <= (ceiling < 1 ? 1 : ceiling));
    assert_true(ctl.phase == OKV_CAP_BASE || (ctl.c_probe >= 1 && ctl.c_probe <= (ceiling < 1 ? 1 : ceiling)));
    assert_true(ctl.backoff >= 1 && ctl.backoff <= OKV_CAP_CTL_MAX_HOLD);
    assert_true(ctl.n_pairs < OKV_CAP_CTL_PAIRS && ctl.n_win < OKV_CAP_CTL_WINDOW);
  }
  assert_true(ctl.probes > 0);
  assert_true(ctl.accepted > 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shrinks_when_fetches_do_not_pay),
      cmocka_unit_test(test_down_needs_every_pair),
      cmocka_unit_test(test_grows_back_when_fetches_are_free),
      cmocka_unit_test(test_no_growth_without_demand),
      cmocka_unit_test(test_reacts_to_halved_link),
      cmocka_unit_test(test_unmeasured_steps_skipped),
      cmocka_unit_test(test_fetched_share_decides),
      cmocka_unit_test(test_link_jitter_keeps_hold),
      cmocka_unit_test(test_bounds_random),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
