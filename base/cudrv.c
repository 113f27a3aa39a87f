/* cudrv.c — see cudrv.h. */
#define _GNU_SOURCE
#include "base/cudrv.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#define STR_(x) #x
#define STR(x) STR_(x) /* the versioned name cuda.h maps an entry point to */

static qgen_cudrv drv;
static const qgen_cudrv *drv_ok;
static char drv_why[256];
static qgen_cudrv_failure drv_failure;
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static void drv_load(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(drv_why, sizeof drv_why, "no CUDA driver (libcuda.so.1 not found)");
    drv_failure = QGEN_CUDRV_NO_DRIVER;
    return;
  }
#define X(f)                                                                 \
  if (!(drv.f = (__typeof__(&f))dlsym(lib, STR(f)))) {                       \
    snprintf(drv_why, sizeof drv_why, "CUDA driver lacks %s (too old)", STR(f)); \
    drv_failure = QGEN_CUDRV_NO_DRIVER;                                      \
    return;                                                                  \
  }
  QGEN_CU_FUNCS(X)
#undef X
  CUresult r = drv.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char *s = NULL;
    drv.cuGetErrorString(r, &s);
    snprintf(drv_why, sizeof drv_why, "no usable CUDA device (cuInit: %s)", s ? s : "error");
    drv_failure = QGEN_CUDRV_NO_DEVICE;
    return;
  }
  drv_ok = &drv;
}

const qgen_cudrv *qgen_cudrv_get(const char **why) {
  pthread_once(&drv_once, drv_load);
  if (!drv_ok && why) *why = drv_why;
  return drv_ok;
}

qgen_cudrv_failure qgen_cudrv_failed(void) {
  pthread_once(&drv_once, drv_load);
  return drv_failure;
}

const char *qgen_cu_errstr(CUresult r) {
  const char *s = NULL;
  if (drv_ok) drv.cuGetErrorString(r, &s);
  return s ? s : "unknown CUDA error";
}
