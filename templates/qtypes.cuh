// qtypes.cuh — device traits, one struct per element type (the device half of the table in
// base/qtypes.c; the struct names are that table's `device` column).
//
// Every struct has:
//   load(p, i) / store(p, i, x)   io types (f32, f16, bf16): element i of a q/k/v/out array
//   ROW                           cache types: bytes of one head_dim row
//   Q16                           16-bit cache type: rows are 16-byte multiples, V is read
//                                 with ldmatrix.trans; otherwise V columns are permuted
//   BF                            the mma operand type is bf16 (else f16)
//   store_row(row, x, lane)       append: the warp writes one row; lane holds x[i], the
//                                 element lane + 32*i. Quantizers are ggml-exact: explicit
//                                 _rn arithmetic so nothing is contracted into an FMA.
//   BLK, quad(tile, blk, w)       quantized types: bytes of a block (base/qblocks.h); elements
//                                 w..w+3 (w % 4 == 0) of the block at byte blk of a 16-byte
//                                 aligned shared tile, unscaled (small integers, exact in
//                                 f16) as two packed f16 pairs. attend reads them through
//                                 load4 / load8 below, which apply the block's scale.
//   cvt4(q)                       fp8 types: the 4 codes of the word q to two packed f16
//                                 pairs (codes 0, 1 and 2, 3); TENSOR_UNIT and SWIZZLED below
//                                 say how attend scales and lays out a type
//   tokpair(w)                    fp8 types: the word ldmatrix.trans gives of two rows (bytes:
//                                 row 0's channels c, c+1, then row 1's) as the f16 pairs
//                                 (row 0, row 1) of channel c and of channel c + 1
//   oct(tile, blk, j)             the default path's K operand: 8 unscaled elements of the
//                                 block, channels {4j, 4j+2}, {4j+1, 4j+3}, {4j+16, 4j+18},
//                                 {4j+17, 4j+19} as four f16 pairs (OCT order, j = 0..3)
//   tpair(tile, b0, b1, g)        the default path's V operand: four f16 pairs (row b0's
//                                 value, row b1's value) of the channels vch(g, 0..3) of
//                                 the two rows' blocks at bytes b0, b1 (g = 0..7), unscaled
//   vch(g, u)                     the channel (in its block) of tpair's pair u for lane g
// Both unpack with the f16 magic number: bits 0x6400 | m are the f16 1024 + m (m < 1024),
// so a LOP3 that masks the quants into the mantissa (the q8_0 sign flip folded in) and one
// exact HADD2/HFMA2 give (q - offset) with no per-element byte shuffles.
// Quantized blocks are only 2-byte aligned: a 4-byte load is one 32-bit load where its
// offset is a multiple of 4 (ld_u32_at), else two 16-bit loads. A block's f16 scale d is its
// first field, at byte 0.
#include <cuda_fp8.h>

static_assert(QGEN_QK == 32, "store_row quantizes a block per warp, one value per lane");

__device__ __forceinline__ u32 ld_u32_a2(const u8 *p) { // 4 bytes at a 2-byte boundary
  return (u32) * (const u16 *)p | (u32) * (const u16 *)(p + 2) << 16;
}
// 4 bytes at tile + o (tile 16-byte aligned, o even). In attend's unrolled loops o is a
// row stride times a row plus compile-time block and lane-multiple offsets, so o % 4 is
// known when the compiler folds this.
__device__ __forceinline__ u32 ld_u32_at(const u8 *tile, int o) {
  return (o & 3) == 0 ? *(const u32 *)(tile + o) : ld_u32_a2(tile + o);
}
// Four small unsigned bytes (values < 256) to two f16 pairs of value (byte - bias).
__device__ __forceinline__ uint2 bytes_to_half4(u32 q, float bias) {
  const __half2 b = __float2half2_rn(1024.0f + bias);
  u32 w0 = __byte_perm(q, 0x64, 0x4140), w1 = __byte_perm(q, 0x64, 0x4342); // 1024 + byte
  __half2 h0 = __hsub2(*(__half2 *)&w0, b), h1 = __hsub2(*(__half2 *)&w1, b);
  return make_uint2(*(u32 *)&h0, *(u32 *)&h1);
}
__device__ __forceinline__ uint2 scale_half4(uint2 v, __half d) {
  __half2 dd = __half2half2(d);
  __half2 a = __hmul2(*(__half2 *)&v.x, dd), b = __hmul2(*(__half2 *)&v.y, dd);
  return make_uint2(*(u32 *)&a, *(u32 *)&b);
}

