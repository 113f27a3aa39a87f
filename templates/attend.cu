// attend.cu — split-K decode attention over a compact page list, all G query heads of a KV
// head in one CTA, on tensor cores.
//
// Grid: (max_splits, N_KV, batch) (the persistent form, plan persist: a CTA a resident slot
// claiming the same shares; attend_persistent). CTA (split s, KV head h, row b) takes the contiguous
// share [s*L/ns, (s+1)*L/ns) of the sequence's page list (L pages, ns = n_splits(L): a
// function of L alone, so a sparse step whose list is every page is the dense step bit for
// bit). The share is walked in sub-tiles of 16 tokens (the k of one mma; never across a
// page).
//
// Warp-specialized: one producer warp and WARPS_M x WARPS_T consumer warps. The producer
// looks the pages up (32 at a time, one per lane) and fills a ring of STAGES sub-tile
// buffers (K and V rows) in chunks of CH consecutive sub-tiles of one page: chunk c goes to
// chunk stage c % NCHUNK, whose `full` mbarrier completes when its copies have landed.
// Sub-tile j is consumed by token group j % WARPS_T; STAGES is a multiple of WARPS_T and of
// CH, so a chunk stage always serves the same groups, each in every round, and a phase
// parity names its round unambiguously. Every lane of a consuming warp releases each of its
// sub-tiles on the stage's `empty` mbarrier (an arrival releases only the arriving thread's
// own reads). No CTA-wide barrier sits in the loop and consumers issue no copies. Chunks
// (CH > 1 where the plan makes them), because the producer's own instructions (page lookup
// shuffle, waits, arrivals, the uniform moves around each bulk copy) were the step's limit
// for quantized caches and for 16-bit tiles of 128-byte rows: one chunk of 4 is one wait,
// one arrival and, for quantized slabs, two bulk copies (on an H200 q4_0 dense measured 16-22 %
// faster with chunks of 4, f16 at head_dim 64 20-33 %).
//
// Copies: 16-bit rows by 16-byte cp.async (in a ring of one sub-tile a chunk under an L2
// evict_first policy: read once a step, they must not push out the step's metadata; see
// L2_HINT), 32 consecutive chunks per
// instruction, each producer lane's copies arriving on `full`; a quantized slab (16 rows, contiguous) the
// same way, or on sm_90 with `bulk` set by one bulk copy counted in bytes on `full`; a
// view's strided quantized rows one by one (copy_rows). A view's rows are where its
// strides say (base/kargs.h qg_cache); an owned cache's producer has its layout's strides
// compiled in (produce_any).
// 16-bit tiles are stored unpadded and swizzled (sw_off): rows cut into pieces of 128 (or
// 64) bytes, [piece][16 rows][piece bytes], 16-byte chunk c of row r at c ^ (r's swizzle),
// so 8 rows at one chunk hit 8 distinct bank groups and ldmatrix of K and of V is
// conflict-free. Measured on an H200: cp.async whose 8-lane 128 bytes straddle two
// shared-memory lines (rows padded by 16 bytes, the earlier layout; or a ring off a 128-byte
// line) asks the L2 for those sectors twice and streams a paged cache at <= 0.92x the plain
// read; TMA tensor copies of this layout were slower than cp.async into it.
//
// Per consumer warp (m-tile wm of 16 query heads, one sub-tile of 16 tokens; under the plan's
// mtw the warp holds MW m-tiles, each step below for every one of them, K's and V's operands
// read and dequantized once for all):
//   S[16 heads x 16 tokens] = Q K^T   mma.m16n8k16, Q as the A operand from shared memory;
//                                     K as B: ldmatrix for 16-bit caches; for quantized
//                                     caches 8 channels of a block per lane (oct: the quants
//                                     unpacked into f16 pairs by LOP3 with the f16 magic
//                                     number, one HADD2/HFMA2 for the offset, one HMUL2 for
//                                     the block scale), so the mma's K-dimension is a
//                                     permutation of the channels and Q is staged in the
//                                     same permutation (k_slot)
//   online softmax in base 2 (rows = heads; the C layout of S is the A layout of P, FA2)
//   O[16 x D] += P V                  V as B: ldmatrix.trans for 16-bit caches; for quantized
//                                     caches tpair: 4 channels of a block, each as a pair of
//                                     the two tokens the B operand wants, unscaled; the
//                                     block's per-token scales multiply P instead (4 HMUL2 a
//                                     block). O's columns are permuted (vcol) and put back on
//                                     store. Applying K's scales to S instead costs more: its
//                                     column tokens are not the tokens a lane loads (2 more
//                                     scale loads and converts and 4 FFMA per block, against
//                                     4 HMUL2, counted in the PTX). QGEN_TUNE olddq=1 keeps the
//                                     earlier operands (load4 / load8: every element scaled)
// Swapped (plan swap_ops, the default where K and V are block-quantized and G <= 8: the m16
// tiles above would carry at most 8 real heads): S^T = K Q^T and O^T = V^T P^T, tokens and
// channels on the m side, the heads one n-tile; K's block scales on the scores, P^T moved
// into the B layout by movmatrix.trans (consume_swap).
// Sparse-V (spec sparse.v_tau = tau > 0, QG_V_TAU; at 0 no code): a warp whose softmax
// weights p = exp2(s - m_running) of a sub-tile are all below tau for its real heads skips
// that sub-tile's P V (its shared-memory loads, dequantization and mma; l still counts the
// weights). The producer still copies the V rows: the decision needs the scores, which
// come after the copy is issued. Skipping the global read too would need the consumers
// to publish the decision for a sub-tile a few stages ahead (a K-first ring whose V copy
// waits on it), which costs the pipeline its depth; not done.
// bf16 operands carry a residue (hi + lo, two mmas) so bf16 caches are not less exact than
// f16. fp8 caches are copied as 16-bit ones and read by ldmatrix as if of 16-bit pairs,
// each word then widened to f16 (qtypes.cuh; K: 4 channels of a token in the k-slot order,
// V: .trans, 2 channels of 2 tokens, re-paired by token); their per-tensor scales go into
// the score scale (K) and the output (V). The token groups'
// (m, l, O) meet in shared memory; a single split writes the output, more write f32
// partials, which the last of them merges in split order, or qg_combine where the plan sets
// merge_rows (combine.cu).

constexpr int MT = QG_MT, MW = QG_MTW, WARPS_M = QG_WARPS_M, WARPS_T = QG_WARPS_T, NC = WARPS_M * WARPS_T;
static_assert(MT == WARPS_M * MW, "every consumer warp of a token group holds MW of the MT m-tiles");
constexpr int THREADS = (NC + 1) * 32, STAGES = QG_STAGES;
constexpr int K_SROW = QG_K_SROW, V_SROW = QG_V_SROW, Q_SROW = QG_Q_SROW;
constexpr int K_TILE = QG_K_TILE_BYTES, V_TILE = QG_V_TILE_BYTES, STAGE = K_TILE + V_TILE;
constexpr int K_PB = QG_K_PIECE, V_PB = QG_V_PIECE; // swizzle piece bytes of a 16-bit tile (0: quantized)
// The earlier quantized operands (load4 / load8): QGEN_TUNE olddq=1, or a quantized type
// whose traits have no oct (K) / tpair (V).
template <typename T, typename = void> struct has_oct { static constexpr bool value = false; };
template <typename T> struct has_oct<T, decltype((void)&T::oct)> { static constexpr bool value = true; };
template <typename T, typename = void> struct has_tpair { static constexpr bool value = false; };
template <typename T> struct has_tpair<T, decltype((void)&T::tpair)> { static constexpr bool value = true; };
constexpr bool OLD_K = QG_OLD_DEQUANT || !has_oct<KT>::value, OLD_V = QG_OLD_DEQUANT || !has_tpair<VT>::value;
// fp8 tiles read by ldmatrix (K: 4 channels of a token a word, in load8's k-slot order;
// V: .trans, tokpair); QGEN_TUNE olddq=1 reads them by load4 / load8
constexpr bool FP8_K = SWIZZLED<KT> && !KT::Q16 && !QG_OLD_DEQUANT, FP8_V = SWIZZLED<VT> && !VT::Q16 && !QG_OLD_DEQUANT;
// Swapped operands (plan swap_ops: K and V block-quantized, G <= 8): see consume_swap.
constexpr bool SWAP = QG_SWAP_OPS;
// The swapped consumers two sub-tiles of their group a step (plan pair; consume_step).
constexpr bool PAIR = QG_PAIR;
// The persistent attend (plan persist; attend_persistent): its consumer warps merge a share
// among themselves (TEAM threads meeting on named barrier 1) while the producer goes on, in
// an area of their own that holds the group's RED_ROWS = G real rows.
constexpr bool PERSIST = QG_PERSIST > 0;
static_assert(!PERSIST || (!STEP && !QG_MERGE_ROWS), "the persistent attend: one query token, the merge in attend");
constexpr int TEAM = PERSIST ? NC * 32 : THREADS, RED_ROWS = PERSIST ? G : MT * 16;
__device__ __forceinline__ void team_sync() {
  if constexpr (PERSIST) asm volatile("bar.sync 1, %0;\n" ::"n"(TEAM) : "memory");
  else __syncthreads();
}
static_assert(!SWAP || (!STEP && G <= 8 && MT == 1 && MW == 1 && !KT::Q16 && !VT::Q16 && !SWIZZLED<KT> && !SWIZZLED<VT> && !OLD_K && !OLD_V),
              "the swapped operands are for block-quantized K and V (oct / tpair) and one n-tile of heads");
