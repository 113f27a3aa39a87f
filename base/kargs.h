/* kargs.h — host mirrors of the argument structs the step kernels take by value
 * (templates/common.cuh and append.cu). Same field order and types; the emitter writes
 * their sizes into the generated source, where static_asserts check the device side, so a
 * change on one side only fails to compile instead of corrupting a launch.
 */
#ifndef QGEN_KARGS_H
#define QGEN_KARGS_H

#include <stdint.h>

#include "base/plan.h"

typedef unsigned long long qgen_dptr; /* CUdeviceptr */

typedef struct qg_cache_args {
  qgen_dptr k, v, bounds, page_table, seq_len;
  int64_t pages_per_seq;
} qg_cache_args;

typedef struct qg_work_args {
  qgen_dptr scores, list, count, part_o, part_ml, ticket, hist;
  int max_splits;
} qg_work_args;

typedef struct qg_budget_args {
  int mode;
  double coverage;
  int64_t tokens, sink, recent;
} qg_budget_args;

typedef struct qg_batch_args {
  int n;
  int seq[QGEN_MAX_BATCH];
} qg_batch_args;

typedef struct qg_append_args {
  qgen_dptr k_in, v_in;
  int n_seq;
  int seq[QGEN_APPEND_MAX];
  int start[QGEN_APPEND_MAX];
  int n_new[QGEN_APPEND_MAX];
  int work[QGEN_APPEND_MAX + 1];
  int64_t row0[QGEN_APPEND_MAX];
} qg_append_args;

#endif
