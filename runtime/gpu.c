/* gpu.c — the GPU executor, a row of the backend table (backend.h): loads the generated
 * module, owns the device memory of a cache, and launches the step kernels through the
 * driver API (cudrv.h).
 *
 * Open: the device's compute capability picks the artifact — a cubin for exactly that
 * arch, else the PTX of the newest arch below it (the driver JIT-compiles it; info.from_ptx
 * says so). With a spec, the kernels are built for the device's arch (cache, then NVRTC).
 *
 * A step launches only kernels with by-value arguments (kargs.h): sparse =
 * estimate → select → attend (the last two as programmatic dependents on sm_90+, so each
 * starts while its predecessor drains), two-stage (rescore > 1) = estimate → select of the
 * candidates → rescore → select of the budget (→ topp, with a top-p cut) → attend (all but
 * estimate as dependents),
 * dense = attend; attend merges its own splits
 * (combine.cu). Grids are sized from capacities known at open/create time, never from
 * device-side lengths, so a captured graph stays valid as sequences grow; qgen_append_decode
 * also takes each position from the device (append.cu), so a graph of it and attend
 * replays as consecutive decode steps. The split count for a batch of nb rows targets one
 * wave of attend CTAs: ceil(SMs * CTAs/SM / (nb * n_head_kv)), at most QGEN_MAX_SPLITS;
 * the partial buffers are sized for the worst nb.
 *
 * Every entry point pushes the device's primary context and pops it before it returns, so
 * the caller's current context is what it was (qgen.h); only an open on a thread with no
 * current context leaves the primary one current.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit/build.h"
#include "jit/nvrtc.h"
#include "base/util.h"
#include "base/cudrv.h"
#include "ref/ref.h"
#include "runtime/backend.h"
#include "base/kargs.h"

/* An engine module (plan.h qgen_tune step): the kernels of a step that takes several query
   tokens a sequence, a window or sinks, whose CTAs hold the group's heads for `step` tokens.
   Built with NVRTC on first use (a bundle holds the one-token module only). Select, topp
   and extend read no queries: the one-token module's serve it. */
typedef struct gpu_engine {
  CUmodule mod;
  CUfunction f_estimate, f_rescore, f_attend, f_combine; /* f_combine: where the plan sets merge_rows */
  qgen_plan P;
  int attend_per_sm, est_per_sm, resc_per_sm;
} gpu_engine;

enum { N_ENGINES = 5 }; /* steps of 1, 2, 4, 8 and 16 tokens (QGEN_MAX_STEP_TOKENS) */

typedef struct gpu_ctx {
  const qgen_cudrv *cu;
  CUdevice dev;
  CUcontext cuctx;
  CUmodule mod;
  CUfunction f_append, f_view, f_estimate, f_select, f_rescore, f_topp, f_extend, f_attend, f_combine; /* f_combine: where the plan sets merge_rows (QGEN_TUNE merge=1) */
  CUfunction f_estsel; /* estimate and select of a list in one cluster (templates/estsel.cu); NULL where not built */
  int sm_count, arch, attend_per_sm, est_per_sm, resc_per_sm;
  int code_arch; /* the arch the loaded kernels were compiled for (PTX of an older one runs too) */
  /* the architecture the kernels were planned for and are launched within: the device's
     (or, for a device newer than the table, the newest row at or below it), the loaded
     artifact's, or QGEN_EMULATE's */
  const qgen_arch *limits;
  unsigned features; /* QGEN_ARCH_* the launches may use: the limits arch's that the code also has */
  int sel_clusters[9]; /* [n]: clusters of n select CTAs the device holds at once (sm_90 code) */
  /* [n]: clusters of n qg_estsel CTAs the device holds at once (all 0 without f_estsel) */
  int estsel_clusters[9];
  CUevent *marks; /* benchmarks: recorded before select and before attend (qgen_ext.h) */
  gpu_engine *eng[N_ENGINES]; /* [i]: 2^i tokens a row, once built */
  pthread_mutex_t eng_lock;   /* held while one is built */
  int from_bundle;            /* the kernels came from a bundle: no NVRTC */
  char *cache_dir;            /* the open's (NULL: the default), for the engines' builds */
} gpu_ctx;

typedef struct gpu_kv {
  CUdeviceptr k, v, bounds, page_table, seq_len, scores, list, count, part_o, part_ml, ticket, hist;
  CUdeviceptr sketch, exact, hist2; /* two-stage selection (kargs.h qg_cache, qg_work) */
  CUdeviceptr decode; /* qgen_append_decode's [2][max_seqs]: arrivals, dropped tokens (qg_append_args) */
  CUdeviceptr bounds_i8; /* the 8-bit bounds (L->bounds_i8), else 0 */
  int part_rows; /* part_o and part_ml hold this many (batch row x split) rows of n_head heads */
} gpu_kv;

static gpu_ctx *gctx(const qgen_ctx *c) { return c->impl; }
static gpu_kv *gkv(const qgen_kv *kv) { return kv->impl; }

#define CU(call)                                                                                      \
  do {                                                                                                \
    CUresult r_ = (call);                                                                             \
    if (r_ != CUDA_SUCCESS)                                                                           \
      return qgen_fail(c, r_ == CUDA_ERROR_OUT_OF_MEMORY ? QGEN_ERR_OUT_OF_MEMORY : QGEN_ERR_CUDA, \
                       "%s: %s", #call, qgen_cu_errstr(r_));                                          \
  } while (0)

/* The primary context made current for one entry point (enter), and the caller's back
   (leave, which passes on st, the status of the work in between). */
static qgen_status enter(qgen_ctx *c) {
  CU(gctx(c)->cu->cuCtxPushCurrent(gctx(c)->cuctx));
  return QGEN_OK;
}

static qgen_status leave(qgen_ctx *c, qgen_status st) {
  CUcontext mine;
  const CUresult r = gctx(c)->cu->cuCtxPopCurrent(&mine);
  if (st == QGEN_OK && r != CUDA_SUCCESS) return qgen_fail(c, QGEN_ERR_CUDA, "cuCtxPopCurrent: %s", qgen_cu_errstr(r));
  return st;
}

/* return `call`, run between enter and leave */
#define IN_CTX(c, call)                           \
  do {                                            \
    qgen_status st_ = enter(c);                   \
    return st_ == QGEN_OK ? leave(c, (call)) : st_; \
  } while (0)

/* Splits per (row, KV head): as many as fill the resident CTA slots once, rounded down
   so the last wave is not a small tail (288 CTAs on 264 slots run as two waves); the
   persistent attend's (plan persist = N) N times as many, which its CTAs, one a slot,
   claim as they free up (attend.cu attend_persistent). */
static int splits_at(const gpu_ctx *g, int per_sm, int persist, const qgen_layout *L, int nb) {
  int target = g->sm_count * (per_sm > 0 ? per_sm : 1);
  int ms = target / (nb * L->n_head_kv) * (persist > 0 ? persist : 1);
  return ms < 1 ? 1 : ms > QGEN_MAX_SPLITS ? QGEN_MAX_SPLITS : ms;
}

static int max_splits(const qgen_ctx *c, int nb) { return splits_at(gctx(c), gctx(c)->attend_per_sm, c->P.persist, &c->L, nb); }

/* ---- open ---------------------------------------------------------------------------- */

/* The newest row of the table at or below sm (NULL below sm_80). */
static const qgen_arch *arch_at_or_below(int sm) {
  const qgen_arch *best = NULL;
  for (int i = 0; qgen_arch_at(i); i++)
    if (qgen_arch_at(i)->sm <= sm) best = qgen_arch_at(i);
  return best;
}

/* The plan of the kernels planned for `plan` (and launched within its limits) and compiled
   for sm_<code>, into c->P and g. */
static qgen_status set_plan(qgen_ctx *c, const qgen_arch *plan, int code) {
  gpu_ctx *g = gctx(c);
  char why[256];
  if (qgen_plan_make(&c->L, plan, &c->tune, &c->P, why, sizeof why) != 0)
    return qgen_fail(c, QGEN_ERR_UNSUPPORTED, "spec %s does not fit %s: %s", c->spec.name, plan->name, why);
  const qgen_arch *ca = arch_at_or_below(code);
  g->limits = plan;
  g->features = plan->features & (ca ? ca->features : 0);
  c->info.plan_arch = plan->sm;
  return QGEN_OK;
}

/* CTAs of f an SM holds: the driver's count for this device, capped under QGEN_EMULATE by
   what the emulated architecture would hold (its shared memory, registers, threads, CTAs). */
static qgen_status occupancy(qgen_ctx *c, CUfunction f, int threads, int smem, int *per_sm) {
  gpu_ctx *g = gctx(c);
  CU(g->cu->cuOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, f, threads, (size_t)smem));
  if (c->emulate) {
    int regs = 0, stat = 0;
    CU(g->cu->cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f));
    CU(g->cu->cuFuncGetAttribute(&stat, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f));
    const int emu = qgen_arch_occupancy(g->limits, threads, regs, stat + smem);
    if (emu < *per_sm) *per_sm = emu;
  }
  return QGEN_OK;
}

