/* main.c — the qgen command line.
 *
 *   qgen emit   --spec F [-o DIR] [--arch sm_80,...] [--variant NAME] [--print]
 *   qgen bundle --spec F -o OUT [--variant NAME] [--arch sm_80,...]
 *   qgen info   [--lua] F.qgb
 *   qgen check  --spec F [--variant NAME] [--quick] [--big] [--seed N]   (GPU; 77 without one)
 *   qgen bench  --spec F [--ctx LIST] [--batch LIST] [--coverage LIST] ...  (GPU; 77 without one)
 *   qgen eval   --spec F [--backend cpu|gpu] [--task LIST] [--ctx LIST] ...
 *   qgen cache  path | list | clear
 *   qgen spec-fields               (the spec field table of docs/spec.md, markdown)
 *   qgen version
 *   qgen help [CMD]                (= qgen --help, qgen CMD --help)
 *
 * Options are parsed by tools/opts.c from one table per command; the command lines of check,
 * bench and eval live in their own files (tools/commands.h), over the harness library
 * (harness/). Exit codes: harness/common.h (QGEN_EXIT_*): 0 ok, 1
 * user error (bad spec, bad arguments), 2 internal or toolchain error, 3 an output could
 * not be written, 77 no GPU (check, bench, eval). Errors go to stderr as "qgen: message".
 */
#define _GNU_SOURCE /* fopencookie */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools/commands.h"
#include "tools/opts.h"
#include "jit/build.h"
#include "jit/bundle.h"
#include "jit/cache.h"
#include "jit/emit.h"
#include "jit/nvrtc.h"
#include "base/sha256.h"
#include "spec/fields.h"
#include "spec/spec.h"
#include "base/util.h"
#include "base/plan.h"

static const char USAGE[] =
    "qgen " QGEN_VERSION " — generate, compile and run Quest sparse-attention decode kernels\n"
    "\n"
    "usage: qgen <command> [options]\n"
    "\n"
    "commands:\n"
    "  emit     expand the CUDA templates for a spec and compile them with NVRTC (cached)\n"
    "  bundle   write one file with a spec variant's kernels for several archs (no NVRTC\n"
    "           needed to open it)\n"
    "  info     show what a bundle holds and verify its checksums\n"
    "  check    run the GPU-vs-CPU-reference checks of a spec (needs a GPU; 77 without)\n"
    "  bench    time the decode step on the GPU (contexts x batches x coverages)\n"
    "  eval     needle recall and attention mass of the selection on synthetic workloads\n"
    "  cache    show (path), list or clear the kernel cache\n"
    "  spec-fields  print the fields a spec may set (markdown: docs/spec.md's table)\n"
    "  version  print versions (qgen, NVRTC and the library file it was loaded from)\n"
    "  help     this text; 'qgen help CMD' is 'qgen CMD --help'\n"
    "\n"
    "Run 'qgen <command> --help' for the options of a command.\n"
    "\n"
    "environment:\n"
    "  QGEN_CACHE_DIR     cache directory (default $XDG_CACHE_HOME/qgen, else ~/.cache/qgen);\n"
    "                     a relative one is taken from the current directory; it is made by\n"
    "                     the first write\n"
    "  QGEN_CACHE         off or 0: keep compiled kernels in memory only; on or 1 (default)\n"
    "  QGEN_TUNE          override the kernels' plan: groups=,stages=,smem=,split=,sel=,\n"
    "                     selreg=,pdl=,bulk=,olddq=,swap=,chunk=,pair=,ctas=,merge=,mtw=,\n"
    "                     estsel=,persist= (each key once; emit, check, bench, eval)\n"
    "  QGEN_TEMPLATE_DIR  read CUDA templates from this directory instead of the embedded copy\n"
    "  QGEN_DUMP_SOURCE   a directory: on a compile error, the failing unit is written there\n"
    "  QGEN_QUIET         set: no warnings on stderr\n"
    "  CUDA_HOME          CUDA toolkit for NVRTC and its headers, else CUDA_PATH\n"
    "  CUDA_PATH          the same, when CUDA_HOME is unset\n"
    "  QGEN_NVRTC         the libnvrtc.so to use (an error when it cannot be loaded), or\n"
    "                     'none' to act as if NVRTC were not installed\n"
    "\n"
    "exit codes: 0 ok, 1 bad spec or arguments, 2 internal or toolchain error, 3 an output\n"
    "could not be written (standard output or a file: a full disk, a closed pipe), 77 no GPU\n";

static const char EMIT_SYNOPSIS[] =
    "usage: qgen emit --spec FILE [-o DIR] [--arch LIST] [--variant NAME] [--print | --plan]\n"
    "\n"
    "Loads the Lua spec FILE, emits one CUDA translation unit per variant and architecture\n"
    "(each planned for that architecture's shared memory: the 99 KiB of sm_86/89/120 take\n"
    "fewer ring stages than the 227 KiB of sm_90), compiles it with NVRTC to a cubin (and\n"
    "keeps the PTX for forward compatibility), and stores the result in the kernel cache.\n"
    "Prints, per arch, the module's cubin size, compile time and cache hit/miss, then one\n"
    "line per kernel: registers, spill stores/loads, stack, static shared memory and the\n"
    "dynamic shared memory it launches with (select's grows with the pages of a sequence:\n"
    "its largest). A variant that cannot fit an architecture is refused before anything is\n"
    "compiled, naming the kernel, its bytes and the limit. With --print the unit alone goes\n"
    "to stdout and this report to stderr. With --plan nothing is compiled: each variant's\n"
    "launch plan per arch, or why it does not fit (exit 0 either way). Refuses a bundle\n"
    "(see qgen info).\n"
    "\n";

