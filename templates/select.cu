// select.cu — top-K pages of one (sequence, KV head) ∪ sink ∪ recent → compact list.
//
// Rules (base/layout.h): forced = pages of tokens [0, sink) ∪ pages of the last `recent` tokens
// ∪ the last page, which is the interval pair [0, sp) ∪ [rf, n); the non-forced pages are
// [sp, rf). K_eff = min(n, max(K, |forced|)); the list is forced ∪ the best K_eff - |forced|
// pages of [sp, rf) by score (ties to the lower index, NaN above every number), ascending.
// Two-stage selection runs it twice (runtime/gpu.c): first over the Quest scores keeping
// wk.cand times as many pages, then, after rescore.cu, over their exact scores.
//
// One CTA per (KV head, batch row) of QG_SEL_THREADS (1024) threads. Scores map to
// order-preserving u32 keys (score_key), copied once into shared memory (up to
// QG_SEL_SMEM_KEYS pages; longer lists read global memory on every pass). The kernel is
// latency-bound, so global reads go in batches: each thread issues all loads of a batch
// before it uses any (the histogram in one batch, keys 12 or 4 pages per thread at a time;
// lanes past the range load a clamped page instead of branching), one L2 round trip per
// batch rather than per element. Page indices are int (seq_len is). A 3-pass radix select
// (11, 11, 10 bits; it stops early once the crossing bin is taken whole) finds the
// threshold key and how many pages equal to it to take; the
// first pass's histogram was counted by estimate, the others aggregate their increments
// per warp (keys cluster, so mostly one atomic per warp) and a block-wide scan finds the
// crossing bin. The compaction gives each warp a contiguous segment of pages, walked 32 at
// a time with ballots (coalesced, conflict-free): one pass counts, block scans of the warp
// totals place the segments, one pass writes. The result does not depend on thread
// scheduling, nor its cost on how the scores are distributed.
// Short lists (n <= QG_SEL_THREADS * QG_SEL_REGS: 256K tokens at block 64) take a shorter path:
// thread t holds the keys of pages [t*r, t*r + r) in registers, loaded in the same round
// trip as the histogram; the radix passes count from registers and one block scan of
// (taken, tied) counts places every thread's pages. The step is then bound by its barriers,
// not by walking the list: six for the usual two passes (each pass's histogram and result
// live in their own shared memory, zeroed up front, and a block scan is one barrier), and
// pass 0's bins go from estimate's histogram straight into the registers of the threads
// that own them.
// Longer lists on sm_90 are shared by a cluster of CTAs (the runtime launches
// ceil(capacity / (QG_SEL_THREADS * QG_SEL_REGS)) of them for each list, at most 8 and no
// more than lets every list's cluster be resident at once): CTA rank c's thread t holds
// pages [(c*T + t)*r, ... + r), each CTA counts its keys into its own histogram, and every
// CTA sums the cluster's histograms through distributed shared memory, so all find the
// same threshold without another round trip; the CTAs' (taken, tied) totals place each
// CTA's pages the same way. A list that fits one CTA leaves the other ranks idle (they
// return at once), and one too long for the cluster takes rank 0's general path. The
// cluster code lives in its own instantiation (select_list<true>): inline in the one body
// it cost every short list 2-3 us on an H200. The same code serves qg_estsel (estsel.cu),
// whose clusters are estimate's CTAs of 128 threads: the CTA size, the keys a thread and
// the most ranks are the shape parameter (sel_shape).

// Keys of pages p + u * stride (u < N), each page clamped into [a, e) (not empty); callers
// ignore the clamped ones. The loads are unconditional, so all N issue before the first
// use: a batch costs one L2 round trip, not N.
template <int N>
__device__ __forceinline__ void fetch_keys(u32 (&key)[N], const float *sc, int p, int stride, int a, int e) {
  float s[N];
#pragma unroll
  for (int u = 0; u < N; u++) s[u] = sc[min(max(p + u * stride, a), e - 1)];
#pragma unroll
  for (int u = 0; u < N; u++) key[u] = score_key(s[u]);
}

// The kernel's shared memory; select_list takes it from qg_select, so its two
// instantiations share one allocation.
struct sel_smem {
  u32 hist[2048], hist2[1024]; // the counts of passes 1 and 2, zeroed before pass 0
  u32 s_bin[3], s_rem[3], s_tot; // each pass's result (its own, so no barrier guards reuse)
  bool s_all[3];
  int scan[64]; // two block scans' scratch
};

