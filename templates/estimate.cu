// estimate.cu — Quest upper bound of every page of every (sequence, KV head), on tensor cores.
//
// score(page) = max over the group's G query heads g of
//     sum_d ( min(q_gd, 0) * kmin_d + max(q_gd, 0) * kmax_d )
// which is layout.h's sum_d max(q_gd*kmin_d, q_gd*kmax_d) written as a product: with the
// bounds of a page as one row [kmin_0..kmin_{D-1}, kmax_0..kmax_{D-1}] and the group's query
// split into Q-[d] = min(q,0), Q+[d] = max(q,0), the scores of 16 pages x 8 heads are one
// m16n8 tile of Bounds (16 x 2D) . Qsplit (2D x 8): 2D/16 mma.m16n8k16, f32 accumulation.
// So estimate costs about 4 instructions per page instead of ~4*G*D/32, and runs at the
// speed of reading the bounds (1/BLOCK of the K cache).
//
// A operand (bounds) comes straight from global memory: lane (g, j) loads 16 bytes of page
// rows g and g+8 at 32t + 8j halves, which feed k-steps 2t and 2t+1 at the k-slots
// 2j, 2j+1, 2j+8, 2j+9; Qsplit is staged in shared memory in that permutation and read with
// ldmatrix, once into registers when its fragments fit (ncu at 1M: warps waited on those
// per-round shared-memory reads more than on the bounds). An f32/bf16 query is split into f16 hi + lo (two mmas) so the bound keeps ~22
// bits of q. It also counts the candidate pages (not sink/recent) by the top 11 bits of
// their score key into wk.hist, which is select's first radix pass done while the scores
// are at hand.
// 8-bit bounds (BOUNDS_I8, layout.h): the same product over the codes, lo_d = off + c_d*s,
//     score = off * sum_d q_gd + s * sum_d ( min(q_gd,0)*clo_d + max(q_gd,0)*chi_d ),
// the second sum one mma over the codes (0..255, exact in f16) with the same Qsplit, then
// off * sumq_g + s * acc per page row in f32 (a NaN offset, a page without an 8-bit form,
// gives NaN: always attended). Lane (g, j) loads 16 codes of rows g and g+8 at 64T + 16j,
// which are the halves an f16 load would give for k-steps 4T..4T+3 (Qsplit is staged in
// that order), widened to f16 by PRMT (1024 + c) and one HSUB2; the row's offset and scale
// (4 bytes at 2D) come with them. Half the bytes of f16 bounds.
// Grid: (x, N_KV, batch), x = the pages_per_seq / QG_EST_PAGES CTAs a capacity needs, at
// most one wave (runtime/gpu.c). CTA x takes a contiguous share of the sequence's n pages
// in rounds of QG_EST_PAGES, 16 pages a warp; a warp's next round of bounds is in flight
// while it multiplies this one, its page ids two rounds ahead (so a CTA pays the page id ->
// bounds round trip once, not per 16 pages: estimate at 1M B4 measured 17 % faster on an H200
// than with a CTA per 64 pages). CTAs past the end return. qg_estsel (estsel.cu) runs the
// same code with a cluster's ranks as the CTAs x.

constexpr int EST_NT = (G + 7) / 8;               // n-tiles of 8 heads
constexpr int EST_NQ = IT::EXACT_F16 ? 1 : 2;      // q as f16 (+ residue)
constexpr int EST_QROW = QG_EST_QROW;             // bytes of one staged Qsplit row
constexpr int EST_QSPLIT = EST_NQ * EST_NT * 8 * EST_QROW; // bytes of the staged Qsplit

// 8 codes (two words) as the f16 values of one 16-byte f16 bounds load: 1024 + c by PRMT
// (0x64 is the high byte of 1024.0 in f16), then - 1024, exact.
__device__ __forceinline__ uint4 codes_f16(u32 w0, u32 w1) {
  auto cvt = [](u32 w, u32 sel) {
    const u32 r = __byte_perm(w, 0x64646464u, sel);
    const __half2 x = __hsub2(*(const __half2 *)&r, __float2half2_rn(1024.0f));
    return *(const u32 *)&x;
  };
  return make_uint4(cvt(w0, 0x4140), cvt(w0, 0x4342), cvt(w1, 0x4140), cvt(w1, 0x4342));
}

