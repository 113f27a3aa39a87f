// attend.cu — split-K decode attention over a compact page list, all G query heads of a KV
// head in one CTA, on tensor cores.
//
// Grid: (max_splits, N_KV, batch). CTA (split s, KV head h, row b) takes the contiguous
// share [s*L/ns, (s+1)*L/ns) of the sequence's page list (L pages, ns = n_splits(L): a
// function of L alone, so a sparse step whose list is every page is the dense step bit for
// bit). Pages stream through shared memory in tiles of TILE tokens with cp.async, STAGES
// deep; a page's rows for one head are contiguous, so the copies are 16-byte and coalesced.
//
// Per warp (m-tile wm of 16 query heads, token group wt of 16 tokens of the tile):
//   S[16 heads x 16 tokens] = Q K^T   mma.m16n8k16, Q as the A operand from shared memory;
//                                     K as B, read with load4: 4 consecutive channels per
//                                     lane, so the K-dimension of the mma is a permutation
//                                     of the channels and Q is staged in the same permutation
//   online softmax in base 2 (rows = heads; the C layout of S is the A layout of P, FA2)
//   O[16 x D] += P V                  V as B: ldmatrix.trans for 16-bit caches; for quantized
//                                     caches load4 of 4 channels per token feeds 4 n-tiles,
//                                     so O's columns are permuted (vcol) and put back on store
// bf16 operands carry a residue (hi + lo, two mmas) so bf16 caches are not less exact than
// f16. The warps' (m, l, O) meet in shared memory; a single split writes the output, more
// write f32 partials and the last of them merges all in split order (combine.cu).

constexpr int MT = QG_MT, WARPS_M = QG_WARPS_M, WARPS_T = QG_WARPS_T, NW = WARPS_M * WARPS_T;
constexpr int THREADS = NW * 32, TILE = QG_TILE, STAGES = QG_STAGES;
constexpr int K_SROW = QG_K_SROW, V_SROW = QG_V_SROW, Q_SROW = QG_Q_SROW;
constexpr int K_TILE = QG_K_TILE_BYTES, V_TILE = QG_V_TILE_BYTES, STAGE = K_TILE + V_TILE;
constexpr int NQ = KT::BF ? 2 : 1; // staged copies of q: value (+ residue)
constexpr int Q_BYTES = NQ * MT * 16 * Q_SROW;
static_assert(TILE == 16 * WARPS_T && BLOCK % TILE == 0, "a tile is 16 tokens per warp and never spans pages");
static_assert(THREADS == QG_ATTEND_THREADS, "plan and template disagree on the CTA size");

// Logical mma k-slot of physical channel d within its 16-channel step (lane j holds the
// slots 2j, 2j+1, 2j+8, 2j+9, which load4 reads as channels 4j..4j+3).
__device__ __forceinline__ int k_slot(int d) {
  const int step = d & ~15, j = (d & 15) >> 2, u = d & 3;
  return step + (u < 2 ? 2 * j + u : 8 + 2 * j + (u - 2));
}
// Physical channel of O's column n (0..7) of n-tile nt.
__device__ __forceinline__ int vcol(int nt, int n) {
  if constexpr (VT::Q16) return 8 * nt + n;
  else return 32 * (nt >> 2) + 4 * n + (nt & 3);
}

// Page i of a split's share: its physical page and how many of its tokens are valid.
struct page_ref {
  i64 phys;
  int valid;
};
__device__ __forceinline__ page_ref page_at(const qg_cache &c, const int *list, int seq, i64 i, i64 n, i64 len) {
  const i64 lp = list ? list[i] : i;
  page_ref r;
  r.phys = c.page_table[(i64)seq * c.pages_per_seq + lp];
  r.valid = lp == n - 1 ? (int)(len - lp * BLOCK) : BLOCK;
  return r;
}

