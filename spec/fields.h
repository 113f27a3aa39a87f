/* fields.h — the fields of a spec, each written once.
 *
 * One row per field (designated initializers in fields.c): its path, its kind, its default
 * as spec text, its range, what messages say is allowed, its role and its help. The
 * validator (validate.c) reads names, ranges, defaults and the "allowed:" text of its
 * messages from it; `qgen spec-fields` prints it as the field table of docs/spec.md (a test
 * keeps the two equal); tests/test_spec.c walks it to check that every field reaches the
 * canonical text (canon.c) and that exactly the compiled ones reach the module name.
 * What a field's value must satisfy together with others (n_head % n_head_kv, top_p < 1
 * needs candidates >= 2, ...) stays in the validator's code; the help text says it.
 */
#ifndef QGEN_SPEC_FIELDS_H
#define QGEN_SPEC_FIELDS_H

#include <stddef.h>
#include <stdio.h>

/* The fields, in table order: each table's fields follow the field that holds them, in the
   order the "unknown field" messages list them. */
typedef enum qgen_field_id {
  QGEN_F_NAME,
  QGEN_F_HEAD_DIM,
  QGEN_F_N_HEAD,
  QGEN_F_N_HEAD_KV,
  QGEN_F_K_TYPE,
  QGEN_F_V_TYPE,
  QGEN_F_IN_TYPE,
  QGEN_F_OUT_TYPE,
  QGEN_F_SCALE,
  QGEN_F_SPARSE,
  QGEN_F_ENABLED,
  QGEN_F_BLOCK,
  QGEN_F_COVERAGE,
  QGEN_F_BUDGET,
  QGEN_F_SINK,
  QGEN_F_RECENT,
  QGEN_F_RESCORE,
  QGEN_F_CANDIDATES,
  QGEN_F_SKETCH,
  QGEN_F_TOP_P,
  QGEN_F_BOUNDS,
  QGEN_F_V_TAU,
  QGEN_F_ARCHS,
  QGEN_F_COUNT
} qgen_field_id;

typedef enum qgen_field_kind {
  QGEN_FK_NAME,    /* a string of name characters */
  QGEN_FK_INT,     /* an integer (a float with an integral value is one) in [lo, hi] */
  QGEN_FK_NUMBER,  /* a number in [lo, hi] ((lo, hi] with lo_open) */
  QGEN_FK_BOOL,    /* true or false */
  QGEN_FK_KV_TYPE, /* the name of a KV cache type (base/qtypes.c kv_ok) */
  QGEN_FK_IO_TYPE, /* the name of an input/output type (base/qtypes.c io_ok) */
  QGEN_FK_SKETCH,  /* the name of the sketch type (QGEN_SKETCH_TYPE) */
  QGEN_FK_BOUNDS,  /* the name of a bounds form (qgen_bounds_name) */
  QGEN_FK_SPARSE,  /* true, false or a table of fields */
  QGEN_FK_TABLE,   /* a table of fields */
  QGEN_FK_ARCHS    /* a list of architecture names (base/arch.c) */
} qgen_field_kind;

/* What a field does to what qgen builds. */
typedef enum qgen_field_role {
  QGEN_FR_COMPILED, /* a compile-time parameter: part of the module name, other kernels */
  QGEN_FR_STEP,     /* the default of each decode step (a call may override it): no rebuild */
  QGEN_FR_TARGETS,  /* which architectures are built */
  QGEN_FR_LABEL     /* names the variant (file names); the kernels do not see it */
} qgen_field_role;

typedef struct qgen_spec_field {
  const char *path;  /* "sparse.rescore.top_p": the keys from the top, joined by "." */
  qgen_field_kind kind;
  qgen_field_role role;
  int required;      /* must be given (in its table, when that is given) */
  const char *def;   /* the default as spec text ("64", "\"f16\""), or NULL: none, def_note, or
                        made from the tables (the sketch type) */
  const char *def_note; /* a default that is not a constant ("block", "1/sqrt(head_dim)") */
  double lo, hi;     /* FK_INT, FK_NUMBER: the range */
  int lo_open;       /* FK_NUMBER: lo itself is not allowed */
  int multiple;      /* FK_INT: a multiple of this (0: any) */
  const char *allowed; /* what messages say after "allowed:"; NULL: made from the tables
                          it names (qgen_spec_field_allowed) */
  const char *help;  /* what it means, for docs/spec.md */
} qgen_spec_field;

/* The row of field id. */
const qgen_spec_field *qgen_spec_field_at(qgen_field_id id);

/* The row whose path is path, or NULL. */
const qgen_spec_field *qgen_spec_field_named(const char *path);

/* The key of f in its table: the last component of its path ("top_p"). */
const char *qgen_spec_field_key(const qgen_spec_field *f);

/* The keys of the fields of the table at path table ("" for the top level, "sparse",
   "sparse.rescore"), in table order, into keys[0..max); returns their count. */
int qgen_spec_field_keys(const char *table, const char **keys, int max);

/* What messages say is allowed for f ("a multiple of 32 in 32..256", "f16, bf16, ..."), into
   buf; returns buf. */
const char *qgen_spec_field_allowed(const qgen_spec_field *f, char *buf, size_t n);

/* f's default into buf: spec text ("64", "\"q4_0\"") and 1, or a description in parentheses
   ("(= block)", "(required)", "(none)") and 0. */
int qgen_spec_field_default(const qgen_spec_field *f, char *buf, size_t n);

/* Print the field table and the architecture table as the markdown docs/spec.md holds
   between its markers. Returns 0, or -1 when out fails. */
int qgen_spec_fields_markdown(FILE *out);

#endif
