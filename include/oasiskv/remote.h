/* OasisKV remote tier: a KV server (the prefill node's role) and a client
 * (the decode node's), over UCX. docs/remote.md has the protocol, the security
 * model and the measured transport choice.
 *
 * The server holds "requests": per request id, a KV byte region it copies into
 * memory registered with UCX (one registration per request, so a request's
 * rkey never covers another request's memory) and an opaque admission blob
 * (block summaries and the initial working set). A client connects, presents
 * the server's access token, opens a request (receiving its admission blob and
 * KV size) and reads byte ranges of the KV region in batches with many
 * operations in flight, completion tracked per batch.
 *
 * Two read paths (okv_remote_path_t): GET, one-sided reads of the request's
 * region with its unpacked rkey (the server must allow it): a memcpy where UCX
 * maps the region into this process (shared memory, ucp_rkey_ptr), else
 * ucp_get_nbx; PUSH, the client sends the batch's ranges in READ messages and
 * the server checks each against the region and sends the bytes back with
 * active messages. Choice per transport (measured, docs/remote.md): PUSH over
 * tcp, GET over shared memory; AUTO makes it.
 *
 * UCX reads its environment (UCX_TLS, UCX_LOG_LEVEL, ...) when a server or a
 * client is created. UCX itself may print warnings on stderr (set
 * UCX_LOG_LEVEL=error to quiet it); this library never prints.
 *
 * Units: bytes, seconds, as named. Request id 0 is reserved. */
#ifndef OASISKV_REMOTE_H
#define OASISKV_REMOTE_H

#include "oasiskv/api.h"

#include <stdbool.h>
#include <stdint.h>

#include "oasiskv/allocator.h"
#include "oasiskv/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum okv_remote_path_e {
  OKV_REMOTE_PATH_AUTO = 0, /* GET when the server offers it and the region is mapped here (shared memory),
                               else PUSH */
  OKV_REMOTE_PATH_GET = 1,  /* one-sided reads of the request's registered region (memcpy or ucp_get_nbx) */
  OKV_REMOTE_PATH_PUSH = 2, /* READ messages; the server checks every range and sends the bytes */
  OKV_REMOTE_PATH_COUNT
} okv_remote_path_t;

/* "auto", "get", "push" ("unknown" out of range). Thread-safe. */
OKV_API const char *okv_remote_path_name(okv_remote_path_t path);
/* Parses "auto", "get" or "push" into *out_path. Errors: INVALID_ARGUMENT (an unknown name, NULL). Thread-safe. */
OKV_API okv_status_t okv_remote_path_parse(const char *name, okv_remote_path_t *out_path);

/* ---- Server ---- */

typedef enum okv_remote_log_level_e {
  OKV_REMOTE_LOG_INFO = 0, /* a client connected, disconnected, opened or closed a request */
  OKV_REMOTE_LOG_WARN = 1, /* a refusal: wrong token, malformed or hostile message, ...; the reason */
} okv_remote_log_level_t;

/* Log callback: one line per event, without a trailing newline, naming the
 * client as "client N (ADDR:PORT)". Called on the server's progress thread
 * (and on the thread of okv_remote_server_destroy); must not call back into
 * the server. `message` is borrowed for the call. */
typedef void (*okv_remote_log_fn)(void *user, okv_remote_log_level_t level, const char *message);

/* Job callback (config submit_fn): a client's SUBMIT, an opaque job for the application that runs the server
 * (oasiskv serve: a prefill). `payload` (1..65536 bytes) is borrowed for the call; `ticket` (nonzero)
 * names the job in okv_remote_server_submit_done, and `client` ("client N (ADDR:PORT)") names its sender
 * for logs. Called on the server's progress thread with the server's lock held: it must return quickly
 * (queue the job) and must not call back into the server. */
typedef void (*okv_remote_submit_fn)(void *user, uint64_t ticket, const char *client, const void *payload,
                                     uint32_t payload_bytes);