// f16 pairs of x - c and x * a - c (exact for the magic-number values they are used on).
__device__ __forceinline__ u32 h2_sub(u32 x, float c) {
  __half2 r = __hsub2(*(__half2 *)&x, __float2half2_rn(c));
  return *(u32 *)&r;
}
__device__ __forceinline__ u32 h2_fma(u32 x, float a, float c) {
  __half2 r = __hfma2(*(__half2 *)&x, __float2half2_rn(a), __float2half2_rn(-c));
  return *(u32 *)&r;
}
// (x & M) | c, or (x & M) ^ c under XOR, as one LOP3. Written in C with both constants
// immediate, it compiles to an AND and then an OR (a LOP3 takes one immediate); c in a
// register (the magic number, hoisted out of attend's loop) makes it one instruction.
template <u32 M, bool XOR = false> __device__ __forceinline__ u32 and_or(u32 x, u32 c) {
  u32 r;
  asm("lop3.b32 %0, %1, %2, %3, %4;" : "=r"(r) : "r"(x), "n"(M), "r"(c), "n"(XOR ? 0x6a : 0xea));
  return r;
}
constexpr u32 MAGIC2 = 0x64006400u; // two f16 1024s
// Bytes 0 and 2 of x (values < 256, flipped by the xor's low byte) as f16 pairs 1024 + byte.
template <u32 FLIP> __device__ __forceinline__ u32 magic_b02(u32 x) { return and_or<0x00ff00ffu, true>(x, MAGIC2 | FLIP * 0x00010001u); }
// Four byte-sized quants (bias B: q - B is the value) of two words in OCT order.
template <u32 FLIP, int B> __device__ __forceinline__ uint4 oct_of_bytes(u32 lo, u32 hi) {
  return make_uint4(h2_sub(magic_b02<FLIP>(lo), 1024.0f + B), h2_sub(magic_b02<FLIP>(lo >> 8), 1024.0f + B),
                    h2_sub(magic_b02<FLIP>(hi), 1024.0f + B), h2_sub(magic_b02<FLIP>(hi >> 8), 1024.0f + B));
}
// Nibble quants (bias B) of the 4 bytes q (low nibble element i, high nibble i + 16) in OCT
// order: the low / high nibbles of bytes 0 and 2 as f16 pairs 1024 + n / 1024 + 16 n. hm
// holds the magic number ORed with q5_0's fifth bits (bit 4/20 for the low pairs, 8/24 for
// the high; MAGIC2 alone for q4_0).
template <int B> __device__ __forceinline__ uint4 oct_of_nibbles(u32 q, const u32 (&hm)[4]) {
  const u32 r = q >> 8;
  return make_uint4(h2_sub(and_or<0x000f000fu>(q, hm[0]), 1024.0f + B), h2_sub(and_or<0x000f000fu>(r, hm[1]), 1024.0f + B),
                    h2_fma(and_or<0x00f000f0u>(q, hm[2]), 1.0f / 16, 64.0f + B), h2_fma(and_or<0x00f000f0u>(r, hm[3]), 1.0f / 16, 64.0f + B));
}
template <int B> __device__ __forceinline__ uint4 oct_of_nibbles(u32 q) { // no fifth bits (q4_0)
  const u32 hm[4] = {MAGIC2, MAGIC2, MAGIC2, MAGIC2};
  return oct_of_nibbles<B>(q, hm);
}

