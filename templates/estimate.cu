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
// ldmatrix. An f32/bf16 query is split into f16 hi + lo (two mmas) so the bound keeps ~22
// bits of q. Every lane issues all its loads (page ids, then bounds) before the first mma.
// It also counts the candidate pages (not sink/recent) by the top 11 bits of their score
// key into wk.hist, which is select's first radix pass done while the scores are at hand.
// Grid: (pages_per_seq / QG_EST_PAGES, N_KV, batch); 16 pages a warp; CTAs past a
// sequence's end return.

constexpr int EST_NT = (G + 7) / 8;               // n-tiles of 8 heads
constexpr int EST_NQ = IT::EXACT_F16 ? 1 : 2;      // q as f16 (+ residue)
constexpr int EST_QROW = QG_EST_QROW;             // bytes of one staged Qsplit row

extern "C" __global__ void __launch_bounds__(QG_EST_THREADS) qg_estimate(qg_cache c, qg_work wk, qg_batch bt, qg_budget bg, const void *q) {
  constexpr int NW = QG_EST_THREADS / 32, K2 = 2 * D;
  static_assert(QG_EST_PAGES == 16 * NW, "estimate: 16 pages a warp");
  __shared__ __align__(16) u8 qsm[EST_NQ * EST_NT * 8 * EST_QROW];
  const int b = blockIdx.z, h = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, j = lane & 3;
  grid_dep_launch(); // select may start; it waits for all of estimate before reading
  const int seq = bt.seq[b];
  const i64 n = pages_of(c.seq_len[seq]);
  const i64 p0 = (i64)blockIdx.x * QG_EST_PAGES + warp * 16;
  if ((i64)blockIdx.x * QG_EST_PAGES >= n) return;

  // Loads first: the two page rows of this lane, 16 bytes per pair of k-steps.
  const int *pt = c.page_table + (i64)seq * c.pages_per_seq;
  const i64 pa = p0 + g, pb = p0 + g + 8;
  const int fa = pa < n ? pt[pa] : -1, fb = pb < n ? pt[pb] : -1;
  uint4 ra[K2 / 32], rb[K2 / 32];
  {
    const uint4 *ba = (const uint4 *)((const __half *)c.bounds + ((i64)fa * N_KV + h) * K2 + 8 * j);
    const uint4 *bb = (const uint4 *)((const __half *)c.bounds + ((i64)fb * N_KV + h) * K2 + 8 * j);
#pragma unroll
    for (int t = 0; t < K2 / 32; t++) {
      ra[t] = fa >= 0 ? ba[4 * t] : make_uint4(0, 0, 0, 0);
      rb[t] = fb >= 0 ? bb[4 * t] : make_uint4(0, 0, 0, 0);
    }
  }

  // Stage Qsplit (rows >= G zero) in the k-slot permutation of the loads above: physical
  // k = [kmin part | kmax part], lane group jj of k-steps 2t, 2t+1 holds 32t + 8jj .. + 7.
  auto put = [&](int r, int p, float x) {
    const int t = p >> 5, o = p & 31, jj = o >> 3, v = o & 7, u = v & 3;
    const int logical = (2 * t + (v >> 2)) * 16 + (u < 2 ? 2 * jj + u : 8 + 2 * jj + (u - 2));
    const __half hi = __float2half_rn(x);
    *(__half *)(qsm + r * EST_QROW + 2 * logical) = hi;
    if constexpr (EST_NQ == 2)
      *(__half *)(qsm + (EST_NT * 8 + r) * EST_QROW + 2 * logical) = __float2half_rn(x - __half2float(hi));
  };
  for (int part = 0; part < EST_NQ; part++)
    for (int i = threadIdx.x; i < (EST_NT * 8 - G) * EST_QROW / 16; i += QG_EST_THREADS)
      *(uint4 *)(qsm + (part * EST_NT * 8 + G) * EST_QROW + 16 * i) = make_uint4(0, 0, 0, 0);
  load_group_q<QG_EST_THREADS>(q, b, h, [&](int r, int d, float x) {
    put(r, d, fminf(x, 0.0f));
    put(r, D + d, fmaxf(x, 0.0f));
  });
  __syncthreads();

  float best[2] = {-INFINITY, -INFINITY}; // pages g and g + 8
#pragma unroll
  for (int nt = 0; nt < EST_NT; nt++) {
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int t = 0; t < K2 / 32; t++) {
#pragma unroll
      for (int part = 0; part < EST_NQ; part++) {
        u32 qb[4]; // b0, b1 of k-step 2t, then of 2t + 1
        ldmatrix_x4(qb, qsm + ((part * EST_NT + nt) * 8 + (lane & 7)) * EST_QROW + (t * 32 + (lane >> 3) * 8) * 2);
        const u32 a0[4] = {ra[t].x, rb[t].x, ra[t].y, rb[t].y}, a1[4] = {ra[t].z, rb[t].z, ra[t].w, rb[t].w};
        mma16816<false>(acc, a0, qb[0], qb[1]);
        mma16816<false>(acc, a1, qb[2], qb[3]);
      }
    }
    // columns 2j, 2j+1 of this n-tile are heads nt*8 + 2j (+1); rows are pages g, g + 8
#pragma unroll
    for (int e = 0; e < 4; e++)
      if (nt * 8 + 2 * j + (e & 1) < G) best[e >> 1] = max_keep_nan(best[e >> 1], acc[e]);
  }
#pragma unroll
  for (int r = 0; r < 2; r++)
#pragma unroll
    for (int o = 1; o <= 2; o <<= 1) best[r] = max_keep_nan(best[r], __shfl_xor_sync(0xffffffffu, best[r], o));
  float *out = wk.scores + ((i64)seq * N_KV + h) * c.pages_per_seq;
  if (j == 0) {
    if (fa >= 0) out[pa] = best[0];
    if (fb >= 0) out[pb] = best[1];
  }
  // The first radix digit of select: count the candidate pages by the top 11 key bits.
  i64 sp, rf;
  forced_ranges(bg, c.seq_len[seq], sp, rf);
  u32 *hist = wk.hist + ((i64)b * N_KV + h) * QG_SEL_BINS;
  hist_add(hist, j == 0 && fa >= 0 && pa >= sp && pa < rf, score_key(best[0]) >> 21);
  hist_add(hist, j == 0 && fb >= 0 && pb >= sp && pb < rf, score_key(best[1]) >> 21);
}