typedef struct okv_remote_server_config_t {
  const char *listen_addr;     /* numeric IPv4 address; NULL or "" = "127.0.0.1"; copied at create */
  uint16_t port;               /* 0 = an ephemeral port (okv_remote_server_port tells which) */
  const char *token;           /* access token, 1..256 bytes, NUL-terminated; NULL = none (loopback only); copied */
  bool allow_get;              /* offer one-sided gets: enables UCX RMA, sends rkeys; loopback only (docs/remote.md,
                              "Security": UCX's software RMA over tcp reads any address a peer names) */
  uint32_t max_clients;        /* connections at once (more are rejected); default 64 */
  double hello_timeout_s;      /* a connection that has not presented the token by then is closed; default 10 */
  double close_grace_s;        /* after a refusal, how long the refused client has to read the ERROR and hang up
                              before the server closes the connection itself; default 1 */
  uint64_t chunk_bytes;        /* PUSH: bytes per DATA message (consecutive gets coalesced); default 262144 */
  uint64_t max_inflight_bytes; /* PUSH: DATA bytes in flight per client; more READs queue; default 16 MiB */
  okv_remote_log_fn log_fn;    /* NULL = no log */
  void *log_user;
  okv_remote_submit_fn submit_fn; /* NULL = SUBMIT is answered with a NOT_FOUND error (no jobs here) */
  void *submit_user;
} okv_remote_server_config_t;

/* Sets every default. */
OKV_API void okv_remote_server_config_init(okv_remote_server_config_t *config);

typedef struct okv_remote_server_t okv_remote_server_t;

/* Creates a server listening on config->listen_addr:port and starts its
 * progress thread (which owns the UCX worker: it accepts connections, answers
 * messages and sends PUSH data; it sleeps on the worker's event fd when idle).
 * allocator NULL = system; every host allocation of the server goes through it
 * (UCX's own and the registered regions excepted).
 * Errors: INVALID_ARGUMENT (config NULL, a field out of range, an address that
 * is not numeric IPv4, a non-loopback address without a token, allow_get on a
 * non-loopback address); UNAVAILABLE (UCX cannot start, the address cannot be
 * bound: the message names ADDR:PORT and UCX's reason); OUT_OF_MEMORY.
 * Thread safety: any thread. */
OKV_API okv_status_t okv_remote_server_create(const okv_remote_server_config_t *config,
                                              const okv_allocator_t *allocator, okv_remote_server_t **out_server);

/* The port the server listens on (the bound one when config->port was 0). Thread-safe. */
OKV_API uint16_t okv_remote_server_port(const okv_remote_server_t *server);

/* Publishes request `request_id` (nonzero, not published yet): copies
 * kv_bytes (>= 1) bytes at `kv` into a new region registered with ucp_mem_map
 * (its own registration) and admission_bytes (0..2 GiB) at `admission` into a
 * server copy. Both pointers are borrowed for the call. The request lives
 * until the client that opened it closes it or disconnects, or until
 * okv_remote_server_unpublish while no client has it open (the first client to
 * open a request owns it; any other client's open of it is refused and that
 * connection closed).
 * Errors: INVALID_ARGUMENT (id 0, an id already published, NULL pointers,
 * kv_bytes 0, admission_bytes over 2 GiB), OUT_OF_MEMORY, UNAVAILABLE (UCX
 * cannot register the region). Thread safety: any thread, concurrently with the
 * progress thread and other publish/unpublish calls. */
OKV_API okv_status_t okv_remote_server_publish(okv_remote_server_t *server, uint64_t request_id, const void *kv,
                                               uint64_t kv_bytes, const void *admission, uint64_t admission_bytes);

/* Withdraws a request: no client can open it any more. A request no client has
 * open is freed now; one a client has open is freed when that client closes it
 * or disconnects (its reads stay valid until then).
 * Errors: NOT_FOUND (not published, or already withdrawn). Thread safety: any thread. */
OKV_API okv_status_t okv_remote_server_unpublish(okv_remote_server_t *server, uint64_t request_id);

/* Answers job `ticket` (from submit_fn): with status OK, `request_id` is a request the application
 * published for the job (okv_remote_server_publish, before this call); it is reserved for the job's
 * client (no other client may open it) and the client gets its id in SUBMIT_OK. With another status
 * (request_id ignored, 0) the client gets an ERROR with that code and `message` (one line, printable ASCII,
 * truncated to 400 bytes; NULL = "job failed"); its connection stays open. If the job's client is gone,
 * the request is freed (unpublished) and NOT_FOUND returned. Each ticket is answered once.
 * Errors: INVALID_ARGUMENT (NULL server, ticket 0, status OK with a request id not published or already
 * opened or reserved), NOT_FOUND (no such pending ticket, or its client disconnected).
 * Thread safety: any thread except inside submit_fn; not after okv_remote_server_destroy began (tickets
 * still pending then are dropped). */
