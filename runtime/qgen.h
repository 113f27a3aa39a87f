/* qgen.h — libqgen, the public C API: Quest sparse-attention decode for one attention
 * layer, with kernels generated for the model's spec.
 *
 *   qgen_ctx *ctx;   qgen_open(&ctx, "specs/qwen3-4b.lua", NULL);      JIT (cached) or bundle
 *   qgen_kv *kv;     qgen_cache_create(ctx, &kv, max_seqs, max_tokens);  paged KV cache
 *   qgen_append(kv, seq, n_seq, n_new, k, v, stream);                  new K/V rows
 *   qgen_attend(kv, seq, n_seq, q, out, NULL, stream);                 one decode step
 *
 * Pointers are qgen_ptr: a CUdeviceptr for the GPU backend, a host address (cast) for the
 * CPU reference backend. Streams are CUstream (NULL = the legacy default stream); the CPU
 * backend ignores them. Tensors (row-major, in the spec's in_type / out_type):
 *   k, v  [tokens][n_head_kv][head_dim]  the rows of seq[0] first, then seq[1], ...
 *   q     [n_seq][n_head][head_dim]      one query token per listed sequence
 *   out   [n_seq][n_head][head_dim]
 * Query head h attends with KV head h / (n_head / n_head_kv).
 *
 * A step (qgen_append, qgen_append_decode, qgen_attend) only launches kernels: no
 * allocation, no host synchronisation, so it can be captured in a CUDA graph (but see
 * qgen_append_decode: once it is used on a cache, qgen_append waits for the device). All
 * memory is taken by qgen_cache_create; kernels are compiled (or loaded) by qgen_open,
 * never inside a step.
 * Every call checks its arguments and returns a status; a call that fails changes nothing.
 *
 * Threads. A qgen_ctx may be shared: several threads may at once create and destroy
 * caches of one context and call anything on different caches (each on its own stream);
 * qgen_open may run in several threads at once, on one cache directory too. Calls on one
 * qgen_kv must not run concurrently, nor qgen_close with any other call on that context.
 * Messages (qgen_error) are kept per thread, so threads do not see each other's; a new
 * thread starts with none, even one that the system gives an ended thread's pthread_t.
 *
 * CUDA contexts (GPU backend). Kernels run in the device's primary context, the one the
 * CUDA runtime and PyTorch use: device pointers and streams given to qgen must belong to
 * it. Whatever context is current when a call starts is current again when it returns
 * (qgen pushes the primary context and pops it). The one exception: qgen_open on a thread
 * with no current context leaves the primary context current, ready for the caller's own
 * driver calls (cuMemAlloc for the tensors).
 */
#ifndef QGEN_H
#define QGEN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What libqgen exports: everything else in it is hidden (it is built with hidden
   visibility), so the shared library's symbols are exactly the declarations below. */
#if defined(__GNUC__) || defined(__clang__)
#define QGEN_API __attribute__((visibility("default")))
#else
#define QGEN_API
#endif

typedef unsigned long long qgen_ptr;     /* CUdeviceptr, or a host address (CPU backend) */
typedef struct CUstream_st *qgen_stream; /* CUstream */
typedef struct qgen_ctx qgen_ctx;
typedef struct qgen_kv qgen_kv;

typedef enum qgen_status {
  QGEN_OK = 0,
  QGEN_ERR_INVALID_ARG,  /* a null pointer, an id or size out of range, a bad option */
  QGEN_ERR_CAPACITY,     /* an append past a sequence's capacity */
  QGEN_ERR_SPEC,         /* the spec did not load or validate */
  QGEN_ERR_COMPILE,      /* NVRTC is missing or failed */
  QGEN_ERR_NO_DRIVER,    /* libcuda.so.1 could not be loaded */
  QGEN_ERR_NO_DEVICE,    /* no (such) CUDA device */
  QGEN_ERR_UNSUPPORTED,  /* the device, bundle or request is not supported by this build */
  QGEN_ERR_OUT_OF_MEMORY,
  QGEN_ERR_CUDA,         /* a CUDA driver call failed (qgen_error says which) */
  QGEN_ERR_BUNDLE,       /* a bundle file is malformed */
  QGEN_ERR_IO,
} qgen_status;

typedef enum qgen_backend {
  QGEN_BACKEND_GPU = 0, /* default */
  QGEN_BACKEND_CPU = 1, /* the plain-C reference executor (the test oracle) */
} qgen_backend;