/* Kernel `name` (f, launched under plan P) within the device's per-CTA shared memory and the
   limits arch's (the same but under QGEN_EMULATE), static + dynamic, before anything
   launches; its dynamic size and carveout set. */
static qgen_status fit_kernel(qgen_ctx *c, const char *name, CUfunction f, const qgen_plan *P) {
  gpu_ctx *g = gctx(c);
  const qgen_cudrv *cu = g->cu;
  int smem_max = 0, stat = 0;
  CU(cu->cuDeviceGetAttribute(&smem_max, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, g->dev));
  const int limit = smem_max < g->limits->smem_block ? smem_max : g->limits->smem_block;
  const int dyn = qgen_plan_dynamic_smem(P, name);
  CU(cu->cuFuncGetAttribute(&stat, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f));
  if (stat + dyn > limit)
    return qgen_fail(c, QGEN_ERR_UNSUPPORTED, "%s needs %d bytes of shared memory (%d static + %d dynamic); %s allows %d a CTA",
                     name, stat + dyn, stat, dyn, smem_max < g->limits->smem_block ? "this device" : g->limits->name, limit);
  if (dyn) CU(cu->cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, dyn));
  /* all of L1 as shared memory, for every kernel: attend's occupancy is bounded by it, and
     kernels that agree on the carveout need no SM reconfiguration between them */
  CU(cu->cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 100));
  return QGEN_OK;
}

/* How many clusters of n CTAs of f (threads, smem) the device holds at once (0 where it
   cannot launch them); under emulation no more than the emulated SMs' CTA slots would hold. */
static int clusters_of(qgen_ctx *c, CUfunction f, int n, int threads, int smem) {
  gpu_ctx *g = gctx(c);
  CUlaunchAttribute at;
  memset(&at, 0, sizeof at);
  at.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  at.value.clusterDim.x = (unsigned)n, at.value.clusterDim.y = 1, at.value.clusterDim.z = 1;
  CUlaunchConfig cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.gridDimX = (unsigned)n, cfg.gridDimY = 1, cfg.gridDimZ = 1;
  cfg.blockDimX = (unsigned)threads, cfg.blockDimY = 1, cfg.blockDimZ = 1;
  cfg.sharedMemBytes = (unsigned)smem;
  cfg.attrs = &at;
  cfg.numAttrs = 1;
  int k = 0;
  if (g->cu->cuOccupancyMaxActiveClusters(&k, f, &cfg) != CUDA_SUCCESS) k = 0;
  if (c->emulate) {
    int per = 0;
    if (occupancy(c, f, threads, smem, &per) != QGEN_OK) per = 0;
    if (per * g->sm_count / n < k) k = per * g->sm_count / n;
  }
  return k;
}

static qgen_status load_module(qgen_ctx *c, const qgen_artifact *a) {
  gpu_ctx *g = gctx(c);
  const qgen_cudrv *cu = g->cu;
  g->code_arch = a->arch;
  if (a->arch == g->arch) CU(cu->cuModuleLoadData(&g->mod, a->cubin));
  else {
    CU(cu->cuModuleLoadData(&g->mod, a->ptx));
    c->info.from_ptx = 1;
  }
  CU(cu->cuModuleGetFunction(&g->f_append, g->mod, QGEN_KERNEL_NAME(append)));
  CU(cu->cuModuleGetFunction(&g->f_attend, g->mod, QGEN_KERNEL_NAME(attend)));
  if (c->P.merge_rows) CU(cu->cuModuleGetFunction(&g->f_combine, g->mod, QGEN_KERNEL_NAME(combine)));
  if (c->spec.sparse) {
    CU(cu->cuModuleGetFunction(&g->f_view, g->mod, QGEN_KERNEL_NAME(view)));
    CU(cu->cuModuleGetFunction(&g->f_estimate, g->mod, QGEN_KERNEL_NAME(estimate)));
    CU(cu->cuModuleGetFunction(&g->f_select, g->mod, QGEN_KERNEL_NAME(select)));
    /* (a module from before QGEN_ATTEND_REUSE has none: the other modes still run) */
    if (cu->cuModuleGetFunction(&g->f_extend, g->mod, QGEN_KERNEL_NAME(extend)) != CUDA_SUCCESS) g->f_extend = NULL;
    /* (nor one from before qg_estsel: estimate and select then run as two launches) */
    if (c->P.estsel_regs > 0 && a->arch == 90 && (g->features & QGEN_ARCH_CLUSTER) &&
        cu->cuModuleGetFunction(&g->f_estsel, g->mod, QGEN_KERNEL_NAME(estsel)) != CUDA_SUCCESS)
      g->f_estsel = NULL;
  }
  if (c->L.sparse && c->L.rescore > 1) CU(cu->cuModuleGetFunction(&g->f_rescore, g->mod, QGEN_KERNEL_NAME(rescore)));
  if (c->L.sparse && c->L.rescore > 1 && c->L.top_p < 1) CU(cu->cuModuleGetFunction(&g->f_topp, g->mod, QGEN_KERNEL_NAME(topp)));
  const struct { const char *name; CUfunction f; } all[] = {
      {"qg_append", g->f_append}, {"qg_attend", g->f_attend}, {"qg_estimate", g->f_estimate}, {"qg_select", g->f_select},
      {"qg_rescore", g->f_rescore}, {"qg_topp", g->f_topp}, {"qg_view", g->f_view}, {"qg_extend", g->f_extend}, {"qg_combine", g->f_combine},
      {"qg_estsel", g->f_estsel}};
  qgen_status st;
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    if (all[i].f && (st = fit_kernel(c, all[i].name, all[i].f, &c->P)) != QGEN_OK) return st;
  if ((st = occupancy(c, g->f_attend, c->P.attend_threads, c->P.attend_smem, &g->attend_per_sm))) return st;
  if (g->f_estimate && (st = occupancy(c, g->f_estimate, c->P.est_threads, c->P.est_smem, &g->est_per_sm))) return st;
  if (g->f_rescore && (st = occupancy(c, g->f_rescore, c->P.resc_threads, c->P.resc_smem, &g->resc_per_sm))) return st;
  if (g->attend_per_sm < 1) return qgen_fail(c, QGEN_ERR_UNSUPPORTED, "attend cannot run on this device (occupancy 0)");
  if (g->f_estsel)
    for (int n = 1; n <= 8; n++) g->estsel_clusters[n] = clusters_of(c, g->f_estsel, n, c->P.est_threads, c->P.est_smem);
  if (g->f_select && (g->features & QGEN_ARCH_CLUSTER) && g->code_arch >= 90) /* with the most shared memory a select launch asks for */
    for (int n = 2; n <= 8; n++) g->sel_clusters[n] = clusters_of(c, g->f_select, n, c->P.sel_threads, 4 * c->P.sel_smem_keys);
  return QGEN_OK;
}

/* The artifact to load for the architecture `want` (the device's, or QGEN_EMULATE's) on a
   device of sm_<dev>: a cubin for exactly the device, else the PTX of the newest arch at
   or below both. */
static const qgen_artifact *pick(const qgen_artifact *arts, int n, int want, int dev) {
  const qgen_artifact *best = NULL;
  const int top = want < dev ? want : dev;
  for (int i = 0; i < n; i++) {
    if (arts[i].arch == want && want == dev) return &arts[i];
    if (arts[i].arch <= top && arts[i].ptx_size && (!best || arts[i].arch > best->arch)) best = &arts[i];
  }
  return best;
}