static const char BUNDLE_SYNOPSIS[] =
    "usage: qgen bundle --spec FILE -o OUT [--variant NAME] [--arch LIST]\n"
    "\n"
    "Compiles a variant of the spec FILE for every architecture (through the kernel cache)\n"
    "and writes one bundle file: the variant's canonical spec text and, per arch, the cubin,\n"
    "the PTX and ptxas' per-kernel report, all checksummed. qgen_open() takes the bundle in\n"
    "place of the spec and never calls NVRTC: it loads the cubin of the device's arch, else\n"
    "the PTX of the newest older arch. 'qgen info OUT' shows what it holds.\n"
    "\n";

static const char INFO_SYNOPSIS[] =
    "usage: qgen info [--lua] FILE\n"
    "\n"
    "Reads the bundle FILE, verifies every checksum and field, and prints what it holds: the\n"
    "spec (shape, types, sparse parameters), the qgen and NVRTC versions that built it, and\n"
    "per arch the kinds, sizes and kernels (registers, spills, stack, static shared memory).\n"
    "With --lua the spec text alone goes to stdout (a spec file: qgen emit --spec takes it)\n"
    "and the report to stderr. A malformed bundle is an error (exit 1) with the first fault.\n"
    "\n";

static const char CACHE_SYNOPSIS[] =
    "usage: qgen cache path | list | clear\n"
    "\n"
    "  path   print the cache directory (or 'memory only')\n"
    "  list   list the entries: size, whether it verifies, the spec that wrote it\n"
    "         (specs that differ only by name share an entry; '-': an entry of an\n"
    "         older qgen), and the entry's file, named by the kernels' compile-time\n"
    "         parameters; then the total\n"
    "  clear  remove the entries (files named and marked as entries) and the stale\n"
    "         temporary files of their writes; any other file there is named and left\n"
    "\n"
    "A directory that its group or others may write (or that belongs to another user) is\n"
    "not used: another user could plant compiled kernels there (chmod go-w it).\n";

static int die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int die(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("qgen: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return code;
}

/* $QGEN_TUNE, parsed once in main before a command that plans runs. */
static qgen_tune tune;

static int is_help(const char *a) { return strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0; }

/* The options emit and bundle share (same spelling, same help), in their usage's order. */
#define SPEC_OPT(p) {.name = "--spec", .arg = "FILE", .kind = QGEN_OPT_STR, .dst = p, \
                     .help = "the spec (a Lua file returning spec{...} or a list of them)"}
#define ARCH_OPT(p) {.name = "--arch", .arg = "LIST", .kind = QGEN_OPT_STR, .dst = p, \
                     .help = "comma-separated sm_XX list, overrides the spec's archs"}
#define HELP_OPT {.name = "--help", .alias = "-h", .kind = QGEN_OPT_HELP, .help = "this text"}

/* --arch "sm_80,sm_90" -> {80, 90}: every item sm_<number>, none empty, none twice.
   Returns the count, or the exit code (< 0 negated) after saying why. */
static int parse_archs(const char *cmd, const char *s, int *archs, int max) {
  int n = 0;
  for (const char *p = s;; p++) {
    char *end;
    const long v = strncmp(p, "sm_", 3) == 0 && p[3] >= '0' && p[3] <= '9' ? strtol(p + 3, &end, 10) : -1;
    if (v < 0 || v > 1000 || (*end && *end != ','))
      return -die(QGEN_EXIT_USER, "%s: --arch '%s': expected a comma-separated list like sm_80,sm_90 (no empty items)",
                  cmd, s);
    for (int k = 0; k < n; k++)
      if (archs[k] == v) return -die(QGEN_EXIT_USER, "%s: --arch '%s' lists sm_%ld twice", cmd, s, v);
    if (n == max) return -die(QGEN_EXIT_USER, "%s: --arch '%s': more than %d archs", cmd, s, max);
    archs[n++] = (int)v;
    if (!*end) return n;
    p = end;
  }
}

static int write_file(const char *dir, const char *name, const void *data, size_t n) {
  char path[4096], err[4400];
  qgen_fmt(path, sizeof path, "%s/%s", dir, name);
  if (qgen_write_atomic(path, data, n, err, sizeof err) != 0) return die(QGEN_EXIT_WRITE, "%s", err);
  return 0;
}

/* The dynamic shared memory kernel `name` of variant s launches with on sm_<arch>
   (runtime/gpu.c): attend's ring, select's key buffer at its largest, estimate's staged
   query, none for append. */
static int dynamic_smem(const qgen_spec *s, int arch, const char *name) {
  qgen_layout L;
  qgen_plan P;
  qgen_spec_layout(s, &L);
  qgen_plan_make(&L, qgen_arch_of(arch), &tune, &P, NULL, 0);
  return qgen_plan_dynamic_smem(&P, name);
}

