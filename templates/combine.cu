// combine.cu — merge the split partials of attend.cu into the output.
//
// With ns splits of one (batch row, KV head), partial s holds for each of the G query heads
// the unnormalised O_s, its running max m_s (base 2) and sum l_s; the result is
//   sum_s 2^(m_s - M) O_s / sum_s 2^(m_s - M) l_s,   M = max_s m_s,
// summed in split order, so the bits do not depend on which CTA finishes last, nor on
// which of the two places below merges (each row's arithmetic is the same code).
//
// Where: attend's CTAs take a ticket when their partial is written and the CTA that draws
// the last one runs combine_group (the threadFenceReduction pattern), which saves a kernel
// launch and its latency per step. The ticket is reset by that CTA, so the next step (or a
// graph replay) starts from zero. That one CTA's merge is a chain of L2 round trips whose
// length grows with the rows: where the plan sets merge_rows (engine modules of >= 16 query
// rows), attend leaves the partials and qg_combine merges them, merge_rows rows a CTA, every
// (row block, KV head, batch row) at once. Partials are read with __ldcg: they were written
// by other SMs and must not come from this SM's L1.

// THREADS threads of the CTA (those of ids below THREADS; the whole CTA where CONS is
// false, else they meet on named barrier 1) call it for rows [r0, r1) of the group, with
// scratch shared memory for (r1 - r0) * ns floats; writes the output rows of the real rows
// among them (io_row). Warps first turn each head's (m_s, l_s) into normalised weights
// (every split's pair loaded at once); then each thread sums four channels of one head over
// the splits, 16-byte loads 16 splits deep: each L2 round trip here is on the step's
// critical path. The first 16 splits of a thread's first four channels do not depend on the
// weights: they are loaded before them, so that round trip overlaps the weights'.
template <int THREADS, bool CONS = false>
__device__ __forceinline__ void combine_group(const qg_work &wk, const qg_batch &bt, int b, int h, int ns, void *out, float *wsm, int r0,
                                              int r1) {
  constexpr int NWARP = THREADS / 32, MW = (QG_MAX_SPLITS + 31) / 32, DEEP = 16;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const i64 row0 = part_row(b, h, r0);
  const int nr = r1 - r0;
  // splits s0 .. s0 + DEEP - 1 of the four channels i (of row r0 + i / (D / 4)) of the partials (0 past ns)
  auto load_batch = [&](int i, int s0, float4 (&v)[DEEP]) {
    const float4 *po = (const float4 *)(wk.part_o + (row0 + i / (D / 4)) * wk.max_splits * D + (i % (D / 4)) * 4);
#pragma unroll
    for (int u = 0; u < DEEP; u++) v[u] = s0 + u < ns ? __ldcg(po + (i64)(s0 + u) * (D / 4)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  };
  float4 v[DEEP];
  if ((int)threadIdx.x < nr * (D / 4)) load_batch(threadIdx.x, 0, v);
  for (int r = warp; r < nr; r += NWARP) {
    const float2 *ml = (const float2 *)(wk.part_ml + (row0 + r) * wk.max_splits * 2);
    float2 mlv[MW];
#pragma unroll
    for (int k = 0; k < MW; k++) mlv[k] = lane + 32 * k < ns ? __ldcg(ml + lane + 32 * k) : make_float2(-INFINITY, 0.0f);
    float ms = -INFINITY;
#pragma unroll
    for (int k = 0; k < MW; k++) ms = fmaxf(ms, mlv[k].x);
    ms = warp_max(ms);
    const float mref = ms == -INFINITY ? 0.0f : ms;
    float f[MW], lsum = 0.0f;
#pragma unroll
    for (int k = 0; k < MW; k++) f[k] = fast_exp2(mlv[k].x - mref), lsum += f[k] * mlv[k].y;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) lsum += __shfl_xor_sync(0xffffffffu, lsum, o);
    if (STEP && bt.sinks) lsum += sink_term(bt, h, r0 + r, mref);
    const float inv = lsum > 0.0f ? 1.0f / lsum : 0.0f;
#pragma unroll
    for (int k = 0; k < MW; k++)
      if (lane + 32 * k < ns) wsm[r * ns + lane + 32 * k] = f[k] * inv;
  }
  if constexpr (CONS) asm volatile("bar.sync 1, %0;\n" ::"n"(THREADS) : "memory");
  else __syncthreads();
  for (int i = threadIdx.x; i < nr * (D / 4); i += THREADS) {
    const int r = i / (D / 4), d = (i % (D / 4)) * 4;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int s0 = 0; s0 < ns; s0 += DEEP) {
      if (s0 > 0 || i != (int)threadIdx.x) load_batch(i, s0, v); // all loads of the batch before any use
#pragma unroll
      for (int u = 0; u < DEEP; u++)
        if (s0 + u < ns) {
          const float w = wsm[r * ns + s0 + u];
          acc.x += w * v[u].x, acc.y += w * v[u].y, acc.z += w * v[u].z, acc.w += w * v[u].w;
        }
    }
    if (!row_real(bt, b, r0 + r)) continue;
    const i64 o = io_row(bt, b, h, r0 + r) * D + d;
    OT::store(out, o, acc.x), OT::store(out, o + 1, acc.y), OT::store(out, o + 2, acc.z), OT::store(out, o + 3, acc.w);
  }
}

// The merge as a launch of its own (plan merge_rows > 0): CTA (x, h, b) merges rows
// [x * MERGE_ROWS, + MERGE_ROWS) of (batch row b, KV head h), launched after attend (as
// its programmatic dependent where the step allows: the list's splits are known before
// attend ends, the partials only after). A list of one split was written by attend itself.
constexpr int MERGE_ROWS = QG_MERGE_ROWS;
#if QG_MERGE_ROWS // (jit/build.c names qg_combine among the unit's kernels exactly then)
constexpr int MERGE_THREADS = QG_MERGE_THREADS;
static_assert(MERGE_THREADS == (MERGE_ROWS * D / 4 + 31) / 32 * 32 && MERGE_THREADS <= 128,
              "a merge CTA: whole warps, a thread for four channels of each of its rows");
extern "C" __global__ void __launch_bounds__(MERGE_THREADS) qg_combine(qg_cache c, qg_work wk, qg_batch bt, void *out, int dense) {
  __shared__ float wsm[MERGE_ROWS * QG_MAX_SPLITS];
  const int h = blockIdx.y, b = blockIdx.z, r0 = blockIdx.x * MERGE_ROWS;
  const i64 len = c.seq_len[bt.seq[b]];
  i64 base;
  const int ns = n_splits(list_pages(wk, bt, b, h, len, dense, base), wk.max_splits);
  if (ns == 1 || r0 >= G) return;
  grid_dep_wait(); // attend's partials
  combine_group<MERGE_THREADS>(wk, bt, b, h, ns, out, wsm, r0, min(r0 + MERGE_ROWS, G));
}
#endif
