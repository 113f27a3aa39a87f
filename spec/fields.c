/* fields.c — the table of spec fields and what is made from it (see fields.h). */
#include "spec/fields.h"

#include <limits.h>
#include <string.h>

#include "base/arch.h"
#include "base/layout.h"
#include "base/qtypes.h"
#include "base/util.h"
#include "spec/spec.h"

static const qgen_spec_field FIELDS[QGEN_F_COUNT] = {
    [QGEN_F_NAME] = {.path = "name", .kind = QGEN_FK_NAME, .role = QGEN_FR_LABEL, .required = 1,
                     .allowed = "1..64 characters of A-Z a-z 0-9 . _ -, the first a letter or digit",
                     .help = "The variant's name. `qgen emit -o` names its files after it and `--variant` picks it; the "
                             "kernels do not see it, so specs that differ only by name share one cache entry."},
    [QGEN_F_HEAD_DIM] = {.path = "head_dim", .kind = QGEN_FK_INT, .role = QGEN_FR_COMPILED, .required = 1, .lo = 32,
                         .hi = 256, .multiple = 32, .allowed = "a multiple of 32 in 32..256",
                         .help = "Channels of one attention head."},
    [QGEN_F_N_HEAD] = {.path = "n_head", .kind = QGEN_FK_INT, .role = QGEN_FR_COMPILED, .required = 1, .lo = 1,
                       .hi = 65536, .allowed = "an integer in 1..65536", .help = "Query heads."},
    [QGEN_F_N_HEAD_KV] = {.path = "n_head_kv", .kind = QGEN_FK_INT, .role = QGEN_FR_COMPILED, .required = 1, .lo = 1,
                          .hi = 65536, .allowed = "an integer in 1..65536",
                          .help = "KV heads. `n_head` must be a multiple of it, and the group, `n_head / n_head_kv` "
                                  "query heads per KV head, at most 64."},
    [QGEN_F_K_TYPE] = {.path = "k_type", .kind = QGEN_FK_KV_TYPE, .role = QGEN_FR_COMPILED, .def = "\"f16\"",
                       .help = "The K cache's type. A row of an unquantized type must be a multiple of 64 bytes "
                               "(fp8, e4m3 and e5m2: head_dim a multiple of 64). An fp8 cache's per-tensor scale is "
                               "the cache's, set at run time, not the spec's."},
    [QGEN_F_V_TYPE] = {.path = "v_type", .kind = QGEN_FK_KV_TYPE, .role = QGEN_FR_COMPILED, .def_note = "k_type",
                       .help = "The V cache's type, under the same rules as `k_type`."},
    [QGEN_F_IN_TYPE] = {.path = "in_type", .kind = QGEN_FK_IO_TYPE, .role = QGEN_FR_COMPILED, .def = "\"f16\"",
                        .help = "The type of q, k and v given to append and attend."},
    [QGEN_F_OUT_TYPE] = {.path = "out_type", .kind = QGEN_FK_IO_TYPE, .role = QGEN_FR_COMPILED, .def = "\"f16\"",
                         .help = "The type of the attention output."},
    [QGEN_F_SCALE] = {.path = "scale", .kind = QGEN_FK_NUMBER, .role = QGEN_FR_COMPILED, .def_note = "1/sqrt(head_dim)",
                      .allowed = "a number > 0, a normal f32 with scale * log2(e) finite: 1.17549435e-38 .. ~2.36e38 "
                                 "(default: 1/sqrt(head_dim))",
                      .help = "The softmax scale. The kernels multiply by it as an f32 (times log2(e)), so it must "
                              "be a normal f32 whose product with log2(e) is finite."},
    [QGEN_F_SPARSE] = {.path = "sparse", .kind = QGEN_FK_SPARSE, .role = QGEN_FR_COMPILED, .def = "false",
                       .allowed = "true, false or a table { enabled, block, coverage | budget, sink, recent, rescore, "
                                  "bounds, v_tau }",
                       .help = "`false`: dense attention (pages of `block` = 64 tokens); `true`: sparse attention with "
                               "every default below; or a table of the `sparse.*` fields."},
    [QGEN_F_ENABLED] = {.path = "sparse.enabled", .kind = QGEN_FK_BOOL, .role = QGEN_FR_COMPILED, .def = "true",
                        .allowed = "true or false",
                        .help = "`false` makes the spec dense and keeps only `block` of this table."},
    [QGEN_F_BLOCK] = {.path = "sparse.block", .kind = QGEN_FK_INT, .role = QGEN_FR_COMPILED, .def = "64", .lo = 32,
                      .hi = 256, .multiple = 32, .allowed = "a multiple of 32 in 32..256",
                      .help = "Tokens per page of the cache, which is also the unit of selection (dense specs too)."},
    [QGEN_F_COVERAGE] = {.path = "sparse.coverage", .kind = QGEN_FK_NUMBER, .role = QGEN_FR_STEP, .def = "0.25",
                         .lo = 0, .hi = 1, .lo_open = 1, .allowed = "a number in (0, 1], the fraction of pages attended",
                         .help = "The budget as a fraction of the sequence's pages, `ceil(coverage * pages)`. Used "
                                 "when `budget` is absent; not with `budget`."},
    [QGEN_F_BUDGET] = {.path = "sparse.budget", .kind = QGEN_FK_INT, .role = QGEN_FR_STEP, .lo = 1,
                       .hi = 4611686018427387904.0 /* 2^62 */, .allowed = "an integer number of tokens in 1..2^62",
                       .help = "The budget in tokens, `ceil(budget / block)` pages, instead of `coverage`."},
    [QGEN_F_SINK] = {.path = "sparse.sink", .kind = QGEN_FK_INT, .role = QGEN_FR_STEP, .def_note = "block", .lo = 0,
                     .hi = INT_MAX, .allowed = "an integer number of tokens >= 0 (default: block)",
                     .help = "Tokens at the start of a sequence that are always attended (their pages)."},
    [QGEN_F_RECENT] = {.path = "sparse.recent", .kind = QGEN_FK_INT, .role = QGEN_FR_STEP, .def_note = "2 * block",
                       .lo = 0, .hi = INT_MAX, .allowed = "an integer number of tokens >= 0 (default: 2 * block)",
                       .help = "Tokens at the end of a sequence that are always attended (their pages; the last, "
                               "partial page always is)."},
    [QGEN_F_RESCORE] = {.path = "sparse.rescore", .kind = QGEN_FK_TABLE, .role = QGEN_FR_COMPILED,
                        .allowed = "a table { candidates, sketch, top_p }",
                        .help = "Two-stage selection: keep `candidates` times the budget's pages by the page bounds' "
                                "score, then the budget's best of those by their exact score (max of q·k over the "
                                "group's heads and the page's tokens). Absent: one stage (Quest). Not over an fp8 K."},
    [QGEN_F_CANDIDATES] = {.path = "sparse.rescore.candidates", .kind = QGEN_FK_INT, .role = QGEN_FR_COMPILED,
                           .required = 1, .lo = 1, .hi = 1024,
                           .allowed = "an integer in 1..1024 (candidate pages per budget page; 1 = Quest)",
                           .help = "Candidate pages per budget page. 1 is Quest: the same module as no `rescore`."},
    [QGEN_F_SKETCH] = {.path = "sparse.rescore.sketch", .kind = QGEN_FK_SKETCH, .role = QGEN_FR_COMPILED,
                       .help = "The compact K an f16/bf16 cache keeps for the exact scores, written by append "
                               "(18 bytes per 32 channels, token and KV head: 0.28 of an f16 K). Not with a "
                               "q8_0/q4_0/q5_0 cache, whose own K is rescored."},
    [QGEN_F_TOP_P] = {.path = "sparse.rescore.top_p", .kind = QGEN_FK_NUMBER, .role = QGEN_FR_COMPILED, .def = "1",
                      .lo = 0, .hi = 1, .lo_open = 1,
                      .allowed = "a number in (0, 1], the share of the candidates' estimated softmax mass to keep (1 = "
                                 "off)",
                      .help = "The mass-adaptive cut: each KV head keeps only the fewest of its kept pages whose "
                              "estimated softmax mass reaches `top_p` of all the candidates', so easy heads read "
                              "less. 1 = off; below 1 needs `candidates` >= 2. Kept as an f32."},
    [QGEN_F_BOUNDS] = {.path = "sparse.bounds", .kind = QGEN_FK_BOUNDS, .role = QGEN_FR_COMPILED, .def = "\"i8\"",
                       .help = "The page bounds estimate reads: `\"f16\"`, each channel's min and max; `\"i8\"`, 8-bit "
                               "codes with one f16 offset and scale per page and KV head, rounded outward (about half "
                               "of estimate's bytes)."},
    [QGEN_F_V_TAU] = {.path = "sparse.v_tau", .kind = QGEN_FK_NUMBER, .role = QGEN_FR_COMPILED, .def = "0", .lo = 0,
                      .hi = 1, .allowed = "a number in [0, 1], the sparse-V weight threshold (0 = off)",
                      .help = "Sparse-V: attend skips the V work of a 16-token sub-tile whose softmax weights, "
                              "relative to the running max, are all below it. Lossy beyond about 1e-4; 0 compiles "
                              "it out. Kept as an f32."},
    [QGEN_F_ARCHS] = {.path = "archs", .kind = QGEN_FK_ARCHS, .role = QGEN_FR_TARGETS, .def = "{ \"sm_80\", \"sm_90\" }",
                      .help = "The architectures `qgen emit` and `qgen bundle` build for, stored sorted without "
                              "duplicates. A spec whose kernels do not fit an architecture's shared memory is "
                              "refused for it."},
};

