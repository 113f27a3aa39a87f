/* qtypes.c — the type traits table and its bit-exact CPU conversions (see qtypes.h).
 * Built with -ffp-contract=off: ggml's quantizers multiply, then add, in two roundings. */
#include "base/qtypes.h"

#include <math.h>
#include <pthread.h>
#include <string.h>


/* ---- scalar conversions ------------------------------------------------------------ */

uint16_t qgen_f32_to_f16(float f) {
  uint32_t x = qgen_f32_bits(f);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  x &= 0x7fffffff;
  if (x >= 0x7f800000) return sign | (x > 0x7f800000 ? 0x7e00 : 0x7c00);
  if (x >= 0x477ff000) return sign | 0x7c00; /* >= 65520 rounds to inf */
  if (x < 0x38800000) {                      /* below 2^-14: half subnormal or zero */
    if (x < 0x33000000) return sign;         /* <= 2^-25 rounds to zero (tie to even) */
    uint32_t m = (x & 0x7fffff) | 0x800000;
    int shift = 126 - (int)(x >> 23); /* value / 2^-24 = m * 2^(e-126) */
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    return sign | (uint16_t)q;
  }
  uint32_t h = (x - 0x38000000) >> 13, rem = x & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
  return sign | (uint16_t)h;
}

float qgen_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 0x1f) return qgen_bits_f32(sign | 0x7f800000 | (m << 13));
  if (e == 0) { /* zero or subnormal: m * 2^-24, exact in f32 */
    float v = (float)m * 0x1p-24f;
    return sign ? -v : v;
  }
  return qgen_bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

/* One step toward -inf (dir < 0) or +inf (dir > 0) from a finite or infinite half. */
static uint16_t f16_step(uint16_t h, int dir) {
  int neg = (h & 0x8000) != 0;
  if (dir < 0) {
    if (h == 0x0000) return 0x8001;
    return neg ? (uint16_t)(h + 1) : (uint16_t)(h - 1);
  }
  if (h == 0x8000) return 0x0001;
  return neg ? (uint16_t)(h - 1) : (uint16_t)(h + 1);
}

uint16_t qgen_f32_to_f16_rd(float f) {
  uint16_t h = qgen_f32_to_f16(f);
  if (f != f) return h;
  return qgen_f16_to_f32(h) > f ? f16_step(h, -1) : h;
}

uint16_t qgen_f32_to_f16_ru(float f) {
  uint16_t h = qgen_f32_to_f16(f);
  if (f != f) return h;
  return qgen_f16_to_f32(h) < f ? f16_step(h, +1) : h;
}

uint16_t qgen_f32_to_bf16(float f) {
  uint32_t x = qgen_f32_bits(f);
  if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)(((x >> 16) & 0x8000) | 0x7fc0);
  x += 0x7fff + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

float qgen_bf16_to_f32(uint16_t h) { return qgen_bits_f32((uint32_t)h << 16); }

/* ---- row conversions ----------------------------------------------------------------- */

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static void wr16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}

static void f32_to(const void *s, float *d, int64_t n) { memcpy(d, s, (size_t)n * 4); }
static void f32_from(const float *s, void *d, int64_t n) { memcpy(d, s, (size_t)n * 4); }

static void f16_to(const void *s, float *d, int64_t n) {
  for (int64_t i = 0; i < n; i++) d[i] = qgen_f16_to_f32(rd16((const uint8_t *)s + 2 * i));
}
static void f16_from(const float *s, void *d, int64_t n) {
  for (int64_t i = 0; i < n; i++) wr16((uint8_t *)d + 2 * i, qgen_f32_to_f16(s[i]));
}
static void bf16_to(const void *s, float *d, int64_t n) {
  for (int64_t i = 0; i < n; i++) d[i] = qgen_bf16_to_f32(rd16((const uint8_t *)s + 2 * i));
}
static void bf16_from(const float *s, void *d, int64_t n) {
  for (int64_t i = 0; i < n; i++) wr16((uint8_t *)d + 2 * i, qgen_f32_to_bf16(s[i]));
}

/* q8_0: d = amax/127, qs = round(x/d). Block: d (f16), int8 qs[32]. */
static void q8_0_from(const float *x, void *dst, int64_t n) {
  uint8_t *y = dst;
  for (int64_t b = 0; b < n / 32; b++, x += 32, y += 34) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    wr16(y, qgen_f32_to_f16(d));
    for (int j = 0; j < 32; j++) y[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
  }
}
static void q8_0_to(const void *src, float *x, int64_t n) {
  const uint8_t *y = src;
  for (int64_t b = 0; b < n / 32; b++, x += 32, y += 34) {
    const float d = qgen_f16_to_f32(rd16(y));
    for (int j = 0; j < 32; j++) x[j] = (float)(int8_t)y[2 + j] * d;
  }
}

/* The signed value of largest magnitude (the first one on ties), as ggml picks it. */
static float signed_absmax(const float *x) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; j++)
    if (amax < fabsf(x[j])) {
      amax = fabsf(x[j]);
      max = x[j];
    }
  return max;
}

/* q4_0: d = max/-8, q = min(15, trunc(x/d + 8.5)); element j low nibble of qs[j],
   element j+16 its high nibble. Block: d (f16), uint8 qs[16]. */
