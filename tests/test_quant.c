/* test_quant.c — the quant types and scalar conversions of base/qtypes.c.
 *
 *   1. known answers: tests/data/quant_kat.txt (argv[1] = the data directory) holds q8_0,
 *      q4_0 and q5_0 blocks and f16/bf16 conversions whose expected bits were derived by
 *      hand from docs/DESIGN.md §3; every one must match bit for bit.
 *   2. round trips of random rows within each type's error bound (derivations below).
 *   3. f16: exhaustive f16 -> f32 -> f16 over all 65536 non-NaN patterns; f32 -> f16 (nearest
 *      even, toward -inf, toward +inf) against an independent slow reference (bisection over
 *      the table of half values, ties decided exactly in double) on millions of floats;
 *      rd <= x <= ru with rd, ru equal or adjacent. bf16: exhaustive round trip and random
 *      floats against a reference of the same kind.
 *   4. fp8 (e4m3, e5m2): all 256 codes to f32 (against the formats' definitions: anchors,
 *      strictly increasing magnitudes, NaN/inf codes) and back to the same code; f32 ->
 *      fp8 against a slow reference (nearest by bisection over the code table, ties to the
 *      even code decided exactly in double, saturation to the largest finite value) on
 *      every exact midpoint and its neighbours and on a sweep of all f32 patterns;
 *      saturation, infinities, NaN, signed zeros.
 *
 * Fresh random data each run: the seed is printed; QGEN_SEED=<n> reproduces a run.
 * Prints one line per check and "N passed, N failed"; exits 1 on any failure.
 */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/le.h"
#include "base/qtypes.h"

#include "testlib.h"
#include "rng.h"

/* ---- random numbers ------------------------------------------------------------------ */

static double rnd_normal(void) {
  double u = rnd_unit(), v = rnd_unit();
  return sqrt(-2.0 * log(u + 0x1p-60)) * cos(6.283185307179586 * v);
}

/* ---- 1. known answers ---------------------------------------------------------------- */

static int parse_hex_bytes(const char *s, uint8_t *out, int cap) {
  int n = 0, nib = -1;
  for (; *s; s++) {
    int v;
    if (*s >= '0' && *s <= '9') v = *s - '0';
    else if (*s >= 'a' && *s <= 'f') v = *s - 'a' + 10;
    else if (*s >= 'A' && *s <= 'F') v = *s - 'A' + 10;
    else if (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') {
      if (nib >= 0) return -1; /* a lone nibble */
      continue;
    } else
      return -1;
    if (nib < 0)
      nib = v;
    else {
      if (n >= cap) return -1;
      out[n++] = (uint8_t)(nib << 4 | v);
      nib = -1;
    }
  }
  return nib >= 0 ? -1 : n;
}

