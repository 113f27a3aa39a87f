/* qgen.c — the public API (qgen.h) and the extension interface (qgen_ext.h): argument
 * checking, the host mirror of sequence lengths and of the page table, and dispatch
 * through the context's row of the backend table (backend.h): the GPU executor (gpu.c) or
 * the CPU reference (cpu.c), a complete backend with the same memory layout.
 *
 * Every entry point validates everything before touching the cache, so a call that fails
 * leaves the cache as it was.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jit/bundle.h"
#include "jit/emit.h"
#include "base/util.h"
#include "runtime/backend.h"
#include "runtime/qgen_ext.h"

static const qgen_backend_ops *const BACKENDS[] = {
    [QGEN_BACKEND_GPU] = &qgen_gpu_backend,
    [QGEN_BACKEND_CPU] = &qgen_cpu_backend,
};

static void fill_info(qgen_ctx *c) {
  const qgen_spec *s = &c->spec;
  qgen_info *i = &c->info;
  i->name = s->name;
  i->k_type = qgen_type_traits_of(s->k_type)->name;
  i->v_type = qgen_type_traits_of(s->v_type)->name;
  i->in_type = qgen_type_traits_of(s->in_type)->name;
  i->out_type = qgen_type_traits_of(s->out_type)->name;
  i->head_dim = s->head_dim;
  i->n_head = s->n_head;
  i->n_head_kv = s->n_head_kv;
  i->group = c->L.group;
  i->block = s->block;
  i->sparse = s->sparse;
  i->scale = s->scale;
  i->coverage = s->coverage;
  i->budget = s->budget;
  i->sink = s->sink;
  i->recent = s->recent;
  i->k_row_bytes = c->L.k_row_bytes;
  i->v_row_bytes = c->L.v_row_bytes;
  i->backend = c->backend;
}

/* QGEN_EMULATE=sm_NN: plan and launch the GPU kernels within that architecture's limits
   (gpu.c); unset or empty: the device's own. Anything but a name of base/arch.h's table is
   refused. */
static qgen_status parse_emulate(qgen_ctx *c) {
  const char *e = getenv("QGEN_EMULATE");
  if (!e || !*e) return QGEN_OK;
  const qgen_arch *a = qgen_arch_named(e);
  if (!a) {
    char names[256];
    size_t k = 0;
    names[0] = 0;
    for (int i = 0; qgen_arch_at(i) && k < sizeof names; i++)
      k += (size_t)snprintf(names + k, sizeof names - k, "%s%s", i ? ", " : "", qgen_arch_at(i)->name);
    return qgen_fail(c, QGEN_ERR_INVALID_ARG, "QGEN_EMULATE=%s is not an architecture qgen builds for; allowed: %s", e, names);
  }
  c->emulate = a->sm;
  return QGEN_OK;
}

/* Where a context's spec comes from: a file (a spec or a bundle) at path, or Lua source
   text labelled chunk in messages (chunk != NULL). */
typedef struct spec_source {
  const char *path;
  const char *text, *chunk;
} spec_source;

static qgen_status open_ctx(qgen_ctx **out, const spec_source *src, const qgen_open_opts *o) {
  static const qgen_open_opts defaults = {QGEN_BACKEND_GPU, 0, NULL, NULL};
  if (!out) return QGEN_ERR_INVALID_ARG;
  *out = NULL;
  if (!o) o = &defaults;
  qgen_ctx *c = calloc(1, sizeof *c);
  if (!c) return QGEN_ERR_OUT_OF_MEMORY;
  qgen_errs_init(c);
  pthread_mutex_init(&c->kv_lock, NULL);
  double t0 = qgen_now_ms();
  qgen_status st = QGEN_OK;
  const int from_text = src->chunk != NULL;
  const char *path = from_text ? src->chunk : src->path; /* names the spec in messages */
  const qgen_backend_ops *be = NULL;
  if (from_text ? !src->text : !path)
    st = qgen_fail(c, QGEN_ERR_INVALID_ARG, from_text ? "qgen_open_text: no spec text" : "qgen_open: no spec path");
  else if ((unsigned)o->backend >= sizeof BACKENDS / sizeof *BACKENDS || !(be = BACKENDS[o->backend]))
    st = qgen_fail(c, QGEN_ERR_INVALID_ARG, "qgen_open: unknown backend %d", (int)o->backend);
  const int tuned = st == QGEN_OK ? qgen_tune_parse(getenv("QGEN_TUNE"), &c->tune, qgen_errbuf(c), QGEN_ERR_MAX) : 0;
  if (tuned < 0) st = QGEN_ERR_INVALID_ARG;
  if (st == QGEN_OK) st = parse_emulate(c);
  /* A bundle (found by its magic, whatever the file's name): the spec from its text and,
     for a backend that runs the kernels, its compiled kernels; NVRTC is never called.
     Anything else is a spec. */
  qgen_bundle *bundle = NULL;
  qgen_spec_set *set = NULL;
  if (st == QGEN_OK && !from_text && qgen_bundle_is(path)) {
    if (tuned && be->runs_kernels)
      st = qgen_fail(c, QGEN_ERR_UNSUPPORTED, "%s: QGEN_TUNE changes the kernels' plan; a bundle holds the default plan's kernels (unset QGEN_TUNE)", path);
    else if (!(bundle = malloc(sizeof *bundle))) st = QGEN_ERR_OUT_OF_MEMORY;
    else if (qgen_bundle_read(path, bundle, qgen_errbuf(c), QGEN_ERR_MAX) != 0) st = QGEN_ERR_BUNDLE;
    else if (o->variant && *o->variant && strcmp(o->variant, bundle->spec.name) != 0)
      st = qgen_fail(c, QGEN_ERR_SPEC, "%s: the bundle holds variant '%s', not '%s'", path, bundle->spec.name, o->variant);
    else if (be->runs_kernels && strcmp(bundle->qgen_version, QGEN_VERSION) != 0)
      st = qgen_fail(c, QGEN_ERR_UNSUPPORTED, "%s: built by qgen %s; this is qgen %s (rebuild the bundle)", path,
                     bundle->qgen_version, QGEN_VERSION);
    else c->spec = bundle->spec;
  } else if (st == QGEN_OK) {
    if (!(set = malloc(sizeof *set))) st = QGEN_ERR_OUT_OF_MEMORY;
    else if ((from_text ? qgen_spec_load_string(path, src->text, strlen(src->text), set, qgen_errbuf(c), QGEN_ERR_MAX)
                        : qgen_spec_load(path, set, qgen_errbuf(c), QGEN_ERR_MAX)) != 0)
      st = QGEN_ERR_SPEC;
    else {
      const qgen_spec *s = qgen_spec_find(set, o->variant);
      if (!s) st = qgen_fail(c, QGEN_ERR_SPEC, "%s: no variant named '%s'", path, o->variant);
      else c->spec = *s;
    }
    free(set);
  }
  if (st == QGEN_OK) {
    qgen_spec_layout(&c->spec, &c->L);
    c->backend = o->backend;
    fill_info(c);
    c->info.max_step_tokens = be->max_step_tokens; /* the GPU's open may lower it */
    st = bundle ? be->open(c, o, bundle->arts, bundle->n) : be->open(c, o, NULL, 0);
  }
  if (bundle) qgen_bundle_free(bundle);
  free(bundle);
  if (st != QGEN_OK) {
    /* keep the message reachable: hand back the context only to carry qgen_error() */
    *out = c;
    return st;
  }
  c->be = be;
  c->info.open_ms = qgen_now_ms() - t0;
  *out = c;
  return QGEN_OK;
}

