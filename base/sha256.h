/* sha256.h — SHA-256 (FIPS 180-4), used for cache keys and payload checksums. */
#ifndef QGEN_SHA256_H
#define QGEN_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct qgen_sha256 {
  uint32_t h[8];
  uint64_t bytes;
  uint8_t buf[64];
  size_t fill;
} qgen_sha256;

void qgen_sha256_init(qgen_sha256 *c);
void qgen_sha256_update(qgen_sha256 *c, const void *data, size_t n);
void qgen_sha256_final(qgen_sha256 *c, uint8_t out[32]);
void qgen_sha256_buf(const void *data, size_t n, uint8_t out[32]);
/* Lower-case hex of n bytes into out (2n+1 chars). */
void qgen_hex(const uint8_t *b, size_t n, char *out);

#endif
