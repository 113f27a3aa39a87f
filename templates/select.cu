// select.cu — top-K pages of one (sequence, KV head) ∪ sink ∪ recent → compact list.
//
// Rules (layout.h): forced = pages of tokens [0, sink) ∪ pages of the last `recent` tokens
// ∪ the last page, which is the interval pair [0, sp) ∪ [rf, n); the non-forced pages are
// [sp, rf). K_eff = min(n, max(K, |forced|)); the list is forced ∪ the best K_eff - |forced|
// pages of [sp, rf) by score (ties to the lower index, NaN above every number), ascending.
//
// One CTA per (KV head, batch row). Scores map to order-preserving u32 keys; a 4-pass radix
// select (8 bits a pass, a 256-bin shared histogram) finds the threshold key T and how many
// pages equal to T to take; one compaction pass then writes the list in ascending order
// (a block scan places each thread's run). No sort, no atomics outside shared memory, and
// the result does not depend on thread scheduling.

__device__ __forceinline__ u32 score_key(float s) {
  if (s != s) return 0xffffffffu;           // NaN first
  u32 u = s == 0.0f ? 0u : __float_as_uint(s); // -0 ranks as +0
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The budget in pages (layout.c qgen_budget_pages).
__device__ __forceinline__ i64 budget_pages(const qg_budget &bg, i64 n, i64 nf) {
  i64 k = n;
  if (bg.mode == 1) k = (i64)ceil(bg.coverage * (double)n);
  else if (bg.mode == 2) k = (bg.tokens + BLOCK - 1) / BLOCK;
  k = max(k, nf);
  return min(k, n);
}

extern "C" __global__ void __launch_bounds__(QG_SEL_THREADS) qg_select(qg_cache c, qg_work wk, qg_batch bt, qg_budget bg) {
  constexpr int T = QG_SEL_THREADS, RUN = QG_SEL_RUN;
  const int h = blockIdx.x, b = blockIdx.y, tid = threadIdx.x;
  const int seq = bt.seq[b];
  const i64 len = c.seq_len[seq], n = pages_of(len), base = ((i64)seq * N_KV + h) * c.pages_per_seq;
  const float *sc = wk.scores + base;
  int *list = wk.list + base;

  const i64 sp = pages_of(min(bg.sink, len));
  i64 rf = bg.recent > 0 ? max((i64)0, len - bg.recent) / BLOCK : n - 1;
  rf = min(rf, n - 1);
  if (rf < sp) rf = sp;
  const i64 nf = n == 0 ? 0 : sp + (n - rf);
  const i64 k = budget_pages(bg, n, nf);
  if (tid == 0) wk.count[(i64)seq * N_KV + h] = (int)k;
  if (k >= n) {
    for (i64 p = tid; p < n; p += T) list[p] = (int)p;
    return;
  }

  // Radix select of the (k - nf)-th largest key among [sp, rf).
  __shared__ u32 hist[256];
  __shared__ u32 s_bin, s_rem;
  __shared__ int scan[33];
  u32 prefix = 0, mask = 0, rem = (u32)(k - nf);
  if (rem == 0) prefix = 0xffffffffu; // nothing to pick: no key exceeds it, take none equal
  for (int shift = 24; rem > 0 && shift >= 0; shift -= 8) {
    for (int i = tid; i < 256; i += T) hist[i] = 0;
    __syncthreads();
    for (i64 p = sp + tid; p < rf; p += T) {
      const u32 key = score_key(sc[p]);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (tid < 32) { // warp 0: lane l owns bins 255-8l .. 248-8l, counted from the top
      u32 cnt[8], sum = 0;
#pragma unroll
      for (int i = 0; i < 8; i++) cnt[i] = hist[255 - 8 * tid - i], sum += cnt[i];
      u32 incl = sum;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        u32 y = __shfl_up_sync(0xffffffffu, incl, o);
        if (tid >= o) incl += y;
      }
      const u32 excl = incl - sum;
      if (excl < rem && incl >= rem) { // the crossing bin is in this lane
        u32 acc = excl;
        for (int i = 0; i < 8; i++) {
          if (acc + cnt[i] >= rem) { s_bin = 255 - 8 * tid - i; s_rem = rem - acc; break; }
          acc += cnt[i];
        }
      }
    }
    __syncthreads();
    prefix |= s_bin << shift;
    mask |= 255u << shift;
    rem = s_rem;
    __syncthreads();
  }
  const u32 thr = prefix; // rem = how many keys equal to thr to take, lowest pages first

  // Compaction: each thread takes a run of RUN pages; a block scan places the runs.
  i64 out = 0, eq_seen = 0;
  for (i64 p0 = 0; p0 < n; p0 += (i64)T * RUN) {
    const i64 lo = p0 + (i64)tid * RUN, hi = min(n, lo + RUN);
    int n_eq = 0;
    for (i64 p = lo; p < hi; p++)
      if (p >= sp && p < rf && score_key(sc[p]) == thr) n_eq++;
    int tot_eq;
    int eq_before = block_exclusive_scan(n_eq, scan, &tot_eq) + (int)eq_seen;
    int n_sel = 0, e = eq_before;
    for (i64 p = lo; p < hi; p++) {
      bool sel = p < sp || p >= rf;
      if (!sel) {
        const u32 key = score_key(sc[p]);
        sel = key > thr || (key == thr && (u32)e++ < rem);
      }
      n_sel += sel;
    }
    int tot_sel;
    int pos = block_exclusive_scan(n_sel, scan, &tot_sel) + (int)out;
    e = eq_before;
    for (i64 p = lo; p < hi; p++) {
      bool sel = p < sp || p >= rf;
      if (!sel) {
        const u32 key = score_key(sc[p]);
        sel = key > thr || (key == thr && (u32)e++ < rem);
      }
      if (sel) list[pos++] = (int)p;
    }
    out += tot_sel;
    eq_seen += tot_eq;
  }
}