qgen_status qgen_open(qgen_ctx **out, const char *path, const qgen_open_opts *o) {
  const spec_source src = {path, NULL, NULL};
  return open_ctx(out, &src, o);
}

qgen_status qgen_open_text(qgen_ctx **out, const char *spec_text, const char *chunk_name, const qgen_open_opts *o) {
  const spec_source src = {NULL, spec_text, chunk_name ? chunk_name : "<text>"};
  return open_ctx(out, &src, o);
}

static void kv_release(qgen_kv *kv);

static void ctx_free(qgen_ctx *c) {
  qgen_errs_free(c);
  pthread_mutex_destroy(&c->kv_lock);
  free(c);
}

/* The caches still open lose their memory here, while the backend can still free it; their
   handles (and the context's messages, which a failed call on them records) live on until
   the last one is destroyed. */
void qgen_close(qgen_ctx *c) {
  if (!c) return;
  pthread_mutex_lock(&c->kv_lock);
  for (qgen_kv *kv = c->kvs; kv; kv = kv->next) kv_release(kv);
  c->closed = 1;
  const int last = c->kvs == NULL;
  pthread_mutex_unlock(&c->kv_lock);
  if (c->be) c->be->close(c);
  c->be = NULL;
  if (last) ctx_free(c);
}

void qgen_get_info(const qgen_ctx *c, qgen_info *i) {
  if (c && i) *i = c->info;
}

qgen_attend_opts qgen_attend_defaults(const qgen_ctx *c) {
  qgen_attend_opts o = {QGEN_ATTEND_DENSE, 1.0, 0, 0, 0, 0, 0};
  if (c && c->spec.sparse) {
    o.mode = QGEN_ATTEND_SPARSE;
    o.coverage = c->spec.coverage; /* the spec holds one of the two, the other 0 */
    o.budget = c->spec.budget;
    o.sink = c->spec.sink;
    o.recent = c->spec.recent;
  }
  return o;
}

/* ---- the cache ------------------------------------------------------------------------ */

/* Give kv's memory back (the backend's, then the host mirrors); the handle stays. */
static void kv_release(qgen_kv *kv) {
  if (kv->released) return;
  kv->ctx->be->cache_destroy(kv);
  if (!kv->is_view) free(kv->host.page_table); /* a view's is the caller's block table */
  kv->host.page_table = NULL;
  free(kv->len);
  free(kv->dropped);
  free(kv->selected);
  free(kv->sync_buf);
  free(kv->live);
  free(kv->page_refs);
  free(kv->saved);
  free(kv->n_shared);
  kv->len = kv->dropped = kv->n_shared = NULL;
  kv->selected = kv->live = NULL;
  kv->sync_buf = kv->page_refs = kv->saved = NULL;
  kv->released = 1;
}

/* A cache whose context was closed has lost its memory: only qgen_cache_destroy is left. */
static qgen_status closed(const qgen_kv *kv, const char *fn) {
  return kv->released ? qgen_fail(kv->ctx, QGEN_ERR_INVALID_ARG, "%s: the cache's context was closed, and its memory "
                                  "with it (only qgen_cache_destroy may follow)", fn)
                      : QGEN_OK;
}

/* *sum += a * b; 0, or -1 when a result does not fit in 64 bits. */
static int add_mul(uint64_t *sum, uint64_t a, uint64_t b) {
  uint64_t p;
  return __builtin_mul_overflow(a, b, &p) || __builtin_add_overflow(*sum, p, sum) ? -1 : 0;
}

/* Refuse, before anything is allocated, a cache or view (fn) of max_seqs x max_tokens over
   n_pages pages that cannot fit: sizes past 64 bits, or more than the memory there is in
   all. The sums count only what the API layer and every backend take at the least (the
   host mirrors; the pools, page table and selection lists wherever the backend keeps
   them), and the limit is all the memory the machine or the device has, so nothing
   refused here could have been used; what passes may still fail its allocations. */
static qgen_status check_sizes(qgen_ctx *c, const char *fn, int64_t max_seqs, int64_t max_tokens, int64_t n_pages, int view) {
  const qgen_layout *L = &c->L;
  const uint64_t S = (uint64_t)max_seqs, N = (uint64_t)n_pages, own = !view,
                 pps = (uint64_t)qgen_pages_of(max_tokens, L->block);
  uint64_t host = 0, pools = 0, kv_pools = 0, sel = 0;
  int bad = add_mul(&host, S, sizeof(int64_t) * 2 + sizeof(int32_t) * 2 + 2) || /* len, dropped, sync_buf, selected, live */
            add_mul(&host, own * S, sizeof(int64_t)) ||                           /* shared prefix lengths */
            add_mul(&host, own * N, sizeof(int32_t) * 3) ||                      /* page table, page refs, saved entries */
            add_mul(&kv_pools, own * N, L->k_page_bytes) || add_mul(&kv_pools, own * N, L->v_page_bytes) ||
            add_mul(&sel, S * (uint64_t)L->n_head_kv, L->sparse ? pps : 0) ||  /* the last selection's lists */
            add_mul(&pools, sel, sizeof(int32_t)) || add_mul(&pools, N, L->bounds_page_bytes) ||
            add_mul(&pools, N, L->sketch_page_bytes) || add_mul(&pools, own * N, sizeof(int32_t)) ||
            add_mul(&pools, kv_pools, 1);
  const int on_host = c->be->host_pools;
  if (!bad && on_host) bad = __builtin_add_overflow(host, pools, &host);
  if (bad)
    return qgen_fail(c, QGEN_ERR_INVALID_ARG, "%s: %lld sequences x %lld tokens is too large (its sizes overflow 64 bits)", fn,
                     (long long)max_seqs, (long long)max_tokens);
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  const uint64_t ram = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
  if (ram && host > ram)
    return qgen_fail(c, QGEN_ERR_OUT_OF_MEMORY, "%s: max_seqs %lld x max_tokens %lld need at least %llu bytes of host "
                     "memory (K and V: %llu); this machine has %llu bytes in all", fn, (long long)max_seqs,
                     (long long)max_tokens, (unsigned long long)host, on_host ? (unsigned long long)kv_pools : 0ull,
                     (unsigned long long)ram);
  if (!on_host && c->device_bytes && pools > c->device_bytes)
    return qgen_fail(c, QGEN_ERR_OUT_OF_MEMORY, "%s: max_seqs %lld x max_tokens %lld need at least %llu bytes of device "
                     "memory (K and V: %llu); the device has %llu bytes in all", fn, (long long)max_seqs,
                     (long long)max_tokens, (unsigned long long)pools, (unsigned long long)kv_pools, c->device_bytes);
  return QGEN_OK;
}

/* A cache (or view) of max_seqs sequences of up to max_tokens tokens over n_pages pages,
   with the host mirrors (check_sizes has passed); NULL when out of host memory. */