static void print_layout(FILE *f, const qgen_spec *s, const char *path) {
  qgen_layout L;
  qgen_spec_layout(s, &L);
  const size_t kt = L.k_row_bytes * (size_t)s->n_head_kv, vt = L.v_row_bytes * (size_t)s->n_head_kv;
  fprintf(f, "%s (%s): head_dim %d, heads %d/%d (group %d), k %s, v %s, in %s, out %s, block %d, ", s->name, path,
         s->head_dim, s->n_head, s->n_head_kv, L.group, qgen_type_traits_of(s->k_type)->name,
         qgen_type_traits_of(s->v_type)->name, qgen_type_traits_of(s->in_type)->name,
         qgen_type_traits_of(s->out_type)->name, s->block);
  if (!s->sparse) fprintf(f, "dense\n");
  else if (s->budget) fprintf(f, "sparse budget %lld tokens, sink %d, recent %d\n", (long long)s->budget, s->sink, s->recent);
  else fprintf(f, "sparse coverage %g, sink %d, recent %d\n", s->coverage, s->sink, s->recent);
  if (s->sparse && s->v_tau > 0) fprintf(f, "  sparse-V: tau %g\n", s->v_tau);
  if (L.rescore > 1) {
    fprintf(f, "  two-stage selection: %d x the budget's pages rescored from %s", L.rescore,
            L.sketch_page_bytes ? "a q4_0 sketch of K" : "the cache's own K");
    if (L.top_p < 1) fprintf(f, ", then a top-p cut at p = %g", L.top_p);
    fputc('\n', f);
  }
  const double extra = (double)(L.bounds_page_bytes + L.bounds_i8_page_bytes + L.sketch_page_bytes) / s->block;
  fprintf(f, "  cache per token per layer: %zu bytes (K %zu + V %zu)", kt + vt, kt, vt);
  if (s->sparse) fprintf(f, " + bounds %.1f", (double)L.bounds_page_bytes / s->block);
  if (L.bounds_i8) fprintf(f, " + 8-bit bounds %.1f", (double)L.bounds_i8_page_bytes / s->block);
  if (L.sketch_page_bytes) fprintf(f, " + sketch %.1f", (double)L.sketch_page_bytes / s->block);
  fprintf(f, "; 1M tokens: %.2f GiB\n", ((double)(kt + vt) + extra) * (1 << 20) / (1u << 30));
}

/* Every arch in use[0..n) must be one qgen builds for (base/arch.h), known to NVRTC
   (known[0..n_known)), and (s not NULL) hold variant s's kernels (the spec validator checks
   the spec's own archs; --arch may name others). */
static int check_archs(const char *spec, const qgen_spec *s, const int *use, int n, const int *known, int n_known) {
  for (int i = 0; i < n; i++) {
    int ok = qgen_arch_of(use[i]) != NULL;
    for (int k = 0; ok && k < n_known; k++) ok = known[k] == use[i] ? 2 : ok;
    if (ok != 2)
      return die(QGEN_EXIT_USER, "%s: arch sm_%d is not supported (%s)", spec, use[i],
                 use[i] < 80 ? "qgen kernels need sm_80 or newer"
                 : !qgen_arch_of(use[i]) ? "not an architecture qgen builds for"
                                         : "this NVRTC cannot target it");
    qgen_layout L;
    qgen_plan P;
    char why[256];
    if (!s) continue;
    qgen_spec_layout(s, &L);
    if (qgen_plan_make(&L, qgen_arch_of(use[i]), &tune, &P, why, sizeof why) != 0)
      return die(QGEN_EXIT_USER, "%s: variant '%s' does not fit sm_%d: %s", spec, s->name, use[i], why);
  }
  return 0;
}

/* The archs to build variant s for (the --arch list, else the spec's own) into *use, and
   their count; 0 when --variant names another variant. */
static int variant_archs(const qgen_spec *s, const char *variant, const int *archs, int n_archs, const int **use) {
  if (variant && strcmp(s->name, variant) != 0) return 0;
  *use = n_archs ? archs : s->archs;
  return n_archs ? n_archs : s->n_archs;
}

/* Load spec (not a bundle), check --variant, and refuse (before compiling anything) an arch NVRTC cannot
   target in any selected variant (the --arch list, else each variant's own archs).
   Returns 0, or the exit code after printing why. */
/* What emit and bundle build: the spec's variants, the archs asked for (none: each
   variant's own), room for messages. */
typedef struct {
  qgen_spec_set set;
  int archs[QGEN_MAX_ARCHS], n_archs;
  char err[65536];
} build_job;

/* Load spec for `cmd` (emit, bundle) into j, with --arch (NULL: the spec's) and --variant
   checked (and, unless plan_only, that each selected variant fits each arch); 0, or the
   exit code after a message. */
static int load_for_build(const char *cmd, const char *spec, const char *variant, const char *arch_list, int plan_only,
                          build_job *j) {
  j->n_archs = 0;
  if (arch_list && (j->n_archs = parse_archs(cmd, arch_list, j->archs, QGEN_MAX_ARCHS)) < 0) return -j->n_archs;
  qgen_spec_set *set = &j->set;
  const int *archs = j->archs, n_archs = j->n_archs;
  char *err = j->err;
  const size_t errlen = sizeof j->err;
  if (qgen_bundle_is(spec))
    return die(QGEN_EXIT_USER, "%s is a bundle, not a spec: qgen info shows it, qgen check runs it (qgen info --lua "
               "prints its spec)", spec);
  if (qgen_spec_load(spec, set, err, errlen) != 0) return die(QGEN_EXIT_USER, "%s", err);
  if (qgen_opts_variant_in(spec, set, variant) != 0) return QGEN_EXIT_USER;
  int known[64], n_known = qgen_nvrtc_archs(known, 64);
  if (n_known < 0) {
    qgen_nvrtc_version(&(int){0}, &(int){0}, err, errlen);
    return die(QGEN_EXIT_INTERNAL, "%s", err);
  }
  for (int v = 0; v < set->n; v++) {
    const qgen_spec *s = &set->v[v];
    int rc;
    if ((!variant || strcmp(s->name, variant) == 0) &&
        (rc = check_archs(spec, plan_only ? NULL : s, n_archs ? archs : s->archs, n_archs ? n_archs : s->n_archs, known, n_known)) != 0)
      return rc;
  }
  return 0;
}

