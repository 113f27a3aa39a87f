/* check_views.c — `qgen check`'s views: a caller's pool in vLLM's NHD layout read through
 * qgen_view_open against the owned cache holding the same rows.
 */
#include <stdlib.h>
#include <string.h>

#include "harness/check_int.h"
#include "base/qtypes.h"
#include "base/rng.h"

enum { NB = 3 }; /* sequences of the check */

/* What every page size of the check shares: the owned caches (GPU, reference) holding the
   sequences, the query and two host outputs. */
typedef struct {
  env *e;
  qgen_ctx *gc, *cc;
  const qgen_layout *L;
  pair pr;
  const qgen_kvmem *m; /* the reference cache's memory: the rows the pool copies */
  const int64_t *lens;
  uint8_t *q, *a, *b;
  size_t ob;
  CUdeviceptr dq, dout;
} vcheck;

/* A caller's pool in vLLM's NHD layout ([page][slot][KV head][row]) with pages of `page`
   tokens, shuffled, holding the owned cache's rows: on the host (the reference view's) and
   on the device (the GPU view's), with the slot of every token and both descriptors. */
typedef struct {
  int page;
  int64_t maxb, np, ns;
  uint8_t *hk, *hv;
  int32_t *bt, len32[NB];
  int64_t *slots;
  int *perm;
  CUdeviceptr dk, dv, dbt, dl, ds;
  qgen_view_desc dg, dc;
} vpool;

/* The shuffled block tables of p, and the rows of every token copied into its slot. */
static void pool_fill(const vcheck *v, vpool *p, uint64_t seed) {
  const qgen_layout *L = v->L;
  const qgen_kvmem *m = v->m;
  const int page = p->page, H = L->n_head_kv;
  const size_t rk = L->k_row_bytes, rv = L->v_row_bytes;
  for (int64_t i = 0; i < p->np; i++) p->perm[i] = (int)i;
  for (int64_t i = p->np - 1; i > 0; i--) {
    const int64_t j = (int64_t)(qgen_mix64(seed + 11 * (uint64_t)i) % (uint64_t)(i + 1));
    const int t = p->perm[i];
    p->perm[i] = p->perm[j], p->perm[j] = t;
  }
  p->ns = 0;
  for (int sq = 0; sq < NB; sq++) {
    p->len32[sq] = (int32_t)v->lens[sq];
    for (int64_t i = 0; i < p->maxb; i++) p->bt[sq * p->maxb + i] = p->perm[sq * p->maxb + i];
    for (int64_t t = 0; t < v->lens[sq]; t++) {
      const int64_t own = m->page_table[sq * m->pages_per_seq + t / L->block], pg = p->bt[sq * p->maxb + t / page];
      for (int h = 0; h < H; h++) {
        const size_t slot = (size_t)(t % L->block), dst = ((size_t)(pg * page + t % page) * H + h);
        memcpy(p->hk + dst * rk, m->k + own * L->k_page_bytes + ((size_t)h * L->block + slot) * rk, rk);
        memcpy(p->hv + dst * rv, m->v + own * L->v_page_bytes + ((size_t)h * L->block + slot) * rv, rv);
      }
      p->slots[p->ns++] = pg * page + t % page;
    }
  }
}