typedef struct qgen_open_opts {
  qgen_backend backend;
  int device;            /* CUDA device ordinal */
  const char *variant;   /* a variant of a multi-variant spec; NULL = the first */
  const char *cache_dir; /* NULL = $QGEN_CACHE_DIR, $XDG_CACHE_HOME/qgen, ~/.cache/qgen */
} qgen_open_opts;

/* Open a spec (.lua: compiled on first use, then from the cache) or a bundle (`qgen
   bundle`, recognised by its magic whatever its name: the GPU backend loads its cubin for
   the device's arch, else its newest older PTX, and never calls NVRTC; the CPU backend
   uses only its spec; opts->variant, if given, must name the bundle's variant; the GPU
   backend refuses a bundle written by another qgen version). A malformed bundle gives
   QGEN_ERR_BUNDLE. On failure *ctx still receives a context that only carries
   qgen_error(); close it. */
QGEN_API qgen_status qgen_open(qgen_ctx **ctx, const char *spec_or_bundle, const qgen_open_opts *opts);
/* The same for a spec given as Lua source text (never a bundle), e.g. from a binding that
   holds the spec in memory: it loads in the same sandbox and opens the same way.
   chunk_name labels the spec in messages ("<python>:3: ..."); NULL = "<text>". A NULL
   spec_text is QGEN_ERR_INVALID_ARG, a text that does not load or validate QGEN_ERR_SPEC. */
QGEN_API qgen_status qgen_open_text(qgen_ctx **ctx, const char *spec_text, const char *chunk_name,
                                    const qgen_open_opts *opts);
/* Close ctx. Its caches and views may be destroyed before or after, in either order: the
   ones still open lose their memory here (the backend's with the context), and each
   handle stays valid for qgen_cache_destroy alone, which must still be called to free it
   (any other call on it is QGEN_ERR_INVALID_ARG). ctx itself must not be used again. */
QGEN_API void qgen_close(qgen_ctx *ctx);
/* What went wrong in the last failed call on ctx (or on one of its caches) made by the
   calling thread, in words; "" if none failed; "no context" for NULL (a qgen_open that
   could not even allocate its context). A call given a NULL qgen_kv or qgen_ctx returns
   QGEN_ERR_INVALID_ARG and cannot record a message: qgen_error then still shows the
   previous failure. */
QGEN_API const char *qgen_error(const qgen_ctx *ctx);
QGEN_API const char *qgen_status_str(qgen_status s);

typedef struct qgen_info {
  const char *name, *k_type, *v_type, *in_type, *out_type;
  int head_dim, n_head, n_head_kv, group, block, sparse;
  double scale, coverage;   /* coverage 0 when the spec's budget is in tokens */
  long long budget;         /* tokens, 0 when the spec's budget is a coverage */
  long long sink, recent;
  size_t k_row_bytes, v_row_bytes; /* one token, one KV head */
  qgen_backend backend;
  int arch;                 /* compute capability * 10 of the device (GPU backend) */
  int sm_count;
  char device_name[128];
  int from_ptx;             /* the device had no matching cubin: the driver JIT-ed PTX */
  double open_ms;           /* time qgen_open took */
  int cache_hit;            /* kernels came from the cache (or a bundle) */
  int plan_arch;            /* GPU backend: the architecture whose limits the kernels were planned for and are
                               launched within (compute capability * 10): the device's, the bundle artifact's,
                               or QGEN_EMULATE's */
  int max_step_tokens;      /* the most query tokens of one sequence a qgen_attend_multi takes:
                               QGEN_MAX_STEP_TOKENS, or on the GPU backend fewer where the kernels for
                               more do not fit plan_arch, and 1 with a bundle's kernels (which are the
                               one-token step's; a window or sinks need the spec itself too) */
} qgen_info;
QGEN_API void qgen_get_info(const qgen_ctx *ctx, qgen_info *info);

/* A paged KV cache for one layer: max_seqs sequences of up to max_tokens tokens each. The
   memory is taken now, zero-filled; sequence s starts empty. max_tokens must be below
   2^31 (the kernels index a sequence with 32-bit ints; the type is long long so that a
   larger value is refused, not truncated), and the cache's pages fewer than 2^31. Memory
   that is not there (device memory on the GPU backend, host memory on the CPU one) gives
   QGEN_ERR_OUT_OF_MEMORY with the sizes in the message, having taken nothing; sizes past
   all the memory the machine (or device) has are refused so before anything is allocated. */