// Issue the copies of TILE rows of one type TT from src (global) to dst (shared). 16-bit
// rows go one 16-byte chunk at a time into padded rows (stride SROW), rows at or past
// nvalid zero-filled; quantized rows are one contiguous slab (rows past nvalid masked).
template <typename TT, int SROW>
__device__ __forceinline__ void load_rows(u8 *dst, const u8 *src, int nvalid) {
  if constexpr (TT::Q16) {
    constexpr int CPR = TT::ROW / 16;
    for (int i = threadIdx.x; i < TILE * CPR; i += THREADS) {
      const int r = i / CPR, ch = i % CPR;
      const bool ok = r < nvalid;
      cp_async16(dst + r * SROW + ch * 16, ok ? src + r * TT::ROW + ch * 16 : src, ok ? 16 : 0);
    }
  } else {
    for (int i = threadIdx.x; i < TILE * TT::ROW / 16; i += THREADS) cp_async16(dst + i * 16, src + i * 16, 16);
  }
}

// Issue the copies of one tile (rows slot0..slot0+TILE-1 of page pr) into stage st.
__device__ __forceinline__ void load_tile(const qg_cache &c, int h, page_ref pr, int slot0, u8 *st) {
  const i64 head = pr.phys * N_KV + h;
  load_rows<KT, K_SROW>(st, c.k + head * (BLOCK * KT::ROW) + (i64)slot0 * KT::ROW, pr.valid - slot0);
  load_rows<VT, V_SROW>(st + K_TILE, c.v + head * (BLOCK * VT::ROW) + (i64)slot0 * VT::ROW, pr.valid - slot0);
}

