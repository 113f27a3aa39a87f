// copy_probe.cu — which copy primitive streams a paged K/V cache at the plain-read rate?
// A standalone measurement behind bench/NOTES.md 23 (not part of the build): the cache is
// laid out as qgen's (K, V each [pages][8 heads][64 tokens][256 B], 2 GiB each) and CTA
// (split, head) walks its contiguous page range in 16-token sub-tiles, as attend does.
// Variants: a linear streaming read (bench.c's kernel), the paged walk with plain 16-byte
// loads, and attend's producer/consumer ring (1 producer warp, 3 consumer warps that only
// wait and release) filled by cp.async into rows padded by 16 bytes (with and without the
// source-size operand, .cg and .ca) or by one 4 KiB bulk copy per tile.
//   nvcc -O3 -arch=sm_90a -std=c++17 -o copy_probe bench/copy_probe.cu
//   ./copy_probe            event timings, median of 22 after 3 warm-ups
//   ncu --metrics lts__t_sectors_srcunit_tex_op_read.sum,... ./copy_probe once
// Result on the H200 (bench/ncu/copy-probe-h200.txt): the padded cp.async ring asks the L2
// for 1.5x the sectors it reads and runs at 0.92x the plain read; the bulk ring at 0.99x.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda.h>
#include <cuda_runtime.h>
typedef unsigned long long u64;
typedef unsigned u32;
typedef unsigned char u8;
#define CK(x) do { cudaError_t e = (x); if (e) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)

constexpr int NKV = 8, BLOCK = 64, ROW = 256, SUB = 16, SPP = BLOCK / SUB, STAGES = 12, NC = 3;
constexpr int SROW = ROW + 16, TILE = SUB * SROW, TILE_U = SUB * ROW;

__device__ __forceinline__ u32 sa(const void *p) { return (u32)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(u64 *b, u32 c) { asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"(sa(b)), "r"(c) : "memory"); }
__device__ __forceinline__ void mbar_arrive(u64 *b) { asm volatile("mbarrier.arrive.shared.b64 _, [%0];" ::"r"(sa(b)) : "memory"); }
__device__ __forceinline__ void mbar_expect(u64 *b, u32 tx) { asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(sa(b)), "r"(tx) : "memory"); }
__device__ __forceinline__ void mbar_wait(u64 *b, u32 par) {
  u32 done;
  do asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(sa(b)), "r"(par) : "memory");
  while (!done);
}
template <int MODE> __device__ __forceinline__ void cp16(void *d, const void *s, int n) {
  if (MODE == 0) asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(sa(d)), "l"(s), "r"(n));
  else if (MODE == 1) asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa(d)), "l"(s));
  else asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" ::"r"(sa(d)), "l"(s));
}

