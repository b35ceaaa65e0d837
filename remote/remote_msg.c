/* The remote tier's wire format: okv_remote_msg_parse (the one validating
 * parser) and the encoders. Pure: no UCX, no globals, no printing. Owns
 * nothing else; see remote_msg.h for the frame layout. */
#include "remote_msg.h"

#include <string.h>

/* ---- Little-endian fields ---- */

static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t get32(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) | ((uint64_t)get32(p + 4) << 32); }
static void put16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
  put32(p, (uint32_t)v);
  put32(p + 4, (uint32_t)(v >> 32));
}

const char *okv_remote_msg_type_name(uint32_t type) {
  static const char *const names[OKV_REMOTE_MSG_TYPE_COUNT] = {
      [OKV_REMOTE_MSG_HELLO] = "HELLO",     [OKV_REMOTE_MSG_HELLO_OK] = "HELLO_OK",   [OKV_REMOTE_MSG_OPEN] = "OPEN",
      [OKV_REMOTE_MSG_OPEN_OK] = "OPEN_OK", [OKV_REMOTE_MSG_READ] = "READ",           [OKV_REMOTE_MSG_DATA] = "DATA",
      [OKV_REMOTE_MSG_CLOSE] = "CLOSE",     [OKV_REMOTE_MSG_CLOSE_OK] = "CLOSE_OK",   [OKV_REMOTE_MSG_ERROR] = "ERROR",
      [OKV_REMOTE_MSG_SUBMIT] = "SUBMIT",   [OKV_REMOTE_MSG_SUBMIT_OK] = "SUBMIT_OK",
  };
  if (type == 0 || type >= OKV_REMOTE_MSG_TYPE_COUNT) return "unknown";
  return names[type];
}

/* ---- Parser ---- */

#define BAD(...) okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "malformed message: " __VA_ARGS__)

