/* qtypes.c — the type traits table and its bit-exact CPU conversions (see qtypes.h).
 * Built with -ffp-contract=off: ggml's quantizers multiply, then add, in two roundings. */
#include "base/qtypes.h"

#include "base/le.h"
#include "base/qblocks.h"

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

/* f32 to the fp8 format of mbits mantissa bits, exponent bias `bias` and largest finite code
   maxc: nearest even on the exact value, saturating to maxc (infinities too), NaN to 0x7f. */
static uint8_t f32_to_fp8(float f, int mbits, int bias, uint32_t maxc) {
  const uint32_t x = qgen_f32_bits(f), a = x & 0x7fffffff;
  const uint8_t sign = (uint8_t)(x >> 24 & 0x80);
  if (a > 0x7f800000) return 0x7f;
  if (a < 0x00800000) return sign; /* f32 zero or subnormal: far below the least fp8 subnormal */
  const int e = (int)(a >> 23) - 127 + bias; /* the biased fp8 exponent, if the result is normal */
  uint32_t m = a & 0x7fffff, shift = (uint32_t)(23 - mbits), q;
  if (e >= 1) {
    q = (uint32_t)e << mbits | m >> shift;
  } else { /* fp8 subnormal: the significand with its leading 1, in units of the least one */
    m |= 0x800000;
    shift += (uint32_t)(1 - e);
    if (shift > 24) return sign; /* below half the least subnormal */
    q = m >> shift;
  }
  const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1))) q++; /* a carry moves to the next binade */
  return sign | (uint8_t)(q > maxc ? maxc : q);
}

uint8_t qgen_f32_to_e4m3(float x) { return f32_to_fp8(x, 3, 7, 0x7e); }
uint8_t qgen_f32_to_e5m2(float x) { return f32_to_fp8(x, 2, 15, 0x7b); }

float qgen_e4m3_to_f32(uint8_t b) {
  const int e = b >> 3 & 15, m = b & 7;
  if (e == 15 && m == 7) return NAN;
  const float v = e ? ldexpf((float)(8 + m), e - 10) : ldexpf((float)m, -9);
  return b & 0x80 ? -v : v;
}

/* e5m2 is the high byte of an f16. */
float qgen_e5m2_to_f32(uint8_t b) { return qgen_f16_to_f32((uint16_t)(b << 8)); }

/* ---- row conversions ----------------------------------------------------------------- */

static void f32_to(const void *s, float *d, int64_t n) { memcpy(d, s, (size_t)n * 4); }
static void f32_from(const float *s, void *d, int64_t n) { memcpy(d, s, (size_t)n * 4); }

static void f16_to(const void *s, float *d, int64_t n) {
  for (int64_t i = 0; i < n; i++) d[i] = qgen_f16_to_f32(qgen_rd16((const uint8_t *)s + 2 * i));
}
static void f16_from(const float *s, void *d, int64_t n) {
  for (int64_t i = 0; i < n; i++) qgen_wr16((uint8_t *)d + 2 * i, qgen_f32_to_f16(s[i]));
}
static void bf16_to(const void *s, float *d, int64_t n) {
  for (int64_t i = 0; i < n; i++) d[i] = qgen_bf16_to_f32(qgen_rd16((const uint8_t *)s + 2 * i));
}
static void bf16_from(const float *s, void *d, int64_t n) {
  for (int64_t i = 0; i < n; i++) qgen_wr16((uint8_t *)d + 2 * i, qgen_f32_to_bf16(s[i]));
}

static void e4m3_to(const void *s, float *d, int64_t n) {
  for (int64_t i = 0; i < n; i++) d[i] = qgen_e4m3_to_f32(((const uint8_t *)s)[i]);
}
static void e4m3_from(const float *s, void *d, int64_t n) {
  for (int64_t i = 0; i < n; i++) ((uint8_t *)d)[i] = qgen_f32_to_e4m3(s[i]);
}
static void e5m2_to(const void *s, float *d, int64_t n) {
  for (int64_t i = 0; i < n; i++) d[i] = qgen_e5m2_to_f32(((const uint8_t *)s)[i]);
}
static void e5m2_from(const float *s, void *d, int64_t n) {
  for (int64_t i = 0; i < n; i++) ((uint8_t *)d)[i] = qgen_f32_to_e5m2(s[i]);
}

