/* check_views.c — `qgen check`'s views: a caller's pool in vLLM's NHD layout read through
 * qgen_view_open against the owned cache holding the same rows.
 */
#include <stdlib.h>
#include <string.h>

#include "harness/check_int.h"
#include "base/rng.h"

/* views: the rows of a GPU cache copied into a pool of vLLM's NHD layout ([page][slot][KV
   head][row], pages of the spec's block and of half of it, shuffled page tables) read
   through qgen_view_open give that cache's dense output bit for bit; with a 16-bit K the
   view's bounds (qgen_view_update, two chunks of slots) equal a reference view's over the
   same pool byte for byte (and with 8-bit bounds, pages of the block, its 8-bit rows), and
   the sparse output and page lists equal the cache's; with 8-bit bounds a view of half-block
   pages ranks by its f16 bounds, so its lists are checked against the reference's f16
   ranking and its output against reference attention over them. A spec with two-stage
   selection (a view keeps no sketch), or with K or V rows not of 4-byte multiples (a view
   copies 4 bytes at least), must be refused. */
void check_views(env *e, qgen_ctx *gc, qgen_ctx *cc, uint64_t seed) {
  enum { NB = 3 };
  const qgen_layout *L = qgen_ext_layout(gc);
  const int64_t lens[NB] = {5000, 1, 777};
  pair pr;
  check_make_pair(e, gc, cc, &pr, NB, lens, seed, 1);
  const qgen_kvmem *m = qgen_ext_host_cache(pr.c);
  const int bounds = L->sparse && !qgen_type_traits_of(L->k_type)->is_quant && L->k_row_bytes == 2 * (size_t)L->head_dim;
  const size_t qb = NB * L->q_bytes, ob = NB * L->out_bytes;
  uint8_t *q = malloc(qb), *a = malloc(ob), *b = malloc(ob);
  check_fill(L, seed + 7, q, NB * L->n_head, 1.5f);
  CUdeviceptr dq = check_dalloc(e, qb), dout = check_dalloc(e, ob);
  check_upload(e, dq, q, qb);
  for (int page = L->block; page >= L->block / 2 && page % 16 == 0; page /= 2) {
    const int64_t maxb = (lens[0] + page - 1) / page, np = NB * maxb + 5, H = L->n_head_kv;
    const size_t rk = L->k_row_bytes, rv = L->v_row_bytes, kb = (size_t)np * page * H * rk, vb = (size_t)np * page * H * rv;
    uint8_t *hk = calloc(kb, 1), *hv = calloc(vb, 1);
    int32_t *bt = malloc(sizeof(int32_t) * NB * maxb), len32[NB];
    int64_t *slots = malloc(sizeof(int64_t) * (size_t)(lens[0] + lens[1] + lens[2]));
    int *perm = malloc(sizeof(int) * (size_t)np);
    for (int64_t i = 0; i < np; i++) perm[i] = (int)i;
    for (int64_t i = np - 1; i > 0; i--) {
      const int64_t j = (int64_t)(qgen_mix64(seed + 11 * (uint64_t)i) % (uint64_t)(i + 1));
      const int t = perm[i];
      perm[i] = perm[j], perm[j] = t;
    }
    int64_t ns = 0;
    for (int sq = 0; sq < NB; sq++) {
      len32[sq] = (int32_t)lens[sq];
      for (int64_t i = 0; i < maxb; i++) bt[sq * maxb + i] = perm[sq * maxb + i];
      for (int64_t t = 0; t < lens[sq]; t++) {
        const int64_t own = m->page_table[sq * m->pages_per_seq + t / L->block], pg = bt[sq * maxb + t / page];
        for (int h = 0; h < H; h++) {
          const size_t slot = (size_t)(t % L->block), dst = ((size_t)(pg * page + t % page) * H + h);
          memcpy(hk + dst * rk, m->k + own * L->k_page_bytes + ((size_t)h * L->block + slot) * rk, rk);
          memcpy(hv + dst * rv, m->v + own * L->v_page_bytes + ((size_t)h * L->block + slot) * rv, rv);
        }
        slots[ns++] = pg * page + t % page;
      }
    }
    CUdeviceptr dk = check_dalloc(e, kb), dv = check_dalloc(e, vb), dbt = check_dalloc(e, sizeof(int32_t) * NB * maxb), dl = check_dalloc(e, sizeof len32),
                ds = check_dalloc(e, sizeof(int64_t) * (size_t)ns);
    check_upload(e, dk, hk, kb);
    check_upload(e, dv, hv, vb);
    check_upload(e, dbt, bt, sizeof(int32_t) * NB * maxb);
    check_upload(e, dl, len32, sizeof len32);
    check_upload(e, ds, slots, sizeof(int64_t) * (size_t)ns);
    qgen_view_desc dg = {dk, dv, page, np, (long long)(page * H * rk), (long long)(H * rk), (long long)rk,
                         (long long)(page * H * rv), (long long)(H * rv), (long long)rv, dbt, maxb, dl, NB, maxb};
    qgen_view_desc dc = dg;
    dc.k = (qgen_ptr)(uintptr_t)hk, dc.v = (qgen_ptr)(uintptr_t)hv, dc.block_table = (qgen_ptr)(uintptr_t)bt;
    dc.seq_lens = (qgen_ptr)(uintptr_t)len32;
    qgen_kv *vg = NULL, *vc = NULL;
    /* a view keeps no sketch, and copies rows of 4-byte multiples (q8_0 at head_dim 32: 34) */
    const int odd_rows = L->k_row_bytes % 4 || L->v_row_bytes % 4;
    const int refused = L->rescore > 1 || odd_rows;
    if (refused) {
      const qgen_status sg = qgen_view_open(gc, &dg, &vg), sc = qgen_view_open(cc, &dc, &vc);
      check_verdict(e, sg == QGEN_ERR_UNSUPPORTED && sc == QGEN_ERR_UNSUPPORTED && !vg && !vc,
              "views    refused on both backends (%s), nothing opened",
              L->rescore > 1 ? "two-stage selection" : "rows not of 4-byte multiples");
    } else {
      API(qgen_view_open(gc, &dg, &vg));
      API(qgen_view_open(cc, &dc, &vc));
      check_set_scales(gc, vg); /* the owned cache's, so the bytes read mean the same values */
      check_set_scales(cc, vc);
      qgen_attend_opts od = qgen_attend_defaults(gc), os = od;
      od.mode = QGEN_ATTEND_DENSE;
      API(qgen_attend(pr.g, pr.seq, NB, dq, dout, &od, NULL));
      check_download(e, a, dout, ob);
      check_poison(e, dout, ob);
      API(qgen_attend(vg, pr.seq, NB, dq, dout, &od, NULL));
      check_download(e, b, dout, ob);
      check_verdict(e, memcmp(a, b, ob) == 0, "views    NHD pages of %d, shuffled: dense == the owned cache, bit for bit", page);
      if (bounds) {
        for (int w = 0; w < 2; w++) {
          const int64_t s0 = w ? ns / 3 : 0, s1 = w ? ns : ns / 3;
          API(qgen_view_update(vg, ds + (CUdeviceptr)(s0 * 8), s1 - s0, 8, NULL));
          API(qgen_view_update(vc, (qgen_ptr)(uintptr_t)(slots + s0), s1 - s0, 8, NULL));
        }
        const size_t nbnd = qgen_kv_size(vg, QGEN_KV_BOUNDS);
        uint8_t *bg = malloc(nbnd), *bc = malloc(nbnd);
        API(qgen_kv_read(vg, QGEN_KV_BOUNDS, bg, nbnd));
        API(qgen_kv_read(vc, QGEN_KV_BOUNDS, bc, nbnd));
        const size_t n8 = qgen_kv_size(vg, QGEN_KV_BOUNDS_I8);
        uint8_t *r8g = malloc(n8 + 1), *r8c = malloc(n8 + 1);
        if (n8) API(qgen_kv_read(vg, QGEN_KV_BOUNDS_I8, r8g, n8));
        if (n8) API(qgen_kv_read(vc, QGEN_KV_BOUNDS_I8, r8c, n8));
        check_verdict(e, memcmp(bg, bc, nbnd) == 0 && memcmp(r8g, r8c, n8) == 0 && (n8 > 0) == (L->bounds_i8 && page == L->block),
                "views    pages of %d: qgen_view_update's bounds == the reference's, byte for byte (8-bit rows: %zu bytes)", page, n8);
        free(r8g), free(r8c);
        if (L->bounds_i8 && page != L->block) { /* the half-block view ranks by its f16 bounds */
          qgen_budget bs = {os.budget > 0 ? QGEN_BUDGET_TOKENS : QGEN_BUDGET_COVERAGE, os.coverage, os.budget, os.sink, os.recent};
          qgen_ref_order ord;
          qgen_ext_attend_order(gc, NB, &ord);
          check_poison(e, dout, ob);
          API(qgen_attend(vg, pr.seq, NB, dq, dout, &os, NULL));
          check_download(e, b, dout, ob);
          const int64_t nout = (int64_t)NB * L->n_head * L->head_dim;
          double *ref = malloc(sizeof(double) * (size_t)nout);
          int near = 0, total = 0, cut = 0;
          char why[512] = "";
          const int ok = check_sparse_vs_ref(gc, L, vg, m, NB, lens, q, &bs, &ord, 0, ref, &near, &total, &cut, why, sizeof why);
          const double rs = check_rel_err(L, b, ref, nout);
          check_verdict(e, ok && rs <= check_tolerance(L), "views    pages of %d: sparse lists of %d heads == the f16 bounds' reference (%d near-ties), rel err %.2e%s%s",
                  page, total, near, rs, ok ? "" : ": ", why);
          free(ref);
          continue;
        }
        API(qgen_attend(pr.g, pr.seq, NB, dq, dout, &os, NULL));
        check_download(e, a, dout, ob);
        check_poison(e, dout, ob);
        API(qgen_attend(vg, pr.seq, NB, dq, dout, &os, NULL));
        check_download(e, b, dout, ob);
        const int64_t pps = qgen_kv_pages_per_seq(pr.g);
        int *l1 = calloc((size_t)(H * pps), sizeof(int)), *l2 = calloc((size_t)(H * pps), sizeof(int)), *c1 = malloc(sizeof(int) * H),
            *c2 = malloc(sizeof(int) * H);
        int same = qgen_kv_pages_per_seq(vg) == pps;
        for (int sq = 0; sq < NB && same; sq++) {
          API(qgen_kv_selection(pr.g, sq, l1, c1));
          API(qgen_kv_selection(vg, sq, l2, c2));
          for (int h = 0; h < H; h++) same &= c1[h] == c2[h] && memcmp(l1 + h * pps, l2 + h * pps, sizeof(int) * (size_t)c1[h]) == 0;
        }
        check_verdict(e, same && memcmp(a, b, ob) == 0, "views    pages of %d: sparse lists and output == the owned cache's", page);
        free(bg), free(bc), free(l1), free(l2), free(c1), free(c2);
      }
    }
    qgen_cache_destroy(vg);
    qgen_cache_destroy(vc);
    CUdeviceptr all[] = {dk, dv, dbt, dl, ds};
    for (int i = 0; i < 5; i++) e->cu->cuMemFree(all[i]);
    free(hk), free(hv), free(bt), free(slots), free(perm);
    if (refused) break; /* one refusal is the whole check */
  }
  e->cu->cuMemFree(dq);
  e->cu->cuMemFree(dout);
  free(q), free(a), free(b);
  check_free_pair(&pr);
}