/* emit --plan: per selected variant and arch, the plan's shape and every kernel's dynamic
   shared memory, or why the variant does not fit that arch. */
static int print_plans(const qgen_spec_set *set, const char *spec, const char *variant, const int *archs, int n_archs) {
  for (int v = 0; v < set->n; v++) {
    const qgen_spec *s = &set->v[v];
    const int *use;
    const int nu = variant_archs(s, variant, archs, n_archs, &use);
    if (!nu) continue;
    print_layout(stdout, s, spec);
    qgen_layout L;
    qgen_spec_layout(s, &L);
    for (int i = 0; i < nu; i++) {
      const qgen_arch *A = qgen_arch_of(use[i]);
      qgen_plan P;
      char why[256];
      if (qgen_plan_make(&L, A, &tune, &P, why, sizeof why) != 0) {
        printf("  %-6s does not fit: %s\n", A->name, why);
        continue;
      }
      printf("  %-6s attend %d token groups x %d stages, chunks of %d, %d threads, %d bytes; estimate %d bytes; "
             "select %d keys in %d bytes", A->name, P.warps_t, P.stages / P.warps_t, P.chunk, P.attend_threads, P.attend_smem,
             s->sparse ? P.est_smem : 0, s->sparse ? P.sel_smem_keys : 0, s->sparse ? 4 * P.sel_smem_keys : 0);
      if (L.rescore > 1) printf("; rescore %d stages, %d bytes", P.resc_stages, P.resc_smem);
      printf(" (%s allows %d a CTA)\n", A->name, A->smem_block);
    }
  }
  return 0;
}

/* emit -o: refuse, before anything is compiled, any file it would write that is the spec or
   cannot be written: per selected variant the .cu, the .ptx, each arch's cubin and (if its
   plan differs) unit. 0, or the exit code after a message. */
static int check_outputs(build_job *job, const char *spec, const char *variant, const char *out) {
  const qgen_spec_set *set = &job->set;
  int rc;
  for (int v = 0; v < set->n; v++) {
    const qgen_spec *s = &set->v[v];
    const int *use = NULL;
    const int nu = variant_archs(s, variant, job->archs, job->n_archs, &use);
    char uri[256], path[4400];
    qgen_spec_uri(s, QGEN_URI_FILE, uri, sizeof uri);
    for (int i = -2; i < 2 * nu; i++) {
      if (i == -2) qgen_fmt(path, sizeof path, "%s/%s.cu", out, uri);
      else if (i == -1) qgen_fmt(path, sizeof path, "%s/%s.ptx", out, uri);
      else if (i < nu) qgen_fmt(path, sizeof path, "%s/%s_sm%d.cubin", out, uri, use[i]);
      else qgen_fmt(path, sizeof path, "%s/%s_sm%d.cu", out, uri, use[i - nu]);
      if (nu && (rc = qgen_opts_not_input("emit", "-o", path, spec)) != 0) return rc;
      if (nu && qgen_write_check(path, job->err, sizeof job->err) != 0) return die(QGEN_EXIT_USER, "%s", job->err);
    }
  }
  return 0;
}

/* One arch's artifact a of s in the report: the module's cubin size, compile time and cache
   hit, then one line per kernel. */
static void report_artifact(FILE *rep, const qgen_spec *s, const qgen_artifact *a) {
  /* one module (cubin) holds every kernel: its size and compile time are the module's */
  fprintf(rep, "  sm_%d  module       cubin %zu B  %7.1f ms  %s\n", a->arch, a->cubin_size, a->ms,
          a->cache_hit ? "hit" : "miss");
  for (int k = 0; k < a->n_kernels; k++) {
    const qgen_kernel_info *ki = &a->k[k];
    fprintf(rep, "  sm_%d  %-11s  regs %3d  spill %d/%d  stack %d  smem %d static + %d dynamic\n", a->arch,
            ki->name, ki->regs, ki->spill_stores, ki->spill_loads, ki->stack, ki->smem_static,
            dynamic_smem(s, a->arch, ki->name));
  }
}

/* Build variant s for the nu archs use (through cache), print its unit with --print, write
   its files to out (NULL: none) and report on rep. 0, or the exit code after a message. */