const qgen_spec_field *qgen_spec_field_at(qgen_field_id id) {
  return (unsigned)id < QGEN_F_COUNT ? &FIELDS[id] : NULL;
}

const qgen_spec_field *qgen_spec_field_named(const char *path) {
  for (int i = 0; path && i < QGEN_F_COUNT; i++)
    if (!strcmp(FIELDS[i].path, path)) return &FIELDS[i];
  return NULL;
}

const char *qgen_spec_field_key(const qgen_spec_field *f) {
  const char *dot = strrchr(f->path, '.');
  return dot ? dot + 1 : f->path;
}

int qgen_spec_field_keys(const char *table, const char **keys, int max) {
  const size_t tl = strlen(table);
  int n = 0;
  for (int i = 0; i < QGEN_F_COUNT; i++) {
    const char *p = FIELDS[i].path, *key = qgen_spec_field_key(&FIELDS[i]);
    /* p is table "." key, or key alone at the top */
    const int in = tl ? !strncmp(p, table, tl) && p[tl] == '.' && key == p + tl + 1 : key == p;
    if (in && n < max) keys[n++] = key;
  }
  return n;
}

const char *qgen_spec_field_allowed(const qgen_spec_field *f, char *buf, size_t n) {
  if (f->allowed) {
    qgen_fmt(buf, n, "%s", f->allowed);
    return buf;
  }
  switch (f->kind) {
  case QGEN_FK_KV_TYPE: qgen_fmt(buf, n, "%s", qgen_type_names(1)); break;
  case QGEN_FK_IO_TYPE: qgen_fmt(buf, n, "%s", qgen_type_names(2)); break;
  case QGEN_FK_SKETCH: qgen_fmt(buf, n, "%s", qgen_type_traits_of(QGEN_SKETCH_TYPE)->name); break;
  case QGEN_FK_BOUNDS:
    qgen_fmt(buf, n, "\"%s\" or \"%s\" (default %s)", qgen_bounds_name(QGEN_BOUNDS_F16), qgen_bounds_name(QGEN_BOUNDS_I8),
             f->def);
    break;
  case QGEN_FK_ARCHS: {
    qgen_fmt(buf, n, "a list of one or more of ");
    for (int i = 0; qgen_arch_at(i); i++) {
      const size_t k = strlen(buf);
      qgen_fmt(buf + k, n - k, "%s%s", i ? ", " : "", qgen_arch_at(i)->name);
    }
    break;
  }
  default: qgen_fmt(buf, n, "?"); break;
  }
  return buf;
}

