/* check_cases.c — the checks of `qgen check` on caches the check fills itself: append
 * (bytes), attend (dense and sparse outputs and lists), reuse, bits (determinism, full
 * budget == dense, graph replay), decode graph (append_decode + attend captured once and
 * replayed), steps (several query tokens a sequence, windows, sinks), each printing its
 * PASS/FAIL lines.
 */
#include <stdlib.h>
#include <string.h>

#include "harness/check_int.h"
#include "base/rng.h"

/* append: chunked GPU appends vs one reference append per sequence, byte for byte. */
void check_append(env *e, qgen_ctx *gc, qgen_ctx *cc, uint64_t seed) {
  const qgen_layout *L = qgen_ext_layout(gc);
  const int nb = 3;
  const int64_t lens[3] = {1000, 4100, 65};
  const int chunks[4] = {1, 7, 64, 4096};
  qgen_kv *g, *c;
  check_new_cache(gc, &g, nb, 4100);
  check_new_cache(cc, &c, nb, 4100);
  const int64_t np = qgen_kv_n_pages(g), pps = qgen_kv_pages_per_seq(g);
  int *perm = malloc(sizeof(int) * (size_t)np);
  for (int64_t i = 0; i < np; i++) perm[i] = (int)((i * 7 + 3) % np); /* np is not a multiple of 7 here */
  for (int s = 0; s < nb; s++) {
    API(qgen_kv_map(g, s, perm + s * pps, pps));
    API(qgen_kv_map(c, s, perm + s * pps, pps));
  }
  free(perm);
  const size_t rowb = (size_t)L->n_head_kv * L->in_row_bytes;
  uint8_t *k[3], *v[3];
  for (int s = 0; s < nb; s++) {
    k[s] = malloc((size_t)lens[s] * rowb);
    v[s] = malloc((size_t)lens[s] * rowb);
    check_fill(L, seed + 10 * s, k[s], lens[s] * L->n_head_kv, 1.0f);
    check_fill(L, seed + 10 * s + 5, v[s], lens[s] * L->n_head_kv, 1.0f);
    int seqs = s, n = (int)lens[s];
    API(qgen_append(c, &seqs, 1, &n, (qgen_ptr)(uintptr_t)k[s], (qgen_ptr)(uintptr_t)v[s], NULL));
  }
  /* GPU: rounds of one multi-sequence call, each sequence taking its next chunk size */
  CUdeviceptr dk = check_dalloc(e, 3 * 4096 * rowb), dv = check_dalloc(e, 3 * 4096 * rowb);
  uint8_t *sk = malloc(3 * 4096 * rowb), *sv = malloc(3 * 4096 * rowb);
  int64_t done[3] = {0, 0, 0};
  int calls = 0;
  for (int round = 0;; round++) {
    int seqs[3], nn[3], m = 0;
    size_t off = 0;
    for (int s = 0; s < nb; s++) {
      int64_t take = chunks[(round + s) % 4];
      if (take > lens[s] - done[s]) take = lens[s] - done[s];
      seqs[m] = s;
      nn[m++] = (int)take;
      memcpy(sk + off, k[s] + done[s] * rowb, (size_t)take * rowb);
      memcpy(sv + off, v[s] + done[s] * rowb, (size_t)take * rowb);
      off += (size_t)take * rowb;
      done[s] += take;
    }
    if (off == 0) break;
    check_upload(e, dk, sk, off);
    check_upload(e, dv, sv, off);
    API(qgen_append(g, seqs, m, nn, dk, dv, NULL));
    calls++;
  }
  const char *names[] = {"K pool", "V pool", "bounds", "page table", "lengths", "sketch", "8-bit bounds"};
  int ok = 1;
  char what[256] = "";
  for (int w = QGEN_KV_K; w <= QGEN_KV_BOUNDS_I8; w++) {
    size_t n = qgen_kv_size(g, w);
    if (n == 0) continue;
    uint8_t *a = malloc(n), *b = malloc(n);
    API(qgen_kv_read(g, w, a, n));
    API(qgen_kv_read(c, w, b, n));
    for (size_t i = 0; i < n && ok; i++)
      if (a[i] != b[i]) {
        ok = 0;
        snprintf(what, sizeof what, "; %s differs first at byte %zu (gpu %02x, ref %02x)", names[w], i, a[i], b[i]);
      }
    free(a);
    free(b);
  }
  check_verdict(e, ok, "append   3 sequences (1000, 4100, 65 tokens) in %d calls of 1/7/64/4096-token chunks, shuffled pages: "
          "K, V, bounds%s, lengths%s byte-identical%s", calls, L->bounds_i8 ? ", 8-bit bounds" : "", L->sketch_page_bytes ? ", sketch" : "", what);
  for (int s = 0; s < nb; s++) free(k[s]), free(v[s]);
  free(sk);
  free(sv);
  e->cu->cuMemFree(dk);
  e->cu->cuMemFree(dv);
  qgen_cache_destroy(g);
  qgen_cache_destroy(c);
}

