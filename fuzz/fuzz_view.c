/* fuzz_view.c — libFuzzer harness for cache views on the CPU backend: qgen_view_open's
 * validation, then qgen_view_update and qgen_attend over what it accepted.
 *
 * Input: a byte choosing the spec (f16 sparse block 32, q4_0 dense block 64, e4m3 sparse
 * block 64), then the description's fields, each a tag byte: below 0x80 a small value
 * (times a unit that suits the field: 8 tokens for page_size, 16 bytes for strides), else
 * the next 8 bytes as a raw int64 (extreme values); base pointers are small byte offsets
 * into the harness's buffers or raw addresses. The rest of the input fills the block table,
 * the lengths and a slot mapping.
 * Oracle: a refusal leaves *kv NULL and a one-line message naming qgen_view_open; an
 * accepted description satisfies qgen.h's rules (page size, counts, aligned bases, strides
 * in whole granules, and — counted exhaustively for small pools — rows that do not
 * overlap). When the accepted pool, block table and lengths lie inside the harness's
 * buffers, qgen_view_update and dense and sparse qgen_attend run over them and must return
 * QGEN_OK, QGEN_ERR_INVALID_ARG or QGEN_ERR_UNSUPPORTED with a message, whatever the
 * lengths, table entries and slots say (ASan and UBSan watch the reads).
 * Valid but large sizes (over 2^16 pages or tokens a sequence, over 256 sequences) are
 * skipped before the call: their side memory is real and would only measure the allocator.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "runtime/qgen.h"

static void die(const char *what, const char *msg) {
  fprintf(stderr, "fuzz_view: %s%s%s\n", what, msg ? ": " : "", msg ? msg : "");
  abort();
}

enum { N_SPECS = 3, D = 64, HKV = 2, POOL = 1 << 20, TABLE = 1 << 14, LENS = 1 << 10, SLOTS = 256 };
static const char *const SPECS[N_SPECS] = {
    "return spec{ name = 'fv0', head_dim = 64, n_head = 4, n_head_kv = 2, sparse = { block = 32, coverage = 0.5 } }",
    "return spec{ name = 'fv1', head_dim = 64, n_head = 4, n_head_kv = 2, k_type = 'q4_0', v_type = 'q4_0' }",
    ("return spec{ name = 'fv2', head_dim = 64, n_head = 4, n_head_kv = 2, k_type = 'e4m3', v_type = 'e4m3',"
     " sparse = { block = 64, coverage = 0.5 } }"),
};
static qgen_ctx *ctx[N_SPECS];
static uint8_t *kbuf, *vbuf;
static int32_t *table, *lens;
static uint16_t q[4 * 4 * D], out[4 * 4 * D];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  const qgen_open_opts o = {QGEN_BACKEND_CPU, 0, NULL, NULL};
  for (int i = 0; i < N_SPECS; i++)
    if (qgen_open_text(&ctx[i], SPECS[i], "fuzz_view", &o) != QGEN_OK) die("open", qgen_error(ctx[i]));
  kbuf = aligned_alloc(64, POOL), vbuf = aligned_alloc(64, POOL);
  table = aligned_alloc(64, TABLE * sizeof *table), lens = aligned_alloc(64, LENS * sizeof *lens);
  if (!kbuf || !vbuf || !table || !lens) die("out of memory", NULL);
  for (int i = 0; i < POOL; i++) kbuf[i] = (uint8_t)(i * 131), vbuf[i] = (uint8_t)(i * 71); /* some NaN/Inf rows */
  for (size_t i = 0; i < sizeof q / sizeof *q; i++) q[i] = (uint16_t)(0x3000 + i % 0x800);
  return 0;
}

/* A field moved down by `by` (wrapping), so that small values reach a few negative ones. */
static long long shifted(fuzz_input *in, long long unit, long long by) {
  return (long long)((unsigned long long)fuzz_field(in, unit) - (unsigned long long)by);
}

/* A base pointer: a small byte offset into buf, or a raw address. */
static qgen_ptr pointer(fuzz_input *in, const void *buf) {
  const long long f = fuzz_field(in, 4);
  return f >= 0 && f < 0x200 ? (qgen_ptr)(uintptr_t)buf + (qgen_ptr)f : (qgen_ptr)f;
}

static int in_buf(qgen_ptr p, const void *buf, __int128 bytes, size_t size) {
  const qgen_ptr b = (qgen_ptr)(uintptr_t)buf;
  return p >= b && (__int128)(p - b) + bytes <= (__int128)size;
}

static int cmp_ll(const void *a, const void *b) {
  const long long x = *(const long long *)a, y = *(const long long *)b;
  return (x > y) - (x < y);
}

/* The byte span of a pool's rows (0 when the rows overlap, counted for small pools only,
   or -1 when a rule of qgen.h is broken). */
