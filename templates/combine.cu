// combine.cu — merge the split partials of attend.cu into the output.
//
// One CTA per (query head, batch row). With ns splits, partial s holds the unnormalised
// O_s, its running max m_s (base 2) and sum l_s; the result is
//   sum_s 2^(m_s - M) O_s / sum_s 2^(m_s - M) l_s,  M = max_s m_s,
// summed in split order, so the bits do not depend on scheduling. A row whose list fit one
// split was written by attend itself and is skipped here.

extern "C" __global__ void __launch_bounds__(QG_COMB_THREADS) qg_combine(qg_cache c, qg_work wk, qg_batch bt, void *out, int dense) {
  const int hq = blockIdx.x, b = blockIdx.y, h = hq / G;
  const int seq = bt.seq[b];
  const i64 L = dense ? pages_of(c.seq_len[seq]) : wk.count[(i64)seq * N_KV + h];
  const int ns = n_splits(L, wk.max_splits);
  if (ns == 1) return;
  const i64 row = (i64)b * N_HEAD + hq;
  const float *ml = wk.part_ml + row * wk.max_splits * 2;
  const float *po = wk.part_o + row * wk.max_splits * D;
  float ms = -INFINITY;
  for (int s = 0; s < ns; s++) ms = fmaxf(ms, ml[2 * s]);
  const float mref = ms == -INFINITY ? 0.0f : ms;
  float lsum = 0.0f;
  for (int s = 0; s < ns; s++) lsum += fast_exp2(ml[2 * s] - mref) * ml[2 * s + 1];
  for (int d = threadIdx.x; d < D; d += QG_COMB_THREADS) {
    float acc = 0.0f;
    for (int s = 0; s < ns; s++) acc += fast_exp2(ml[2 * s] - mref) * po[(i64)s * D + d];
    OT::store(out, row * D + d, lsum > 0.0f ? acc / lsum : 0.0f);
  }
}
