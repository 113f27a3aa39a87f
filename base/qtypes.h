/* qtypes.h — the element/quant type traits table (host side).
 *
 * One row per type (ggml's type_traits pattern), facts of the type only: name, values per
 * block, bytes per block, whether it is a quant block or holds every f32 value, whether it
 * may be a KV-cache type or an input/output type, whether attend's mma takes it as bf16,
 * whether it takes a per-tensor scale, and the bit-exact CPU conversions. Everything else in
 * qgen (spec validation, layout sizes, the CPU reference, the emitter's choice of device
 * traits, the tools) reads this table instead of switching on types. What is chosen per type
 * rather than given by it lives with its chooser: tuning in base/plan.c, the tolerances of
 * qgen check in tools/gpucheck.c.
 *
 * Quantizers follow ggml's reference quantizers exactly (docs/DESIGN.md §3): f32 arithmetic,
 * `id` from the f32 `d`, the stored `d` rounded to f16 (nearest even). The f16/bf16
 * conversions are round-to-nearest-even and match CUDA's __float2half_rn/__float2bfloat16_rn
 * bit for bit on every non-NaN input (a NaN becomes 0x7e00 / 0x7fc0 here).
 *
 * FP8 (e4m3 as OCP's E4M3FN / torch.float8_e4m3fn: bias 7, no infinities, NaN 0x7f/0xff,
 * max 448; e5m2 as torch.float8_e5m2: bias 15, IEEE-like, max 57344): f32 -> fp8 rounds to
 * nearest even and saturates to the largest finite value (infinities too), as CUDA's
 * __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...); a NaN becomes 0x7f (CUDA's software path
 * gives that NaN). An fp8 cache stores fp8(x / scale) and reads fp8 * scale, with a per-tensor
 * scale of the cache (qgen_cache_set_scales); the table's conversions are the unscaled ones.
 */
#ifndef QGEN_QTYPES_H
#define QGEN_QTYPES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The bits of a float and back (no aliasing tricks). */
static inline uint32_t qgen_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static inline float qgen_bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

typedef enum qgen_type {
  QGEN_TYPE_F32 = 0,
  QGEN_TYPE_F16,
  QGEN_TYPE_BF16,
  QGEN_TYPE_Q8_0,
  QGEN_TYPE_Q4_0,
  QGEN_TYPE_Q5_0,
  QGEN_TYPE_E4M3,
  QGEN_TYPE_E5M2,
  QGEN_TYPE_COUNT
} qgen_type;

typedef struct qgen_type_traits {
  const char *name;       /* spec spelling: "f16", "q8_0", ... */
  const char *device;     /* name of the device traits struct in templates/qtypes.cuh */
  int block;              /* values per block (1 for plain floats) */
  int block_bytes;        /* bytes per block */
  int is_quant;           /* a ggml block format with an f16 scale (base/qblocks.h) */
  int exact;              /* holds every f32 value: a round trip through it is the identity */
  int kv_ok;              /* may be a K or V cache type */
  int io_ok;              /* may be the type of q/k/v inputs and of the output */
  int bf16_mma;           /* cache type fed to the tensor cores as bf16, not f16: attend
                             stages q for its K twice, value and residue (device BF) */
  int tensor_scale;       /* a cache of this type takes a per-tensor scale (fp8): stored =
                             fp8(x / scale), read = fp8 * scale */
  /* n values (n a multiple of block) from src to f32. */
  void (*to_f32)(const void *src, float *dst, int64_t n);
  /* n values (n a multiple of block) from f32 to dst, ggml-exact. */
  void (*from_f32)(const float *src, void *dst, int64_t n);
} qgen_type_traits;

/* The row for t, or NULL when t is out of range. */
const qgen_type_traits *qgen_type_traits_of(qgen_type t);
/* Look a type up by its spec spelling; returns 0 and sets *t, or -1. */
int qgen_type_from_name(const char *name, qgen_type *t);
/* Bytes of n values of type t (n a multiple of the block); 0 if n is not. */
size_t qgen_type_row_bytes(qgen_type t, int64_t n);
/* A comma-separated list of the type names accepted where mask(traits) is true, for
   error messages: which = 0 all, 1 kv types, 2 io types. Static storage. */
const char *qgen_type_names(int which);

/* Scalar conversions, bit-exact with CUDA's intrinsics of the same rounding. */
uint16_t qgen_f32_to_f16(float x);    /* nearest even (__float2half_rn) */
uint16_t qgen_f32_to_f16_rd(float x); /* toward -inf (__float2half_rd) */
uint16_t qgen_f32_to_f16_ru(float x); /* toward +inf (__float2half_ru) */
float qgen_f16_to_f32(uint16_t h);
uint16_t qgen_f32_to_bf16(float x);   /* nearest even (__float2bfloat16_rn) */
float qgen_bf16_to_f32(uint16_t h);
uint8_t qgen_f32_to_e4m3(float x);   /* nearest even, saturating (__NV_SATFINITE) */
float qgen_e4m3_to_f32(uint8_t b);
uint8_t qgen_f32_to_e5m2(float x);   /* nearest even, saturating (__NV_SATFINITE) */
float qgen_e5m2_to_f32(uint8_t b);

#endif