QGEN_API qgen_status qgen_cache_create(qgen_ctx *ctx, qgen_kv **kv, int max_seqs, long long max_tokens);
/* Free a cache or view, before or after qgen_close of its context (see there). */
QGEN_API void qgen_cache_destroy(qgen_kv *kv);

/* The per-tensor scales of an fp8 cache (k_type / v_type e4m3 or e5m2), as vLLM keeps them
   per layer: appends store fp8(x / scale), attend reads fp8 * scale (the scale folded into
   the scores for K and into the output for V). Both are 1 at creation; each must be a
   finite number > 0, and a K or V type without a per-tensor scale (every type but fp8)
   takes only 1, else QGEN_ERR_INVALID_ARG. Steps called afterwards use them (a graph keeps
   the scales it was captured with); stored bytes are not rewritten, so tokens appended
   before a change read with the new scale. The cache's bytes are the fp8 codes themselves,
   as torch.float8_e4m3fn / torch.float8_e5m2 hold them. */
QGEN_API qgen_status qgen_cache_set_scales(qgen_kv *kv, float k_scale, float v_scale);

/* Append n_new[i] tokens to sequence seq[i] (distinct, 0 <= seq < max_seqs) for each i <
   n_seq; n_new[i] may be 0. Fails with QGEN_ERR_CAPACITY, changing nothing, when a
   sequence would exceed max_tokens, and with QGEN_ERR_INVALID_ARG when a sequence would
   start on a page that a live one maps (qgen_kv_map). */
QGEN_API qgen_status qgen_append(qgen_kv *kv, const int *seq, int n_seq, const int *n_new, qgen_ptr k,
                                 qgen_ptr v, qgen_stream stream);

/* The decode step's append, for graph replay: one new token for each listed sequence (k,
   v: [n_seq][n_head_kv][head_dim], row i for seq[i]; distinct, 0 <= seq < max_seqs),
   written at the sequence's length as the device holds it when the kernels run, which
   they then advance by one there. So a CUDA graph captured once from qgen_append_decode +
   qgen_attend (with fixed k, v, q and out buffers that the caller refills between
   replays) runs a new decode step at each replay. A sequence already at max_tokens keeps
   its length and its token is dropped: the call cannot know (it may run long after it was
   made), so qgen_sync reports it.
   Host bookkeeping: from the first qgen_append_decode on (called or only captured), the
   cache's lengths live on the device. Every call that needs them — qgen_append,
   qgen_seq_len, qgen_kv_map, qgen_sync — first waits for the device (cuCtxSynchronize)
   and reads them back, so it must not be called while a stream of the context is being
   captured, and qgen_append is then no longer capturable. The graph of a decode loop is
   qgen_append_decode + qgen_attend: both stay capturable. */
QGEN_API qgen_status qgen_append_decode(qgen_kv *kv, const int *seq, int n_seq, qgen_ptr k, qgen_ptr v,
                                        qgen_stream stream);
/* Wait for the device and read back the lengths (when qgen_append_decode has been used on
   kv); QGEN_ERR_CAPACITY if qgen_append_decode dropped tokens of full sequences since the
   last qgen_sync (the message says how many and which sequence first); each drop is
   reported once. Not while a stream is being captured. */
QGEN_API qgen_status qgen_sync(qgen_kv *kv);

/* Forget the tokens of sequence seq (its pages are reused by later appends) and its last
   selection (qgen_kv_selection then gives counts of 0). Waits for the device. */
QGEN_API qgen_status qgen_reset(qgen_kv *kv, int seq);
/* Remove the last n tokens of sequence seq (0 <= n <= its length), e.g. the draft tokens a
   speculative verify step rejected. Afterwards the cache holds exactly what a cache fed only
   the tokens kept would: the rows of the removed tokens are zeroed (the pages left with no
   token wholly: their bounds and 8-bit rows too, as at creation), and the bounds of the page
   that keeps some tokens are made again from its stored keys (never loose: no removed key
   widens them). The same bytes as a cache that never held the removed tokens when K stores
   its input keys exactly (f16 keys into an f16 K, bf16 into bf16); for a lossy K (q8_0, q4_0,
   q5_0, fp8, or f32 keys into f16) that page's bounds are the tightest f16 bounds of the keys
   as stored, the keys attention reads, where append's come from the keys as given. A
   sequence rolled back to no tokens is no longer live (qgen_kv_map). The last sparse
   selection stays: QGEN_ATTEND_REUSE drops its entries past the new length. Waits for the
   device; not while a stream is being captured; a view refuses it (its lengths are the
   caller's: lower seq_lens and run qgen_view_update over the kept slots of the last page,
   which restarts its bounds from slot 0). A cut into a page of a shared prefix
   (qgen_share_prefix) is QGEN_ERR_INVALID_ARG. */
