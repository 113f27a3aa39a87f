// common.cuh — shared device helpers for every qgen kernel.
//
// The emitter prepends a block of #defines (QG_HEAD_DIM, QG_GROUP, QG_K_TYPE, the launch
// plan ...), base/kargs.h (the kernels' argument structs) and base/qblocks.h (the quant
// block layouts), both shared with the host, then concatenates the templates in the order
// of templates/LIST. This file turns the defines into constexprs and holds what more than
// one kernel needs: integer types, warp reductions, a block-wide scan, cp.async, mbarrier
// and mma wrappers.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#ifndef INFINITY // NVRTC has no <math.h>
#define INFINITY __int_as_float(0x7f800000)
#endif

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

constexpr int D = QG_HEAD_DIM;
constexpr int N_HEAD = QG_N_HEAD;
constexpr int N_KV = QG_N_HEAD_KV;
constexpr int HEADS = QG_HEADS; // query heads of a KV head
// 0: the one-token module (a CTA's rows are its KV head's HEADS query heads of one token);
// T >= 1: an engine module (runtime/gpu.c: several query tokens a sequence, windows, sinks),
// whose rows are those heads for each of T tokens: row r is token r / HEADS, head r % HEADS
constexpr int STEP = QG_STEP;
constexpr int G = QG_GROUP; // a CTA's query rows
static_assert(G == HEADS * (STEP > 1 ? STEP : 1), "the emitter and the rows disagree");
constexpr int BLOCK = QG_BLOCK;
constexpr bool SPARSE = QG_SPARSE != 0;
constexpr bool BOUNDS_I8 = QG_BOUNDS_I8 != 0; // estimate reads 8-bit bounds (layout.h)
constexpr int BOUNDS_I8_ROW = 2 * D + 16;     // bytes of one (page, KV head) 8-bit row
constexpr float SCALE_LOG2 = QG_SCALE * 1.4426950408889634f; // softmax in base 2

constexpr int MAX_BATCH = QGEN_MAX_BATCH; // sequences per attend launch
constexpr int APPEND_MAX = QGEN_APPEND_MAX; // sequences per append launch

static_assert(D % 32 == 0 && D <= 256, "head_dim must be a multiple of 32, at most 256");
static_assert(BLOCK % 32 == 0, "block must be a multiple of 32");

// ---- query rows -----------------------------------------------------------------------

// Query tokens of batch row b.
__device__ __forceinline__ int row_tokens(const qg_batch &bt, int b) { return STEP ? bt.tok[b + 1] - bt.tok[b] : 1; }
// The token of row r among them; rows past the row's tokens (padding) take its last token,
// so that a page bound's max over the rows is over the step's tokens alone.
__device__ __forceinline__ int row_token(const qg_batch &bt, int b, int r) { return STEP ? min(r / HEADS, row_tokens(bt, b) - 1) : 0; }
// Whether row r is one of batch row b's tokens (its output is written), not padding.
__device__ __forceinline__ bool row_real(const qg_batch &bt, int b, int r) { return !STEP || r / HEADS < row_tokens(bt, b); }
// The row of q and of out (in rows of D elements) that row r of batch row b, KV head h reads
// and writes.
__device__ __forceinline__ i64 io_row(const qg_batch &bt, int b, int h, int r) {
  if constexpr (!STEP) return (i64)b * N_HEAD + h * G + r;
  else return (i64)(bt.tok[b] + row_token(bt, b, r)) * N_HEAD + h * HEADS + r % HEADS;
}
// The row of the split partials (qg_work part_o, part_ml) of row r of (batch row b, KV head h).
__device__ __forceinline__ i64 part_row(int b, int h, int r) { return ((i64)b * N_KV + h) * G + r; }
// Tokens [lo, hi) of the sequence (len tokens) that row r of batch row b sees: all but the
// step's later tokens (causal), within the window if any.
__device__ __forceinline__ void row_span(const qg_batch &bt, int b, int r, i64 len, i64 &lo, i64 &hi) {
  hi = len - (row_tokens(bt, b) - 1 - row_token(bt, b, r));
  lo = STEP && bt.window > 0 ? max(hi - bt.window, (i64)0) : 0;
}