static int emit_variant(const qgen_spec *s, const char *spec, const int *use, int nu, qgen_cache *cache, const char *out,
                        int print, FILE *rep, char *err, size_t errn) {
  int rc = 0;
  print_layout(rep, s, spec);
  qgen_artifact arts[QGEN_MAX_ARCHS];
  char *srcs[QGEN_MAX_ARCHS] = {0};
  double t0 = qgen_now_ms();
  if (qgen_build(s, &tune, use, nu, cache, arts, srcs, err, errn) != 0) return die(QGEN_EXIT_INTERNAL, "%s", err);
  char uri[256], name[320];
  qgen_spec_uri(s, QGEN_URI_FILE, uri, sizeof uri);
  if (print) fputs(srcs[0], stdout);
  if (out) {
    qgen_fmt(name, sizeof name, "%s.cu", uri);
    rc = write_file(out, name, srcs[0], strlen(srcs[0]));
    qgen_fmt(name, sizeof name, "%s.ptx", uri);
    if (!rc) rc = write_file(out, name, arts[0].ptx, arts[0].ptx_size);
    if (!rc) fprintf(rep, "  wrote %s/%s.cu and the .ptx (sm_%d)\n", out, uri, arts[0].arch);
  }
  for (int i = 0; i < nu; i++) {
    const qgen_artifact *a = &arts[i];
    /* an arch of other limits has its own plan, so its own unit */
    if (out && !rc && i > 0 && strcmp(srcs[i], srcs[0]) != 0) {
      qgen_fmt(name, sizeof name, "%s_sm%d.cu", uri, a->arch);
      rc = write_file(out, name, srcs[i], strlen(srcs[i]));
      if (!rc) fprintf(rep, "  wrote %s/%s (sm_%d's plan differs)\n", out, name, a->arch);
    }
    if (out && !rc) {
      qgen_fmt(name, sizeof name, "%s_sm%d.cubin", uri, a->arch);
      rc = write_file(out, name, a->cubin, a->cubin_size);
    }
    report_artifact(rep, s, a);
    qgen_artifact_free(&arts[i]);
  }
  fprintf(rep, "  %d arch(s) in %.1f ms\n", nu, qgen_now_ms() - t0);
  for (int i = 0; i < nu; i++) free(srcs[i]);
  return rc;
}

static int cmd_emit(int argc, char **argv) {
  const char *spec = NULL, *out = NULL, *variant = NULL, *arch_list = NULL;
  int print = 0, plan_only = 0, step = INT_MIN; /* INT_MIN: no --step (the one-token module) */
  const qgen_opt opts[] = {
      SPEC_OPT(&spec),
      {.name = "--out", .alias = "-o", .arg = "DIR", .kind = QGEN_OPT_STR, .dst = &out,
       .help = "also write DIR/<uri>.cu, DIR/<uri>_sm<arch>.cubin, DIR/<uri>.ptx"},
      ARCH_OPT(&arch_list),
      {.name = "--variant", .arg = "NAME", .kind = QGEN_OPT_STR, .dst = &variant,
       .help = "only this variant of a multi-variant spec"},
      {.name = "--print", .kind = QGEN_OPT_FLAG, .dst = &print, .help = "print the emitted source to stdout"},
      {.name = "--plan", .kind = QGEN_OPT_FLAG, .dst = &plan_only,
       .help = "print each variant's launch plan per arch (or why it does not fit); compile nothing"},
      {.name = "--step", .arg = "N", .kind = QGEN_OPT_INT, .dst = &step,
       .help = "the engine module of N query tokens a sequence (1, 2, 4, 8, 16):\n"
               "what a step of up to N tokens, a window or sinks runs (the\n"
               "library builds it on first use; this fills the cache ahead)"},
      HELP_OPT,
      {0}};
  const qgen_cmd cmd = {"emit", EMIT_SYNOPSIS, NULL, 19, opts};
  const int done = qgen_opts_parse(&cmd, argc, argv, NULL, 0, NULL);
  if (done >= 0) return done;
  if (!spec) return die(QGEN_EXIT_USER, "emit: --spec FILE is required (see qgen emit --help)");
  if (step != INT_MIN && (step < 1 || step > 16 || (step & (step - 1))))
    return die(QGEN_EXIT_USER, "emit: --step %d: the engine modules take 1, 2, 4, 8 or 16 tokens", step);
  if (step != INT_MIN && out) return die(QGEN_EXIT_USER, "emit: --step writes no files (its module would take the one-token files' names): give it without -o");
  tune.step = step == INT_MIN ? 0 : step;
  if (plan_only && (print || out)) return die(QGEN_EXIT_USER, "emit: --plan compiles and writes nothing: give it without --print and -o");
  int rc = qgen_opts_not_input("emit", NULL, NULL, spec);
  if (rc != 0) return rc;
  static build_job job;
  rc = load_for_build("emit", spec, variant, arch_list, plan_only, &job);
  if (rc != 0) return rc;
  if (plan_only) return print_plans(&job.set, spec, variant, job.archs, job.n_archs);
  FILE *rep = print ? stderr : stdout; /* the report; stdout then holds the unit alone */
  if (out && qgen_mkdir_p(out, 0755) != 0) return die(QGEN_EXIT_USER, "%s: cannot create directory: %s", out, strerror(errno));
  if (out && (rc = check_outputs(&job, spec, variant, out)) != 0) return rc;
  qgen_cache *cache = qgen_cache_open(NULL);
  for (int v = 0; v < job.set.n && rc == 0; v++) {
    const int *use;
    const int nu = variant_archs(&job.set.v[v], variant, job.archs, job.n_archs, &use);
    if (nu) rc = emit_variant(&job.set.v[v], spec, use, nu, cache, out, print, rep, job.err, sizeof job.err);
  }
  qgen_cache_close(cache);
  return rc;
}

static int is_dir(const char *p) {
  struct stat st;
  size_t n = strlen(p);
  return (n > 0 && p[n - 1] == '/') || (stat(p, &st) == 0 && S_ISDIR(st.st_mode));
}

