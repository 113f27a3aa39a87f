// view.cu — the page bounds of a view over a caller's pool (qgen_view_update), from the K
// rows the engine has just written at a list of slots (slot = page * page_size + offset).
//
// Two launches: pass 0 empties (kmin +inf, kmax -inf) the bounds of every page whose
// offset-0 slot is listed, pass 1 merges every listed row's keys into its page's bounds,
// rounded outward to f16 as append's are (layout.h), so a page written in several steps or
// by several slots of one step ends with the bounds of all its keys. One warp per (slot,
// KV head); slots of one page may be in one launch, so the merge is an atomic compare-and-
// swap of two f16 bounds in one word. Negative slots (padding) and slots past the pool are
// skipped. K must be a 16-bit type (runtime/qgen.c refuses others).
// With 8-bit bounds and pages of the spec's block, pass 2 then writes each listed page's
// 8-bit row from its merged f16 bounds (append.cu's bounds_i8_row, by the slot's warp):
// once per run of listed slots in one page, so a prefill's page is converted once, not
// once a token (a page listed in two runs gets the same bytes twice). Pages of half a
// block keep no 8-bit rows: estimate reads their pairs' f16 bounds.

// The merged pair of f16 bounds in word w with the new pair x (want_max: upper bounds),
// ordered -0 < +0 like ref/ref.c.
__device__ __forceinline__ u32 merge_pair(u32 w, u32 x, bool want_max) {
  u32 r = 0;
#pragma unroll
  for (int k = 0; k < 2; k++) {
    const u16 a = (u16)(w >> 16 * k), b = (u16)(x >> 16 * k);
    const float fa = __half2float(__ushort_as_half(a)), fb = __half2float(__ushort_as_half(b));
    const bool b_before = fb < fa || (fb == fa && (b & 0x8000) && !(a & 0x8000));
    const bool a_before = fa < fb || (fa == fb && (a & 0x8000) && !(b & 0x8000));
    r |= (u32)((want_max ? a_before : b_before) ? b : a) << 16 * k;
  }
  return r;
}

__device__ __forceinline__ void merge_word(u32 *p, u32 x, bool want_max) {
  u32 old = *(volatile u32 *)p;
  for (;;) {
    const u32 nw = merge_pair(old, x, want_max);
    if (nw == old) return;
    const u32 seen = atomicCAS(p, old, nw);
    if (seen == old) return;
    old = seen;
  }
}

// Element d of a K row (16-bit types; the unit of a quantized K has this kernel unused).
template <typename TT> __device__ __forceinline__ float key_at(const u8 *row, int d) {
  if constexpr (TT::Q16) return TT::load(row, d);
  else return 0.0f;
}

extern "C" __global__ void __launch_bounds__(32 * QGEN_VIEW_SLOTS) qg_view(qg_cache c, const void *slots, i64 n, i64 n_pages, int slot_bytes,
                                                                         int pass) {
  const int h = blockIdx.y, lane = threadIdx.x & 31;
  const i64 i = (i64)blockIdx.x * QGEN_VIEW_SLOTS + (threadIdx.x >> 5);
  if (i >= n) return;
  auto slot = [&](i64 k) -> i64 { return slot_bytes == 8 ? ((const long long *)slots)[k] : ((const int *)slots)[k]; };
  const i64 s = slot(i);
  if (s < 0) return;
  const i64 page = s / c.page_size, off = s % c.page_size;
  if (page >= n_pages) return;
  u32 *bd = (u32 *)((__half *)c.bounds + (page * N_KV + h) * 2 * D);
  if (pass == 2) { // the last slot of its run in this page (the next is elsewhere, or none)
    if constexpr (BOUNDS_I8) {
      const i64 nx = i + 1 < n ? slot(i + 1) : -1;
      if (nx >= 0 && nx / c.page_size == page) return;
      __shared__ double so[QGEN_VIEW_SLOTS][2];
      const __half *b16 = (const __half *)bd;
      bounds_i8_row<32>([&](int d) { return __half2float(b16[d]); }, [&](int d) { return __half2float(b16[D + d]); },
                        c.bounds_i8 + (page * N_KV + h) * (i64)BOUNDS_I8_ROW, so[threadIdx.x >> 5], lane, [] { __syncwarp(); });
    }
    return;
  }
  if (pass == 0) {
    if (off == 0)
      for (int d2 = lane; d2 < D / 2; d2 += 32) bd[d2] = 0x7c007c00u, bd[D / 2 + d2] = 0xfc00fc00u;
    return;
  }
  const u8 *row = c.k + page * c.k_page + off * c.k_token + h * c.k_head;
  for (int d2 = lane; d2 < D / 2; d2 += 32) {
    const float x0 = key_at<KT>(row, 2 * d2), x1 = key_at<KT>(row, 2 * d2 + 1);
    // a NaN key is ignored: its pair half takes the empty bound, which merges to no change
    const u16 lo0 = x0 != x0 ? 0x7c00 : __half_as_ushort(__float2half_rd(x0)), lo1 = x1 != x1 ? 0x7c00 : __half_as_ushort(__float2half_rd(x1));
    const u16 hi0 = x0 != x0 ? 0xfc00 : __half_as_ushort(__float2half_ru(x0)), hi1 = x1 != x1 ? 0xfc00 : __half_as_ushort(__float2half_ru(x1));
    merge_word(bd + d2, (u32)lo0 | (u32)lo1 << 16, false);
    merge_word(bd + D / 2 + d2, (u32)hi0 | (u32)hi1 << 16, true);
  }
}
