/* The remote tier's wire format (docs/remote.md "Protocol"): one framed
 * message per UCX active message, little-endian, parsed by exactly one pure
 * function, okv_remote_msg_parse, which validates every field (fuzzed by
 * tests/fuzz/fuzz_remote_msg.c). Encoders write the same frames.
 *
 * Frame: a 32-byte header then `body_bytes` bytes of body:
 *   u32 magic ("OKVR"), u16 version, u16 type, u32 body_bytes, u32 reserved (0),
 *   u64 request_id, u64 seq.
 * Bodies per type are listed beside okv_remote_msg_type_t. Nothing may follow
 * the body: the frame is exactly the message.
 *
 * No UCX here: this file is pure and is compiled into the fuzz harness alone.
 * Thread safety: every function is pure (reentrant). */
#ifndef OASISKV_REMOTE_MSG_H
#define OASISKV_REMOTE_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "oasiskv/status.h"

#define OKV_REMOTE_MAGIC                0x52564B4Fu /* "OKVR" as little-endian bytes */
#define OKV_REMOTE_VERSION              1u
#define OKV_REMOTE_HEADER_BYTES         32u
#define OKV_REMOTE_TOKEN_MAX_BYTES      256u         /* HELLO token */
#define OKV_REMOTE_RKEY_MAX_BYTES       4096u        /* OPEN_OK packed rkey */
#define OKV_REMOTE_ADDRESS_MAX_BYTES    8192u        /* HELLO_OK worker address */
#define OKV_REMOTE_READ_MAX_ENTRIES     4096u        /* entries of one READ (a batch is split over several) */
#define OKV_REMOTE_ERROR_TEXT_MAX_BYTES 400u         /* ERROR reason text */
#define OKV_REMOTE_GET_MAX_BYTES        (1ull << 30) /* one get */
#define OKV_REMOTE_ADMISSION_MAX_BYTES  (1ull << 31) /* an admission blob */
#define OKV_REMOTE_SUBMIT_MAX_BYTES     65536u       /* a SUBMIT payload (a prefill job) */
/* The largest message a client may send (a READ with the most entries). */
#define OKV_REMOTE_CLIENT_MSG_MAX_BYTES (OKV_REMOTE_HEADER_BYTES + 8u + 16u * OKV_REMOTE_READ_MAX_ENTRIES)
#define OKV_REMOTE_DATA_BODY_FIXED      16u /* DATA body before its payload */
#define OKV_REMOTE_OPEN_OK_BODY_FIXED   32u /* OPEN_OK body before rkey and admission */

/* HELLO flags. */
#define OKV_REMOTE_HELLO_WANTS_GET 1u /* the client has UCX RMA enabled and would use one-sided gets */
/* ERROR flags. */
#define OKV_REMOTE_ERROR_CLOSING 1u /* a refusal: the server closes the connection after this message */
/* HELLO_OK flags. */
#define OKV_REMOTE_HELLO_OK_GET 1u /* the server maps regions for one-sided gets (OPEN_OK carries an rkey) */

typedef enum okv_remote_msg_type_e {
  OKV_REMOTE_MSG_HELLO = 1,      /* c->s  u32 token_bytes, u32 flags, token bytes (0..256); request_id 0, seq 0 */
  OKV_REMOTE_MSG_HELLO_OK = 2,   /* s->c  u32 flags, u32 max_read_entries, u64 max_inflight_bytes, u32 address_bytes,
                                        u32 reserved (0), the server worker's UCX address (GET flag: 1..8192 bytes,
                                        else 0); ids 0 */
  OKV_REMOTE_MSG_OPEN = 3,       /* c->s  empty; request_id != 0 */
  OKV_REMOTE_MSG_OPEN_OK = 4,    /* s->c  u64 kv_bytes, u64 admission_bytes, u64 remote_base, u32 rkey_bytes,
                                        u32 reserved (0), rkey bytes (0..4096), admission bytes */
  OKV_REMOTE_MSG_READ = 5,       /* c->s  u32 first_index, u32 n_entries (1..4096), n x {u64 offset, u64 bytes};
                                        seq = batch id */
  OKV_REMOTE_MSG_DATA = 6,       /* s->c  u32 first_index, u32 n_entries, u64 payload_bytes, payload; seq = batch id */
  OKV_REMOTE_MSG_CLOSE = 7,      /* c->s  empty; request_id != 0 */
  OKV_REMOTE_MSG_CLOSE_OK = 8,   /* s->c  empty; request_id != 0 */
  OKV_REMOTE_MSG_ERROR = 9,      /* s->c  u32 status code (okv_status_code_t, not OK), u32 text_bytes (1..400),
                                        u32 flags (CLOSING), u32 reserved (0), printable ASCII text */
  OKV_REMOTE_MSG_SUBMIT = 10,    /* c->s  an opaque job for the server's application (1..65536 bytes, e.g. a
                                        prefill); ids 0. Answered by SUBMIT_OK or a non-closing ERROR (id 0) */
  OKV_REMOTE_MSG_SUBMIT_OK = 11, /* s->c  empty; request_id != 0: the request the job published, reserved for
                                          this client (open it with OPEN) */
  OKV_REMOTE_MSG_TYPE_COUNT
} okv_remote_msg_type_t;