/* attend: dense and (sparse specs) sparse against the reference. */
void check_attend(env *e, qgen_ctx *gc, qgen_ctx *cc, int nb, const int64_t *lens, uint64_t seed) {
  const qgen_layout *L = qgen_ext_layout(gc);
  pair pr;
  check_make_pair(e, gc, cc, &pr, nb, lens, seed, nb > 1);
  const size_t qb = (size_t)nb * L->q_bytes, ob = (size_t)nb * L->out_bytes;
  const int64_t nout = (int64_t)nb * L->n_head * L->head_dim;
  uint8_t *q = malloc(qb), *out = malloc(ob);
  double *ref = malloc(sizeof(double) * (size_t)nout);
  check_fill(L, seed * 3 + 7, q, (int64_t)nb * L->n_head, 1.5f);
  CUdeviceptr dq = check_dalloc(e, qb), dout = check_dalloc(e, ob);
  check_upload(e, dq, q, qb);
  char desc[128];
  int n = snprintf(desc, sizeof desc, "ctx %lld", (long long)lens[0]);
  for (int i = 1; i < nb && n < 100; i++) n += snprintf(desc + n, sizeof desc - (size_t)n, "/%lld", (long long)lens[i]);

  qgen_attend_opts od = qgen_attend_defaults(gc);
  od.mode = QGEN_ATTEND_DENSE;
  check_poison(e, dout, ob);
  API(qgen_attend(pr.g, pr.seq, nb, dq, dout, &od, NULL));
  check_download(e, out, dout, ob);
  qgen_ref_order ord; /* the GPU's order: what sparse-V skips depends on it */
  qgen_ext_attend_order(gc, nb, &ord);
  for (int i = 0; i < nb; i++)
    qgen_ref_attend_order(L, qgen_ext_host_cache(pr.c), i, q + i * L->q_bytes, NULL, NULL, &ord, NULL, ref + (int64_t)i * L->n_head * L->head_dim);
  double rd = check_rel_err(L, out, ref, nout);
  check_verdict(e, rd <= check_tolerance(L), "attend   dense   %-32s rel err %.2e (tol %.0e)", desc, rd, check_tolerance(L));

  if (L->sparse) {
    qgen_attend_opts os = qgen_attend_defaults(gc);
    qgen_budget bs = {os.budget > 0 ? QGEN_BUDGET_TOKENS : QGEN_BUDGET_COVERAGE, os.coverage, os.budget, os.sink, os.recent};
    check_poison(e, dout, ob);
    API(qgen_attend(pr.g, pr.seq, nb, dq, dout, &os, NULL));
    check_download(e, out, dout, ob);
    int near = 0, total = 0, cut = 0;
    char why[512] = "", cuts[64] = "";
    const int bad = !check_sparse_vs_ref(gc, L, pr.g, qgen_ext_host_cache(pr.c), nb, lens, q, &bs, &ord, L->bounds_i8, ref, &near, &total,
                                   &cut, why, sizeof why);
    double rs = check_rel_err(L, out, ref, nout);
    if (L->top_p < 1) snprintf(cuts, sizeof cuts, ", top-p cut %d", cut);
    check_verdict(e, !bad && rs <= check_tolerance(L), "attend   sparse  %-32s rel err %.2e, lists of %d heads match (%d near-ties%s)%s%s",
            desc, rs, total, near, cuts, bad ? ": " : "", why);
  }
  e->cu->cuMemFree(dq);
  e->cu->cuMemFree(dout);
  free(q);
  free(out);
  free(ref);
  check_free_pair(&pr);
}

/* reuse (QGEN_ATTEND_REUSE): after a sparse step and more appended tokens (pages begun in
   some sequences, none in others), each GPU list is its last selection extended as
   qgen_ref_extend_list does, and the output is the reference's over those lists. */