// Streaming read, linear (bench.c's kernel).
__global__ void stream_lin(const uint4 *p, u64 n, u32 *sink) {
  const u64 stride = (u64)gridDim.x * blockDim.x;
  u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  u32 acc = 0;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 a = __ldcs(p + i), b = __ldcs(p + i + stride), c = __ldcs(p + i + 2 * stride), d = __ldcs(p + i + 3 * stride);
    acc ^= a.x ^ b.y ^ c.z ^ d.w ^ a.w ^ b.x ^ c.y ^ d.z;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

// Paged read with plain loads: each warp takes sub-tiles round-robin, 16 loads in flight a lane.
__global__ void paged_ldg(const u8 *k, const u8 *v, int pages, u32 *sink) {
  const int split = blockIdx.x, h = blockIdx.y, ns = gridDim.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const long p0 = (long)pages * split / ns, p1 = (long)pages * (split + 1) / ns;
  const int nsub = (int)(p1 - p0) * SPP;
  u32 acc = 0;
  for (int jt = warp; jt < nsub; jt += nw) {
    const long off = ((p0 + jt / SPP) * NKV + h) * (long)(BLOCK * ROW) + (jt % SPP) * SUB * ROW;
    uint4 x[16];
#pragma unroll
    for (int i = 0; i < 8; i++) x[i] = __ldcs((const uint4 *)(k + off) + lane + 32 * i);
#pragma unroll
    for (int i = 0; i < 8; i++) x[8 + i] = __ldcs((const uint4 *)(v + off) + lane + 32 * i);
#pragma unroll
    for (int i = 0; i < 16; i++) acc ^= x[i].x ^ x[i].w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

// attend's ring: 1 producer warp (cp.async, per-lane arrive.noinc) + NC consumer warps.
// MODE 0: cp.async with src-size (attend today), 1: without, 2: .ca, 3: one bulk copy per 4 KiB tile.
template <int MODE> __global__ void __launch_bounds__((NC + 1) * 32) paged_ring(const u8 *k, const u8 *v, int pages, u32 *sink) {
  extern __shared__ __align__(128) u8 smem[];
  __shared__ __align__(8) u64 full[STAGES], empty[STAGES];
  const int split = blockIdx.x, h = blockIdx.y, ns = gridDim.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  constexpr int STG = MODE == 3 ? 2 * TILE_U : 2 * TILE;
  if (threadIdx.x == 0)
    for (int s = 0; s < STAGES; s++) mbar_init(&full[s], MODE == 3 ? 1 : 32), mbar_init(&empty[s], 32);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncthreads();
  const long p0 = (long)pages * split / ns, p1 = (long)pages * (split + 1) / ns;
  const int nsub = (int)(p1 - p0) * SPP;
  if (warp == NC) {
    for (int jt = 0; jt < nsub; jt++) {
      const int si = jt % STAGES;
      if (jt >= STAGES) mbar_wait(&empty[si], (jt / STAGES + 1) & 1);
      const long off = ((p0 + jt / SPP) * NKV + h) * (long)(BLOCK * ROW) + (jt % SPP) * SUB * ROW;
      u8 *st = smem + si * STG;
      if (MODE == 3) {
        if (lane == 0) {
          mbar_expect(&full[si], 2 * TILE_U);
          asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(sa(st)), "l"(k + off), "r"(TILE_U), "r"(sa(&full[si])) : "memory");
          asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(sa(st + TILE_U)), "l"(v + off), "r"(TILE_U), "r"(sa(&full[si])) : "memory");
        }
      } else {
#pragma unroll
        for (int t = 0; t < 2; t++) {
          const u8 *src = (t ? v : k) + off;
#pragma unroll
          for (int kk = 0; kk < 8; kk++) {
            const int i = lane + 32 * kk, row = i / 16;
            cp16<MODE>(st + t * TILE + 16 * (i + row), src + 16 * i, 16);
          }
        }
        asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];" ::"r"(sa(&full[si])) : "memory");
      }
    }
  } else {
    u32 acc = 0;
    for (int jt = warp; jt < nsub; jt += NC) {
      const int si = jt % STAGES;
      mbar_wait(&full[si], (jt / STAGES) & 1);
      acc ^= *(const u32 *)(smem + si * STG + lane * 16);
      mbar_arrive(&empty[si]);
    }
    if (acc == 0x9e3779b9u) *sink = acc;
  }
}

int main(int argc, char **argv) {
  const int once = argc > 1;
  const long ctx = 1 << 20, pages = ctx / BLOCK;
  const size_t bytes = (size_t)pages * NKV * BLOCK * ROW; // per K or V
  u8 *k, *v;
  u32 *sink;
  CK(cudaMalloc(&k, bytes));
  CK(cudaMalloc(&v, bytes));
  CK(cudaMalloc(&sink, 4));
  CK(cudaMemset(k, 1, bytes));
  CK(cudaMemset(v, 2, bytes));
  int sms;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  auto timeit = [&](const char *name, auto launch) {
    std::vector<float> t;
    for (int r = 0; r < (once ? 1 : 25); r++) {
      cudaEventRecord(e0);
      launch();
      cudaEventRecord(e1);
      CK(cudaEventSynchronize(e1));
      float ms;
      cudaEventElapsedTime(&ms, e0, e1);
      if (r >= 3 || once) t.push_back(ms);
    }
    CK(cudaGetLastError());
    std::sort(t.begin(), t.end());
    const float ms = t[t.size() / 2];
    printf("%-28s %9.1f us  %6.2f TB/s\n", name, ms * 1e3, 2.0 * bytes / ms / 1e9);
  };
  timeit("stream_lin (2 x 2 GiB)", [&] {
    stream_lin<<<sms * 4, 512>>>((const uint4 *)k, bytes / 16, sink);
    stream_lin<<<sms * 4, 512>>>((const uint4 *)v, bytes / 16, sink);
  });
  for (int ns : {33, 66})
    for (int th : {128, 256}) {
      char nm[64];
      snprintf(nm, sizeof nm, "paged_ldg ns=%d th=%d", ns, th);
      timeit(nm, [&] { paged_ldg<<<dim3(ns, NKV), th>>>(k, v, (int)pages, sink); });
    }
  auto ring = [&](auto kern, const char *name, int stg) {
    const int sm = STAGES * stg;
    CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, sm));
    timeit(name, [&] { kern<<<dim3(33, NKV), (NC + 1) * 32, sm>>>(k, v, (int)pages, sink); });
  };
  ring(paged_ring<0>, "ring cp.async srcsize", 2 * TILE);
  ring(paged_ring<1>, "ring cp.async plain", 2 * TILE);
  ring(paged_ring<2>, "ring cp.async.ca", 2 * TILE);
  ring(paged_ring<3>, "ring bulk 4KiB", 2 * TILE_U);
  return 0;
}