#ifdef QG_V_TAU
constexpr float V_TAU = QG_V_TAU; // sparse.v_tau: skip a sub-tile's V work when all its weights are below it
#else
constexpr float V_TAU = 0.0f;
#endif
#if __CUDA_ARCH__ >= 900
constexpr bool BULK = true; // bulk copies exist
#else
constexpr bool BULK = false;
#endif
constexpr int NQ = KT::BF ? 2 : 1; // staged copies of q: value (+ residue)
constexpr int Q_BYTES = NQ * MT * 16 * Q_SROW;
constexpr int SUB = 16, SPP = BLOCK / SUB; // tokens a sub-tile, sub-tiles a page
static_assert(BLOCK % SUB == 0 && STAGES % WARPS_T == 0 && STAGES >= 2 * WARPS_T, "a ring of whole rounds, >= 2 stages a group");
// The ring's unit: a chunk of CH consecutive sub-tiles of one page (NCHUNK chunk stages),
// copied and released together; its K tiles, then its V tiles. CONTIG: the tiles are
// unpadded, so a chunk's CH * SUB rows of K (of V) are one contiguous copy.
constexpr int CH = QG_CHUNK, NCHUNK = STAGES / CH;
constexpr bool CONTIG = K_TILE == SUB * KT::ROW && V_TILE == SUB * VT::ROW;
static_assert(SPP % CH == 0 && STAGES % CH == 0 && NCHUNK >= 2, "chunks of whole sub-tiles of one page, >= 2 chunk stages");
// The cp.async copies carry the L2 evict_first policy only in a ring of one sub-tile a chunk:
// in a chunk's loop a copy under a policy raised an illegal instruction on the H200 (16-bit
// and fp8 tiles of 128-byte rows; compute-sanitizer names cp_async16, with the policy made
// per sub-tile, per chunk or in the copy's own asm alike; without it they pass). What the
// chunks save there outweighs what the policy bought.
constexpr bool L2_HINT = CH == 1;
static_assert(!PAIR || (SWAP && V_TAU == 0.0f && CH + WARPS_T <= STAGES),
              "pairs: swapped operands, no sparse-V, and a step's second sub-tile never behind a release of its first");
static_assert(THREADS == QG_ATTEND_THREADS, "plan and template disagree on the CTA size");
static_assert(K_TILE % 128 == 0 && V_TILE % 128 == 0 && Q_BYTES % 16 == 0 && (SUB * KT::ROW) % 16 == 0 && (SUB * VT::ROW) % 16 == 0,
              "16-byte copies of 16-byte sizes; tiles on 128-byte lines");
static_assert((SWIZZLED<KT> ? K_SROW == KT::ROW && (K_PB == 64 || K_PB == 128) && KT::ROW % K_PB == 0 : K_PB == 0) &&
                  (SWIZZLED<VT> ? V_SROW == VT::ROW && (V_PB == 64 || V_PB == 128) && VT::ROW % V_PB == 0 : V_PB == 0),
              "16-bit and fp8 tiles: unpadded rows in whole swizzle pieces");

// Logical mma k-slot of physical channel d within its 16-channel step for quantized K (lane
// j holds the slots 2j, 2j+1, 2j+8, 2j+9 of k-steps 2t and 2t+1 of block t: oct's channels
// {4j, 4j+2}, {4j+1, 4j+3} and the same + 16; load4 under olddq reads 4j..4j+3 and + 16).
// 16-bit K is read with ldmatrix, in channel order.
__device__ __forceinline__ int k_slot(int d) {
  if constexpr (KT::Q16) return d;
  const int step = d & ~15, j = (d & 15) >> 2, u = d & 3;
  if constexpr (OLD_K) return step + (u < 2 ? 2 * j + u : 8 + 2 * j + (u - 2));
  return step + (u & 1 ? 8 : 0) + 2 * j + (u >> 1);
}
template <typename TT> __device__ __forceinline__ int vch_of(int g, int u) { return TT::vch(g, u); }
// Physical channel of O's column n (0..7) of n-tile nt.
__device__ __forceinline__ int vcol(int nt, int n) {
  if constexpr (VT::Q16) return 8 * nt + n;
  else if constexpr (FP8_V) return 16 * (nt >> 1) + 2 * n + (nt & 1);
  else if constexpr (OLD_V) return 32 * (nt >> 2) + 4 * n + (nt & 3);
  else return 32 * (nt >> 2) + vch_of<VT>(n, nt & 3);
}

// Under SWAP: the physical channel of O^T's row g (+ 8 when hi) of m-tile mt.
template <typename TT> __device__ __forceinline__ int vrow_swap(int mt, int g, int hi) { return 32 * (mt >> 1) + TT::vch(g, 2 * (mt & 1) + hi); }

// Byte offset of 16-byte chunk cg of row r in a swizzled 16-bit tile of PB-byte pieces.
template <int PB> __device__ __forceinline__ int sw_off(int r, int cg) {
  constexpr int CP = PB / 16;
  const int x = PB == 128 ? (r & 7) : ((r >> 1) & 3);
  return (cg / CP) * (SUB * PB) + r * PB + (((cg % CP) ^ x) << 4);
}

// fp8 tiles (qtypes.cuh): channels d0..d0+3 of the row at byte `row` of a swizzled tile, as
// load4 / load8 give a quantized type's (no block scale: the per-tensor one comes later).
template <typename A, typename B> constexpr bool SAME = false;
template <typename A> constexpr bool SAME<A, A> = true;
template <typename TT> __device__ __forceinline__ uint2 fp8_load4(const u8 *tile, int row, int d0) {
  constexpr int PB = SAME<TT, KT> ? K_PB : V_PB; // K_PB == V_PB when K and V share the type
  return TT::cvt4(*(const u32 *)(tile + sw_off<PB>(row / TT::ROW, d0 / 16) + d0 % 16));
}
template <typename TT> __device__ __forceinline__ uint4 fp8_load8(const u8 *tile, int row, int d0) {
  const uint2 a = fp8_load4<TT>(tile, row, d0), b = fp8_load4<TT>(tile, row, d0 + 16);
  return make_uint4(a.x, a.y, b.x, b.y);
}
template <typename TT> __device__ __forceinline__ uint2 fp8_cvt4(u32 w) { return TT::cvt4(w); }
template <> __device__ __forceinline__ uint2 load4<qg_e4m3>(const u8 *tile, int row, int d0) { return fp8_load4<qg_e4m3>(tile, row, d0); }
template <> __device__ __forceinline__ uint2 load4<qg_e5m2>(const u8 *tile, int row, int d0) { return fp8_load4<qg_e5m2>(tile, row, d0); }
template <> __device__ __forceinline__ uint4 load8<qg_e4m3>(const u8 *tile, int row, int d0) { return fp8_load8<qg_e4m3>(tile, row, d0); }
template <> __device__ __forceinline__ uint4 load8<qg_e5m2>(const u8 *tile, int row, int d0) { return fp8_load8<qg_e5m2>(tile, row, d0); }

// Copy the SUB rows of one type TT, row r at src + r * ts (global), into dst (shared); the
// whole producer warp calls it. 16-bit and fp8 rows: 16-byte cp.async, 32 chunks per
// instruction, landing swizzled (sw_off); rows at or past nvalid are zero-filled by the copy itself
// (source size 0), as 0 * garbage could be NaN. A quantized type whose rows are one slab
// (contiguous, whole, 16-byte aligned: `slab`) is copied whole with 16-byte cp.async (rows
// past nvalid included: the consumer masks them); strided quantized rows (a view's NHD
// pool: 136-byte q8_0 rows are not 16-byte multiples) go row by row in the largest chunks
// that divide a row, zero-filled past nvalid like 16-bit rows.
template <typename TT, int PB, bool SLAB>
__device__ __forceinline__ void copy_rows(u8 *dst, const u8 *src, i64 ts, int nvalid, int lane, u64 pol) {
  constexpr int N = SUB * TT::ROW / 16; // 16-byte chunks of the sub-tile
  if constexpr (SWIZZLED<TT>) {
    constexpr int CPR = TT::ROW / 16;
    static_assert(N % 32 == 0, "whole warps of chunks");
#pragma unroll
    for (int k = 0; k < N / 32; k++) {
      const int i = lane + 32 * k, row = i / CPR;
      const bool ok = row < nvalid;
      const u8 *s = SLAB ? src + 16 * i : src + row * ts + 16 * (i % CPR);
      cp_async16<L2_HINT>(dst + sw_off<PB>(row, i % CPR), ok ? s : src, ok ? 16 : 0, pol);
    }
  } else if constexpr (SLAB) {
#pragma unroll
    for (int k = 0; k < (N + 31) / 32; k++)
      if (lane + 32 * k < N) cp_async16<L2_HINT>(dst + 16 * (lane + 32 * k), src + 16 * (lane + 32 * k), 16, pol);
  } else if constexpr (TT::ROW % 4 == 0) { // (VIEWS)
    // lane: row lane % 16, every other chunk of it from lane / 16 (one row address a lane)
    constexpr int CH = TT::ROW % 16 == 0 ? 16 : TT::ROW % 8 == 0 ? 8 : 4, CPR = TT::ROW / CH;
    const int row = lane % SUB;
    const bool ok = row < nvalid;
    const u8 *s = ok ? src + row * ts : src;
    u8 *d = dst + row * TT::ROW;
#pragma unroll 1
    for (int k = 0; k < CPR; k += 2)
      if (k + lane / SUB < CPR) cp_async_n<CH, L2_HINT>(d + (k + lane / SUB) * CH, s + (ok ? (k + lane / SUB) * CH : 0), ok ? CH : 0, pol);
  }
}