OKV_API okv_status_t okv_remote_server_submit_done(okv_remote_server_t *server, uint64_t ticket, uint64_t request_id,
                                                   okv_status_code_t status, const char *message);

typedef struct okv_remote_server_stats_t {
  uint32_t n_clients;       /* connections alive (token presented or not) */
  uint32_t n_requests;      /* requests alive (published or still held by their client) */
  uint32_t n_open;          /* requests a client has open */
  uint64_t n_refused;       /* connections closed for a refusal (each logged with its reason) */
  uint64_t n_disconnects;   /* connections that ended (refusal, disconnect or failure) */
  uint64_t push_bytes;      /* KV bytes sent by the PUSH path */
  uint64_t admission_bytes; /* admission bytes sent in OPEN replies */
} okv_remote_server_stats_t;

/* A snapshot of the server's counters. Errors: INVALID_ARGUMENT (NULL). Thread-safe. */
OKV_API okv_status_t okv_remote_server_stats(okv_remote_server_t *server, okv_remote_server_stats_t *out_stats);

/* Stops the progress thread, closes every connection (clients see
 * UNAVAILABLE), frees every request and region. NULL is accepted. Not
 * concurrently with other calls on the same server. */
OKV_API void okv_remote_server_destroy(okv_remote_server_t *server);

/* ---- Client ---- */

typedef struct okv_remote_client_config_t {
  okv_remote_path_t path;       /* default AUTO; GET needs a server with allow_get; PUSH never enables UCX RMA */
  double connect_timeout_s;     /* connect and the token exchange; default 10 */
  double reply_timeout_s;       /* open and close replies, and how long releasing an unfinished batch waits
                                   before the client gives up the connection; default 30 */
  uint64_t max_admission_bytes; /* larger admission blobs are refused (connection closed); default 2 GiB */
} okv_remote_client_config_t;

/* Sets every default. */
OKV_API void okv_remote_client_config_init(okv_remote_client_config_t *config);

typedef struct okv_remote_client_t okv_remote_client_t;

/* Connects to the server at addr:port (numeric IPv4), presents `token`
 * (NULL when the server has none) and waits for its acceptance.
 * config NULL = defaults; allocator NULL = system (also for the admission
 * blobs okv_remote_client_open returns).
 * Errors: INVALID_ARGUMENT (addr not numeric IPv4, port 0, token over 256
 * bytes, config out of range, config.path GET and the server offers no gets,
 * or the server refused the token: the message carries the server's reason); UNAVAILABLE naming "ADDR:PORT" (nothing
 * listening, connection lost, no reply within connect_timeout_s; UCX cannot
 * start); OUT_OF_MEMORY. Thread safety: any thread. */
OKV_API okv_status_t okv_remote_client_connect(const char *addr, uint16_t port, const char *token,
                                               const okv_remote_client_config_t *config,
                                               const okv_allocator_t *allocator, okv_remote_client_t **out_client);

/* "ADDR:PORT" of the server (borrowed, valid until destroy). Thread-safe. */
OKV_API const char *okv_remote_client_peer(const okv_remote_client_t *client);

/* Opens request `request_id` (bound to this client from now on). Writes the
 * size of its KV region in bytes and a copy of its admission blob: *out_admission
 * is allocated with the client's allocator (free it with okv_free on that
 * allocator; NULL when admission_bytes is 0). Which read path the request uses
 * is settled here (okv_remote_client_request_path).
 * Errors: INVALID_ARGUMENT (id 0, already open by this client, NULL out
 * pointers; config.path GET and the server sent no rkey);
 * NOT_FOUND (the server has no such request); UNAVAILABLE (the connection is
 * gone, or the server refused and closed it, e.g. the request belongs to
 * another client: the message carries its reason); OUT_OF_MEMORY.
 * Thread safety: calls on one client are serialized internally; any thread. */
OKV_API okv_status_t okv_remote_client_open(okv_remote_client_t *client, uint64_t request_id, uint64_t *out_kv_bytes,
                                            void **out_admission, uint64_t *out_admission_bytes);

/* Submits a job (an opaque payload of 1..65536 bytes, e.g. a prefill for oasiskv serve) to the server's
 * application and waits up to timeout_s (> 0) for its answer: the id of the request it published, reserved
 * for this client (open it with okv_remote_client_open; the server frees it when this client disconnects).
 * Errors: INVALID_ARGUMENT (NULL, payload size, timeout); the server's code and message when the job failed
 * (e.g. INVALID_ARGUMENT for a bad job, NOT_FOUND when the server runs no jobs); UNAVAILABLE naming the peer
 * (connection gone, or no answer within timeout_s: the connection is then given up).
 * Thread safety: calls on one client are serialized internally; any thread. */
