/* arch.h — the GPU architectures qgen builds for, one row each: the per-block and per-SM
 * limits the launch plan must fit (base/plan.c) and the features the runtime may use.
 * One table (arch.c) is the only place these numbers live: the spec validator takes its
 * names from it, the plan its shared-memory limit, the runtime its features and, when it
 * emulates an architecture on a larger GPU (QGEN_EMULATE), the occupancy that arch
 * would give.
 */
#ifndef QGEN_ARCH_H
#define QGEN_ARCH_H

/* Features a kernel or launch may use; each row lists those its architecture has. */
enum {
  QGEN_ARCH_CP_ASYNC = 1 << 0, /* cp.async global -> shared copies (sm_80+) */
  QGEN_ARCH_FP8_MMA = 1 << 1,  /* e4m3/e5m2 conversions and mma (sm_89+) */
  QGEN_ARCH_BULK = 1 << 2,     /* bulk copies completing on an mbarrier (cp.async.bulk, sm_90+) */
  QGEN_ARCH_CLUSTER = 1 << 3,  /* thread-block clusters and distributed shared memory (sm_90+) */
  QGEN_ARCH_PDL = 1 << 4,      /* programmatic dependent launch (griddepcontrol, sm_90+) */
};

typedef struct qgen_arch {
  int sm;               /* compute capability as major * 10 + minor: 86 = sm_86 */
  const char *name;     /* "sm_86" */
  const char *gpus;     /* examples of GPUs of this architecture, for messages and docs */
  int smem_block;       /* shared memory one CTA may use, static + dynamic, after opting in (bytes) */
  int smem_sm;          /* shared memory of an SM (bytes); each resident CTA also takes smem_reserved */
  int smem_reserved;    /* bytes of shared memory the system keeps per resident CTA */
  int regs_sm;          /* 32-bit registers of an SM */
  int threads_sm;       /* resident threads of an SM */
  int ctas_sm;          /* resident CTAs of an SM */
  unsigned features;    /* QGEN_ARCH_* */
} qgen_arch;

/* The row of sm (80, 86, ...), or NULL for an architecture qgen does not build for. */
const qgen_arch *qgen_arch_of(int sm);
/* The row named name ("sm_86"), or NULL. */
const qgen_arch *qgen_arch_named(const char *name);
/* The i-th row (0 ..), in ascending order, or NULL past the last. */
const qgen_arch *qgen_arch_at(int i);

/* CTAs of one kernel an SM of arch a holds at once: threads a CTA, registers a thread (as
   ptxas reports them) and shared memory a CTA (static + dynamic), by the occupancy rules of
   the vendor's occupancy calculator (registers allocated per warp in units of 256, shared
   memory in units of 128 bytes plus the reserved bytes). 0 when one CTA does not fit. */
int qgen_arch_occupancy(const qgen_arch *a, int threads, int regs, int smem);

#endif