// This CTA's share of the list: pages [p0, p1) of the list's L, of a sequence of len tokens
// in n pages. A dense list is the pages from base on (0, or a window's first page).
struct share {
  i64 len, n, L, p0, p1, base;
  // Valid rows of sub-tile jt of the share: only the sequence's last page is partial, and
  // it is always the list's last entry (the lists are ascending and always hold it).
  __device__ __forceinline__ int valid(int jt) const {
    return (p0 + jt / SPP == L - 1 ? (int)(len - (n - 1) * BLOCK) : BLOCK) - (jt % SPP) * SUB;
  }
  // The sequence position of sub-tile jt's first token (list: NULL when dense).
  __device__ __forceinline__ i64 pos(int jt, const int *list) const {
    const i64 i = p0 + jt / SPP;
    return (list ? (i64)list[i] : base + i) * BLOCK + (jt % SPP) * SUB;
  }
};

// Views of this unit's rows can be read (rows of 4-byte multiples: runtime/qgen.c refuses
// views of others, so their units compile only the owned cache's path).
constexpr bool VIEWS = KT::ROW % 4 == 0 && VT::ROW % 4 == 0;

// The producer warp: chunk jc / CH of the share (sub-tiles jc .. jc + CH - 1, one page's)
// into chunk stage ((J0 + jc) / CH) % NCHUNK, once the stage's previous round was consumed
// (J0: the sub-tiles the CTA's ring carried before this share; 0 but in the persistent
// attend). Lane k
// holds the physical page of page (batch*32 + k) of the share; the loop reads it with a
// shuffle. VIEW: the rows are where the cache's strides say (base/kargs.h), else the owned
// layout's. A view whose pages are smaller than BLOCK (R = BLOCK / page_size of them a
// selection page) looks each sub-tile's page up itself; a view's sub-tile wholly past the
// sequence reads nothing (page 0, zero-filled).
template <int R, bool VIEW>
__device__ __forceinline__ void produce(const qg_cache &c, const int *list, int seq, int h, const share &sh, int n_sub, u8 *stages,
                                        u64 *full, u64 *empty, int lane, int bulk, int J0) {
  const int *pt = c.page_table + (i64)seq * c.pt_stride;
  constexpr int spe = SPP / R; // sub-tiles an engine page (R of them a selection page)
  i64 phys_l = 0, lp_l = 0;
  int batch = -1;
  for (int jc = 0; jc < n_sub; jc += CH) {
    const int pi = jc / SPP, ci = (J0 + jc) / CH % NCHUNK;
    if (pi >> 5 != batch) {
      batch = pi >> 5;
      const i64 i = sh.p0 + (i64)batch * 32 + lane;
      if (i < sh.p1) {
        lp_l = list ? list[i] : sh.base + i;
        phys_l = pt[lp_l * R];
      }
    }
    const i64 phys0 = __shfl_sync(0xffffffffu, phys_l, pi & 31);
    if (J0 + jc >= STAGES) mbar_wait(&empty[ci], ((J0 + jc) / STAGES + 1) & 1); // its previous round was consumed
    u8 *cs = stages + ci * CH * STAGE;
    // An owned cache's chunk is CH * SUB contiguous rows of K and of V: by bulk copies (sm_90,
    // bulk set), one each when the tiles are unpadded (the chunk's K tiles are contiguous)
    if (!VIEW && BULK && bulk && !SWIZZLED<KT> && !SWIZZLED<VT> && CONTIG) {
      if (lane == 0) {
        const i64 slot0 = (jc % SPP) * SUB;
        mbar_expect_tx(&full[ci], CH * SUB * (KT::ROW + VT::ROW));
        bulk_load(cs, c.k + (phys0 * N_KV + h) * (BLOCK * KT::ROW) + slot0 * KT::ROW, CH * SUB * KT::ROW, &full[ci]);
        bulk_load(cs + CH * K_TILE, c.v + (phys0 * N_KV + h) * (BLOCK * VT::ROW) + slot0 * VT::ROW, CH * SUB * VT::ROW, &full[ci]);
      }
    } else {
#pragma unroll 1
      for (int jt = jc; jt < jc + CH; jt++) {
        i64 phys = phys0;
        const int nvalid = sh.valid(jt);
        if constexpr (R > 1) { // (an engine page past the sequence may be past the block table's row too)
          const i64 lp = __shfl_sync(0xffffffffu, lp_l, pi & 31);
          if (nvalid > 0) phys = pt[lp * R + (jt % SPP) / spe];
        }
        if (VIEW && nvalid <= 0) phys = 0;
        const i64 slot0 = (jt % SPP % spe) * SUB; // first token's slot in its engine page
        // (an owned cache's strides are known here: its layout.h layout)
        const u8 *ksrc = VIEW ? c.k + phys * c.k_page + h * c.k_head + slot0 * c.k_token : c.k + (phys * N_KV + h) * (BLOCK * KT::ROW) + slot0 * KT::ROW;
        const u8 *vsrc = VIEW ? c.v + phys * c.v_page + h * c.v_head + slot0 * c.v_token : c.v + (phys * N_KV + h) * (BLOCK * VT::ROW) + slot0 * VT::ROW;
        u8 *kst = cs + (jt - jc) * K_TILE, *vst = cs + CH * K_TILE + (jt - jc) * V_TILE;
        // K/V rows are read once a step: evicted first (L2_HINT), so the step's metadata stays
        // in L2 and a CTA's start chain reads it from there (f16 and e4m3 dense at 128K measured
        // 3-4 % faster on an H200; made here, not held across the loop: a register the
        // consumers would pay for too). Not on the bulk copies, where it measured slower.
        const u64 pol = L2_HINT ? l2_evict_first() : 0;
        // whole slabs (a view's only when every row is the sequence's), quantized ones by one
        // bulk copy each (sm_90, bulk set), the rest by cp.async
        const bool full_rows = !VIEW || nvalid >= SUB;
        const bool ks = !VIEW || ((c.flags & QG_CACHE_K_SLAB) && (SWIZZLED<KT> || full_rows)),
                   vs = !VIEW || ((c.flags & QG_CACHE_V_SLAB) && (SWIZZLED<VT> || full_rows));
        const bool kb = BULK && !SWIZZLED<KT> && bulk && ks, vb = BULK && !SWIZZLED<VT> && bulk && vs;
        if ((kb || vb) && lane == 0) {
          mbar_expect_tx(&full[ci], (kb ? SUB * KT::ROW : 0) + (vb ? SUB * VT::ROW : 0));
          if (kb) bulk_load(kst, ksrc, SUB * KT::ROW, &full[ci]);
          if (vb) bulk_load(vst, vsrc, SUB * VT::ROW, &full[ci]);
        }
        if (!kb) ks ? copy_rows<KT, K_PB, true>(kst, ksrc, 0, nvalid, lane, pol) : copy_rows<KT, K_PB, false>(kst, ksrc, c.k_token, nvalid, lane, pol);
        if (!vb) vs ? copy_rows<VT, V_PB, true>(vst, vsrc, 0, nvalid, lane, pol) : copy_rows<VT, V_PB, false>(vst, vsrc, c.v_token, nvalid, lane, pol);
      }
    }
    cp_async_arrive(&full[ci]); // one of the phase's 32 arrivals, when this lane's cp.async land
  }
}

// The producer for the cache: an owned cache's with its layout's strides compiled in (the
// code before views), a view's with R = 1 (pages of BLOCK tokens) or 2 (of BLOCK / 2) known
// at compile time: a runtime R, or a fourth instance (R = 4), costs attend ~30 registers
// (nvcc 13), so runtime/qgen.c accepts only these two page sizes.
__device__ __forceinline__ void produce_any(const qg_cache &c, const int *list, int seq, int h, const share &sh, int n_sub, u8 *stages,
                                            u64 *full, u64 *empty, int lane, int bulk, int J0) {
  if (!VIEWS || !(c.flags & QG_CACHE_VIEW)) produce<1, false>(c, list, seq, h, sh, n_sub, stages, full, empty, lane, bulk, J0);
  else if (c.page_size == BLOCK / 2) produce<2, VIEWS>(c, list, seq, h, sh, n_sub, stages, full, empty, lane, bulk, J0);
  else produce<1, VIEWS>(c, list, seq, h, sh, n_sub, stages, full, empty, lane, bulk, J0);
}

// This lane's 8 elements of a block of quantized K, scaled (load_oct / load8 under OLD_K).
template <typename TT> __device__ __forceinline__ uint4 k_operand(const u8 *tile, int row, int d0) {
  if constexpr (OLD_K) return load8<TT>(tile, row, d0);
  else return load_oct<TT>(tile, row, d0);
}