// The code below is for CTAs of T threads whose register path holds up to SMALL keys a
// thread (NKR registers), in clusters of at most NR ranks: qg_select's shape
// (QG_SEL_THREADS, QG_SEL_REGS, 8) or qg_estsel's (estsel.cu). NH: pass 0's bins a thread.
template <int T_, int SMALL_, int NR_> struct sel_shape {
  static constexpr int T = T_, SMALL = SMALL_, NR = NR_, NH = 2048 / T_, NKR = SMALL_ > 0 ? SMALL_ : 1;
  static_assert(T % 32 == 0 && T <= 1024 && 1024 % T == 0 && QG_SEL_BINS == 2048, "select: a CTA of 2^k warps, an 11-bit first digit");
  static_assert(NR >= 1 && NR <= 16, "a cluster of 1..16 ranks");
};
// Pages per thread per batch of loads (staging, passes): the most that keep 32 registers
// (two CTAs of 1024 per SM) without spills, for every sel= (ptxas 13.0, sm_80 and sm_90).
constexpr int SEL_STAGE = 12, SEL_PER = 4;

// Keys of the candidates [sp, rf) of the general path: from shared memory (staged) or
// global memory.
struct cand_keys {
  const float *sc;
  const u32 *keys;
  int sp, rf;
  bool smem;
  // Keys of pages p + u * stride (u < SEL_PER), clamped into [sp, rf) (not empty past the
  // k >= n return); the loops test which pages are candidates.
  __device__ __forceinline__ void load(u32 (&key)[SEL_PER], int p, int stride) const {
    if (smem) {
#pragma unroll
      for (int u = 0; u < SEL_PER; u++) key[u] = keys[min(max(p + u * stride, sp), rf - 1)];
    } else {
      fetch_keys(key, sc, p, stride, sp, rf);
    }
  }
};

// Pass 0: estimate counted the first digit; each thread takes the NH bins it owns
// (own0[i]: bin top0 - i) straight into registers and leaves zeros for the next step (all
// loads first, a register path's keys kr with them: a store between them would serialize
// the round trips), and zeroes the histograms of passes 1 and 2.
template <typename S>
__device__ __forceinline__ void take_pass0(u32 (&own0)[S::NH], u32 (&kr)[S::NKR], u32 *ghist, const float *sc, int top0, bool regs,
                                           bool multi, int n, int g0, int rp, int rank, int tid, sel_smem &sm) {
#pragma unroll
  for (int u = 0; u < S::NH; u++) own0[u] = __ldcg(ghist + top0 - u);
  if (regs) fetch_keys(kr, sc, g0 * rp, 1, 0, max(n, 1)); // clamped past n; sc[0] always exists
#pragma unroll
  for (int u = 0; u < S::NH; u++) sm.hist[u * S::T + tid] = 0;
  for (int i = tid; i < 1024; i += S::T) sm.hist2[i] = 0;
  if (multi) cluster_sync(); // every rank holds its bins before rank 0 clears them
  if (rank == 0)
#pragma unroll
    for (int u = 0; u < S::NH; u++) ghist[top0 - u] = 0;
}

