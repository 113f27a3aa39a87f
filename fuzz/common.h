/* common.h — helpers shared by the fuzz harnesses. */
#ifndef QGEN_FUZZ_COMMON_H
#define QGEN_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "spec/spec.h"

/* fuzz_cache looks entries up under sha256 of this text (mkseeds writes its seeds so). */
#define FUZZ_CACHE_KEY "fuzz-key"

/* Field-by-field equality of two specs (the spec{} line aside); scale and coverage must be
   the same double, bit for bit. */
static inline int fuzz_same_spec(const qgen_spec *a, const qgen_spec *b) {
  if (strcmp(a->name, b->name) != 0) return 0;
  if (a->head_dim != b->head_dim || a->n_head != b->n_head || a->n_head_kv != b->n_head_kv) return 0;
  if (a->k_type != b->k_type || a->v_type != b->v_type || a->in_type != b->in_type || a->out_type != b->out_type)
    return 0;
  if (memcmp(&a->scale, &b->scale, sizeof a->scale) != 0 || memcmp(&a->coverage, &b->coverage, sizeof a->coverage) != 0)
    return 0;
  if (a->block != b->block || a->sparse != b->sparse || a->budget != b->budget || a->sink != b->sink ||
      a->recent != b->recent)
    return 0;
  if (a->n_archs != b->n_archs || a->n_archs < 1 || a->n_archs > QGEN_MAX_ARCHS) return 0;
  for (int i = 0; i < a->n_archs; i++)
    if (a->archs[i] != b->archs[i]) return 0;
  return 1;
}

/* The unread rest of a harness's input. */
typedef struct {
  const uint8_t *p;
  size_t n;
} fuzz_input;

/* The next byte, 0 past the end. */
static inline uint8_t fuzz_byte(fuzz_input *in) {
  if (!in->n) return 0;
  in->n--;
  return *in->p++;
}

/* A field: a tag byte below 0x80 is a small value (times unit), else the next 8 bytes are a
   raw int64 (extreme values). */
static inline long long fuzz_field(fuzz_input *in, long long unit) {
  const uint8_t t = fuzz_byte(in);
  if (t < 0x80) return t * unit;
  uint64_t x = 0;
  for (int i = 0; i < 8; i++) x |= (uint64_t)fuzz_byte(in) << (8 * i);
  return (long long)x;
}

#endif