// The element of largest magnitude in a 32-value block held one per lane (the first one on
// ties, +0 when all are zero), as ggml's q4_0/q5_0 quantizers pick it.
__device__ __forceinline__ float warp_signed_absmax(float x, int lane) {
  float a = fabsf(x);
  int idx = lane;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    float oa = __shfl_xor_sync(0xffffffffu, a, o);
    int oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (oa > a || (oa == a && oi < idx)) { a = oa; idx = oi; }
  }
  float m = __shfl_sync(0xffffffffu, x, idx);
  return a > 0.0f ? m : 0.0f;
}

// ggml's q4_0 (BITS 4) / q5_0 (BITS 5) rounding of the element x of a 32-value block held
// one per lane: d = max / -2^(BITS-1) (max: the value of largest magnitude),
// q = min(2^BITS - 1, trunc(x/d + 2^(BITS-1) + 0.5)). Returns q; d for the block header.
template <int BITS> __device__ __forceinline__ int quant_signed(float x, int lane, float &d) {
  constexpr float half = (float)(1 << (BITS - 1));
  d = __fdiv_rn(warp_signed_absmax(x, lane), -half);
  const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
  return min((1 << BITS) - 1, (int)__fadd_rn(__fmul_rn(x, id), half + 0.5f));
}

struct qg_f32 {
  static constexpr bool EXACT_F16 = false; // an io type whose values are all f16 values
  static __device__ __forceinline__ float load(const void *p, i64 i) { return ((const float *)p)[i]; }
  static __device__ __forceinline__ void store(void *p, i64 i, float x) { ((float *)p)[i] = x; }
};

struct qg_f16 {
  static constexpr int ROW = D * 2;
  static constexpr bool Q16 = true, BF = false, EXACT_F16 = true;
  static __device__ __forceinline__ float load(const void *p, i64 i) { return __half2float(((const __half *)p)[i]); }
  static __device__ __forceinline__ void store(void *p, i64 i, float x) { ((__half *)p)[i] = __float2half_rn(x); }
  static __device__ __forceinline__ void store_row(u8 *row, const float (&x)[D / 32], int lane) {
#pragma unroll
    for (int i = 0; i < D / 32; i++) ((__half *)row)[lane + 32 * i] = __float2half_rn(x[i]);
  }
};

struct qg_bf16 {
  static constexpr int ROW = D * 2;
  static constexpr bool Q16 = true, BF = true, EXACT_F16 = false;
  static __device__ __forceinline__ float load(const void *p, i64 i) { return __bfloat162float(((const __nv_bfloat16 *)p)[i]); }
  static __device__ __forceinline__ void store(void *p, i64 i, float x) { ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(x); }
  static __device__ __forceinline__ void store_row(u8 *row, const float (&x)[D / 32], int lane) {
#pragma unroll
    for (int i = 0; i < D / 32; i++) ((__nv_bfloat16 *)row)[lane + 32 * i] = __float2bfloat16_rn(x[i]);
  }
};

// q8_0 (qgen_block_q8_0): d = amax/127, qs = round(x/d).
struct qg_q8_0 {
  static constexpr int ROW = D / QGEN_QK * (int)sizeof(qgen_block_q8_0);
  static constexpr bool Q16 = false, BF = false;
  static __device__ __forceinline__ void store_row(u8 *row, const float (&x)[D / 32], int lane) {
#pragma unroll
    for (int i = 0; i < D / 32; i++) {
      u8 *blk = row + i * BLK;
      const float amax = warp_max(fabsf(x[i]));
      const float d = __fdiv_rn(amax, 127.0f), id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
      blk[QGEN_Q8_0_QS_OFF + lane] = (u8)(signed char)(int)roundf(__fmul_rn(x[i], id));
      if (lane == 0) *(__half *)blk = __float2half_rn(d);
    }
  }
  static constexpr int BLK = sizeof(qgen_block_q8_0);
  static __device__ __forceinline__ uint2 quad(const u8 *tile, int blk, int w) {
    return bytes_to_half4(ld_u32_at(tile, blk + QGEN_Q8_0_QS_OFF + w) ^ 0x80808080u, 128.0f); // int8 + 128
  }
  static __device__ __forceinline__ uint4 oct(const u8 *tile, int blk, int j) {
    const int o = blk + QGEN_Q8_0_QS_OFF + 4 * j;
    return oct_of_bytes<0x80, 128>(ld_u32_at(tile, o), ld_u32_at(tile, o + 16)); // int8 + 128
  }
  // lane g: channels 4g..4g+3; the row pairs by one PRMT per two channels
  static __device__ __forceinline__ int vch(int g, int u) { return 4 * g + u; }
  static __device__ __forceinline__ uint4 tpair(const u8 *tile, int b0, int b1, int g) {
    const u32 x0 = ld_u32_at(tile, b0 + QGEN_Q8_0_QS_OFF + 4 * g), x1 = ld_u32_at(tile, b1 + QGEN_Q8_0_QS_OFF + 4 * g);
    const u32 e = __byte_perm(x0, x1, 0x6420), d = __byte_perm(x0, x1, 0x7531); // (r0 c, r0 c+2, r1 c, r1 c+2)
    return make_uint4(h2_sub(magic_b02<0x80>(e), 1152.0f), h2_sub(magic_b02<0x80>(d), 1152.0f),
                      h2_sub(magic_b02<0x80>(e >> 8), 1152.0f), h2_sub(magic_b02<0x80>(d >> 8), 1152.0f));
  }
};

