/* cudrv.h — the CUDA driver API behind one function table, loaded with
 * dlopen("libcuda.so.1") on first use, so qgen and every CPU test start on machines with
 * no driver and no GPU. Only the entry points qgen uses are listed; each member has the
 * driver's own (versioned) prototype from cuda.h.
 */
#ifndef QGEN_CUDRV_H
#define QGEN_CUDRV_H

#include <cuda.h>

#define QGEN_CU_FUNCS(X)                                                                    \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorString) X(cuDeviceGetCount) X(cuDeviceGet)      \
  X(cuDeviceGetAttribute) X(cuDeviceGetName) X(cuDevicePrimaryCtxRetain)                     \
  X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuCtxGetCurrent) X(cuCtxSynchronize)     \
  X(cuCtxPushCurrent) X(cuCtxPopCurrent)                                                     \
  X(cuModuleLoadData) X(cuModuleLoadDataEx) X(cuModuleUnload) X(cuModuleGetFunction)          \
  X(cuFuncSetAttribute) X(cuFuncGetAttribute) X(cuOccupancyMaxActiveBlocksPerMultiprocessor) \
  X(cuOccupancyMaxActiveClusters) \
  X(cuLaunchKernel) X(cuLaunchKernelEx) X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoD) X(cuMemcpyDtoH)               \
  X(cuMemcpyDtoD) X(cuMemsetD8) X(cuMemsetD8Async) X(cuMemsetD32Async) X(cuMemGetInfo)        \
  X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuStreamBeginCapture)         \
  X(cuStreamEndCapture) X(cuGraphInstantiate) X(cuGraphLaunch) X(cuGraphDestroy)              \
  X(cuGraphExecDestroy) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuEventRecordWithFlags)                   \
  X(cuEventSynchronize) X(cuEventElapsedTime) X(cuMemcpyHtoDAsync)

typedef struct qgen_cudrv {
#define X(f) __typeof__(&f) f;
  QGEN_CU_FUNCS(X)
#undef X
} qgen_cudrv;

/* Why the table is not there: no usable driver library (libcuda.so.1 missing or too old
   for an entry point qgen uses), or a driver without a usable device (cuInit failed). */
typedef enum qgen_cudrv_failure {
  QGEN_CUDRV_OK = 0,
  QGEN_CUDRV_NO_DRIVER,
  QGEN_CUDRV_NO_DEVICE,
} qgen_cudrv_failure;

/* The table, or NULL when libcuda.so.1 cannot be loaded or cuInit fails; *why then says
   which in words ("no CUDA driver", "no usable CUDA device (cuInit: ...)") and
   qgen_cudrv_failed() as a value. Thread-safe; loads once. */
const qgen_cudrv *qgen_cudrv_get(const char **why);
qgen_cudrv_failure qgen_cudrv_failed(void);

/* cuGetErrorString with a fallback. */
const char *qgen_cu_errstr(CUresult r);

#endif
