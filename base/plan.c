/* plan.c — see plan.h. The numbers and why (the measurements are an H200's unless said):
 *  - attend is warp-specialized (attend.cu): one producer warp, and token groups of
 *    WARPS_M warps (one per m-tile of 16 query heads) that each take whole 16-token
 *    sub-tiles from a ring of STAGES = groups x stages-per-group sub-tile buffers. Three
 *    token groups for 16-bit caches, four when a side is quantized (its consumers are
 *    issue-bound on dequantization and its stages are small), base / m-tiles rounded up
 *    when the rows have several m-tiles (an 8-token verify step of a group of 4 is two: in
 *    one token group of two warps it read the cache at half the one-token step's rate; in
 *    two, about as fast), fewer when the ring's budget would give a group under two stages; 2..4
 *    stages a group (one computing, the rest in flight): for f16, 3 x 4 beat 6 x 2, 7 x 3,
 *    2 x 6, 3 x 5 and 4 x 4; for fp8 K and V 2 (3 x 2 beat 3 x 3 and 3 x 4).
 *    The ring's budget is 106 KiB, two CTAs an SM of sm_90 and one of sm_80; on an
 *    architecture whose CTA may use less (sm_86, sm_89, sm_120: 99 KiB in all) it is what
 *    that limit leaves beside the query tile, so the same rule takes fewer stages a group
 *    there (f16 at head_dim 128: 3 x 3 instead of 3 x 4); the quantized rings, a third of
 *    the bytes, are the same everywhere.
 *    The ring is filled and released in chunks of up to 4 sub-tiles of a page, fp8's one
 *    sub-tile a stage (the producer warp's own instructions held quantized and small 16-bit
 *    tiles: chunks of 4 cut q4_0 dense 16-22 %, q8_0 at 1M 9 %, f16 at head_dim 64 20-33 %).
 *    Registers are left to ptxas (sized for more CTAs an SM, 80 a thread and 6 warps a
 *    scheduler, every quantized type lost 5-25 %), except where the swapped consumers take
 *    two sub-tiles a step (q4_0 and q8_0 at head_dim <= 128: 2-6 % faster): there 96, four
 *    CTAs an SM, as before.
 *  - 16-bit tiles are stored unpadded and swizzled in 128-byte pieces of a row (64 when
 *    128 does not divide the row), in which ldmatrix of 8 rows is conflict-free. Tiles are
 *    128-byte multiples and the ring starts on a 128-byte line: when the 128 bytes that 8
 *    lanes copy straddle two shared-memory lines (rows padded by 16 bytes, or a misaligned
 *    ring), the L2 serves those sectors twice. Quantized rows are one contiguous slab (not
 *    16-byte multiples), copied by one bulk copy on sm_90 (bulk=1).
 *  - estimate: one m16 tile of pages per warp and round, 4 warps a CTA; runtime/gpu.c
 *    launches at most one wave of CTAs, each looping over its share. Its registers hold two
 *    rounds' bounds: sized for four CTAs an SM (at most 128 registers) for head_dim <= 128,
 *    three (168) for larger heads, whose two rounds' bounds alone take 128 (left to itself
 *    ptxas took 158 and 188: a CTA an SM fewer). Each 8 heads of a group past 8 add an
 *    n-tile of Qsplit (two with an f32/bf16 query's residue); ptxas spilled at those
 *    budgets past 4 of them at head_dim <= 128 and past 1 above: there two CTAs (up to 255
 *    registers), spill-free over the grid of tests/test_spec_grid.sh. The staged Qsplit is
 *    dynamic shared memory (up to 130 KiB: head_dim 256, group 64, an f32 query; such a
 *    spec does not fit a 99 KiB architecture and is refused for it).
 *  - select: 1024 threads; a list of up to 4 pages a thread (256K tokens at block 64) is
 *    held in registers and placed by one block scan (select.cu's short path); on sm_90 a
 *    cluster of up to 8 such CTAs shares a longer one (runtime/gpu.c select_cluster). A
 *    longer list's keys are kept in shared memory while they fit (96 KiB, or what a 99 KiB
 *    architecture leaves), else read from global memory on each pass.
 *  - rescore: 4 ring stages a warp, 3 or 2 where a 99 KiB architecture needs the room.
 *  - QGEN_TUNE overrides groups, stages, the stage budget, the split size, select's size
 *    and short path, PDL, the bulk copies, attend's quantized operands, its chunks, its pairs,
 *    its split merge, its m-tiles a warp and the CTAs an SM its registers are sized for
 *    (plan.h).
 */