/* The quant blocks of base/qblocks.h, read and written through byte pointers (d, the f16
   scale, at byte 0); a q4_0/q5_0 byte holds the values j and j + HALF. */
enum { HALF = QGEN_QK / 2 };

/* q8_0: d = amax/127, qs = round(x/d). */
static void q8_0_from(const float *x, void *dst, int64_t n) {
  uint8_t *y = dst;
  for (int64_t b = 0; b < n / QGEN_QK; b++, x += QGEN_QK, y += sizeof(qgen_block_q8_0)) {
    float amax = 0.0f;
    for (int j = 0; j < QGEN_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    qgen_wr16(y, qgen_f32_to_f16(d));
    for (int j = 0; j < QGEN_QK; j++) y[QGEN_Q8_0_QS_OFF + j] = (uint8_t)(int8_t)roundf(x[j] * id);
  }
}
static void q8_0_to(const void *src, float *x, int64_t n) {
  const uint8_t *y = src;
  for (int64_t b = 0; b < n / QGEN_QK; b++, x += QGEN_QK, y += sizeof(qgen_block_q8_0)) {
    const float d = qgen_f16_to_f32(qgen_rd16(y));
    for (int j = 0; j < QGEN_QK; j++) x[j] = (float)(int8_t)y[QGEN_Q8_0_QS_OFF + j] * d;
  }
}

/* The signed value of largest magnitude in a block (the first one on ties), as ggml picks it. */
static float signed_absmax(const float *x) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < QGEN_QK; j++)
    if (amax < fabsf(x[j])) {
      amax = fabsf(x[j]);
      max = x[j];
    }
  return max;
}

/* q4_0: d = max/-8, q = min(15, trunc(x/d + 8.5)); element j low nibble of qs[j],
   element j+16 its high nibble. */
static void q4_0_from(const float *x, void *dst, int64_t n) {
  uint8_t *y = dst;
  for (int64_t b = 0; b < n / QGEN_QK; b++, x += QGEN_QK, y += sizeof(qgen_block_q4_0)) {
    const float d = signed_absmax(x) / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    qgen_wr16(y, qgen_f32_to_f16(d));
    for (int j = 0; j < HALF; j++) {
      const float x0 = x[j] * id, x1 = x[j + HALF] * id;
      int q0 = (int)(x0 + 8.5f), q1 = (int)(x1 + 8.5f);
      q0 = q0 < 15 ? q0 : 15;
      q1 = q1 < 15 ? q1 : 15;
      y[QGEN_Q4_0_QS_OFF + j] = (uint8_t)(q0 | q1 << 4);
    }
  }
}
static void q4_0_to(const void *src, float *x, int64_t n) {
  const uint8_t *y = src;
  for (int64_t b = 0; b < n / QGEN_QK; b++, x += QGEN_QK, y += sizeof(qgen_block_q4_0)) {
    const float d = qgen_f16_to_f32(qgen_rd16(y));
    const uint8_t *qs = y + QGEN_Q4_0_QS_OFF;
    for (int j = 0; j < HALF; j++) {
      x[j] = (float)((qs[j] & 15) - 8) * d;
      x[j + HALF] = (float)((qs[j] >> 4) - 8) * d;
    }
  }
}

/* q5_0: d = max/-16, q = min(31, trunc(x/d + 16.5)); low 4 bits as q4_0, bit 4 of
   element j in bit j of the little-endian qh. */