// q4_0 (qgen_block_q4_0): element j < 16 in the low nibble of qs[j], j+16 in the high;
// d = max/-8, q = min(15, trunc(x/d + 8.5)).
struct qg_q4_0 {
  static constexpr int ROW = D / QGEN_QK * (int)sizeof(qgen_block_q4_0);
  static constexpr bool Q16 = false, BF = false;
  static __device__ __forceinline__ void store_row(u8 *row, const float (&x)[D / 32], int lane) {
#pragma unroll
    for (int i = 0; i < D / 32; i++) {
      u8 *blk = row + i * BLK;
      float d;
      const int q = quant_signed<4>(x[i], lane, d);
      const int hi = __shfl_down_sync(0xffffffffu, q, 16);
      if (lane < 16) blk[QGEN_Q4_0_QS_OFF + lane] = (u8)(q | hi << 4);
      if (lane == 0) *(__half *)blk = __float2half_rn(d);
    }
  }
  static constexpr int BLK = sizeof(qgen_block_q4_0);
  static __device__ __forceinline__ uint2 quad(const u8 *tile, int blk, int w) {
    return bytes_to_half4((ld_u32_at(tile, blk + QGEN_Q4_0_QS_OFF + (w & 15)) >> (w & 16 ? 4 : 0)) & 0x0f0f0f0fu, 8.0f);
  }
  static __device__ __forceinline__ uint4 oct(const u8 *tile, int blk, int j) {
    return oct_of_nibbles<8>(ld_u32_at(tile, blk + QGEN_Q4_0_QS_OFF + 4 * j));
  }
  // lane g: the bytes 2g, 2g+1 (one 16-bit load a row): channels 2g, 2g+1, 2g+16, 2g+17
  static __device__ __forceinline__ int vch(int g, int u) { return 2 * g + (u & 1) + 16 * (u >> 1); }
  static __device__ __forceinline__ uint4 tpair(const u8 *tile, int b0, int b1, int g) {
    return oct_of_nibbles<8>(__byte_perm(*(const u16 *)(tile + b0 + QGEN_Q4_0_QS_OFF + 2 * g),
                                         *(const u16 *)(tile + b1 + QGEN_Q4_0_QS_OFF + 2 * g), 0x5410));
  }
};