#include "base/plan.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void tune_none(qgen_tune *t) {
  memset(t, 0, sizeof *t);
  t->selreg = t->pdl = t->bulk = t->olddq = t->swap = t->pair = t->merge = t->estsel = -1;
}

int qgen_tune_parse(const char *s, qgen_tune *t, char *err, size_t errlen) {
  static const struct { const char *name; int lo, hi; size_t off; } keys[] = {
      {"groups", 1, 16, offsetof(qgen_tune, groups)},  {"stages", 2, 8, offsetof(qgen_tune, stages)},
      {"smem", 16, 220, offsetof(qgen_tune, smem_kib)},
      {"split", 64, 65536, offsetof(qgen_tune, split)}, {"sel", 128, 1024, offsetof(qgen_tune, sel)},
      {"selreg", 0, 32, offsetof(qgen_tune, selreg)}, {"pdl", 0, 1, offsetof(qgen_tune, pdl)},
      {"bulk", 0, 1, offsetof(qgen_tune, bulk)},     {"olddq", 0, 1, offsetof(qgen_tune, olddq)},
      {"swap", 0, 1, offsetof(qgen_tune, swap)},     {"ctas", 1, 16, offsetof(qgen_tune, ctas)},
      {"chunk", 1, 16, offsetof(qgen_tune, chunk)},   {"pair", 0, 1, offsetof(qgen_tune, pair)},
      {"merge", 0, 1, offsetof(qgen_tune, merge)},   {"mtw", 1, 4, offsetof(qgen_tune, mtw)},
      {"estsel", 0, 1, offsetof(qgen_tune, estsel)}, {"persist", 1, 4, offsetof(qgen_tune, persist)}};
  tune_none(t);
  unsigned seen = 0; /* keys given so far: each at most once */
  while (s && *s) {
    const char *end = strchr(s, ','), *eq = strchr(s, '=');
    size_t n = end ? (size_t)(end - s) : strlen(s);
    size_t k = 0, nk = sizeof keys / sizeof *keys;
    while (k < nk && !(eq && eq < s + n && (size_t)(eq - s) == strlen(keys[k].name) && !strncmp(s, keys[k].name, (size_t)(eq - s)))) k++;
    char *stop = NULL;
    long v = k < nk ? strtol(eq + 1, &stop, 10) : 0;
    if (k == nk || stop == eq + 1 || stop != s + n || v < keys[k].lo || v > keys[k].hi || (end && !end[1]) ||
        (keys[k].off == offsetof(qgen_tune, sel) && (v & (v - 1)))) {
      snprintf(err, errlen, "QGEN_TUNE: '%.*s' is not one of groups=1..16, stages=2..8, smem=16..220, split=64..65536, sel=128|256|512|1024, selreg=0..32, pdl=0|1, bulk=0|1, olddq=0|1, swap=0|1, ctas=1..16, chunk=1..16, pair=0|1, merge=0|1, mtw=1..4, estsel=0|1, persist=1..4",
               (int)n, s);
      tune_none(t);
      return -1;
    }
    if (seen & 1u << k) {
      snprintf(err, errlen, "QGEN_TUNE: '%s' is given twice", keys[k].name);
      tune_none(t);
      return -1;
    }
    seen |= 1u << k;
    *(int *)((char *)t + keys[k].off) = (int)v;
    s = end ? end + 1 : s + n;
  }
  /* select's packed (taken, tied) counts and its registers: at most 16384 keys a CTA */
  if (t->selreg > 0 && (long)(t->sel ? t->sel : 1024) * t->selreg > 16384) {
    snprintf(err, errlen, "QGEN_TUNE: selreg=%d with sel=%d holds %d keys; at most 16384 (selreg <= 16384 / sel)", t->selreg,
             t->sel ? t->sel : 1024, (t->sel ? t->sel : 1024) * t->selreg);
    tune_none(t);
    return -1;
  }
  return t->groups || t->stages || t->smem_kib || t->split || t->sel || t->selreg >= 0 || t->olddq >= 0 || t->swap >= 0 || t->ctas || t->chunk ||
         t->pair >= 0 || t->merge >= 0 || t->mtw || t->estsel == 1 || t->persist;
}

