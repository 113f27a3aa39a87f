// combine.cu — merge the split partials of attend.cu into the output.
//
// With ns splits of one (batch row, KV head), partial s holds for each of the G query heads
// the unnormalised O_s, its running max m_s (base 2) and sum l_s; the result is
//   sum_s 2^(m_s - M) O_s / sum_s 2^(m_s - M) l_s,   M = max_s m_s,
// summed in split order, so the bits do not depend on which CTA finishes last.
//
// This is not a separate launch: attend's CTAs take a ticket when their partial is written
// and the CTA that draws the last one runs combine_group (the threadFenceReduction pattern),
// which saves a kernel launch and its latency per step. The ticket is reset by that CTA, so
// the next step (or a graph replay) starts from zero. Partials are read with __ldcg: they
// were written by other SMs and must not come from this SM's L1.

// All THREADS threads of the CTA call it, with scratch shared memory for G * ns floats;
// writes out rows b*N_HEAD + h*G .. + G-1. Warps first turn each head's (m_s, l_s) into
// normalised weights; then each thread sums four channels of one head over the splits,
// 16-byte loads several splits deep (the merge must not be a chain of L2 round trips).
template <int THREADS>
__device__ __forceinline__ void combine_group(const qg_work &wk, int b, int h, int ns, void *out, float *wsm) {
  constexpr int NWARP = THREADS / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const i64 row0 = (i64)b * N_HEAD + h * G;
  for (int r = warp; r < G; r += NWARP) {
    const float *ml = wk.part_ml + (row0 + r) * wk.max_splits * 2;
    float ms = -INFINITY;
    for (int s = lane; s < ns; s += 32) ms = fmaxf(ms, __ldcg(ml + 2 * s));
    ms = warp_max(ms);
    const float mref = ms == -INFINITY ? 0.0f : ms;
    float lsum = 0.0f;
    for (int s = lane; s < ns; s += 32) {
      const float f = fast_exp2(__ldcg(ml + 2 * s) - mref);
      wsm[r * ns + s] = f;
      lsum += f * __ldcg(ml + 2 * s + 1);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) lsum += __shfl_xor_sync(0xffffffffu, lsum, o);
    const float inv = lsum > 0.0f ? 1.0f / lsum : 0.0f;
    for (int s = lane; s < ns; s += 32) wsm[r * ns + s] *= inv;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < G * (D / 4); i += THREADS) {
    const int r = i / (D / 4), d = (i % (D / 4)) * 4;
    const float4 *po = (const float4 *)(wk.part_o + (row0 + r) * wk.max_splits * D + d);
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 8
    for (int s = 0; s < ns; s++) {
      const float w = wsm[r * ns + s];
      const float4 v = __ldcg(po + (i64)s * (D / 4));
      acc.x += w * v.x, acc.y += w * v.y, acc.z += w * v.z, acc.w += w * v.w;
    }
    const i64 o = (row0 + r) * D + d;
    OT::store(out, o, acc.x), OT::store(out, o + 1, acc.y), OT::store(out, o + 2, acc.z), OT::store(out, o + 3, acc.w);
  }
}