// q5_0 (qgen_block_q5_0): low 4 bits as q4_0, bit 4 of element j is bit j of the
// little-endian qh; d = max/-16, q = min(31, trunc(x/d + 16.5)).
struct qg_q5_0 {
  static constexpr int ROW = D / QGEN_QK * (int)sizeof(qgen_block_q5_0);
  static constexpr bool Q16 = false, BF = false;
  static __device__ __forceinline__ void store_row(u8 *row, const float (&x)[D / 32], int lane) {
#pragma unroll
    for (int i = 0; i < D / 32; i++) {
      u8 *blk = row + i * BLK;
      float d;
      const int q = quant_signed<5>(x[i], lane, d);
      const int hi = __shfl_down_sync(0xffffffffu, q, 16);
      const u32 qh = __ballot_sync(0xffffffffu, q & 16);
      if (lane < 16) blk[QGEN_Q5_0_QS_OFF + lane] = (u8)((q & 15) | (hi & 15) << 4);
      if (lane < 4) blk[QGEN_Q5_0_QH_OFF + lane] = (u8)(qh >> 8 * lane);
      if (lane == 0) *(__half *)blk = __float2half_rn(d);
    }
  }
  static constexpr int BLK = sizeof(qgen_block_q5_0);
  static __device__ __forceinline__ uint2 quad(const u8 *tile, int blk, int w) {
    const u32 hb = (ld_u32_at(tile, blk + QGEN_Q5_0_QH_OFF) >> w) & 15u; // 5th bits of the four elements
    const u32 spread = (hb & 1u) << 4 | (hb & 2u) << 11 | (hb & 4u) << 18 | (hb & 8u) << 25;
    return bytes_to_half4(((ld_u32_at(tile, blk + QGEN_Q5_0_QS_OFF + (w & 15)) >> (w & 16 ? 4 : 0)) & 0x0f0f0f0fu) | spread, 16.0f);
  }
  static __device__ __forceinline__ uint4 oct(const u8 *tile, int blk, int j) {
    const u32 h = ld_u32_at(tile, blk + QGEN_Q5_0_QH_OFF) >> 4 * j, lo = h & 15u, hi = h >> 16 & 15u; // element 4j+i: lo bit i
    // the fifth bits at the pairs' bits 4 and 20 (8 and 24 for the high nibbles): one multiply
    // places both shifted copies of a 4-bit field, which cannot overlap or carry
    const u32 hm[4] = {and_or<0x00100010u>(lo * 0x40010u, MAGIC2), and_or<0x00100010u>(lo * 0x20008u, MAGIC2),
                       and_or<0x01000100u>(hi * 0x400100u, MAGIC2), and_or<0x01000100u>(hi * 0x200080u, MAGIC2)};
    return oct_of_nibbles<16>(ld_u32_at(tile, blk + QGEN_Q5_0_QS_OFF + 4 * j), hm);
  }
  static __device__ __forceinline__ int vch(int g, int u) { return 2 * g + (u & 1) + 16 * (u >> 1); }
  static __device__ __forceinline__ uint4 tpair(const u8 *tile, int b0, int b1, int g) {
    // the fifth bits of the lane's channels are bits 0, 1 (low nibbles) and 16, 17 (high) of
    // qh >> 2g: row 0's in the low half of lw / hw, row 1's in the high half
    const u32 h0 = ld_u32_at(tile, b0 + QGEN_Q5_0_QH_OFF) >> 2 * g, h1 = ld_u32_at(tile, b1 + QGEN_Q5_0_QH_OFF) >> 2 * g;
    const u32 lw = __byte_perm(h0, h1, 0x5410), hw = __byte_perm(h0, h1, 0x7632);
    const u32 hm[4] = {and_or<0x00100010u>(lw << 4, MAGIC2), and_or<0x00100010u>(lw << 3, MAGIC2), and_or<0x01000100u>(hw << 8, MAGIC2),
                       and_or<0x01000100u>(hw << 7, MAGIC2)};
    return oct_of_nibbles<16>(__byte_perm(*(const u16 *)(tile + b0 + QGEN_Q5_0_QS_OFF + 2 * g),
                                          *(const u16 *)(tile + b1 + QGEN_Q5_0_QS_OFF + 2 * g), 0x5410), hm);
  }
};