QGEN_API qgen_status qgen_rollback(qgen_kv *kv, int seq, long long n);
/* Give the empty sequence dst the first n tokens of sequence src (1 <= n <= src's length),
   a prompt prefix several requests share, without copying its whole pages: dst's page
   table row maps src's pages of tokens [0, n - n % block) (read-only for both: no sequence
   writes a page below its length), and when n is not a whole number of pages, dst's own
   page at that index gets a copy of src's partial page cut back to the prefix's tokens
   (qgen_rollback's rule for its bounds), so appends to either never touch the other's
   tokens. Each attends, selects and is bounded as if it held its tokens alone. Until
   either is reset, qgen_rollback of either into a shared page is QGEN_ERR_INVALID_ARG;
   resetting dst gives it back its own row; src reset and appended again needs its row
   remapped (qgen_kv_map) while dst holds the pages, as for any page a live sequence maps.
   Chains work (a sequence that took a prefix may give one). Waits for the device; a view
   refuses it (its block table is the caller's: sharing pages there needs no call). */
QGEN_API qgen_status qgen_share_prefix(qgen_kv *kv, int src, int dst, long long n);
/* Tokens held by sequence seq, or -1 for a bad id (or when the device lengths cannot be
   read: see qgen_append_decode; qgen_error says why). */
QGEN_API long long qgen_seq_len(const qgen_kv *kv, int seq);

/* QGEN_ATTEND_REUSE (sparse specs): attend each sequence over its last sparse selection
   (qgen_kv_selection's lists) extended to its current length, with no estimate or select:
   entries at or past its pages are dropped and every page after the list's last entry is
   added, so the pages begun since are attended (the selection's sink and recent pages
   stay in it). The budget fields are ignored. Each sequence needs a QGEN_ATTEND_SPARSE
   attend since it was created or reset (QGEN_ERR_INVALID_ARG otherwise); a view's caller
   must not reuse a selection across a change of the request in a sequence slot. Selecting
   every N steps and reusing in between is the caller's schedule (under CUDA graphs: one
   graph of a sparse step and one of a reuse step; the check above runs at capture, so a
   reuse graph replayed before any replay of the sparse one finds empty lists and attends
   every page: dense, not wrong; replay the sparse graph first). */
enum { QGEN_ATTEND_DENSE = 0, QGEN_ATTEND_SPARSE = 1, QGEN_ATTEND_REUSE = 2 };
typedef struct qgen_attend_opts {
  int mode;                 /* QGEN_ATTEND_DENSE, QGEN_ATTEND_SPARSE or QGEN_ATTEND_REUSE (the last two need a sparse spec) */
  double coverage;          /* fraction of pages in (0, 1], budget 0 ... */
  long long budget;         /* ... or tokens (> 0), coverage 0: a sparse attend with both set
                               (coverage != 0 and budget > 0) is QGEN_ERR_INVALID_ARG */
  long long sink, recent;   /* tokens always attended at the start / end (>= 0) */
  long long window;         /* > 0: a sliding-window layer; each query attends only the last
                               window tokens it sees, itself included, exactly (not whole
                               pages); dense within it (mode QGEN_ATTEND_DENSE; the GPU reads
                               only the window's pages), and not with a sparse-V spec
                               (sparse.v_tau). 0: every token */
  qgen_ptr sinks;           /* learned attention sinks (gpt-oss): n_head f32 logits (scaled
                               units; device memory on the GPU backend); each head's softmax
                               gets one more term, exp(sink), that weighs no value. 0: none.
                               Not with a sparse-V spec. On the GPU a window or sinks run the
                               kernels of qgen_attend_multi's steps of several tokens (below) */
} qgen_attend_opts;
/* The spec's defaults (sparse if the spec is), with only the one of coverage and budget
   that the spec gives set, the other 0: to use the other, set it and clear this one.
   qgen_attend with opts == NULL uses them. */
QGEN_API qgen_attend_opts qgen_attend_defaults(const qgen_ctx *ctx);

/* One decode step for n_seq distinct sequences: q and out hold one row per listed
   sequence. A sequence with no tokens gives zeros. */
QGEN_API qgen_status qgen_attend(qgen_kv *kv, const int *seq, int n_seq, qgen_ptr q, qgen_ptr out,
                                 const qgen_attend_opts *opts, qgen_stream stream);