extern "C" __global__ void __launch_bounds__(QG_ATTEND_THREADS) qg_attend(qg_cache c, qg_work wk, qg_batch bt, const void *q, void *out, int dense) {
  extern __shared__ __align__(16) u8 smem[];
  u8 *qsm = smem, *stages = smem + Q_BYTES;
  const int split = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, j = lane & 3;
  const int wm = warp % WARPS_M, wt = warp / WARPS_M;
  const int seq = bt.seq[b];
  const i64 len = c.seq_len[seq], n = pages_of(len);

  // The group's queries in the k-slot permutation (rows >= G zero). A sparse step stages
  // them before waiting for select (they do not depend on it; runtime/gpu.c launches
  // attend to overlap select's tail); a dense one after issuing its first tiles.
  auto stage_q = [&] {
    for (int qc = 0; qc < NQ; qc++)
      for (int i = threadIdx.x; i < (MT * 16 - G) * Q_SROW / 16; i += THREADS)
        *(uint4 *)(qsm + qc * MT * 16 * Q_SROW + G * Q_SROW + 16 * i) = make_uint4(0, 0, 0, 0);
    load_group_q<THREADS>(q, b, h, [&](int r, int d, float x) {
      const u32 w = pack2<KT::BF>(x, 0.0f);
      *(u16 *)(qsm + r * Q_SROW + 2 * k_slot(d)) = (u16)w;
      if constexpr (NQ == 2) *(u16 *)(qsm + MT * 16 * Q_SROW + r * Q_SROW + 2 * k_slot(d)) = (u16)pack2_residue<true>(x, 0.0f, w);
    });
  };
  if (!dense) {
    stage_q();
    grid_dep_wait(); // the list and its count are select's
  }
  const int *list = dense ? nullptr : wk.list + ((i64)seq * N_KV + h) * c.pages_per_seq;
  const i64 L = dense ? n : wk.count[(i64)seq * N_KV + h];
  const int ns = n_splits(L, wk.max_splits);
  if (split >= ns) return;
  const i64 p0 = L * split / ns, p1 = L * (split + 1) / ns;
  constexpr int TPP = BLOCK / TILE; // tiles per page
  const i64 n_tiles = (p1 - p0) * TPP;

  // Page prefetch: cur serves the tiles being issued, nxt the page after it.
  i64 ci = p0;
  page_ref cur = {0, 0}, nxt = {0, 0};
  if (ci < p1) cur = page_at(c, list, seq, ci, n, len);
  if (ci + 1 < p1) nxt = page_at(c, list, seq, ci + 1, n, len);
  // The warps need each tile's count of valid rows; the issuing side knows it, so it
  // leaves it in shared memory beside the stage (read after the barrier that publishes it).
  __shared__ int svalid[STAGES];
  auto issue = [&](i64 t) { // tile t -> stage t % STAGES
    const i64 pi = p0 + t / TPP;
    if (pi != ci) { // the issue order is sequential, so this advances by one page
      ci = pi;
      cur = nxt;
      if (ci + 1 < p1) nxt = page_at(c, list, seq, ci + 1, n, len);
    }
    const int slot0 = (int)(t % TPP) * TILE;
    if (threadIdx.x == 0) svalid[t % STAGES] = cur.valid - slot0;
    load_tile(c, h, cur, slot0, stages + (t % STAGES) * STAGE);
  };
#pragma unroll
  for (int s = 0; s < STAGES - 1; s++) {
    if (s < n_tiles) issue(s);
    cp_async_commit();
  }

  if (dense) stage_q(); // while the first tiles are on their way

  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  __syncthreads(); // q staged

  for (i64 t = 0; t < n_tiles; t++) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    if (t + STAGES - 1 < n_tiles) issue(t + STAGES - 1);
    cp_async_commit();

    const int nvalid = svalid[t % STAGES]; // valid rows of this tile
    const u8 *st = stages + (t % STAGES) * STAGE;
    const u8 *ks = st + wt * 16 * K_SROW, *vs = st + K_TILE + wt * 16 * V_SROW;
    const u8 *qa = qsm + (wm * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * Q_SROW + ((lane >> 4) * 8) * 2;

    // S = Q K^T for this warp's 16 tokens (two n-tiles of 8).
    float s[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
      u32 a[4];
      ldmatrix_x4(a, qa + kk * 32);
#pragma unroll
      for (int nt = 0; nt < 2; nt++) {
        const uint2 kb = KT::load4(ks + (nt * 8 + g) * K_SROW, kk * 16 + 4 * j);
        mma16816<KT::BF>(s[nt], a, kb.x, kb.y);
        if constexpr (NQ == 2) {
          u32 al[4];
          ldmatrix_x4(al, qa + MT * 16 * Q_SROW + kk * 32);
          mma16816<true>(s[nt], al, kb.x, kb.y);
        }
      }
    }

    // Online softmax; row 0 = head g, row 1 = head g + 8 of the m-tile.
    const int tok0 = wt * 16 + 2 * j;
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < 2; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const bool ok = tok0 + nt * 8 + (e & 1) < nvalid;
        s[nt][e] = ok ? s[nt][e] * SCALE_LOG2 : -INFINITY;
        mx[e >> 1] = fmaxf(mx[e >> 1], s[nt][e]);
      }
    float ref[2], alpha[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      const float mnew = fmaxf(m[r], mx[r]);
      ref[r] = mnew == -INFINITY ? 0.0f : mnew;
      alpha[r] = fast_exp2(m[r] - ref[r]);
      m[r] = mnew;
      l[r] *= alpha[r];
    }
    float p[2][4];
#pragma unroll
    for (int nt = 0; nt < 2; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        p[nt][e] = fast_exp2(s[nt][e] - ref[e >> 1]);
        l[e >> 1] += p[nt][e];
      }
#pragma unroll
    for (int i = 0; i < D / 8; i++) {
      o[i][0] *= alpha[0], o[i][1] *= alpha[0];
      o[i][2] *= alpha[1], o[i][3] *= alpha[1];
    }
    u32 pa[4];
    pa[0] = pack2<VT::BF>(p[0][0], p[0][1]);
    pa[1] = pack2<VT::BF>(p[0][2], p[0][3]);
    pa[2] = pack2<VT::BF>(p[1][0], p[1][1]);
    pa[3] = pack2<VT::BF>(p[1][2], p[1][3]);
    u32 pl[4];
    if constexpr (VT::BF) {
      pl[0] = pack2_residue<true>(p[0][0], p[0][1], pa[0]);
      pl[1] = pack2_residue<true>(p[0][2], p[0][3], pa[1]);
      pl[2] = pack2_residue<true>(p[1][0], p[1][1], pa[2]);
      pl[3] = pack2_residue<true>(p[1][2], p[1][3], pa[3]);
    }

    // O += P V.
    if constexpr (VT::Q16) {
      const u8 *vrow = vs + ((lane & 7) + ((lane >> 3) & 1) * 8) * V_SROW + (lane >> 4) * 16;
#pragma unroll
      for (int nt = 0; nt < D / 8; nt += 2) {
        u32 vb[4];
        ldmatrix_x4_trans(vb, vrow + nt * 16);
        mma16816<VT::BF>(o[nt], pa, vb[0], vb[1]);
        mma16816<VT::BF>(o[nt + 1], pa, vb[2], vb[3]);
        if constexpr (VT::BF) {
          mma16816<true>(o[nt], pl, vb[0], vb[1]);
          mma16816<true>(o[nt + 1], pl, vb[2], vb[3]);
        }
      }
    } else {
#pragma unroll
      for (int blk = 0; blk < D / 32; blk++) {
        const uint2 x0 = VT::load4(vs + (2 * j) * V_SROW, 32 * blk + 4 * g);
        const uint2 x1 = VT::load4(vs + (2 * j + 1) * V_SROW, 32 * blk + 4 * g);
        const uint2 x2 = VT::load4(vs + (2 * j + 8) * V_SROW, 32 * blk + 4 * g);
        const uint2 x3 = VT::load4(vs + (2 * j + 9) * V_SROW, 32 * blk + 4 * g);
#pragma unroll
        for (int u = 0; u < 4; u++) {
          const u32 sel = u & 1 ? 0x7632 : 0x5410; // high or low halves of two words
          const u32 b0 = __byte_perm(u < 2 ? x0.x : x0.y, u < 2 ? x1.x : x1.y, sel);
          const u32 b1 = __byte_perm(u < 2 ? x2.x : x2.y, u < 2 ? x3.x : x3.y, sel);
          mma16816<false>(o[4 * blk + u], pa, b0, b1);
        }
      }
    }
  }
  cp_async_wait<0>();

  // Row sums: each lane held 4 of the 16 columns of a tile.