static qgen_kv *kv_new(qgen_ctx *c, int max_seqs, int64_t max_tokens, int64_t n_pages, int view) {
  qgen_kv *kv = calloc(1, sizeof *kv);
  if (!kv) return NULL;
  kv->ctx = c;
  kv->is_view = view;
  kv->max_seqs = max_seqs;
  kv->max_tokens = max_tokens;
  kv->pps = qgen_pages_of(max_tokens, c->L.block);
  kv->n_pages = n_pages;
  kv->host.max_seqs = max_seqs;
  kv->host.pages_per_seq = kv->pps;
  kv->host.n_pages = n_pages;
  kv->host.k_scale = kv->host.v_scale = 1.0f;
  kv->len = calloc((size_t)max_seqs, sizeof *kv->len);
  kv->dropped = calloc((size_t)max_seqs, sizeof *kv->dropped);
  kv->selected = calloc((size_t)max_seqs, sizeof *kv->selected);
  kv->sync_buf = calloc((size_t)max_seqs * 2, sizeof *kv->sync_buf);
  kv->live = calloc((size_t)max_seqs, sizeof *kv->live);
  int ok = kv->len && kv->dropped && kv->selected && kv->sync_buf && kv->live;
  if (ok && !view) { /* sequence s owns pages [s*pps, (s+1)*pps) */
    int32_t *pt = malloc((size_t)n_pages * sizeof *pt);
    kv->host.page_table = pt;
    kv->page_refs = calloc((size_t)n_pages, sizeof *kv->page_refs);
    kv->saved = malloc((size_t)n_pages * sizeof *kv->saved);
    kv->n_shared = calloc((size_t)max_seqs, sizeof *kv->n_shared);
    ok = pt && kv->page_refs && kv->saved && kv->n_shared;
    for (int64_t i = 0; ok && i < n_pages; i++) pt[i] = (int32_t)i;
  }
  if (!ok) {
    kv_release(kv);
    free(kv);
    return NULL;
  }
  return kv;
}

/* The backend's memory for kv, then *out = kv, on the context's list; kv is freed when it
   fails. */
static qgen_status kv_finish(qgen_kv *kv, qgen_kv **out) {
  qgen_ctx *c = kv->ctx;
  qgen_status st = c->be->cache_create(kv);
  if (st != QGEN_OK) {
    kv_release(kv);
    free(kv);
    return st;
  }
  pthread_mutex_lock(&c->kv_lock);
  kv->next = c->kvs;
  if (c->kvs) c->kvs->prev = kv;
  c->kvs = kv;
  pthread_mutex_unlock(&c->kv_lock);
  *out = kv;
  return QGEN_OK;
}

qgen_status qgen_cache_create(qgen_ctx *c, qgen_kv **out, int max_seqs, long long max_tokens) {
  if (!c || !out) return qgen_fail(c, QGEN_ERR_INVALID_ARG, "qgen_cache_create: null argument");
  *out = NULL;
  if (!c->be)
    return qgen_fail(c, QGEN_ERR_INVALID_ARG, "qgen_cache_create: the context failed to open");
  if (max_seqs <= 0 || max_tokens <= 0 || max_tokens > INT32_MAX)
    return qgen_fail(c, QGEN_ERR_INVALID_ARG, "qgen_cache_create: max_seqs = %d, max_tokens = %lld (need >= 1, max_tokens < 2^31)",
                     max_seqs, max_tokens);
  const int64_t pps = qgen_pages_of(max_tokens, c->L.block), n_pages = pps * max_seqs;
  if (n_pages > INT32_MAX)
    return qgen_fail(c, QGEN_ERR_INVALID_ARG, "qgen_cache_create: %d x %lld tokens is too large (%lld pages; at most 2^31 - 1)",
                     max_seqs, max_tokens, (long long)n_pages);
  qgen_status st = check_sizes(c, "qgen_cache_create", max_seqs, max_tokens, n_pages, 0);
  if (st != QGEN_OK) return st;
  qgen_kv *kv = kv_new(c, max_seqs, max_tokens, n_pages, 0);
  if (!kv) return qgen_fail(c, QGEN_ERR_OUT_OF_MEMORY, "qgen_cache_create: out of host memory");
  return kv_finish(kv, out);
}

/* Bytes a view's row copies move at once: the largest of 16, 8, 4 that divides the row
   (0: none does, so such rows cannot be read with a stride). */
static int64_t row_granule(size_t row) { return row % 16 == 0 ? 16 : row % 8 == 0 ? 8 : row % 4 == 0 ? 4 : 0; }

/* The K (which = 0) or V part of a view: base aligned, strides >= 0 in whole granules, and
   the rows of distinct (page, slot, head) disjoint: ordered by stride, each dimension's
   stride at least the extent of the ones inside it (a dimension of one entry has none). */
static qgen_status check_pool(qgen_ctx *c, const qgen_view_desc *d, int which) {
  const char *name = which ? "v" : "k";
  const size_t row = which ? c->L.v_row_bytes : c->L.k_row_bytes;
  const qgen_ptr base = which ? d->v : d->k;
  const long long st[3] = {which ? d->v_page_stride : d->k_page_stride, which ? d->v_token_stride : d->k_token_stride,
                           which ? d->v_head_stride : d->k_head_stride};
  const long long cnt[3] = {d->n_pages, d->page_size, c->L.n_head_kv};
  static const char *const dim[3] = {"page", "token", "head"};
  const int64_t gr = row_granule(row);
  if (!base) return qgen_fail(c, QGEN_ERR_INVALID_ARG, "qgen_view_open: %s is NULL", name);
  if (!gr)
    return qgen_fail(c, QGEN_ERR_UNSUPPORTED, "qgen_view_open: %s rows of %zu bytes (%s) are not a multiple of 4 bytes; a view cannot copy them",
                     name, row, which ? c->info.v_type : c->info.k_type);
  if (base % (qgen_ptr)gr)
    return qgen_fail(c, QGEN_ERR_INVALID_ARG, "qgen_view_open: %s = 0x%llx is not %lld-byte aligned (rows of %zu bytes)", name, base, (long long)gr, row);
  int order[3] = {0, 1, 2};
  for (int i = 0; i < 3; i++) {
    if (st[i] < 0 || st[i] % gr)
      return qgen_fail(c, QGEN_ERR_INVALID_ARG, "qgen_view_open: %s_%s_stride = %lld bytes must be >= 0 and a multiple of %lld (rows of %zu bytes)",
                       name, dim[i], st[i], (long long)gr, row);
    for (int j = i; j > 0 && st[order[j]] < st[order[j - 1]]; j--) {
      const int t = order[j];
      order[j] = order[j - 1], order[j - 1] = t;
    }
  }
  long long extent = (long long)row; /* bytes spanned by the dimensions inside */
  for (int i = 0; i < 3; i++) {
    const int x = order[i];
    if (cnt[x] <= 1) continue;
    if (st[x] < extent)
      return qgen_fail(c, QGEN_ERR_INVALID_ARG, "qgen_view_open: %s_%s_stride = %lld bytes overlaps the %lld bytes inside it (rows of %zu bytes)",
                       name, dim[x], st[x], extent, row);
    if (st[x] > (INT64_MAX - extent) / (cnt[x] - 1))
      return qgen_fail(c, QGEN_ERR_INVALID_ARG, "qgen_view_open: %s_%s_stride = %lld bytes x %lld %ss spans more than 2^63 bytes",
                       name, dim[x], st[x], cnt[x], dim[x]);
    extent = st[x] * (cnt[x] - 1) + extent;
  }
  return QGEN_OK;
}

