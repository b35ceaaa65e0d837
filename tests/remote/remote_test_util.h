/* Helpers of the remote tier's tests: a log collector for the server's log
 * callback, and a raw UCX client that speaks (or breaks) the protocol byte
 * by byte, for the hostile-message tests. Loopback only. */
#ifndef OASISKV_TESTS_REMOTE_TEST_UTIL_H
#define OASISKV_TESTS_REMOTE_TEST_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "oasiskv/remote.h"

/* ---- Server log ---- */

/* okv_remote_log_fn collecting lines (thread-safe); pass NULL as user. */
void okv_rt_log(void *user, okv_remote_log_level_t level, const char *message);
/* Forgets every collected line. */
void okv_rt_log_clear(void);
/* True once a WARN line containing `needle` was logged, waiting up to timeout_s. */
bool okv_rt_log_wait(const char *needle, double timeout_s);
/* Prints the collected lines (on a failure). */
void okv_rt_log_dump(void);

/* ---- Raw client ---- */

typedef struct okv_rt_raw okv_rt_raw_t;

/* Connects a raw UCX endpoint to 127.0.0.1:port (client-server, peer-failure handling). NULL on failure. */
okv_rt_raw_t *okv_rt_raw_connect(uint16_t port);
/* Sends one active message (our AM id) with `header` (may be NULL) and `data`; rndv forces the rendezvous
 * protocol. Waits for its local completion (bounded). Returns false when the send failed. */
bool okv_rt_raw_send(okv_rt_raw_t *r, const void *header, size_t header_bytes, const void *data, size_t n, bool rndv);
/* Waits up to timeout_s for a message from the server; copies up to cap bytes into buf and returns its size, or
 * 0 on timeout or a closed connection. */
size_t okv_rt_raw_recv(okv_rt_raw_t *r, void *buf, size_t cap, double timeout_s);
/* True once the connection is closed (the endpoint's error handler ran), waiting up to timeout_s. */
bool okv_rt_raw_wait_closed(okv_rt_raw_t *r, double timeout_s);
/* HELLO with `token` (NULL: none); true when HELLO_OK came back. */
bool okv_rt_raw_hello(okv_rt_raw_t *r, const char *token);
/* OPEN of request_id; true when OPEN_OK came back. */
bool okv_rt_raw_open(okv_rt_raw_t *r, uint64_t request_id);
void okv_rt_raw_destroy(okv_rt_raw_t *r);

double okv_rt_now(void);

#endif