/* The device of o and its primary context, retained. */
static qgen_status gpu_device(qgen_ctx *c, const qgen_open_opts *o) {
  const char *why = "";
  const qgen_cudrv *cu = qgen_cudrv_get(&why);
  if (!cu) return qgen_fail(c, qgen_cudrv_failed() == QGEN_CUDRV_NO_DEVICE ? QGEN_ERR_NO_DEVICE : QGEN_ERR_NO_DRIVER, "%s", why);
  gpu_ctx *g = calloc(1, sizeof *g);
  if (!g) return QGEN_ERR_OUT_OF_MEMORY;
  c->impl = g;
  g->cu = cu;
  pthread_mutex_init(&g->eng_lock, NULL);
  if (o->cache_dir && !(g->cache_dir = strdup(o->cache_dir))) return QGEN_ERR_OUT_OF_MEMORY;
  int count = 0;
  CU(cu->cuDeviceGetCount(&count));
  if (o->device < 0 || o->device >= count)
    return qgen_fail(c, QGEN_ERR_NO_DEVICE, "CUDA device %d does not exist (%d found)", o->device, count);
  CU(cu->cuDeviceGet(&g->dev, o->device));
  int major = 0, minor = 0;
  CU(cu->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, g->dev));
  CU(cu->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, g->dev));
  CU(cu->cuDeviceGetAttribute(&g->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, g->dev));
  CU(cu->cuDeviceGetName(c->info.device_name, sizeof c->info.device_name, g->dev));
  g->arch = major * 10 + minor;
  c->info.arch = g->arch;
  c->info.sm_count = g->sm_count;
  if (g->arch < 80)
    return qgen_fail(c, QGEN_ERR_UNSUPPORTED, "%s is sm_%d; qgen kernels need sm_80 or newer", c->info.device_name, g->arch);
  if (c->emulate) {
    /* the emulated architecture must be no larger than the device in what the plan uses, and
       the code the device runs must use nothing the emulated one lacks */
    const qgen_arch *e = qgen_arch_of(c->emulate), *d = arch_at_or_below(g->arch);
    int smem_max = 0;
    CU(cu->cuDeviceGetAttribute(&smem_max, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, g->dev));
    if (e->smem_block > smem_max)
      return qgen_fail(c, QGEN_ERR_UNSUPPORTED, "QGEN_EMULATE=%s: its CTAs may use %d bytes of shared memory, more than this %s (sm_%d) allows (%d)",
                       e->name, e->smem_block, c->info.device_name, g->arch, smem_max);
    if (e->sm > g->arch && (d->features & ~e->features))
      return qgen_fail(c, QGEN_ERR_UNSUPPORTED, "QGEN_EMULATE=%s on sm_%d: the device's code would use features %s lacks", e->name,
                       g->arch, e->name);
  }
  CU(cu->cuDevicePrimaryCtxRetain(&g->cuctx, g->dev));
  return QGEN_OK;
}

/* The arch NVRTC builds for: the device's when NVRTC knows it, else the newest it knows
   below (PTX); under QGEN_EMULATE no newer than the emulated arch. */
static qgen_status jit_target(qgen_ctx *c, int *target) {
  const gpu_ctx *g = gctx(c);
  const int want = c->emulate ? c->emulate : g->arch;
  int known[64], nk = qgen_nvrtc_archs(known, 64);
  if (nk < 0) {
    int mj, mn;
    qgen_nvrtc_version(&mj, &mn, qgen_errbuf(c), QGEN_ERR_MAX);
    return QGEN_ERR_COMPILE;
  }
  const int top = want < g->arch ? want : g->arch;
  *target = 0;
  for (int i = 0; i < nk; i++)
    if (known[i] <= top && known[i] > *target) *target = known[i];
  if (*target < 80) return qgen_fail(c, QGEN_ERR_UNSUPPORTED, "NVRTC cannot target sm_%d or an older sm_80+ arch", top);
  return QGEN_OK;
}

/* The spec's kernels under tune, planned for `plan` and compiled for sm_<target> (the
   emulated build when the two differ), from the cache or NVRTC, into *a. */
static qgen_status jit_build(qgen_ctx *c, const qgen_tune *tune, const qgen_arch *plan, int target, qgen_artifact *a) {
  qgen_status st = QGEN_OK;
  qgen_cache *cache = qgen_cache_open(gctx(c)->cache_dir);
  char *err = malloc(65536);
  if (!err) st = QGEN_ERR_OUT_OF_MEMORY;
  else if ((plan->sm == target ? qgen_build(&c->spec, tune, &target, 1, cache, a, NULL, err, 65536)
                               : qgen_build_emulated(&c->spec, tune, plan->sm, target, cache, a, err, 65536)) != 0)
    st = qgen_fail(c, QGEN_ERR_COMPILE, "%s", err);
  free(err);
  qgen_cache_close(cache);
  return st;
}

/* The kernels: a bundle's artifact for the device, or built for it (in the primary context). */
static qgen_status gpu_load(qgen_ctx *c, const qgen_open_opts *o, const qgen_artifact *arts, int n_arts) {
  gpu_ctx *g = gctx(c);
  const int want = c->emulate ? c->emulate : g->arch;
  if (n_arts > 0) {
    const qgen_artifact *a = pick(arts, n_arts, want, g->arch);
    if (!a) return qgen_fail(c, QGEN_ERR_UNSUPPORTED, "the bundle has no cubin for sm_%d and no PTX for an older arch", want);
    /* the artifact was planned for its own arch: it must fit the limits it runs within */
    const qgen_arch *pa = qgen_arch_of(a->arch), *lim = c->emulate ? qgen_arch_of(c->emulate) : arch_at_or_below(g->arch);
    if (!pa) return qgen_fail(c, QGEN_ERR_UNSUPPORTED, "the bundle's sm_%d kernels are of an architecture qgen does not build for", a->arch);
    if (pa->smem_block > lim->smem_block)
      return qgen_fail(c, QGEN_ERR_UNSUPPORTED, "the bundle's nearest kernels are planned for %s (%d bytes of shared memory a CTA); "
                       "%s allows %d: rebuild it with qgen bundle --arch %s", pa->name, pa->smem_block, lim->name, lim->smem_block,
                       lim->name);
    qgen_status st = set_plan(c, pa, a->arch);
    if (st != QGEN_OK) return st;
    c->info.cache_hit = 1;
    g->from_bundle = 1;
    return load_module(c, a);
  }
  int target = 0;
  qgen_status st = jit_target(c, &target);
  if (st != QGEN_OK) return st;
  const qgen_arch *plan = c->emulate ? qgen_arch_of(c->emulate) : arch_at_or_below(target);
  if ((st = set_plan(c, plan, target)) != QGEN_OK) return st;
  qgen_artifact a;
  if ((st = jit_build(c, &c->tune, plan, target, &a)) != QGEN_OK) return st;
  c->info.cache_hit = a.cache_hit;
  st = load_module(c, &a);
  qgen_artifact_free(&a);
  return st;
}

static void close_gpu(qgen_ctx *c) {
  gpu_ctx *g = gctx(c);
  if (g->cuctx && enter(c) == QGEN_OK) {
    CUresult r = g->mod ? g->cu->cuModuleUnload(g->mod) : CUDA_SUCCESS;
    for (int i = 0; i < N_ENGINES; i++)
      if (g->eng[i] && g->eng[i]->mod && g->cu->cuModuleUnload(g->eng[i]->mod) != CUDA_SUCCESS) r = CUDA_ERROR_UNKNOWN;
    leave(c, r == CUDA_SUCCESS ? QGEN_OK : QGEN_ERR_CUDA);
  }
  for (int i = 0; i < N_ENGINES; i++) free(g->eng[i]);
  pthread_mutex_destroy(&g->eng_lock);
  free(g->cache_dir);
  if (g->cuctx) g->cu->cuDevicePrimaryCtxRelease(g->dev);
  free(g);
  c->impl = NULL;
}

/* The most query tokens a sequence the engine modules take (qgen_info.max_step_tokens): the
   largest power of two whose plan fits the limits arch (1 with a bundle's kernels). */
static int step_tokens(const qgen_ctx *c) {
  const gpu_ctx *g = gctx(c);
  for (int t = QGEN_MAX_STEP_TOKENS; t > 1 && !g->from_bundle; t /= 2) {
    qgen_tune tu = c->tune;
    qgen_plan P;
    tu.step = t;
    if (qgen_plan_make(&c->L, g->limits, &tu, &P, NULL, 0) == 0) return t;
  }
  return 1;
}

