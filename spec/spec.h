/* spec.h — loading and validating a Lua model spec (docs/DESIGN.md §4).
 *
 * A spec file is Lua 5.4 run in a sandbox (base/string/table/math only; no io, os,
 * require, load, dofile, string.dump; text chunks only; an instruction budget and a memory
 * budget). It returns one spec table, or a list of them (variants). The constructor
 * `spec{...}` is available inside the sandbox: it validates on the spot, so an error
 * carries the file:line of the call; a plain table is validated after the chunk returns.
 * An error about a field written in the call's table constructor names that field's own
 * line (found in the source: the constructor keeps no positions).
 *
 * Every field is checked, unknown fields are errors, and every message names the file,
 * the line, the field, the bad value and what is allowed, e.g.
 *   specs/x.lua:4: n_head = 30 is not a multiple of n_head_kv = 8
 */
#ifndef QGEN_SPEC_H
#define QGEN_SPEC_H

#include <stddef.h>
#include <stdint.h>

#include "base/layout.h"
#include "base/qtypes.h"

#define QGEN_NAME_MAX 64
#define QGEN_MAX_ARCHS 16
#define QGEN_MAX_VARIANTS 32
#define QGEN_MAX_GROUP 64 /* query heads per KV head the attend kernel supports */

typedef struct qgen_spec {
  char name[QGEN_NAME_MAX + 1]; /* [A-Za-z0-9._-]+ ; used in cache and file names */
  int line;                     /* line of the spec{} call, 0 when unknown */
  int head_dim;                 /* multiple of 32, 32..256 */
  int n_head, n_head_kv;        /* n_head % n_head_kv == 0, group <= QGEN_MAX_GROUP */
  qgen_type k_type, v_type;     /* cache types (kv_ok) */
  qgen_type in_type;            /* type of q, k, v given to append/attend (io_ok) */
  qgen_type out_type;           /* type of the attention output (io_ok) */
  double scale;                 /* softmax scale, default 1/sqrt(head_dim) */
  int block;                    /* page size in tokens = selection block, 32..256, %32 */
  int sparse;                   /* 1: bounds + estimate + select; 0: dense only */
  double coverage;              /* default budget as a fraction of pages (0,1], or 0 */
  int64_t budget;               /* default budget in tokens (> 0), or 0 */
  int sink, recent;             /* tokens always attended at the start / the end */
  int bounds;                   /* QGEN_BOUNDS_* (base/layout.h): the page bounds estimate reads */
  double v_tau;                 /* sparse-V threshold in [0, 1] (an f32 value); 0 = off */
  int n_archs;
  int archs[QGEN_MAX_ARCHS]; /* compute capabilities, e.g. 80, 90; sorted, unique */
  int rescore;               /* two-stage selection: candidates per budget page (1: Quest) */
  double top_p;              /* two-stage's mass-adaptive cut in (0, 1] (an f32 value); 1 = off */
} qgen_spec;

typedef struct qgen_spec_set {
  int n;
  qgen_spec v[QGEN_MAX_VARIANTS];
} qgen_spec_set;

/* Load and validate a spec file. Returns 0, or -1 with a one-line message in err
   ("file:line: what is wrong"). Never exits, never hangs (instruction limit), never
   allocates past the memory limit. */
int qgen_spec_load(const char *path, qgen_spec_set *out, char *err, size_t errlen);

/* The same for spec source held in memory; chunkname is used in messages. */
int qgen_spec_load_string(const char *chunkname, const char *src, size_t len,
                          qgen_spec_set *out, char *err, size_t errlen);

/* Find a variant by name (NULL or "" = the first). NULL when absent. */
const qgen_spec *qgen_spec_find(const qgen_spec_set *set, const char *name);

/* Canonical Lua text of one spec (every field spelled out, archs sorted): loading it back
   gives an identical struct. Used in cache keys and bundles. Returns the length written
   (excluding NUL), or -1 if buf is too small. */
int qgen_spec_to_lua(const qgen_spec *s, char *buf, size_t n);

/* The layout a spec describes. */
void qgen_spec_layout(const qgen_spec *s, qgen_layout *L);

/* The names of sparse.bounds: QGEN_BOUNDS_F16 "f16", QGEN_BOUNDS_I8 "i8". */
const char *qgen_bounds_name(int bounds);

/* "dense", "sparse" (f16 bounds) or "sparse_i8": the attention mode in readable names. */
const char *qgen_spec_mode(const qgen_spec *s);

/* The forms of a specialization's name (qgen_spec_uri). */
enum {
  /* the kernels' compile-time parameters and nothing else, e.g.
     "d128_h32_g4_kf16_vf16_if16_of16_b64_s0.0883883461_sparse_i8": it names the cache entry
     and the NVRTC program, so specs that differ only by name share one entry */
  QGEN_URI_MODULE = 0,
  /* the spec's name first and no scale (FlashInfer-style), e.g.
     "qwen3-4b_d128_h32_g4_kf16_vf16_if16_of16_b64_sparse_i8": qgen emit -o's file names */
  QGEN_URI_FILE = 1
};

/* The name of s's specialization in form (QGEN_URI_*): the shape, the types, the block, the
   mode (qgen_spec_mode), then "_r<candidates>[_p<top_p>]" for two-stage selection and
   "_vt<v_tau>" for sparse-V. Cut to the buffer. Both forms are part of file and cache names
   users keep: a change to either renames them. */
void qgen_spec_uri(const qgen_spec *s, int form, char *buf, size_t n);

#endif