// A learned sink's softmax term for row r of KV head h against the running max mref (base
// 2): the head's logit (scaled units) in base 2.
__device__ __forceinline__ float sink_term(const qg_batch &bt, int h, int r, float mref) {
  return exp2f(bt.sinks[h * HEADS + r % HEADS] * 1.4426950408889634f - mref);
}

// ---- warp and block reductions ------------------------------------------------------

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Exclusive scan of v over the block (blockDim.x a multiple of 32, at most 1024);
// *total gets the block's sum. One barrier: after it every warp scans the 32 warp totals
// itself rather than waiting on warp 0 and two more barriers (with select's 32 warps a
// barrier costs ~50 ns on an H200: cutting select's 16 to 6 saved ~0.5 us). The scratch
// (32 ints) is read after the barrier, so two calls on one scratch need a barrier between them.
__device__ __forceinline__ int block_exclusive_scan(int v, int *scratch, int *total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  int x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) scratch[warp] = x;
  __syncthreads();
  int w = lane < nw ? scratch[lane] : 0;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    int y = __shfl_up_sync(0xffffffffu, w, o);
    if (lane >= o) w += y;
  }
  *total = __shfl_sync(0xffffffffu, w, 31);
  const int wb = __shfl_sync(0xffffffffu, w, (warp + 31) & 31); // inclusive through warp - 1
  return (warp > 0 ? wb : 0) + x - v;
}

// ---- numbers ------------------------------------------------------------------------

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// max that keeps a NaN (fmaxf drops it): the Quest score is NaN if any head's is.
__device__ __forceinline__ float max_keep_nan(float a, float b) { return (a > b || a != a) ? a : b; }

// ---- programmatic dependent launch (sm_90+) -----------------------------------------------

// A kernel the runtime launches with programmatic stream serialization (select and attend
// of a sparse step, runtime/gpu.c) may start while the kernel before it still runs:
// grid_dep_wait() blocks until that kernel has finished and its writes are visible, and
// nothing the predecessor writes may be touched before it. grid_dep_launch() lets the
// dependent start early. Both are no-ops without such a launch, and on sm_80.
__device__ __forceinline__ void grid_dep_wait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void grid_dep_launch() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// 16 bytes of read-only global memory; volatile, so the compiler keeps it where it is
// written (ahead of independent work) rather than next to its first use.
__device__ __forceinline__ uint4 ld_nc_v4(const void *p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// 4 bytes of read-only global memory, the same way.
__device__ __forceinline__ u32 ld_nc_u32(const void *p) {
  u32 v;
  asm volatile("ld.global.nc.u32 %0, [%1];\n" : "=r"(v) : "l"(p));
  return v;
}

// ---- async copies and tensor-core helpers (sm_80+) ------------------------------------

__device__ __forceinline__ u32 smem_u32(const void *p) { return (u32)__cvta_generic_to_shared(p); }

// ---- thread-block clusters (sm_90+; one CTA a cluster elsewhere) -----------------------
// A kernel launched without a cluster dimension is a cluster of one CTA.
// The cluster's CTA count and this CTA's rank in it.
__device__ __forceinline__ void cluster_place(int &ranks, int &rank) {
#if __CUDA_ARCH__ >= 900
  u32 n, r;
  asm("mov.u32 %0, %%cluster_nctarank;\n mov.u32 %1, %%cluster_ctarank;\n" : "=r"(n), "=r"(r));
  ranks = (int)n, rank = (int)r;
#else
  ranks = 1, rank = 0;
#endif
}
// Every thread of every CTA of the cluster; orders the shared-memory writes before it
// (release) with the reads after it in any CTA (acquire).
__device__ __forceinline__ void cluster_sync() {
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
  __syncthreads();
#endif
}
// The word at p in the shared memory of the cluster's CTA `rank`.
__device__ __forceinline__ u32 ld_cluster(const u32 *p, int rank) {
#if __CUDA_ARCH__ >= 900
  u32 a, v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(a) : "r"(smem_u32(p)), "r"(rank));
  asm volatile("ld.shared::cluster.u32 %0, [%1];\n" : "=r"(v) : "r"(a) : "memory");
  return v;
#else
  return *p;
#endif
}