static qgen_status open_gpu(qgen_ctx *c, const qgen_open_opts *o, const qgen_artifact *arts, int n_arts) {
  qgen_status st = gpu_device(c, o);
  CUcontext caller = NULL;
  if (st == QGEN_OK && gctx(c)->cu->cuCtxGetCurrent(&caller) == CUDA_SUCCESS && (st = enter(c)) == QGEN_OK) {
    size_t free_b = 0, total_b = 0; /* the device's size, for qgen_cache_create's early refusal */
    if (gctx(c)->cu->cuMemGetInfo(&free_b, &total_b) == CUDA_SUCCESS) c->device_bytes = total_b;
    st = gpu_load(c, o, arts, n_arts);
    if (st == QGEN_OK && step_tokens(c) < c->info.max_step_tokens) c->info.max_step_tokens = step_tokens(c);
    /* a thread with no context keeps the primary one current, ready for its own cuMemAlloc */
    if (caller || st != QGEN_OK) st = leave(c, st);
  }
  if (st != QGEN_OK && c->impl) close_gpu(c); /* a context that failed holds no GPU state */
  return st;
}

/* ---- the cache ------------------------------------------------------------------------ */

static qgen_status alloc0(qgen_kv *kv, CUdeviceptr *p, size_t bytes) {
  qgen_ctx *c = kv->ctx;
  const qgen_cudrv *cu = gctx(c)->cu;
  *p = 0;
  if (bytes == 0) return QGEN_OK;
  const CUresult r = cu->cuMemAlloc(p, bytes);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    size_t free_b = 0, total = 0;
    cu->cuMemGetInfo(&free_b, &total);
    *p = 0;
    return qgen_fail(c, QGEN_ERR_OUT_OF_MEMORY, "%s: out of device memory: an array of %zu bytes does not fit in the %zu bytes free (of %zu)",
                     qgen_kv_api(kv), bytes, free_b, total);
  }
  CU(r);
  CU(cu->cuMemsetD8(*p, 0, bytes));
  return QGEN_OK;
}

static qgen_status cache_alloc(qgen_kv *kv) {
  qgen_ctx *c = kv->ctx;
  gpu_ctx *g = gctx(c);
  const qgen_layout *L = &c->L;
  gpu_kv *m = calloc(1, sizeof *m);
  if (!m) return qgen_fail(c, QGEN_ERR_OUT_OF_MEMORY, "%s: out of host memory", qgen_kv_api(kv));
  kv->impl = m;
  int rows = 0; /* batch rows x splits of the worst batch size */
  for (int nb = 1; nb <= QGEN_MAX_BATCH; nb++)
    if (nb * max_splits(c, nb) > rows) rows = nb * max_splits(c, nb);
  m->part_rows = rows;
  const size_t sel = L->sparse ? (size_t)kv->max_seqs * L->n_head_kv * kv->pps : 0;
  const size_t own = kv->is_view ? 0 : 1; /* a view's pools, page table and lengths are the caller's */
  qgen_status st;
  if ((st = alloc0(kv, &m->k, own * kv->n_pages * L->k_page_bytes)) ||
      (st = alloc0(kv, &m->v, own * kv->n_pages * L->v_page_bytes)) ||
      (st = alloc0(kv, &m->bounds, (size_t)kv->n_pages * L->bounds_page_bytes)) ||
      (st = alloc0(kv, &m->page_table, own * kv->n_pages * 4)) ||
      (st = alloc0(kv, &m->seq_len, own * kv->max_seqs * 4)) || (st = alloc0(kv, &m->scores, sel * 4)) ||
      (st = alloc0(kv, &m->list, sel * 4)) || (st = alloc0(kv, &m->count, (size_t)kv->max_seqs * L->n_head_kv * 4)) ||
      (st = alloc0(kv, &m->part_o, (size_t)rows * L->n_head * L->head_dim * 4)) ||
      (st = alloc0(kv, &m->part_ml, (size_t)rows * L->n_head * 2 * 4)) ||
      (st = alloc0(kv, &m->ticket, ((size_t)QGEN_MAX_BATCH * L->n_head_kv + 2) * 4)) ||
      (st = alloc0(kv, &m->hist, L->sparse ? (size_t)QGEN_MAX_BATCH * L->n_head_kv * QGEN_SEL_BINS * 4 : 0)) ||
      (st = alloc0(kv, &m->decode, own * kv->max_seqs * 2 * 4)) ||
      (st = alloc0(kv, &m->bounds_i8, qgen_kv_has_i8(kv) * kv->n_pages * L->bounds_i8_page_bytes)))
    return st;
  if (L->rescore > 1 &&
      ((st = alloc0(kv, &m->sketch, (size_t)kv->n_pages * L->sketch_page_bytes)) || (st = alloc0(kv, &m->exact, sel * 4)) ||
       (st = alloc0(kv, &m->hist2, (size_t)QGEN_MAX_BATCH * L->n_head_kv * QGEN_SEL_BINS * 4))))
    return st;
  if (own) CU(g->cu->cuMemcpyHtoD(m->page_table, kv->host.page_table, (size_t)kv->n_pages * 4));
  return QGEN_OK;
}

static qgen_status cache_create(qgen_kv *kv) { IN_CTX(kv->ctx, cache_alloc(kv)); }

static void cache_destroy(qgen_kv *kv) {
  gpu_kv *m = gkv(kv);
  if (!m) return;
  const qgen_cudrv *cu = gctx(kv->ctx)->cu;
  CUdeviceptr all[] = {m->k, m->v, m->bounds, m->page_table, m->seq_len, m->scores, m->list, m->count, m->part_o, m->part_ml, m->ticket, m->hist, m->decode,
                       m->sketch, m->exact, m->hist2, m->bounds_i8};
  if (enter(kv->ctx) == QGEN_OK) {
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
      if (all[i]) cu->cuMemFree(all[i]);
    leave(kv->ctx, QGEN_OK);
  }
  free(m);
  kv->impl = NULL;
}

/* The K (which = 0) or V pool's slabs of 16 rows are contiguous and 16-byte aligned. */
static int slab(qgen_ptr base, const int64_t st[3], size_t row) {
  return (size_t)st[1] == row && (base | (qgen_ptr)st[0] | (qgen_ptr)st[2]) % 16 == 0;
}

static qg_cache cache_args(const qgen_kv *kv) {
  const gpu_kv *m = gkv(kv);
  const qgen_layout *L = &kv->ctx->L;
  qg_cache a = {.k = m->k, .v = m->v, .bounds = m->bounds, .page_table = m->page_table, .seq_len = m->seq_len, .pages_per_seq = kv->pps,
                .k_scale = kv->host.k_scale, .v_scale = kv->host.v_scale, .sketch = m->sketch, .bounds_i8 = m->bounds_i8};
  int64_t ks[3], vs[3];
  if (kv->is_view) {
    const qgen_view_desc *d = &kv->view;
    a.k = d->k, a.v = d->v, a.page_table = d->block_table, a.seq_len = d->seq_lens;
    ks[0] = d->k_page_stride, ks[1] = d->k_token_stride, ks[2] = d->k_head_stride;
    vs[0] = d->v_page_stride, vs[1] = d->v_token_stride, vs[2] = d->v_head_stride;
    a.pt_stride = d->block_table_stride;
    a.page_size = d->page_size;
    a.flags = QG_CACHE_VIEW;
  } else {
    qgen_owned_strides(L, 0, ks);
    qgen_owned_strides(L, 1, vs);
    a.pt_stride = kv->pps;
    a.page_size = L->block;
  }
  a.k_page = ks[0], a.k_token = ks[1], a.k_head = ks[2];
  a.v_page = vs[0], a.v_token = vs[1], a.v_head = vs[2];
  a.flags |= (slab(a.k, ks, L->k_row_bytes) ? QG_CACHE_K_SLAB : 0) | (slab(a.v, vs, L->v_row_bytes) ? QG_CACHE_V_SLAB : 0);
  return a;
}

/* ---- steps ------------------------------------------------------------------------- */

static qgen_status launch(qgen_ctx *c, CUfunction f, unsigned gx, unsigned gy, unsigned gz, int threads, int smem,
                          CUstream s, void **args) {
  CU(gctx(c)->cu->cuLaunchKernel(f, gx, gy, gz, (unsigned)threads, 1, 1, (unsigned)smem, s, args, NULL));
  return QGEN_OK;
}

