/* le.h — little-endian loads and stores of 16/32/64-bit integers at any byte address:
 * every on-disk format of qgen (artifacts, cache entries, bundles) and the f16/bf16 rows are
 * little-endian whatever the host's byte order.
 */
#ifndef QGEN_LE_H
#define QGEN_LE_H

#include <stdint.h>

static inline uint16_t qgen_rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t qgen_rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t qgen_rd64(const uint8_t *p) { return (uint64_t)qgen_rd32(p) | (uint64_t)qgen_rd32(p + 4) << 32; }

static inline void qgen_wr16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static inline void qgen_wr32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> 8 * i);
}
static inline void qgen_wr64(uint8_t *p, uint64_t v) {
  qgen_wr32(p, (uint32_t)v);
  qgen_wr32(p + 4, (uint32_t)(v >> 32));
}

#endif
