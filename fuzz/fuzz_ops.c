/* fuzz_ops.c — libFuzzer harness for the calls that change a sequence's tokens and pages
 * and the step's options, on an owned cache of the CPU backend: qgen_append, qgen_rollback,
 * qgen_share_prefix, qgen_reset, qgen_kv_map and qgen_attend_multi (several query tokens,
 * a window, sinks), in any order with any arguments.
 *
 * Input: a byte choosing the spec (f16 sparse block 32 with 8-bit bounds, q8_0 two-stage
 * block 64, e4m3 dense), then operations until the input ends, each an opcode byte
 * and its arguments: sequence ids are a byte from -1 to MAX_SEQS (one past each end), counts
 * a tag byte (below 0x80 a small value, else the next 8 bytes as a raw int64: extreme
 * values). The rows appended and the queries are the harness's fixed buffers.
 * Oracle: every call returns QGEN_OK, QGEN_ERR_INVALID_ARG, QGEN_ERR_CAPACITY or
 * QGEN_ERR_UNSUPPORTED, a refusal with a message naming the call; afterwards every
 * sequence's length is in [0, MAX_TOKENS] and a dense step over all of them succeeds
 * (ASan and UBSan watch the reads and writes behind them).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "runtime/qgen.h"

static void die(const char *what, const char *msg) {
  fprintf(stderr, "fuzz_ops: %s%s%s\n", what, msg ? ": " : "", msg ? msg : "");
  abort();
}

enum { N_SPECS = 3, D = 64, HQ = 4, HKV = 2, MAX_SEQS = 4, MAX_TOKENS = 200, QROWS = MAX_SEQS * QGEN_MAX_STEP_TOKENS };
static const char *const SPECS[N_SPECS] = {
    "return spec{ name = 'fo0', head_dim = 64, n_head = 4, n_head_kv = 2, sparse = { block = 32, coverage = 0.5 } }",
    ("return spec{ name = 'fo1', head_dim = 64, n_head = 4, n_head_kv = 2, k_type = 'q8_0', v_type = 'q8_0',"
     " sparse = { block = 64, coverage = 0.5, rescore = { candidates = 2 } } }"),
    "return spec{ name = 'fo2', head_dim = 64, n_head = 4, n_head_kv = 2, k_type = 'e4m3' }",
};
static qgen_ctx *ctx[N_SPECS];
static uint16_t *rows, q[QROWS * HQ * D], out[QROWS * HQ * D];
static float sinks[HQ] = {-1.0f, 0.5f, 3.0f, 40.0f};

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  const qgen_open_opts o = {QGEN_BACKEND_CPU, 0, NULL, NULL};
  for (int i = 0; i < N_SPECS; i++)
    if (qgen_open_text(&ctx[i], SPECS[i], "fuzz_ops", &o) != QGEN_OK) die("open", qgen_error(ctx[i]));
  const size_t n = (size_t)MAX_SEQS * MAX_TOKENS * HKV * D;
  if (!(rows = malloc(n * sizeof *rows))) die("out of memory", NULL);
  for (size_t i = 0; i < n; i++) rows[i] = (uint16_t)(0x3000 + (i * 2654435761u) % 0x1800); /* small finite values */
  for (size_t i = 0; i < sizeof q / sizeof *q; i++) q[i] = (uint16_t)(0x3400 + i % 0x400);
  return 0;
}

/* A count: a small value, or (tag >= 0x80) a raw int64. */
static long long count(fuzz_input *in) { return fuzz_field(in, 1); }

/* A sequence id from -1 to MAX_SEQS. */
static int seq_id(fuzz_input *in) { return (int)(fuzz_byte(in) % (MAX_SEQS + 2)) - 1; }

static void expect(qgen_ctx *c, qgen_status st, const char *fn) {
  if (st == QGEN_OK) return;
  if (st != QGEN_ERR_INVALID_ARG && st != QGEN_ERR_CAPACITY && st != QGEN_ERR_UNSUPPORTED) die(fn, qgen_status_str(st));
  const char *msg = qgen_error(c);
  if (!strstr(msg, fn)) die("a refusal whose message does not name the call", msg);
}

static int clamp_int(long long x) { return x < -1000 ? -1000 : x > 1000 ? 1000 : (int)x; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_input in = {data, size};
  qgen_ctx *c = ctx[fuzz_byte(&in) % N_SPECS];
  qgen_kv *kv = NULL;
  if (qgen_cache_create(c, &kv, MAX_SEQS, MAX_TOKENS) != QGEN_OK) die("cache", qgen_error(c));
  for (int ops = 0; in.n && ops < 64; ops++) {
    const uint8_t op = fuzz_byte(&in) % 6;
    if (op == 0) { /* append: counts kept small, so that they fit the rows (a raw one is refused or clamped) */
      int s = seq_id(&in), n = clamp_int(count(&in));
      expect(c, qgen_append(kv, &s, 1, &n, (qgen_ptr)(uintptr_t)rows, (qgen_ptr)(uintptr_t)rows, NULL), "qgen_append");
    } else if (op == 1) {
      const int s = seq_id(&in);
      expect(c, qgen_rollback(kv, s, count(&in)), "qgen_rollback");
    } else if (op == 2) {
      const int s = seq_id(&in), d = seq_id(&in);
      expect(c, qgen_share_prefix(kv, s, d, count(&in)), "qgen_share_prefix");
    } else if (op == 3) {
      expect(c, qgen_reset(kv, seq_id(&in)), "qgen_reset");
    } else if (op == 4) { /* a map of up to 8 pages, entries small or raw */
      const int s = seq_id(&in);
      int pages[8];
      const long long n = count(&in);
      for (int i = 0; i < 8; i++) pages[i] = (int)count(&in);
      expect(c, qgen_kv_map(kv, s, pages, n), "qgen_kv_map");
    } else { /* a step of up to 3 sequences, each of n_q tokens (ids and counts as given) */
      int seqs[3], n_q[3], total = 0;
      const int ns = fuzz_byte(&in) % 4;
      for (int i = 0; i < ns; i++) seqs[i] = seq_id(&in), n_q[i] = clamp_int(count(&in)), total += n_q[i] > 0 ? n_q[i] : 0;
      qgen_attend_opts o = qgen_attend_defaults(c);
      const uint8_t f = fuzz_byte(&in);
      o.mode = f % 4 == 3 ? 7 : f % 3;
      o.window = f & 4 ? count(&in) : 0;
      o.sinks = f & 8 ? (qgen_ptr)(uintptr_t)sinks : 0;
      if (total > QROWS) continue; /* the buffers hold QROWS rows; more would only overrun the harness's own */
      expect(c, qgen_attend_multi(kv, seqs, ns, n_q, (qgen_ptr)(uintptr_t)q, (qgen_ptr)(uintptr_t)out, &o, NULL),
             "qgen_attend_multi");
    }
    for (int s = 0; s < MAX_SEQS; s++) {
      const long long len = qgen_seq_len(kv, s);
      if (len < 0 || len > MAX_TOKENS) die("a length outside [0, MAX_TOKENS]", qgen_error(c));
    }
  }
  int all[MAX_SEQS] = {0, 1, 2, 3};
  qgen_attend_opts dense = qgen_attend_defaults(c);
  dense.mode = QGEN_ATTEND_DENSE;
  if (qgen_attend(kv, all, MAX_SEQS, (qgen_ptr)(uintptr_t)q, (qgen_ptr)(uintptr_t)out, &dense, NULL) != QGEN_OK)
    die("the dense step after the operations", qgen_error(c));
  qgen_cache_destroy(kv);
  return 0;
}