void check_reuse(env *e, qgen_ctx *gc, qgen_ctx *cc, uint64_t seed) {
  const qgen_layout *L = qgen_ext_layout(gc);
  enum { NB = 3 };
  const int64_t lens[NB] = {700, 77, 1500};
  const int more[NB] = {L->block + 5, 1, 2 * L->block};
  int64_t cap[NB];
  for (int i = 0; i < NB; i++) cap[i] = lens[i] + more[i];
  pair pr;
  check_make_pair(e, gc, cc, &pr, NB, cap, seed, 1); /* room for the later tokens: filled to cap, then reset and refilled */
  for (int i = 0; i < NB; i++) {
    API(qgen_reset(pr.g, i));
    API(qgen_reset(pr.c, i));
  }
  const size_t rowb = (size_t)L->n_head_kv * L->in_row_bytes, qb = NB * L->q_bytes, ob = NB * L->out_bytes;
  const int64_t nout = (int64_t)NB * L->n_head * L->head_dim, pps = qgen_kv_pages_per_seq(pr.g);
  int64_t total = 0;
  for (int i = 0; i < NB; i++) total += cap[i];
  uint8_t *k = malloc((size_t)total * rowb), *v = malloc((size_t)total * rowb), *q = malloc(qb), *out = malloc(ob);
  check_fill(L, seed * 5 + 1, k, total * L->n_head_kv, 1.0f);
  check_fill(L, seed * 5 + 2, v, total * L->n_head_kv, 1.0f);
  check_fill(L, seed * 5 + 3, q, (int64_t)NB * L->n_head, 1.5f);
  CUdeviceptr dk = check_dalloc(e, (size_t)total * rowb), dv = check_dalloc(e, (size_t)total * rowb), dq = check_dalloc(e, qb), dout = check_dalloc(e, ob);
  check_upload(e, dk, k, (size_t)total * rowb);
  check_upload(e, dv, v, (size_t)total * rowb);
  check_upload(e, dq, q, qb);
  int first[NB];
  for (int i = 0; i < NB; i++) first[i] = (int)lens[i];
  API(qgen_append(pr.g, pr.seq, NB, first, dk, dv, NULL));
  API(qgen_append(pr.c, pr.seq, NB, first, (qgen_ptr)(uintptr_t)k, (qgen_ptr)(uintptr_t)v, NULL));
  qgen_attend_opts os = qgen_attend_defaults(gc), orr = os;
  orr.mode = QGEN_ATTEND_REUSE;
  API(qgen_attend(pr.g, pr.seq, NB, dq, dout, &os, NULL));
  int *l0 = malloc(sizeof(int) * (size_t)(NB * L->n_head_kv * pps)), *c0 = malloc(sizeof(int) * NB * L->n_head_kv);
  int *l1 = malloc(sizeof(int) * (size_t)(L->n_head_kv * pps)), *c1 = malloc(sizeof(int) * L->n_head_kv);
  for (int i = 0; i < NB; i++) API(qgen_kv_selection(pr.g, i, l0 + (size_t)i * L->n_head_kv * pps, c0 + i * L->n_head_kv));
  const size_t off = (size_t)(lens[0] + lens[1] + lens[2]) * rowb;
  API(qgen_append(pr.g, pr.seq, NB, more, dk + off, dv + off, NULL));
  API(qgen_append(pr.c, pr.seq, NB, more, (qgen_ptr)(uintptr_t)(k + off), (qgen_ptr)(uintptr_t)(v + off), NULL));
  check_poison(e, dout, ob);
  API(qgen_attend(pr.g, pr.seq, NB, dq, dout, &orr, NULL));
  check_download(e, out, dout, ob);
  double *ref = malloc(sizeof(double) * (size_t)nout);
  const int32_t **lp = malloc(sizeof(int32_t *) * L->n_head_kv);
  int64_t *cn = malloc(sizeof(int64_t) * L->n_head_kv);
  int32_t *want = malloc(sizeof(int32_t) * (size_t)pps);
  qgen_ref_order ord;
  qgen_ext_attend_order(gc, NB, &ord);
  int lists_ok = 1, grew = 0;
  for (int i = 0; i < NB; i++) {
    API(qgen_kv_selection(pr.g, i, l1, c1));
    for (int h = 0; h < L->n_head_kv; h++) {
      const int *a = l0 + ((size_t)i * L->n_head_kv + h) * pps;
      for (int j = 0; j < c0[i * L->n_head_kv + h]; j++) want[j] = a[j];
      const int64_t n = qgen_ref_extend_list(want, c0[i * L->n_head_kv + h], cap[i], L->block, pps);
      lists_ok &= n == c1[h] && !memcmp(want, l1 + h * pps, (size_t)n * sizeof *want);
      grew |= n > c0[i * L->n_head_kv + h];
      lp[h] = l1 + h * pps, cn[h] = c1[h];
    }
    qgen_ref_attend_order(L, qgen_ext_host_cache(pr.c), i, q + i * L->q_bytes, lp, cn, &ord, NULL, ref + (int64_t)i * L->n_head * L->head_dim);
  }
  const double r = check_rel_err(L, out, ref, nout);
  check_verdict(e, lists_ok && grew && r <= check_tolerance(L), "reuse    sparse  ctx 700/77/1500 + %d/1/%d          rel err %.2e, lists "
          "%s the last selection extended%s", more[0], more[2], r, lists_ok ? "are" : "ARE NOT", grew ? "" : " (none grew)");
  e->cu->cuMemFree(dk), e->cu->cuMemFree(dv), e->cu->cuMemFree(dq), e->cu->cuMemFree(dout);
  free(k), free(v), free(q), free(out), free(l0), free(c0), free(l1), free(c1), free(ref), free(lp), free(cn), free(want);
  check_free_pair(&pr);
}

/* bits: determinism, sparse-with-full-budget == dense, graph replay == eager. */
/* Whether a step (qgen_attend_multi with n_q, qgen_attend without) captured in a CUDA graph
   on a stream of its own and replayed into the poisoned dout gives want's ob bytes exactly
   (got: the host buffer it is read into). */