qgen_status qgen_view_open(qgen_ctx *c, const qgen_view_desc *d, qgen_kv **out) {
  if (!c || !d || !out) return qgen_fail(c, QGEN_ERR_INVALID_ARG, "qgen_view_open: null argument");
  *out = NULL;
  if (!c->be) return qgen_fail(c, QGEN_ERR_INVALID_ARG, "qgen_view_open: the context failed to open");
  const int B = c->L.block;
  /* qg_view keeps the bounds (and the 8-bit rows of whole-block pages), not a sketch */
  if (c->L.rescore > 1)
    return qgen_fail(c, QGEN_ERR_UNSUPPORTED, "qgen_view_open: this spec has sparse.rescore = %d; a view keeps no q4_0 sketch for two-stage selection (use sparse.rescore = 1)",
                     c->L.rescore);
  /* the kernels are compiled for one or two engine pages a selection page (attend.cu) */
  if (d->page_size % 16 || (d->page_size != B && d->page_size != B / 2))
    return qgen_fail(c, QGEN_ERR_UNSUPPORTED, "qgen_view_open: page_size = %d; supported: the spec's block %d, or half of it, a multiple of 16",
                     d->page_size, B);
  if (d->n_pages < 1 || d->n_pages > INT32_MAX || d->max_seqs < 1 || d->max_blocks < 1 ||
      d->max_blocks > INT32_MAX / d->page_size)
    return qgen_fail(c, QGEN_ERR_INVALID_ARG, "qgen_view_open: n_pages = %lld, max_seqs = %d, max_blocks = %lld (need >= 1, n_pages and max_blocks * page_size < 2^31)",
                     d->n_pages, d->max_seqs, d->max_blocks);
  if (!d->block_table || !d->seq_lens || d->block_table % 4 || d->seq_lens % 4)
    return qgen_fail(c, QGEN_ERR_INVALID_ARG, "qgen_view_open: block_table = 0x%llx, seq_lens = 0x%llx must be non-NULL and 4-byte aligned",
                     d->block_table, d->seq_lens);
  if (d->block_table_stride < d->max_blocks)
    return qgen_fail(c, QGEN_ERR_INVALID_ARG, "qgen_view_open: block_table_stride = %lld is below max_blocks = %lld",
                     d->block_table_stride, d->max_blocks);
  qgen_status st;
  if ((st = check_pool(c, d, 0)) != QGEN_OK || (st = check_pool(c, d, 1)) != QGEN_OK ||
      (st = check_sizes(c, "qgen_view_open", d->max_seqs, d->max_blocks * d->page_size, d->n_pages, 1)) != QGEN_OK)
    return st;
  qgen_kv *kv = kv_new(c, d->max_seqs, d->max_blocks * d->page_size, d->n_pages, 1);
  if (!kv) return qgen_fail(c, QGEN_ERR_OUT_OF_MEMORY, "qgen_view_open: out of host memory");
  kv->view = *d;
  return kv_finish(kv, out);
}

/* A sparse view keeps its bounds from the pool's K rows, which it reads as 16-bit values. */
static qgen_status view_bounds_ok(const qgen_kv *kv, const char *fn) {
  qgen_ctx *c = kv->ctx;
  if (qgen_type_traits_of(c->L.k_type)->is_quant || qgen_type_row_bytes(c->L.k_type, 1) != 2)
    return qgen_fail(c, QGEN_ERR_UNSUPPORTED, "%s: a view keeps page bounds only over a 16-bit K (f16, bf16); this spec's k_type is %s (attend it dense)",
                     fn, c->info.k_type);
  return QGEN_OK;
}

qgen_status qgen_view_update(qgen_kv *kv, qgen_ptr slots, long long n, int slot_bytes, qgen_stream stream) {
  if (!kv) return QGEN_ERR_INVALID_ARG;
  if (kv->released) return closed(kv, "qgen_view_update");
  qgen_ctx *c = kv->ctx;
  if (!kv->is_view) return qgen_fail(c, QGEN_ERR_INVALID_ARG, "qgen_view_update: not a view (qgen_append keeps an owned cache's bounds)");
  if (n < 0 || n > INT32_MAX || (n > 0 && !slots) || (slot_bytes != 4 && slot_bytes != 8) || slots % (qgen_ptr)slot_bytes)
    return qgen_fail(c, QGEN_ERR_INVALID_ARG, "qgen_view_update: n = %lld, slots = 0x%llx, slot_bytes = %d (need 0 <= n < 2^31, slots non-NULL and aligned, 4 or 8 bytes)",
                     n, slots, slot_bytes);
  if (!c->spec.sparse || n == 0) return QGEN_OK;
  qgen_status st = view_bounds_ok(kv, "qgen_view_update");
  return st != QGEN_OK ? st : c->be->view_update(kv, slots, n, slot_bytes, stream);
}

/* A view refuses what would write the caller's memory or needs the lengths on the host. */
static qgen_status no_view(qgen_kv *kv, const char *fn) {
  return kv->is_view ? qgen_fail(kv->ctx, QGEN_ERR_INVALID_ARG,
                                 "%s: this is a view; its K/V, block table and lengths belong to the caller (write them there; qgen_view_update keeps the bounds)", fn)
                     : QGEN_OK;
}

void qgen_cache_destroy(qgen_kv *kv) {
  if (!kv) return;
  qgen_ctx *c = kv->ctx;
  pthread_mutex_lock(&c->kv_lock);
  if (kv->prev) kv->prev->next = kv->next;
  else c->kvs = kv->next;
  if (kv->next) kv->next->prev = kv->prev;
  const int last = c->closed && !c->kvs; /* the closed context waited for its last cache */
  pthread_mutex_unlock(&c->kv_lock);
  kv_release(kv);
  free(kv);
  if (last) ctx_free(c);
}

/* ---- pages shared by sequences ------------------------------------------------------ */

/* Sequence seq's page table row. */
static int32_t *row_of(const qgen_kv *kv, int seq) { return kv->host.page_table + (int64_t)seq * kv->pps; }

/* Refuse (fn) a row for seq, not live, whose logical pages from `from` on hold a page a live
   sequence maps; seq's row is pages[0..n) followed by its current entries from n on. */
static qgen_status check_row(qgen_kv *kv, const char *fn, int seq, const int *pages, int64_t n, int64_t from) {
  const int32_t *row = row_of(kv, seq);
  for (int64_t i = from; i < kv->pps; i++) {
    const int32_t p = i < n ? pages[i] : row[i];
    if (kv->page_refs[p] == 0) continue;
    int o = 0; /* the message names one of the live sequences holding p */
    int64_t j = 0;
    for (; o < kv->max_seqs; o++) {
      const int32_t *other = row_of(kv, o);
      for (j = 0; kv->live[o] && j < kv->pps && other[j] != p; j++) {}
      if (kv->live[o] && j < kv->pps) break;
    }
    return qgen_fail(kv->ctx, QGEN_ERR_INVALID_ARG, "%s: sequence %d's logical page %lld and sequence %d's logical page "
                     "%lld would be the same physical page %d; sequence %d holds tokens, and appends to one would "
                     "overwrite the other", fn, seq, (long long)i, o, (long long)j, (int)p, o);
  }
  return QGEN_OK;
}

/* seq becomes live: the pages of its row are held until its reset. */
static void claim(qgen_kv *kv, int seq) {
  const int32_t *row = row_of(kv, seq);
  for (int64_t i = 0; i < kv->pps; i++) kv->page_refs[row[i]]++;
  kv->live[seq] = 1;
}

static void unclaim(qgen_kv *kv, int seq) {
  if (!kv->live[seq]) return;
  const int32_t *row = row_of(kv, seq);
  for (int64_t i = 0; i < kv->pps; i++) kv->page_refs[row[i]]--;
  kv->live[seq] = 0;
}

