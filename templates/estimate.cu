// estimate.cu — Quest upper bound of every page of every (sequence, KV head).
//
// score(page) = max over the group's G query heads of sum_d (q>0 ? q*kmax : q<0 ? q*kmin : 0)
// (layout.h). The bounds are the only data read: 2*D f16 per page and head, ~1/BLOCK of
// the K cache, streamed once with vector loads. QG_EST_LPP lanes share a page (each holds
// E = D/LPP consecutive channels, 16 bytes of kmin and of kmax when E == 8), the group's
// queries sit in shared memory as f32, and a page's partial sums meet in LPP-wide shuffles.
// Grid: (pages_per_seq / QG_EST_PAGES, N_KV, batch); CTAs past a sequence's end return.

template <int E> __device__ __forceinline__ void load_halves(const __half *p, float (&out)[E]) {
  if constexpr (E % 8 == 0) {
#pragma unroll
    for (int i = 0; i < E; i += 8) {
      uint4 v = *(const uint4 *)(p + i);
      const __half2 *h = (const __half2 *)&v;
#pragma unroll
      for (int k = 0; k < 4; k++) out[i + 2 * k] = __low2float(h[k]), out[i + 2 * k + 1] = __high2float(h[k]);
    }
  } else if constexpr (E % 2 == 0) {
#pragma unroll
    for (int i = 0; i < E; i += 2) {
      __half2 h = *(const __half2 *)(p + i);
      out[i] = __low2float(h), out[i + 1] = __high2float(h);
    }
  } else {
#pragma unroll
    for (int i = 0; i < E; i++) out[i] = __half2float(p[i]);
  }
}

extern "C" __global__ void __launch_bounds__(QG_EST_THREADS) qg_estimate(qg_cache c, qg_work wk, qg_batch bt, const void *q) {
  constexpr int LPP = QG_EST_LPP, E = D / LPP, PPW = 32 / LPP, NW = QG_EST_THREADS / 32;
  static_assert(D % LPP == 0 && 32 % LPP == 0, "estimate lanes per page");
  const int b = blockIdx.z, h = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int seq = bt.seq[b];
  const i64 n = pages_of(c.seq_len[seq]);
  const i64 p_begin = (i64)blockIdx.x * QG_EST_PAGES, p_end = min(n, p_begin + QG_EST_PAGES);
  if (p_begin >= n) return;

  __shared__ float qs[G][D];
  for (int i = threadIdx.x; i < G * D; i += QG_EST_THREADS)
    qs[i / D][i % D] = IT::load(q, ((i64)b * N_HEAD + h * G + i / D) * D + i % D);
  __syncthreads();

  const int sub = lane / LPP, l = lane % LPP;
  const int *pt = c.page_table + (i64)seq * c.pages_per_seq;
  float *out = wk.scores + ((i64)seq * N_KV + h) * c.pages_per_seq;
  // Every lane of a warp runs the same trip count (the shuffles need all of them).
  for (i64 p0 = p_begin + warp * PPW; p0 < p_end; p0 += NW * PPW) {
    const i64 p = p0 + sub;
    const bool ok = p < p_end;
    float kmin[E], kmax[E];
    if (ok) {
      const __half *bd = (const __half *)c.bounds + ((i64)pt[p] * N_KV + h) * 2 * D + l * E;
      load_halves<E>(bd, kmin);
      load_halves<E>(bd + D, kmax);
    } else {
#pragma unroll
      for (int e = 0; e < E; e++) kmin[e] = kmax[e] = 0.0f;
    }
    float score = -INFINITY;
#pragma unroll
    for (int g = 0; g < G; g++) {
      float s = 0.0f;
#pragma unroll
      for (int e = 0; e < E; e++) {
        const float qv = qs[g][l * E + e];
        s += qv > 0.0f ? qv * kmax[e] : qv < 0.0f ? qv * kmin[e] : 0.0f;
      }
#pragma unroll
      for (int o = LPP / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      score = g == 0 ? s : max_keep_nan(score, s);
    }
    if (ok && l == 0) out[p] = score;
  }
}
