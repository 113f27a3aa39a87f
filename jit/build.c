/* build.c — see build.h. */
#include "jit/build.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit/emit.h"
#include "jit/nvrtc.h"
#include "base/sha256.h"
#include "base/util.h"

typedef struct {
  const qgen_spec *spec;
  const qgen_tune *tune;
  const char *uri;
  const qgen_arch *plan; /* whose limits size the kernels */
  int code;              /* the arch NVRTC compiles for */
  qgen_cache *cache;
  qgen_artifact *out;
  char *src;
  int rc;
  char err[65536];
} job;

void qgen_build_key(const char *src, int arch, const char *qgen_version, int nv_major, int nv_minor,
                    uint8_t key[32]) {
  char head[512], opts[256];
  qgen_nvrtc_options(arch, opts, sizeof opts);
  int n = snprintf(head, sizeof head, "qgen-cache %d|qgen %.200s|artifact %d|nvrtc %d.%d|%s|", QGEN_CACHE_FORMAT,
                   qgen_version ? qgen_version : "", QGEN_ARTIFACT_VERSION, nv_major, nv_minor, opts);
  if (n < 0) n = 0;
  if ((size_t)n >= sizeof head) n = (int)sizeof head - 1;
  qgen_sha256 h;
  qgen_sha256_init(&h);
  qgen_sha256_update(&h, head, (size_t)n);
  qgen_sha256_update(&h, src, strlen(src));
  qgen_sha256_final(&h, key);
}

/* Every kernel of the artifact within the plan arch's shared memory a CTA: ptxas' static
   bytes plus the dynamic bytes the runtime launches it with. */
static int check_fit(job *j) {
  qgen_layout L;
  qgen_plan P;
  qgen_spec_layout(j->spec, &L);
  qgen_plan_make(&L, j->plan, j->tune, &P, NULL, 0);
  for (int i = 0; i < j->out->n_kernels; i++) {
    const qgen_kernel_info *k = &j->out->k[i];
    const int dyn = qgen_plan_dynamic_smem(&P, k->name);
    if (k->smem_static + dyn > j->plan->smem_block) {
      qgen_fmt(j->err, sizeof j->err, "%s needs %d bytes of shared memory (%d static + %d dynamic); %s (%s) allows %d a CTA",
               k->name, k->smem_static + dyn, k->smem_static, dyn, j->plan->name, j->plan->gpus, j->plan->smem_block);
      return -1;
    }
  }
  return 0;
}

static void *run_job(void *arg) {
  job *j = arg;
  char name[300], e[256];
  int major = 0, minor = 0;
  j->rc = -1;
  if (!(j->src = qgen_emit_source(j->spec, j->plan, j->tune, NULL, j->err, sizeof j->err))) return NULL;
  if (qgen_nvrtc_version(&major, &minor, j->err, sizeof j->err) != 0) return NULL;
  uint8_t key[32];
  qgen_build_key(j->src, j->code, QGEN_VERSION, major, minor, key);
  if (j->plan->sm == j->code) snprintf(name, sizeof name, "%s_sm%d", j->uri, j->code);
  else snprintf(name, sizeof name, "%s_sm%d_plan%d", j->uri, j->code, j->plan->sm);
  double t0 = qgen_now_ms();
  void *data;
  size_t size;
  if (j->cache && qgen_cache_get(j->cache, name, key, &data, &size) == 1) {
    int ok = qgen_artifact_unpack(data, size, j->out, e, sizeof e) == 0 && j->out->arch == j->code;
    free(data);
    if (ok) {
      j->out->cache_hit = 1;
      j->out->ms = qgen_now_ms() - t0;
      j->rc = check_fit(j);
      return NULL;
    }
    qgen_artifact_free(j->out); /* a valid file with a bad payload: rebuild over it */
  }
  qgen_layout L;
  qgen_plan P; /* (planned already by qgen_emit_source) */
  qgen_spec_layout(j->spec, &L);
  qgen_plan_make(&L, j->plan, j->tune, &P, NULL, 0);
  if (qgen_nvrtc_compile(j->src, name, j->code, qgen_kernel_names(j->spec, P.merge_rows > 0), j->out, j->err, sizeof j->err) != 0)
    return NULL;
  if (j->cache) {
    uint8_t *blob = qgen_artifact_pack(j->out, &size);
    if (blob) qgen_cache_put(j->cache, name, j->spec->name, key, blob, size);
    free(blob);
  }
  j->rc = check_fit(j);
  return NULL;
}