/* A launch as a programmatic dependent of the previous kernel in the stream (sm_90+: its
   CTAs may start while that kernel finishes and wait in grid_dep_wait, common.cuh), in
   clusters of `cluster` CTAs along x (1: none; more only with code built for sm_90+).
   Only for select and attend of a sparse step, whose predecessor is our own estimate /
   select / extend, and for qg_combine after attend: a kernel before estimate or extend
   (the caller's, which may write q) is fully ordered. */
/* A launch in clusters of `cluster` CTAs along x (<= 1: none), as a programmatic dependent
   of the kernel before it where pdl is set. */
static qgen_status launch_cfg(qgen_ctx *c, CUfunction f, unsigned gx, unsigned gy, unsigned gz, int threads, int smem, CUstream s,
                              void **args, int cluster, int pdl) {
  if (!pdl && cluster <= 1) return launch(c, f, gx, gy, gz, threads, smem, s, args);
  CUlaunchAttribute at[2];
  memset(at, 0, sizeof at);
  unsigned na = 0;
  if (pdl) {
    at[na].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    at[na++].value.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster > 1) {
    at[na].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    at[na].value.clusterDim.x = (unsigned)cluster, at[na].value.clusterDim.y = 1, at[na++].value.clusterDim.z = 1;
  }
  CUlaunchConfig cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.gridDimX = gx, cfg.gridDimY = gy, cfg.gridDimZ = gz;
  cfg.blockDimX = (unsigned)threads, cfg.blockDimY = 1, cfg.blockDimZ = 1;
  cfg.sharedMemBytes = (unsigned)smem;
  cfg.hStream = s;
  cfg.attrs = at;
  cfg.numAttrs = na;
  CU(gctx(c)->cu->cuLaunchKernelEx(&cfg, f, args, NULL));
  return QGEN_OK;
}

static qgen_status launch_ex(qgen_ctx *c, CUfunction f, unsigned gx, unsigned gy, unsigned gz, int threads, int smem,
                             CUstream s, void **args, int cluster) {
  /* not across the benchmark's breakdown events either: an event between two kernels
     leaves nothing to overlap; nor for kernels built for sm_80, which have no
     griddepcontrol.wait to hold them back */
  const int pdl = c->P.pdl && (gctx(c)->features & QGEN_ARCH_PDL) && gctx(c)->code_arch >= 90 && !gctx(c)->marks;
  return launch_cfg(c, f, gx, gy, gz, threads, smem, s, args, cluster, pdl);
}

/* The append launches, QGEN_APPEND_MAX sequences each: n_new[i] tokens at the host length
   of seq[i]; n_new NULL (qgen_append_decode): one token at the length the device holds,
   so one page per sequence whatever that length is. */
static qgen_status append_in(qgen_kv *kv, const int *seq, int n_seq, const int *n_new, qgen_ptr k, qgen_ptr v,
                             qgen_stream stream) {
  qgen_ctx *c = kv->ctx;
  const qgen_layout *L = &c->L;
  qg_cache ca = cache_args(kv);
  int64_t row = 0;
  for (int i0 = 0; i0 < n_seq; i0 += QGEN_APPEND_MAX) {
    qg_append_args a;
    memset(&a, 0, sizeof a);
    a.k_in = k;
    a.v_in = v;
    if (!n_new) {
      a.arrive = gkv(kv)->decode;
      a.dropped = gkv(kv)->decode + (CUdeviceptr)kv->max_seqs * 4;
      a.cap = kv->max_tokens;
    }
    for (int i = i0; i < n_seq && a.n_seq < QGEN_APPEND_MAX; i++) {
      const int j = a.n_seq++, n = n_new ? n_new[i] : 1;
      const int64_t start = n_new ? kv->len[seq[i]] : 0;
      a.seq[j] = seq[i];
      a.start[j] = (int)start;
      a.n_new[j] = n;
      a.row0[j] = row;
      a.work[j + 1] = a.work[j] + (n ? (int)((start + n - 1) / L->block - start / L->block + 1) : 0);
      row += n;
    }
    if (a.work[a.n_seq] == 0) continue;
    void *args[] = {&ca, &a};
    qgen_status st = launch(c, gctx(c)->f_append, (unsigned)a.work[a.n_seq], (unsigned)L->n_head_kv, 1,
                            c->P.append_threads, 0, (CUstream)stream, args);
    if (st != QGEN_OK) return st;
  }
  return QGEN_OK;
}

static qgen_status append(qgen_kv *kv, const int *seq, int n_seq, const int *n_new, qgen_ptr k, qgen_ptr v,
                          qgen_stream stream) {
  IN_CTX(kv->ctx, append_in(kv, seq, n_seq, n_new, k, v, stream));
}

static qgen_status append_decode(qgen_kv *kv, const int *seq, int n_seq, qgen_ptr k, qgen_ptr v, qgen_stream stream) {
  IN_CTX(kv->ctx, append_in(kv, seq, n_seq, NULL, k, v, stream));
}

/* CTAs sharing one select list (templates/select.cu): enough to hold a list of the
   capacity's pages in registers, at most 8 (a portable cluster), and fewer while the
   `lists` clusters would not all fit on the device at once (a second wave costs more than
   the cluster saves); 1 on code for sm_80. */
static int select_cluster(const qgen_ctx *c, int64_t pps, int lists) {
  const int64_t per = (int64_t)c->P.sel_threads * c->P.sel_regs;
  if (!(gctx(c)->features & QGEN_ARCH_CLUSTER) || gctx(c)->code_arch < 90 || per == 0) return 1;
  int64_t cl = (pps + per - 1) / per;
  if (cl > 8) cl = 8;
  while (cl > 1 && gctx(c)->sel_clusters[cl] < lists) cl--;
  return cl < 1 ? 1 : (int)cl;
}

/* qg_estsel's cluster: estimate CTAs that select their list themselves (templates/estsel.cu),
   or 0: launch estimate, then select. The most CTAs, up to 8 and at least one
   estimate round of pages each, whose clusters all fit the device at once, and no fewer
   than hold a list's keys in registers; not for a view of half-block pages. */
static int estsel_cluster(const qgen_ctx *c, const qg_cache *ca, int64_t pps, int lists) {
  const gpu_ctx *g = gctx(c);
  if (!c->P.estsel || !g->estsel_clusters[1] || ca->page_size != c->L.block) return 0;
  const int64_t hold = (int64_t)c->P.est_threads * c->P.estsel_regs;
  const int64_t need = (pps + hold - 1) / hold;
  int64_t cl = (pps + c->P.est_pages - 1) / c->P.est_pages;
  if (cl > 8) cl = 8;
  while (cl > need && g->estsel_clusters[cl] < lists) cl--;
  return cl >= need && cl >= 1 && g->estsel_clusters[cl] >= lists ? (int)cl : 0;
}

/* The engine module of 2^i tokens a row (gpu_engine), built on first use. */
static qgen_status engine_load(qgen_ctx *c, int i, gpu_engine *e) {
  gpu_ctx *g = gctx(c);
  const qgen_cudrv *cu = g->cu;
  const int step = 1 << i;
  if (g->from_bundle)
    return qgen_fail(c, QGEN_ERR_UNSUPPORTED, "a step of %d query tokens a sequence, a window or sinks needs kernels a bundle does "
                     "not hold (it has the one-token step's): open the spec itself", step);
  qgen_tune t = c->tune;
  t.step = step;
  char why[256];
  if (qgen_plan_make(&c->L, g->limits, &t, &e->P, why, sizeof why) != 0)
    return qgen_fail(c, QGEN_ERR_UNSUPPORTED, "a step of up to %d query tokens a sequence: spec %s's kernels for it do not fit %s: %s",
                     step, c->spec.name, g->limits->name, why);
  int target = 0;
  qgen_artifact a;
  qgen_status st = jit_target(c, &target);
  if (st == QGEN_OK) st = jit_build(c, &t, g->limits, target, &a);
  if (st != QGEN_OK) return st;
  const CUresult r = cu->cuModuleLoadData(&e->mod, a.arch == g->arch ? (const void *)a.cubin : (const void *)a.ptx);
  qgen_artifact_free(&a);
  CU(r);
  CU(cu->cuModuleGetFunction(&e->f_attend, e->mod, QGEN_KERNEL_NAME(attend)));
  if (c->L.sparse) CU(cu->cuModuleGetFunction(&e->f_estimate, e->mod, QGEN_KERNEL_NAME(estimate)));
  if (c->L.sparse && c->L.rescore > 1) CU(cu->cuModuleGetFunction(&e->f_rescore, e->mod, QGEN_KERNEL_NAME(rescore)));
  if (e->P.merge_rows) CU(cu->cuModuleGetFunction(&e->f_combine, e->mod, QGEN_KERNEL_NAME(combine)));
  if ((st = fit_kernel(c, "qg_attend", e->f_attend, &e->P)) || (e->f_combine && (st = fit_kernel(c, "qg_combine", e->f_combine, &e->P))) || (e->f_estimate && (st = fit_kernel(c, "qg_estimate", e->f_estimate, &e->P))) ||
      (e->f_rescore && (st = fit_kernel(c, "qg_rescore", e->f_rescore, &e->P))) ||
      (st = occupancy(c, e->f_attend, e->P.attend_threads, e->P.attend_smem, &e->attend_per_sm)) ||
      (e->f_estimate && (st = occupancy(c, e->f_estimate, e->P.est_threads, e->P.est_smem, &e->est_per_sm))) ||
      (e->f_rescore && (st = occupancy(c, e->f_rescore, e->P.resc_threads, e->P.resc_smem, &e->resc_per_sm))))
    return st;
  if (e->attend_per_sm < 1) return qgen_fail(c, QGEN_ERR_UNSUPPORTED, "the attend kernel of %d query tokens cannot run on this device (occupancy 0)", step);
  return QGEN_OK;
}

