// extend.cu — a reuse step's page lists (QGEN_ATTEND_REUSE): each (row, KV head)'s last
// sparse selection in wk.list / wk.count, extended to the sequence's current length as
// ref/ref.c qgen_ref_extend_list does: entries at or past the sequence's pages dropped (a
// view's sequence may have shrunk), then every page after the list's last entry appended,
// so the list stays ascending and the pages begun since the selection are attended.
//
// Grid: (N_KV, batch rows), one warp a CTA, lane 0 doing the work: a list grows by about a
// page every BLOCK decode steps, so there is nothing to spread. attend, launched after it
// with a programmatic dependency, waits for this grid before it reads the lists.

extern "C" __global__ void qg_extend(qg_cache c, qg_work wk, qg_batch bt) {
  if (threadIdx.x != 0) return;
  const int h = blockIdx.x, seq = bt.seq[blockIdx.y];
  const i64 n = min(pages_of(c.seq_len[seq]), c.pages_per_seq), row = (i64)seq * N_KV + h; // (a view's lengths are unchecked)
  int *list = wk.list + row * c.pages_per_seq;
  i64 k = wk.count[row];
  while (k > 0 && list[k - 1] >= n) k--;
  for (i64 p = k > 0 ? list[k - 1] + 1 : 0; p < n; p++) list[k++] = (int)p;
  wk.count[row] = (int)k;
}