/* The jobs of targets[0..n) (plan arch, code arch), in parallel threads. */
static int build_targets(const qgen_spec *s, const qgen_tune *tune, const int (*targets)[2], int n, qgen_cache *cache,
                         qgen_artifact *out, char **srcs, char *err, size_t errlen) {
  char uri[256];
  qgen_spec_uri(s, QGEN_URI_MODULE, uri, sizeof uri);
  if (n < 1 || n > QGEN_MAX_ARCHS) {
    qgen_fmt(err, errlen, "%s: %d archs to build; 1..%d allowed", uri, n, QGEN_MAX_ARCHS);
    return -1;
  }
  memset(out, 0, (size_t)n * sizeof *out); /* freed on failure, whether or not a job got to it */
  job *jobs = calloc((size_t)n, sizeof *jobs);
  pthread_t *th = calloc((size_t)n, sizeof *th);
  int rc = 0;
  if (!jobs || !th) {
    qgen_fmt(err, errlen, "out of memory");
    rc = -1;
  }
  for (int i = 0; rc == 0 && i < n; i++) {
    const qgen_arch *A = qgen_arch_of(targets[i][0]);
    if (!A) {
      qgen_fmt(err, errlen, "%s: sm_%d is not an architecture qgen builds for", uri, targets[i][0]);
      rc = -1;
      break;
    }
    jobs[i] = (job){.spec = s, .tune = tune, .uri = uri, .plan = A, .code = targets[i][1], .cache = cache, .out = &out[i]};
  }
  for (int i = 0; rc == 0 && i < n; i++) {
    if (n == 1 || pthread_create(&th[i], NULL, run_job, &jobs[i]) != 0) {
      run_job(&jobs[i]);
      th[i] = 0;
    }
  }
  for (int i = 0; rc == 0 && i < n; i++) {
    if (th[i]) pthread_join(th[i], NULL);
  }
  for (int i = 0; rc == 0 && i < n; i++)
    if (jobs[i].rc != 0) {
      if (jobs[i].plan->sm == jobs[i].code) qgen_fmt(err, errlen, "%s (sm_%d): %s", uri, jobs[i].code, jobs[i].err);
      else qgen_fmt(err, errlen, "%s (%s's plan, compiled for sm_%d): %s", uri, jobs[i].plan->name, jobs[i].code, jobs[i].err);
      rc = -1;
    }
  if (rc != 0)
    for (int i = 0; i < n; i++) qgen_artifact_free(&out[i]);
  for (int i = 0; jobs && i < n; i++) {
    if (rc == 0 && srcs) srcs[i] = jobs[i].src;
    else free(jobs[i].src);
  }
  free(jobs);
  free(th);
  return rc;
}

int qgen_build(const qgen_spec *s, const qgen_tune *tune, const int *archs, int n, qgen_cache *cache,
               qgen_artifact *out, char **srcs_out, char *err, size_t errlen) {
  int t[QGEN_MAX_ARCHS][2];
  for (int i = 0; i < n && i < QGEN_MAX_ARCHS; i++) t[i][0] = t[i][1] = archs[i];
  return build_targets(s, tune, (const int (*)[2])t, n, cache, out, srcs_out, err, errlen);
}

int qgen_build_emulated(const qgen_spec *s, const qgen_tune *tune, int plan_arch, int code_arch, qgen_cache *cache,
                        qgen_artifact *out, char *err, size_t errlen) {
  const int t[1][2] = {{plan_arch, code_arch}};
  return build_targets(s, tune, t, 1, cache, out, NULL, err, errlen);
}