/* The most query tokens of one sequence in one qgen_attend_multi. */
enum { QGEN_MAX_STEP_TOKENS = 16 };
/* A step of several query tokens per sequence (a speculative verify step, multi-token
   prediction): n_q[i] in [1, QGEN_MAX_STEP_TOKENS] query rows for seq[i], which are its last
   n_q[i] tokens (append them first); q and out hold the rows of seq[0]'s tokens first, then
   seq[1]'s ..., each row [n_head][head_dim]. Query j of seq[i] attends causally: every token
   of the sequence but the last n_q[i] - 1 - j. Sparse: one selection per sequence and KV
   head for the whole step, a page scored by the max over the step's tokens as over a
   group's heads (the exact score of two-stage selection too) and the forced pages those of
   the whole length, so a verify step reads each selected page once for all its tokens;
   qgen_kv_selection gives it. Dense is exact. All n_q 1 is qgen_attend. More than
   qgen_info.max_step_tokens is QGEN_ERR_UNSUPPORTED. On the GPU backend a step of several
   tokens (like a window or sinks) runs kernels built for it on its first use (NVRTC: seconds,
   once per power of two of the step's largest n_q, then from the kernel cache): make such a
   step once before capturing one in a CUDA graph; its outputs agree with one-token steps'
   to rounding, not bit for bit. Not with a sparse-V spec there (QGEN_ERR_UNSUPPORTED). */
QGEN_API qgen_status qgen_attend_multi(qgen_kv *kv, const int *seq, int n_seq, const int *n_q, qgen_ptr q,
                                       qgen_ptr out, const qgen_attend_opts *opts, qgen_stream stream);

/* ---- views: attend over a KV pool the caller owns ---------------------------------------
 *
 * A serving engine (vLLM, SGLang, transformers' paged cache ...) keeps its own paged pool
 * per layer and its own block table; a view lets qgen_attend read them in place. The pool
 * holds n_pages pages of page_size tokens; the row of (page, token slot, KV head) — head_dim
 * elements of the spec's k_type / v_type — is at k + page*k_page_stride +
 * slot*k_token_stride + head*k_head_stride (bytes; V alike), so one description covers
 * vLLM's NHD (num_blocks, block_size, H, D) and HND (num_blocks, H, block_size, D), SGLang's
 * [slots, H, D] (page = page_size slots) and transformers' [num_blocks*block_size + 2, H, D].
 * Sequence s (0 <= s < max_seqs) holds seq_lens[s] tokens; its token t is on page
 * block_table[s * block_table_stride + t / page_size], slot t % page_size.
 *
 * qgen copies nothing: the caller may change the pool, block_table and seq_lens between
 * steps (on the device, or in a captured graph); an attend reads them when its kernels run.
 * Entries for a sequence's tokens must be pages in [0, n_pages) and seq_lens[s] in
 * [0, max_blocks * page_size] (not checked on the device; the CPU backend's qgen_attend
 * refuses them, QGEN_ERR_INVALID_ARG). A view never writes the caller's
 * memory: qgen_append, qgen_append_decode, qgen_reset and qgen_kv_map refuse it,
 * qgen_kv_read gives only its bounds, qgen_seq_len is -1 (the lengths are the caller's).
 *
 * Sparse specs: qgen keeps page bounds per physical page of the pool (its only memory
 * besides the step scratch); after the engine writes this step's K/V rows into the pool,
 * qgen_view_update(kv, slot_mapping, ...) brings them up to date from the K rows there. A
 * selection page (the spec's block) is block / page_size consecutive engine pages of a
 * sequence, its bounds the min/max of theirs: equal to an owned cache's bounds over the
 * same tokens when k_type holds the keys exactly (an f16 K for f16 keys).
 *
 * Supported: page_size a multiple of 16 equal to the spec's block or half of it (two engine
 * pages a selection page: transformers' block 32 under a block-64 spec; SGLang's page 16
 * under a block-32 spec);
 * strides >= 0, multiples of the row's copy granule (the largest of 16, 8, 4 bytes that
 * divides the row: 16 for 16-bit and fp8 rows, 8 or 4 for q8_0/q4_0/q5_0 rows; a row of
 * none, e.g. q8_0 or q5_0 at head_dim 96, is QGEN_ERR_UNSUPPORTED; k and v aligned to it),
 * rows that do not overlap, a pool spanning less than 2^63 bytes;
 * qgen_view_update needs a 16-bit k_type (f16, bf16); fp8 caches take their scales by
 * qgen_cache_set_scales. Refused (QGEN_ERR_UNSUPPORTED): specs with sparse.rescore > 1,
 * whose sketch a view does not keep (8-bit bounds it keeps, for its whole-block pages).
 * Tensor parallelism is the engine's: a rank opens a context with its per-rank spec
 * (n_head / tp, n_head_kv / tp) and a view over its slice of the KV heads. */