// L2 policies of the copies below. evict_first: what a step streams once (attend's K/V
// rows), so that the small data each step reads first and again at the next step (lengths,
// page tables, lists, q) is not pushed out of L2 by it; evict_normal: the default. Volatile
// so that it stays where it is written: hoisted out of a loop, the policy would hold a
// 64-bit register across it (attend's fp8 consumers then spilled).
__device__ __forceinline__ u64 l2_evict_first() {
  u64 p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}
__device__ __forceinline__ u64 l2_evict_normal() {
  u64 p;
  asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}

// 16-byte global -> shared copy, under L2 policy pol where HINT (else pol is unused); src_bytes
// = 0 zero-fills the destination.
template <bool HINT = true> __device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes, u64 pol) {
  if constexpr (HINT)
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(src_bytes),
                 "l"(pol));
  else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(src_bytes));
}

// N-byte (4, 8 or 16) global -> shared copy through L1 (cp.async.cg takes only 16); src_bytes
// = 0 zero-fills. The 4- and 8-byte copies carry no L2 policy: with one, an 8-byte copy of a
// view's q8_0 K rows beside 16-byte copies of its f16 V raised an illegal instruction on an
// H200 (compute-sanitizer, tests/gpu/kv-pairs.lua pair-q8_0-f16).
template <int N, bool HINT = true> __device__ __forceinline__ void cp_async_n(void *dst, const void *src, int src_bytes, u64 pol) {
  if constexpr (N == 16) cp_async16<HINT>(dst, src, src_bytes, pol);
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_u32(dst)), "l"(src), "n"(N), "r"(src_bytes));
}

// ---- mbarriers (attend's producer/consumer ring) ----------------------------------------