/* seq, no longer live, gets back the entries it gave up for a shared prefix. */
static qgen_status unshare(qgen_kv *kv, int seq) {
  const int64_t n = kv->n_shared[seq];
  if (n == 0) return QGEN_OK;
  int32_t *row = row_of(kv, seq);
  memcpy(row, kv->saved + (int64_t)seq * kv->pps, (size_t)n * sizeof *row);
  kv->n_shared[seq] = 0;
  return kv->ctx->be->write_pages(kv, seq, row, n);
}

/* seq stops being live (qgen_reset, or a rollback to nothing): its holds go, its own row
   comes back, and each page of its row that a live sequence still holds as a shared prefix
   is handed to that sequence for good, in exchange for the page it gave up at that index,
   so that seq can append again at once. */
static qgen_status release(qgen_kv *kv, int seq) {
  unclaim(kv, seq);
  qgen_status st = unshare(kv, seq);
  int32_t *row = row_of(kv, seq);
  int64_t changed = 0;
  for (int64_t i = 0; st == QGEN_OK && i < kv->pps; i++) {
    if (kv->page_refs[row[i]] == 0) continue;
    for (int d = 0; d < kv->max_seqs; d++)
      if (kv->live[d] && kv->n_shared[d] > i && row_of(kv, d)[i] == row[i]) {
        int32_t *gave = kv->saved + (int64_t)d * kv->pps + i, p = row[i];
        row[i] = *gave;
        *gave = p;
        changed = i + 1;
        break;
      }
  }
  return st == QGEN_OK && changed ? kv->ctx->be->write_pages(kv, seq, row, changed) : st;
}

/* The sequences of an append that are not live yet must not take a live one's page. */
static qgen_status check_claims(qgen_kv *kv, const char *fn, const int *seq, int n_seq, const int *n_new) {
  qgen_status st = QGEN_OK;
  for (int i = 0; i < n_seq && st == QGEN_OK; i++)
    if (!kv->live[seq[i]] && (!n_new || n_new[i] > 0)) st = check_row(kv, fn, seq[i], NULL, 0, 0);
  return st;
}

qgen_status qgen_cache_set_scales(qgen_kv *kv, float k_scale, float v_scale) {
  if (!kv) return QGEN_ERR_INVALID_ARG;
  if (kv->released) return closed(kv, "qgen_cache_set_scales");
  qgen_ctx *c = kv->ctx;
  const float sc[2] = {k_scale, v_scale};
  for (int w = 0; w < 2; w++) {
    const qgen_type t = w ? c->L.v_type : c->L.k_type;
    if (!(sc[w] > 0.0f && isfinite(sc[w])))
      return qgen_fail(c, QGEN_ERR_INVALID_ARG, "qgen_cache_set_scales: %s = %g must be a finite number > 0",
                       w ? "v_scale" : "k_scale", sc[w]);
    if (sc[w] != 1.0f && !qgen_type_traits_of(t)->tensor_scale)
      return qgen_fail(c, QGEN_ERR_INVALID_ARG,
                       "qgen_cache_set_scales: %s = %g for a %s %s cache: only fp8 caches (e4m3, e5m2) take a per-tensor scale",
                       w ? "v_scale" : "k_scale", sc[w], qgen_type_traits_of(t)->name, w ? "V" : "K");
  }
  kv->host.k_scale = k_scale;
  kv->host.v_scale = v_scale;
  return QGEN_OK;
}

static qgen_status check_seqs(qgen_kv *kv, const char *fn, const int *seq, int n_seq, int distinct) {
  qgen_ctx *c = kv->ctx;
  if (n_seq < 0) return qgen_fail(c, QGEN_ERR_INVALID_ARG, "%s: n_seq = %d", fn, n_seq);
  if (n_seq > 0 && !seq) return qgen_fail(c, QGEN_ERR_INVALID_ARG, "%s: seq is NULL", fn);
  for (int i = 0; i < n_seq; i++) {
    if (seq[i] < 0 || seq[i] >= kv->max_seqs)
      return qgen_fail(c, QGEN_ERR_INVALID_ARG, "%s: seq[%d] = %d is outside [0, %d)", fn, i, seq[i], kv->max_seqs);
    for (int k = 0; distinct && k < i; k++)
      if (seq[k] == seq[i]) return qgen_fail(c, QGEN_ERR_INVALID_ARG, "%s: sequence %d is listed twice", fn, seq[i]);
  }
  return QGEN_OK;
}

/* kv->len from the lengths the backend holds, once qgen_append_decode has been used on kv
   (graph replays advance them unseen); the tokens it dropped wait in kv->dropped for
   qgen_sync. Waits for the device. */
static qgen_status refresh(qgen_kv *kv) {
  if (!kv->device_len) return QGEN_OK;
  int32_t *len = kv->sync_buf, *dropped = kv->sync_buf + kv->max_seqs;
  qgen_status st = kv->ctx->be->sync(kv, len, dropped);
  if (st != QGEN_OK) return st;
  for (int s = 0; s < kv->max_seqs; s++) {
    kv->len[s] = len[s];
    kv->dropped[s] += dropped[s];
  }
  return QGEN_OK;
}

qgen_status qgen_append(qgen_kv *kv, const int *seq, int n_seq, const int *n_new, qgen_ptr k, qgen_ptr v,
                        qgen_stream stream) {
  if (!kv) return QGEN_ERR_INVALID_ARG;
  if (kv->released) return closed(kv, "qgen_append");
  qgen_ctx *c = kv->ctx;
  qgen_status st = no_view(kv, "qgen_append");
  if (st != QGEN_OK || (st = check_seqs(kv, "qgen_append", seq, n_seq, 1)) != QGEN_OK || (st = refresh(kv)) != QGEN_OK) return st;
  if (n_seq > 0 && !n_new) return qgen_fail(c, QGEN_ERR_INVALID_ARG, "qgen_append: n_new is NULL");
  int64_t total = 0;
  for (int i = 0; i < n_seq; i++) {
    if (n_new[i] < 0) return qgen_fail(c, QGEN_ERR_INVALID_ARG, "qgen_append: n_new[%d] = %d", i, n_new[i]);
    if (kv->len[seq[i]] + n_new[i] > kv->max_tokens)
      return qgen_fail(c, QGEN_ERR_CAPACITY, "qgen_append: sequence %d holds %lld tokens; %d more exceed its capacity %lld",
                       seq[i], (long long)kv->len[seq[i]], n_new[i], (long long)kv->max_tokens);
    total += n_new[i];
  }
  if (total == 0) return QGEN_OK;
  if (!k || !v) return qgen_fail(c, QGEN_ERR_INVALID_ARG, "qgen_append: k or v is NULL");
  if ((st = check_claims(kv, "qgen_append", seq, n_seq, n_new)) != QGEN_OK) return st;
  st = c->be->append(kv, seq, n_seq, n_new, k, v, stream);
  if (st == QGEN_OK)
    for (int i = 0; i < n_seq; i++) {
      kv->len[seq[i]] += n_new[i];
      if (n_new[i] > 0 && !kv->live[seq[i]]) claim(kv, seq[i]);
    }
  return st;
}