static int cmd_bundle(int argc, char **argv) {
  const char *spec = NULL, *out = NULL, *variant = NULL, *arch_list = NULL;
  const qgen_opt opts[] = {
      SPEC_OPT(&spec),
      {.name = "--out", .alias = "-o", .arg = "OUT", .kind = QGEN_OPT_STR, .dst = &out,
       .help = "the bundle to write (atomically). OUT is a directory when it exists\n"
               "as one or ends in '/': it then receives OUT/<variant>.qgb. A spec\n"
               "with several variants needs --variant, or a directory OUT to get\n"
               "one bundle per variant"},
      {.name = "--variant", .arg = "NAME", .kind = QGEN_OPT_STR, .dst = &variant, .help = "bundle only this variant"},
      ARCH_OPT(&arch_list),
      HELP_OPT,
      {0}};
  const qgen_cmd cmd = {"bundle", BUNDLE_SYNOPSIS, NULL, 19, opts};
  const int done = qgen_opts_parse(&cmd, argc, argv, NULL, 0, NULL);
  if (done >= 0) return done;
  if (!spec) return die(QGEN_EXIT_USER, "bundle: --spec FILE is required (see qgen bundle --help)");
  if (!out || !*out) return die(QGEN_EXIT_USER, "bundle: -o OUT is required (see qgen bundle --help)");
  int rc = qgen_opts_not_input("bundle", NULL, NULL, spec);
  if (rc != 0) return rc;
  static build_job job;
  rc = load_for_build("bundle", spec, variant, arch_list, 0, &job);
  if (rc != 0) return rc;
  const qgen_spec_set *set = &job.set;
  const int *archs = job.archs, n_archs = job.n_archs;
  char *err = job.err;
  const int dir = is_dir(out);
  if (!variant && set->n > 1 && !dir)
    return die(QGEN_EXIT_USER, "%s has %d variants: give --variant NAME, or a directory -o DIR/ for one bundle each", spec, set->n);
  if (dir && qgen_mkdir_p(out, 0755) != 0) return die(QGEN_EXIT_USER, "%s: cannot create directory: %s", out, strerror(errno));

  /* the bundle paths, each checked before anything is compiled */
  static char paths[QGEN_MAX_VARIANTS][4200];
  for (int v = 0; v < set->n; v++) {
    if (dir) qgen_fmt(paths[v], sizeof paths[v], "%s%s%s.qgb", out, out[strlen(out) - 1] == '/' ? "" : "/", set->v[v].name);
    else qgen_fmt(paths[v], sizeof paths[v], "%s", out);
    if (variant && strcmp(set->v[v].name, variant) != 0) continue;
    if ((rc = qgen_opts_not_input("bundle", "-o", paths[v], spec)) != 0) return rc;
    if (qgen_write_check(paths[v], err, sizeof job.err) != 0) return die(QGEN_EXIT_USER, "%s", err);
  }
  qgen_cache *cache = qgen_cache_open(NULL);
  for (int v = 0; v < set->n && rc == 0; v++) {
    const qgen_spec *s = &set->v[v];
    const int *use;
    const int nu = variant_archs(s, variant, archs, n_archs, &use);
    if (!nu) continue;
    const char *path = paths[v];
    print_layout(stdout, s, spec);
    qgen_artifact arts[QGEN_MAX_ARCHS];
    double t0 = qgen_now_ms();
    if (qgen_build(s, &tune, use, nu, cache, arts, NULL, err, sizeof job.err) != 0) {
      rc = die(QGEN_EXIT_INTERNAL, "%s", err);
      break;
    }
    for (int i = 0; i < nu; i++)
      printf("  sm_%d  cubin %zu B  ptx %zu B  %d kernels  %7.1f ms  %s\n", arts[i].arch, arts[i].cubin_size,
             arts[i].ptx_size, arts[i].n_kernels, arts[i].ms, arts[i].cache_hit ? "hit" : "miss");
    if (qgen_bundle_write(path, s, arts, nu, err, sizeof job.err) != 0) rc = die(QGEN_EXIT_WRITE, "%s", err);
    for (int i = 0; i < nu; i++) qgen_artifact_free(&arts[i]);
    if (rc) break;
    struct stat st;
    long long bytes = stat(path, &st) == 0 ? (long long)st.st_size : -1;
    printf("  wrote %s (%lld bytes, %d arch%s) in %.1f ms\n", path, bytes, nu, nu == 1 ? "" : "s", qgen_now_ms() - t0);
  }
  qgen_cache_close(cache);
  return rc;
}

static int cmd_info(int argc, char **argv) {
  const char *file = NULL;
  int lua = 0, n_files = 0;
  const qgen_opt opts[] = {
      {.name = "--lua", .kind = QGEN_OPT_FLAG, .dst = &lua, .help = "also print the bundle's canonical spec text"},
      HELP_OPT,
      {0}};
  const qgen_cmd cmd = {"info", INFO_SYNOPSIS, NULL, 15, opts};
  const int done = qgen_opts_parse(&cmd, argc, argv, &file, 1, &n_files);
  if (done >= 0) return done;
  if (!n_files) return die(QGEN_EXIT_USER, "info: a bundle FILE is required (see qgen info --help)");
  const int same = qgen_opts_not_input("info", NULL, NULL, file);
  if (same) return same;
  static qgen_bundle b;
  char err[1024];
  if (qgen_bundle_read(file, &b, err, sizeof err) != 0) return die(QGEN_EXIT_USER, "%s", err);
  FILE *rep = lua ? stderr : stdout; /* stdout then holds the spec text alone */
  fprintf(rep, "%s: qgen bundle v%d, %llu bytes, %d entr%s, written by qgen %s with ", file, QGEN_BUNDLE_VERSION,
         (unsigned long long)b.file_size, b.n, b.n == 1 ? "y" : "ies", b.qgen_version);
  if (b.nvrtc_major) fprintf(rep, "NVRTC %d.%d; checksums ok\n", b.nvrtc_major, b.nvrtc_minor);
  else fprintf(rep, "an unknown NVRTC; checksums ok\n");
  print_layout(rep, &b.spec, file);
  for (int i = 0; i < b.n; i++) {
    const qgen_bundle_entry *e = &b.entry[i];
    const qgen_artifact *a = &b.arts[i];
    char hex[65];
    qgen_hex(e->sha256, 32, hex);
    fprintf(rep, "  sm_%d  %s  payload %llu B at %llu  cubin %zu B  ptx %zu B  sha256 %.16s\n", e->arch,
           qgen_bundle_kinds_str(e->kinds), (unsigned long long)e->size, (unsigned long long)e->offset, a->cubin_size,
           a->ptx_size, hex);
    for (int k = 0; k < a->n_kernels; k++) {
      const qgen_kernel_info *ki = &a->k[k];
      fprintf(rep, "    %-11s  regs %3d  spill %d/%d  stack %d  smem %d\n", ki->name, ki->regs, ki->spill_stores,
             ki->spill_loads, ki->stack, ki->smem_static);
    }
  }
  if (lua) fputs(b.spec_text, stdout);
  qgen_bundle_free(&b);
  return 0;
}