static void test_kat(const char *dir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/quant_kat.txt", dir);
  FILE *f = fopen(path, "r");
  check(f != NULL, "open %s", path);
  if (!f) return;

  char line[4096], name[128] = "", tname[32] = "";
  float in[32];
  int have_in = 0, lineno = 0, n_conv = 0, n_block = 0;
  while (fgets(line, sizeof line, f)) {
    lineno++;
    char *s = line;
    while (*s == ' ' || *s == '\t') s++;
    if (*s == '#' || *s == '\n' || *s == '\r' || !*s) continue;

    if (strncmp(s, "conv ", 5) == 0) {
      char fn[16], a[64], b[64];
      if (sscanf(s + 5, "%15s %63s %63s", fn, a, b) != 3) {
        check(0, "kat line %d: malformed conv", lineno);
        continue;
      }
      n_conv++;
      if (strcmp(fn, "h2f") == 0) {
        uint16_t h = (uint16_t)strtoul(a, NULL, 16);
        float want = strtof(b, NULL), got = qgen_f16_to_f32(h);
        check(qgen_f32_bits(got) == qgen_f32_bits(want), "kat line %d: f16 %s -> f32 %a (want %a)", lineno,
              a, got, want);
        continue;
      }
      float x = strtof(a, NULL);
      uint16_t want = (uint16_t)strtoul(b, NULL, 16), got;
      if (strcmp(fn, "f16") == 0) got = qgen_f32_to_f16(x);
      else if (strcmp(fn, "f16_rd") == 0) got = qgen_f32_to_f16_rd(x);
      else if (strcmp(fn, "f16_ru") == 0) got = qgen_f32_to_f16_ru(x);
      else if (strcmp(fn, "bf16") == 0) got = qgen_f32_to_bf16(x);
      else {
        check(0, "kat line %d: unknown conversion %s", lineno, fn);
        continue;
      }
      check(got == want, "kat line %d: %s(%s = %a) = %04x (want %04x)", lineno, fn, a, x, got,
            want);
    } else if (strncmp(s, "block ", 6) == 0) {
      if (sscanf(s + 6, "%31s %127s", tname, name) != 2) check(0, "kat line %d: malformed", lineno);
      have_in = 0;
    } else if (strncmp(s, "in ", 3) == 0) {
      char *p = s + 3, *end;
      int n = 0;
      for (; n < 32; n++) {
        in[n] = strtof(p, &end);
        if (end == p) break;
        p = end;
      }
      have_in = n == 32;
      if (!have_in) check(0, "kat line %d: %s/%s needs 32 inputs, got %d", lineno, tname, name, n);
    } else if (strncmp(s, "out ", 4) == 0) {
      uint8_t want[64], got[64];
      int nb = parse_hex_bytes(s + 4, want, (int)sizeof want);
      qgen_type t;
      if (!have_in || nb < 0 || qgen_type_from_name(tname, &t) != 0) {
        check(0, "kat line %d: bad block record %s/%s", lineno, tname, name);
        continue;
      }
      const qgen_type_traits *tr = qgen_type_traits_of(t);
      n_block++;
      if (nb != tr->block_bytes) {
        check(0, "kat line %d: %s/%s has %d bytes, the type has %d", lineno, tname, name, nb,
              tr->block_bytes);
        continue;
      }
      tr->from_f32(in, got, 32);
      int ok = memcmp(got, want, (size_t)nb) == 0;
      char hex[200] = "";
      if (!ok)
        for (int i = 0; i < nb; i++) sprintf(hex + strlen(hex), "%02x", got[i]);
      check(ok, "kat %s %s: %d bytes bit-exact%s%s", tname, name, nb, ok ? "" : ", got ", hex);
      /* and dequantizing the expected bytes gives values within the type's step */
      float back[32];
      tr->to_f32(want, back, 32);
      double d = fabs((double)qgen_f16_to_f32(qgen_rd16(want)));
      double worst = 0;
      for (int j = 0; j < 32; j++) worst = fmax(worst, fabs((double)back[j] - in[j]));
      check(worst <= d * 1.0001 + 1e-30, "kat %s %s: dequantized within one step (max err %g, d %g)",
            tname, name, worst, d);
      have_in = 0;
    } else {
      check(0, "kat line %d: unknown record: %s", lineno, s);
    }
  }
  fclose(f);
  check(n_conv >= 40 && n_block >= 12, "kat file: %d conversions, %d blocks", n_conv, n_block);
}

/* ---- 2. round trips ------------------------------------------------------------------ */

/* A random row of n values: gaussian at a random scale, with occasional outliers, exact
   zeros and repeated values (ties in |x|). */
static void random_row(float *x, int n) {
  static const double scales[] = {1e-4, 1e-2, 1.0, 3.0, 100.0, 2000.0};
  const double s = scales[rnd32() % 6];
  const int kind = (int)(rnd32() % 4);
  for (int i = 0; i < n; i++) {
    double v = rnd_normal() * s;
    if (kind == 1 && rnd32() % 16 == 0) v *= 20;        /* outliers */
    if (kind == 2 && rnd32() % 4 == 0) v = 0;           /* zeros */
    if (kind == 3 && rnd32() % 4 == 0) v = (rnd32() & 1 ? s : -s); /* ties in |x| */
    x[i] = (float)v;
  }
}

