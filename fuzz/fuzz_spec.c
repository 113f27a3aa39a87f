/* fuzz_spec.c — libFuzzer harness for the sandboxed spec loader (spec/spec.c).
 *
 * The input is Lua source given to qgen_spec_load_string. Whatever it does, the loader
 * must return (0 or -1 with a one-line message, never a crash, a hang or a runaway
 * allocation). When it succeeds, every variant must survive the canonical round trip:
 * qgen_spec_to_lua -> qgen_spec_load_string gives exactly one spec, equal field by field
 * (the spec{} line aside), and printing that one again gives the same text.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "spec/spec.h"

static void die(const char *what, const qgen_spec *s, const char *text, const char *err) {
  fprintf(stderr, "fuzz_spec: %s (spec '%s')\n", what, s ? s->name : "?");
  if (text) fprintf(stderr, "canonical text:\n%s\n", text);
  if (err) fprintf(stderr, "error: %s\n", err);
  abort();
}

/* Invariants spec.h promises for a spec that loaded. */
static void check_valid(const qgen_spec *s) {
  size_t n = strlen(s->name);
  if (n < 1 || n > QGEN_NAME_MAX) die("name length out of range", s, NULL, NULL);
  for (size_t i = 0; i < n; i++) {
    char c = s->name[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
      die("name has a character outside [A-Za-z0-9._-]", s, NULL, NULL);
  }
  if (s->head_dim < 32 || s->head_dim > 256 || s->head_dim % 32) die("head_dim out of range", s, NULL, NULL);
  if (s->n_head < 1 || s->n_head_kv < 1 || s->n_head % s->n_head_kv || s->n_head / s->n_head_kv > QGEN_MAX_GROUP)
    die("heads out of range", s, NULL, NULL);
  if (!(s->scale > 0) || !isfinite(s->scale)) die("scale not finite > 0", s, NULL, NULL);
  if (s->block < 32 || s->block > 256 || s->block % 32) die("block out of range", s, NULL, NULL);
  if (s->sparse && !((s->coverage > 0 && s->coverage <= 1 && s->budget == 0) || (s->coverage == 0 && s->budget > 0)))
    die("sparse budget: not exactly one of coverage and budget", s, NULL, NULL);
  if (s->sink < 0 || s->recent < 0) die("negative sink/recent", s, NULL, NULL);
  for (int i = 1; i < s->n_archs; i++)
    if (s->archs[i] <= s->archs[i - 1]) die("archs not sorted and unique", s, NULL, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static qgen_spec_set set, back; /* ~ 10 KiB each: keep them off the stack */
  static char text[1 << 16], text2[1 << 16];
  char err[1024];
  if (qgen_spec_load_string("fuzz.lua", (const char *)data, size, &set, err, sizeof err) != 0) {
    if (!err[0]) die("a failed load left no message", NULL, NULL, NULL);
    if (strchr(err, '\n')) die("the message is not one line", NULL, NULL, err);
    return 0;
  }
  if (set.n < 1 || set.n > QGEN_MAX_VARIANTS) die("a successful load gave no variants", NULL, NULL, NULL);
  for (int i = 0; i < set.n; i++) {
    const qgen_spec *s = &set.v[i];
    check_valid(s);
    if (qgen_spec_find(&set, s->name) != s && i > 0) die("variant names are not unique", s, NULL, NULL);
    int n = qgen_spec_to_lua(s, text, sizeof text);
    if (n <= 0) die("qgen_spec_to_lua failed", s, NULL, NULL);
    if (qgen_spec_load_string("canonical.lua", text, (size_t)n, &back, err, sizeof err) != 0)
      die("the canonical text does not load", s, text, err);
    if (back.n != 1) die("the canonical text holds more than one variant", s, text, NULL);
    if (!fuzz_same_spec(s, &back.v[0])) die("the canonical text loads to a different spec", s, text, NULL);
    int n2 = qgen_spec_to_lua(&back.v[0], text2, sizeof text2);
    if (n2 != n || memcmp(text, text2, (size_t)n) != 0) die("the canonical text is not a fixed point", s, text, NULL);
    char uri[256];
    qgen_spec_uri(s, QGEN_URI_FILE, uri, sizeof uri);
  }
  return 0;
}
