// rescore.cu — stage 2 of two-stage selection (base/layout.h): the exact score of every
// candidate page of every (sequence, KV head), on tensor cores.
//
// exact(page) = max over the group's G query heads g and the page's tokens t of q_g·k_t,
// k_t from the compact K (SK: the q4_0 sketch beside an f16/bf16 cache, or the cache's own
// q8_0/q4_0/q5_0 K). The first select left forced ∪ its candidates in wk.list, ascending,
// so the candidates are list positions [sp, sp + C); they are all full pages (the last page
// is forced). A 16-token m-tile of a page times the group's query (D x 8 heads an n-tile) is
// D/16 mma.m16n8k16 on the blocks' unscaled codes (small integers, exact in f16): each
// 32-value block's two k-steps go into their own accumulator, which is then scaled by the
// token's block scale, so nothing is rounded to f16 but q itself (an f32/bf16 query is
// split into f16 hi + lo, two mmas, as in estimate). Lane (g, j) takes elements 4j..4j+3 of
// a k-step (one quad) and the query is staged in that permutation of k.
//
// Each warp streams its pages' m-tiles (16 contiguous rows: one slab of the page's KV-head
// rows) through a ring of QG_RESC_STAGES shared-memory tiles by cp.async, so the kernel
// runs at the speed of reading the sketch; page ids come 32 at a time, one per lane. At the
// end of a page the warp writes its score into wk.exact and counts its first radix digit
// into wk.hist2 for the second select, as estimate does for the first.
// Grid: (x, N_KV, batch), x sized from the capacity (runtime/gpu.c); CTA x takes a
// contiguous share of the candidates, its warps every QG_RESC_THREADS/32-th page of it.

using SK = QG_SK_TYPE;
constexpr int RS_NT = (G + 7) / 8;          // n-tiles of 8 heads
constexpr int RS_NQ = IT::EXACT_F16 ? 1 : 2; // q as f16 (+ residue)
constexpr int RS_KS = D / 16;               // k-steps
constexpr int RS_W = QG_RESC_THREADS / 32, RS_S = QG_RESC_STAGES, RS_MT = BLOCK / 16;
constexpr int RS_TILE = QG_RESC_TILE;       // one m-tile's bytes in the ring
static_assert(SK::ROW == QG_SK_ROW && RS_TILE >= 16 * SK::ROW && RS_TILE % 16 == 0 && (16 * SK::ROW) % 16 == 0, "rescore: tile");
static_assert(QG_RESC_SMEM == RS_NQ * RS_NT * RS_KS * 32 * 8 + RS_W * RS_S * RS_TILE, "rescore: the plan's shared memory");

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

extern "C" __global__ void __launch_bounds__(QG_RESC_THREADS) qg_rescore(qg_cache c, qg_work wk, qg_batch bt, qgen_budget bg, const void *q) {
  extern __shared__ __align__(16) u8 rsm[];
  uint2 *qf = (uint2 *)rsm; // [RS_NQ][RS_NT][RS_KS][32]: lane's b0, b1 of each k-step
  const int b = blockIdx.z, h = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, j = lane & 3;
  u8 *ring = rsm + RS_NQ * RS_NT * RS_KS * 32 * 8 + warp * RS_S * RS_TILE;
  grid_dep_launch(); // the second select may start; it waits for all of this grid

  // The query's B fragments (heads >= G zero): column g of n-tile nt is head nt*8 + g, k
  // slots 2j, 2j+1 | 2j+8, 2j+9 of k-step s are elements 16s + 4j + 0, 1 | 2, 3.
  for (int i = threadIdx.x; i < RS_NQ * RS_NT * RS_KS * 32; i += QG_RESC_THREADS) {
    const int l = i & 31, s = (i >> 5) % RS_KS, nt = (i >> 5) / RS_KS % RS_NT, part = (i >> 5) / (RS_KS * RS_NT);
    const int head = nt * 8 + (l >> 2), d0 = 16 * s + 4 * (l & 3);
    float x[4];
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const float v = head < G ? IT::load(q, io_row(bt, b, h, head) * D + d0 + e) : 0.0f;
      x[e] = part == 0 ? v : v - __half2float(__float2half_rn(v));
    }
    qf[i] = make_uint2(pack2<false>(x[0], x[1]), pack2<false>(x[2], x[3]));
  }
  __syncthreads();

  grid_dep_wait(); // the list is the first select's
  const int seq = bt.seq[b];
  const i64 len = c.seq_len[seq], n = pages_of(len);
  i64 sp, rf;
  qgen_forced_ranges(&bg, len, BLOCK, &sp, &rf);
  const i64 nf = n == 0 ? 0 : sp + (n - rf), k = qgen_budget_pages(&bg, n, nf, BLOCK);
  if (k >= n) return; // every page is listed: nothing to rank
  const i64 C = min((k - nf) * wk.cand, rf - sp);
  const i64 per = (C + gridDim.x - 1) / gridDim.x, c0 = (i64)blockIdx.x * per, c1 = min(C, c0 + per);
  const i64 base = ((i64)seq * N_KV + h) * c.pages_per_seq;
  const int *list = wk.list + base + sp;
  const int *pt = c.page_table + (i64)seq * c.pages_per_seq;
  float *exact = wk.exact + base;
  u32 *hist = wk.hist2 + ((i64)b * N_KV + h) * QG_SEL_BINS;
  const u8 *slabs = QG_SKETCH ? c.sketch : c.k;

  // This warp's pages: candidates c0 + warp + RS_W * i, i < mine; unit u = (page u / RS_MT,
  // m-tile u % RS_MT). The copies run ahead of the math, so each side keeps its own batch
  // of 32 page ids, lane l holding page 32 * batch + l's.
  const i64 mine = c1 - c0 - warp > 0 ? (c1 - c0 - warp + RS_W - 1) / RS_W : 0;
  const i64 units = mine * RS_MT;
  struct page_ids {
    int lp = 0, pp = 0;
    i64 batch = -1;
  } at_copy, at_math;
  auto ids = [&](page_ids &pi, i64 i, bool phys, int &lp, int &pp) { // page i of this warp (all lanes call it)
    if (i >> 5 != pi.batch) {
      pi.batch = i >> 5;
      const i64 ii = 32 * pi.batch + lane;
      pi.lp = ii < mine ? list[c0 + warp + RS_W * ii] : 0;
      if (phys) pi.pp = ii < mine ? pt[pi.lp] : 0;
    }
    lp = __shfl_sync(0xffffffffu, pi.lp, (int)(i & 31));
    pp = __shfl_sync(0xffffffffu, pi.pp, (int)(i & 31));
  };
  const u64 pol = l2_evict_normal();
  auto issue = [&](i64 u) { // unit u's 16 rows into stage u % RS_S (nothing past the end)
    if (u < units) {
      int lp, pp;
      ids(at_copy, u / RS_MT, true, lp, pp);
      const u8 *src = slabs + ((i64)pp * N_KV + h) * (i64)(BLOCK * SK::ROW) + (u % RS_MT) * 16 * SK::ROW;
      u8 *dst = ring + (u % RS_S) * RS_TILE;
      for (int i = lane; i < SK::ROW; i += 32) cp_async16(dst + 16 * i, src + 16 * i, 16, pol); // 16 rows = ROW chunks
    }
    cp_async_commit();
  };