/* The pool of pages of `page` tokens: filled on the host, uploaded, described. */
static void pool_make(const vcheck *v, vpool *p, int page, uint64_t seed) {
  env *e = v->e;
  const qgen_layout *L = v->L;
  const int64_t H = L->n_head_kv;
  const size_t rk = L->k_row_bytes, rv = L->v_row_bytes;
  *p = (vpool){.page = page, .maxb = (v->lens[0] + page - 1) / page};
  p->np = NB * p->maxb + 5;
  const size_t kb = (size_t)p->np * page * H * rk, vb = (size_t)p->np * page * H * rv;
  p->hk = calloc(kb, 1), p->hv = calloc(vb, 1);
  p->bt = malloc(sizeof(int32_t) * NB * p->maxb);
  p->slots = malloc(sizeof(int64_t) * (size_t)(v->lens[0] + v->lens[1] + v->lens[2]));
  p->perm = malloc(sizeof(int) * (size_t)p->np);
  pool_fill(v, p, seed);
  p->dk = check_dalloc(e, kb), p->dv = check_dalloc(e, vb), p->dbt = check_dalloc(e, sizeof(int32_t) * NB * p->maxb);
  p->dl = check_dalloc(e, sizeof p->len32), p->ds = check_dalloc(e, sizeof(int64_t) * (size_t)p->ns);
  check_upload(e, p->dk, p->hk, kb);
  check_upload(e, p->dv, p->hv, vb);
  check_upload(e, p->dbt, p->bt, sizeof(int32_t) * NB * p->maxb);
  check_upload(e, p->dl, p->len32, sizeof p->len32);
  check_upload(e, p->ds, p->slots, sizeof(int64_t) * (size_t)p->ns);
  p->dg = (qgen_view_desc){p->dk, p->dv, page, p->np, (long long)(page * H * rk), (long long)(H * rk), (long long)rk,
                           (long long)(page * H * rv), (long long)(H * rv), (long long)rv, p->dbt, p->maxb, p->dl, NB, p->maxb};
  p->dc = p->dg;
  p->dc.k = (qgen_ptr)(uintptr_t)p->hk, p->dc.v = (qgen_ptr)(uintptr_t)p->hv, p->dc.block_table = (qgen_ptr)(uintptr_t)p->bt;
  p->dc.seq_lens = (qgen_ptr)(uintptr_t)p->len32;
}

static void pool_free(const vcheck *v, vpool *p) {
  CUdeviceptr all[] = {p->dk, p->dv, p->dbt, p->dl, p->ds};
  for (int i = 0; i < 5; i++) v->e->cu->cuMemFree(all[i]);
  free(p->hk), free(p->hv), free(p->bt), free(p->slots), free(p->perm);
}

/* Step o over the NB sequences of kv into host output out (poisoned before). */
static void view_step(const vcheck *v, qgen_kv *kv, const qgen_attend_opts *o, uint8_t *out) {
  qgen_ctx *gc = v->gc;
  check_poison(v->e, v->dout, v->ob);
  API(qgen_attend(kv, v->pr.seq, NB, v->dq, v->dout, o, NULL));
  check_download(v->e, out, v->dout, v->ob);
}

/* Bounds of the GPU view vg (qgen_view_update over two chunks of slots) against the
   reference view vc's, byte for byte, with the 8-bit rows where the spec has them (pages
   of the block only). */
static void views_bounds(const vcheck *v, const vpool *p, qgen_kv *vg, qgen_kv *vc) {
  qgen_ctx *gc = v->gc;
  const qgen_layout *L = v->L;
  for (int w = 0; w < 2; w++) {
    const int64_t s0 = w ? p->ns / 3 : 0, s1 = w ? p->ns : p->ns / 3;
    API(qgen_view_update(vg, p->ds + (CUdeviceptr)(s0 * 8), s1 - s0, 8, NULL));
    API(qgen_view_update(vc, (qgen_ptr)(uintptr_t)(p->slots + s0), s1 - s0, 8, NULL));
  }
  const size_t nbnd = qgen_kv_size(vg, QGEN_KV_BOUNDS);
  uint8_t *bg = malloc(nbnd), *bc = malloc(nbnd);
  API(qgen_kv_read(vg, QGEN_KV_BOUNDS, bg, nbnd));
  API(qgen_kv_read(vc, QGEN_KV_BOUNDS, bc, nbnd));
  const size_t n8 = qgen_kv_size(vg, QGEN_KV_BOUNDS_I8);
  uint8_t *r8g = malloc(n8 + 1), *r8c = malloc(n8 + 1);
  if (n8) API(qgen_kv_read(vg, QGEN_KV_BOUNDS_I8, r8g, n8));
  if (n8) API(qgen_kv_read(vc, QGEN_KV_BOUNDS_I8, r8c, n8));
  check_verdict(v->e, memcmp(bg, bc, nbnd) == 0 && memcmp(r8g, r8c, n8) == 0 && (n8 > 0) == (L->bounds_i8 && p->page == L->block),
                "views    pages of %d: qgen_view_update's bounds == the reference's, byte for byte (8-bit rows: %zu bytes)", p->page, n8);
  free(r8g), free(r8c), free(bg), free(bc);
}

/* The view vg's sparse step against the reference view vc, whose bounds are vg's byte for
   byte (views_bounds): its lists by the reference's ranking (by the 8-bit rows when i8, else
   the f16 bounds), near-ties within the tolerance, and its output against reference attention
   over them; `what` says which ranking and why this comparison. */