// Two packed f16 bounds merged: the min (lo) or max of a and b, per half.
__device__ __forceinline__ u32 merge_h2(u32 a, u32 b, bool lo) {
  const __half2 u = *(const __half2 *)&a, v = *(const __half2 *)&b, m = lo ? __hmin2(u, v) : __hmax2(u, v);
  return *(const u32 *)&m;
}

// The work of CTA x of the nx that share each list, for R engine pages a selection page
// (R = 1: an owned cache or a view of BLOCK-token pages; 2: a view of BLOCK / 2, the sizes
// attend.cu takes), R known. qg_estimate's CTAs are a grid's x; qg_estsel's the ranks of a
// cluster.
template <int R>
__device__ __forceinline__ void estimate_r(const qg_cache &c, const qg_work &wk, const qg_batch &bt, const qgen_budget &bg, const void *q, int x,
                                           int nx) {
  constexpr int NW = QG_EST_THREADS / 32, K2 = 2 * D, NB = K2 / 32;
  static_assert(QG_EST_PAGES == 16 * NW, "estimate: 16 pages a warp");
  // 8-bit rows are read for pages of the block; a view's half-block pages (R = 2) have
  // none (templates/view.cu), so their pairs' f16 bounds are merged and read instead
  constexpr bool I8 = BOUNDS_I8 && R == 1;
  // with 8-bit bounds each load of 16 codes stands for two f16 loads
  constexpr int NL = I8 ? NB / 2 : NB;
  static_assert(QG_EST_SMEM == EST_QSPLIT + (BOUNDS_I8 ? EST_NT * 8 * 4 : 0), "estimate: the plan's staged Qsplit (+ sum q) size");
  // dynamic: a large group's Qsplit passes the 48 KiB of static shared memory (the same
  // code as a static array for the small ones: nothing else is in estimate's shared memory
  // but the 8-bit path's per-head sums of q, after the Qsplit)
  extern __shared__ __align__(16) u8 qsm[];
  const int b = blockIdx.z, h = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, j = lane & 3;
  grid_dep_launch(); // select may start; it waits for all of estimate before reading
  const int seq = bt.seq[b];
  const i64 len = c.seq_len[seq], n = pages_of(len);
  const i64 per = ((n + nx - 1) / nx + QG_EST_PAGES - 1) / QG_EST_PAGES * QG_EST_PAGES;
  const i64 c0 = (i64)x * per, c1 = min(n, c0 + per);
  if (c0 >= n) return;
  const int rounds = (int)((c1 - c0 + QG_EST_PAGES - 1) / QG_EST_PAGES);

  // Page ids of this lane's two rows (pages g and g + 8 of the warp's 16) in round r, -1
  // past the share; the bounds of those rows, 16 bytes per pair of k-steps.
  // (A view's pages may be smaller: R of them a selection page, whose bounds are the min
  // of their kmins and the max of their kmaxes; pt holds their ids.)
  const int *pt = c.page_table + (i64)seq * c.pt_stride;
  const i64 w0 = c0 + warp * 16 + g;
  auto page_ids = [&](int r, int &fa, int &fb) {
    const i64 pa = w0 + (i64)r * QG_EST_PAGES;
    fa = r < rounds && pa < c1 ? pt[pa * R] : -1;
    fb = r < rounds && pa + 8 < c1 ? pt[(pa + 8) * R] : -1;
  };
  // Merge into a row's bounds (f >= 0: the row is in the share) those of engine page e > 0
  // of selection page p, if it holds tokens. Chunk t is kmin for t < NB / 2 (8j < 32).
  auto merge_engine = [&](i64 p, int e, int f, uint4 (&rg)[NB]) {
    if (f < 0 || (p * R + e) * c.page_size >= len) return;
    const uint4 *bp = (const uint4 *)((const __half *)c.bounds + ((i64)pt[p * R + e] * N_KV + h) * K2 + 8 * j);
#pragma unroll
    for (int t = 0; t < NB; t++) {
      const uint4 x = ld_nc_v4(bp + 4 * t);
      const bool lo = t < NB / 2;
      rg[t] = make_uint4(merge_h2(rg[t].x, x.x, lo), merge_h2(rg[t].y, x.y, lo), merge_h2(rg[t].z, x.z, lo), merge_h2(rg[t].w, x.w, lo));
    }
  };
  // (volatile loads: they stay ahead of the round's mmas instead of sinking to their use;
  // a row past the share reads page 0 instead, and its score is dropped: the rows of an
  // mma are independent)
  // (8-bit: sa, sb get the rows' offset and scale; views, the only R > 1, keep f16 bounds)
  auto load_bounds = [&](int r, int fa, int fb, uint4 (&ra)[NL], uint4 (&rb)[NL], u32 &sa, u32 &sb) {
    if constexpr (I8) {
      const u8 *rowa = c.bounds_i8 + ((i64)max(fa, 0) * N_KV + h) * BOUNDS_I8_ROW;
      const u8 *rowb = c.bounds_i8 + ((i64)max(fb, 0) * N_KV + h) * BOUNDS_I8_ROW;
#pragma unroll
      for (int t = 0; t < NL; t++) ra[t] = ld_nc_v4(rowa + 64 * t + 16 * j), rb[t] = ld_nc_v4(rowb + 64 * t + 16 * j);
      sa = ld_nc_u32(rowa + 2 * D), sb = ld_nc_u32(rowb + 2 * D);
    } else {
      const uint4 *ba = (const uint4 *)((const __half *)c.bounds + ((i64)max(fa, 0) * N_KV + h) * K2 + 8 * j);
      const uint4 *bb = (const uint4 *)((const __half *)c.bounds + ((i64)max(fb, 0) * N_KV + h) * K2 + 8 * j);
#pragma unroll
      for (int t = 0; t < NB; t++) ra[t] = ld_nc_v4(ba + 4 * t), rb[t] = ld_nc_v4(bb + 4 * t);
      const i64 pa = w0 + (i64)r * QG_EST_PAGES;
#pragma unroll
      for (int e = 1; e < R; e++) merge_engine(pa, e, fa, ra), merge_engine(pa + 8, e, fb, rb);
    }
  };
  int fa, fb, fa1, fb1;
  page_ids(0, fa, fb);
  page_ids(1, fa1, fb1);
  uint4 ra[NL], rb[NL];
  u32 sa = 0, sb = 0;
  if constexpr (R == 1) load_bounds(0, fa, fb, ra, rb, sa, sb);

  // Stage Qsplit (rows >= G zero) in the k-slot permutation of the loads above: physical
  // k = [kmin part | kmax part], lane group jj of k-steps 2t, 2t+1 holds 32t + 8jj .. + 7.
  // (8-bit: lane group jj of k-steps 4T .. 4T + 3 holds codes 64T + 16jj .. + 15)
  auto put = [&](int r, int p, float x) {
    int t = p >> 5, o = p & 31, jj = o >> 3;
    if constexpr (I8) t = 2 * (p >> 6) + ((p >> 3) & 1), jj = (p >> 4) & 3;
    const int v = o & 7, u = v & 3;
    const int logical = (2 * t + (v >> 2)) * 16 + (u < 2 ? 2 * jj + u : 8 + 2 * jj + (u - 2));
    const __half hi = __float2half_rn(x);
    *(__half *)(qsm + r * EST_QROW + 2 * logical) = hi;
    if constexpr (EST_NQ == 2)
      *(__half *)(qsm + (EST_NT * 8 + r) * EST_QROW + 2 * logical) = __float2half_rn(x - __half2float(hi));
  };
  for (int part = 0; part < EST_NQ; part++)
    for (int i = threadIdx.x; i < (EST_NT * 8 - G) * EST_QROW / 16; i += QG_EST_THREADS)
      *(uint4 *)(qsm + (part * EST_NT * 8 + G) * EST_QROW + 16 * i) = make_uint4(0, 0, 0, 0);
  load_group_q<QG_EST_THREADS>(q, bt, b, h, [&](int r, int d, float x) {
    put(r, d, fminf(x, 0.0f));
    put(r, D + d, fmaxf(x, 0.0f));
  });
  __syncthreads();
  // 8-bit bounds: sum_d q_gd of the staged (split) query, per head, in a fixed order (the
  // same bits every run); lane (g, j) keeps those of its columns nt*8 + 2j, +1 in registers
  // for up to two n-tiles (more spilled at head_dim 256, group 64), else reads them here.
  constexpr bool SQREG = EST_NT <= 2;
  float sumq[I8 && SQREG ? EST_NT : 1][2];
  const float *sq = (const float *)(qsm + EST_QSPLIT);
  if constexpr (I8) {
    float *sw = (float *)(qsm + EST_QSPLIT);
    for (int r = warp; r < EST_NT * 8; r += NW) {
      float x = 0;
      for (int p = lane; p < K2; p += 32)
        for (int part = 0; part < EST_NQ; part++) x += __half2float(*(const __half *)(qsm + (part * EST_NT * 8 + r) * EST_QROW + 2 * p));
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
      if (lane == 0) sw[r] = x;
    }
    __syncthreads();
    if constexpr (SQREG)
#pragma unroll
      for (int nt = 0; nt < EST_NT; nt++) sumq[nt][0] = sq[nt * 8 + 2 * j], sumq[nt][1] = sq[nt * 8 + 2 * j + 1];
  }

  i64 sp, rf;
  qgen_forced_ranges(&bg, len, BLOCK, &sp, &rf);
  u32 *hist = wk.hist + ((i64)b * N_KV + h) * QG_SEL_BINS;
  float *out = wk.scores + ((i64)seq * N_KV + h) * c.pages_per_seq;
  // Qsplit's B fragments: held in registers across the rounds when they fit (G <= 8, an
  // f16 query, head_dim <= 128: at most 32 words), else read from shared memory every round.
  constexpr bool QREG = EST_NQ * EST_NT * NB <= 8;
  u32 qreg[QREG ? EST_NQ * EST_NT * NB : 1][4];
  auto qfrag = [&](int part, int nt, int t, u32 (&qb)[4]) {
    if constexpr (QREG) {
#pragma unroll
      for (int e = 0; e < 4; e++) qb[e] = qreg[(part * EST_NT + nt) * NB + t][e];
    } else {
      ldmatrix_x4(qb, qsm + ((part * EST_NT + nt) * 8 + (lane & 7)) * EST_QROW + (t * 32 + (lane >> 3) * 8) * 2);
    }
  };
  if constexpr (QREG)
#pragma unroll
    for (int part = 0; part < EST_NQ; part++)
#pragma unroll
      for (int nt = 0; nt < EST_NT; nt++)
#pragma unroll
        for (int t = 0; t < NB; t++)
          ldmatrix_x4(qreg[(part * EST_NT + nt) * NB + t], qsm + ((part * EST_NT + nt) * 8 + (lane & 7)) * EST_QROW + (t * 32 + (lane >> 3) * 8) * 2);

  // Round r from the bounds in (ca, cb), loading round r + 1's into (na, nb) first; the
  // loop below alternates the two buffers, so no round copies them.
  auto round = [&](int r, const uint4 (&ca)[NL], const uint4 (&cb)[NL], uint4 (&na)[NL], uint4 (&nb)[NL]) {
    int fa2, fb2;
    page_ids(r + 2, fa2, fb2);
    const u32 csa = sa, csb = sb; // this round's offsets and scales (8-bit)
    if constexpr (R == 1) load_bounds(r + 1, fa1, fb1, na, nb, sa, sb); // the next round's bounds, in flight during this round's mmas
    const i64 pa = w0 + (i64)r * QG_EST_PAGES, pb = pa + 8;
    float best[2] = {-INFINITY, -INFINITY}; // pages g and g + 8
    // k-steps 2t, 2t + 1 of n-tile nt into acc, the A operand (rows g, g + 8) in xa, xb
    auto mma_t = [&](float (&acc)[4], int nt, int t, const uint4 &xa, const uint4 &xb) {
#pragma unroll
      for (int part = 0; part < EST_NQ; part++) {
        u32 qb[4]; // b0, b1 of k-step 2t, then of 2t + 1
        qfrag(part, nt, t, qb);
        const u32 a0[4] = {xa.x, xb.x, xa.y, xb.y}, a1[4] = {xa.z, xb.z, xa.w, xb.w};
        mma16816<false>(acc, a0, qb[0], qb[1]);
        mma16816<false>(acc, a1, qb[2], qb[3]);
      }
    };
    // columns 2j, 2j+1 of n-tile nt are heads nt*8 + 2j (+1); rows are pages g, g + 8
    auto take = [&](int nt, const float (&acc)[4]) {
#pragma unroll
      for (int e = 0; e < 4; e++)
        if (nt * 8 + 2 * j + (e & 1) < G) best[e >> 1] = max_keep_nan(best[e >> 1], acc[e]);
    };
    if constexpr (I8) {
      // t outside the n-tiles: each k-step's codes are widened once, not once an n-tile
      // (held across 8 n-tiles they spilled at head_dim 256)
      float acc[EST_NT][4] = {};
#pragma unroll
      for (int t = 0; t < NB; t++) {
        const uint4 xa = t & 1 ? codes_f16(ca[t / 2].z, ca[t / 2].w) : codes_f16(ca[t / 2].x, ca[t / 2].y);
        const uint4 xb = t & 1 ? codes_f16(cb[t / 2].z, cb[t / 2].w) : codes_f16(cb[t / 2].x, cb[t / 2].y);
#pragma unroll
        for (int nt = 0; nt < EST_NT; nt++) mma_t(acc[nt], nt, t, xa, xb);
      }
#pragma unroll
      for (int nt = 0; nt < EST_NT; nt++) {
#pragma unroll
        for (int e = 0; e < 4; e++) { // rows g, g + 8: off * sum q + s * acc
          const __half2 os = *(const __half2 *)(e < 2 ? &csa : &csb);
          acc[nt][e] = fmaf(__high2float(os), acc[nt][e], __low2float(os) * (SQREG ? sumq[SQREG ? nt : 0][e & 1] : sq[nt * 8 + 2 * j + (e & 1)]));
        }
        take(nt, acc[nt]);
      }
    } else {
#pragma unroll
      for (int nt = 0; nt < EST_NT; nt++) {
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int t = 0; t < NB; t++) mma_t(acc, nt, t, ca[t % NL], cb[t % NL]);
        take(nt, acc);
      }
    }
#pragma unroll
    for (int k = 0; k < 2; k++)
#pragma unroll
      for (int o = 1; o <= 2; o <<= 1) best[k] = max_keep_nan(best[k], __shfl_xor_sync(0xffffffffu, best[k], o));
    if (j == 0) {
      if (fa >= 0) out[pa] = best[0];
      if (fb >= 0) out[pb] = best[1];
    }
    // The first radix digit of select: count the candidate pages by the top 11 key bits.
    hist_add(hist, j == 0 && fa >= 0 && pa >= sp && pa < rf, score_key(best[0]) >> 21);
    hist_add(hist, j == 0 && fb >= 0 && pb >= sp && pb < rf, score_key(best[1]) >> 21);
    fa = fa1, fb = fb1, fa1 = fa2, fb1 = fb2;
  };
  for (int r = 0; r < rounds; r++) {
    uint4 na[NL], nb[NL];
    // a view's smaller pages: this round's bounds now, merged (the registers hold no next
    // round's in flight beside the merge)
    if constexpr (R > 1) load_bounds(r, fa, fb, ra, rb, sa, sb);
    round(r, ra, rb, na, nb);
    if constexpr (R == 1)
#pragma unroll
      for (int t = 0; t < NL; t++) ra[t] = na[t], rb[t] = nb[t];
  }
}

// CTA x of nx estimating each list: the page size picks R.
__device__ __forceinline__ void estimate_share(const qg_cache &c, const qg_work &wk, const qg_batch &bt, const qgen_budget &bg, const void *q, int x, int nx) {
  if (BLOCK / 2 % 16 == 0 && c.page_size == BLOCK / 2) estimate_r<(BLOCK / 2 % 16 == 0 ? 2 : 1)>(c, wk, bt, bg, q, x, nx);
  else estimate_r<1>(c, wk, bt, bg, q, x, nx);
}

// The CTAs an SM the registers are sized for: base/plan.c says why.
extern "C" __global__ void __launch_bounds__(QG_EST_THREADS, QG_EST_MIN_CTAS) qg_estimate(qg_cache c, qg_work wk, qg_batch bt, qgen_budget bg, const void *q) {
  estimate_share(c, wk, bt, bg, q, blockIdx.x, gridDim.x);
}