// A shared-memory mbarrier: a phase completes when `count` arrivals have happened;
// waiters name the phase by its parity.
__device__ __forceinline__ void mbar_init(u64 *bar, u32 count) {
  asm volatile("mbarrier.init.shared.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u64 *bar) {
  asm volatile("mbarrier.arrive.shared.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
// Block until the phase of the given parity has completed (acquire: the copies and the
// stores published by that phase are visible).
__device__ __forceinline__ void mbar_wait(u64 *bar, u32 parity) {
  u32 done;
  do {
#if __CUDA_ARCH__ >= 900
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(smem_u32(bar)), "r"(parity) : "memory");
#else
    asm volatile("{\n .reg .pred p;\n mbarrier.test_wait.parity.shared.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(smem_u32(bar)), "r"(parity) : "memory");
#endif
  } while (!done);
}
// One of the phase's counted arrivals, made when all of this thread's earlier cp.async
// have landed.
__device__ __forceinline__ void cp_async_arrive(u64 *bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}

// ---- bulk copies (sm_90; no-ops below) --------------------------------------------------

// After mbarrier.init: make the barriers visible to bulk-copy completions.
__device__ __forceinline__ void mbar_init_fence() {
#if __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
// Add bytes to the current phase's expected transaction count (no arrival).
__device__ __forceinline__ void mbar_expect_tx(u64 *bar, u32 bytes) {
#if __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
#endif
}
// bytes (a multiple of 16, 16-byte aligned ends) from global to shared; complete on bar.
// (No L2 policy: attend's quantized slabs measured 1 % slower with evict_first on an H200.)
__device__ __forceinline__ void bulk_load(void *dst, const void *src, u32 bytes, u64 *bar) {
#if __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(smem_u32(dst)), "l"(src), "r"(bytes), "r"(smem_u32(bar)) : "memory");
#endif
}

__device__ __forceinline__ void ldmatrix_x4(u32 r[4], const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(u32 r[4], const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(p)));
}

// The transpose of an 8x8 matrix of 16-bit values held one word a lane (lane 4r + c: row r,
// columns 2c, 2c + 1), in the same layout (sm_75+).
__device__ __forceinline__ u32 movmatrix_trans(u32 a) {
  u32 d;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(d) : "r"(a));
  return d;
}

// D(16x8 f32) += A(16x16) * B(16x8); BF selects bf16 operands instead of f16.
template <bool BF> __device__ __forceinline__ void mma16816(float c[4], const u32 a[4], u32 b0, u32 b1) {
  if constexpr (BF)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats packed as an mma operand word (low half = first).
template <bool BF> __device__ __forceinline__ u32 pack2(float lo, float hi) {
  if constexpr (BF) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *(u32 *)&h;
  } else {
    __half2 h = __floats2half2_rn(lo, hi);
    return *(u32 *)&h;
  }
}
// The rounding residue of pack2 (x - rounded x), packed the same way: with it a bf16
// operand carries ~16 mantissa bits (hi + lo), which keeps bf16 caches as exact as f16.
template <bool BF> __device__ __forceinline__ u32 pack2_residue(float lo, float hi, u32 packed) {
  if constexpr (BF) {
    __nv_bfloat162 h = *(__nv_bfloat162 *)&packed;
    return pack2<true>(lo - __low2float(h), hi - __high2float(h));
  } else {
    __half2 h = *(__half2 *)&packed;
    return pack2<false>(lo - __low2float(h), hi - __high2float(h));
  }
}

// Pages of a sequence of len tokens.
__device__ __forceinline__ i64 pages_of(i64 len) { return (len + BLOCK - 1) / BLOCK; }

// Splits for a list of L pages: at least QG_MIN_SPLIT_TOKENS tokens each, at most
// max_splits. A function of L alone, so sparse with a full budget splits like dense.
__device__ __forceinline__ int n_splits(i64 L, int max_splits) {
  constexpr i64 per = QG_MIN_SPLIT_TOKENS / BLOCK > 0 ? QG_MIN_SPLIT_TOKENS / BLOCK : 1;
  i64 n = (L + per - 1) / per;
  if (n > max_splits) n = max_splits;
  return n < 1 ? 1 : (int)n;
}

// The pages of (batch row b, KV head h)'s list that attend reads, of a sequence of len
// tokens: select's count, or for a dense step every page from `base` on (0, or for a dense
// window the page its first row's span starts in). attend and qg_combine split it alike.
__device__ __forceinline__ i64 list_pages(const qg_work &wk, const qg_batch &bt, int b, int h, i64 len, int dense, i64 &base) {
  base = STEP && dense && bt.window > 0 ? max(len - (row_tokens(bt, b) - 1) - bt.window, (i64)0) / BLOCK : 0;
  return dense ? pages_of(len) - base : wk.count[(i64)bt.seq[b] * N_KV + h];
}

// ---- selection rules shared by estimate and select (base/layout.h; the forced pages and
// the budget in pages are base/kargs.h's qgen_forced_ranges and qgen_budget_pages) ----------

// Two-stage selection: the score select gives a page that is not a candidate (kargs.h
// qg_work), a NaN that no arithmetic makes (the GPU's NaN is 0x7fffffff).
constexpr u32 NOT_CAND = 0xffffffffu;

// Order-preserving u32 key of a score: larger score, larger key; NaN above everything but
// NOT_CAND, whose key 0 is below every score's.
__device__ __forceinline__ u32 score_key(float s) {
  if (__float_as_uint(s) == NOT_CAND) return 0u;
  if (s != s) return 0xffffffffu;
  u32 u = s == 0.0f ? 0u : __float_as_uint(s); // -0 ranks as +0
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Add 1 to hist[bin] for every lane with valid set, one atomic per distinct bin of the
// warp's leader and one per other lane (keys cluster, so usually one atomic in all).
// Works on shared or global memory.
__device__ __forceinline__ void hist_add(u32 *hist, bool valid, u32 bin) {
  const u32 vm = __ballot_sync(0xffffffffu, valid);
  if (!vm) return;
  const int leader = __ffs(vm) - 1;
  const u32 lb = __shfl_sync(0xffffffffu, bin, leader);
  const u32 same = __ballot_sync(0xffffffffu, valid && bin == lb);
  if ((int)(threadIdx.x & 31) == leader) atomicAdd(&hist[lb], (u32)__popc(same));
  else if (valid && bin != lb) atomicAdd(&hist[bin], 1u);
}