// S = Q K^T of one sub-tile (two n-tiles of 8 tokens) for each of the warp's MW m-tiles; qa
// is this lane's ldmatrix row of the first of them in q (the next 16 rows on). K's operand
// is read (and a quantized K dequantized) once for all of them. 16-bit K by ldmatrix: lane
// l addresses row l&7 of matrix l>>3 = (token half, channel half) of the k-step.
__device__ __forceinline__ void qk_tile(float (&s)[MW][2][4], const u8 *qa, const u8 *ks, int lane) {
  const int g = lane >> 2, j = lane & 3;
  const int krow = ((lane >> 4) << 3) + (lane & 7), khalf = (lane >> 3) & 1;
  uint4 kq[2]; // quantized K: this lane's 8 elements of a block, per n-tile
  u32 kf[4];   // fp8 K: (token half, chunk) = (0, kk), (1, kk), (0, kk + 1), (1, kk + 1)
#pragma unroll
  for (int kk = 0; kk < D / 16; kk++) {
    u32 a[MW][4];
#pragma unroll
    for (int i = 0; i < MW; i++) ldmatrix_x4(a[i], qa + i * 16 * Q_SROW + kk * 32);
    if constexpr (FP8_K) { // lane (g, j): token g's channels 16 kk + 4j .. 4j+3, its k-slots of step kk
      if (kk % 2 == 0) ldmatrix_x4(kf, ks + sw_off<K_PB>(((lane >> 3) & 1) * 8 + (lane & 7), kk + (lane >> 4)));
#pragma unroll
      for (int nt = 0; nt < 2; nt++) {
        const uint2 b = fp8_cvt4<KT>(kf[2 * (kk % 2) + nt]);
#pragma unroll
        for (int i = 0; i < MW; i++) mma16816<false>(s[i][nt], a[i], b.x, b.y);
      }
    } else if constexpr (KT::Q16) {
      u32 kb[4];
      ldmatrix_x4(kb, ks + sw_off<K_PB>(krow, 2 * kk + khalf));
#pragma unroll
      for (int i = 0; i < MW; i++) {
        mma16816<KT::BF>(s[i][0], a[i], kb[0], kb[1]);
        mma16816<KT::BF>(s[i][1], a[i], kb[2], kb[3]);
        if constexpr (NQ == 2) {
          u32 al[4];
          ldmatrix_x4(al, qa + (MT + i) * 16 * Q_SROW + kk * 32);
          mma16816<true>(s[i][0], al, kb[0], kb[1]);
          mma16816<true>(s[i][1], al, kb[2], kb[3]);
        }
      }
    } else { // k-steps 2t and 2t + 1 are one block t: dequantized together at the even one
#pragma unroll
      for (int nt = 0; nt < 2; nt++) {
        if (kk % 2 == 0) kq[nt] = k_operand<KT>(ks, (nt * 8 + g) * K_SROW, kk * 16 + 4 * j);
#pragma unroll
        for (int i = 0; i < MW; i++) mma16816<KT::BF>(s[i][nt], a[i], kk % 2 ? kq[nt].z : kq[nt].x, kk % 2 ? kq[nt].w : kq[nt].y);
      }
    }
  }
}

// Online softmax of S (rows past nvalid masked) into the running (m, l, O); row 0 = head g,
// row 1 = head g + 8 of the m-tile, whose heads past nrows are padding. Engine modules mask
// too each row's columns outside [lo, hi) (its span, relative to the sub-tile). Leaves P as the A
// operand of P V (pa, and its residue pl for bf16 V). Returns whether the P V of the
// sub-tile may be skipped (sparse-V: every weight of the warp's heads below V_TAU; l still
// counts them); always false (no code) when V_TAU is 0.
__device__ __forceinline__ bool softmax_tile(float (&s)[2][4], float (&o)[D / 8][4], float (&m)[2], float (&l)[2], u32 (&pa)[4],
                                             u32 (&pl)[4], int nvalid, const int (&lo)[2], const int (&hi)[2], int nrows, int lane,
                                             float sl2) {
  const int tok0 = 2 * (lane & 3);
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int nt = 0; nt < 2; nt++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int col = tok0 + nt * 8 + (e & 1);
      bool ok = col < nvalid;
      if constexpr (STEP > 0) ok = ok && col >= lo[e >> 1] && col < hi[e >> 1]; // the row's causal span and window
      s[nt][e] = ok ? s[nt][e] * sl2 : -INFINITY;
      mx[e >> 1] = fmaxf(mx[e >> 1], s[nt][e]);
    }
  float ref[2], alpha[2];
#pragma unroll
  for (int r = 0; r < 2; r++) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    const float mnew = fmaxf(m[r], mx[r]);
    ref[r] = mnew == -INFINITY ? 0.0f : mnew;
    alpha[r] = mnew == m[r] ? 1.0f : fast_exp2(m[r] - ref[r]); // exactly 1 when the max holds
    m[r] = mnew;
    l[r] *= alpha[r];
  }
  float p[2][4];
  bool small = true; // every weight of the lane's real heads below V_TAU
#pragma unroll
  for (int nt = 0; nt < 2; nt++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      p[nt][e] = fast_exp2(s[nt][e] - ref[e >> 1]);
      l[e >> 1] += p[nt][e];
      if constexpr (V_TAU > 0.0f) small = small && (p[nt][e] < V_TAU || (lane >> 2) + 8 * (e >> 1) >= nrows);
    }
  // (once the maxima settle, most sub-tiles move none: skip D/2 multiplies a lane)
  if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
    for (int i = 0; i < D / 8; i++) {
      o[i][0] *= alpha[0], o[i][1] *= alpha[0];
      o[i][2] *= alpha[1], o[i][3] *= alpha[1];
    }
  }
  pa[0] = pack2<VT::BF>(p[0][0], p[0][1]);
  pa[1] = pack2<VT::BF>(p[0][2], p[0][3]);
  pa[2] = pack2<VT::BF>(p[1][0], p[1][1]);
  pa[3] = pack2<VT::BF>(p[1][2], p[1][3]);
  if constexpr (VT::BF) {
    pl[0] = pack2_residue<true>(p[0][0], p[0][1], pa[0]);
    pl[1] = pack2_residue<true>(p[0][2], p[0][3], pa[1]);
    pl[2] = pack2_residue<true>(p[1][0], p[1][1], pa[2]);
    pl[3] = pack2_residue<true>(p[1][2], p[1][3], pa[3]);
  }
  if constexpr (V_TAU > 0.0f) return __all_sync(0xffffffffu, small);
  return false;
}

// The f16 scales of block blk of quantized V for lane j's tokens as pairs: 2j, 2j + 1 (d01)
// and 2j + 8, 2j + 9 (d89); r0 is token 2j's block (its rows r0 + k * V_SROW). Both forms of
// P V multiply their P words by them (pv_quant, pv_swap).
template <typename TT> __device__ __forceinline__ int v_scales(const u8 *vs, int blk, int j, u32 &d01, u32 &d89) {
  const int r0 = (2 * j) * V_SROW + blk * TT::BLK, r1 = r0 + V_SROW, r8 = r0 + 8 * V_SROW, r9 = r8 + V_SROW;
  d01 = __byte_perm(*(const u16 *)(vs + r0), *(const u16 *)(vs + r1), 0x5410);
  d89 = __byte_perm(*(const u16 *)(vs + r8), *(const u16 *)(vs + r9), 0x5410);
  return r0;
}

// O += P V of one sub-tile of quantized V, for each m-tile i of the warp with run[i]. The
// block scales go into P, one HMUL2 per P word and block (rows 2j, 2j+1, 2j+8, 2j+9 are the
// tokens of this lane's P words), and V's operand is the unscaled tpair, unpacked once for
// the warp's m-tiles: no multiply per element, no shuffle from channel pairs to token pairs.
// P * d is rounded to f16 once (it was P and d * q, each once).
template <typename TT>
__device__ __forceinline__ void pv_quant(float (&o)[MW][D / 8][4], const u32 (&pa)[MW][4], const bool (&run)[MW], const u8 *vs, int lane) {
  const int g = lane >> 2, j = lane & 3;
#pragma unroll
  for (int blk = 0; blk < D / 32; blk++) {
    u32 d01, d89;
    const int r0 = v_scales<TT>(vs, blk, j, d01, d89);
    const uint4 lo = TT::tpair(vs, r0, r0 + V_SROW, g), hi = TT::tpair(vs, r0 + 8 * V_SROW, r0 + 9 * V_SROW, g);
#pragma unroll
    for (int i = 0; i < MW; i++) {
      if (!run[i]) continue;
      u32 ps[4];
      *(__half2 *)&ps[0] = __hmul2(*(const __half2 *)&pa[i][0], *(const __half2 *)&d01);
      *(__half2 *)&ps[1] = __hmul2(*(const __half2 *)&pa[i][1], *(const __half2 *)&d01);
      *(__half2 *)&ps[2] = __hmul2(*(const __half2 *)&pa[i][2], *(const __half2 *)&d89);
      *(__half2 *)&ps[3] = __hmul2(*(const __half2 *)&pa[i][3], *(const __half2 *)&d89);
      mma16816<false>(o[i][4 * blk + 0], ps, lo.x, hi.x);
      mma16816<false>(o[i][4 * blk + 1], ps, lo.y, hi.y);
      mma16816<false>(o[i][4 * blk + 2], ps, lo.z, hi.z);
      mma16816<false>(o[i][4 * blk + 3], ps, lo.w, hi.w);
    }
  }
}

// O += P V of one sub-tile of fp8 V: ldmatrix.trans of 16-byte chunks c, c + 1, tokens
// 0-7 and 8-15, gives lane (g, j) channels 16c + 2g, 2g + 1 of tokens 2j, 2j + 1 (and + 8) a
// word: n-tile 2c takes the even channel, 2c + 1 the odd one (vcol).
template <typename TT>
__device__ __forceinline__ void pv_fp8(float (&o)[MW][D / 8][4], const u32 (&pa)[MW][4], const bool (&run)[MW], const u8 *vs, int lane) {
  const int vrow = (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
  for (int c = 0; c < D / 16; c += 2) {
    u32 w[4];
    ldmatrix_x4_trans(w, vs + sw_off<V_PB>(vrow, c + (lane >> 4)));
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const uint2 lo = TT::tokpair(w[2 * h]), hi = TT::tokpair(w[2 * h + 1]);
#pragma unroll
      for (int i = 0; i < MW; i++) {
        if (!run[i]) continue;
        mma16816<false>(o[i][2 * (c + h)], pa[i], lo.x, hi.x);
        mma16816<false>(o[i][2 * (c + h) + 1], pa[i], lo.y, hi.y);
      }
    }
  }
}