int qgen_spec_field_default(const qgen_spec_field *f, char *buf, size_t n) {
  if (f->def) qgen_fmt(buf, n, "%s", f->def);
  else if (f->kind == QGEN_FK_SKETCH) qgen_fmt(buf, n, "\"%s\"", qgen_type_traits_of(QGEN_SKETCH_TYPE)->name);
  else if (f->def_note) qgen_fmt(buf, n, "(= %s)", f->def_note);
  else qgen_fmt(buf, n, "%s", f->required ? "(required)" : "(none)");
  return f->def || f->kind == QGEN_FK_SKETCH;
}

/* ---- docs/spec.md ---------------------------------------------------------------------- */

static const char *kind_name(qgen_field_kind k) {
  switch (k) {
  case QGEN_FK_INT: return "integer";
  case QGEN_FK_NUMBER: return "number";
  case QGEN_FK_BOOL: return "boolean";
  case QGEN_FK_SPARSE: return "boolean or table";
  case QGEN_FK_TABLE: return "table";
  case QGEN_FK_ARCHS: return "list of strings";
  default: return "string";
  }
}

static const char *role_name(qgen_field_role r) {
  return r == QGEN_FR_COMPILED ? "compiled" : r == QGEN_FR_STEP ? "step default" : r == QGEN_FR_TARGETS ? "targets" : "label";
}

/* s as a markdown table cell: "|" escaped. */
static void cell(FILE *out, const char *s, int code) {
  if (code) fputc('`', out);
  for (; *s; s++) {
    if (*s == '|') fputc('\\', out);
    fputc(*s, out);
  }
  if (code) fputc('`', out);
}

int qgen_spec_fields_markdown(FILE *out) {
  char allowed[512], def[128];
  fputs("| field | type | default | allowed | role | meaning |\n|---|---|---|---|---|---|\n", out);
  for (int i = 0; i < QGEN_F_COUNT; i++) {
    const qgen_spec_field *f = &FIELDS[i];
    fputs("| ", out);
    cell(out, f->path, 1);
    fprintf(out, " | %s | ", kind_name(f->kind));
    cell(out, def, qgen_spec_field_default(f, def, sizeof def));
    fputs(" | ", out);
    cell(out, qgen_spec_field_allowed(f, allowed, sizeof allowed), 0);
    fprintf(out, " | %s | ", role_name(f->role));
    cell(out, f->help, 0);
    fputs(" |\n", out);
  }
  fputs("\n| arch | GPUs | shared memory a CTA |\n|---|---|---|\n", out);
  for (int i = 0; qgen_arch_at(i); i++) {
    const qgen_arch *a = qgen_arch_at(i);
    fprintf(out, "| `%s` | %s | %d KiB |\n", a->name, a->gpus, a->smem_block / 1024);
  }
  return fflush(out) == 0 && !ferror(out) ? 0 : -1;
}