/* A parsed message. Pointers point into the parsed buffer (borrowed). */
typedef struct okv_remote_msg_t {
  okv_remote_msg_type_t type;
  uint64_t request_id;
  uint64_t seq;
  union {
    struct {
      const uint8_t *token;
      uint32_t token_bytes;
      uint32_t flags;
    } hello;
    struct {
      uint32_t flags;
      uint32_t max_read_entries;
      uint64_t max_inflight_bytes;
      const uint8_t *address; /* the server worker's UCX address (one-sided gets connect a second endpoint to it) */
      uint32_t address_bytes;
    } hello_ok;
    struct {
      uint64_t kv_bytes;
      uint64_t admission_bytes;
      uint64_t remote_base;
      const uint8_t *rkey;
      uint32_t rkey_bytes;
      const uint8_t *admission;
    } open_ok;
    struct {
      uint32_t first_index;
      uint32_t n_entries;
      const uint8_t *entries; /* n_entries x 16 bytes; read with okv_remote_msg_read_entry */
      uint64_t total_bytes;   /* sum of the entries' bytes */
    } read;
    struct {
      uint32_t first_index;
      uint32_t n_entries;
      uint64_t payload_bytes;
      const uint8_t *payload;
    } data;
    struct {
      const uint8_t *payload;
      uint32_t payload_bytes;
    } submit;
    struct {
      okv_status_code_t code;
      uint32_t flags;
      const char *text; /* not NUL-terminated: print with "%.*s" */
      uint32_t text_bytes;
    } error;
  } u;
} okv_remote_msg_t;

/* Parses and validates one whole message of `n` bytes at `buf` (any
 * alignment). Checks: n >= 32, magic, version, a known type, reserved fields
 * zero, n == 32 + body_bytes exactly, each type's body size and bounds (token
 * 0..256 bytes, rkey <= 4096, a worker address with the GET flag only
 * (1..8192 bytes), SUBMIT 1..65536 payload bytes, READ 1..4096 entries each 1..1 GiB with offset + bytes not
 * overflowing, first_index + n_entries <= 2^31, DATA payload
 * equal to what the body declares and nonempty, admission <= 2 GiB, ERROR code
 * a known non-OK code and text printable ASCII), request ids (0 for HELLO and
 * HELLO_OK, nonzero for request-scoped messages), seq (0 except in READ and
 * DATA) and flags (unknown bits 0): every accepted message is canonical, the
 * encoders give back its exact bytes.
 * It does not know the session state (which types a side may send, which
 * requests exist): the caller checks that. On success fills *out (pointers into
 * buf). Errors: INVALID_ARGUMENT naming the first violation (one line; it never
 * quotes message bytes). Pure, allocation-free except for the error status. */
okv_status_t okv_remote_msg_parse(const void *buf, size_t n, okv_remote_msg_t *out);

/* Entry i (< n_entries) of a parsed READ. */
void okv_remote_msg_read_entry(const okv_remote_msg_t *msg, uint32_t i, uint64_t *out_offset, uint64_t *out_bytes);

/* "HELLO", "HELLO_OK", ..., "unknown". */
const char *okv_remote_msg_type_name(uint32_t type);

/* ---- Encoders: each writes a whole frame into buf (capacity cap) and returns its size in bytes, or 0 when
 * it does not fit or an argument is out of the ranges okv_remote_msg_parse accepts. ---- */

size_t okv_remote_msg_encode_hello(void *buf, size_t cap, const void *token, uint32_t token_bytes, uint32_t flags);
size_t okv_remote_msg_encode_hello_ok(void *buf, size_t cap, uint32_t flags, uint32_t max_read_entries,
                                      uint64_t max_inflight_bytes, const void *address, uint32_t address_bytes);
/* SUBMIT of payload_bytes (1..65536) at payload. */
size_t okv_remote_msg_encode_submit(void *buf, size_t cap, const void *payload, uint32_t payload_bytes);
/* OPEN, CLOSE, CLOSE_OK, SUBMIT_OK: a header only. */
size_t okv_remote_msg_encode_empty(void *buf, size_t cap, okv_remote_msg_type_t type, uint64_t request_id);
/* OPEN_OK's header and fixed body (32 + 32 bytes) then the rkey; the admission bytes follow in the same
 * message (the caller sends them as a second piece, e.g. an iov entry). */
size_t okv_remote_msg_encode_open_ok(void *buf, size_t cap, uint64_t request_id, uint64_t kv_bytes,
                                     uint64_t admission_bytes, uint64_t remote_base, const void *rkey,
                                     uint32_t rkey_bytes);
/* A READ of n_entries entries: offsets[i], bytes[i]. */
size_t okv_remote_msg_encode_read(void *buf, size_t cap, uint64_t request_id, uint64_t batch_id, uint32_t first_index,
                                  uint32_t n_entries, const uint64_t *offsets, const uint64_t *bytes);
/* DATA's header and fixed body (48 bytes); payload_bytes of payload follow in the same message. */
size_t okv_remote_msg_encode_data(void *buf, size_t cap, uint64_t request_id, uint64_t batch_id, uint32_t first_index,
                                  uint32_t n_entries, uint64_t payload_bytes);
/* ERROR with `text` (truncated to 400 bytes; bytes outside printable ASCII become '?') and flags. */
size_t okv_remote_msg_encode_error(void *buf, size_t cap, uint64_t request_id, okv_status_code_t code, uint32_t flags,
                                   const char *text);

#endif
