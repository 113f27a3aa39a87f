/* qblocks.h — the quant block layouts (ggml's q8_0, q4_0, q5_0), written once and read by
 * both compilers: the C compiler (base/qtypes.c's traits table and CPU quantizers) and NVRTC
 * (templates/qtypes.cuh's row sizes and byte offsets; jit/emit.c puts the copy embedded when
 * qgen was built after base/kargs.h, ahead of the templates).
 *
 * A block holds QGEN_QK values and starts with its scale d, the bits of an f16 stored
 * little-endian; blocks sit back to back in a row, so they are only 2-byte aligned. Code
 * reads them through byte pointers at the QGEN_*_OFF offsets below, not through struct
 * pointers.
 */
#ifndef QGEN_QBLOCKS_H
#define QGEN_QBLOCKS_H

#ifndef __CUDACC__
#include <assert.h> /* static_assert */
#endif

#define QGEN_QK 32 /* values per quant block */

/* x = qs[j] * d */
typedef struct qgen_block_q8_0 {
  unsigned short d;
  signed char qs[QGEN_QK];
} qgen_block_q8_0;

/* x = (nibble - 8) * d; value j < QK/2 in the low nibble of qs[j], j + QK/2 in its high one */
typedef struct qgen_block_q4_0 {
  unsigned short d;
  unsigned char qs[QGEN_QK / 2];
} qgen_block_q4_0;

/* x = (q - 16) * d; the low 4 bits of q as in q4_0, bit 4 of value j is bit j of the
   little-endian 32-bit qh */
typedef struct qgen_block_q5_0 {
  unsigned short d;
  unsigned char qh[4];
  unsigned char qs[QGEN_QK / 2];
} qgen_block_q5_0;

/* Byte offsets of the fields after d (d is at 0 in every block). */
enum { QGEN_Q8_0_QS_OFF = 2, QGEN_Q4_0_QS_OFF = 2, QGEN_Q5_0_QH_OFF = 2, QGEN_Q5_0_QS_OFF = 6 };

/* ggml's sizes: a padded struct would not be the format. Both compilers check the sizes;
   the offsets only the C compiler (NVRTC has no offsetof), and a struct of the same sizes
   has the same offsets under both. */
static_assert(sizeof(qgen_block_q8_0) == 34 && sizeof(qgen_block_q4_0) == 18 && sizeof(qgen_block_q5_0) == 22,
              "a quant block is laid out with unexpected padding");
#ifndef __CUDACC__
#include <stddef.h>
static_assert(offsetof(qgen_block_q8_0, qs) == QGEN_Q8_0_QS_OFF &&
                  offsetof(qgen_block_q4_0, qs) == QGEN_Q4_0_QS_OFF &&
                  offsetof(qgen_block_q5_0, qh) == QGEN_Q5_0_QH_OFF &&
                  offsetof(qgen_block_q5_0, qs) == QGEN_Q5_0_QS_OFF,
              "a quant block field is not at its offset");
#endif

#endif
