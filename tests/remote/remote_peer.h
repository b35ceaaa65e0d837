/* The deterministic byte pattern of the remote tests' requests: byte o of
 * request r is byte (o % 8) of splitmix64(r * 2^40 + o / 8). Any region can be
 * filled or checked on its own, so a client checks what it read without a copy
 * of the server's data. */
#ifndef OASISKV_TESTS_REMOTE_PEER_H
#define OASISKV_TESTS_REMOTE_PEER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A 16-token block of one KV head, head_dim 128, bf16, K and V: 16 * 128 * 2 * 2 bytes. */
#define OKV_PEER_BLOCK_BYTES 8192u

static inline uint64_t okv_peer_mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static inline uint8_t okv_peer_byte(uint64_t request, uint64_t offset) {
  return (uint8_t)(okv_peer_mix((request << 40) + offset / 8) >> (8 * (offset % 8)));
}

/* Fills dst with bytes [offset, offset + n) of request's pattern. */
static inline void okv_peer_fill(uint64_t request, uint64_t offset, uint8_t *dst, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) dst[i] = okv_peer_byte(request, offset + i);
}

/* True when src holds bytes [offset, offset + n) of request's pattern. */
static inline bool okv_peer_check(uint64_t request, uint64_t offset, const void *src, uint64_t n) {
  const uint8_t *p = src;
  for (uint64_t i = 0; i < n; ++i)
    if (p[i] != okv_peer_byte(request, offset + i)) return false;
  return true;
}

/* xorshift64* (state != 0). */
static inline uint64_t okv_peer_rng(uint64_t *s) {
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1Dull;
}

#endif