/* The engine module for steps of up to tmax tokens a sequence (the smallest power of two). */
static qgen_status engine_get(qgen_ctx *c, int tmax, const gpu_engine **out) {
  gpu_ctx *g = gctx(c);
  int i = 0;
  while ((1 << i) < tmax) i++;
  pthread_mutex_lock(&g->eng_lock);
  qgen_status st = QGEN_OK;
  if (!g->eng[i]) {
    gpu_engine *e = calloc(1, sizeof *e);
    if (!e) st = qgen_fail(c, QGEN_ERR_OUT_OF_MEMORY, "out of host memory");
    else if ((st = engine_load(c, i, e)) != QGEN_OK) {
      if (e->mod) g->cu->cuModuleUnload(e->mod);
      free(e);
    } else g->eng[i] = e;
  }
  *out = g->eng[i];
  pthread_mutex_unlock(&g->eng_lock);
  return st;
}

/* The kernels of one step: the one-token module's, or an engine module's (step > 0). */
typedef struct step_kernels {
  CUfunction estimate, rescore, attend, combine; /* combine: NULL where attend merges the splits itself */
  const qgen_plan *P;
  int attend_per_sm, est_per_sm, resc_per_sm, step;
} step_kernels;

static qgen_status attend_in(qgen_kv *kv, const int *seq, int n_seq, const int *n_q, const qgen_ref_step_opts *x, qgen_ptr q,
                             qgen_ptr out, const qgen_budget *b, qgen_stream stream) {
  qgen_ctx *c = kv->ctx;
  gpu_ctx *g = gctx(c);
  const qgen_layout *L = &c->L;
  const gpu_kv *m = gkv(kv);
  CUstream s = (CUstream)stream;
  qg_cache ca = cache_args(kv);
  qgen_budget ba = *b; /* the kernels' argument */
  int dense = b->mode == QGEN_BUDGET_DENSE;
  const int reuse = b->mode == QGEN_BUDGET_REUSE;
  if (reuse && !g->f_extend)
    return qgen_fail(c, QGEN_ERR_UNSUPPORTED, "qgen_attend: the module of spec %s has no qg_extend kernel (a bundle "
                     "built before QGEN_ATTEND_REUSE): rebuild it", c->spec.name);
  int tmax = 1;
  for (int i = 0; n_q && i < n_seq; i++) tmax = n_q[i] > tmax ? n_q[i] : tmax;
  const int64_t window = x ? x->window : 0;
  const float *sinks = x ? x->sinks : NULL;
  step_kernels K = {g->f_estimate, g->f_rescore, g->f_attend, g->f_combine, &c->P, g->attend_per_sm, g->est_per_sm, g->resc_per_sm, 0};
  if (tmax > 1 || window > 0 || sinks) {
    if (tmax > 1 && L->v_tau > 0)
      return qgen_fail(c, QGEN_ERR_UNSUPPORTED, "qgen_attend_multi: spec %s has sparse-V (sparse.v_tau = %g); the GPU attends "
                       "one query token a sequence with it", c->spec.name, L->v_tau);
    const gpu_engine *e = NULL;
    qgen_status st = engine_get(c, tmax, &e);
    if (st != QGEN_OK) return st;
    K = (step_kernels){e->f_estimate, e->f_rescore, e->f_attend, e->f_combine, &e->P, e->attend_per_sm, e->est_per_sm, e->resc_per_sm, 1};
    while (K.step < tmax) K.step *= 2;
  }
  const qgen_plan *P = K.P;
  /* an engine launch's rows hold step x n_head heads of partials a split: fewer sequences a
     launch, fewer splits, within what the cache allocated */
  const int rows_per = K.step > 1 ? K.step : 1;
  const int per_launch = m->part_rows / rows_per < QGEN_MAX_BATCH ? m->part_rows / rows_per : QGEN_MAX_BATCH;
  int64_t row0 = 0; /* query rows of the earlier launches */
  for (int i0 = 0; i0 < n_seq; i0 += per_launch) {
    qg_batch bt;
    memset(&bt, 0, sizeof bt);
    bt.n = n_seq - i0 < per_launch ? n_seq - i0 : per_launch;
    memcpy(bt.seq, seq + i0, (size_t)bt.n * sizeof(int));
    for (int i = 0; i < bt.n; i++) bt.tok[i + 1] = bt.tok[i] + (n_q ? n_q[i0 + i] : 1);
    bt.window = window > INT32_MAX ? INT32_MAX : (int)window;
    bt.sinks = (qgen_dptr)(uintptr_t)sinks;
    int ms = splits_at(g, K.attend_per_sm, P->persist, L, bt.n);
    if (ms * bt.n * rows_per > m->part_rows) ms = m->part_rows / (bt.n * rows_per);
    qg_work wk = {m->scores, m->list, m->count, m->part_o, m->part_ml, m->ticket, m->hist, ms, m->exact, m->hist2, L->rescore};
    qgen_dptr qp = q + (qgen_dptr)row0 * L->q_bytes, op = out + (qgen_dptr)row0 * L->out_bytes;
    row0 += bt.tok[bt.n];
    qgen_status st;
    int ecl = 0; /* qg_estsel's cluster, where it ran in place of estimate and select */
    if (reuse) { /* the last selection, extended; no estimate or select */
      void *xa[] = {&ca, &wk, &bt};
      if ((st = launch(c, g->f_extend, (unsigned)L->n_head_kv, (unsigned)bt.n, 1, 32, 0, s, xa))) return st;
    } else if (!dense) {
      /* the one-token module's estimate and select as one launch where its clusters fit (ecl
         CTAs a list); else the CTAs the capacity needs, at most one wave (each then loops
         over its share) */
      ecl = K.step ? 0 : estsel_cluster(c, &ca, kv->pps, bt.n * L->n_head_kv);
      void *ea[] = {&ca, &wk, &bt, &ba, &qp};
      int64_t ex = (kv->pps + P->est_pages - 1) / P->est_pages;
      const int64_t wave = (int64_t)g->sm_count * (K.est_per_sm > 0 ? K.est_per_sm : 1) / (bt.n * L->n_head_kv);
      if (ex > wave) ex = wave > 0 ? wave : 1;
      if ((st = launch_cfg(c, ecl ? g->f_estsel : K.estimate, (unsigned)(ecl ? ecl : ex), (unsigned)L->n_head_kv, (unsigned)bt.n, P->est_threads, P->est_smem, s, ea,
                           ecl, 0)))
        return st;
    }
    if (g->marks) CU(g->cu->cuEventRecordWithFlags(g->marks[0], s, CU_EVENT_RECORD_EXTERNAL));
    if (!dense && !reuse) {
      void *sa[] = {&ca, &wk, &bt, &ba};
      const int cl = select_cluster(c, kv->pps, bt.n * L->n_head_kv);
      const int smem = 4 * (int)(kv->pps < c->P.sel_smem_keys ? kv->pps : c->P.sel_smem_keys);
      if (!ecl && (st = launch_ex(c, g->f_select, (unsigned)(L->n_head_kv * cl), (unsigned)bt.n, 1, c->P.sel_threads, smem, s, sa, cl)))
        return st;
      if (K.rescore) { /* two-stage: the candidates' exact scores, then select over them */
        void *ra[] = {&ca, &wk, &bt, &ba, &qp};
        int64_t rx = (kv->pps + 2 * P->resc_threads / 32 - 1) / (2 * P->resc_threads / 32); /* >= 2 pages a warp */
        const int64_t wave = (int64_t)g->sm_count * (K.resc_per_sm > 0 ? K.resc_per_sm : 1) / (bt.n * L->n_head_kv);
        if (rx > wave) rx = wave > 0 ? wave : 1;
        if ((st = launch_ex(c, K.rescore, (unsigned)rx, (unsigned)L->n_head_kv, (unsigned)bt.n, P->resc_threads, P->resc_smem, s, ra, 1)))
          return st;
        qg_work w2 = wk; /* over the exact scores and rescore's histogram; marks nothing */
        w2.scores = m->exact, w2.hist = m->hist2, w2.exact = 0, w2.cand = 1;
        void *s2[] = {&ca, &w2, &bt, &ba};
        if ((st = launch_ex(c, g->f_select, (unsigned)(L->n_head_kv * cl), (unsigned)bt.n, 1, c->P.sel_threads, smem, s, s2, cl)))
          return st;
        /* top-p: the fewest of those holding the mass share (one CTA a list; the first
           work's exact scores, and its Quest scores as scratch) */
        if (g->f_topp && (st = launch_ex(c, g->f_topp, (unsigned)L->n_head_kv, (unsigned)bt.n, 1, c->P.sel_threads, 0, s, sa, 1)))
          return st;
      }
    }
    if (g->marks) CU(g->cu->cuEventRecordWithFlags(g->marks[1], s, CU_EVENT_RECORD_EXTERNAL));
    int bulk = P->bulk && (g->features & QGEN_ARCH_BULK); /* read by sm_90 code only */
    void *aa[] = {&ca, &wk, &bt, &qp, &op, &dense, &bulk};
    /* the persistent attend: a CTA a resident slot (no more than the shares), one dimension */
    const int64_t slots = (int64_t)g->sm_count * (K.attend_per_sm > 0 ? K.attend_per_sm : 1), shares = (int64_t)ms * L->n_head_kv * bt.n;
    const unsigned gx = P->persist ? (unsigned)(slots < shares ? slots : shares) : (unsigned)ms;
    const unsigned gy = P->persist ? 1u : (unsigned)L->n_head_kv, gz = P->persist ? 1u : (unsigned)bt.n;
    if ((st = dense ? launch(c, K.attend, gx, gy, gz, P->attend_threads, P->attend_smem, s, aa)
                    : launch_ex(c, K.attend, gx, gy, gz, P->attend_threads, P->attend_smem, s, aa, 1)))
      return st;
    if (K.combine) { /* the split partials' merge (combine.cu), merge_rows rows of a (row, KV head) a CTA */
      void *ma[] = {&ca, &wk, &bt, &op, &dense};
      const int rows = L->group * rows_per;
      if ((st = launch_ex(c, K.combine, (unsigned)((rows + P->merge_rows - 1) / P->merge_rows), (unsigned)L->n_head_kv, (unsigned)bt.n,
                          P->merge_threads, 0, s, ma, 1)))
        return st;
    }
  }
  return QGEN_OK;
}