static void views_sparse_ref(const vcheck *v, int page, qgen_kv *vg, qgen_kv *vc, const qgen_attend_opts *os, int i8,
                             const char *what) {
  qgen_ctx *gc = v->gc;
  const qgen_layout *L = v->L;
  qgen_budget bs = {os->budget > 0 ? QGEN_BUDGET_TOKENS : QGEN_BUDGET_COVERAGE, os->coverage, os->budget, os->sink, os->recent};
  qgen_ref_order ord;
  qgen_ext_attend_order(gc, NB, &ord);
  view_step(v, vg, os, v->b);
  const int64_t nout = (int64_t)NB * L->n_head * L->head_dim;
  double *ref = malloc(sizeof(double) * (size_t)nout);
  int near = 0, total = 0, cut = 0;
  char why[512] = "";
  const int ok = check_sparse_vs_ref(gc, L, vg, qgen_ext_host_cache(vc), NB, v->lens, v->q, &bs, &ord, i8, ref, &near, &total, &cut,
                                     why, sizeof why);
  const double rs = check_rel_err(L, v->b, ref, nout);
  check_verdict(v->e, ok && rs <= check_tolerance(L), "views    pages of %d: sparse lists of %d heads == %s (%d near-ties), rel err %.2e%s%s",
                page, total, what, near, rs, ok ? "" : ": ", why);
  free(ref);
}

/* The sparse step through the view vg. When K stores its inputs exactly, the owned cache's
   bounds (made from the inputs) are the view's (made from the stored rows), so its lists and
   output equal the owned cache's, bit for bit. Otherwise (f32 inputs in an f16 K, say) the two
   bounds may differ by an ulp and a page near the threshold may go either way: the view is
   checked against the reference view (views_sparse_ref). */
static void views_sparse(const vcheck *v, int page, qgen_kv *vg, qgen_kv *vc, const qgen_attend_opts *os) {
  qgen_ctx *gc = v->gc;
  const qgen_layout *L = v->L;
  if (L->in_type != L->k_type) {
    char what[96];
    snprintf(what, sizeof what, "the reference view's (%s inputs stored as %s)", qgen_type_traits_of(L->in_type)->name,
             qgen_type_traits_of(L->k_type)->name);
    views_sparse_ref(v, page, vg, vc, os, L->bounds_i8, what);
    return;
  }
  const int H = L->n_head_kv;
  API(qgen_attend(v->pr.g, v->pr.seq, NB, v->dq, v->dout, os, NULL));
  check_download(v->e, v->a, v->dout, v->ob);
  view_step(v, vg, os, v->b);
  const int64_t pps = qgen_kv_pages_per_seq(v->pr.g);
  int *l1 = calloc((size_t)(H * pps), sizeof(int)), *l2 = calloc((size_t)(H * pps), sizeof(int)), *c1 = malloc(sizeof(int) * H),
      *c2 = malloc(sizeof(int) * H);
  int same = qgen_kv_pages_per_seq(vg) == pps;
  for (int sq = 0; sq < NB && same; sq++) {
    API(qgen_kv_selection(v->pr.g, sq, l1, c1));
    API(qgen_kv_selection(vg, sq, l2, c2));
    for (int h = 0; h < H; h++) same &= c1[h] == c2[h] && memcmp(l1 + h * pps, l2 + h * pps, sizeof(int) * (size_t)c1[h]) == 0;
  }
  check_verdict(v->e, same && memcmp(v->a, v->b, v->ob) == 0, "views    pages of %d: sparse lists and output == the owned cache's", page);
  free(l1), free(l2), free(c1), free(c2);
}

/* The views of pool p on both backends: dense bit for bit, then (with a 16-bit K) bounds and
   the sparse step. */