#pragma unroll
  for (int r = 0; r < 2; r++) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }

  // Merge the WARPS_T token groups of each m-tile in shared memory (reusing the stages).
  __syncthreads();
  float *red_o = (float *)stages;                         // [WARPS_T][MT*16][D]
  float *red_m = red_o + WARPS_T * MT * 16 * D;           // [WARPS_T][MT*16]
  float *red_l = red_m + WARPS_T * MT * 16;               // [WARPS_T][MT*16]
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const int row = wm * 16 + g + 8 * r;
    float *dst = red_o + ((i64)wt * MT * 16 + row) * D;
#pragma unroll
    for (int nt = 0; nt < D / 8; nt++) {
      dst[vcol(nt, 2 * j)] = o[nt][2 * r];
      dst[vcol(nt, 2 * j + 1)] = o[nt][2 * r + 1];
    }
    if (j == 0) red_m[wt * MT * 16 + row] = m[r], red_l[wt * MT * 16 + row] = l[r];
  }
  __syncthreads();

  for (int i = threadIdx.x; i < G * D; i += THREADS) {
    const int r = i / D, d = i % D;
    float ms = -INFINITY;
#pragma unroll
    for (int w = 0; w < WARPS_T; w++) ms = fmaxf(ms, red_m[w * MT * 16 + r]);
    const float mref = ms == -INFINITY ? 0.0f : ms;
    float acc = 0.0f, lsum = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS_T; w++) {
      const float f = fast_exp2(red_m[w * MT * 16 + r] - mref);
      acc += f * red_o[((i64)w * MT * 16 + r) * D + d];
      lsum += f * red_l[w * MT * 16 + r];
    }
    const i64 row = (i64)b * N_HEAD + h * G + r;
    if (ns == 1) {
      OT::store(out, row * D + d, lsum > 0.0f ? acc / lsum : 0.0f);
    } else {
      wk.part_o[(row * wk.max_splits + split) * D + d] = acc;
      if (d == 0) {
        wk.part_ml[(row * wk.max_splits + split) * 2] = ms;
        wk.part_ml[(row * wk.max_splits + split) * 2 + 1] = lsum;
      }
    }
  }
  if (ns == 1) return;

  // The last split of this (row, KV head) to finish merges all of them (combine.cu).
  __shared__ int s_last;
  __threadfence(); // this CTA's partial is visible device-wide before its ticket
  __syncthreads();
  if (threadIdx.x == 0) {
    int *t = wk.ticket + (i64)b * N_KV + h;
    s_last = atomicAdd(t, 1) == ns - 1;
    if (s_last) *t = 0;
  }
  __syncthreads();
  if (s_last) {
    __threadfence();
    combine_group<THREADS>(wk, b, h, ns, out, (float *)stages);
  }
}