static okv_status_t parse_body(const uint8_t *b, uint32_t nb, okv_remote_msg_t *m) {
  const char *tn = okv_remote_msg_type_name(m->type);
  switch (m->type) {
    case OKV_REMOTE_MSG_HELLO: {
      if (nb < 8) return BAD("HELLO body of %u bytes, expected at least 8", nb);
      uint32_t tb = get32(b), flags = get32(b + 4);
      if (tb > OKV_REMOTE_TOKEN_MAX_BYTES) return BAD("HELLO token of %u bytes (0..256)", tb);
      if (nb != 8u + tb) return BAD("HELLO body of %u bytes, its token needs %u", nb, 8u + tb);
      if (flags & ~OKV_REMOTE_HELLO_WANTS_GET) return BAD("HELLO flags 0x%x has unknown bits", flags);
      m->u.hello.token_bytes = tb;
      m->u.hello.flags = flags;
      m->u.hello.token = b + 8;
      return OKV_OK;
    }
    case OKV_REMOTE_MSG_HELLO_OK: {
      if (nb < 24) return BAD("HELLO_OK body of %u bytes, expected at least 24", nb);
      uint32_t flags = get32(b), entries = get32(b + 4), ab = get32(b + 16), reserved = get32(b + 20);
      uint64_t inflight = get64(b + 8);
      if (flags & ~OKV_REMOTE_HELLO_OK_GET) return BAD("HELLO_OK flags 0x%x have unknown bits", flags);
      if (entries == 0 || entries > OKV_REMOTE_READ_MAX_ENTRIES)
        return BAD("HELLO_OK max_read_entries %u (1..4096)", entries);
      if (inflight == 0) return BAD("HELLO_OK max_inflight_bytes 0");
      if (reserved != 0) return BAD("HELLO_OK reserved field %u, expected 0", reserved);
      if ((flags & OKV_REMOTE_HELLO_OK_GET) ? (ab == 0 || ab > OKV_REMOTE_ADDRESS_MAX_BYTES) : ab != 0)
        return BAD("HELLO_OK worker address of %u bytes with flags 0x%x", ab, flags);
      if (nb != 24u + ab) return BAD("HELLO_OK body of %u bytes, its address needs %u", nb, 24u + ab);
      m->u.hello_ok.flags = flags;
      m->u.hello_ok.max_read_entries = entries;
      m->u.hello_ok.max_inflight_bytes = inflight;
      m->u.hello_ok.address_bytes = ab;
      m->u.hello_ok.address = b + 24;
      return OKV_OK;
    }
    case OKV_REMOTE_MSG_SUBMIT:
      if (nb == 0 || nb > OKV_REMOTE_SUBMIT_MAX_BYTES) return BAD("SUBMIT payload of %u bytes (1..65536)", nb);
      m->u.submit.payload = b;
      m->u.submit.payload_bytes = nb;
      return OKV_OK;
    case OKV_REMOTE_MSG_OPEN:
    case OKV_REMOTE_MSG_CLOSE:
    case OKV_REMOTE_MSG_CLOSE_OK:
    case OKV_REMOTE_MSG_SUBMIT_OK:
      if (nb != 0) return BAD("%s body of %u bytes, expected 0", tn, nb);
      return OKV_OK;
    case OKV_REMOTE_MSG_OPEN_OK: {
      if (nb < OKV_REMOTE_OPEN_OK_BODY_FIXED) return BAD("OPEN_OK body of %u bytes, expected at least 32", nb);
      uint64_t kv = get64(b), adm = get64(b + 8), base = get64(b + 16);
      uint32_t rk = get32(b + 24), reserved = get32(b + 28);
      if (reserved != 0) return BAD("OPEN_OK reserved field %u, expected 0", reserved);
      if (kv == 0) return BAD("OPEN_OK kv_bytes 0");
      if (rk > OKV_REMOTE_RKEY_MAX_BYTES) return BAD("OPEN_OK rkey of %u bytes (at most 4096)", rk);
      if (adm > OKV_REMOTE_ADMISSION_MAX_BYTES) return BAD("OPEN_OK admission of %llu bytes", (unsigned long long)adm);
      if ((uint64_t)nb != OKV_REMOTE_OPEN_OK_BODY_FIXED + (uint64_t)rk + adm)
        return BAD("OPEN_OK body of %u bytes, its rkey and admission need %llu", nb,
                   (unsigned long long)(OKV_REMOTE_OPEN_OK_BODY_FIXED + (uint64_t)rk + adm));
      if (rk != 0 && base > UINT64_MAX - kv) return BAD("OPEN_OK region base + kv_bytes overflows");
      m->u.open_ok.kv_bytes = kv;
      m->u.open_ok.admission_bytes = adm;
      m->u.open_ok.remote_base = base;
      m->u.open_ok.rkey_bytes = rk;
      m->u.open_ok.rkey = b + OKV_REMOTE_OPEN_OK_BODY_FIXED;
      m->u.open_ok.admission = b + OKV_REMOTE_OPEN_OK_BODY_FIXED + rk;
      return OKV_OK;
    }
    case OKV_REMOTE_MSG_READ: {
      if (nb < 8) return BAD("READ body of %u bytes, expected at least 8", nb);
      uint32_t first = get32(b), n = get32(b + 4);
      if (n == 0 || n > OKV_REMOTE_READ_MAX_ENTRIES) return BAD("READ of %u entries (1..4096)", n);
      if (first > (1u << 31) - n) return BAD("READ first_index %u + %u entries past 2^31", first, n);
      if (nb != 8u + 16u * n) return BAD("READ body of %u bytes, %u entries need %u", nb, n, 8u + 16u * n);
      uint64_t total = 0;
      for (uint32_t i = 0; i < n; ++i) {
        uint64_t off = get64(b + 8 + 16 * (size_t)i), bytes = get64(b + 16 + 16 * (size_t)i);
        if (bytes == 0 || bytes > OKV_REMOTE_GET_MAX_BYTES)
          return BAD("READ entry %u of %llu bytes (1..2^30)", i, (unsigned long long)bytes);
        if (off > UINT64_MAX - bytes) return BAD("READ entry %u offset + bytes overflows", i);
        total += bytes; /* <= 4096 * 2^30: no overflow */
      }
      m->u.read.first_index = first;
      m->u.read.n_entries = n;
      m->u.read.entries = b + 8;
      m->u.read.total_bytes = total;
      return OKV_OK;
    }
    case OKV_REMOTE_MSG_DATA: {
      if (nb < OKV_REMOTE_DATA_BODY_FIXED) return BAD("DATA body of %u bytes, expected at least 16", nb);
      uint32_t first = get32(b), n = get32(b + 4);
      uint64_t payload = get64(b + 8);
      if (n == 0 || n > OKV_REMOTE_READ_MAX_ENTRIES) return BAD("DATA of %u entries (1..4096)", n);
      if (first > (1u << 31) - n) return BAD("DATA first_index %u + %u entries past 2^31", first, n);
      if (payload != (uint64_t)nb - OKV_REMOTE_DATA_BODY_FIXED)
        return BAD("DATA declares %llu payload bytes, carries %u", (unsigned long long)payload,
                   nb - OKV_REMOTE_DATA_BODY_FIXED);
      if (payload < n) return BAD("DATA payload of %llu bytes for %u entries", (unsigned long long)payload, n);
      m->u.data.first_index = first;
      m->u.data.n_entries = n;
      m->u.data.payload_bytes = payload;
      m->u.data.payload = b + OKV_REMOTE_DATA_BODY_FIXED;
      return OKV_OK;
    }
    case OKV_REMOTE_MSG_ERROR: {
      if (nb < 16) return BAD("ERROR body of %u bytes, expected at least 16", nb);
      uint32_t code = get32(b), tb = get32(b + 4), flags = get32(b + 8), reserved = get32(b + 12);
      if (code == OKV_STATUS_OK || code >= OKV_STATUS_CODE_COUNT) return BAD("ERROR code %u unknown", code);
      if (tb == 0 || tb > OKV_REMOTE_ERROR_TEXT_MAX_BYTES) return BAD("ERROR text of %u bytes (1..400)", tb);
      if (flags & ~OKV_REMOTE_ERROR_CLOSING) return BAD("ERROR flags 0x%x have unknown bits", flags);
      if (reserved != 0) return BAD("ERROR reserved field %u, expected 0", reserved);
      if (nb != 16u + tb) return BAD("ERROR body of %u bytes, its text needs %u", nb, 16u + tb);
      for (uint32_t i = 0; i < tb; ++i)
        if (b[16 + i] < 0x20 || b[16 + i] > 0x7e) return BAD("ERROR text byte %u is not printable ASCII", i);
      m->u.error.code = (okv_status_code_t)code;
      m->u.error.flags = flags;
      m->u.error.text_bytes = tb;
      m->u.error.text = (const char *)(b + 16);
      return OKV_OK;
    }
    default: return BAD("type %u unknown", (unsigned)m->type);
  }
}

