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
  const char *src, *uri;
  int arch;
  qgen_cache *cache;
  qgen_artifact *out;
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

static void *run_job(void *arg) {
  job *j = arg;
  char name[300], e[256];
  int major = 0, minor = 0;
  j->rc = -1;
  if (qgen_nvrtc_version(&major, &minor, j->err, sizeof j->err) != 0) return NULL;
  uint8_t key[32];
  qgen_build_key(j->src, j->arch, QGEN_VERSION, major, minor, key);
  snprintf(name, sizeof name, "%s_sm%d", j->uri, j->arch);
  double t0 = qgen_now_ms();
  void *data;
  size_t size;
  if (j->cache && qgen_cache_get(j->cache, name, key, &data, &size) == 1) {
    int ok = qgen_artifact_unpack(data, size, j->out, e, sizeof e) == 0 && j->out->arch == j->arch;
    free(data);
    if (ok) {
      j->out->cache_hit = 1;
      j->out->ms = qgen_now_ms() - t0;
      j->rc = 0;
      return NULL;
    }
    qgen_artifact_free(j->out); /* a valid file with a bad payload: rebuild over it */
  }
  if (qgen_nvrtc_compile(j->src, name, j->arch, qgen_kernel_names(j->spec), j->out, j->err, sizeof j->err) != 0)
    return NULL;
  if (j->cache) {
    uint8_t *blob = qgen_artifact_pack(j->out, &size);
    if (blob) qgen_cache_put(j->cache, name, j->spec->name, key, blob, size);
    free(blob);
  }
  j->rc = 0;
  return NULL;
}

int qgen_build(const qgen_spec *s, const qgen_tune *tune, const int *archs, int n, qgen_cache *cache,
               qgen_artifact *out, char **src_out, char *err, size_t errlen) {
  char uri[256];
  qgen_module_name(s, uri, sizeof uri);
  char *src = qgen_emit_source(s, tune, NULL, err, errlen);
  if (!src) return -1;
  job *jobs = calloc((size_t)n, sizeof *jobs);
  pthread_t *th = calloc((size_t)n, sizeof *th);
  int rc = 0;
  if (!jobs || !th) {
    qgen_fmt(err, errlen, "out of memory");
    rc = -1;
  }
  for (int i = 0; rc == 0 && i < n; i++) {
    jobs[i] = (job){.spec = s, .src = src, .uri = uri, .arch = archs[i], .cache = cache, .out = &out[i]};
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
      qgen_fmt(err, errlen, "%s (sm_%d): %s", uri, archs[i], jobs[i].err);
      rc = -1;
    }
  if (rc != 0)
    for (int i = 0; i < n; i++) qgen_artifact_free(&out[i]);
  free(jobs);
  free(th);
  if (rc == 0 && src_out) *src_out = src;
  else free(src);
  return rc;
}