/* Quantized types. Let d32 be the f32 scale of a block and d16 the stored (f16) one.
 *  q8_0: q = round(x/d32) with |x/d32| <= 127, so |x - q*d32| <= d32/2; the stored scale
 *        adds |q|*|d16 - d32| <= 127*|d16 - d32|.
 *  q4_0: d32 = max/-8, so t = x/d32 lies in [-8, 8] and the max itself maps to -8.
 *        q = trunc(t + 8.5) = floor(t + 0.5) + 8 for t + 8.5 >= 0: nearest (halves up),
 *        error <= d/2 -- except that q is clamped to 15, i.e. q - 8 <= 7: a value on the
 *        other side of zero from the max with t in (7.5, 8] comes back as 7 d, up to one
 *        full step away. Hence |err| <= |d32| overall (<= |d32|/2 where t <= 7.5), plus
 *        8*|d16 - d32| from the stored scale.
 *  q5_0: the same with 16 and 31: <= |d32| (+ 16*|d16 - d32|).
 * A small relative slack (1e-4 d) covers the f32 rounding of x*id + 8.5. */
static void test_round_trip_quant(qgen_type t, int qmax_half, double qmax_abs) {
  const qgen_type_traits *tr = qgen_type_traits_of(t);
  enum { N = 256, ROWS = 4000 };
  float x[N], y[N];
  uint8_t q[N / 32 * 34];
  int64_t bad = 0, bad_d = 0, bad_tight = 0;
  double worst = 0;
  for (int r = 0; r < ROWS; r++) {
    random_row(x, N);
    tr->from_f32(x, q, N);
    tr->to_f32(q, y, N);
    for (int b = 0; b < N / 32; b++) {
      const float *xb = x + 32 * b;
      float amax = 0, max = 0;
      for (int j = 0; j < 32; j++)
        if (amax < fabsf(xb[j])) {
          amax = fabsf(xb[j]);
          max = xb[j];
        }
      const float d32 = t == QGEN_TYPE_Q8_0 ? amax / 127.0f : max / (float)-qmax_half;
      const uint8_t *blk = q + (size_t)b * (size_t)tr->block_bytes;
      const uint16_t d16b = qgen_rd16(blk);
      if (d16b != qgen_f32_to_f16(d32)) bad_d++;
      const double d16 = qgen_f16_to_f32(d16b), ad = fabs((double)d32);
      for (int j = 0; j < 32; j++) {
        const double err = fabs((double)y[32 * b + j] - xb[j]);
        double tt = d32 != 0 ? (double)xb[j] / d32 : 0;
        double step = t == QGEN_TYPE_Q8_0 ? 0.5 : 1.0;
        double bound = ad * (step + 1e-4) + qmax_abs * fabs(d16 - d32);
        if (err > bound) bad++;
        if (t != QGEN_TYPE_Q8_0 && tt <= qmax_half - 0.6 && err > ad * 0.5001 + qmax_abs * fabs(d16 - d32))
          bad_tight++;
        if (bound > 0) worst = fmax(worst, err / bound);
      }
    }
  }
  check(bad_d == 0, "%s: stored d == f16(d32) in every block (%lld wrong)", tr->name,
        (long long)bad_d);
  check(bad == 0, "%s round trip of %d random values: |err| <= %s (+ stored-scale term); "
        "worst err/bound %.4f, %lld over", tr->name, N * ROWS, t == QGEN_TYPE_Q8_0 ? "d/2" : "d", worst,
        (long long)bad);
  if (t != QGEN_TYPE_Q8_0)
    check(bad_tight == 0, "%s: |err| <= d/2 wherever x/d <= %d.4 (no clamp) (%lld over)",
          tr->name, qmax_half - 1, (long long)bad_tight);

  /* an all-zero row comes back as zeros */
  memset(x, 0, sizeof x);
  tr->from_f32(x, q, N);
  tr->to_f32(q, y, N);
  int nz = 0;
  for (int i = 0; i < N; i++) nz += y[i] != 0;
  check(nz == 0, "%s: zeros round trip to zeros", tr->name);
}

