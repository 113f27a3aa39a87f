/* rng.h — splitmix64, the one random-number function of qgen (header-only).
 *
 * qgen_mix64 is a counter-based hash: the workload generator (tools/workload.c) and the
 * GPU checks draw value i of a stream as a hash of (key, i), so any element can be
 * regenerated anywhere; their data depend on these exact bits. qgen_rng_next is the
 * sequential form (state advanced by the golden ratio), the same sequence as splitmix64.
 */
#ifndef QGEN_RNG_H
#define QGEN_RNG_H

#include <stdint.h>

#define QGEN_RNG_GOLDEN 0x9e3779b97f4a7c15ull

static inline uint64_t qgen_mix64(uint64_t x) {
  x += QGEN_RNG_GOLDEN;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* The next draw of the sequence whose state is *state. */
static inline uint64_t qgen_rng_next(uint64_t *state) {
  const uint64_t x = qgen_mix64(*state);
  *state += QGEN_RNG_GOLDEN;
  return x;
}

/* The next draw as a double uniform in [-1, 1) (its top 53 bits): test and bench data. */
static inline double qgen_rng_signed(uint64_t *state) { return (double)(qgen_rng_next(state) >> 11) * 0x1p-52 - 1.0; }

#endif
