// append.cu — write new K/V rows into their pages and keep the per-page key bounds.
//
// One CTA per (page touched by this call, KV head): it owns that page's rows and bounds,
// so no atomics are needed, and the same kernel serves decode (1 token per sequence) and
// filling a long context (thousands per sequence). Each warp writes whole rows: lane l
// holds elements l, l+32, ... of the row, which lets the q8_0/q4_0/q5_0 quantizers reduce a
// 32-value block with warp shuffles. Bounds are min/max over the keys *as given* (before
// quantization), rounded outward to f16; the call that writes a page's first token
// overwrites them, later calls min/max-merge (layout.h). With 8-bit bounds the CTA then
// writes its page's 8-bit row from the merged f16 bounds (bounds_i8_row: the arithmetic of
// qgen_ref_bounds_i8, in double, so the bytes are the reference's). The CTA of a sequence's
// first page on head 0 publishes the new length.
//
// qgen_append_decode (a.arrive set) writes one token per sequence at the length the device
// holds, so a captured graph replays as consecutive steps: the sequence's N_KV CTAs (one
// page each) all read that length, and the last of them to arrive publishes length + 1 once
// every one has read it. A sequence already at a.cap tokens is left as it is; its token is
// counted in a.dropped for qgen_sync to report.
// With a sketch (QG_SKETCH: two-stage selection over an f16/bf16 cache) each K row is also
// written in the sketch type, quantized from the row as stored (base/layout.h).

// The 8-bit row of one (page, KV head) from its f16 bounds lo(d), hi(d) (f16 values), by NT
// threads of ranks t (whose first warp finds the range; sync() orders them: the CTA for
// append, one warp for qg_view's pass 2); page is their shared scratch for offset and scale.
template <int NT, typename Lo, typename Hi, typename Sync>
__device__ __forceinline__ void bounds_i8_row(Lo lo, Hi hi, u8 *row, double *page, int t, Sync sync) {
  if (t < 32) { // the page's range: offset = min lo, top = max hi; all finite?
    float mn = INFINITY, mx = -INFINITY;
    bool fin = true;
    for (int d = t; d < D; d += 32) {
      mn = fminf(mn, lo(d)), mx = fmaxf(mx, hi(d));
      fin &= fabsf(lo(d)) < INFINITY && fabsf(hi(d)) < INFINITY;
    }
    for (int o = 16; o > 0; o >>= 1) {
      mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, o));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    }
    fin = __all_sync(0xffffffffu, fin);
    if (t == 0) {
      u32 so = 0x7e007e00u; // NaN offset and scale: no 8-bit form, the score is NaN
      double s = 0;         // and the codes 0
      if (fin) { // the smallest f16 scale with offset + 255 s >= top (exact in double)
        u16 sc = __half_as_ushort(__float2half_ru((float)(((double)mx - mn) / 255.0)));
        while (mn + 255.0 * __half2float(__ushort_as_half(sc)) < mx) sc++;
        s = __half2float(__ushort_as_half(sc));
        so = (u32)__half_as_ushort(__float2half_rn(mn + 0.0f)) | (u32)sc << 16; // + 0: a zero offset is +0
      }
      page[0] = mn, page[1] = s;
      *(uint4 *)(row + 2 * D) = make_uint4(so, 0, 0, 0);
    }
  }
  sync();
  const double off = page[0], s = page[1];
  for (int d = t; d < D; d += NT) {
    double cl = 0, ch = 0; // kmin code rounded down, kmax code rounded up (ref.c's steps)
    if (s > 0) {
      const double l = lo(d), u = hi(d);
      cl = fmin(fmax(floor((l - off) / s), 0.0), 255.0);
      ch = fmin(fmax(ceil((u - off) / s), 0.0), 255.0);
      while (cl > 0 && off + cl * s > l) cl--;
      while (ch < 255 && off + ch * s < u) ch++;
    }
    row[d] = (u8)cl;
    row[D + d] = (u8)ch;
  }
}