static void views_open(const vcheck *v, const vpool *p) {
  qgen_ctx *gc = v->gc, *cc = v->cc;
  const qgen_layout *L = v->L;
  const int bounds = L->sparse && !qgen_type_traits_of(L->k_type)->is_quant && L->k_row_bytes == 2 * (size_t)L->head_dim;
  qgen_kv *vg = NULL, *vc = NULL;
  API(qgen_view_open(gc, &p->dg, &vg));
  API(qgen_view_open(cc, &p->dc, &vc));
  check_set_scales(gc, vg); /* the owned cache's, so the bytes read mean the same values */
  check_set_scales(cc, vc);
  qgen_attend_opts od = qgen_attend_defaults(gc), os = od;
  od.mode = QGEN_ATTEND_DENSE;
  API(qgen_attend(v->pr.g, v->pr.seq, NB, v->dq, v->dout, &od, NULL));
  check_download(v->e, v->a, v->dout, v->ob);
  view_step(v, vg, &od, v->b);
  check_verdict(v->e, memcmp(v->a, v->b, v->ob) == 0, "views    NHD pages of %d, shuffled: dense == the owned cache, bit for bit", p->page);
  if (bounds) {
    views_bounds(v, p, vg, vc);
    /* with 8-bit bounds, a view of half-block pages ranks by its f16 bounds */
    if (L->bounds_i8 && p->page != L->block) views_sparse_ref(v, p->page, vg, vc, &os, 0, "the f16 bounds' reference");
    else views_sparse(v, p->page, vg, vc, &os);
  }
  qgen_cache_destroy(vg);
  qgen_cache_destroy(vc);
}

/* views: the rows of a GPU cache copied into a pool of vLLM's NHD layout ([page][slot][KV
   head][row], pages of the spec's block and of half of it, shuffled page tables) read
   through qgen_view_open give that cache's dense output bit for bit; with a 16-bit K the
   view's bounds (qgen_view_update, two chunks of slots) equal a reference view's over the
   same pool byte for byte (and with 8-bit bounds, pages of the block, its 8-bit rows), and
   the sparse output and page lists equal the cache's (where K stores the inputs exactly; else
   the reference view's, near-ties allowed); with 8-bit bounds a view of half-block
   pages ranks by its f16 bounds, so its lists are checked against the reference's f16
   ranking and its output against reference attention over them. A spec with two-stage
   selection (a view keeps no sketch), or with K or V rows not of 4-byte multiples (a view
   copies 4 bytes at least), must be refused. */
void check_views(env *e, qgen_ctx *gc, qgen_ctx *cc, uint64_t seed) {
  const qgen_layout *L = qgen_ext_layout(gc);
  static const int64_t lens[NB] = {5000, 1, 777};
  vcheck v = {.e = e, .gc = gc, .cc = cc, .L = L, .lens = lens};
  check_make_pair(e, gc, cc, &v.pr, NB, lens, seed, 1);
  v.m = qgen_ext_host_cache(v.pr.c);
  const size_t qb = NB * L->q_bytes;
  v.ob = NB * L->out_bytes;
  v.q = malloc(qb), v.a = malloc(v.ob), v.b = malloc(v.ob);
  check_fill(L, seed + 7, v.q, NB * L->n_head, 1.5f);
  v.dq = check_dalloc(e, qb), v.dout = check_dalloc(e, v.ob);
  check_upload(e, v.dq, v.q, qb);
  /* a view keeps no sketch, and copies rows of 4-byte multiples (q8_0 at head_dim 32: 34) */
  const int odd_rows = L->k_row_bytes % 4 || L->v_row_bytes % 4;
  const int refused = L->rescore > 1 || odd_rows;
  for (int page = L->block; page >= L->block / 2 && page % 16 == 0; page /= 2) {
    vpool p;
    pool_make(&v, &p, page, seed);
    if (refused) {
      qgen_kv *vg = NULL, *vc = NULL;
      const qgen_status sg = qgen_view_open(gc, &p.dg, &vg), sc = qgen_view_open(cc, &p.dc, &vc);
      check_verdict(e, sg == QGEN_ERR_UNSUPPORTED && sc == QGEN_ERR_UNSUPPORTED && !vg && !vc,
                    "views    refused on both backends (%s), nothing opened",
                    L->rescore > 1 ? "two-stage selection" : "rows not of 4-byte multiples");
      qgen_cache_destroy(vg);
      qgen_cache_destroy(vc);
    } else {
      views_open(&v, &p);
    }
    pool_free(&v, &p);
    if (refused) break; /* one refusal is the whole check */
  }
  e->cu->cuMemFree(v.dq);
  e->cu->cuMemFree(v.dout);
  free(v.q), free(v.a), free(v.b);
  check_free_pair(&v.pr);
}
