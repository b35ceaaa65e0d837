/* Helpers the remote tier's server and client share: UCX context and worker
 * setup, UCX status conversion (the one place a ucs_status_t becomes an
 * okv_status_t), sleeping on a worker's event fd, IPv4 address parsing, the
 * constant-time token comparison, the monotonic clock. Private to remote/. */
#ifndef OASISKV_REMOTE_UCX_H
#define OASISKV_REMOTE_UCX_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <ucp/api/ucp.h>

#include "oasiskv/allocator.h"
#include "oasiskv/status.h"

/* The one UCX active-message id the protocol uses, both directions (remote_msg.h frames). */
#define OKV_REMOTE_AM_ID 17u

/* A UCX failure as a status: UNAVAILABLE for connection-level failures (unreachable, reset, timed out,
 * canceled, rejected, busy), OUT_OF_MEMORY, INVALID_ARGUMENT for bad parameters, INTERNAL otherwise. The
 * message is "<what>: <UCX's status string>". */
okv_status_t okv_remote_ucx_status(ucs_status_t st, const char *what);
/* The code okv_remote_ucx_status would use for `st`. */
okv_status_code_t okv_remote_ucx_code(ucs_status_t st);

/* ucp_init with `features` (UCP_FEATURE_*; WAKEUP is added), the environment's UCX configuration, and
 * a context shared by threads when `mt_shared`. */
okv_status_t okv_remote_ucx_context(uint64_t features, bool mt_shared, const char *name, ucp_context_h *out_ctx);
/* A worker in `mode` with wake-up events, and its event fd. */
okv_status_t okv_remote_ucx_worker(ucp_context_h ctx, ucs_thread_mode_t mode, ucp_worker_h *out_worker, int *out_efd);
/* Arms the worker and sleeps on its event fd for up to timeout_s (returns at once when events are pending).
 * The caller has progressed the worker just before. */
void okv_remote_ucx_sleep(ucp_worker_h worker, int efd, double timeout_s);
/* Progresses the worker until `request` (from a *_nbx call: NULL, an error pointer or a request) completes
 * or deadline_s (monotonic) passes; frees it. Returns its status, UCS_ERR_TIMED_OUT on the deadline (the
 * request is then left to UCX). Not for use inside a UCX callback. */
ucs_status_t okv_remote_ucx_wait(ucp_worker_h worker, void *request, double deadline_s);

/* Parses a numeric IPv4 address (NULL or "" = 127.0.0.1) and port into *out.
 * Errors: INVALID_ARGUMENT naming the address. */
okv_status_t okv_remote_parse_ipv4(const char *addr, uint16_t port, struct sockaddr_in *out);
/* True for 127.0.0.0/8. */
bool okv_remote_is_loopback(const struct sockaddr_in *sa);
/* "ADDR:PORT" of an IPv4/IPv6 socket address into buf ("?" when unknown). */
void okv_remote_format_sockaddr(const struct sockaddr_storage *ss, char *buf, size_t cap);

/* Constant-time equality of two byte strings: the time depends on the longer length only, never on
 * where they differ. */
bool okv_remote_token_equal(const uint8_t *a, size_t na, const uint8_t *b, size_t nb);

/* Seconds on the monotonic clock. */
double okv_remote_now(void);

#endif