// One pass of the radix select of the rem-th largest key among [sp, rf): narrows (prefix,
// mask) by the pass's digit and rem to the keys left to take in the crossing bin.
template <typename S>
__device__ __forceinline__ void radix_pass(int pass, u32 &prefix, u32 &mask, u32 &rem, const u32 (&own0)[S::NH], const u32 (&kr)[S::NKR],
                                           const cand_keys &ck, bool regs, bool multi, int CL, int g0, int rp, int tid, sel_smem &sm) {
  const int sp = ck.sp, rf = ck.rf;
  const int shift = pass == 0 ? 21 : pass == 1 ? 10 : 0, bits = pass == 2 ? 10 : 11, nbins = 1 << bits;
  // Each pass counts into its own zeroed histogram: no barrier between a pass's reads
  // and the next one's counts (in a cluster, other CTAs' reads of this one's).
  u32 *hp = pass == 1 ? sm.hist : sm.hist2;
  if (pass > 0) { // pass 0's histogram came from estimate
    if (regs) {
#pragma unroll
      for (int u = 0; u < S::SMALL; u++)
        if (u < rp) { // uniform: rp is the cluster's
          const int p = g0 * rp + u;
          hist_add(hp, p >= sp && p < rf && (kr[u] & mask) == prefix, (kr[u] >> shift) & (u32)(nbins - 1));
        }
    } else {
      for (int p0 = sp; p0 < rf; p0 += S::T * SEL_PER) { // the same trip count for every thread
        u32 key[SEL_PER];
        ck.load(key, p0 + tid, S::T);
#pragma unroll
        for (int u = 0; u < SEL_PER; u++)
          if (p0 + u * S::T < rf) { // uniform; a row past rf would count nothing
            const int p = p0 + u * S::T + tid;
            hist_add(hp, p < rf && (key[u] & mask) == prefix, (key[u] >> shift) & (u32)(nbins - 1));
          }
      }
    }
    if (multi) cluster_sync(); // the cluster's counts of this pass are complete
    else __syncthreads();
  }
  // Thread t owns nbins/T bins counted from the top (own[i] = bin top - i: this CTA's
  // count, or in a cluster's pass > 0 the sum over its CTAs); one block scan of the owned
  // sums finds the thread whose range holds the rem-th key.
  const int per = nbins / S::T, top = nbins - 1 - tid * per;
  const bool remote = multi && pass > 0;
  u32 own[S::NH], sum = 0;
#pragma unroll
  for (int i = 0; i < S::NH; i++) {
    if (pass == 0) {
      own[i] = own0[i]; // per == NH
    } else {
      u32 v[S::NR];
#pragma unroll
      for (int r = 0; r < S::NR; r++) v[r] = i < per && (r == 0 || (remote && r < CL)) ? (remote ? ld_cluster(hp + top - i, r) : hp[top - i]) : 0u;
      own[i] = 0;
#pragma unroll
      for (int r = 0; r < S::NR; r++) own[i] += v[r];
    }
    sum += own[i];
  }
  int total;
  const u32 before = (u32)block_exclusive_scan((int)sum, sm.scan, &total);
  if (before < rem && before + sum >= rem) {
    u32 acc = before;
#pragma unroll
    for (int i = 0; i < S::NH; i++) {
      const u32 cnt = own[i]; // 0 past per: never the crossing bin, as acc < rem
      if (acc + cnt >= rem) { sm.s_bin[pass] = (u32)(top - i); sm.s_rem[pass] = rem - acc; sm.s_all[pass] = rem - acc == cnt; break; }
      acc += cnt;
    }
  }
  __syncthreads();
  prefix |= sm.s_bin[pass] << shift;
  mask |= (u32)(nbins - 1) << shift;
  rem = sm.s_rem[pass];
  const bool all = sm.s_all[pass];
  // The crossing bin is taken whole: the answer is every key >= its lowest value, with
  // no pass left to run (after pass 1 almost always, as a 22-bit bin holds one key).
  // Keys below 2^21 do not occur (score_key), so prefix > 0 here.
  if (all && prefix > 0) {
    prefix -= 1;
    rem = 0;
  }
}

// The register path's list: one block scan of the packed counts (taken: forced or above
// thr; tied: candidates at thr; each < 2^15 as n < 32768) places the thread's pages after
// those before it; in a cluster the CTA's totals add those of the lower ranks. rem = how
// many keys equal to thr to take, lowest pages first.
template <typename S>
__device__ __forceinline__ void place(int *list, float *skip, const u32 (&kr)[S::NKR], u32 thr, u32 rem, int n, int sp, int rf, int g0,
                                      int rp, bool multi, int rank, int tid, sel_smem &sm) {
  int taken = 0, tied = 0;
#pragma unroll
  for (int u = 0; u < S::SMALL; u++) {
    const int p = g0 * rp + u;
    if (u < rp && p < n) {
      const bool cand = p >= sp && p < rf;
      taken += !cand || kr[u] > thr;
      tied += cand && kr[u] == thr;
    }
  }
  static_assert(S::T * S::SMALL < 32768, "packed counts");
  int tot;
  int before = block_exclusive_scan(taken << 16 | tied, sm.scan, &tot);
  if (multi) {
    if (tid == 0) sm.s_tot = (u32)tot;
    cluster_sync();
    for (int r = 0; r < rank; r++) before += (int)ld_cluster(&sm.s_tot, r);
  }
  u32 e = (u32)(before & 0xffff);
  int pos = (before >> 16) + (int)min(e, rem);
#pragma unroll
  for (int u = 0; u < S::SMALL; u++) {
    const int p = g0 * rp + u;
    if (u < rp && p < n) {
      const bool cand = p >= sp && p < rf, eq = cand && kr[u] == thr;
      if (!cand || kr[u] > thr || (eq && e < rem)) list[pos++] = p;
      else if (skip) skip[p] = __uint_as_float(NOT_CAND);
      e += eq;
    }
  }
  if (multi) cluster_sync(); // no CTA leaves while another may read its shared memory
}