static void q5_0_from(const float *x, void *dst, int64_t n) {
  uint8_t *y = dst;
  for (int64_t b = 0; b < n / QGEN_QK; b++, x += QGEN_QK, y += sizeof(qgen_block_q5_0)) {
    const float d = signed_absmax(x) / -16.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    qgen_wr16(y, qgen_f32_to_f16(d));
    uint32_t qh = 0;
    for (int j = 0; j < HALF; j++) {
      const float x0 = x[j] * id, x1 = x[j + HALF] * id;
      int q0 = (int)(x0 + 16.5f), q1 = (int)(x1 + 16.5f);
      q0 = q0 < 31 ? q0 : 31;
      q1 = q1 < 31 ? q1 : 31;
      y[QGEN_Q5_0_QS_OFF + j] = (uint8_t)((q0 & 15) | (q1 & 15) << 4);
      qh |= (uint32_t)(q0 >> 4 & 1) << j | (uint32_t)(q1 >> 4 & 1) << (j + HALF);
    }
    qgen_wr32(y + QGEN_Q5_0_QH_OFF, qh);
  }
}
static void q5_0_to(const void *src, float *x, int64_t n) {
  const uint8_t *y = src;
  for (int64_t b = 0; b < n / QGEN_QK; b++, x += QGEN_QK, y += sizeof(qgen_block_q5_0)) {
    const float d = qgen_f16_to_f32(qgen_rd16(y));
    const uint32_t qh = qgen_rd32(y + QGEN_Q5_0_QH_OFF);
    const uint8_t *qs = y + QGEN_Q5_0_QS_OFF;
    for (int j = 0; j < HALF; j++) {
      const int h0 = (qh >> j & 1) << 4, h1 = (qh >> (j + HALF) & 1) << 4;
      x[j] = (float)(((qs[j] & 15) | h0) - 16) * d;
      x[j + HALF] = (float)(((qs[j] >> 4) | h1) - 16) * d;
    }
  }
}

/* One row per type. */
static const qgen_type_traits TRAITS[QGEN_TYPE_COUNT] = {
    [QGEN_TYPE_F32] = {.name = "f32", .device = "qg_f32", .block = 1, .block_bytes = 4, .exact = 1,
                       .io_ok = 1, .to_f32 = f32_to, .from_f32 = f32_from},
    [QGEN_TYPE_F16] = {.name = "f16", .device = "qg_f16", .block = 1, .block_bytes = 2, .kv_ok = 1, .io_ok = 1,
                       .to_f32 = f16_to, .from_f32 = f16_from},
    [QGEN_TYPE_BF16] = {.name = "bf16", .device = "qg_bf16", .block = 1, .block_bytes = 2, .kv_ok = 1, .io_ok = 1,
                        .bf16_mma = 1, .to_f32 = bf16_to, .from_f32 = bf16_from},
    [QGEN_TYPE_Q8_0] = {.name = "q8_0", .device = "qg_q8_0", .block = QGEN_QK, .block_bytes = sizeof(qgen_block_q8_0),
                        .is_quant = 1, .kv_ok = 1, .to_f32 = q8_0_to, .from_f32 = q8_0_from},
    [QGEN_TYPE_Q4_0] = {.name = "q4_0", .device = "qg_q4_0", .block = QGEN_QK, .block_bytes = sizeof(qgen_block_q4_0),
                        .is_quant = 1, .kv_ok = 1, .to_f32 = q4_0_to, .from_f32 = q4_0_from},
    [QGEN_TYPE_Q5_0] = {.name = "q5_0", .device = "qg_q5_0", .block = QGEN_QK, .block_bytes = sizeof(qgen_block_q5_0),
                        .is_quant = 1, .kv_ok = 1, .to_f32 = q5_0_to, .from_f32 = q5_0_from},
    [QGEN_TYPE_E4M3] = {.name = "e4m3", .device = "qg_e4m3", .block = 1, .block_bytes = 1, .kv_ok = 1, .tensor_scale = 1,
                        .to_f32 = e4m3_to, .from_f32 = e4m3_from},
    [QGEN_TYPE_E5M2] = {.name = "e5m2", .device = "qg_e5m2", .block = 1, .block_bytes = 1, .kv_ok = 1, .tensor_scale = 1,
                        .to_f32 = e5m2_to, .from_f32 = e5m2_from},
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