static int replay_equals(env *e, qgen_kv *kv, const int *seq, int nb, const int *n_q, qgen_ptr dq, qgen_ptr dout,
                         const qgen_attend_opts *os, const void *want, void *got, size_t ob) {
  CUstream st;
  CUgraph graph;
  CUgraphExec exec;
  int ok = e->cu->cuStreamCreate(&st, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS &&
           e->cu->cuStreamBeginCapture(st, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS;
  ok = ok && (n_q ? qgen_attend_multi(kv, seq, nb, n_q, dq, dout, os, (qgen_stream)st)
                  : qgen_attend(kv, seq, nb, dq, dout, os, (qgen_stream)st)) == QGEN_OK;
  ok = e->cu->cuStreamEndCapture(st, &graph) == CUDA_SUCCESS && ok;
  ok = ok && e->cu->cuGraphInstantiate(&exec, graph, 0) == CUDA_SUCCESS;
  if (ok) {
    check_poison(e, dout, ob);
    ok = e->cu->cuGraphLaunch(exec, st) == CUDA_SUCCESS && e->cu->cuStreamSynchronize(st) == CUDA_SUCCESS;
    check_download(e, got, dout, ob);
    ok = ok && memcmp(want, got, ob) == 0;
    e->cu->cuGraphExecDestroy(exec);
    e->cu->cuGraphDestroy(graph);
  }
  e->cu->cuStreamDestroy(st);
  return ok;
}

void check_bits(env *e, qgen_ctx *gc, qgen_ctx *cc, uint64_t seed, int quick) {
  const qgen_layout *L = qgen_ext_layout(gc);
  const int64_t lens[2] = {quick ? 3000 : 20000, 777};
  pair pr;
  check_make_pair(e, gc, cc, &pr, 2, lens, seed, 0);
  const size_t qb = 2 * L->q_bytes, ob = 2 * L->out_bytes;
  uint8_t *q = malloc(qb), *a = malloc(ob), *b = malloc(ob);
  check_fill(L, seed + 99, q, 2 * L->n_head, 1.5f);
  CUdeviceptr dq = check_dalloc(e, qb), dout = check_dalloc(e, ob);
  check_upload(e, dq, q, qb);
  qgen_attend_opts od = qgen_attend_defaults(gc), os = od;
  od.mode = QGEN_ATTEND_DENSE;
#define RUN(opts, dst, stream)                                     \
  do {                                                             \
    check_poison(e, dout, ob);                                           \
    API(qgen_attend(pr.g, pr.seq, 2, dq, dout, &(opts), stream));  \
    check_download(e, dst, dout, ob);                                    \
  } while (0)
  RUN(od, a, NULL);
  RUN(od, b, NULL);
  check_verdict(e, memcmp(a, b, ob) == 0, "bits     dense run twice: identical");
  if (L->sparse) {
    uint8_t *c1 = malloc(ob);
    RUN(os, c1, NULL);
    RUN(os, b, NULL);
    check_verdict(e, memcmp(c1, b, ob) == 0, "bits     sparse run twice: identical");
    qgen_attend_opts full = os;
    full.budget = 0;
    full.coverage = 1.0;
    RUN(full, b, NULL);
    check_verdict(e, memcmp(a, b, ob) == 0, "bits     sparse with coverage 1.0 == dense, bit for bit");
    full.coverage = 0; /* a budget instead of the coverage: one of the two (qgen.h) */
    full.budget = lens[0] + 1000;
    RUN(full, b, NULL);
    check_verdict(e, memcmp(a, b, ob) == 0, "bits     sparse with budget %lld tokens >= context == dense, bit for bit",
            (long long)full.budget);
    /* a sparse step captured in a CUDA graph and replayed */
    const int ok = replay_equals(e, pr.g, pr.seq, 2, NULL, dq, dout, &os, c1, b, ob);
    check_verdict(e, ok, "bits     sparse step captured in a CUDA graph and replayed == eager, bit for bit");
    free(c1);
  }
#undef RUN
  e->cu->cuMemFree(dq);
  e->cu->cuMemFree(dout);
  free(q);
  free(a);
  free(b);
  check_free_pair(&pr);
}

/* Every array of two caches (GPU or reference), byte for byte. */
static int same_arrays(qgen_ctx *gc, qgen_kv *a, qgen_kv *b) {
  int same = 1;
  for (int w = QGEN_KV_K; w <= QGEN_KV_BOUNDS_I8; w++) {
    const size_t n = qgen_kv_size(a, w);
    if (n == 0) continue;
    uint8_t *x = malloc(n), *y = malloc(n);
    API(qgen_kv_read(a, w, x, n));
    API(qgen_kv_read(b, w, y, n));
    same &= memcmp(x, y, n) == 0;
    free(x);
    free(y);
  }
  return same;
}

/* decode graph: qgen_append_decode + attend (dense, and sparse) captured once and replayed
   for N steps, each with new k, v, q copied into the captured buffers, against the same
   steps run eagerly with qgen_append on a second GPU cache (bit for bit: same kernels, same
   data) and with qgen_append_decode on the reference; then one replay past the capacity of
   the longest sequence, which qgen_sync must report. */
enum { DG_NB = 3, DG_N = 64 }; /* sequences and replayed steps of the decode-graph check */

/* The decode-graph check's caches, the graph's fixed buffers (k, v, q in; dense and sparse
   out), the eager run's outputs, and the graph. */
typedef struct {
  env *e;
  qgen_ctx *gc;
  const qgen_layout *L;
  qgen_kv *g, *eg, *c; /* the captured GPU cache, the eager GPU cache, the reference */
  int seq[DG_NB];
  int modes;           /* 1: dense; 2: dense and sparse */
  size_t kb, qb, ob;
  uint8_t *pk, *pv, *hk, *hv, *hq, *og, *oe;
  CUdeviceptr dpk, dpv, dk, dv, dq, dog, doe;
  qgen_attend_opts od, os;
  CUstream st;
  CUgraph graph;
  CUgraphExec exec;
} dgraph;

/* The prompts of lengths lens appended to the three caches. */
static void decode_prompt(dgraph *d, const int64_t *lens, uint64_t seed) {
  env *e = d->e;
  qgen_ctx *gc = d->gc;
  const qgen_layout *L = d->L;
  const int64_t prompt = lens[0] + lens[1] + lens[2];
  const size_t rowb = (size_t)L->n_head_kv * L->in_row_bytes, pb = (size_t)prompt * rowb;
  d->pk = malloc(pb), d->pv = malloc(pb);
  check_fill(L, seed + 1, d->pk, prompt * L->n_head_kv, 1.0f);
  check_fill(L, seed + 2, d->pv, prompt * L->n_head_kv, 1.0f);
  d->dpk = check_dalloc(e, pb), d->dpv = check_dalloc(e, pb);
  check_upload(e, d->dpk, d->pk, pb);
  check_upload(e, d->dpv, d->pv, pb);
  int nn[DG_NB] = {(int)lens[0], (int)lens[1], (int)lens[2]};
  API(qgen_append(d->g, d->seq, DG_NB, nn, d->dpk, d->dpv, NULL));
  API(qgen_append(d->eg, d->seq, DG_NB, nn, d->dpk, d->dpv, NULL));
  API(qgen_append(d->c, d->seq, DG_NB, nn, (qgen_ptr)(uintptr_t)d->pk, (qgen_ptr)(uintptr_t)d->pv, NULL));
}

/* qgen_append_decode + attend (dense, and sparse) of the captured cache, captured once on a
   stream of its own: whether that worked. */
static int decode_capture(dgraph *d) {
  const qgen_cudrv *cu = d->e->cu;
  int ok = cu->cuStreamCreate(&d->st, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS &&
           cu->cuStreamBeginCapture(d->st, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS;
  ok = ok && qgen_append_decode(d->g, d->seq, DG_NB, d->dk, d->dv, (qgen_stream)d->st) == QGEN_OK &&
       qgen_attend(d->g, d->seq, DG_NB, d->dq, d->dog, &d->od, (qgen_stream)d->st) == QGEN_OK &&
       (d->modes < 2 || qgen_attend(d->g, d->seq, DG_NB, d->dq, d->dog + d->ob, &d->os, (qgen_stream)d->st) == QGEN_OK);
  ok = cu->cuStreamEndCapture(d->st, &d->graph) == CUDA_SUCCESS && ok;
  return ok && cu->cuGraphInstantiate(&d->exec, d->graph, 0) == CUDA_SUCCESS;
}

/* Replay the graph for DG_N steps, each with new k, v, q copied into its buffers, against the
   same steps run eagerly (qgen_append + attend on the second GPU cache, append_decode on the
   reference): whether every step's outputs were identical; *step: the steps run. */
static int decode_replay(dgraph *d, uint64_t seed, int *step) {
  const qgen_cudrv *cu = d->e->cu;
  qgen_ctx *gc = d->gc;
  const qgen_layout *L = d->L;
  int ones[DG_NB] = {1, 1, 1};
  int same = 1;
  for (*step = 0; *step < DG_N && same; ++*step) { /* step i's inputs: seeds from i, so every step differs */
    const int s = *step;
    check_fill(L, seed * 7 + 3 * s, d->hk, DG_NB * L->n_head_kv, 1.0f);
    check_fill(L, seed * 7 + 3 * s + 1, d->hv, DG_NB * L->n_head_kv, 1.0f);
    check_fill(L, seed * 7 + 3 * s + 2, d->hq, DG_NB * L->n_head, 1.5f);
    same = cu->cuMemcpyHtoDAsync(d->dk, d->hk, d->kb, d->st) == CUDA_SUCCESS &&
           cu->cuMemcpyHtoDAsync(d->dv, d->hv, d->kb, d->st) == CUDA_SUCCESS &&
           cu->cuMemcpyHtoDAsync(d->dq, d->hq, d->qb, d->st) == CUDA_SUCCESS && cu->cuGraphLaunch(d->exec, d->st) == CUDA_SUCCESS;
    API(qgen_append(d->eg, d->seq, DG_NB, ones, d->dk, d->dv, (qgen_stream)d->st));
    API(qgen_attend(d->eg, d->seq, DG_NB, d->dq, d->doe, &d->od, (qgen_stream)d->st));
    if (d->modes == 2) API(qgen_attend(d->eg, d->seq, DG_NB, d->dq, d->doe + d->ob, &d->os, (qgen_stream)d->st));
    API(qgen_append_decode(d->c, d->seq, DG_NB, (qgen_ptr)(uintptr_t)d->hk, (qgen_ptr)(uintptr_t)d->hv, NULL));
    same = same && cu->cuStreamSynchronize(d->st) == CUDA_SUCCESS;
    check_download(d->e, d->og, d->dog, (size_t)d->modes * d->ob);
    check_download(d->e, d->oe, d->doe, (size_t)d->modes * d->ob);
    same = same && memcmp(d->og, d->oe, (size_t)d->modes * d->ob) == 0;
  }
  return same;
}

void check_decode_graph(env *e, qgen_ctx *gc, qgen_ctx *cc, uint64_t seed) {
  const qgen_layout *L = qgen_ext_layout(gc);
  const int64_t lens[DG_NB] = {1000, 63, 0}, cap = 1000 + DG_N;
  dgraph d = {.e = e, .gc = gc, .L = L, .seq = {0, 1, 2}, .modes = L->sparse ? 2 : 1};
  check_new_cache(gc, &d.g, DG_NB, cap);
  check_new_cache(gc, &d.eg, DG_NB, cap);
  check_new_cache(cc, &d.c, DG_NB, cap);
  decode_prompt(&d, lens, seed);
  d.kb = DG_NB * (size_t)L->n_head_kv * L->in_row_bytes, d.qb = DG_NB * L->q_bytes, d.ob = DG_NB * L->out_bytes;
  d.hk = malloc(d.kb), d.hv = malloc(d.kb), d.hq = malloc(d.qb), d.og = malloc(2 * d.ob), d.oe = malloc(2 * d.ob);
  d.dk = check_dalloc(e, d.kb), d.dv = check_dalloc(e, d.kb), d.dq = check_dalloc(e, d.qb);
  d.dog = check_dalloc(e, 2 * d.ob), d.doe = check_dalloc(e, 2 * d.ob);
  d.od = qgen_attend_defaults(gc), d.os = d.od;
  d.od.mode = QGEN_ATTEND_DENSE;
  int ok = decode_capture(&d), step = 0;
  const int same = ok && decode_replay(&d, seed, &step);
  char why[64] = "";
  if (!ok) snprintf(why, sizeof why, ": capture failed");
  else if (!same) snprintf(why, sizeof why, ": first difference at step %d", step - 1);
  check_verdict(e, same, "decode   append_decode + attend%s captured once, replayed %d steps (ctx 1000/63/0) == eager "
          "qgen_append + attend, bit for bit%s", d.modes == 2 ? " dense + sparse" : "", DG_N, why);
  int lens_ok = 1;
  for (int i = 0; i < DG_NB; i++) lens_ok &= qgen_seq_len(d.g, i) == lens[i] + DG_N && qgen_seq_len(d.c, i) == lens[i] + DG_N;
  check_verdict(e, same && lens_ok && same_arrays(gc, d.g, d.eg) && same_arrays(gc, d.g, d.c) && qgen_sync(d.g) == QGEN_OK,
          "decode   after it: lengths %lld/%lld/%lld, cache bytes == eager == reference, qgen_sync ok",
          qgen_seq_len(d.g, 0), qgen_seq_len(d.g, 1), qgen_seq_len(d.g, 2));
  /* sequence 0 is full now: one more replay keeps its length and qgen_sync says so, once */
  ok = same && e->cu->cuGraphLaunch(d.exec, d.st) == CUDA_SUCCESS && e->cu->cuStreamSynchronize(d.st) == CUDA_SUCCESS;
  const qgen_status full = qgen_sync(d.g);
  ok = ok && full == QGEN_ERR_CAPACITY && qgen_sync(d.g) == QGEN_OK && qgen_seq_len(d.g, 0) == cap &&
       qgen_seq_len(d.g, 1) == lens[1] + DG_N + 1 && qgen_seq_len(d.g, 2) == lens[2] + DG_N + 1;
  check_verdict(e, ok, "decode   a replay past capacity: the full sequence stays at %lld, the others advance, qgen_sync: %s",
          (long long)cap, qgen_status_str(full));
  if (d.exec) e->cu->cuGraphExecDestroy(d.exec);
  if (d.graph) e->cu->cuGraphDestroy(d.graph);
  if (d.st) e->cu->cuStreamDestroy(d.st);
  CUdeviceptr all[] = {d.dpk, d.dpv, d.dk, d.dv, d.dq, d.dog, d.doe};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) e->cu->cuMemFree(all[i]);
  free(d.pk), free(d.pv), free(d.hk), free(d.hv), free(d.hq), free(d.og), free(d.oe);
  qgen_cache_destroy(d.g);
  qgen_cache_destroy(d.eg);
  qgen_cache_destroy(d.c);
}

/* steps: a step of several query tokens a sequence (qgen_attend_multi: 5, 1, 16 and 2, ragged),
   dense and sparse, against the reference step (each token causal; one selection for the
   step, a page scored by the max over its tokens); a dense sliding window; learned sinks;
   the sparse step captured in a CUDA graph and replayed == eager, bit for bit. Steps longer
   than the context's qgen_info.max_step_tokens (kernels that would not fit its architecture)
   are cut to it. A sparse-V spec's GPU refuses a step of several tokens
   (QGEN_ERR_UNSUPPORTED), which is checked. */
void check_steps(env *e, qgen_ctx *gc, qgen_ctx *cc, uint64_t seed, int quick) {
  const qgen_layout *L = qgen_ext_layout(gc);
  enum { NB = 4 };
  const int64_t lens[NB] = {quick ? 2100 : 9000, 777, 1500, 70};
  int nq[NB] = {5, 1, 16, 2}, rows = 0;
  qgen_info in;
  qgen_get_info(gc, &in);
  for (int i = 0; i < NB; i++) rows += nq[i] = nq[i] < in.max_step_tokens ? nq[i] : in.max_step_tokens;
  pair pr;
  check_make_pair(e, gc, cc, &pr, NB, lens, seed, 1);
  const size_t qb = (size_t)rows * L->q_bytes, ob = (size_t)rows * L->out_bytes;
  const int64_t nout = (int64_t)rows * L->n_head * L->head_dim;
  uint8_t *q = malloc(qb), *out = malloc(ob), *eager = malloc(ob);
  double *ref = malloc(sizeof(double) * (size_t)nout);
  float *sinks = malloc(sizeof(float) * (size_t)L->n_head);
  check_fill(L, seed * 3 + 11, q, (int64_t)rows * L->n_head, 1.5f);
  /* sinks from about -3 to 9: some below every score, some above */
  for (int h = 0; h < L->n_head; h++) sinks[h] = 3.0f + 3.0f * check_gauss_at(seed + 13, (uint64_t)h);
  CUdeviceptr dq = check_dalloc(e, qb), dout = check_dalloc(e, ob), dsinks = check_dalloc(e, sizeof(float) * (size_t)L->n_head);
  check_upload(e, dq, q, qb);
  check_upload(e, dsinks, sinks, sizeof(float) * (size_t)L->n_head);
  const qgen_kvmem *m = qgen_ext_host_cache(pr.c);
  qgen_ref_scratch *w = qgen_ref_scratch_new(L, lens[0], NULL);
  char desc[64];
  snprintf(desc, sizeof desc, "%d/%d/%d/%d tokens, ctx", nq[0], nq[1], nq[2], nq[3]);
  /* the reference step of each sequence, under so, into ref */
#define REF_STEPS(so)                                                                                                \
  for (int i = 0, row = 0; i < NB; row += nq[i], i++)                                                              \
    qgen_ref_step_tokens_in(w, L, m, i, nq[i], so, q + (size_t)row * L->q_bytes, NULL, NULL,                       \
                            ref + (int64_t)row * L->n_head * L->head_dim, NULL, NULL)
  qgen_attend_opts od = qgen_attend_defaults(gc);
  od.mode = QGEN_ATTEND_DENSE;
  if (L->v_tau > 0) {
    const qgen_status st = qgen_attend_multi(pr.g, pr.seq, NB, nq, dq, dout, &od, NULL);
    check_verdict(e, st == QGEN_ERR_UNSUPPORTED, "steps    sparse-V spec: a step of several tokens refused (%s: %s)",
                  qgen_status_str(st), qgen_error(gc));
  } else {
    check_poison(e, dout, ob);
    API(qgen_attend_multi(pr.g, pr.seq, NB, nq, dq, dout, &od, NULL));
    check_download(e, out, dout, ob);
    REF_STEPS(NULL);
    double r = check_rel_err(L, out, ref, nout);
    check_verdict(e, r <= check_tolerance(L), "steps    dense   %s %lld/777/1500/70   rel err %.2e (tol %.0e)", desc,
                  (long long)lens[0], r, check_tolerance(L));

    if (L->sparse) {
      qgen_attend_opts os = qgen_attend_defaults(gc);
      qgen_budget bs = {os.budget > 0 ? QGEN_BUDGET_TOKENS : QGEN_BUDGET_COVERAGE, os.coverage, os.budget, os.sink, os.recent};
      check_poison(e, dout, ob);
      API(qgen_attend_multi(pr.g, pr.seq, NB, nq, dq, dout, &os, NULL));
      check_download(e, eager, dout, ob);
      int near = 0, total = 0, cut = 0;
      char why[512] = "";
      const int bad = !check_steps_vs_ref(gc, L, pr.g, m, NB, lens, nq, q, &bs, L->bounds_i8, ref, &near, &total, &cut, why, sizeof why);
      r = check_rel_err(L, eager, ref, nout);
      check_verdict(e, !bad && r <= check_tolerance(L), "steps    sparse  %s %lld/777/1500/70   rel err %.2e, lists of %d heads match "
                    "(%d near-ties)%s%s", desc, (long long)lens[0], r, total, near, bad ? ": " : "", why);
      /* the same step captured in a CUDA graph and replayed */
      const int ok = replay_equals(e, pr.g, pr.seq, NB, nq, dq, dout, &os, eager, out, ob);
      check_verdict(e, ok, "steps    sparse step of %.*s captured in a CUDA graph and replayed == eager, bit for bit",
                    (int)strlen(desc) - 5, desc);
    }
  }
  if (L->v_tau == 0) {
    /* a sliding window that ends inside pages and starts mid-page, then sinks: one token a
       sequence (the one-token path's engine module) and the ragged step */
    const long long win[2] = {100, 37};
    for (int k = 0; k < 2; k++) {
      const qgen_ref_step_opts so = {win[k], NULL};
      od.window = win[k];
      check_poison(e, dout, ob);
      API(qgen_attend_multi(pr.g, pr.seq, NB, nq, dq, dout, &od, NULL));
      check_download(e, out, dout, ob);
      REF_STEPS(&so);
      const double r = check_rel_err(L, out, ref, nout);
      check_verdict(e, r <= check_tolerance(L), "steps    dense   window %lld, %s %lld/777/1500/70  rel err %.2e (tol %.0e)", win[k], desc,
                    (long long)lens[0], r, check_tolerance(L));
    }
    od.window = 0;
    od.sinks = dsinks;
    const qgen_ref_step_opts so = {0, sinks};
    check_poison(e, dout, ob);
    API(qgen_attend(pr.g, pr.seq, NB, dq, dout, &od, NULL));
    check_download(e, out, dout, (size_t)NB * L->out_bytes);
    for (int i = 0; i < NB; i++)
      qgen_ref_step_tokens_in(w, L, m, i, 1, &so, q + (size_t)i * L->q_bytes, NULL, NULL, ref + (int64_t)i * L->n_head * L->head_dim,
                              NULL, NULL);
    double r = check_rel_err(L, out, ref, (int64_t)NB * L->n_head * L->head_dim);
    check_verdict(e, r <= check_tolerance(L), "steps    dense   sinks, one token a sequence, ctx %lld/777/1500/70  rel err %.2e (tol %.0e)",
                  (long long)lens[0], r, check_tolerance(L));
    if (L->sparse) { /* sinks with a sparse step of several tokens */
      qgen_attend_opts os = qgen_attend_defaults(gc);
      os.sinks = dsinks;
      check_poison(e, dout, ob);
      API(qgen_attend_multi(pr.g, pr.seq, NB, nq, dq, dout, &os, NULL));
      check_download(e, out, dout, ob);
      /* over the GPU's lists (checked above without sinks; the same step selects the same) */
      const int64_t pps = qgen_kv_pages_per_seq(pr.g);
      int32_t *rl = malloc(sizeof(int32_t) * (size_t)(L->n_head_kv * pps));
      int64_t *rc = malloc(sizeof(int64_t) * L->n_head_kv);
      int *cnt = malloc(sizeof(int) * L->n_head_kv);
      const qgen_budget reuse = {QGEN_BUDGET_REUSE, 0, 0, 0, 0};
      for (int i = 0, row = 0; i < NB; row += nq[i], i++) {
        API(qgen_kv_selection(pr.g, i, rl, cnt));
        for (int h = 0; h < L->n_head_kv; h++) rc[h] = cnt[h];
        qgen_ref_step_tokens_in(w, L, m, i, nq[i], &so, q + (size_t)row * L->q_bytes, &reuse, NULL,
                                ref + (int64_t)row * L->n_head * L->head_dim, rl, rc);
      }
      r = check_rel_err(L, out, ref, nout);
      check_verdict(e, r <= check_tolerance(L), "steps    sparse  sinks, %s %lld/777/1500/70  rel err %.2e (tol %.0e)", desc,
                    (long long)lens[0], r, check_tolerance(L));
      free(rl), free(rc), free(cnt);
    }
  }
#undef REF_STEPS
  qgen_ref_scratch_free(w);
  e->cu->cuMemFree(dq), e->cu->cuMemFree(dout), e->cu->cuMemFree(dsinks);
  free(q), free(out), free(eager), free(ref), free(sinks);
  check_free_pair(&pr);
}
