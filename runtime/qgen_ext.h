/* qgen_ext.h — libqgen's extension interface for the project's own tools and tests (qgen
 * check, bench, eval; tests/): the few internals they need, read through functions so
 * that nothing outside runtime/ includes the private structs. Not part of the public API
 * (qgen.h) and not installed; it may change with any version.
 *
 * The functions but qgen_ext_clear_error take a context that opened (qgen_open returned
 * QGEN_OK) or a cache made from one; on NULL (or a context that failed) they return NULL /
 * 0 and do nothing.
 */
#ifndef QGEN_EXT_H
#define QGEN_EXT_H

#include "base/layout.h"
#include "ref/ref.h"
#include "runtime/qgen.h"

/* The memory layout of the context's spec (row and page sizes, group, scale, types). */
const qgen_layout *qgen_ext_layout(const qgen_ctx *ctx);

/* The CPU backend's cache itself, in host memory (the reference kernels of ref/ref.h
   read it directly); NULL for a GPU cache, whose arrays qgen_kv_read copies out. */
const qgen_kvmem *qgen_ext_host_cache(const qgen_kv *kv);

/* Benchmarks: make every following qgen_attend record marks[0] before select and
   marks[1] before attend (CUevents on the step's stream; NULL stops it; programmatic
   dependent launch is off meanwhile). The CPU backend has no kernels to mark. */
struct CUevent_st;
void qgen_ext_set_marks(qgen_ctx *ctx, struct CUevent_st **marks);

/* The splits per (row, KV head) an attend of nb rows gets (1 on the CPU backend). */
int qgen_ext_max_splits(const qgen_ctx *ctx, int nb);

/* The order in which an attend of nb rows meets the sub-tiles (ref/ref.h; it decides what
   sparse-V skips): the GPU's splits and token groups; {1, 1, 1} on the CPU backend. */
void qgen_ext_attend_order(const qgen_ctx *ctx, int nb, qgen_ref_order *ord);

/* Tests: forget the last message, so that a call which fails without recording its own
   cannot pass on a stale one. */
void qgen_ext_clear_error(qgen_ctx *ctx);

#endif
