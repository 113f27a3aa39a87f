/* layout.c — the paged-cache layout a spec describes (see spec.h). */
#include "spec/spec.h"

void qgen_spec_layout(const qgen_spec *s, qgen_layout *L) {
  qgen_layout_init(L, s->head_dim, s->n_head, s->n_head_kv, s->block, s->k_type, s->v_type,
                   s->in_type, s->out_type, s->scale, s->sparse);
  qgen_layout_set_rescore(L, s->rescore);
  L->top_p = s->sparse && s->rescore > 1 ? s->top_p : 1;
  qgen_layout_set_bounds(L, s->bounds);
  L->v_tau = s->v_tau;
}