typedef struct qgen_view_desc {
  qgen_ptr k, v;                 /* pool base addresses (device, or host for the CPU backend) */
  int page_size;                 /* tokens per engine page */
  long long n_pages;             /* pages in the pool */
  long long k_page_stride, k_token_stride, k_head_stride; /* bytes */
  long long v_page_stride, v_token_stride, v_head_stride;
  qgen_ptr block_table;          /* int32 [max_seqs][block_table_stride], max_blocks used */
  long long block_table_stride;  /* entries, >= max_blocks */
  qgen_ptr seq_lens;             /* int32 [max_seqs] */
  int max_seqs;
  long long max_blocks;          /* engine pages a sequence may hold */
} qgen_view_desc;
/* A view (a qgen_kv for qgen_attend, qgen_view_update, qgen_kv_selection; freed by
   qgen_cache_destroy) over the caller's pool: validates every field (QGEN_ERR_INVALID_ARG
   or QGEN_ERR_UNSUPPORTED, with the field in the message) and takes only qgen's side
   memory (bounds, scratch). */
QGEN_API qgen_status qgen_view_open(qgen_ctx *ctx, const qgen_view_desc *desc, qgen_kv **kv);
/* The bounds of a sparse view after the engine's own cache write of this step: slots
   [n] (0 <= n < 2^31) of slot_bytes (4: int32, 8: int64) on the device, slot = page *
   page_size + offset (vLLM's slot_mapping, SGLang's out_cache_loc); a negative slot
   (padding) or one past the pool is skipped. A page whose offset-0 slot is listed restarts its bounds, the others
   min/max-merge. Kernels only (capturable); a dense spec: nothing to do (QGEN_OK). */
QGEN_API qgen_status qgen_view_update(qgen_kv *kv, qgen_ptr slots, long long n, int slot_bytes, qgen_stream stream);

/* ---- introspection (tests and tools; synchronous, not for the decode loop) ------------ */

enum {
  QGEN_KV_K = 0,      /* K pool  [n_pages][n_head_kv][block][k_row_bytes] */
  QGEN_KV_V,          /* V pool */
  QGEN_KV_BOUNDS,     /* [n_pages][n_head_kv][2][head_dim] f16 (sparse specs) */
  QGEN_KV_PAGE_TABLE, /* [max_seqs][pages_per_seq] int32 */
  QGEN_KV_SEQ_LEN,    /* [max_seqs] int32 */
  QGEN_KV_SKETCH,     /* [n_pages][n_head_kv][block][q4_0 row]: two-stage specs over f16/bf16 K */
  QGEN_KV_BOUNDS_I8,  /* [n_pages][n_head_kv][2 * head_dim + 16] u8 (specs with sparse.bounds = "i8") */
};
/* Bytes of one of the cache's arrays (0 when it has none). */
QGEN_API size_t qgen_kv_size(const qgen_kv *kv, int which);
/* Copy that array to host memory (bytes must equal qgen_kv_size); waits for the device. */
QGEN_API qgen_status qgen_kv_read(qgen_kv *kv, int which, void *host, size_t bytes);
/* Map sequence seq's logical pages to physical pages pages[0..n) (each in
   [0, n_pages), n <= pages_per_seq); only while the sequence is empty. Two live sequences
   (holding tokens: from the first append until qgen_reset) never share a physical page:
   a map onto a page in a live sequence's row, or a row naming a page twice, is
   QGEN_ERR_INVALID_ARG, and so is the append that would make a sequence live on a page a
   live one maps (the message names both sequences and the page). */
QGEN_API qgen_status qgen_kv_map(qgen_kv *kv, int seq, const int *pages, long long n);
/* The page lists of the last sparse qgen_attend of seq since it was created or reset:
   lists[h * pages_per_seq + i], counts[h] for each KV head h (0 when there was none).
   Waits for the device. */
QGEN_API qgen_status qgen_kv_selection(qgen_kv *kv, int seq, int *lists, int *counts);
QGEN_API long long qgen_kv_pages_per_seq(const qgen_kv *kv);
QGEN_API long long qgen_kv_n_pages(const qgen_kv *kv);

#ifdef __cplusplus
}
#endif
#endif