#pragma unroll
  for (int u = 0; u < RS_S - 1; u++) issue(u);

  float best = -INFINITY;
  for (i64 u = 0; u < units; u++) {
    issue(u + RS_S - 1);
    cp_async_wait<RS_S - 1>();
    __syncwarp();
    const u8 *tile = ring + (u % RS_S) * RS_TILE;
    float tot[RS_NT][4];
#pragma unroll
    for (int nt = 0; nt < RS_NT; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) tot[nt][e] = 0.0f;
#pragma unroll
    for (int blk = 0; blk < D / QGEN_QK; blk++) {
      const int ra = g * SK::ROW + blk * SK::BLK, rb = ra + 8 * SK::ROW; // rows g, g + 8
      float acc[RS_NT][4];
#pragma unroll
      for (int nt = 0; nt < RS_NT; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[nt][e] = 0.0f;
#pragma unroll
      for (int half = 0; half < 2; half++) {
        const uint2 xa = SK::quad(tile, ra, 16 * half + 4 * j), xb = SK::quad(tile, rb, 16 * half + 4 * j);
        const u32 a[4] = {xa.x, xb.x, xa.y, xb.y};
#pragma unroll
        for (int nt = 0; nt < RS_NT; nt++)
#pragma unroll
          for (int part = 0; part < RS_NQ; part++) {
            const uint2 qb = qf[((part * RS_NT + nt) * RS_KS + 2 * blk + half) * 32 + lane];
            mma16816<false>(acc[nt], a, qb.x, qb.y);
          }
      }
      const float da = __half2float(*(const __half *)(tile + ra)), db = __half2float(*(const __half *)(tile + rb));
#pragma unroll
      for (int nt = 0; nt < RS_NT; nt++) {
        tot[nt][0] += da * acc[nt][0], tot[nt][1] += da * acc[nt][1];
        tot[nt][2] += db * acc[nt][2], tot[nt][3] += db * acc[nt][3];
      }
    }
    __syncwarp(); // every lane has read the tile before the next issue overwrites it
    // columns 2j, 2j+1 of n-tile nt are heads nt*8 + 2j (+1)
#pragma unroll
    for (int nt = 0; nt < RS_NT; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++)
        if (nt * 8 + 2 * j + (e & 1) < G) best = max_keep_nan(best, tot[nt][e]);
    if (u % RS_MT == RS_MT - 1) { // the page's last m-tile: its score
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) best = max_keep_nan(best, __shfl_xor_sync(0xffffffffu, best, o));
      int lp, pp;
      ids(at_math, u / RS_MT, false, lp, pp);
      if (lane == 0) exact[lp] = best;
      hist_add(hist, lane == 0, score_key(best) >> 21);
      best = -INFINITY;
    }
  }
  cp_async_wait<0>(); // no copy outlives the CTA
}