static void test_round_trip_float(qgen_type t) {
  const qgen_type_traits *tr = qgen_type_traits_of(t);
  const int is_f16 = t == QGEN_TYPE_F16;
  const double rel = is_f16 ? 0x1p-11 : 0x1p-8;
  const double min_normal = is_f16 ? 0x1p-14 : 0x1p-126, max = is_f16 ? 65504.0 : 3.38e38;
  enum { N = 4096, ROWS = 200 };
  float x[N], y[N], z[N];
  uint16_t h[N];
  int64_t bad = 0, bad_scalar = 0, n = 0;
  for (int r = 0; r < ROWS; r++) {
    for (int i = 0; i < N; i++) {
      /* log-uniform magnitudes over the normal range, random sign */
      double e = is_f16 ? -14 + rnd_unit() * 29.9 : -120 + rnd_unit() * 240;
      x[i] = (float)(ldexp(1.0 + rnd_unit(), (int)floor(e)) * (rnd32() & 1 ? 1 : -1));
      if (fabs(x[i]) >= max) x[i] = (float)(max * 0.99);
    }
    tr->from_f32(x, h, N);
    tr->to_f32(h, y, N);
    for (int i = 0; i < N; i++) {
      n++;
      if (fabs(x[i]) >= min_normal && fabs((double)y[i] - x[i]) > rel * fabs(x[i])) bad++;
      uint16_t s = is_f16 ? qgen_f32_to_f16(x[i]) : qgen_f32_to_bf16(x[i]);
      z[i] = is_f16 ? qgen_f16_to_f32(s) : qgen_bf16_to_f32(s);
      if (s != h[i] || qgen_f32_bits(z[i]) != qgen_f32_bits(y[i])) bad_scalar++;
    }
  }
  check(bad == 0, "%s round trip of %lld values: relative error <= 2^-%d (%lld over)", tr->name,
        (long long)n, is_f16 ? 11 : 8, (long long)bad);
  check(bad_scalar == 0, "%s: row conversions equal the scalar ones (%lld differ)", tr->name,
        (long long)bad_scalar);
}

/* ---- 3. f16 / bf16 against slow references ------------------------------------------ */

/* Value of the non-negative half with bits i, 0 <= i <= 0x7c00, straight from the binary16
   definition; 0x7c00 is taken as 2^16 (the value a rounding "one past 65504" lands on). */
static double half_value(int i) {
  int e = i >> 10, m = i & 1023;
  if (i == 0x7c00) return 65536.0;
  return e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
}
static double half_tab[0x7c01];

/* Largest i in [0, 0x7c00] with half_tab[i] <= a (a >= 0, finite). */
static int half_floor(double a) {
  int lo = 0, hi = 0x7c00;
  if (a >= half_tab[hi]) return hi;
  while (hi - lo > 1) { /* invariant: tab[lo] <= a < tab[hi] */
    int mid = (lo + hi) / 2;
    if (half_tab[mid] <= a) lo = mid;
    else hi = mid;
  }
  return lo;
}

static uint16_t ref_f16_rn(float x) {
  uint16_t s = signbit(x) ? 0x8000 : 0;
  double a = fabs((double)x);
  if (isinf(a) || a >= 65536.0) return s | 0x7c00;
  int i = half_floor(a);
  if (half_tab[i] == a) return s | (uint16_t)i;
  double mid2 = half_tab[i] + half_tab[i + 1]; /* exact: both are halves of close size */
  if (2 * a < mid2) return s | (uint16_t)i;
  if (2 * a > mid2) return s | (uint16_t)(i + 1);
  return s | (uint16_t)((i & 1) ? i + 1 : i);
}
/* Largest finite half <= a, smallest half >= a (a >= 0 finite): magnitudes. */
static int ref_down(double a) {
  int i = half_floor(a);
  return i > 0x7bff ? 0x7bff : i;
}
static int ref_up(double a) {
  if (a > 65504.0) return 0x7c00;
  int i = half_floor(a);
  return half_tab[i] == a ? i : i + 1;
}
static uint16_t ref_f16_rd(float x) {
  if (isinf(x)) return x > 0 ? 0x7c00 : 0xfc00;
  return signbit(x) ? (uint16_t)(0x8000 | ref_up(-(double)x)) : (uint16_t)ref_down(x);
}
static uint16_t ref_f16_ru(float x) {
  if (isinf(x)) return x > 0 ? 0x7c00 : 0xfc00;
  return signbit(x) ? (uint16_t)(0x8000 | ref_down(-(double)x)) : (uint16_t)ref_up(x);
}

/* Order of halves as numbers (non-NaN): -inf < ... < -0 == +0 < ... < +inf. */
static double hval(uint16_t h) {
  double v = (h & 0x7fff) == 0x7c00 ? INFINITY : half_value(h & 0x7fff);
  return h & 0x8000 ? -v : v;
}

