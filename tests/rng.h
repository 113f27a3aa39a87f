/* rng.h — the tests' random numbers (header-only, one stream per test program): splitmix64
 * seeded through rng_state, so a failing seed printed by a test reproduces its data. */
#ifndef QGEN_TEST_RNG_H
#define QGEN_TEST_RNG_H

#include <stdint.h>

static uint64_t rng_state;
static uint64_t rnd64(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static __attribute__((unused)) uint32_t rnd32(void) { return (uint32_t)(rnd64() >> 32); }
static __attribute__((unused)) int64_t rnd_int(int64_t lo, int64_t hi) {
  return lo + (int64_t)(rnd64() % (uint64_t)(hi - lo + 1));
}
static __attribute__((unused)) double rnd_unit(void) { return (double)(rnd64() >> 11) * 0x1p-53; } /* [0, 1) */

#endif
