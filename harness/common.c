/* common.c — the harness's shared helpers (common.h): spec sets of specs and bundles, opening
 * a variant with another sparse-V threshold, the exit code of a failed open, closing an
 * output file.
 */
#include "harness/common.h"

#include <errno.h>
#include <string.h>

#include "jit/bundle.h"

int qgen_harness_spec_set(const char *path, qgen_spec_set *set) {
  static qgen_bundle b;
  char err[256];
  if (!qgen_bundle_is(path)) return qgen_spec_load(path, set, err, sizeof err);
  if (qgen_bundle_read(path, &b, err, sizeof err) != 0) return -1;
  set->n = 1, set->v[0] = b.spec;
  qgen_bundle_free(&b);
  return 0;
}

qgen_status qgen_harness_open(qgen_ctx **ctx, const char *path, const qgen_open_opts *o, double v_tau) {
  static qgen_spec_set set; /* one open at a time */
  char text[4096];
  const qgen_spec *s = v_tau >= 0 && qgen_harness_spec_set(path, &set) == 0 ? qgen_spec_find(&set, o->variant) : NULL;
  if (!s) return qgen_open(ctx, path, o); /* no threshold, or its own message */
  qgen_spec t = *s;
  t.v_tau = (double)(float)v_tau;
  if (qgen_spec_to_lua(&t, text, sizeof text) < 0) return qgen_open(ctx, path, o);
  qgen_open_opts one = *o;
  one.variant = NULL;
  return qgen_open_text(ctx, text, path, &one);
}

int qgen_harness_open_exit(qgen_status st) {
  return st == QGEN_ERR_NO_DRIVER || st == QGEN_ERR_NO_DEVICE ? QGEN_EXIT_NO_GPU
         : st == QGEN_ERR_SPEC || st == QGEN_ERR_BUNDLE       ? QGEN_EXIT_USER
                                                              : QGEN_EXIT_INTERNAL;
}

int qgen_harness_close_output(const char *cmd, FILE *f, const char *path) {
  int e = 0;
  if (fflush(f) != 0) e = errno;
  int bad = e || ferror(f);
  if (fclose(f) != 0) {
    bad = 1;
    if (!e) e = errno;
  }
  if (!bad) return 0;
  fprintf(stderr, "qgen: %s: cannot write %s: %s\n", cmd, path, e ? strerror(e) : "a write failed");
  return QGEN_EXIT_WRITE;
}