/* n_q NULL: one token each; more tokens, a window or sinks run an engine module. */
static qgen_status attend(qgen_kv *kv, const int *seq, int n_seq, const int *n_q, const qgen_ref_step_opts *x, qgen_ptr q,
                          qgen_ptr out, const qgen_budget *b, qgen_stream stream) {
  IN_CTX(kv->ctx, attend_in(kv, seq, n_seq, n_q, x, q, out, b, stream));
}

/* A view's bounds: pass 0 empties the pages whose first slot is written, pass 1 merges
   every written row, pass 2 (8-bit bounds) makes the written pages' 8-bit rows
   (templates/view.cu); warps of QG_VIEW_SLOTS slots a CTA. */
static qgen_status view_update_in(qgen_kv *kv, qgen_ptr slots, int64_t n, int slot_bytes, qgen_stream stream) {
  qgen_ctx *c = kv->ctx;
  qg_cache ca = cache_args(kv);
  const void *sp = (const void *)(uintptr_t)slots;
  int64_t np = kv->n_pages;
  int sb = slot_bytes;
  for (int pass = 0; pass < (qgen_kv_has_i8(kv) ? 3 : 2); pass++) {
    void *args[] = {&ca, &sp, &n, &np, &sb, &pass};
    const qgen_status st = launch(c, gctx(c)->f_view, (unsigned)((n + QGEN_VIEW_SLOTS - 1) / QGEN_VIEW_SLOTS),
                                  (unsigned)c->L.n_head_kv, 1, 32 * QGEN_VIEW_SLOTS, 0, (CUstream)stream, args);
    if (st != QGEN_OK) return st;
  }
  return QGEN_OK;
}

static qgen_status view_update(qgen_kv *kv, qgen_ptr slots, int64_t n, int slot_bytes, qgen_stream stream) {
  IN_CTX(kv->ctx, view_update_in(kv, slots, n, slot_bytes, stream));
}

/* ---- management ---------------------------------------------------------------------- */

static qgen_status reset_in(qgen_kv *kv, int seq) {
  qgen_ctx *c = kv->ctx;
  const qgen_cudrv *cu = gctx(c)->cu;
  CU(cu->cuCtxSynchronize());
  CU(cu->cuMemsetD8(gkv(kv)->seq_len + (CUdeviceptr)seq * 4, 0, 4));
  if (c->L.sparse) { /* its last selection goes with its tokens */
    const size_t nkv = (size_t)c->L.n_head_kv;
    CU(cu->cuMemsetD8(gkv(kv)->list + (CUdeviceptr)seq * nkv * kv->pps * 4, 0, nkv * kv->pps * 4));
    CU(cu->cuMemsetD8(gkv(kv)->count + (CUdeviceptr)seq * nkv * 4, 0, nkv * 4));
  }
  return QGEN_OK;
}

static qgen_status reset(qgen_kv *kv, int seq) { IN_CTX(kv->ctx, reset_in(kv, seq)); }

/* Physical page dst becomes page src cut back to its first keep tokens: src comes to the
   host, is cut there by the reference (qgen_ref_page_keep, so both backends share one rule)
   and goes to dst with its 8-bit rows made from its new bounds (src == dst: in place). */
static qgen_status page_cut(qgen_kv *kv, const char *fn, CUdeviceptr src, CUdeviceptr dst, int keep) {
  qgen_ctx *c = kv->ctx;
  const qgen_layout *L = &c->L;
  const qgen_cudrv *cu = gctx(c)->cu;
  const gpu_kv *m = gkv(kv);
  const size_t kb = L->k_page_bytes, vb = L->v_page_bytes, sb = L->sketch_page_bytes, bb = L->bounds_page_bytes;
  const size_t ib = qgen_kv_has_i8(kv) ? L->bounds_i8_page_bytes : 0;
  const size_t xb = (size_t)L->head_dim * sizeof(float), all = xb + kb + vb + sb + bb + ib;
  float *x = malloc(all); /* the floats, then the f16 bounds: each aligned; then bytes */
  if (!x) return qgen_fail(c, QGEN_ERR_OUT_OF_MEMORY, "%s: out of host memory for one page (%zu bytes)", fn, all);
  uint8_t *hb = (uint8_t *)x + xb, *hk = hb + bb, *hv = hk + kb, *hs = hv + vb, *hi = hs + sb;
  CUresult r = cu->cuMemcpyDtoH(hk, m->k + src * kb, kb);
  if (r == CUDA_SUCCESS) r = cu->cuMemcpyDtoH(hv, m->v + src * vb, vb);
  if (r == CUDA_SUCCESS && sb) r = cu->cuMemcpyDtoH(hs, m->sketch + src * sb, sb);
  if (r == CUDA_SUCCESS) {
    qgen_ref_page_keep(L, kv->host.k_scale, keep, hk, hv, sb ? hs : NULL, bb ? (uint16_t *)hb : NULL, x);
    for (int h = 0; ib && h < L->n_head_kv; h++)
      qgen_ref_bounds_i8_row((const uint16_t *)hb + (size_t)h * 2 * (size_t)L->head_dim, L->head_dim,
                             hi + (size_t)h * L->bounds_i8_row_bytes);
    r = cu->cuMemcpyHtoD(m->k + dst * kb, hk, kb);
  }
  if (r == CUDA_SUCCESS) r = cu->cuMemcpyHtoD(m->v + dst * vb, hv, vb);
  if (r == CUDA_SUCCESS && sb) r = cu->cuMemcpyHtoD(m->sketch + dst * sb, hs, sb);
  if (r == CUDA_SUCCESS && bb) r = cu->cuMemcpyHtoD(m->bounds + dst * bb, hb, bb);
  if (r == CUDA_SUCCESS && ib) r = cu->cuMemcpyHtoD(m->bounds_i8 + dst * ib, hi, ib);
  free(x);
  if (r != CUDA_SUCCESS)
    return qgen_fail(c, QGEN_ERR_CUDA, "%s: a copy of page %llu: %s", fn, (unsigned long long)src, qgen_cu_errstr(r));
  return QGEN_OK;
}