typedef struct {
  int n, bad;
  unsigned long long bytes;
} list_total;

static void list_cb(void *ud, const qgen_cache_item *it) {
  list_total *t = ud;
  t->n++;
  t->bytes += it->size;
  t->bad += it->problem != NULL;
  printf("%10llu  %s  %-24s  %s\n", (unsigned long long)it->size, it->problem ? "corrupt" : "ok     ",
         it->spec[0] ? it->spec : "-", it->file);
  if (it->problem) fprintf(stderr, "qgen: cache: %s %s\n", it->file, it->problem);
}

static void left_cb(void *ud, const char *file) {
  int *n = ud;
  if ((*n)++ == 0) printf("left as they are (not cache entries):\n");
  printf("  %s\n", file);
}

static const char *const CACHE_ACTIONS[] = {"path", "list", "clear"};

static int cmd_cache(int argc, char **argv) {
  const char *action = NULL;
  int n_actions = 0;
  const qgen_opt opts[] = {{0}};
  const qgen_cmd cmd = {"cache", CACHE_SYNOPSIS, NULL, 0, opts};
  const int done = qgen_opts_parse(&cmd, argc, argv, &action, 1, &n_actions);
  if (done >= 0) return done;
  if (!n_actions) {
    qgen_opts_usage(&cmd, stderr);
    return QGEN_EXIT_USER;
  }
  if (strcmp(action, "path") == 0) { /* without making the directory */
    char dir[4096], why[4200];
    if (qgen_cache_resolve(NULL, dir, sizeof dir, why, sizeof why) == 0) printf("%s\n", dir);
    else printf("memory only (%s)\n", why[0] ? why : "QGEN_CACHE=off");
    return 0;
  }
  if (strcmp(action, "list") != 0 && strcmp(action, "clear") != 0) {
    const char *near = qgen_opts_closest(action, CACHE_ACTIONS, 3);
    if (near) return die(QGEN_EXIT_USER, "cache: unknown action '%s'; did you mean '%s'? (path, list or clear)", action, near);
    return die(QGEN_EXIT_USER, "cache: unknown action '%s' (path, list or clear)", action);
  }
  qgen_cache *c = qgen_cache_open(NULL);
  if (!c) return die(QGEN_EXIT_INTERNAL, "out of memory");
  const char *dir = qgen_cache_dir(c);
  int rc = 0;
  if (!dir && qgen_cache_problem(c)[0]) { /* the warning said it; the command cannot do its work */
    rc = die(QGEN_EXIT_USER, "cache: %s", qgen_cache_problem(c));
  } else if (strcmp(action, "list") == 0) {
    list_total t = {0, 0, 0};
    if (dir) printf("%10s  %-7s  %-24s  %s\n", "bytes", "status", "spec", "entry");
    if (qgen_cache_list(c, list_cb, &t) < 0) rc = die(QGEN_EXIT_USER, "%s: cannot list: %s", dir, strerror(errno));
    else if (dir) {
      printf("%d entr%s, %llu bytes in %s", t.n, t.n == 1 ? "y" : "ies", t.bytes, dir);
      if (t.bad) printf(" (%d not verifying: removed by qgen cache clear, rebuilt when next used)", t.bad);
      printf("\n");
    } else printf("memory only: no entries on disk\n");
  } else {
    int others = 0;
    int n = qgen_cache_clear(c, left_cb, &others);
    if (n < 0) rc = die(QGEN_EXIT_USER, "%s: cannot clear: %s", dir ? dir : "cache", strerror(errno));
    else printf("removed %d entr%s from %s\n", n, n == 1 ? "y" : "ies", dir ? dir : "memory");
  }
  qgen_cache_close(c);
  return rc;
}

static int cmd_version(int argc, char **argv) {
  const qgen_opt opts[] = {{0}};
  const qgen_cmd cmd = {"version", "usage: qgen version\n\nPrints the versions of qgen and of the NVRTC it finds, and the file that NVRTC\n"
                        "was loaded from ('none' when it cannot be loaded, and why).\n", NULL, 0, opts};
  const int done = qgen_opts_parse(&cmd, argc, argv, NULL, 0, NULL);
  if (done >= 0) return done;
  int major, minor;
  char err[512];
  printf("qgen %s\n", QGEN_VERSION);
  if (qgen_nvrtc_version(&major, &minor, err, sizeof err) == 0) printf("nvrtc %d.%d %s\n", major, minor, qgen_nvrtc_path());
  else printf("nvrtc none (%s)\n", err);
  return 0;
}