qgen_status qgen_append_decode(qgen_kv *kv, const int *seq, int n_seq, qgen_ptr k, qgen_ptr v, qgen_stream stream) {
  if (!kv) return QGEN_ERR_INVALID_ARG;
  if (kv->released) return closed(kv, "qgen_append_decode");
  qgen_status st = no_view(kv, "qgen_append_decode");
  if (st != QGEN_OK || (st = check_seqs(kv, "qgen_append_decode", seq, n_seq, 1)) != QGEN_OK || n_seq == 0) return st;
  if (!k || !v) return qgen_fail(kv->ctx, QGEN_ERR_INVALID_ARG, "qgen_append_decode: k or v is NULL");
  if ((st = check_claims(kv, "qgen_append_decode", seq, n_seq, NULL)) != QGEN_OK) return st;
  /* before the launches: one that fails may follow one that ran */
  kv->device_len = 1;
  for (int i = 0; i < n_seq; i++)
    if (!kv->live[seq[i]]) claim(kv, seq[i]);
  return kv->ctx->be->append_decode(kv, seq, n_seq, k, v, stream);
}

qgen_status qgen_sync(qgen_kv *kv) {
  if (!kv) return QGEN_ERR_INVALID_ARG;
  if (kv->released) return closed(kv, "qgen_sync");
  qgen_status st = refresh(kv);
  if (st != QGEN_OK) return st;
  int first = -1, n = 0;
  long long tokens = 0;
  for (int s = 0; s < kv->max_seqs; s++)
    if (kv->dropped[s]) {
      if (first < 0) first = s;
      n++;
      tokens += kv->dropped[s];
      kv->dropped[s] = 0;
    }
  if (n == 0) return QGEN_OK;
  return qgen_fail(kv->ctx, QGEN_ERR_CAPACITY,
                   "qgen_sync: qgen_append_decode dropped %lld token(s) of %d sequence(s) at their capacity of %lld "
                   "tokens (the first: sequence %d)", tokens, n, (long long)kv->max_tokens, first);
}

qgen_status qgen_reset(qgen_kv *kv, int seq) {
  if (!kv) return QGEN_ERR_INVALID_ARG;
  if (kv->released) return closed(kv, "qgen_reset");
  qgen_status st = no_view(kv, "qgen_reset");
  if (st != QGEN_OK || (st = check_seqs(kv, "qgen_reset", &seq, 1, 0)) != QGEN_OK) return st;
  st = kv->ctx->be->reset(kv, seq);
  if (st == QGEN_OK) kv->len[seq] = 0, kv->selected[seq] = 0, st = release(kv, seq);
  return st;
}

qgen_status qgen_rollback(qgen_kv *kv, int seq, long long n) {
  if (!kv) return QGEN_ERR_INVALID_ARG;
  if (kv->released) return closed(kv, "qgen_rollback");
  qgen_status st = no_view(kv, "qgen_rollback");
  if (st != QGEN_OK || (st = check_seqs(kv, "qgen_rollback", &seq, 1, 0)) != QGEN_OK || (st = refresh(kv)) != QGEN_OK) return st;
  if (n < 0 || n > kv->len[seq])
    return qgen_fail(kv->ctx, QGEN_ERR_INVALID_ARG, "qgen_rollback: n = %lld is outside [0, %lld], the tokens sequence %d holds",
                     n, (long long)kv->len[seq], seq);
  if (n == 0) return QGEN_OK;
  const int64_t B = kv->ctx->L.block, keep = kv->len[seq] - n;
  const int32_t *row = row_of(kv, seq);
  for (int64_t lp = keep / B; lp <= (kv->len[seq] - 1) / B; lp++) /* the pages it writes */
    if (kv->page_refs[row[lp]] > 1)
      return qgen_fail(kv->ctx, QGEN_ERR_INVALID_ARG, "qgen_rollback: %lld of sequence %d's %lld tokens would leave it "
                       "%lld, cutting into its logical page %lld, a page of a prefix it shares with another sequence "
                       "(qgen_share_prefix)", n, seq, (long long)kv->len[seq], (long long)keep, (long long)lp);
  st = kv->ctx->be->rollback(kv, seq, (int64_t)n);
  if (st == QGEN_OK && (kv->len[seq] -= n) == 0) st = release(kv, seq);
  return st;
}

qgen_status qgen_share_prefix(qgen_kv *kv, int src, int dst, long long n) {
  if (!kv) return QGEN_ERR_INVALID_ARG;
  if (kv->released) return closed(kv, "qgen_share_prefix");
  qgen_ctx *c = kv->ctx;
  const int both[2] = {src, dst};
  qgen_status st = no_view(kv, "qgen_share_prefix");
  if (st != QGEN_OK || (st = check_seqs(kv, "qgen_share_prefix", both, 2, 1)) != QGEN_OK || (st = refresh(kv)) != QGEN_OK)
    return st;
  if (n < 1 || n > kv->len[src])
    return qgen_fail(c, QGEN_ERR_INVALID_ARG, "qgen_share_prefix: n = %lld is outside [1, %lld], the tokens sequence %d holds",
                     n, (long long)kv->len[src], src);
  if (kv->len[dst] != 0 || kv->live[dst])
    return qgen_fail(c, QGEN_ERR_INVALID_ARG, "qgen_share_prefix: sequence %d holds %lld tokens; the prefix goes to an "
                     "empty sequence (qgen_reset it first)", dst, (long long)kv->len[dst]);
  const int64_t B = c->L.block, full = n / B, keep = n % B;
  const int32_t *from = row_of(kv, src);
  int32_t *row = row_of(kv, dst);
  /* its own pages from `full` on (the copy of a partial page among them) must be free */
  if ((st = check_row(kv, "qgen_share_prefix", dst, NULL, 0, full)) != QGEN_OK) return st;
  memcpy(kv->saved + (int64_t)dst * kv->pps, row, (size_t)full * sizeof *row);
  if ((st = c->be->write_pages(kv, dst, from, full)) != QGEN_OK) return st;
  memcpy(row, from, (size_t)full * sizeof *row);
  kv->n_shared[dst] = full;
  claim(kv, dst);
  st = keep ? c->be->copy_page(kv, from[full], row[full], (int)keep) : QGEN_OK;
  if (st == QGEN_OK) st = c->be->set_len(kv, dst, n);
  if (st != QGEN_OK) { /* a CUDA failure: give dst its row back */
    unclaim(kv, dst);
    unshare(kv, dst);
    return st;
  }
  kv->len[dst] = n;
  kv->selected[dst] = 0;
  return QGEN_OK;
}

long long qgen_seq_len(const qgen_kv *kv, int seq) {
  if (!kv || seq < 0 || seq >= kv->max_seqs) return -1;
  if (kv->released) return closed(kv, "qgen_seq_len"), -1;
  if (kv->is_view) return no_view((qgen_kv *)kv, "qgen_seq_len"), -1;
  /* kv came non-const from qgen_cache_create; refreshing the mirror is no visible change */
  return refresh((qgen_kv *)kv) == QGEN_OK ? (long long)kv->len[seq] : -1;
}