/* Random floats of three kinds: any bit pattern; magnitudes in and around the half range;
   values within an f32 ulp or two of a midpoint between adjacent halves. */
static float random_float(int kind) {
  if (kind == 0) return qgen_bits_f32(rnd32());
  if (kind == 1) {
    uint32_t e = 127 - 28 + rnd32() % 46; /* 2^-28 .. 2^17 */
    return qgen_bits_f32((rnd32() & 0x80000000u) | e << 23 | (rnd32() & 0x7fffff));
  }
  int i = (int)(rnd32() % 0x7c00); /* i and i+1 (the latter may be the 2^16 "inf" slot) */
  float mid = (float)((half_tab[i] + half_tab[i + 1]) / 2); /* exact in f32 */
  int off = (int)(rnd32() % 5) - 2;
  uint32_t u = qgen_f32_bits(mid);
  float v = qgen_bits_f32(u + (uint32_t)off);
  return rnd32() & 1 ? -v : v;
}

static void test_f16_exhaustive(void) {
  int bad = 0, bad_dir = 0, n = 0;
  for (uint32_t h = 0; h < 0x10000; h++) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue; /* NaN */
    n++;
    float f = qgen_f16_to_f32((uint16_t)h);
    if (qgen_f32_to_f16(f) != h) bad++;
    if (qgen_f32_to_f16_rd(f) != h || qgen_f32_to_f16_ru(f) != h) bad_dir++;
    double want = hval((uint16_t)h);
    if ((double)f != want || !!signbit(f) != !!(h & 0x8000)) bad++;
  }
  check(bad == 0, "f16 -> f32 -> f16 exhaustive over %d non-NaN patterns (value and bits): %d bad",
        n, bad);
  check(bad_dir == 0, "f16 exact values: rd and ru return them unchanged: %d bad", bad_dir);
  int nan_ok = 1;
  for (uint32_t m = 1; m < 0x400; m++) {
    nan_ok &= isnan(qgen_f16_to_f32((uint16_t)(0x7c00 | m)));
    nan_ok &= isnan(qgen_f16_to_f32((uint16_t)(0xfc00 | m)));
  }
  check(nan_ok, "f16 NaN patterns convert to NaN");
  check((qgen_f32_to_f16(NAN) & 0x7fff) == 0x7e00, "f32 NaN -> f16 quiet NaN (%04x)",
        qgen_f32_to_f16(NAN));
}

static void test_f16_random(int64_t count) {
  int64_t bad_rn = 0, bad_rd = 0, bad_ru = 0, bad_order = 0, n = 0;
  float ex_rn = 0, ex_rd = 0, ex_ru = 0;
  for (int64_t i = 0; i < count; i++) {
    float x = random_float((int)(i % 3));
    if (isnan(x)) continue;
    n++;
    uint16_t rn = qgen_f32_to_f16(x), rd = qgen_f32_to_f16_rd(x), ru = qgen_f32_to_f16_ru(x);
    if (rn != ref_f16_rn(x)) bad_rn++, ex_rn = x;
    if (rd != ref_f16_rd(x)) bad_rd++, ex_rd = x;
    if (ru != ref_f16_ru(x)) bad_ru++, ex_ru = x;
    /* rd <= x <= ru; rd == ru (x exact) or they are adjacent halves */
    double lo = hval(rd), hi = hval(ru);
    int ok = lo <= x && x <= hi;
    if (lo == hi) ok &= lo == x;
    else {
      /* adjacent: no half strictly between them; the next half up from rd is ru */
      uint16_t next = (rd & 0x8000) ? (rd == 0x8000 ? 0x0001 : (uint16_t)(rd - 1)) : (uint16_t)(rd + 1);
      ok &= hval(next) == hi;
    }
    if (!ok) bad_order++;
  }
  check(bad_rn == 0, "f32 -> f16 nearest-even vs slow reference on %lld floats: %lld differ%s",
        (long long)n, (long long)bad_rn, bad_rn ? " (e.g. below)" : "");
  if (bad_rn) printf("     x = %a: got %04x want %04x\n", ex_rn, qgen_f32_to_f16(ex_rn), ref_f16_rn(ex_rn));
  check(bad_rd == 0, "f32 -> f16 toward -inf vs slow reference: %lld differ", (long long)bad_rd);
  if (bad_rd) printf("     x = %a: got %04x want %04x\n", ex_rd, qgen_f32_to_f16_rd(ex_rd), ref_f16_rd(ex_rd));
  check(bad_ru == 0, "f32 -> f16 toward +inf vs slow reference: %lld differ", (long long)bad_ru);
  if (bad_ru) printf("     x = %a: got %04x want %04x\n", ex_ru, qgen_f32_to_f16_ru(ex_ru), ref_f16_ru(ex_ru));
  check(bad_order == 0, "rd(x) <= x <= ru(x), equal or adjacent halves: %lld bad", (long long)bad_order);
}