int qgen_plan_pair_ctas(qgen_type t) {
  /* the block types whose swapped consumers take pairs: q4_0 and q8_0 at four CTAs an SM
     (96 registers), q5_0 at three (120: its high bits at 96 cost 5 % on an H200) */
  static const int ctas[QGEN_TYPE_COUNT] = {[QGEN_TYPE_Q8_0] = 4, [QGEN_TYPE_Q4_0] = 4, [QGEN_TYPE_Q5_0] = 3};
  return (unsigned)t < QGEN_TYPE_COUNT ? ctas[t] : 0;
}

static int pad_rows16(int bytes) { return (bytes / 16) % 2 == 0 ? bytes + 16 : bytes; }

/* Shared memory the plan keeps free for a kernel's own static arrays when it sizes the
   dynamic part to an architecture: attend's mbarriers (two a chunk stage, at most 16 by
   default), estimate's and rescore's none; select's histograms and counters (12.3 KiB).
   qgen_build checks the real static + dynamic sum of every compiled kernel against the
   limit, so a template that outgrows these fails there, never at launch. */
#define STATIC_SLACK 512
#define SELECT_STATIC 16384

static int fail(char *why, size_t n, const qgen_arch *A, const char *kernel, int bytes, const char *what) {
  if (why && n)
    snprintf(why, n, "%s needs %d bytes of dynamic shared memory (%s) and up to %d static; %s (%s) allows %d bytes a CTA", kernel,
             bytes, what, STATIC_SLACK, A->name, A->gpus, A->smem_block);
  return -1;
}