static int cmd_spec_fields(int argc, char **argv) {
  const qgen_opt opts[] = {{0}};
  const qgen_cmd cmd = {"spec-fields", "usage: qgen spec-fields\n\nPrints the fields a spec may set (type, default, what is allowed, whether it is compiled\n"
                        "into the kernels, what it means) and the architectures archs may name, as the markdown\n"
                        "tables of docs/spec.md: the validator's own table, so the two cannot differ.\n", NULL, 0, opts};
  const int done = qgen_opts_parse(&cmd, argc, argv, NULL, 0, NULL);
  if (done >= 0) return done;
  qgen_spec_fields_markdown(stdout);
  return 0; /* main reports a failed write to stdout */
}

static const char *const COMMANDS[] = {"emit", "bundle", "info", "check", "bench", "eval", "cache", "spec-fields", "version", "help"};

static int run(int argc, char **argv) {
  if (argc < 2 || is_help(argv[1]) || (strcmp(argv[1], "help") == 0 && argc == 2)) {
    fputs(USAGE, argc < 2 ? stderr : stdout);
    return argc < 2 ? QGEN_EXIT_USER : 0;
  }
  if (strcmp(argv[1], "help") == 0) { /* qgen help CMD = qgen CMD --help */
    if (argc > 3) return die(QGEN_EXIT_USER, "help: one command expected (see qgen --help)");
    char *args[] = {argv[0], argv[2], "--help", NULL};
    return run(3, args);
  }
  const char *cmd = argv[1];
  char terr[256];
  /* the environment the command reads, checked before it runs; version and help need none */
  const int plans = strcmp(cmd, "emit") == 0 || strcmp(cmd, "bundle") == 0 || strcmp(cmd, "check") == 0 ||
                    strcmp(cmd, "bench") == 0 || strcmp(cmd, "eval") == 0;
  if ((plans || strcmp(cmd, "cache") == 0) && qgen_cache_env(terr, sizeof terr) < 0) return die(QGEN_EXIT_USER, "%s", terr);
  const int tuned = plans ? qgen_tune_parse(getenv("QGEN_TUNE"), &tune, terr, sizeof terr) : 0;
  if (tuned < 0) return die(QGEN_EXIT_USER, "%s", terr);
  if (tuned && strcmp(cmd, "bundle") == 0)
    return die(QGEN_EXIT_USER, "bundle: QGEN_TUNE changes the kernels' plan; bundles hold the default plan (unset QGEN_TUNE)");
  if (strcmp(cmd, "emit") == 0) return cmd_emit(argc - 2, argv + 2);
  if (strcmp(cmd, "bundle") == 0) return cmd_bundle(argc - 2, argv + 2);
  if (strcmp(cmd, "info") == 0) return cmd_info(argc - 2, argv + 2);
  if (strcmp(cmd, "bench") == 0) return qgen_bench_main(argc - 2, argv + 2);
  if (strcmp(cmd, "eval") == 0) return qgen_eval_main(argc - 2, argv + 2);
  if (strcmp(cmd, "check") == 0) return qgen_check_main(argc - 2, argv + 2);
  if (strcmp(cmd, "cache") == 0) return cmd_cache(argc - 2, argv + 2);
  if (strcmp(cmd, "spec-fields") == 0) return cmd_spec_fields(argc - 2, argv + 2);
  if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) return cmd_version(argc - 2, argv + 2);
  const char *near = qgen_opts_closest(cmd, COMMANDS, (int)(sizeof COMMANDS / sizeof *COMMANDS));
  if (near) return die(QGEN_EXIT_USER, "unknown command '%s'; did you mean '%s'? (see qgen --help)", cmd, near);
  if (cmd[0] == '-') return die(QGEN_EXIT_USER, "'%s': a command comes first, its options after it (see qgen --help)", cmd);
  return die(QGEN_EXIT_USER, "unknown command '%s' (see qgen --help)", cmd);
}

/* Standard output goes through a stream that keeps the reason of its first failed write:
   stdio itself only remembers that one failed, long after errno has moved on. */
static int stdout_errno;

static ssize_t stdout_write(void *cookie, const char *buf, size_t n) {
  (void)cookie;
  size_t done = 0;
  while (done < n) {
    const ssize_t w = write(STDOUT_FILENO, buf + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (!stdout_errno) stdout_errno = w < 0 ? errno : EIO;
      return done ? (ssize_t)done : -1;
    }
    done += (size_t)w;
  }
  return (ssize_t)n;
}

static void track_stdout(void) {
  const cookie_io_functions_t io = {NULL, stdout_write, NULL, NULL};
  FILE *f = fopencookie(NULL, "w", io);
  if (!f) return; /* then plain stdout: a failure is still caught below, without its reason */
  setvbuf(f, NULL, isatty(STDOUT_FILENO) ? _IOLBF : _IOFBF, BUFSIZ);
  stdout = f;
}

/* What a command printed reaches standard output only as it is flushed: a full disk or a
   closed descriptor shows at the latest here, and a command that printed into the void
   must not exit 0. */
static int close_stdout(int rc) {
  int bad = fflush(stdout) != 0 || ferror(stdout);
  const int e = errno;
  if (fclose(stdout) != 0) bad = 1;
  if (!bad) return rc;
  const int why = stdout_errno ? stdout_errno : e;
  die(QGEN_EXIT_WRITE, "cannot write to standard output: %s", why ? strerror(why) : "a write failed");
  return rc ? rc : QGEN_EXIT_WRITE;
}

int main(int argc, char **argv) {
  track_stdout();
  return close_stdout(run(argc, argv));
}