// O += P V of one sub-tile for the warp's m-tiles i with run[i], V's operand read once.
__device__ __forceinline__ void pv_tile(float (&o)[MW][D / 8][4], const u32 (&pa)[MW][4], const u32 (&pl)[MW][4], const bool (&run)[MW],
                                        const u8 *vs, int lane) {
  if constexpr (VT::Q16) {
    const int vrow = (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int nt = 0; nt < D / 8; nt += 2) {
      u32 vb[4];
      ldmatrix_x4_trans(vb, vs + sw_off<V_PB>(vrow, nt + (lane >> 4)));
#pragma unroll
      for (int i = 0; i < MW; i++) {
        if (!run[i]) continue;
        mma16816<VT::BF>(o[i][nt], pa[i], vb[0], vb[1]);
        mma16816<VT::BF>(o[i][nt + 1], pa[i], vb[2], vb[3]);
        if constexpr (VT::BF) {
          mma16816<true>(o[i][nt], pl[i], vb[0], vb[1]);
          mma16816<true>(o[i][nt + 1], pl[i], vb[2], vb[3]);
        }
      }
    }
  } else if constexpr (FP8_V) {
    pv_fp8<VT>(o, pa, run, vs, lane);
  } else if constexpr (!OLD_V) {
    pv_quant<VT>(o, pa, run, vs, lane);
  } else {
    const int g = lane >> 2, j = lane & 3;
#pragma unroll
    for (int blk = 0; blk < D / 32; blk++) {
      const uint2 x0 = load4<VT>(vs, (2 * j) * V_SROW, 32 * blk + 4 * g);
      const uint2 x1 = load4<VT>(vs, (2 * j + 1) * V_SROW, 32 * blk + 4 * g);
      const uint2 x2 = load4<VT>(vs, (2 * j + 8) * V_SROW, 32 * blk + 4 * g);
      const uint2 x3 = load4<VT>(vs, (2 * j + 9) * V_SROW, 32 * blk + 4 * g);
#pragma unroll
      for (int u = 0; u < 4; u++) {
        const u32 sel = u & 1 ? 0x7632 : 0x5410; // high or low halves of two words
        const u32 b0 = __byte_perm(u < 2 ? x0.x : x0.y, u < 2 ? x1.x : x1.y, sel);
        const u32 b1 = __byte_perm(u < 2 ? x2.x : x2.y, u < 2 ? x3.x : x3.y, sel);
#pragma unroll
        for (int i = 0; i < MW; i++)
          if (run[i]) mma16816<false>(o[i][4 * blk + u], pa[i], b0, b1);
      }
    }
  }
}

// A consumer warp's step over one sub-tile of nvalid valid rows for its MW m-tiles: K at ks,
// V at vs; nrows of the first m-tile's 16 heads are real (16 fewer each next one), lo/hi
// each m-tile's rows' spans. Under sparse-V (decided m-tile by m-tile) a skipped sub-tile's
// V is still copied by the producer: what it saves is the shared-memory loads,
// dequantization and mma.
__device__ __forceinline__ void consume(float (&o)[MW][D / 8][4], float (&m)[MW][2], float (&l)[MW][2], const u8 *qa, const u8 *ks,
                                        const u8 *vs, int nvalid, const int (&lo)[MW][2], const int (&hi)[MW][2], int nrows, int lane,
                                        float sl2) {
  float s[MW][2][4];
#pragma unroll
  for (int i = 0; i < MW; i++)
#pragma unroll
    for (int e = 0; e < 4; e++) s[i][0][e] = s[i][1][e] = 0.0f;
  qk_tile(s, qa, ks, lane);
  u32 pa[MW][4], pl[MW][4];
  bool run[MW], any = false;
#pragma unroll
  for (int i = 0; i < MW; i++) {
    run[i] = !softmax_tile(s[i], o[i], m[i], l[i], pa[i], pl[i], nvalid, lo[i], hi[i], nrows - 16 * i, lane, sl2);
    any = any || run[i];
  }
  if (any) pv_tile(o, pa, pl, run, vs, lane);
}

// The swapped operands (SWAP: K and V block-quantized, G <= 8). With Q as the A operand the
// m16 tiles carry 16 heads of which at most 8 are real; here the tokens and channels take
// the m side: S^T[16 tokens x 8 heads] = K Q^T and O^T[D channels x 8 heads] += V^T P^T, half
// the mma of a sub-tile (D/16 + D/16, was D/8 + D/8) and half of O's registers (lane (g, j):
// O^T rows g, g + 8 of each m-tile, heads 2j, 2j + 1; the first D/16 tiles of o). K is the A
// operand exactly as oct gives it (rows = tokens g, g + 8: the two n-tiles of the plain
// path's B), Q^T the B operand (qsrc). K's block scales
// multiply the scores, per block of two k-steps: its mma run on the unscaled quants (small
// integers, exact in f16) into an f32 partial, then one FFMA per score. S^T's columns are
// heads, so the softmax reduces over the lanes of one j (xor 4, 8, 16). P^T reaches the B
// layout by two movmatrix.trans (tokens g, g + 8 x heads 2j, 2j + 1 become head g x tokens
// 2j, 2j + 1 and 2j + 8, 2j + 9), where V's block scales multiply it (one HMUL2 per word and
// block); V^T is the A operand as tpair gives it (rows = channels vch(g, u)). Under PAIR a
// consumer takes its group's sub-tiles two at a time (consume_step<2>): one softmax (max,
// shuffles, rescale) for 32 tokens and two independent K chains, which the scheduler
// interleaves; Q^T is then read from shared memory per k-step, once for both (held for the
// share, it costs 16 registers at head_dim 128 that 4 CTAs an SM do not have).

// Q^T's B-fragments: head g's k-slots 2j, 2j + 1 and 2j + 8, 2j + 9 of k-step kk (rows past G
// are zero in the staged q), held in registers for the whole share, or under PAIR read from
// the staged q when used.
struct qsrc {
  u32 r[PAIR ? 1 : D / 16][2];
  const u8 *row; // this lane's head g in the staged q
  __device__ __forceinline__ qsrc(const u8 *qsm, int lane) : row(qsm + (lane >> 2) * Q_SROW + 4 * (lane & 3)) {
    if constexpr (!PAIR)
#pragma unroll
      for (int kk = 0; kk < D / 16; kk++) r[kk][0] = *(const u32 *)(row + 32 * kk), r[kk][1] = *(const u32 *)(row + 32 * kk + 16);
  }
  __device__ __forceinline__ void get(int kk, u32 &b0, u32 &b1) const {
    if constexpr (PAIR) b0 = *(const u32 *)(row + 32 * kk), b1 = *(const u32 *)(row + 32 * kk + 16);
    else b0 = r[kk][0], b1 = r[kk][1];
  }
};

// S^T = K Q^T of NS sub-tiles (K at ks[k]): s[k][0], s[k][1] token g, heads 2j, 2j + 1;
// s[k][2], s[k][3] token g + 8.
template <typename TT, int NS>
__device__ __forceinline__ void qk_swap(float (&s)[NS][4], const qsrc &q, const u8 *const (&ks)[NS], int lane) {
  const int g = lane >> 2, j = lane & 3;
#pragma unroll
  for (int t = 0; t < D / 32; t++) {
    u32 q0, q1, q2, q3;
    q.get(2 * t, q0, q1), q.get(2 * t + 1, q2, q3);
#pragma unroll
    for (int k = 0; k < NS; k++) {
      const int b0 = g * K_SROW + t * TT::BLK, b8 = b0 + 8 * K_SROW;
      const uint4 x0 = TT::oct(ks[k], b0, j), x8 = TT::oct(ks[k], b8, j);
      const u32 a0[4] = {x0.x, x8.x, x0.y, x8.y}, a1[4] = {x0.z, x8.z, x0.w, x8.w};
      float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      mma16816<false>(c, a0, q0, q1);
      mma16816<false>(c, a1, q2, q3);
      const float d0 = __half2float(*(const __half *)(ks[k] + b0)), d8 = __half2float(*(const __half *)(ks[k] + b8));
      s[k][0] = fmaf(d0, c[0], s[k][0]), s[k][1] = fmaf(d0, c[1], s[k][1]);
      s[k][2] = fmaf(d8, c[2], s[k][2]), s[k][3] = fmaf(d8, c[3], s[k][3]);
    }
  }
}