// The general path's list. Warp w owns pages [lo, hi), walked 32 at a time. Pass A counts
// the keys above and equal to the threshold; the pages selected before the segment follow
// from the block scans of those counts and the forced intervals. Pass B writes.
template <typename S>
__device__ __forceinline__ void compact(int *list, float *skip, const cand_keys &ck, u32 thr, u32 rem, int n, int lane, int warp,
                                        sel_smem &sm) {
  constexpr int NWARP = S::T / 32;
  const int sp = ck.sp, rf = ck.rf;
  const int seg = ((n + NWARP - 1) / NWARP + 31) / 32 * 32, lo = min(n, warp * seg), hi = min(n, lo + seg);
  const u32 below = (1u << lane) - 1;
  int n_gt = 0, n_eq = 0;
  for (int p0 = lo; p0 < hi; p0 += 32 * SEL_PER) {
    u32 key[SEL_PER];
    ck.load(key, p0 + lane, 32);
#pragma unroll
    for (int u = 0; u < SEL_PER; u++)
      if (p0 + u * 32 < hi) { // uniform over the warp
        const int p = p0 + u * 32 + lane;
        const bool cand = p < hi && p >= sp && p < rf;
        n_gt += __popc(__ballot_sync(0xffffffffu, cand && key[u] > thr));
        n_eq += __popc(__ballot_sync(0xffffffffu, cand && key[u] == thr));
      }
  }
  int tot;
  const int gt_before = __shfl_sync(0xffffffffu, block_exclusive_scan(lane == 0 ? n_gt : 0, sm.scan, &tot), 0);
  const int eq_before = __shfl_sync(0xffffffffu, block_exclusive_scan(lane == 0 ? n_eq : 0, sm.scan + 32, &tot), 0);
  int pos = min(lo, sp) + max(0, lo - rf) + gt_before + (int)min((u32)eq_before, rem);
  u32 e = (u32)eq_before;
  for (int p0 = lo; p0 < hi; p0 += 32 * SEL_PER) {
    u32 key[SEL_PER];
    ck.load(key, p0 + lane, 32);
#pragma unroll
    for (int u = 0; u < SEL_PER; u++)
      if (p0 + u * 32 < hi) {
        const int p = p0 + u * 32 + lane;
        const bool cand = p < hi && p >= sp && p < rf;
        const bool eq = cand && key[u] == thr;
        const u32 eqm = __ballot_sync(0xffffffffu, eq);
        const bool sel = p < hi && (!cand || key[u] > thr || (eq && e + __popc(eqm & below) < rem));
        const u32 selm = __ballot_sync(0xffffffffu, sel);
        if (sel) list[pos + __popc(selm & below)] = p;
        else if (skip && cand) skip[p] = __uint_as_float(NOT_CAND);
        e += __popc(eqm);
        pos += __popc(selm);
      }
  }
}