// Elements d0..d0+3 (d0 % 4 == 0) of the quantized row at byte `row` of a shared tile,
// dequantized to two packed operand words; load8 adds d0+16..d0+19 (d0 % QGEN_QK < 16) of the
// same block, one scale load for both (attend's K: the k-steps 2t and 2t+1 of block t).
template <typename TT> __device__ __forceinline__ uint2 load4(const u8 *tile, int row, int d0) {
  const int blk = row + d0 / QGEN_QK * TT::BLK;
  return scale_half4(TT::quad(tile, blk, d0 % QGEN_QK), *(const __half *)(tile + blk));
}
template <typename TT> __device__ __forceinline__ uint4 load8(const u8 *tile, int row, int d0) {
  const int blk = row + d0 / QGEN_QK * TT::BLK;
  const __half d = *(const __half *)(tile + blk);
  const uint2 a = scale_half4(TT::quad(tile, blk, d0 % QGEN_QK), d), b = scale_half4(TT::quad(tile, blk, d0 % QGEN_QK + 16), d);
  return make_uint4(a.x, a.y, b.x, b.y);
}

// fp8 (qgen_type e4m3 / e5m2): one byte a value, rows of D bytes, no block header. The
// cache's per-tensor scale is outside the bytes: append stores fp8(x / scale)
// (store_row_scaled), attend applies TENSOR_UNIT times the scale once per tensor, folded
// into the score scale for K and into the output for V. attend's tiles of them are laid
// out as 16-bit ones (SWIZZLED: swizzled 16-byte chunks, so ldmatrix of 8 rows hits
// distinct banks, and rows past the valid ones zeroed, so a NaN code there cannot reach
// P V) and read by ldmatrix as if of 16-bit pairs: K's words are 4 channels of a token
// (cvt4), V's (.trans) 2 channels of 2 tokens (tokpair). QGEN_TUNE olddq=1 reads them
// 4 bytes a row at a time instead (load4 / load8, specialised in attend.cu by cvt4). The
// codes become f16 exactly: e5m2 is an f16's high byte; e4m3 by the hardware conversion on
// sm_89+ (unit 1), before that by shifting its exponent and mantissa bits into an f16's,
// which is its value times 2^-8, subnormals included (unit 2^8: a power of two, so both
// give the same bits). The e4m3 NaN code (never written from a finite input)
// reads as NaN on sm_89+ and as 480 before. The quantizer is CUDA's round-to-nearest-even,
// saturating conversion (hardware on sm_89+, software before), bit-exact with
// base/qtypes.c's.
#if __CUDA_ARCH__ >= 890
constexpr bool FP8_CVT = true; // cvt.rn.f16x2.e4m3x2 exists
#else
constexpr bool FP8_CVT = false;
#endif
template <__nv_fp8_interpretation_t KIND> struct qg_fp8 {
  static constexpr int ROW = D;
  static constexpr bool Q16 = false, BF = false;
  static __device__ __forceinline__ void store_row(u8 *row, const float (&x)[D / 32], int lane) {
#pragma unroll
    for (int i = 0; i < D / 32; i++) row[lane + 32 * i] = __nv_cvt_float_to_fp8(x[i], __NV_SATFINITE, KIND);
  }
  // The 4 codes of q (byte i: code i) as two packed f16 pairs, unscaled.
  static __device__ __forceinline__ uint2 cvt4(u32 q) {
    u32 lo, hi;
    if constexpr (KIND == __NV_E4M3 && FP8_CVT) {
      asm("{.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.rn.f16x2.e4m3x2 %0, l;\n\tcvt.rn.f16x2.e4m3x2 %1, h;}"
          : "=r"(lo), "=r"(hi)
          : "r"(q));
    } else {
      lo = __byte_perm(q, 0, 0x1404), hi = __byte_perm(q, 0, 0x3424); // each byte into the high byte of an f16
      if constexpr (KIND == __NV_E4M3) {
        lo = (lo & 0x80008000u) | (lo >> 1 & 0x3f803f80u);
        hi = (hi & 0x80008000u) | (hi >> 1 & 0x3f803f80u);
      }
    }
    return make_uint2(lo, hi);
  }
  static __device__ __forceinline__ uint2 tokpair(u32 w) { return cvt4(__byte_perm(w, 0, 0x3120)); }
};
struct qg_e4m3 : qg_fp8<__NV_E4M3> {};
struct qg_e5m2 : qg_fp8<__NV_E5M2> {};