okv_status_t okv_remote_msg_parse(const void *buf, size_t n, okv_remote_msg_t *out) {
  if (!out || (!buf && n > 0)) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_remote_msg_parse: NULL");
  memset(out, 0, sizeof *out);
  const uint8_t *p = buf;
  if (n < OKV_REMOTE_HEADER_BYTES) return BAD("%zu bytes, shorter than the 32-byte header", n);
  uint32_t magic = get32(p), body = get32(p + 8), reserved = get32(p + 12);
  uint16_t version = get16(p + 4), type = get16(p + 6);
  if (magic != OKV_REMOTE_MAGIC) return BAD("bad magic 0x%08x", magic);
  if (version != OKV_REMOTE_VERSION) return BAD("version %u, this side speaks %u", version, OKV_REMOTE_VERSION);
  if (type == 0 || type >= OKV_REMOTE_MSG_TYPE_COUNT) return BAD("type %u unknown", type);
  if (reserved != 0) return BAD("reserved header field %u, expected 0", reserved);
  if ((uint64_t)n != (uint64_t)OKV_REMOTE_HEADER_BYTES + body)
    return BAD("%s of %zu bytes, its header declares %llu", okv_remote_msg_type_name(type), n,
               (unsigned long long)OKV_REMOTE_HEADER_BYTES + body);
  okv_remote_msg_t m;
  memset(&m, 0, sizeof m);
  m.type = (okv_remote_msg_type_t)type;
  m.request_id = get64(p + 16);
  m.seq = get64(p + 24);
  int scoped = type == OKV_REMOTE_MSG_OPEN || type == OKV_REMOTE_MSG_OPEN_OK || type == OKV_REMOTE_MSG_READ ||
               type == OKV_REMOTE_MSG_DATA || type == OKV_REMOTE_MSG_CLOSE || type == OKV_REMOTE_MSG_CLOSE_OK ||
               type == OKV_REMOTE_MSG_SUBMIT_OK;
  if (scoped && m.request_id == 0) return BAD("%s for request id 0 (reserved)", okv_remote_msg_type_name(type));
  if ((type == OKV_REMOTE_MSG_HELLO || type == OKV_REMOTE_MSG_HELLO_OK || type == OKV_REMOTE_MSG_SUBMIT) &&
      m.request_id)
    return BAD("%s with a nonzero request id", okv_remote_msg_type_name(type));
  if (type != OKV_REMOTE_MSG_READ && type != OKV_REMOTE_MSG_DATA && m.seq)
    return BAD("%s with a nonzero seq (only READ and DATA carry a batch id)", okv_remote_msg_type_name(type));
  OKV_RETURN_IF_ERROR(parse_body(p + OKV_REMOTE_HEADER_BYTES, body, &m));
  *out = m; /* *out stays cleared on every failure */
  return OKV_OK;
}