static __int128 pool_span(const qgen_view_desc *d, int which, size_t row) {
  const long long st[3] = {which ? d->v_page_stride : d->k_page_stride, which ? d->v_token_stride : d->k_token_stride,
                           which ? d->v_head_stride : d->k_head_stride};
  const long long cnt[3] = {d->n_pages, d->page_size, HKV};
  const long long gr = row % 16 == 0 ? 16 : row % 8 == 0 ? 8 : 4;
  if ((which ? d->v : d->k) % (qgen_ptr)gr) return -1;
  __int128 span = (__int128)row;
  for (int i = 0; i < 3; i++) {
    if (st[i] < 0 || st[i] % gr) return -1;
    span += (__int128)st[i] * (cnt[i] - 1);
  }
  const long long rows = d->n_pages * d->page_size * HKV;
  if (rows <= 4096) {
    long long *off = malloc(sizeof *off * (size_t)rows);
    long long n = 0;
    for (long long p = 0; p < d->n_pages; p++)
      for (long long t = 0; t < d->page_size; t++)
        for (long long h = 0; h < HKV; h++) off[n++] = p * st[0] + t * st[1] + h * st[2];
    qsort(off, (size_t)n, sizeof *off, cmp_ll);
    for (long long i = 1; i < n; i++)
      if (off[i] - off[i - 1] < (long long)row) span = 0;
    free(off);
  }
  return span;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_input in = {data, size};
  const int si = fuzz_byte(&in) % N_SPECS;
  qgen_ctx *c = ctx[si];
  qgen_info info;
  qgen_get_info(c, &info);
  qgen_view_desc d;
  d.k = pointer(&in, kbuf), d.v = pointer(&in, vbuf);
  d.page_size = (int)fuzz_field(&in, 8);
  d.n_pages = fuzz_field(&in, 1);
  d.k_page_stride = fuzz_field(&in, 16), d.k_token_stride = fuzz_field(&in, 16), d.k_head_stride = fuzz_field(&in, 16);
  d.v_page_stride = fuzz_field(&in, 16), d.v_token_stride = fuzz_field(&in, 16), d.v_head_stride = fuzz_field(&in, 16);
  d.block_table = pointer(&in, table), d.block_table_stride = fuzz_field(&in, 1);
  d.seq_lens = pointer(&in, lens), d.max_seqs = (int)fuzz_field(&in, 1), d.max_blocks = fuzz_field(&in, 1);
  const __int128 cap = d.page_size > 0 ? (__int128)d.max_blocks * d.page_size : 0;
  if ((d.n_pages > 1 << 16 && d.n_pages <= INT32_MAX) || d.max_seqs > 256 || (cap > 1 << 16 && cap <= INT32_MAX))
    return 0;

  qgen_kv *kv = (qgen_kv *)1;
  const qgen_status st = qgen_view_open(c, &d, &kv);
  if (st != QGEN_OK) {
    const char *m = qgen_error(c);
    if (kv) die("a refused view left *kv set", m);
    if (st != QGEN_ERR_INVALID_ARG && st != QGEN_ERR_UNSUPPORTED) die("unexpected status", m);
    if (strncmp(m, "qgen_view_open: ", 16) != 0 || strchr(m, '\n')) die("not a one-line qgen_view_open message", m);
    return 0;
  }
  if (!kv) die("an accepted view is NULL", NULL);
  if ((d.page_size != info.block && 2 * d.page_size != info.block) || d.page_size % 16 || d.n_pages < 1 ||
      d.n_pages > INT32_MAX || d.max_seqs < 1 || d.max_blocks < 1 || cap > INT32_MAX || d.block_table_stride < d.max_blocks ||
      !d.block_table || d.block_table % 4 || !d.seq_lens || d.seq_lens % 4)
    die("accepted a description qgen.h refuses (sizes)", NULL);
  const __int128 ks = pool_span(&d, 0, info.k_row_bytes), vs = pool_span(&d, 1, info.v_row_bytes);
  if (ks < 0 || vs < 0) die("accepted a misaligned base or a bad stride", NULL);
  if (ks == 0 || vs == 0) die("accepted overlapping rows", NULL);

  /* run it when everything it reads is the harness's memory */
  const int ns = d.max_seqs < 4 ? d.max_seqs : 4;
  if (in_buf(d.k, kbuf, ks, POOL) && in_buf(d.v, vbuf, vs, POOL) &&
      in_buf(d.block_table, table, (__int128)d.max_seqs * d.block_table_stride * 4, TABLE * sizeof *table) &&
      in_buf(d.seq_lens, lens, (__int128)d.max_seqs * 4, LENS * sizeof *lens) && cap <= 8192) {
    int32_t *bt = (int32_t *)(uintptr_t)d.block_table, *sl = (int32_t *)(uintptr_t)d.seq_lens;
    for (long long s = 0; s < ns; s++) {
      sl[s] = (int32_t)shifted(&in, 16, 64); /* some negative, some past the capacity */
      for (long long b = 0; b < d.max_blocks; b++) bt[s * d.block_table_stride + b] = (int32_t)shifted(&in, 1, 2);
    }
    int64_t slots[SLOTS];
    int n = 0;
    while (n < SLOTS && in.n) slots[n++] = shifted(&in, 3, 8);
    const qgen_status su = qgen_view_update(kv, (qgen_ptr)(uintptr_t)slots, n, 8, NULL);
    if (su != QGEN_OK && su != QGEN_ERR_UNSUPPORTED) die("qgen_view_update", qgen_error(c));
    const int seq[4] = {0, 1, 2, 3};
    for (int mode = 0; mode <= QGEN_ATTEND_REUSE; mode++) { /* reuse last: after the sparse one selected */
      qgen_attend_opts o = qgen_attend_defaults(c);
      o.mode = mode;
      const qgen_status sa = qgen_attend(kv, seq, ns, (qgen_ptr)(uintptr_t)q, (qgen_ptr)(uintptr_t)out, &o, NULL);
      if (sa != QGEN_OK && sa != QGEN_ERR_INVALID_ARG && sa != QGEN_ERR_UNSUPPORTED) die("qgen_attend", qgen_error(c));
      if (sa != QGEN_OK && !qgen_error(c)[0]) die("qgen_attend failed without a message", NULL);
    }
  }
  qgen_cache_destroy(kv);
  return 0;
}