// What a value attend reads of a cache type must be multiplied by, besides the cache's
// per-tensor scale; 0: the type takes no per-tensor scale (the traits' tensor_scale).
template <typename TT> constexpr float TENSOR_UNIT = 0.0f;
template <> constexpr float TENSOR_UNIT<qg_e4m3> = FP8_CVT ? 1.0f : 256.0f;
template <> constexpr float TENSOR_UNIT<qg_e5m2> = 1.0f;
// attend's shared tiles of the type are swizzled 16-byte chunks with zeroed invalid rows
// (the 16-bit types', and fp8's), not contiguous slabs.
template <typename TT> constexpr bool SWIZZLED = TT::Q16;
template <> constexpr bool SWIZZLED<qg_e4m3> = true;
template <> constexpr bool SWIZZLED<qg_e5m2> = true;

// append's store of a row (x is consumed): divided by the per-tensor scale first where the
// type takes one, as base/qtypes.c's reference does (one f32 division, nearest even).
template <typename TT> __device__ __forceinline__ void store_row_scaled(u8 *row, float (&x)[D / 32], float scale, int lane) {
  if constexpr (TENSOR_UNIT<TT> != 0.0f) {
#pragma unroll
    for (int i = 0; i < D / 32; i++) x[i] = __fdiv_rn(x[i], scale);
  }
  TT::store_row(row, x, lane);
}

// The default path's K: oct of the block holding d0 (d0 % 32 = 4j, j < 4) in the row at
// byte `row`, scaled by the block's d (the same bits as load8: (q - offset) is exact, one
// rounding of the product).
template <typename TT> __device__ __forceinline__ uint4 load_oct(const u8 *tile, int row, int d0) {
  const int blk = row + d0 / QGEN_QK * TT::BLK;
  const uint4 x = TT::oct(tile, blk, (d0 % QGEN_QK) >> 2);
  const __half d = *(const __half *)(tile + blk);
  const uint2 a = scale_half4(make_uint2(x.x, x.y), d), b = scale_half4(make_uint2(x.z, x.w), d);
  return make_uint4(a.x, a.y, b.x, b.y);
}

using KT = QG_K_TYPE;
using VT = QG_V_TYPE;
using IT = QG_IN_TYPE;
using OT = QG_OUT_TYPE;
static_assert(KT::ROW == QG_K_ROW && VT::ROW == QG_V_ROW, "plan and type traits disagree on row bytes");

// The G x D queries of (batch row b, KV head h) as floats (an engine module's rows: io_row), handed to put(r, d, x) one
// element at a time. Each thread has all its loads in flight (up to 32) before its first
// put: a loop that loads and then stores to shared memory runs one global round trip per
// element, as the compiler may not hoist a load above a store that could alias it; and each
// round trip of an engine module's batch re-reads the step's token offsets first (io_row),
// so the many rows of a verify step must not come in small batches. Called by THREADS
// threads of ids tid = 0 .. THREADS - 1 (the CTA's threadIdx.x, or a warp's lanes).
template <int THREADS, typename Put>
__device__ __forceinline__ void load_group_q(const void *q, const qg_batch &bt, int b, int h, Put put, int tid = (int)threadIdx.x) {
  constexpr int N = G * D, ALL = (N + THREADS - 1) / THREADS, PER = ALL < 16 ? ALL : 16;
  const i64 base = ((i64)b * N_HEAD + h * G) * D; // the one-token module's rows are consecutive
  for (int i0 = 0; i0 < N; i0 += THREADS * PER) {
    float x[PER];
#pragma unroll
    for (int u = 0; u < PER; u++) {
      // past the end: the last element again, so that no load sits behind a branch (a
      // conditional load is waited for in its own block, one round trip each)
      const int i = min(i0 + u * THREADS + tid, N - 1);
      x[u] = STEP ? IT::load(q, io_row(bt, b, h, i / D) * D + i % D) : IT::load(q, base + i);
    }
#pragma unroll
    for (int u = 0; u < PER; u++) {
      const int i = i0 + u * THREADS + tid;
      if (i < N) put(i / D, i % D, x[u]);
    }
  }
}
