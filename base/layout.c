/* layout.c — sizes of the paged cache, and the forced pages of layout.h as a host array
 * (the rule itself is base/kargs.h's qgen_forced_ranges, which the kernels compile too). */
#include "base/layout.h"

#include <string.h>

void qgen_layout_init(qgen_layout *L, int head_dim, int n_head, int n_head_kv, int block,
                      qgen_type k_type, qgen_type v_type, qgen_type in_type,
                      qgen_type out_type, double scale, int sparse) {
  memset(L, 0, sizeof *L);
  L->head_dim = head_dim;
  L->n_head = n_head;
  L->n_head_kv = n_head_kv;
  L->group = n_head / n_head_kv;
  L->block = block;
  L->k_type = k_type;
  L->v_type = v_type;
  L->in_type = in_type;
  L->out_type = out_type;
  L->scale = scale;
  L->sparse = sparse;
  L->k_row_bytes = qgen_type_row_bytes(k_type, head_dim);
  L->v_row_bytes = qgen_type_row_bytes(v_type, head_dim);
  L->k_page_bytes = (size_t)n_head_kv * block * L->k_row_bytes;
  L->v_page_bytes = (size_t)n_head_kv * block * L->v_row_bytes;
  L->bounds_page_bytes = sparse ? (size_t)n_head_kv * 2 * head_dim * 2 : 0;
  L->in_row_bytes = qgen_type_row_bytes(in_type, head_dim);
  L->q_bytes = (size_t)n_head * L->in_row_bytes;
  L->out_bytes = (size_t)n_head * qgen_type_row_bytes(out_type, head_dim);
  L->rescore = 1;
  L->top_p = 1;
}

void qgen_layout_set_rescore(qgen_layout *L, int r) {
  L->rescore = r;
  const int sketch = r > 1 && L->sparse && !qgen_type_traits_of(L->k_type)->is_quant;
  L->sketch_row_bytes = sketch ? qgen_type_row_bytes(QGEN_SKETCH_TYPE, L->head_dim) : 0;
  L->sketch_page_bytes = (size_t)L->n_head_kv * (size_t)L->block * L->sketch_row_bytes;
}

void qgen_layout_set_bounds(qgen_layout *L, int bounds) {
  L->bounds_i8 = L->sparse && bounds == QGEN_BOUNDS_I8;
  L->bounds_i8_row_bytes = L->bounds_i8 ? (size_t)2 * L->head_dim + 16 : 0;
  L->bounds_i8_page_bytes = (size_t)L->n_head_kv * L->bounds_i8_row_bytes;
}

void qgen_owned_strides(const qgen_layout *L, int which, int64_t st[3]) {
  const size_t row = which ? L->v_row_bytes : L->k_row_bytes;
  st[0] = (int64_t)(which ? L->v_page_bytes : L->k_page_bytes);
  st[1] = (int64_t)row;
  st[2] = (int64_t)row * L->block;
}

int64_t qgen_forced_pages(const qgen_budget *b, int64_t len, int block, uint8_t *forced) {
  const int64_t n = qgen_pages_of(len, block);
  memset(forced, 0, (size_t)n);
  if (n == 0) return 0;
  int64_t sp, rf;
  qgen_forced_ranges(b, len, block, &sp, &rf);
  for (int64_t p = 0; p < sp; p++) forced[p] = 1;
  for (int64_t p = rf; p < n; p++) forced[p] = 1;
  int64_t c = 0;
  for (int64_t p = 0; p < n; p++) c += forced[p];
  return c;
}