// The list of one (row, KV head): CLUSTER = launched in clusters of CL > 1 CTAs, this one
// of rank `rank` (the single-CTA instantiation carries none of the cluster's code).
template <bool CLUSTER, typename S>
__device__ __forceinline__ void select_list(const qg_cache &c, const qg_work &wk, const qg_batch &bt, const qgen_budget &bg, int h, int b,
                                            int CL, int rank, sel_smem &sm, u32 *keys) {
  constexpr int T = S::T, SMALL = S::SMALL;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int seq = bt.seq[b];
  const int len = c.seq_len[seq], n = (int)pages_of(len); // page indices fit in int
  const i64 base = ((i64)seq * N_KV + h) * c.pages_per_seq;
  const float *sc = wk.scores + base;
  int *list = wk.list + base;

  grid_dep_launch(); // attend may start: it stages its queries, then waits for this grid
  grid_dep_wait();   // the scores and the histogram are estimate's
  u32 *ghist = wk.hist + ((i64)b * N_KV + h) * QG_SEL_BINS;
  // The same for every CTA of the cluster: registers of one CTA, of the cluster (the packed
  // counts below need n < 2^15), or rank 0's general path.
  const bool small = SMALL > 0 && n <= T * SMALL;
  const bool multi = CLUSTER && SMALL > 0 && CL > 1 && !small && n <= CL * T * SMALL && n < 32768;
  if (rank > 0 && !multi) return;
  const int R = multi ? CL : 1, g0 = multi ? rank * T + tid : tid; // CTAs sharing the list, this thread's place
  const bool regs = small || multi;
  const int rp = (n + R * T - 1) / (R * T); // pages a thread holds: [g0 * rp, g0 * rp + rp)
  u32 kr[S::NKR], own0[S::NH];
  take_pass0<S>(own0, kr, ghist, sc, 2047 - tid * S::NH, regs, multi, n, g0, rp, rank, tid, sm);

  i64 sp64, rf64;
  qgen_forced_ranges(&bg, len, BLOCK, &sp64, &rf64);
  const int sp = (int)sp64, rf = (int)rf64, nf = n == 0 ? 0 : sp + (n - rf);
  const int k = (int)qgen_budget_pages(&bg, n, nf, BLOCK);
  if (k >= n) {
    if (rank == 0) {
      if (tid == 0) wk.count[(i64)seq * N_KV + h] = k;
      for (int p = tid; p < n; p += T) list[p] = p;
    }
    return;
  }
  // Two-stage (wk.cand > 1): the first select keeps cand x the budget's non-forced pages
  // and marks the others NOT_CAND in wk.exact for the second (base/layout.h).
  const int kc = nf + (int)min((i64)(k - nf) * wk.cand, (i64)(rf - sp));
  float *skip = wk.exact ? wk.exact + base : nullptr;
  if (rank == 0 && tid == 0) wk.count[(i64)seq * N_KV + h] = kc;
  const bool smem_keys = keys && !regs && n <= QG_SEL_SMEM_KEYS; // (qg_estsel has none)
  if (smem_keys)
    for (int p0 = sp; p0 < rf; p0 += T * SEL_STAGE) {
      u32 key[SEL_STAGE];
      fetch_keys(key, sc, p0 + tid, T, sp, rf);
#pragma unroll
      for (int u = 0; u < SEL_STAGE; u++) // then the stores
        if (p0 + u * T + tid < rf) keys[p0 + u * T + tid] = key[u];
    }
  if (smem_keys) __syncthreads(); // (the histograms' zeros are ordered by later barriers)
  const cand_keys ck = {sc, keys, sp, rf, smem_keys};

  // Radix select of the (kc - nf)-th largest key among [sp, rf): 11 + 11 + 10 bits.
  u32 prefix = 0, mask = 0, rem = (u32)(kc - nf);
  if (rem == 0) prefix = 0xffffffffu; // nothing to pick: no key exceeds it, take none equal
  for (int pass = 0; rem > 0 && pass < 3; pass++) radix_pass<S>(pass, prefix, mask, rem, own0, kr, ck, regs, multi, CL, g0, rp, tid, sm);
  const u32 thr = prefix; // rem = how many keys equal to thr to take, lowest pages first (0: keys > thr)

  if (regs) place<S>(list, skip, kr, thr, rem, n, sp, rf, g0, rp, multi, rank, tid, sm);
  else compact<S>(list, skip, ck, thr, rem, n, lane, warp, sm);
}

extern "C" __global__ void __launch_bounds__(QG_SEL_THREADS) qg_select(qg_cache c, qg_work wk, qg_batch bt, qgen_budget bg) {
  extern __shared__ u32 keys[]; // [min(pages_per_seq, QG_SEL_SMEM_KEYS)]
  __shared__ sel_smem sm;
  int CL, rank;
  cluster_place(CL, rank); // a cluster shares one list
  using S = sel_shape<QG_SEL_THREADS, QG_SEL_REGS, 8>;
  if (CL > 1) select_list<true, S>(c, wk, bt, bg, blockIdx.x / CL, blockIdx.y, CL, rank, sm, keys);
  else select_list<false, S>(c, wk, bt, bg, blockIdx.x, blockIdx.y, 1, 0, sm, keys);
}