/* qgen_attend and qgen_attend_multi (fn): n_q NULL is one query token a sequence. */
static qgen_status attend_step(qgen_kv *kv, const char *fn, const int *seq, int n_seq, const int *n_q, qgen_ptr q,
                               qgen_ptr out, const qgen_attend_opts *opts, qgen_stream stream) {
  if (!kv) return QGEN_ERR_INVALID_ARG;
  if (kv->released) return closed(kv, fn);
  qgen_ctx *c = kv->ctx;
  qgen_status st = check_seqs(kv, fn, seq, n_seq, 1);
  if (st != QGEN_OK) return st;
  if (n_seq == 0) return QGEN_OK;
  if (!q || !out) return qgen_fail(c, QGEN_ERR_INVALID_ARG, "%s: q or out is NULL", fn);
  for (int i = 0; n_q && i < n_seq; i++) {
    if (n_q[i] < 1 || n_q[i] > QGEN_MAX_STEP_TOKENS)
      return qgen_fail(c, QGEN_ERR_INVALID_ARG, "%s: n_q[%d] = %d is outside [1, QGEN_MAX_STEP_TOKENS = %d]", fn, i, n_q[i],
                       QGEN_MAX_STEP_TOKENS);
    if (n_q[i] > c->info.max_step_tokens)
      return qgen_fail(c, QGEN_ERR_UNSUPPORTED, "%s: n_q[%d] = %d query tokens for sequence %d; %s's kernels on this %s "
                       "attend at most %d a sequence in one call (qgen_info.max_step_tokens)", fn, i, n_q[i], seq[i], c->spec.name,
                       c->be->name, c->info.max_step_tokens);
  }
  const qgen_attend_opts o = opts ? *opts : qgen_attend_defaults(c);
  qgen_budget b = {QGEN_BUDGET_DENSE, 0, 0, 0, 0};
  if (o.mode == QGEN_ATTEND_SPARSE) {
    if (!c->spec.sparse)
      return qgen_fail(c, QGEN_ERR_UNSUPPORTED, "%s: spec %s is dense (no bounds are kept); sparse attention needs a sparse spec", fn, c->spec.name);
    if (kv->is_view && (st = view_bounds_ok(kv, fn)) != QGEN_OK) return st;
    if (o.budget < 0 || o.sink < 0 || o.recent < 0)
      return qgen_fail(c, QGEN_ERR_INVALID_ARG, "%s: budget %lld, sink %lld, recent %lld must be >= 0", fn, o.budget, o.sink, o.recent);
    if (o.budget > 0 && o.coverage != 0.0)
      return qgen_fail(c, QGEN_ERR_INVALID_ARG, "%s: both coverage = %g and budget = %lld tokens are set; give one (the other 0)",
                       fn, o.coverage, o.budget);
    if (o.budget == 0 && !(o.coverage > 0.0 && o.coverage <= 1.0))
      return qgen_fail(c, QGEN_ERR_INVALID_ARG, "%s: coverage = %g must be in (0, 1] (or give budget > 0 tokens)", fn, o.coverage);
    b.mode = o.budget > 0 ? QGEN_BUDGET_TOKENS : QGEN_BUDGET_COVERAGE;
    b.coverage = o.coverage;
    /* A budget, sink or recent past the capacity means "every token" either way; clamping
       keeps the page arithmetic (budget + block - 1 in layout.c and select.cu) from
       overflowing for values near LLONG_MAX. */
    b.tokens = o.budget < kv->max_tokens ? o.budget : kv->max_tokens;
    b.sink = o.sink < kv->max_tokens ? o.sink : kv->max_tokens;
    b.recent = o.recent < kv->max_tokens ? o.recent : kv->max_tokens;
  } else if (o.mode == QGEN_ATTEND_REUSE) {
    if (!c->spec.sparse)
      return qgen_fail(c, QGEN_ERR_UNSUPPORTED, "%s: spec %s is dense; QGEN_ATTEND_REUSE reuses a sparse selection",
                       fn, c->spec.name);
    for (int i = 0; i < n_seq; i++)
      if (!kv->selected[seq[i]])
        return qgen_fail(c, QGEN_ERR_INVALID_ARG, "%s: QGEN_ATTEND_REUSE: sequence %d has no sparse selection "
                         "since it was created or reset; attend it with QGEN_ATTEND_SPARSE first", fn, seq[i]);
    b.mode = QGEN_BUDGET_REUSE;
  } else if (o.mode != QGEN_ATTEND_DENSE) {
    return qgen_fail(c, QGEN_ERR_INVALID_ARG, "%s: mode = %d (QGEN_ATTEND_DENSE, QGEN_ATTEND_SPARSE or "
                     "QGEN_ATTEND_REUSE)", fn, o.mode);
  }
  if (o.window < 0)
    return qgen_fail(c, QGEN_ERR_INVALID_ARG, "%s: window = %lld must be >= 0 (0: every token)", fn, o.window);
  if (o.window > 0 && o.mode != QGEN_ATTEND_DENSE)
    return qgen_fail(c, QGEN_ERR_INVALID_ARG, "%s: window = %lld with mode %d; a window attends dense within it "
                     "(QGEN_ATTEND_DENSE)", fn, o.window, o.mode);
  if (o.window > 0 && !c->be->windows)
    return qgen_fail(c, QGEN_ERR_UNSUPPORTED, "%s: window = %lld: the %s backend attends no window so far (the CPU "
                     "backend does)", fn, o.window, c->be->name);
  if (o.sinks && !c->be->sinks)
    return qgen_fail(c, QGEN_ERR_UNSUPPORTED, "%s: sinks: the %s backend attends with no sinks so far (the CPU backend "
                     "does)", fn, c->be->name);
  if ((o.window > 0 || o.sinks) && c->L.v_tau > 0)
    return qgen_fail(c, QGEN_ERR_UNSUPPORTED, "%s: a %s with spec %s's sparse-V (sparse.v_tau = %g): not supported "
                     "together", fn, o.window > 0 ? "window" : "sink", c->spec.name, c->L.v_tau);
  const qgen_ref_step_opts x = {o.window, (const float *)(uintptr_t)o.sinks};
  st = c->be->attend(kv, seq, n_seq, n_q, &x, q, out, &b, stream);
  if (st == QGEN_OK && o.mode == QGEN_ATTEND_SPARSE)
    for (int i = 0; i < n_seq; i++) kv->selected[seq[i]] = 1;
  return st;
}

qgen_status qgen_attend(qgen_kv *kv, const int *seq, int n_seq, qgen_ptr q, qgen_ptr out,
                        const qgen_attend_opts *opts, qgen_stream stream) {
  return attend_step(kv, "qgen_attend", seq, n_seq, NULL, q, out, opts, stream);
}

qgen_status qgen_attend_multi(qgen_kv *kv, const int *seq, int n_seq, const int *n_q, qgen_ptr q, qgen_ptr out,
                              const qgen_attend_opts *opts, qgen_stream stream) {
  if (kv && !kv->released && n_seq > 0 && !n_q) return qgen_fail(kv->ctx, QGEN_ERR_INVALID_ARG, "qgen_attend_multi: n_q is NULL");
  return attend_step(kv, "qgen_attend_multi", seq, n_seq, n_q, q, out, opts, stream);
}

/* ---- introspection ------------------------------------------------------------------ */

size_t qgen_kv_size(const qgen_kv *kv, int which) {
  if (!kv || kv->released) return 0;
  const qgen_layout *L = &kv->ctx->L;
  switch (which) {
  case QGEN_KV_K: return kv->is_view ? 0 : (size_t)kv->n_pages * L->k_page_bytes;
  case QGEN_KV_V: return kv->is_view ? 0 : (size_t)kv->n_pages * L->v_page_bytes;
  case QGEN_KV_BOUNDS: return (size_t)kv->n_pages * L->bounds_page_bytes;
  case QGEN_KV_PAGE_TABLE: return kv->is_view ? 0 : (size_t)kv->n_pages * sizeof(int32_t);
  case QGEN_KV_SEQ_LEN: return kv->is_view ? 0 : (size_t)kv->max_seqs * sizeof(int32_t);
  case QGEN_KV_SKETCH: return (size_t)kv->n_pages * L->sketch_page_bytes;
  case QGEN_KV_BOUNDS_I8: return qgen_kv_has_i8(kv) ? (size_t)kv->n_pages * L->bounds_i8_page_bytes : 0;
  }
  return 0;
}

