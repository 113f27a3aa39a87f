/* rng.h — the tests' random numbers (header-only, one stream per test program): base/rng.h's
 * splitmix64 seeded through rng_state, so a failing seed printed by a test reproduces its data. */
#ifndef QGEN_TEST_RNG_H
#define QGEN_TEST_RNG_H

#include <stdint.h>

#include "base/rng.h"

static uint64_t rng_state;
static uint64_t rnd64(void) { return qgen_rng_next(&rng_state); }
static __attribute__((unused)) uint32_t rnd32(void) { return (uint32_t)(rnd64() >> 32); }
static __attribute__((unused)) int64_t rnd_int(int64_t lo, int64_t hi) {
  return lo + (int64_t)(rnd64() % (uint64_t)(hi - lo + 1));
}
static __attribute__((unused)) double rnd_unit(void) { return (double)(rnd64() >> 11) * 0x1p-53; } /* [0, 1) */

#endif
