/* check.h — `qgen check`: the GPU decode path of a spec against the CPU reference.
 *
 * For each variant of the spec it opens a GPU and a CPU-reference context and checks, on
 * fresh random data with outputs poisoned (NaN bytes) before every GPU call:
 *   append   K pool, V pool, bounds and lengths byte-identical to the reference after
 *            appends in chunks of 1, 7, 64 and 4096 tokens (shuffled page table)
 *   attend   dense and sparse output vs the reference (relative L2 error <= 2e-3 for
 *            f16/f32 output, 1e-2 for bf16), contexts 1, 63, 64, 65, 1000, 16K, 128K and
 *            batches of 3 and 8 sequences of different lengths; the selected page lists
 *            equal the reference's except for pages whose scores lie within a float
 *            tolerance of the selection threshold (counted as near-ties)
 *   bits     two runs identical; sparse with budget >= context identical to dense; a step
 *            captured in a CUDA graph and replayed identical
 *   big      (--big) one sequence whose K cache exceeds 4 GiB, dense and sparse, against a
 *            streaming fp64 reference over the same generated data
 * and prints one PASS/FAIL line per check.
 */
#ifndef QGEN_CHECK_H
#define QGEN_CHECK_H

#include <stdio.h>

#include "base/qtypes.h"

typedef struct qgen_check_opts {
  const char *variant; /* NULL = every variant */
  int quick;           /* small contexts only (for sanitizers) */
  int big;             /* add the > 4 GiB sequence */
  unsigned long long seed;
} qgen_check_opts;

/* The relative RMS error the checks accept in an output of type out_type (f32, f16, bf16)
   against the reference. */
double qgen_check_tolerance(qgen_type out_type);

/* Runs the checks; returns the number that failed, 77 when there is no usable GPU, or -1
   when the spec cannot be loaded. */
int qgen_check_spec(const char *spec_path, const qgen_check_opts *o);

#endif