/* bf16: the two candidates are x truncated to 16 bits and the next one up in magnitude;
   the tie is decided exactly in double. */
static uint16_t ref_bf16_rn(float x) {
  uint32_t u = qgen_f32_bits(x);
  uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
  double a = fabs((double)x), vlo = fabs((double)qgen_bits_f32((uint32_t)lo << 16));
  if (isinf(a) || a == vlo) return lo;
  double vhi = (lo & 0x7fff) == 0x7f7f ? ldexp(1.0, 128) : fabs((double)qgen_bits_f32((uint32_t)hi << 16));
  if (2 * a < vlo + vhi) return lo;
  if (2 * a > vlo + vhi) return hi;
  return (lo & 1) ? hi : lo;
}

static void test_bf16(int64_t count) {
  int bad = 0, n = 0;
  for (uint32_t h = 0; h < 0x10000; h++) {
    if ((h & 0x7f80) == 0x7f80 && (h & 0x7f)) continue;
    n++;
    float f = qgen_bf16_to_f32((uint16_t)h);
    if (qgen_f32_to_bf16(f) != h || qgen_f32_bits(f) != h << 16) bad++;
  }
  check(bad == 0, "bf16 -> f32 -> bf16 exhaustive over %d non-NaN patterns: %d bad", n, bad);
  int64_t bad_rn = 0, m = 0;
  float ex = 0;
  for (int64_t i = 0; i < count; i++) {
    float x = i % 2 ? qgen_bits_f32(rnd32()) : qgen_bits_f32((qgen_f32_bits(1.0f + (float)rnd_unit()) & ~0xffffu) | (0x8000u + (uint32_t)(rnd32() % 5) - 2u));
    if (isnan(x)) continue;
    m++;
    if (qgen_f32_to_bf16(x) != ref_bf16_rn(x)) bad_rn++, ex = x;
  }
  check(bad_rn == 0, "f32 -> bf16 nearest-even vs slow reference on %lld floats (half near ties): "
        "%lld differ", (long long)m, (long long)bad_rn);
  if (bad_rn) printf("     x = %a: got %04x want %04x\n", ex, qgen_f32_to_bf16(ex), ref_bf16_rn(ex));
  check((qgen_f32_to_bf16(NAN) & 0x7fff) == 0x7fc0, "f32 NaN -> bf16 quiet NaN");
}

/* ---- 4. fp8 ------------------------------------------------------------------------ */

typedef struct {
  qgen_type t;
  const char *name;
  uint8_t (*enc)(float);
  float (*dec)(uint8_t);
  int mbits, bias, maxc; /* maxc: the largest finite code */
  double max;
} fp8_fmt;

/* The value of a code by the format's definition (finite codes only). */
static double fp8_value(const fp8_fmt *f, int c) {
  const int e = (c & 0x7f) >> f->mbits, m = c & ((1 << f->mbits) - 1);
  const double v = e ? ldexp(1.0 + (double)m / (1 << f->mbits), e - f->bias) : ldexp((double)m, 1 - f->bias - f->mbits);
  return c & 0x80 ? -v : v;
}

/* Nearest code by bisection over the magnitudes 0..maxc (fp8_tab: their values, filled by
   test_fp8), ties to the even code, above the largest finite value the largest finite code. */