// Online softmax of the S^T of NS sub-tiles at once (tokens past nvalid[k] masked; heads
// 2j + c past nrows are padding) into the running (m, l, O^T) of heads 2j, 2j + 1: one max,
// one set of shuffles and one rescale of O^T for 16 NS tokens. Leaves each sub-tile's P^T as
// the B operand (pb[k]). Returns whether the P V of the sub-tile may be skipped (sparse-V,
// as softmax_tile; NS = 1 there).
template <int NS>
__device__ __forceinline__ bool softmax_swap(float (&s)[NS][4], float (&o)[D / 8][4], float (&m)[2], float (&l)[2], u32 (&pb)[NS][2],
                                             const int (&nvalid)[NS], int nrows, int lane, float sl2) {
  static_assert(NS == 1 || V_TAU == 0.0f, "sparse-V decides sub-tile by sub-tile");
  const int g = lane >> 2, j = lane & 3;
#pragma unroll
  for (int k = 0; k < NS; k++)
#pragma unroll
    for (int e = 0; e < 4; e++) s[k][e] = g + 8 * (e >> 1) < nvalid[k] ? s[k][e] * sl2 : -INFINITY;
  float ref[2], alpha[2];
#pragma unroll
  for (int c = 0; c < 2; c++) {
    float mx = fmaxf(s[0][c], s[0][c + 2]);
#pragma unroll
    for (int k = 1; k < NS; k++) mx = fmaxf(mx, fmaxf(s[k][c], s[k][c + 2]));
#pragma unroll
    for (int x = 4; x < 32; x <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, x));
    const float mnew = fmaxf(m[c], mx);
    ref[c] = mnew == -INFINITY ? 0.0f : mnew;
    alpha[c] = mnew == m[c] ? 1.0f : fast_exp2(m[c] - ref[c]);
    m[c] = mnew;
    l[c] *= alpha[c];
  }
  bool small = true;
#pragma unroll
  for (int k = 0; k < NS; k++) {
    float p[4];
#pragma unroll
    for (int e = 0; e < 4; e++) {
      p[e] = fast_exp2(s[k][e] - ref[e & 1]);
      l[e & 1] += p[e];
      if constexpr (V_TAU > 0.0f) small = small && (p[e] < V_TAU || 2 * j + (e & 1) >= nrows);
    }
    pb[k][0] = movmatrix_trans(pack2<false>(p[0], p[1]));
    pb[k][1] = movmatrix_trans(pack2<false>(p[2], p[3]));
  }
  if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
    for (int i = 0; i < D / 16; i++) o[i][0] *= alpha[0], o[i][1] *= alpha[1], o[i][2] *= alpha[0], o[i][3] *= alpha[1];
  }
  if constexpr (V_TAU > 0.0f) return __all_sync(0xffffffffu, small);
  return false;
}

// O^T += V^T P^T of one sub-tile: per block, P^T scaled by its tokens' scales (pb[0] holds
// tokens 2j, 2j + 1, pb[1] 2j + 8, 2j + 9), then the block's two m-tiles of channels.
template <typename TT> __device__ __forceinline__ void pv_swap(float (&o)[D / 8][4], const u32 (&pb)[2], const u8 *vs, int lane) {
  const int g = lane >> 2, j = lane & 3;
#pragma unroll
  for (int blk = 0; blk < D / 32; blk++) {
    u32 d01, d89;
    const int r0 = v_scales<TT>(vs, blk, j, d01, d89);
    u32 b0, b1;
    *(__half2 *)&b0 = __hmul2(*(const __half2 *)&pb[0], *(const __half2 *)&d01);
    *(__half2 *)&b1 = __hmul2(*(const __half2 *)&pb[1], *(const __half2 *)&d89);
    const uint4 lo = TT::tpair(vs, r0, r0 + V_SROW, g), hi = TT::tpair(vs, r0 + 8 * V_SROW, r0 + 9 * V_SROW, g);
    const u32 a0[4] = {lo.x, lo.y, hi.x, hi.y}, a1[4] = {lo.z, lo.w, hi.z, hi.w};
    mma16816<false>(o[2 * blk], a0, b0, b1);
    mma16816<false>(o[2 * blk + 1], a1, b0, b1);
  }
}

// consume's swapped form (SWAP) over NS sub-tiles (K at ks[k], V at vs[k]); nrows of the 8
// heads are real.
template <typename TK, typename TV, int NS>
__device__ __forceinline__ void consume_swap(float (&o)[D / 8][4], float (&m)[2], float (&l)[2], const qsrc &q, const u8 *const (&ks)[NS],
                                             const u8 *const (&vs)[NS], const int (&nvalid)[NS], int nrows, int lane, float sl2) {
  float s[NS][4];
#pragma unroll
  for (int k = 0; k < NS; k++) s[k][0] = s[k][1] = s[k][2] = s[k][3] = 0.0f;
  qk_swap<TK, NS>(s, q, ks, lane);
  u32 pb[NS][2];
  if (!softmax_swap<NS>(s, o, m, l, pb, nvalid, nrows, lane, sl2))
#pragma unroll
    for (int k = 0; k < NS; k++) pv_swap<TV>(o, pb[k], vs[k], lane);
}

// A consumer warp's step over NS sub-tiles of its token group, jt + k WARPS_T: their stages
// waited for, consumed, then released (every lane, after its own reads: release). NS > 1
// only under PAIR. Engine modules: span holds the sequence positions [lo, hi) that the
// lane's two rows of each m-tile see (row_span), list the share's list (NULL: dense).
template <int NS>
__device__ __forceinline__ void consume_step(int jt, float (&o)[MW][D / 8][4], float (&m)[MW][2], float (&l)[MW][2], const qsrc &q,
                                             const u8 *qsm, const u8 *stages, u64 *full, u64 *empty, const share &sh, int wm, int lane,
                                             float sl2, const i64 (&span)[MW][2][2], const int *list, int J0) {
  const u8 *ks[NS], *vs[NS];
  int nvalid[NS], ci[NS];
#pragma unroll
  for (int k = 0; k < NS; k++) {
    const int jk = jt + k * WARPS_T, jr = J0 + jk; // in the share, in the ring
    ci[k] = jr / CH % NCHUNK;
    mbar_wait(&full[ci[k]], (jr / STAGES) & 1);
    nvalid[k] = sh.valid(jk);
    ks[k] = stages + ci[k] * CH * STAGE + jr % CH * K_TILE;
    vs[k] = stages + ci[k] * CH * STAGE + CH * K_TILE + jr % CH * V_TILE;
  }
  if constexpr (SWAP) {
    consume_swap<KT, VT, NS>(o[0], m[0], l[0], q, ks, vs, nvalid, G, lane, sl2);
  } else {
    static_assert(NS == 1, "pairs are for the swapped operands");
    const u8 *qa = qsm + (wm * MW * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * Q_SROW + ((lane >> 4) * 8) * 2;
    int lo[MW][2], hi[MW][2];
#pragma unroll
    for (int i = 0; i < MW; i++) lo[i][0] = lo[i][1] = 0, hi[i][0] = hi[i][1] = SUB;
    if constexpr (STEP > 0) {
      const i64 p = sh.pos(jt, list);
#pragma unroll
      for (int i = 0; i < MW; i++)
#pragma unroll
        for (int r = 0; r < 2; r++)
          lo[i][r] = (int)min(max(span[i][r][0] - p, (i64)0), (i64)SUB), hi[i][r] = (int)min(max(span[i][r][1] - p, (i64)0), (i64)SUB);
    }
    consume(o, m, l, qa, ks[0], vs[0], nvalid[0], lo, hi, G - wm * MW * 16, lane, sl2);
  }
#pragma unroll
  for (int k = 0; k < NS; k++) mbar_arrive(&empty[ci[k]]);
}

// A share's empty accumulators: O, the running max m and the sum l of each of the lane's rows.
__device__ __forceinline__ void acc_init(float (&o)[MW][D / 8][4], float (&m)[MW][2], float (&l)[MW][2]) {
#pragma unroll
  for (int k = 0; k < MW; k++) {
#pragma unroll
    for (int i = 0; i < D / 8; i++) o[k][i][0] = o[k][i][1] = o[k][i][2] = o[k][i][3] = 0.0f;
    m[k][0] = m[k][1] = -INFINITY, l[k][0] = l[k][1] = 0.0f;
  }
}

// A consumer warp's sub-tiles of a share, from its first, jt: those of its token group (two
// a step under PAIR, a last odd one alone). Then V's per-tensor scale on O (fp8).
__device__ __forceinline__ void consume_share(int jt, int n_sub, float (&o)[MW][D / 8][4], float (&m)[MW][2], float (&l)[MW][2], const qsrc &q,
                                              const u8 *qsm, const u8 *stages, u64 *full, u64 *empty, const share &sh, int wm, int lane,
                                              float sl2, const i64 (&span)[MW][2][2], const int *list, int J0, const qg_cache &c) {
  if constexpr (PAIR)
    for (; jt + WARPS_T < n_sub; jt += 2 * WARPS_T) consume_step<2>(jt, o, m, l, q, qsm, stages, full, empty, sh, wm, lane, sl2, span, list, J0);
  for (; jt < n_sub; jt += WARPS_T) consume_step<1>(jt, o, m, l, q, qsm, stages, full, empty, sh, wm, lane, sl2, span, list, J0);
  if constexpr (TENSOR_UNIT<VT> != 0.0f) {
    const float vsc = c.v_scale * TENSOR_UNIT<VT>;
#pragma unroll
    for (int k = 0; k < MW; k++)
#pragma unroll
      for (int i = 0; i < D / 8; i++) o[k][i][0] *= vsc, o[k][i][1] *= vsc, o[k][i][2] *= vsc, o[k][i][3] *= vsc;
  }
}

// Row sums: each lane held 4 of the 16 columns of a tile (SWAP: 2 of the 16 rows).
__device__ __forceinline__ void row_sums(float (&l)[MW][2]) {
#pragma unroll
  for (int k = 0; k < MW; k++)
#pragma unroll
    for (int r = 0; r < 2; r++)
#pragma unroll
      for (int x = SWAP ? 4 : 1; x < (SWAP ? 32 : 4); x <<= 1) l[k][r] += __shfl_xor_sync(0xffffffffu, l[k][r], x);
}

// Merge the WARPS_T token groups of each m-tile: every consumer warp's (m, l, O) into
// shared memory (red_o [WARPS_T][RED_ROWS][D], red_m and red_l [WARPS_T][RED_ROWS]: over
// the drained stages, or the persistent attend's own area, which holds the G real rows
// only), then per (head, channel) the merged value: the output when the share is the whole
// list (ns == 1), else this split's f32 partial. g, j, wm, wt: the lane's and the warp's
// places, as the kernel computed them. The TEAM threads that merge meet on team_sync.
__device__ __forceinline__ void merge_groups(const qg_work &wk, const qg_batch &bt, const float (&o)[MW][D / 8][4], const float (&m)[MW][2],
                                             const float (&l)[MW][2], float *red_o, float *red_m, float *red_l, int b, int h, int split,
                                             int ns, void *out, int g, int j, int wm, int wt, int warp) {
  team_sync(); // every consumer is done with the share (without PERSIST: the ring is drained)
  if constexpr (SWAP) { // O^T: lane (g, j) holds channels of rows g, g + 8 for heads 2j, 2j + 1
    if (warp < NC) {
#pragma unroll
      for (int mt = 0; mt < D / 16; mt++)
#pragma unroll
        for (int e = 0; e < 4; e++)
          if (!PERSIST || 2 * j + (e & 1) < RED_ROWS) red_o[((i64)wt * RED_ROWS + 2 * j + (e & 1)) * D + vrow_swap<VT>(mt, g, e >> 1)] = o[0][mt][e];
      if (g == 0)
        for (int c = 0; c < 2; c++)
          if (!PERSIST || 2 * j + c < RED_ROWS) red_m[wt * RED_ROWS + 2 * j + c] = m[0][c], red_l[wt * RED_ROWS + 2 * j + c] = l[0][c];
    }
  }
#pragma unroll
  for (int i = 0; i < MW; i++)
#pragma unroll
    for (int r = 0; r < 2 && warp < NC && !SWAP; r++) {
      const int row = (wm * MW + i) * 16 + g + 8 * r;
      if (PERSIST && row >= RED_ROWS) continue; // a padding row: the persistent area holds the G real ones
      float *dst = red_o + ((i64)wt * RED_ROWS + row) * D;
#pragma unroll
      for (int nt = 0; nt < D / 8; nt++) {
        dst[vcol(nt, 2 * j)] = o[i][nt][2 * r];
        dst[vcol(nt, 2 * j + 1)] = o[i][nt][2 * r + 1];
      }
      if (j == 0) red_m[wt * RED_ROWS + row] = m[i][r], red_l[wt * RED_ROWS + row] = l[i][r];
    }
  team_sync();

  for (int i = threadIdx.x; i < G * D; i += TEAM) {
    const int r = i / D, d = i % D;
    float ms = -INFINITY;
#pragma unroll
    for (int w = 0; w < WARPS_T; w++) ms = fmaxf(ms, red_m[w * RED_ROWS + r]);
    const float mref = ms == -INFINITY ? 0.0f : ms;
    float acc = 0.0f, lsum = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS_T; w++) {
      const float f = fast_exp2(red_m[w * RED_ROWS + r] - mref);
      acc += f * red_o[((i64)w * RED_ROWS + r) * D + d];
      lsum += f * red_l[w * RED_ROWS + r];
    }
    const i64 row = part_row(b, h, r);
    if (ns == 1) {
      if (STEP && bt.sinks) lsum += sink_term(bt, h, r, mref);
      if (row_real(bt, b, r)) OT::store(out, io_row(bt, b, h, r) * D + d, lsum > 0.0f ? acc / lsum : 0.0f);
    } else {
      wk.part_o[(row * wk.max_splits + split) * D + d] = acc;
      if (d == 0) {
        wk.part_ml[(row * wk.max_splits + split) * 2] = ms;
        wk.part_ml[(row * wk.max_splits + split) * 2 + 1] = lsum;
      }
    }
  }
}

