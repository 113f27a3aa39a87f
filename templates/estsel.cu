// estsel.cu — estimate and select of a sparse step in one launch: each list's estimate CTAs
// form one thread-block cluster, which then selects the list itself (sm_90).
//
// Grid (CL, N_KV, batch) in clusters of CL (runtime/gpu.c estsel_cluster: the most CTAs, up
// to 8 and at least one estimate round of pages each, that keep every list's cluster
// resident at once, and enough that the list fits the cluster's registers). Rank x
// estimates share x of the CL (estimate.cu: scores to wk.scores, the first radix digit
// counted into wk.hist); the cluster barrier then orders those global writes before the
// cluster reads them (release / acquire at cluster scope); the same CTAs then select the
// list by select.cu's cluster path, CTAs of QG_EST_THREADS threads holding up to
// QG_ESTSEL_REGS keys each. What this saves against estimate then select: select's launch,
// its wait for the whole estimate grid to drain, and its CTAs' start. What it costs: a list
// has at most 8 CTAs of estimate, where qg_estimate may spread it over a wave. The lists are
// the same bits as the two kernels': the select code is the same, and it breaks every tie
// by page index. A kernel of its own, not a mode of qg_estimate: in one body ptxas spilled
// the estimate loop (sm_90, 128 registers). Built only for sm_90 (the cluster target
// measured), where the plan sets QG_ESTSEL_REGS; elsewhere empty and never launched.

extern "C" __global__ void __launch_bounds__(QG_EST_THREADS, QG_EST_MIN_CTAS) qg_estsel(qg_cache c, qg_work wk, qg_batch bt, qgen_budget bg, const void *q) {
#if __CUDA_ARCH__ == 900 && QG_ESTSEL_REGS > 0
  __shared__ sel_smem sm;
  int CL, rank;
  cluster_place(CL, rank);
  estimate_r<1>(c, wk, bt, bg, q, rank, CL); // (a view of half-block pages takes the two launches)
  cluster_sync(); // the cluster's scores and first-digit counts are complete and visible
  select_list<true, sel_shape<QG_EST_THREADS, QG_ESTSEL_REGS, 8>>(c, wk, bt, bg, blockIdx.y, blockIdx.z, CL, rank, sm, nullptr);
#endif
}