static double fp8_tab[128];
static uint8_t fp8_ref(const fp8_fmt *f, float x) {
  if (isnan(x)) return 0x7f;
  const uint8_t s = signbit(x) ? 0x80 : 0;
  const double a = fabs((double)x);
  if (a >= f->max) return s | (uint8_t)f->maxc;
  int lo = 0, hi = f->maxc; /* value(lo) <= a < value(hi) */
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (fp8_tab[mid] <= a) lo = mid;
    else hi = mid;
  }
  const double dl = a - fp8_tab[lo], dh = fp8_tab[hi] - a;
  return s | (uint8_t)(dl < dh ? lo : dh < dl ? hi : (lo & 1) ? hi : lo);
}

static void test_fp8(const fp8_fmt *f) {
  for (int c = 0; c <= f->maxc; c++) fp8_tab[c] = fp8_value(f, c);
  /* codes -> f32 -> codes */
  int bad_val = 0, bad_rt = 0, bad_mono = 0, bad_special = 0;
  for (int c = 0; c < 256; c++) {
    const int mag = c & 0x7f;
    const float v = f->dec((uint8_t)c);
    if (mag > f->maxc) { /* e4m3: 0x7f NaN; e5m2: 0x7c inf, 0x7d..0x7f NaN */
      const int is_inf = f->t == QGEN_TYPE_E5M2 && mag == 0x7c;
      bad_special += is_inf ? !(isinf(v) && !!signbit(v) == !!(c & 0x80)) : !isnan(v);
      bad_rt += f->enc(v) != (is_inf ? (c & 0x80) | f->maxc : 0x7f);
      continue;
    }
    bad_val += (double)v != fp8_value(f, c) || !!signbit(v) != !!(c & 0x80);
    bad_rt += f->enc(v) != c;
    if (mag > 0) bad_mono += !(fabs((double)v) > fabs((double)f->dec((uint8_t)(c - 1))));
  }
  check(bad_val == 0 && bad_mono == 0, "%s: 256 codes -> f32 match the format's values, magnitudes increase: %d, %d bad",
        f->name, bad_val, bad_mono);
  check(bad_rt == 0 && bad_special == 0, "%s: code -> f32 -> code exhaustive (NaN -> 0x7f, inf -> max): %d, %d bad", f->name,
        bad_rt, bad_special);
  check(f->dec((uint8_t)f->maxc) == f->max && f->dec(1) == ldexp(1.0, 1 - f->bias - f->mbits) &&
            f->dec((uint8_t)((uint8_t)f->bias << f->mbits)) == 1.0f,
        "%s: anchors: max %g, least subnormal, 1.0", f->name, f->max);

  /* f32 -> code against the slow reference: midpoints and their neighbours, then a sweep */
  int64_t bad = 0, n = 0;
  float ex = 0;
  int bad_tie = 0;
  for (int c = 0; c < f->maxc; c++) {
    const double mid = (fp8_value(f, c) + fp8_value(f, c + 1)) / 2; /* exact in f32 */
    bad_tie += f->enc((float)mid) != ((c & 1) ? c + 1 : c) || f->enc((float)-mid) != (0x80 | ((c & 1) ? c + 1 : c));
    for (int off = -3; off <= 3; off++) {
      const float x = qgen_bits_f32(qgen_f32_bits((float)mid) + (uint32_t)off);
      n += 2;
      if (f->enc(x) != fp8_ref(f, x)) bad++, ex = x;
      if (f->enc(-x) != fp8_ref(f, -x)) bad++, ex = -x;
    }
  }
  for (uint64_t u = 0; u < 0x100000000ull; u += 257) {
    const float x = qgen_bits_f32((uint32_t)u);
    n++;
    if (f->enc(x) != fp8_ref(f, x)) bad++, ex = x;
  }
  check(bad_tie == 0, "%s: every exact tie between adjacent codes goes to the even one: %d bad", f->name, bad_tie);
  check(bad == 0, "%s: f32 -> fp8 nearest-even vs slow reference on %lld floats: %lld differ", f->name, (long long)n,
        (long long)bad);
  if (bad) printf("     x = %a: got %02x want %02x\n", ex, f->enc(ex), fp8_ref(f, ex));

  const double above = f->max + ldexp(1.0, (int)floor(log2(f->max)) - f->mbits - 1); /* max + half an ulp: a tie */
  const int mc = f->maxc;
  check(f->enc(INFINITY) == mc && f->enc(-INFINITY) == (0x80 | mc) && f->enc(1e30f) == mc && f->enc((float)above) == mc &&
            f->enc(nextafterf((float)above, INFINITY)) == mc && f->enc(-FLT_MAX) == (0x80 | mc) && f->enc(NAN) == 0x7f &&
            f->enc(-NAN) == 0x7f,
        "%s: saturation: inf, 1e30, max + half ulp, beyond -> +-max; NaN -> 0x7f", f->name);
  const float tiny = (float)ldexp(1.0, -f->bias - f->mbits); /* half the least subnormal: a tie to 0 */
  check(f->enc(0.0f) == 0 && f->enc(-0.0f) == 0x80 && f->enc(tiny) == 0 && f->enc(-tiny) == 0x80 &&
            f->enc(nextafterf(tiny, 1.0f)) == 1 && f->enc(FLT_MIN / 2) == 0 && f->enc(-FLT_MIN) == 0x80,
        "%s: signed zeros, underflow (half the least subnormal ties to 0)", f->name);
}

