// topp.cu — the top-p cut of two-stage selection (base/layout.h, sparse.rescore.top_p): of
// the budget's candidates the second select kept, only the fewest best whose estimated
// softmax mass reaches QG_TOP_P of all the candidates' mass.
//
// A candidate's estimated mass is exp(scale * (exact - top)), top the candidates' largest
// finite exact score (every candidate is a full page, so the reference's token count is a
// common factor); NaN candidates have none and are always kept. Masses are summed in 64-bit
// fixed point (2^-40 units), so every sum is exact and the result does not depend on thread
// scheduling. A 3-pass radix descent (11, 11, 10 bits of the score key, as select's) over
// mass histograms finds the threshold key: the kept candidates above it hold less than the
// target, with it at least; of those equal to it (equal keys, equal masses) the lowest pages
// are taken, as many as reach the target. No finite positive total, or kept candidates that
// cannot reach the target: the list stays as it is.
//
// One CTA of QG_SEL_THREADS per (KV head, batch row), after the second select (runtime/gpu.c).
// Each pass reads the list (coalesced) and its pages' exact scores (a gather, L2-resident).
// The compacted list is written to the step's Quest scores, dead after the first select, and
// copied back: an in-place compaction would let one warp overwrite entries another has not
// read.

constexpr int TP_T = QG_SEL_THREADS;
constexpr float TP_ONE = 0x1p40f; // fixed-point unit of mass
static_assert(TP_T % 32 == 0 && 1024 % TP_T == 0, "topp: a CTA of 2^k warps, whole bins a thread");
static_assert(QG_TOP_P > 0.0f && QG_TOP_P < 1.0f, "topp: only in units with a cut");

__device__ __forceinline__ u64 tp_mass(float s, float top) { // exact score -> fixed-point mass
  if (s != s || top == -INFINITY) return 0ull;
  return __float2ull_rn(expf(QG_SCALE * (s - top)) * TP_ONE); // <= 2^40: n * 2^40 < 2^64
}

// Block-wide reductions (every thread gets the result; scratch: 32 slots, reusable after).
__device__ __forceinline__ u64 tp_sum(u64 v, u64 *scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  u64 t = 0;
  for (int w = 0; w < TP_T / 32; w++) t += scratch[w];
  __syncthreads();
  return t;
}
__device__ __forceinline__ float tp_max(float v, float *scratch) {
  v = warp_max(v);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  float t = -INFINITY;
  for (int w = 0; w < TP_T / 32; w++) t = fmaxf(t, scratch[w]);
  __syncthreads();
  return t;
}

// Inclusive scan of v over the block in thread order; one barrier pair.
__device__ __forceinline__ u64 tp_scan(u64 v, u64 *scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  u64 x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const u64 y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) scratch[warp] = x;
  __syncthreads();
  u64 before = 0;
  for (int w = 0; w < warp; w++) before += scratch[w];
  __syncthreads();
  return before + x;
}

