/* nvrtc.c — see nvrtc.h. */
#define _GNU_SOURCE
#include "jit/nvrtc.h"

#include <dlfcn.h>
#include <errno.h>
#include <nvrtc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"

#define NVRTC_FUNCS(X)                                                                   \
  X(nvrtcVersion) X(nvrtcGetErrorString) X(nvrtcCreateProgram) X(nvrtcDestroyProgram)    \
  X(nvrtcCompileProgram) X(nvrtcGetProgramLogSize) X(nvrtcGetProgramLog)                 \
  X(nvrtcGetCUBINSize) X(nvrtcGetCUBIN) X(nvrtcGetPTXSize) X(nvrtcGetPTX)                \
  X(nvrtcGetNumSupportedArchs) X(nvrtcGetSupportedArchs)

static struct {
#define X(f) __typeof__(&f) f;
  NVRTC_FUNCS(X)
#undef X
  void *lib;
  char path[4096]; /* the file lib was loaded from */
  char include[4096];
  char error[512];
} nv;
static pthread_once_t nv_once = PTHREAD_ONCE_INIT;

static int has_file(const char *dir, const char *name) {
  char p[4200];
  qgen_fmt(p, sizeof p, "%s/%s", dir, name);
  return access(p, R_OK) == 0;
}

static void nv_load(void) {
  const char *home[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH")};
  char path[4200];
  const char *env = getenv("QGEN_NVRTC");
  if (env && strcmp(env, "none") == 0) { /* tests: behave as if NVRTC were not installed */
    snprintf(nv.error, sizeof nv.error, "NVRTC disabled (QGEN_NVRTC=none)");
    return;
  }
  if (env && *env) { /* the one to use: no fallback to another NVRTC */
    struct stat st;
    /* a path must name a file; a bare name is the loader's to find */
    const char *why = !strchr(env, '/')     ? NULL
                      : stat(env, &st) != 0 ? strerror(errno)
                      : !S_ISREG(st.st_mode) ? "not a regular file"
                                             : NULL;
    if (!why && !(nv.lib = dlopen(env, RTLD_NOW | RTLD_LOCAL))) why = dlerror();
    if (!why && !dlsym(nv.lib, "nvrtcVersion")) why = "not an NVRTC library (no nvrtcVersion)";
    if (why) {
      snprintf(nv.error, sizeof nv.error, "QGEN_NVRTC=%s: cannot load: %s", env, why);
      if (nv.lib) dlclose(nv.lib);
      nv.lib = NULL;
      return;
    }
  }
  for (int i = 0; i < 2 && !nv.lib; i++)
    if (home[i] && *home[i]) {
      snprintf(path, sizeof path, "%s/lib64/libnvrtc.so", home[i]);
      nv.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
  if (!nv.lib) {
    snprintf(path, sizeof path, "%s/libnvrtc.so", QGEN_CUDA_LIBDIR);
    nv.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  }
  if (!nv.lib) nv.lib = dlopen("libnvrtc.so.13", RTLD_NOW | RTLD_LOCAL);
  if (!nv.lib) nv.lib = dlopen("libnvrtc.so", RTLD_NOW | RTLD_LOCAL);
  if (!nv.lib) {
    snprintf(nv.error, sizeof nv.error,
             "NVRTC not found (set CUDA_HOME or QGEN_NVRTC to libnvrtc.so; bundles need no NVRTC)");
    return;
  }
#define X(f)                                                      \
  if (!(nv.f = (__typeof__(&f))dlsym(nv.lib, #f))) {              \
    snprintf(nv.error, sizeof nv.error, "NVRTC lacks %s", #f);    \
    dlclose(nv.lib);                                              \
    nv.lib = NULL;                                                \
    return;                                                       \
  }
  NVRTC_FUNCS(X)
#undef X
  Dl_info di;
  qgen_fmt(nv.path, sizeof nv.path, "%s",
           dladdr((void *)nv.nvrtcVersion, &di) && di.dli_fname ? di.dli_fname : "(unknown path)");
  for (int i = 0; i < 2 && !nv.include[0]; i++)
    if (home[i] && *home[i]) {
      snprintf(path, sizeof path, "%s/include", home[i]);
      if (has_file(path, "cuda_fp16.h")) qgen_fmt(nv.include, sizeof nv.include, "%s", path);
    }
  if (!nv.include[0]) snprintf(nv.include, sizeof nv.include, "%s", QGEN_CUDA_INCLUDE);
}

static int nv_ready(char *err, size_t errlen) {
  pthread_once(&nv_once, nv_load);
  if (nv.lib) return 0;
  qgen_fmt(err, errlen, "%s", nv.error);
  return -1;
}

int qgen_nvrtc_version(int *major, int *minor, char *err, size_t errlen) {
  if (nv_ready(err, errlen) != 0) return -1;
  nv.nvrtcVersion(major, minor);
  return 0;
}

const char *qgen_nvrtc_path(void) {
  char err[8];
  return nv_ready(err, sizeof err) == 0 ? nv.path : NULL;
}

int qgen_nvrtc_archs(int *archs, int max) {
  char err[8];
  int n = 0;
  if (nv_ready(err, sizeof err) != 0 || nv.nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS) return -1;
  int *all = calloc((size_t)n + 1, sizeof *all);
  if (!all || nv.nvrtcGetSupportedArchs(all) != NVRTC_SUCCESS) {
    free(all);
    return -1;
  }
  int k = 0;
  for (int i = 0; i < n && k < max; i++) archs[k++] = all[i];
  free(all);
  return k;
}

/* The fixed options; -I comes last (a path, kept out of the cache key). */
#define FIXED_OPTS "-std=c++17", "--ptxas-options=-v", "-lineinfo"

void qgen_nvrtc_options(int arch, char *buf, size_t n) {
  static const char *const fixed[] = {FIXED_OPTS};
  int k = snprintf(buf, n, "-arch=sm_%d", arch);
  for (size_t i = 0; i < sizeof fixed / sizeof *fixed && k >= 0 && (size_t)k < n; i++)
    k += snprintf(buf + k, n - (size_t)k, " %s", fixed[i]);
}

/* Pull "Used N registers", spills, stack and smem of each entry function out of ptxas'
   verbose log (lines follow "Compiling entry function 'NAME' for 'sm_XX'"). */
static void parse_ptxas(const char *log, const char *const *kernels, qgen_artifact *a) {
  a->n_kernels = 0;
  for (int i = 0; kernels[i] && a->n_kernels < QGEN_MAX_KERNELS; i++) {
    qgen_kernel_info *k = &a->k[a->n_kernels++];
    memset(k, 0, sizeof *k);
    snprintf(k->name, sizeof k->name, "%s", kernels[i]);
    char needle[96];
    snprintf(needle, sizeof needle, "Compiling entry function '%s'", kernels[i]);
    const char *p = strstr(log, needle);
    if (!p) continue;
    const char *end = strstr(p + 1, "Compiling entry function");
    const char *s;
    if ((s = strstr(p, "bytes stack frame")) && (!end || s < end)) {
      while (s > p && s[-1] == ' ') s--;
      while (s > p && s[-1] >= '0' && s[-1] <= '9') s--;
      sscanf(s, "%d bytes stack frame, %d bytes spill stores, %d bytes spill loads", &k->stack,
             &k->spill_stores, &k->spill_loads);
    }
    if ((s = strstr(p, "Used ")) && (!end || s < end)) sscanf(s, "Used %d registers", &k->regs);
    if ((s = strstr(p, "bytes smem")) && (!end || s < end)) {
      while (s > p && s[-1] == ' ') s--;
      while (s > p && s[-1] >= '0' && s[-1] <= '9') s--;
      sscanf(s, "%d", &k->smem_static);
    }
  }
}

/* Drop ptxas' "Compile time = ..." lines from the log in place: the log is stored in cache
   entries and bundles, which must be the same bytes for the same source and flags. */
static void drop_timing_lines(char *log) {
  static const char tag[] = "ptxas info    : Compile time = ";
  char *w = log;
  for (const char *l = log; *l;) {
    const char *nl = strchr(l, '\n');
    size_t len = nl ? (size_t)(nl - l) + 1 : strlen(l);
    if (strncmp(l, tag, sizeof tag - 1) != 0) {
      memmove(w, l, len);
      w += len;
    }
    l += len;
  }
  *w = 0;
}

/* Line `line` of `file` inside the emitted unit: after its `#line 1 "file"` marker, or of
   the unit itself (the generated header) when no marker names it. */
static const char *unit_line(const char *src, const char *file, size_t flen, long line) {
  char marker[300];
  if (flen >= 250) return NULL;
  snprintf(marker, sizeof marker, "#line 1 \"%.*s\"\n", (int)flen, file);
  const char *p = strstr(src, marker);
  p = p ? p + strlen(marker) : src;
  for (long i = 1; i < line && p; i++) {
    p = strchr(p, '\n');
    if (p) p++;
  }
  return p && *p ? p : NULL;
}

/* With $QGEN_DUMP_SOURCE naming a directory, write the unit that failed to compile there
   as <name>.cu (atomically; the name keeps [A-Za-z0-9._-], other bytes become '_') and say
   where in note, e.g. " (source written to /tmp/d/x_sm90.cu)"; note is "" when the
   variable is unset, and tells why when the write failed. */
static void dump_source(const char *src, const char *name, char *note, size_t n) {
  const char *dir = getenv("QGEN_DUMP_SOURCE");
  note[0] = 0;
  if (!dir || !*dir) return;
  char file[256], path[4400], why[4600];
  size_t k = 0;
  for (const char *p = name && *name ? name : "unit"; *p && k < 200; p++) {
    char ch = *p;
    int keep = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
               ch == '_' || ch == '-';
    file[k++] = keep ? ch : '_';
  }
  file[k] = 0;
  if (file[0] == '.') file[0] = '_'; /* no hidden files, no ".." */
  int w = snprintf(path, sizeof path, "%s/%s.cu", dir, file);
  struct stat st;
  if (w < 0 || (size_t)w >= sizeof path)
    qgen_fmt(note, n, " (QGEN_DUMP_SOURCE: path too long)");
  else if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    qgen_fmt(note, n, " (QGEN_DUMP_SOURCE=%s is not a directory; source not written)", dir);
  else if (qgen_write_atomic(path, src, strlen(src), why, sizeof why) != 0)
    qgen_fmt(note, n, " (source not written: %s)", why);
  else
    qgen_fmt(note, n, " (source written to %s)", path);
}

/* NVRTC's log, then each source line it complains about ("file(LINE): error"), numbered.
   The first line says where the unit was written when $QGEN_DUMP_SOURCE asks for it. */
static void format_failure(const char *src, const char *name, const char *log, char *err, size_t errlen) {
  char note[4600];
  dump_source(src, name, note, sizeof note);
  size_t k = (size_t)snprintf(err, errlen, "NVRTC failed%s:\n%s", note, log);
  int shown = 0;
  for (const char *l = log; l && *l && shown < 10 && k < errlen; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
    const char *paren = strchr(l, '(');
    const char *nl = strchr(l, '\n');
    if (!paren || (nl && paren > nl)) continue;
    char *end;
    long line = strtol(paren + 1, &end, 10);
    if (line <= 0 || strncmp(end, "): error", 8) != 0) continue;
    const char *text = unit_line(src, l, (size_t)(paren - l), line);
    if (!text) continue;
    const char *tend = strchr(text, '\n');
    int tlen = tend ? (int)(tend - text) : (int)strlen(text);
    k += (size_t)snprintf(err + k, errlen - k, "  %.*s:%ld | %.*s\n", (int)(paren - l), l, line, tlen, text);
    shown++;
  }
}

int qgen_nvrtc_compile(const char *src, const char *name, int arch, const char *const *kernels,
                       qgen_artifact *a, char *err, size_t errlen) {
  memset(a, 0, sizeof *a);
  if (nv_ready(err, errlen) != 0) return -1;
  double t0 = qgen_now_ms();
  nvrtcProgram prog;
  nvrtcResult r = nv.nvrtcCreateProgram(&prog, src, name, 0, NULL, NULL);
  if (r != NVRTC_SUCCESS) {
    qgen_fmt(err, errlen, "nvrtcCreateProgram: %s", nv.nvrtcGetErrorString(r));
    return -1;
  }
  char archopt[32], incopt[4200];
  snprintf(archopt, sizeof archopt, "-arch=sm_%d", arch);
  snprintf(incopt, sizeof incopt, "-I%s", nv.include);
  const char *opts[] = {archopt, FIXED_OPTS, incopt};
  r = nv.nvrtcCompileProgram(prog, (int)(sizeof opts / sizeof *opts), opts);
  size_t logn = 0;
  nv.nvrtcGetProgramLogSize(prog, &logn);
  a->log = malloc(logn + 1);
  if (a->log) {
    nv.nvrtcGetProgramLog(prog, a->log);
    a->log[logn] = 0;
    drop_timing_lines(a->log);
    a->log_size = strlen(a->log);
  }
  if (r != NVRTC_SUCCESS) {
    format_failure(src, name, a->log ? a->log : "", err, errlen);
    nv.nvrtcDestroyProgram(&prog);
    qgen_artifact_free(a);
    return -1;
  }
  nv.nvrtcGetCUBINSize(prog, &a->cubin_size);
  nv.nvrtcGetPTXSize(prog, &a->ptx_size);
  a->cubin = malloc(a->cubin_size ? a->cubin_size : 1);
  a->ptx = malloc(a->ptx_size + 1);
  if (!a->cubin || !a->ptx) {
    nv.nvrtcDestroyProgram(&prog);
    qgen_artifact_free(a);
    qgen_fmt(err, errlen, "out of memory");
    return -1;
  }
  nv.nvrtcGetCUBIN(prog, (char *)a->cubin);
  nv.nvrtcGetPTX(prog, a->ptx);
  a->ptx[a->ptx_size] = 0;
  a->ptx_size = strlen(a->ptx); /* NVRTC counts the NUL */
  nv.nvrtcDestroyProgram(&prog);
  a->arch = arch;
  parse_ptxas(a->log ? a->log : "", kernels, a);
  a->ms = qgen_now_ms() - t0;
  return 0;
}
