/* plandump.c — every launch plan base/plan.c makes (one-token and engine modules of 1-16 tokens,
   every arch, head_dim, group, block, K/V type) as one line each: refused with its reason, or
   its fields by name (the merge kernel's own fields left out, so two trees' plans compare
   where both have fields); built against two trees' base/plan.c, the outputs diffed (E82,
   E84). `plandump skip31` leaves out the rows past 31 m-tiles, where the plan before 7a710dc
   divides by zero. */
#include <stdio.h>
#include <string.h>
#include "base/plan.h"
#include "base/qtypes.h"
static const qgen_type T[] = {QGEN_TYPE_F16, QGEN_TYPE_BF16, QGEN_TYPE_Q8_0, QGEN_TYPE_Q4_0, QGEN_TYPE_Q5_0, QGEN_TYPE_E4M3, QGEN_TYPE_E5M2};
#define PRINT_FIELD(f, unit) \
  if (strncmp(#f, "merge_", 6)) printf(" %s=%d", #f, P.f);
int main(int argc, char **argv) {
  const int skip31 = argc > 1 && !strcmp(argv[1], "skip31");
  static const int groups[] = {1, 2, 3, 4, 5, 7, 8, 12, 16, 17, 24, 32, 33, 48, 64};
  for (int i = 0; qgen_arch_at(i); i++) {
    const qgen_arch *A = qgen_arch_at(i);
    for (int step = 0; step <= 16; step = step ? step * 2 : 1)
      for (int D = 32; D <= 256; D += 32)
        for (size_t gi = 0; gi < sizeof groups / sizeof *groups; gi++)
          for (int block = 32; block <= 256; block += 32)
            for (int k = 0; k < 7; k++)
              for (int v = 0; v < 7; v++) {
                const int G = groups[gi];
                if (skip31 && (G * (step > 1 ? step : 1) + 15) / 16 > 31) continue;
                qgen_layout L;
                qgen_layout_init(&L, D, 2 * G, 2, block, T[k], T[v], (k + v) % 2 ? QGEN_TYPE_F32 : QGEN_TYPE_F16, QGEN_TYPE_F16, 1.0, 1);
                qgen_tune t;
                char why[256] = "";
                qgen_tune_parse(NULL, &t, why, sizeof why);
                t.step = step;
                qgen_plan P;
                memset(&P, 0, sizeof P);
                const int rc = qgen_plan_make(&L, A, &t, &P, why, sizeof why);
                printf("%s s%d D%d g%d b%d %d %d rows%d:", A->name, step, D, G, block, k, v, G * (step > 1 ? step : 1));
                if (rc) printf(" refused %s\n", why);
                else {
                  QGEN_PLAN_FIELDS(PRINT_FIELD)
                  printf("\n");
                }
              }
  }
  return 0;
}