void okv_remote_msg_read_entry(const okv_remote_msg_t *msg, uint32_t i, uint64_t *out_offset, uint64_t *out_bytes) {
  const uint8_t *e = msg->u.read.entries + 16 * (size_t)i;
  *out_offset = get64(e);
  *out_bytes = get64(e + 8);
}

/* ---- Encoders ---- */

static size_t header(uint8_t *p, size_t cap, okv_remote_msg_type_t type, uint64_t body, uint64_t request_id,
                     uint64_t seq, size_t written) {
  if (body > UINT32_MAX || cap < written) return 0;
  put32(p, OKV_REMOTE_MAGIC);
  put16(p + 4, (uint16_t)OKV_REMOTE_VERSION);
  put16(p + 6, (uint16_t)type);
  put32(p + 8, (uint32_t)body);
  put32(p + 12, 0);
  put64(p + 16, request_id);
  put64(p + 24, seq);
  return written;
}

size_t okv_remote_msg_encode_hello(void *buf, size_t cap, const void *token, uint32_t token_bytes, uint32_t flags) {
  uint8_t *p = buf;
  size_t n = OKV_REMOTE_HEADER_BYTES + 8u + token_bytes;
  if (!buf || (!token && token_bytes) || token_bytes > OKV_REMOTE_TOKEN_MAX_BYTES || cap < n) return 0;
  header(p, cap, OKV_REMOTE_MSG_HELLO, 8u + token_bytes, 0, 0, n);
  put32(p + 32, token_bytes);
  put32(p + 36, flags);
  if (token_bytes) memcpy(p + 40, token, token_bytes);
  return n;
}

size_t okv_remote_msg_encode_hello_ok(void *buf, size_t cap, uint32_t flags, uint32_t max_read_entries,
                                      uint64_t max_inflight_bytes, const void *address, uint32_t address_bytes) {
  uint8_t *p = buf;
  size_t n = OKV_REMOTE_HEADER_BYTES + 24u + address_bytes;
  if (!buf || (address_bytes && !address) || address_bytes > OKV_REMOTE_ADDRESS_MAX_BYTES || cap < n) return 0;
  header(p, cap, OKV_REMOTE_MSG_HELLO_OK, 24u + address_bytes, 0, 0, n);
  put32(p + 32, flags);
  put32(p + 36, max_read_entries);
  put64(p + 40, max_inflight_bytes);
  put32(p + 48, address_bytes);
  put32(p + 52, 0);
  if (address_bytes) memcpy(p + 56, address, address_bytes);
  return n;
}

size_t okv_remote_msg_encode_submit(void *buf, size_t cap, const void *payload, uint32_t payload_bytes) {
  size_t n = OKV_REMOTE_HEADER_BYTES + (size_t)payload_bytes;
  if (!buf || !payload || payload_bytes == 0 || payload_bytes > OKV_REMOTE_SUBMIT_MAX_BYTES || cap < n) return 0;
  header(buf, cap, OKV_REMOTE_MSG_SUBMIT, payload_bytes, 0, 0, n);
  memcpy((uint8_t *)buf + OKV_REMOTE_HEADER_BYTES, payload, payload_bytes);
  return n;
}

size_t okv_remote_msg_encode_empty(void *buf, size_t cap, okv_remote_msg_type_t type, uint64_t request_id) {
  if (!buf || cap < OKV_REMOTE_HEADER_BYTES) return 0;
  return header(buf, cap, type, 0, request_id, 0, OKV_REMOTE_HEADER_BYTES);
}