extern "C" __global__ void __launch_bounds__(QG_SEL_THREADS) qg_topp(qg_cache c, qg_work wk, qg_batch bt, qgen_budget bg) {
  __shared__ u64 hist[2048];
  __shared__ u64 red[32];
  __shared__ u32 s_bin;
  __shared__ u64 s_above;
  const int h = blockIdx.x, b = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  grid_dep_launch(); // attend may start: it waits for this grid
  grid_dep_wait();   // the list is the second select's
  const int seq = bt.seq[b];
  const int len = c.seq_len[seq], n = (int)pages_of(len);
  i64 sp64, rf64;
  qgen_forced_ranges(&bg, len, BLOCK, &sp64, &rf64);
  const int sp = (int)sp64, rf = (int)rf64, nf = n == 0 ? 0 : sp + (n - rf);
  if (qgen_budget_pages(&bg, n, nf, BLOCK) >= n) return; // every page listed: nothing was ranked
  const i64 base = ((i64)seq * N_KV + h) * c.pages_per_seq;
  const float *ex = wk.exact + base;
  int *list = wk.list + base, *out = (int *)(wk.scores + base);
  const int kc = wk.count[(i64)seq * N_KV + h];

  // The candidates' top score and total mass (non-candidates hold NOT_CAND).
  float top = -INFINITY;
  for (int p = sp + tid; p < rf; p += TP_T) {
    const float s = ex[p];
    if (__float_as_uint(s) != NOT_CAND && s == s) top = fmaxf(top, s);
  }
  top = tp_max(top, (float *)red);
  u64 part = 0;
  for (int p = sp + tid; p < rf; p += TP_T) {
    const float s = ex[p];
    if (__float_as_uint(s) != NOT_CAND) part += tp_mass(s, top);
  }
  const u64 total = tp_sum(part, red);
  const u64 need = (u64)ceil((double)QG_TOP_P * (double)total); // cum >= p * total, in integers
  // What the kept candidates hold; the cut applies only if they reach the target.
  part = 0;
  for (int i = tid; i < kc; i += TP_T) {
    const int p = list[i];
    if (p >= sp && p < rf) part += tp_mass(ex[p], top);
  }
  if (total == 0 || tp_sum(part, red) < need) return;

  // Radix descent: the threshold key and the mass still to take at it.
  u32 prefix = 0, mask = 0;
  u64 rem = need;
  for (int pass = 0; pass < 3; pass++) {
    const int shift = pass == 0 ? 21 : pass == 1 ? 10 : 0, nbins = pass == 2 ? 1024 : 2048;
    for (int i = tid; i < 2048; i += TP_T) hist[i] = 0;
    __syncthreads();
    for (int i = tid; i < kc; i += TP_T) {
      const int p = list[i];
      if (p < sp || p >= rf) continue;
      const float s = ex[p];
      const u32 key = score_key(s);
      const u64 w = tp_mass(s, top);
      if ((key & mask) == prefix && w) atomicAdd((unsigned long long *)&hist[(key >> shift) & (u32)(nbins - 1)], (unsigned long long)w);
    }
    __syncthreads();
    // Thread t owns bins [top_t - per + 1, top_t], counted from the highest bin down.
    const int per = nbins / TP_T, hi = nbins - 1 - tid * per;
    u64 own = 0;
    for (int i = 0; i < per; i++) own += hist[hi - i];
    const u64 incl = tp_scan(own, red), before = incl - own;
    if (before < rem && incl >= rem) {
      u64 acc = before;
      for (int i = 0; i < per; i++) {
        if (acc + hist[hi - i] >= rem) {
          s_bin = (u32)(hi - i), s_above = acc;
          break;
        }
        acc += hist[hi - i];
      }
    }
    __syncthreads();
    prefix |= s_bin << shift;
    mask |= (u32)(nbins - 1) << shift;
    rem -= s_above;
    __syncthreads(); // s_bin, s_above and hist are rewritten by the next pass
  }
  const u32 thr = prefix; // keys above it are kept; of those equal, the lowest pages reaching rem
  // Every entry at thr has the same score, the inverse of score_key (thr is no NaN's: NaN has
  // no mass, so its bin never crosses), so the same mass: take the fewest reaching rem.
  const float sthr = __uint_as_float(thr & 0x80000000u ? thr & 0x7fffffffu : ~thr);
  const u64 wthr = tp_mass(sthr, top);

  // Compaction in list order: warp w owns positions [lo, hi), walked 32 at a time; pass A
  // counts (kept, tied) per warp, block scans place the segments, pass B writes.
  constexpr int NW = TP_T / 32;
  const int seg = ((kc + NW - 1) / NW + 31) / 32 * 32, lo = min(kc, warp * seg), hi = min(kc, lo + seg);
  const u32 below = (1u << lane) - 1;
  int n_keep = 0, n_tie = 0;
  for (int i0 = lo; i0 < hi; i0 += 32) {
    const int i = i0 + lane, p = i < hi ? list[i] : 0;
    const bool cand = i < hi && p >= sp && p < rf;
    const u32 key = cand ? score_key(ex[p]) : 0u;
    n_keep += __popc(__ballot_sync(0xffffffffu, i < hi && (!cand || key > thr)));
    n_tie += __popc(__ballot_sync(0xffffffffu, cand && key == thr));
  }
  int keep_tot, tie_tot;
  const int keep_before = __shfl_sync(0xffffffffu, block_exclusive_scan(lane == 0 ? n_keep : 0, (int *)red, &keep_tot), 0);
  __syncthreads(); // the scan's scratch is read again below
  const int tie_before = __shfl_sync(0xffffffffu, block_exclusive_scan(lane == 0 ? n_tie : 0, (int *)red, &tie_tot), 0);
  const int take = wthr ? (int)min((u64)tie_tot, (rem + wthr - 1) / wthr) : tie_tot;
  int pos = keep_before + min(tie_before, take), e = tie_before;
  for (int i0 = lo; i0 < hi; i0 += 32) {
    const int i = i0 + lane, p = i < hi ? list[i] : 0;
    const bool cand = i < hi && p >= sp && p < rf;
    const u32 key = cand ? score_key(ex[p]) : 0u;
    const bool tie = cand && key == thr;
    const u32 tiem = __ballot_sync(0xffffffffu, tie);
    const bool sel = i < hi && (!cand || key > thr || (tie && e + __popc(tiem & below) < take));
    const u32 selm = __ballot_sync(0xffffffffu, sel);
    if (sel) out[pos + __popc(selm & below)] = p;
    e += __popc(tiem);
    pos += __popc(selm);
  }
  __syncthreads(); // every entry is read before the copy overwrites the list
  const int m = keep_tot + take;
  for (int i = tid; i < m; i += TP_T) list[i] = out[i];
  if (tid == 0) wk.count[(i64)seq * N_KV + h] = m;
}