extern "C" __global__ void __launch_bounds__(QG_APPEND_THREADS) qg_append(qg_cache c, qg_append_args a) {
  constexpr int NW = QG_APPEND_THREADS / 32, E = D / 32;
  const int h = blockIdx.y, x = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (x >= a.work[a.n_seq]) return;
  int i = 0;
  while (a.work[i + 1] <= x) i++;
  const int seq = a.seq[i];
  const bool at_len = a.arrive != nullptr;
  const i64 start = at_len ? c.seq_len[seq] : a.start[i], end = start + a.n_new[i]; // read before this CTA arrives
  if (at_len && end > a.cap) { // every CTA of seq sees the same full length and leaves
    if (h == 0 && threadIdx.x == 0) atomicAdd(a.dropped + seq, 1);
    return;
  }
  const i64 lp = start / BLOCK + (x - a.work[i]); // logical page
  const i64 t0 = max(start, lp * BLOCK), t1 = min(end, (lp + 1) * BLOCK);
  const i64 phys = c.page_table[(i64)seq * c.pages_per_seq + lp];
  u8 *krows = c.k + (phys * N_KV + h) * (i64)(BLOCK * KT::ROW);
  u8 *vrows = c.v + (phys * N_KV + h) * (i64)(BLOCK * VT::ROW);

  float mn[E], mx[E];
#pragma unroll
  for (int e = 0; e < E; e++) mn[e] = INFINITY, mx[e] = -INFINITY;
  for (i64 t = t0 + warp; t < t1; t += NW) {
    const i64 in = ((a.row0[i] + (t - start)) * N_KV + h) * D;
    float xk[E], xv[E];
#pragma unroll
    for (int e = 0; e < E; e++) {
      xk[e] = IT::load(a.k_in, in + lane + 32 * e);
      xv[e] = IT::load(a.v_in, in + lane + 32 * e);
      mn[e] = fminf(mn[e], xk[e]);
      mx[e] = fmaxf(mx[e], xk[e]);
    }
    const i64 slot = t - lp * BLOCK;
    store_row_scaled<KT>(krows + slot * KT::ROW, xk, c.k_scale, lane);
#if QG_SKETCH
    { // two-stage selection's sketch: the QG_SK_TYPE form of the row as the cache holds it
      float xs[E];
#pragma unroll
      for (int e = 0; e < E; e++) xs[e] = KT::load(krows + slot * KT::ROW, lane + 32 * e); // this lane's own stores
      QG_SK_TYPE::store_row(c.sketch + ((phys * N_KV + h) * BLOCK + slot) * (i64)QG_SK_ROW, xs, lane);
    }
#endif
    store_row_scaled<VT>(vrows + slot * VT::ROW, xv, c.v_scale, lane);
  }
  if (at_len) {
    __syncthreads(); // every thread of this CTA has read start
    if (threadIdx.x == 0) {
      __threadfence(); // ... before the arrival that may let another CTA overwrite it
      if (atomicAdd(a.arrive + seq, 1) == N_KV - 1) {
        __threadfence();
        c.seq_len[seq] = (int)end;
        a.arrive[seq] = 0; // for the next launch
      }
    }
  } else if (h == 0 && x == a.work[i] && threadIdx.x == 0) {
    c.seq_len[seq] = (int)end;
  }

  if constexpr (SPARSE) {
    __shared__ float red[2][NW][D];
#pragma unroll
    for (int e = 0; e < E; e++) {
      red[0][warp][lane + 32 * e] = mn[e];
      red[1][warp][lane + 32 * e] = mx[e];
    }
    __syncthreads();
    __half *bd = (__half *)c.bounds + (phys * N_KV + h) * 2 * D;
    const bool fresh = t0 == lp * BLOCK; // this call writes the page's first token
    for (int d = threadIdx.x; d < D; d += QG_APPEND_THREADS) {
      float lo = red[0][0][d], hi = red[1][0][d];
      for (int w = 1; w < NW; w++) lo = fminf(lo, red[0][w][d]), hi = fmaxf(hi, red[1][w][d]);
      lo = __half2float(__float2half_rd(lo));
      hi = __half2float(__float2half_ru(hi));
      if (!fresh) lo = fminf(lo, __half2float(bd[d])), hi = fmaxf(hi, __half2float(bd[D + d]));
      bd[d] = __float2half_rn(lo);
      bd[D + d] = __float2half_rn(hi);
      if constexpr (BOUNDS_I8) red[0][0][d] = lo, red[1][0][d] = hi; // column d is this thread's
    }
    if constexpr (BOUNDS_I8) {
      __shared__ double page[2];
      __syncthreads();
      const float *lo = red[0][0], *hi = red[1][0];
      bounds_i8_row<QG_APPEND_THREADS>([&](int d) { return lo[d]; }, [&](int d) { return hi[d]; },
                                       c.bounds_i8 + (phys * N_KV + h) * (i64)BOUNDS_I8_ROW, page, threadIdx.x, [] { __syncthreads(); });
    }
  }
}