OKV_API okv_status_t okv_remote_client_submit(okv_remote_client_t *client, const void *payload, uint32_t payload_bytes,
                                              double timeout_s, uint64_t *out_request_id);

/* The path reads of an open request use (GET or PUSH). Errors: NOT_FOUND (not open), INVALID_ARGUMENT. */
OKV_API okv_status_t okv_remote_client_request_path(okv_remote_client_t *client, uint64_t request_id,
                                                    okv_remote_path_t *out_path);

/* One read: `bytes` bytes at byte offset `remote_offset` of the request's KV
 * region into local memory at `local_ptr` (host memory, not registered). */
typedef struct okv_remote_get_t {
  uint64_t remote_offset;
  uint64_t bytes; /* 1..2^30 */
  void *local_ptr;
} okv_remote_get_t;

typedef struct okv_remote_batch_t okv_remote_batch_t;

/* Posts n_gets (1..2^31) reads of an open request as one batch, all in
 * flight at once, and returns its handle (release it with
 * okv_remote_batch_release). `gets` is copied; the local buffers must stay
 * valid, and must not be read, until the batch is done or released; their
 * contents are undefined if the batch fails. Nothing is posted on error. On
 * the GET path over shared memory the reads are done (memcpy) before this
 * returns; elsewhere they complete asynchronously.
 * Errors: INVALID_ARGUMENT (a get outside [0, kv_bytes) of the request, named
 * by index and range, checked before anything is posted; bytes 0 or over
 * 2^30; NULL pointers; n_gets 0), NOT_FOUND (the request is not open on this
 * client), UNAVAILABLE naming the peer (connection gone: returned at once),
 * OUT_OF_MEMORY. Thread safety: any thread (serialized internally). */
OKV_API okv_status_t okv_remote_client_get_batch(okv_remote_client_t *client, uint64_t request_id, uint32_t n_gets,
                                                 const okv_remote_get_t *gets, okv_remote_batch_t **out_batch);

/* Progresses the client once and writes whether the batch is done. Returns OK
 * while in flight and when done successfully.
 * Errors: UNAVAILABLE naming the peer (the connection failed before every get
 * completed; then *out_done is true), INVALID_ARGUMENT (NULL). */
OKV_API okv_status_t okv_remote_batch_test(okv_remote_batch_t *batch, bool *out_done);

/* Waits up to timeout_s (>= 0) for the batch, sleeping on the worker's event
 * fd; writes whether it is done (false: the timeout passed, the batch is still
 * in flight). Errors: as okv_remote_batch_test; INVALID_ARGUMENT for a
 * negative or NaN timeout. */
OKV_API okv_status_t okv_remote_batch_wait(okv_remote_batch_t *batch, double timeout_s, bool *out_done);

/* Bytes the batch reads in all. NULL -> 0. */
OKV_API uint64_t okv_remote_batch_bytes(const okv_remote_batch_t *batch);

/* Releases a batch. An unfinished batch is first waited for (up to the
 * client's reply_timeout_s; past that the client closes its connection, which
 * cancels every operation in flight, and later calls return UNAVAILABLE), so
 * once this returns nothing writes into the batch's local buffers. NULL is
 * accepted. Thread safety: any thread; not concurrently with other calls on the
 * same batch. */
OKV_API void okv_remote_batch_release(okv_remote_batch_t *batch);

/* Closes request `request_id`: waits for this client's batches on it to
 * finish, tells the server, which frees the request, and waits for its reply.
 * Errors: NOT_FOUND (not open), UNAVAILABLE (connection gone; the request is
 * forgotten locally and freed by the server when it sees the disconnect). */
OKV_API okv_status_t okv_remote_client_close_request(okv_remote_client_t *client, uint64_t request_id);

/* Closes the connection (the server frees every request this client had
 * open) and frees the client. Batches not yet released are waited for as by
 * okv_remote_batch_release and freed: their handles become invalid. NULL is
 * accepted. Not concurrently with other calls on the same client. */
OKV_API void okv_remote_client_destroy(okv_remote_client_t *client);

#ifdef __cplusplus
}
#endif
#endif /* OASISKV_REMOTE_H */