int qgen_plan_make(const qgen_layout *L, const qgen_arch *A, const qgen_tune *tp, qgen_plan *p, char *why, size_t whyn) {
  qgen_tune t;
  if (tp) t = *tp;
  else tune_none(&t);
  const int D = L->head_dim;
  /* a CTA's query rows: the group's heads, for each of an engine module's tokens */
  const int rows = L->group * (t.step > 1 ? t.step : 1);
  /* m-tiles a consumer warp: more than one share each sub-tile's K and V operands (ldmatrix,
     or a block type's dequantization) between them, at the cost of their O registers; never
     more than the rows have (a group of <= 16 heads keeps one, and so the swapped operands).
     By default two in an engine module whose K and V are both block types, where that plan
     fits the architecture (else one): on an H100 an 8-token step of a group of 4 (two
     m-tiles) under two took q4_0 4 %, q5_0 and q8_0 11 % less time (geometric means over
     16K-512K, B1/B4, dense/25 %/6.25 %; up to 16 %), and f16 6 % more (its consumers do not
     dequantize, and 254 registers halve its CTAs an SM). One-token modules keep one. */
  const int mt_rows = (rows + 15) / 16;
  if (!t.mtw && t.step && mt_rows > 1 && qgen_type_traits_of(L->k_type)->is_quant && qgen_type_traits_of(L->v_type)->is_quant) {
    qgen_tune t2 = t;
    t2.mtw = 2;
    if (qgen_plan_make(L, A, &t2, p, NULL, 0) == 0) return 0;
    t2.mtw = 1;
    return qgen_plan_make(L, A, &t2, p, why, whyn);
  }
  p->mtw = t.mtw ? (t.mtw < mt_rows ? t.mtw : mt_rows) : 1;
  p->mt = (mt_rows + p->mtw - 1) / p->mtw * p->mtw;
  p->warps_m = p->mt / p->mtw;
  /* refused before anything below divides by the token groups that would leave */
  if (p->warps_m + 1 > 32) {
    if (why && whyn)
      snprintf(why, whyn, "qg_attend would need %d consumer warps for %d query rows (%d heads x %d tokens); at most 31 (1024 threads)",
               p->warps_m, rows, L->group, rows / L->group);
    return -1;
  }
  const int k16 = !qgen_type_traits_of(L->k_type)->is_quant;
  const int fp8 = qgen_type_traits_of(L->k_type)->tensor_scale && qgen_type_traits_of(L->v_type)->tensor_scale;
  const int v16 = !qgen_type_traits_of(L->v_type)->is_quant;
  p->k_srow = (int)L->k_row_bytes;
  p->v_srow = (int)L->v_row_bytes;
  p->k_piece = k16 ? (p->k_srow % 128 == 0 ? 128 : 64) : 0;
  p->v_piece = v16 ? (p->v_srow % 128 == 0 ? 128 : 64) : 0;
  p->q_srow = pad_rows16(2 * D);
  p->k_tile_bytes = (16 * p->k_srow + 127) / 128 * 128;
  p->v_tile_bytes = (16 * p->v_srow + 127) / 128 * 128;
  const int stage = p->k_tile_bytes + p->v_tile_bytes;
  const int nq = qgen_type_traits_of(L->k_type)->bf16_mma ? 2 : 1; /* q: value (+ residue) */
  const int q_bytes = nq * p->mt * 16 * p->q_srow;
  /* the ring's budget: 106 KiB (two CTAs an SM of sm_90, one of sm_80), or what the
     architecture's per-CTA limit leaves beside q when that is less (sm_86/89/120: 99 KiB) */
  const int room = A->smem_block - STATIC_SLACK - q_bytes - 128;
  int budget = (t.smem_kib ? t.smem_kib : 106) * 1024;
  if (!t.smem_kib && budget > room) budget = room;
  const int base = k16 && v16 ? 3 : 4;
  int groups = (base + p->warps_m - 1) / p->warps_m;
  while (groups > 1 && budget / (stage * groups) < 2) groups--;
  if (t.groups) groups = t.groups;
  if (p->warps_m * groups + 1 > 32) groups = 31 / p->warps_m; /* at most 1024 threads */
  int per = budget / (stage * groups);
  per = per < 2 ? 2 : per > 4 ? 4 : per;
  /* fp8 K and V: 2 stages a group (e4m3 dense measured 3-7 % faster than 4 on an H200 at
     every context 128K-1M, B1 and B4; f16 and the ggml types did not gain from 2) */
  if (fp8) per = 2;
  if (t.stages) per = t.stages;
  p->warps_t = groups;
  p->stages = groups * per;
  p->attend_threads = 32 * (p->warps_m * groups + 1);
  const int red = p->warps_t * p->mt * 16 * (D + 2) * 4;
  /* Split partials: an engine module of >= 16 query rows leaves them to qg_combine, whose
     threads take 4 channels of a row each, the rows that fit 128 threads a CTA (combine.cu);
     the last split's merge in one CTA is a chain of L2 round trips that grows with the rows
     (on an H100 it was 2.1 us of the one-token step at 128K B1, 6.2 us of a 4-token step's,
     12.7 of an 8-token step's). */
  p->merge_rows = (t.merge >= 0 ? t.merge : t.step && rows >= 16) ? 512 / D : 0;
  p->merge_threads = p->merge_rows ? (p->merge_rows * D / 4 + 31) / 32 * 32 : 0;
  const int comb = p->merge_rows ? 0 : rows * QGEN_MAX_SPLITS * 4; /* the last split's merge weights */
  int area = p->stages * stage;
  if (red > area) area = red;
  if (comb > area) area = comb;
  p->attend_smem = q_bytes + area + 128; /* + slack to start the ring on a 128-byte line */
  p->attend_min_ctas = t.ctas; /* 0: no minimum (ptxas sizes the registers itself) */
  /* an engine module with a side under 16 bits: an explicit minimum of one CTA an SM. Left to
     itself (and at a minimum of two), ptxas gave its plain quantized consumers 128 registers
     and spilled 12-24 bytes at 8 and 16 tokens a row (q8_0, e4m3, e5m2 on sm_90); with this
     they take 143-154 and none, which still fits two CTAs of 160 threads an SM. */
  const qgen_type_traits *tk = qgen_type_traits_of(L->k_type), *tv = qgen_type_traits_of(L->v_type);
  const int narrow = tk->block_bytes * 8 < 16 * tk->block || tv->block_bytes * 8 < 16 * tv->block; /* under 16 bits a value */
  if (t.step && !t.ctas && narrow) p->attend_min_ctas = 1;
  /* the ring's chunks: CH sub-tiles of one page, >= 2 chunk stages, the largest of at most 4
     (on an H200 chunks of 4 made q4_0 dense 16-22 % faster, f16 at head_dim 64 20-33 %,
     f16 at 128 0-1 %; attend.cu drops the L2 policy of its cp.async in chunks: L2_HINT).
     Not for fp8 K and V, whose 2-stage rings allow chunks of 2 only: without the policy they
     were 1-2 % slower. */
  const int spp = L->block / 16;
  int ch = t.chunk ? t.chunk : fp8 ? 1 : 4;
  while (ch > 1 && (spp % ch || p->stages % ch || p->stages / ch < 2)) ch--;
  p->chunk = ch;
  p->min_split_tokens = t.split ? t.split : 256;

  p->est_threads = 128;
  p->est_pages = 16 * (p->est_threads / 32); /* an m16 tile of pages per warp */
  p->est_qrow = pad_rows16(4 * D);            /* 2D halves: [Q- | Q+] */
  const int est_nt = (rows + 7) / 8, est_nq = L->in_type == QGEN_TYPE_F16 ? 1 : 2; /* n-tiles, f16 (+ residue) */
  p->est_smem = est_nq * est_nt * 8 * p->est_qrow + (L->bounds_i8 ? est_nt * 8 * 4 : 0); /* + 8-bit: sum q per head */
  p->est_min_ctas = est_nt == 1 ? (D <= 128 ? 4 : 3) : D <= 128 && est_nq * est_nt <= 4 ? 4 : 2;
  /* ptxas for sm_12x spills estimate's two rounds of bounds at 128 registers (80 bytes at
     head_dim 128, group 4), none at 168: one CTA an SM fewer there */
  if (A->sm / 10 == 12 && p->est_min_ctas > 2) p->est_min_ctas--;
  p->sel_threads = t.sel ? t.sel : 1024;
  /* select keeps a list's keys in shared memory up to 96 KiB (a 1.5M-token sequence at
     block 64), or what the architecture leaves beside its static arrays, in whole 256-key
     steps; a longer list reads its keys from global memory (select.cu cand_keys) */
  p->sel_smem_keys = 24576;
  if (4 * p->sel_smem_keys > A->smem_block - SELECT_STATIC) p->sel_smem_keys = (A->smem_block - SELECT_STATIC) / 4 / 256 * 256;
  p->sel_regs = t.selreg >= 0 ? t.selreg : 4; /* lists up to 4 x sel_threads pages: keys in registers */
  /* qg_estsel (estimate CTAs that select their list), opt-in (QGEN_TUNE estsel=1) until it
     is measured on a GPU: built only then, as its code costs an sm_90 module 1.2 s of NVRTC
     time (25 %). For the one-token module of one-stage selection (a unit of two-stage
     selection names no more kernels: jit/artifact.h) on sm_90 only (the one cluster target
     measured), where the staged query and select's arrays fit one CTA; a cluster of 8 then
     holds 8192 pages (512K tokens at block 64), and 16 keys a thread would double that at
     2.5 s. QGEN_TUNE selreg= below 8 sets the keys too (tests: selreg=1 puts a quick check's
     lists on the cluster path) */
  const int es_regs = t.selreg >= 0 && t.selreg < 8 ? t.selreg : 8;
  p->estsel_regs = t.estsel == 1 && L->sparse && L->rescore < 2 && !t.step && A->sm == 90 &&
                           p->est_smem + SELECT_STATIC <= A->smem_block - STATIC_SLACK
                       ? es_regs
                       : 0;
  p->estsel = p->estsel_regs > 0;
  p->append_threads = 128;
  const qgen_type sk = L->sketch_row_bytes ? QGEN_SKETCH_TYPE : L->k_type;
  p->resc_threads = 128;
  p->resc_tile = (int)(16 * qgen_type_row_bytes(sk, D) + 127) / 128 * 128;
  /* 4 stages a warp, fewer (at least 2) where the architecture's limit asks */
  const int resc_q = est_nq * est_nt * (D / 16) * 32 * 8;
  for (p->resc_stages = 4; p->resc_stages > 2; p->resc_stages--)
    if (resc_q + p->resc_threads / 32 * p->resc_stages * p->resc_tile <= A->smem_block - STATIC_SLACK) break;
  p->resc_smem = resc_q + p->resc_threads / 32 * p->resc_stages * p->resc_tile;
  p->pdl = t.pdl != 0;
  p->bulk = t.bulk != 0;
  /* attend's swapped operands (S^T = K Q^T, O^T = V^T P^T; attend.cu) where K and V are both
     block-quantized and the group fits one n-tile of 8 heads: half the mma of a sub-tile and
     half of O's registers. Otherwise q8_0 K and V keep the per-element operands: measured on
     an H200, oct/tpair cost q8_0 2-4 % and gained q4_0 5-6 %, q5_0 9-13 %. olddq=1 turns
     the swap off (it is built on oct/tpair). */
  const int swappable = !k16 && !v16 && L->group <= 8 && !t.step; /* (engine modules mask rows by token: not there) */
  p->old_dequant = t.olddq >= 0 ? t.olddq : L->k_type == QGEN_TYPE_Q8_0 && L->v_type == QGEN_TYPE_Q8_0 && !(swappable && t.swap != 0);
  p->swap_ops = swappable && t.swap != 0 && !p->old_dequant;
  /* the persistent attend (QGEN_TUNE persist=N, opt-in until measured; attend.cu
     attend_persistent): two query buffers, the mailbox, the ring, and a merge area and merge
     weights of its own beside the ring (the producer fills the ring while the consumers
     merge), where that fits the architecture's CTA limit */
  const int p_smem = 2 * q_bytes + QGEN_PERSIST_BOX + 128 + p->stages * stage + p->warps_t * rows * (D + 2) * 4 + rows * QGEN_MAX_SPLITS * 4 +
                     QGEN_MAX_BATCH * L->n_head_kv / 8; /* and a bit a list: the lists it merges */
  p->persist = t.persist && !t.step && !p->merge_rows && p_smem + STATIC_SLACK <= A->smem_block ? t.persist : 0;
  if (p->persist) p->attend_smem = p_smem;
  /* the swapped consumers two sub-tiles of their group a step (jt, jt + WARPS_T): one softmax
     for 32 tokens and two independent K chains, fewer instructions a sub-tile (on an H200
     q4_0 dense 5-6 % faster, q8_0 1-2 %). Registers for the CTAs an SM qgen_plan_pair_ctas
     names for the types (the fewer of K's and V's: ptxas alone took 96-125 from one tree to the next, and
     q5_0 lost 5 % at 96); past head_dim 128 O^T alone is too many, and sparse-V decides
     sub-tile by sub-tile. A step holds its first sub-tile while it waits for the second: the
     ring then needs chunk + warps_t <= stages, or the producer could wait for a release that
     waits for it. */
  const int kc = qgen_plan_pair_ctas(L->k_type), vc = qgen_plan_pair_ctas(L->v_type);
  const int pairable = p->swap_ops && D <= 128 && L->v_tau == 0 && p->chunk + p->warps_t <= p->stages && kc && vc;
  p->pair = pairable && t.pair != 0;
  if (p->pair && !t.ctas) {
    /* but where the SM's shared memory holds only one or two of these CTAs (the 99 KiB
       architectures; q8_0 on sm_80), registers for those: ptxas for sm_120 spilled q4_0's
       pairs at 96 registers (24 bytes), and for sm_80 q8_0's (4 bytes) */
    const int fit = qgen_arch_occupancy(A, p->attend_threads, 0, p->attend_smem + STATIC_SLACK);
    p->attend_min_ctas = kc < vc ? kc : vc;
    if (fit >= 1 && fit <= 2 && fit < p->attend_min_ctas) p->attend_min_ctas = fit;
    /* and at most three in the persistent loop: ptxas spilled q4_0's pairs there at 96
       registers (20 bytes, sm_90), none at 128 */
    if (p->persist && p->attend_min_ctas > 3) p->attend_min_ctas = 3;
  }

  /* what cannot fit the architecture, even at the smallest shapes above */
  const int lim = A->smem_block - STATIC_SLACK;
  if (p->attend_smem > lim) return fail(why, whyn, A, "qg_attend", p->attend_smem, "its query tile, ring and merge area");
  if (L->sparse && p->est_smem > lim) return fail(why, whyn, A, "qg_estimate", p->est_smem, "the group's staged queries");
  if (L->sparse && L->rescore > 1 && p->resc_smem > lim)
    return fail(why, whyn, A, "qg_rescore", p->resc_smem, "the group's staged queries and a 2-stage ring");
  return 0;
}

int qgen_plan_dynamic_smem(const qgen_plan *P, const char *kernel) {
  return !strcmp(kernel, "qg_attend")     ? P->attend_smem
         : !strcmp(kernel, "qg_select")   ? 4 * P->sel_smem_keys
         : !strcmp(kernel, "qg_estimate") ? P->est_smem
         : !strcmp(kernel, "qg_estsel")   ? P->est_smem
         : !strcmp(kernel, "qg_rescore")  ? P->resc_smem
                                          : 0;
}