static void q4_0_from(const float *x, void *dst, int64_t n) {
  uint8_t *y = dst;
  for (int64_t b = 0; b < n / 32; b++, x += 32, y += 18) {
    const float d = signed_absmax(x) / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    wr16(y, qgen_f32_to_f16(d));
    for (int j = 0; j < 16; j++) {
      const float x0 = x[j] * id, x1 = x[j + 16] * id;
      int q0 = (int)(x0 + 8.5f), q1 = (int)(x1 + 8.5f);
      q0 = q0 < 15 ? q0 : 15;
      q1 = q1 < 15 ? q1 : 15;
      y[2 + j] = (uint8_t)(q0 | q1 << 4);
    }
  }
}
static void q4_0_to(const void *src, float *x, int64_t n) {
  const uint8_t *y = src;
  for (int64_t b = 0; b < n / 32; b++, x += 32, y += 18) {
    const float d = qgen_f16_to_f32(rd16(y));
    for (int j = 0; j < 16; j++) {
      x[j] = (float)((y[2 + j] & 15) - 8) * d;
      x[j + 16] = (float)((y[2 + j] >> 4) - 8) * d;
    }
  }
}

/* q5_0: d = max/-16, q = min(31, trunc(x/d + 16.5)); low 4 bits as q4_0, bit 4 of
   element j in bit j of the little-endian qh. Block: d (f16), qh[4], qs[16]. */
static void q5_0_from(const float *x, void *dst, int64_t n) {
  uint8_t *y = dst;
  for (int64_t b = 0; b < n / 32; b++, x += 32, y += 22) {
    const float d = signed_absmax(x) / -16.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    wr16(y, qgen_f32_to_f16(d));
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
      const float x0 = x[j] * id, x1 = x[j + 16] * id;
      int q0 = (int)(x0 + 16.5f), q1 = (int)(x1 + 16.5f);
      q0 = q0 < 31 ? q0 : 31;
      q1 = q1 < 31 ? q1 : 31;
      y[6 + j] = (uint8_t)((q0 & 15) | (q1 & 15) << 4);
      qh |= (uint32_t)(q0 >> 4 & 1) << j | (uint32_t)(q1 >> 4 & 1) << (j + 16);
    }
    for (int i = 0; i < 4; i++) y[2 + i] = (uint8_t)(qh >> 8 * i);
  }
}
static void q5_0_to(const void *src, float *x, int64_t n) {
  const uint8_t *y = src;
  for (int64_t b = 0; b < n / 32; b++, x += 32, y += 22) {
    const float d = qgen_f16_to_f32(rd16(y));
    const uint32_t qh = y[2] | (uint32_t)y[3] << 8 | (uint32_t)y[4] << 16 | (uint32_t)y[5] << 24;
    for (int j = 0; j < 16; j++) {
      const int h0 = (qh >> j & 1) << 4, h1 = (qh >> (j + 16) & 1) << 4;
      x[j] = (float)(((y[6 + j] & 15) | h0) - 16) * d;
      x[j + 16] = (float)(((y[6 + j] >> 4) | h1) - 16) * d;
    }
  }
}

static const qgen_type_traits TRAITS[QGEN_TYPE_COUNT] = {
    [QGEN_TYPE_F32] = {"f32", "qg_f32", 1, 4, 0, 0, 1, f32_to, f32_from},
    [QGEN_TYPE_F16] = {"f16", "qg_f16", 1, 2, 0, 1, 1, f16_to, f16_from},
    [QGEN_TYPE_BF16] = {"bf16", "qg_bf16", 1, 2, 0, 1, 1, bf16_to, bf16_from},
    [QGEN_TYPE_Q8_0] = {"q8_0", "qg_q8_0", 32, 34, 1, 1, 0, q8_0_to, q8_0_from},
    [QGEN_TYPE_Q4_0] = {"q4_0", "qg_q4_0", 32, 18, 1, 1, 0, q4_0_to, q4_0_from},
    [QGEN_TYPE_Q5_0] = {"q5_0", "qg_q5_0", 32, 22, 1, 1, 0, q5_0_to, q5_0_from},
};

const qgen_type_traits *qgen_type_traits_of(qgen_type t) {
  return (unsigned)t < QGEN_TYPE_COUNT ? &TRAITS[t] : NULL;
}

int qgen_type_from_name(const char *name, qgen_type *t) {
  for (int i = 0; name && i < QGEN_TYPE_COUNT; i++)
    if (strcmp(name, TRAITS[i].name) == 0) {
      *t = (qgen_type)i;
      return 0;
    }
  return -1;
}

size_t qgen_type_row_bytes(qgen_type t, int64_t n) {
  const qgen_type_traits *tr = qgen_type_traits_of(t);
  if (!tr || n < 0 || n % tr->block) return 0;
  return (size_t)(n / tr->block) * (size_t)tr->block_bytes;
}

/* The three lists are built once, on first use, from the table (pthread_once: the spec
   loader may run on several threads). */
static char type_names[3][128];
static pthread_once_t type_names_once = PTHREAD_ONCE_INIT;
static void type_names_init(void) {
  for (int w = 0; w < 3; w++)
    for (int i = 0; i < QGEN_TYPE_COUNT; i++) {
      const int ok = w == 1 ? TRAITS[i].kv_ok : w == 2 ? TRAITS[i].io_ok : 1;
      if (!ok) continue;
      if (type_names[w][0]) strcat(type_names[w], ", ");
      strcat(type_names[w], TRAITS[i].name);
    }
}

const char *qgen_type_names(int which) {
  pthread_once(&type_names_once, type_names_init);
  return type_names[which < 0 || which > 2 ? 0 : which];
}