// The last split of this (row, KV head) to finish merges all of them (combine.cu), with
// scratch shared memory wsm; s_last is the CTA's shared verdict.
__device__ __forceinline__ void merge_splits(const qg_work &wk, const qg_batch &bt, int b, int h, int ns, void *out, float *wsm, int &s_last) {
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
    combine_group<THREADS>(wk, bt, b, h, ns, out, wsm, 0, G);
  }
}

#if QG_PERSIST
// The persistent attend (plan persist > 0, QGEN_TUNE persist=N; one-token modules). Grid:
// one CTA a resident slot. The work is the same shares as the one-wave
// kernel's, only more of them (runtime/gpu.c: N times the splits, at most QG_MAX_SPLITS), so
// the bits do not depend on which CTA takes which share: each writes its own partial and the
// last of a list's merges them in split order. Share i (of n_rows x N_KV x max_splits, the
// split outermost, so that the slots' first claims cover every list) is split i / (n_rows x
// N_KV) of list i % (n_rows x N_KV); the producer claims them one by one from a counter
// (wk.ticket past the lists' tickets; the last CTA to run out zeroes it for the next launch),
// skips the splits a list does not have, stages the share's queries into one of two buffers
// and hands the share to the consumers through a two-slot mailbox (mbarriers pfull /
// pempty). The ring runs on across shares (consume_step and produce take the sub-tiles it
// carried before), so while the consumers finish and merge one share the producer already
// copies the next: the ring stays full, and the next share's start (claim, length, list
// count, page table) overlaps the end of the last. The consumers take a list's last ticket
// as the one-wave kernel does, but merge the lists they won (a bit each in `won`) only once
// the shares have run out: inside the loop, the merge's registers beside the loop's spilled
// (ptxas, q4_0 and q8_0 at 96 registers).
struct pshare {
  share sh;
  int b, h, split, ns; // b < 0: no more shares
};
constexpr int PBOX = QGEN_PERSIST_BOX; // the mailbox: two shares, four mbarriers
static_assert(2 * sizeof(pshare) + 4 * sizeof(u64) <= PBOX && sizeof(pshare) % 8 == 0, "the mailbox fits its bytes");