/* ---- the traits table ---------------------------------------------------------------- */

static void test_table(void) {
  static const struct { const char *name; int block, bytes, kv, io; } want[] = {
      {"f32", 1, 4, 0, 1},   {"f16", 1, 2, 1, 1},   {"bf16", 1, 2, 1, 1},
      {"q8_0", 32, 34, 1, 0}, {"q4_0", 32, 18, 1, 0}, {"q5_0", 32, 22, 1, 0},
      {"e4m3", 1, 1, 1, 0},  {"e5m2", 1, 1, 1, 0}};
  int ok = 1;
  for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
    qgen_type t;
    const qgen_type_traits *tr;
    ok &= qgen_type_from_name(want[i].name, &t) == 0 && (tr = qgen_type_traits_of(t)) != NULL &&
          tr->block == want[i].block && tr->block_bytes == want[i].bytes &&
          tr->kv_ok == want[i].kv && tr->io_ok == want[i].io &&
          qgen_type_row_bytes(t, 128) == (size_t)(128 / want[i].block * want[i].bytes);
  }
  qgen_type t;
  ok &= qgen_type_from_name("q4_1", &t) != 0 && qgen_type_traits_of(QGEN_TYPE_COUNT) == NULL;
  ok &= qgen_type_row_bytes(QGEN_TYPE_Q8_0, 48) == 0;
  for (int i = 0; i < QGEN_TYPE_COUNT; i++) /* per-tensor scales: the fp8 types only */
    ok &= qgen_type_traits_of((qgen_type)i)->tensor_scale == (i == QGEN_TYPE_E4M3 || i == QGEN_TYPE_E5M2);
  check(ok, "type table: names, block sizes, bytes, kv/io flags, row bytes, per-tensor scales");
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : QGEN_SOURCE_DIR "/tests/data";
  const char *env = getenv("QGEN_SEED");
  uint64_t seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ (uint64_t)clock() << 32;
  rng_state = seed;
  printf("test_quant: seed %llu (QGEN_SEED=%llu reproduces)\n", (unsigned long long)seed,
         (unsigned long long)seed);
  for (int i = 0; i <= 0x7c00; i++) half_tab[i] = half_value(i);

  test_table();
  test_kat(dir);
  test_round_trip_quant(QGEN_TYPE_Q8_0, 127, 127);
  test_round_trip_quant(QGEN_TYPE_Q4_0, 8, 8);
  test_round_trip_quant(QGEN_TYPE_Q5_0, 16, 16);
  test_round_trip_float(QGEN_TYPE_F16);
  test_round_trip_float(QGEN_TYPE_BF16);
  test_f16_exhaustive();
  test_f16_random(3000000);
  test_bf16(2000000);
  static const fp8_fmt e4m3 = {QGEN_TYPE_E4M3, "e4m3", qgen_f32_to_e4m3, qgen_e4m3_to_f32, 3, 7, 0x7e, 448.0};
  static const fp8_fmt e5m2 = {QGEN_TYPE_E5M2, "e5m2", qgen_f32_to_e5m2, qgen_e5m2_to_f32, 2, 15, 0x7b, 57344.0};
  test_fp8(&e4m3);
  test_fp8(&e5m2);

  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