static qgen_status set_len_in(qgen_kv *kv, int seq, int64_t len) {
  qgen_ctx *c = kv->ctx;
  const int32_t l32 = (int32_t)len;
  CU(gctx(c)->cu->cuMemcpyHtoD(gkv(kv)->seq_len + (CUdeviceptr)seq * 4, &l32, 4));
  return QGEN_OK;
}

static qgen_status set_len(qgen_kv *kv, int seq, int64_t len) { IN_CTX(kv->ctx, set_len_in(kv, seq, len)); }

/* Pages all of whose tokens go are zeroed on the device; the one that keeps some (if any)
   is cut in place (page_cut). */
static qgen_status rollback_in(qgen_kv *kv, int seq, int64_t n) {
  qgen_ctx *c = kv->ctx;
  const qgen_layout *L = &c->L;
  const qgen_cudrv *cu = gctx(c)->cu;
  const gpu_kv *m = gkv(kv);
  const int64_t len = kv->len[seq], keep = len - n, B = L->block;
  const int32_t *row = kv->host.page_table + (int64_t)seq * kv->pps;
  const size_t i8_bytes = qgen_kv_has_i8(kv) ? L->bounds_i8_page_bytes : 0;
  CU(cu->cuCtxSynchronize());
  for (int64_t lp = (keep + B - 1) / B; lp <= (len - 1) / B; lp++) {
    const CUdeviceptr p = (CUdeviceptr)row[lp];
    CU(cu->cuMemsetD8(m->k + p * L->k_page_bytes, 0, L->k_page_bytes));
    CU(cu->cuMemsetD8(m->v + p * L->v_page_bytes, 0, L->v_page_bytes));
    if (L->sketch_page_bytes) CU(cu->cuMemsetD8(m->sketch + p * L->sketch_page_bytes, 0, L->sketch_page_bytes));
    if (L->sparse) CU(cu->cuMemsetD8(m->bounds + p * L->bounds_page_bytes, 0, L->bounds_page_bytes));
    if (i8_bytes) CU(cu->cuMemsetD8(m->bounds_i8 + p * i8_bytes, 0, i8_bytes));
  }
  qgen_status st = QGEN_OK;
  if (keep % B) st = page_cut(kv, "qgen_rollback", (CUdeviceptr)row[keep / B], (CUdeviceptr)row[keep / B], (int)(keep % B));
  return st == QGEN_OK ? set_len_in(kv, seq, keep) : st;
}

static qgen_status copy_page_in(qgen_kv *kv, int64_t src, int64_t dst, int keep) {
  qgen_ctx *c = kv->ctx;
  CU(gctx(c)->cu->cuCtxSynchronize());
  return page_cut(kv, "qgen_share_prefix", (CUdeviceptr)src, (CUdeviceptr)dst, keep);
}

static qgen_status copy_page(qgen_kv *kv, int64_t src, int64_t dst, int keep) { IN_CTX(kv->ctx, copy_page_in(kv, src, dst, keep)); }

static qgen_status rollback(qgen_kv *kv, int seq, int64_t n) { IN_CTX(kv->ctx, rollback_in(kv, seq, n)); }

static qgen_status sync_in(qgen_kv *kv, int32_t *len, int32_t *dropped) {
  qgen_ctx *c = kv->ctx;
  const qgen_cudrv *cu = gctx(c)->cu;
  const CUdeviceptr dr = gkv(kv)->decode + (CUdeviceptr)kv->max_seqs * 4;
  const size_t n = (size_t)kv->max_seqs * 4;
  CU(cu->cuCtxSynchronize());
  CU(cu->cuMemcpyDtoH(len, gkv(kv)->seq_len, n));
  CU(cu->cuMemcpyDtoH(dropped, dr, n));
  CU(cu->cuMemsetD8(dr, 0, n));
  CU(cu->cuCtxSynchronize()); /* the memset is done before a kernel on any stream may count again */
  return QGEN_OK;
}

static qgen_status sync_lengths(qgen_kv *kv, int32_t *len, int32_t *dropped) { IN_CTX(kv->ctx, sync_in(kv, len, dropped)); }

static qgen_status read_in(qgen_kv *kv, int which, void *host, size_t bytes) {
  qgen_ctx *c = kv->ctx;
  const qgen_cudrv *cu = gctx(c)->cu;
  const gpu_kv *m = gkv(kv);
  CUdeviceptr src = which == QGEN_KV_K ? m->k : which == QGEN_KV_V ? m->v : which == QGEN_KV_BOUNDS ? m->bounds
                  : which == QGEN_KV_PAGE_TABLE ? m->page_table : which == QGEN_KV_SKETCH ? m->sketch
                  : which == QGEN_KV_SEQ_LEN ? m->seq_len : m->bounds_i8;
  CU(cu->cuCtxSynchronize());
  CU(cu->cuMemcpyDtoH(host, src, bytes));
  return QGEN_OK;
}

static qgen_status read_array(qgen_kv *kv, int which, void *host, size_t bytes) { IN_CTX(kv->ctx, read_in(kv, which, host, bytes)); }

static qgen_status write_in(qgen_kv *kv, int seq, const int32_t *pages, int64_t n) {
  qgen_ctx *c = kv->ctx;
  const qgen_cudrv *cu = gctx(c)->cu;
  CU(cu->cuCtxSynchronize());
  CU(cu->cuMemcpyHtoD(gkv(kv)->page_table + (CUdeviceptr)seq * kv->pps * 4, pages, (size_t)n * 4));
  return QGEN_OK;
}

static qgen_status write_pages(qgen_kv *kv, int seq, const int32_t *pages, int64_t n) { IN_CTX(kv->ctx, write_in(kv, seq, pages, n)); }

static qgen_status selection_in(qgen_kv *kv, int seq, int32_t *lists, int32_t *counts) {
  qgen_ctx *c = kv->ctx;
  const qgen_cudrv *cu = gctx(c)->cu;
  const int nkv = c->L.n_head_kv;
  CU(cu->cuCtxSynchronize());
  CU(cu->cuMemcpyDtoH(lists, gkv(kv)->list + (CUdeviceptr)seq * nkv * kv->pps * 4, (size_t)nkv * kv->pps * 4));
  CU(cu->cuMemcpyDtoH(counts, gkv(kv)->count + (CUdeviceptr)seq * nkv * 4, (size_t)nkv * 4));
  return QGEN_OK;
}

static qgen_status selection(qgen_kv *kv, int seq, int32_t *lists, int32_t *counts) { IN_CTX(kv->ctx, selection_in(kv, seq, lists, counts)); }

static void set_marks(qgen_ctx *c, CUevent *marks) { gctx(c)->marks = marks; }
static int splits(const qgen_ctx *c, int nb) { return max_splits(c, nb); }

const qgen_backend_ops qgen_gpu_backend = {
    .name = "gpu",
    .runs_kernels = 1,
    .max_step_tokens = QGEN_MAX_STEP_TOKENS,
    .windows = 1,
    .sinks = 1,
    .open = open_gpu,
    .close = close_gpu,
    .cache_create = cache_create,
    .cache_destroy = cache_destroy,
    .append = append,
    .append_decode = append_decode,
    .attend = attend,
    .reset = reset,
    .rollback = rollback,
    .copy_page = copy_page,
    .set_len = set_len,
    .view_update = view_update,
    .sync = sync_lengths,
    .read = read_array,
    .write_pages = write_pages,
    .selection = selection,
    .set_marks = set_marks,
    .max_splits = splits,
};