__device__ __forceinline__ void attend_persistent(const qg_cache &c, const qg_work &wk, const qg_batch &bt, const void *q, void *out,
                                                  int dense, int bulk, u8 *smem, u64 *full, u64 *empty) {
  // [q buffer 0 | q buffer 1 | mailbox | (to a 128-byte line) ring | merge area | weights]
  u8 *qbuf = smem;
  pshare *box = (pshare *)(smem + 2 * Q_BYTES);
  u64 *pfull = (u64 *)(box + 2), *pempty = pfull + 2;
  u8 *stages = smem + 2 * Q_BYTES + PBOX;
  stages += (128 - (smem_u32(stages) & 127)) & 127;
  float *red_o = (float *)(stages + STAGES * STAGE), *red_m = red_o + WARPS_T * G * D, *red_l = red_m + WARPS_T * G;
  float *wsm = red_l + WARPS_T * G;           // the last split's merge weights: G x QG_MAX_SPLITS
  u32 *won = (u32 *)(wsm + G * QG_MAX_SPLITS); // [QGEN_MAX_BATCH x N_KV bits]: the lists it merges
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, j = lane & 3;
  if (threadIdx.x == 0) {
    for (int s = 0; s < NCHUNK; s++) mbar_init(&full[s], 32), mbar_init(&empty[s], CH * 32 * WARPS_M);
    for (int s = 0; s < 2; s++) mbar_init(&pfull[s], 32), mbar_init(&pempty[s], TEAM);
    mbar_init_fence();
  }
  for (int i = threadIdx.x; i < QGEN_MAX_BATCH * N_KV / 32; i += THREADS) won[i] = 0;
  constexpr int PAD = (MT * 16 - G) * Q_SROW / 16; // 16-byte words of a staged copy's padding rows
  if (warp < NC) // the padding rows of each buffer's NQ copies, zero for good
    for (int i = threadIdx.x; i < 2 * NQ * PAD; i += TEAM)
      *(uint4 *)(qbuf + i / (NQ * PAD) * Q_BYTES + i / PAD % NQ * MT * 16 * Q_SROW + G * Q_SROW + 16 * (i % PAD)) = make_uint4(0, 0, 0, 0);
  __syncthreads();
  int J = 0; // sub-tiles the ring carried before the current share
  if (warp == NC) {
    const int lists = bt.n * N_KV, total = lists * wk.max_splits;
    int *claim = wk.ticket + QGEN_MAX_BATCH * N_KV; // [0] shares claimed, [1] CTAs run out
    if (!dense) grid_dep_wait(); // the lists and their counts are select's
    for (int k = 0;; k++) {
      int it, b = 0, h = 0, split = 0, ns = 1;
      i64 len = 0, L = 0, base = 0;
      for (;;) { // the next share a list has
        it = __shfl_sync(0xffffffffu, lane == 0 ? atomicAdd(claim, 1) : 0, 0);
        if (it >= total) break;
        split = it / lists, b = it % lists / N_KV, h = it % N_KV;
        len = c.seq_len[bt.seq[b]], L = list_pages(wk, bt, b, h, len, dense, base), ns = n_splits(L, wk.max_splits);
        if (split < ns) break;
      }
      if (k >= 2) mbar_wait(&pempty[k & 1], ((k >> 1) + 1) & 1); // the consumers are done with this slot's last share
      const share sh = {len, pages_of(len), L, L * split / ns, L * (split + 1) / ns, base};
      if (it < total) {
        u8 *qsm = qbuf + (k & 1) * Q_BYTES;
        load_group_q<32>(q, bt, b, h, [&](int r, int d, float x) {
          const u32 w = pack2<KT::BF>(x, 0.0f);
          *(u16 *)(qsm + r * Q_SROW + 2 * k_slot(d)) = (u16)w;
          if constexpr (NQ == 2) *(u16 *)(qsm + MT * 16 * Q_SROW + r * Q_SROW + 2 * k_slot(d)) = (u16)pack2_residue<true>(x, 0.0f, w);
        }, lane);
      }
      if (lane == 0) box[k & 1] = {sh, it < total ? b : -1, h, split, ns};
      mbar_arrive(&pfull[k & 1]); // (each lane: its query stores before)
      if (it >= total) break;
      const int seq = bt.seq[b];
      const int *list = dense ? nullptr : wk.list + ((i64)seq * N_KV + h) * c.pages_per_seq;
      const int n_sub = (int)(sh.p1 - sh.p0) * SPP;
      produce_any(c, list, seq, h, sh, n_sub, stages, full, empty, lane, bulk, J);
      J += n_sub;
    }
    if (lane == 0 && atomicAdd(claim + 1, 1) == (int)gridDim.x - 1) claim[0] = claim[1] = 0; // every CTA has run out
    asm volatile("cp.async.wait_all;\n" ::: "memory"); // (no copy outlives its thread)
    return;
  }
  const int wm = warp % WARPS_M, wt = warp / WARPS_M;
  const float sl2 = TENSOR_UNIT<KT> != 0.0f ? SCALE_LOG2 * (c.k_scale * TENSOR_UNIT<KT>) : SCALE_LOG2;
  i64 span[MW][2][2] = {}; // (engine modules only)
  for (int k = 0;; k++) {
    mbar_wait(&pfull[k & 1], (k >> 1) & 1);
    const pshare &ps = box[k & 1]; // (read where used: fewer registers across the loop)
    if (ps.b < 0) break;
    const share sh = ps.sh;
    const u8 *qsm = qbuf + (k & 1) * Q_BYTES;
    const qsrc qs(qsm, lane);
    float o[MW][D / 8][4], m[MW][2], l[MW][2];
    acc_init(o, m, l);
    const int n_sub = (int)(sh.p1 - sh.p0) * SPP;
    // this group's first sub-tile of the share: the ring's position decides
    consume_share((wt - J % WARPS_T + WARPS_T) % WARPS_T, n_sub, o, m, l, qs, qsm, stages, full, empty, sh, wm, lane, sl2, span, nullptr, J, c);
    row_sums(l);
    merge_groups(wk, bt, o, m, l, red_o, red_m, red_l, ps.b, ps.h, ps.split, ps.ns, out, g, j, wm, wt, warp);
    if (ps.ns > 1) { // the partial's ticket
      __threadfence();
      team_sync();
      const int bh = ps.b * N_KV + ps.h;
      if (threadIdx.x == 0 && atomicAdd(wk.ticket + bh, 1) == ps.ns - 1) wk.ticket[bh] = 0, won[bh >> 5] |= 1u << (bh & 31);
    }
    mbar_arrive(&pempty[k & 1]); // done with the slot and its queries
    J += n_sub;
  }
  team_sync(); // the lists this CTA won, each merged by the consumers in split order
  for (int w = 0; w < (bt.n * N_KV + 31) / 32; w++)
    for (u32 bits = won[w]; bits; bits &= bits - 1) {
      const int bh = w * 32 + __ffs(bits) - 1, b = bh / N_KV, h = bh % N_KV;
      i64 base;
      const int ns = n_splits(list_pages(wk, bt, b, h, c.seq_len[bt.seq[b]], dense, base), wk.max_splits);
      __threadfence();
      combine_group<TEAM, true>(wk, bt, b, h, ns, out, wsm, 0, G);
      team_sync(); // (wsm is the next one's)
    }
}
#endif

// registers sized by ptxas, or for QG_ATTEND_MIN_CTAS CTAs an SM (an explicit 1 is not the
// same: ptxas then took 121 registers for q4_0's attend, not 96)
#if QG_ATTEND_MIN_CTAS
#define QG_ATTEND_BOUNDS __launch_bounds__(QG_ATTEND_THREADS, QG_ATTEND_MIN_CTAS)
#else
#define QG_ATTEND_BOUNDS __launch_bounds__(QG_ATTEND_THREADS)
#endif
extern "C" __global__ void QG_ATTEND_BOUNDS qg_attend(qg_cache c, qg_work wk, qg_batch bt, const void *q, void *out, int dense,
                                                                          int bulk) {
  extern __shared__ __align__(16) u8 smem[];
  __shared__ __align__(8) u64 full[NCHUNK], empty[NCHUNK];
#if QG_PERSIST
  attend_persistent(c, wk, bt, q, out, dense, bulk, smem, full, empty);
  return;
#endif
  // q first, then the ring from the next 128-byte line (the plan allots the slack): the
  // 128 bytes that 8 lanes copy must land in one shared-memory line, or the L2 is asked
  // for their sectors twice (the paged read then ran at <= 0.92x the plain read on an H200)
  u8 *qsm = smem, *stages = smem + Q_BYTES;
  stages += (128 - (smem_u32(stages) & 127)) & 127;
  const int split = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, j = lane & 3;
  const int seq = bt.seq[b];
  const i64 len = c.seq_len[seq], n = pages_of(len);

  if (threadIdx.x == 0) { // every producer lane / every lane of the consuming group arrives
    for (int s = 0; s < NCHUNK; s++) mbar_init(&full[s], 32), mbar_init(&empty[s], CH * 32 * WARPS_M);
    mbar_init_fence(); // visible to bulk-copy completions too
  }
  // The group's queries in the k-slot permutation (rows >= G zero), staged by the
  // consumers; a sparse step stages them before waiting for select (they do not depend
  // on it; runtime/gpu.c launches attend to overlap select's tail). (Starting the producer
  // before this, with the consumers meeting on an mbarrier, was 2 % slower on quantized
  // caches on an H200.)
  if (warp < NC) {
    for (int qc = 0; qc < NQ; qc++)
      for (int i = threadIdx.x; i < (MT * 16 - G) * Q_SROW / 16; i += NC * 32)
        *(uint4 *)(qsm + qc * MT * 16 * Q_SROW + G * Q_SROW + 16 * i) = make_uint4(0, 0, 0, 0);
    load_group_q<NC * 32>(q, bt, b, h, [&](int r, int d, float x) {
      const u32 w = pack2<KT::BF>(x, 0.0f);
      *(u16 *)(qsm + r * Q_SROW + 2 * k_slot(d)) = (u16)w;
      if constexpr (NQ == 2) *(u16 *)(qsm + MT * 16 * Q_SROW + r * Q_SROW + 2 * k_slot(d)) = (u16)pack2_residue<true>(x, 0.0f, w);
    });
  }
  if (!dense) grid_dep_wait(); // the list and its count are select's
  __syncthreads();             // barriers initialised, q staged
  const int *list = dense ? nullptr : wk.list + ((i64)seq * N_KV + h) * c.pages_per_seq;
  i64 base;
  const i64 L = list_pages(wk, bt, b, h, len, dense, base);
  const int ns = n_splits(L, wk.max_splits);
  if (split >= ns) return; // the whole CTA: ns is the same for every thread
  const share sh = {len, n, L, L * split / ns, L * (split + 1) / ns, base};
  const int n_sub = (int)(sh.p1 - sh.p0) * SPP;

  float o[MW][D / 8][4], m[MW][2], l[MW][2];
  acc_init(o, m, l);
  const int wm = warp % WARPS_M, wt = warp / WARPS_M;

  // fp8 per-tensor scales (qtypes.cuh): K's in the score scale, V's on the output
  const float sl2 = TENSOR_UNIT<KT> != 0.0f ? SCALE_LOG2 * (c.k_scale * TENSOR_UNIT<KT>) : SCALE_LOG2;
  if (warp == NC) {
    produce_any(c, list, seq, h, sh, n_sub, stages, full, empty, lane, bulk, 0);
  } else {
    const qsrc q(qsm, lane); // SWAP: Q^T's B-fragments (unused otherwise)
    i64 span[MW][2][2]; // engine modules: the spans of the lane's rows of each m-tile
#pragma unroll
    for (int i = 0; i < MW; i++)
#pragma unroll
      for (int r = 0; r < 2; r++) {
        span[i][r][0] = 0, span[i][r][1] = len;
        if constexpr (STEP > 0) row_span(bt, b, (wm * MW + i) * 16 + g + 8 * r, len, span[i][r][0], span[i][r][1]);
      }
    consume_share(wt, n_sub, o, m, l, q, qsm, stages, full, empty, sh, wm, lane, sl2, span, list, 0, c);
  }
  row_sums(l);
  float *red_o = (float *)stages;                         // [WARPS_T][MT*16][D]
  float *red_m = red_o + WARPS_T * MT * 16 * D;           // [WARPS_T][MT*16]
  float *red_l = red_m + WARPS_T * MT * 16;               // [WARPS_T][MT*16]
  merge_groups(wk, bt, o, m, l, red_o, red_m, red_l, b, h, split, ns, out, g, j, wm, wt, warp);
  if (ns == 1 || MERGE_ROWS) return; // (qg_combine merges them)
  __shared__ int s_last;
  merge_splits(wk, bt, b, h, ns, out, (float *)stages, s_last);
}