qgen_status qgen_kv_read(qgen_kv *kv, int which, void *host, size_t bytes) {
  if (!kv) return QGEN_ERR_INVALID_ARG;
  if (kv->released) return closed(kv, "qgen_kv_read");
  size_t want = qgen_kv_size(kv, which);
  if (which < QGEN_KV_K || which > QGEN_KV_BOUNDS_I8)
    return qgen_fail(kv->ctx, QGEN_ERR_INVALID_ARG, "qgen_kv_read: unknown array %d (QGEN_KV_K .. QGEN_KV_BOUNDS_I8)", which);
  if (want == 0)
    return qgen_fail(kv->ctx, QGEN_ERR_INVALID_ARG,
                     "qgen_kv_read: this cache has no array %d (a dense spec keeps no bounds, an f16-bounds spec or a view of "
                     "half-block pages no 8-bit bounds; only two-stage specs over an f16/bf16 K a sketch; a view has only its bounds)", which);
  if (!host) return qgen_fail(kv->ctx, QGEN_ERR_INVALID_ARG, "qgen_kv_read: host buffer is NULL");
  if (bytes != want)
    return qgen_fail(kv->ctx, QGEN_ERR_INVALID_ARG, "qgen_kv_read: array %d has %zu bytes, got a buffer of %zu", which, want, bytes);
  return kv->ctx->be->read(kv, which, host, bytes);
}

static int cmp_i32(const void *a, const void *b) {
  const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

/* A row (pages[0..n), then seq's entries from n on) that names one physical page twice
   would write two logical pages of seq into one. */
static qgen_status distinct_row(qgen_kv *kv, int seq, const int *pages, int64_t n) {
  int32_t *r = malloc((size_t)kv->pps * sizeof *r);
  if (!r) return qgen_fail(kv->ctx, QGEN_ERR_OUT_OF_MEMORY, "qgen_kv_map: out of host memory");
  const int32_t *row = row_of(kv, seq);
  for (int64_t i = 0; i < kv->pps; i++) r[i] = i < n ? pages[i] : row[i];
  qsort(r, (size_t)kv->pps, sizeof *r, cmp_i32);
  int64_t dup = -1;
  for (int64_t i = 1; i < kv->pps && dup < 0; i++)
    if (r[i] == r[i - 1]) dup = r[i];
  free(r);
  if (dup < 0) return QGEN_OK;
  int64_t a = -1, b = -1;
  for (int64_t i = 0; i < kv->pps && b < 0; i++)
    if ((i < n ? pages[i] : row[i]) == dup) *(a < 0 ? &a : &b) = i;
  return qgen_fail(kv->ctx, QGEN_ERR_INVALID_ARG, "qgen_kv_map: sequence %d's logical pages %lld and %lld would both be "
                   "physical page %lld (%s)", seq, (long long)a, (long long)b, (long long)dup,
                   b < n ? "both in pages[]" : "pages[] and the entry kept past n");
}

qgen_status qgen_kv_map(qgen_kv *kv, int seq, const int *pages, long long n) {
  if (!kv) return QGEN_ERR_INVALID_ARG;
  if (kv->released) return closed(kv, "qgen_kv_map");
  qgen_ctx *c = kv->ctx;
  qgen_status st = no_view(kv, "qgen_kv_map");
  if (st != QGEN_OK || (st = check_seqs(kv, "qgen_kv_map", &seq, 1, 0)) != QGEN_OK) return st;
  if (n <= 0 || n > kv->pps)
    return qgen_fail(c, QGEN_ERR_INVALID_ARG, "qgen_kv_map: n = %lld pages (allowed 1..%lld)", n, (long long)kv->pps);
  if (!pages) return qgen_fail(c, QGEN_ERR_INVALID_ARG, "qgen_kv_map: pages is NULL");
  if ((st = refresh(kv)) != QGEN_OK) return st;
  if (kv->len[seq] != 0) return qgen_fail(c, QGEN_ERR_INVALID_ARG, "qgen_kv_map: sequence %d is not empty", seq);
  for (long long i = 0; i < n; i++)
    if (pages[i] < 0 || pages[i] >= kv->n_pages)
      return qgen_fail(c, QGEN_ERR_INVALID_ARG, "qgen_kv_map: pages[%lld] = %d is outside [0, %lld)", i, pages[i], (long long)kv->n_pages);
  const int was_live = kv->live[seq]; /* an append_decode not run yet */
  unclaim(kv, seq); /* its own holds do not count against its new row */
  if ((st = check_row(kv, "qgen_kv_map", seq, pages, n, 0)) != QGEN_OK || (st = distinct_row(kv, seq, pages, n)) != QGEN_OK ||
      (st = c->be->write_pages(kv, seq, pages, n)) != QGEN_OK) {
    if (was_live) claim(kv, seq);
    return st;
  }
  memcpy(row_of(kv, seq), pages, (size_t)n * sizeof *pages);
  if (was_live) claim(kv, seq);
  return QGEN_OK;
}

qgen_status qgen_kv_selection(qgen_kv *kv, int seq, int *lists, int *counts) {
  if (!kv) return QGEN_ERR_INVALID_ARG;
  if (kv->released) return closed(kv, "qgen_kv_selection");
  qgen_ctx *c = kv->ctx;
  qgen_status st = check_seqs(kv, "qgen_kv_selection", &seq, 1, 0);
  if (st != QGEN_OK) return st;
  if (!lists || !counts) return qgen_fail(c, QGEN_ERR_INVALID_ARG, "qgen_kv_selection: null output");
  if (!c->spec.sparse) return qgen_fail(c, QGEN_ERR_UNSUPPORTED, "qgen_kv_selection: dense spec");
  return c->be->selection(kv, seq, lists, counts);
}

long long qgen_kv_pages_per_seq(const qgen_kv *kv) { return kv ? kv->pps : -1; }
long long qgen_kv_n_pages(const qgen_kv *kv) { return kv ? kv->n_pages : -1; }

/* ---- the extension interface (qgen_ext.h) ----------------------------------------- */

const qgen_layout *qgen_ext_layout(const qgen_ctx *c) { return c && c->be ? &c->L : NULL; }
const qgen_kvmem *qgen_ext_host_cache(const qgen_kv *kv) { return kv && !kv->released && kv->host.k ? &kv->host : NULL; }

void qgen_ext_set_marks(qgen_ctx *c, struct CUevent_st **marks) {
  if (c && c->be) c->be->set_marks(c, marks);
}

int qgen_ext_max_splits(const qgen_ctx *c, int nb) { return c && c->be ? c->be->max_splits(c, nb) : 0; }

void qgen_ext_attend_order(const qgen_ctx *c, int nb, qgen_ref_order *ord) {
  if (!c || !c->be) return;
  const int gpu = c->backend == QGEN_BACKEND_GPU;
  ord->max_splits = gpu ? c->be->max_splits(c, nb) : 1;
  ord->min_split_tokens = gpu ? c->P.min_split_tokens : 1;
  ord->groups = gpu ? c->P.warps_t : 1;
}