size_t okv_remote_msg_encode_open_ok(void *buf, size_t cap, uint64_t request_id, uint64_t kv_bytes,
                                     uint64_t admission_bytes, uint64_t remote_base, const void *rkey,
                                     uint32_t rkey_bytes) {
  uint8_t *p = buf;
  size_t n = OKV_REMOTE_HEADER_BYTES + OKV_REMOTE_OPEN_OK_BODY_FIXED + rkey_bytes;
  if (!buf || (rkey_bytes && !rkey) || rkey_bytes > OKV_REMOTE_RKEY_MAX_BYTES ||
      admission_bytes > OKV_REMOTE_ADMISSION_MAX_BYTES || cap < n)
    return 0;
  header(p, cap, OKV_REMOTE_MSG_OPEN_OK, OKV_REMOTE_OPEN_OK_BODY_FIXED + (uint64_t)rkey_bytes + admission_bytes,
         request_id, 0, n);
  put64(p + 32, kv_bytes);
  put64(p + 40, admission_bytes);
  put64(p + 48, remote_base);
  put32(p + 56, rkey_bytes);
  put32(p + 60, 0);
  if (rkey_bytes) memcpy(p + 64, rkey, rkey_bytes);
  return n;
}

size_t okv_remote_msg_encode_read(void *buf, size_t cap, uint64_t request_id, uint64_t batch_id, uint32_t first_index,
                                  uint32_t n_entries, const uint64_t *offsets, const uint64_t *bytes) {
  uint8_t *p = buf;
  if (!buf || !offsets || !bytes || n_entries == 0 || n_entries > OKV_REMOTE_READ_MAX_ENTRIES) return 0;
  size_t n = OKV_REMOTE_HEADER_BYTES + 8u + 16u * (size_t)n_entries;
  if (cap < n) return 0;
  header(p, cap, OKV_REMOTE_MSG_READ, n - OKV_REMOTE_HEADER_BYTES, request_id, batch_id, n);
  put32(p + 32, first_index);
  put32(p + 36, n_entries);
  for (uint32_t i = 0; i < n_entries; ++i) {
    put64(p + 40 + 16 * (size_t)i, offsets[i]);
    put64(p + 48 + 16 * (size_t)i, bytes[i]);
  }
  return n;
}

size_t okv_remote_msg_encode_data(void *buf, size_t cap, uint64_t request_id, uint64_t batch_id, uint32_t first_index,
                                  uint32_t n_entries, uint64_t payload_bytes) {
  uint8_t *p = buf;
  if (!buf || cap < 48 || payload_bytes > UINT32_MAX - OKV_REMOTE_DATA_BODY_FIXED) return 0;
  header(p, cap, OKV_REMOTE_MSG_DATA, OKV_REMOTE_DATA_BODY_FIXED + payload_bytes, request_id, batch_id, 48);
  put32(p + 32, first_index);
  put32(p + 36, n_entries);
  put64(p + 40, payload_bytes);
  return 48;
}

size_t okv_remote_msg_encode_error(void *buf, size_t cap, uint64_t request_id, okv_status_code_t code, uint32_t flags,
                                   const char *text) {
  uint8_t *p = buf;
  if (!buf || code == OKV_STATUS_OK || code >= OKV_STATUS_CODE_COUNT) return 0;
  if (!text || !text[0]) text = "error";
  size_t tb = strlen(text);
  if (tb > OKV_REMOTE_ERROR_TEXT_MAX_BYTES) tb = OKV_REMOTE_ERROR_TEXT_MAX_BYTES;
  size_t n = OKV_REMOTE_HEADER_BYTES + 16u + tb;
  if (cap < n || (flags & ~OKV_REMOTE_ERROR_CLOSING)) return 0;
  header(p, cap, OKV_REMOTE_MSG_ERROR, 16u + tb, request_id, 0, n);
  put32(p + 32, (uint32_t)code);
  put32(p + 36, (uint32_t)tb);
  put32(p + 40, flags);
  put32(p + 44, 0);
  for (size_t i = 0; i < tb; ++i) {
    unsigned char c = (unsigned char)text[i];
    p[48 + i] = (c >= 0x20 && c <= 0x7e) ? c : '?';
  }
  return n;
}
