// bounds_probe.cu — does the access pattern bound estimate.cu's read of the Quest bounds?
// A standalone measurement behind bench/NOTES.md 31 (not part of the build). The bounds are
// laid out as qgen's: one 512-byte row [kmin | kmax] (head_dim 128, f16) per page and KV
// head, [pages][8 heads][row]; 16384 pages (1M tokens at block 64) = 67 MB, two copies
// alternated so the 60 MB L2 serves nothing. Every variant reads every byte once, keeps a
// round of loads in flight while it consumes the previous one (as estimate does) and folds
// what it read into one word per warp (so nothing is optimized away):
//   linear      grid-stride 16-byte loads over the whole array (the practical floor)
//   estimate    grid (64, 8 heads) x 128 threads, a CTA 256 pages of one head in 4 rounds of
//               16 pages a warp; lane (g, j) loads 16 bytes at 64 t + 16 j of the rows of
//               pages g and g + 8 (t < 8): one load instruction takes 64 bytes of 8 pages
//   row-major   the same grid and rounds, but load instruction i takes the whole row of
//               page i of the warp's 16 (lane l: bytes 16 l .. 16 l + 15)
//   all-heads   grid 512 x 128 threads, a CTA 32 pages x all 8 heads (4 KiB contiguous a
//               page), a warp 2 pages x 8 heads a round, one instruction = one row
//   nvcc -O3 -arch=sm_90 -o bounds_probe bench/bounds_probe.cu && ./bounds_probe
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>
typedef unsigned u32;
#define CK(x) do { cudaError_t e = (x); if (e) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)

constexpr int PAGES = 16384, HEADS = 8, ROW = 512, ROUNDS = 4, PER_CTA = 256;
constexpr size_t BYTES = (size_t)PAGES * HEADS * ROW;

__device__ __forceinline__ uint4 ld(const uint4 *p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ u32 fold(const uint4 &v) { return v.x ^ v.y ^ v.z ^ v.w; }
__device__ __forceinline__ const uint4 *row(const char *b, int page, int head) {
  return (const uint4 *)(b + ((size_t)page * HEADS + head) * ROW);
}

__global__ void linear(const char *b, u32 *out) {
  const uint4 *p = (const uint4 *)b;
  const size_t n = BYTES / 16, stride = (size_t)gridDim.x * blockDim.x * 8;
  u32 acc = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += stride) {
    uint4 v[8];
#pragma unroll
    for (int u = 0; u < 8; u++) v[u] = i + (size_t)u * gridDim.x * blockDim.x < n ? ld(p + i + (size_t)u * gridDim.x * blockDim.x) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < 8; u++) acc ^= fold(v[u]);
  }
  if (acc == 0x12345678u) out[0] = acc;
}

// ROUNDS rounds of 16 loads a lane, the next round's in flight while this one is folded.
template <typename Load> __device__ __forceinline__ u32 walk(Load load) {
  uint4 cur[16], nxt[16];
  load(0, cur);
  u32 acc = 0;
  for (int r = 0; r < ROUNDS; r++) {
    if (r + 1 < ROUNDS) load(r + 1, nxt);
#pragma unroll
    for (int i = 0; i < 16; i++) acc ^= fold(cur[i]);
#pragma unroll
    for (int i = 0; i < 16; i++) cur[i] = nxt[i];
  }
  return acc;
}

// MODE 0: estimate's lanes (64 bytes of 8 pages an instruction); MODE 1: a row an instruction.
template <int MODE> __global__ void per_head(const char *b, u32 *out) {
  const int h = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, j = lane & 3;
  const int p0 = blockIdx.x * PER_CTA + warp * 16;
  const u32 acc = walk([&](int r, uint4 (&v)[16]) {
    const int base = p0 + r * 64;
#pragma unroll
    for (int i = 0; i < 16; i++) {
      if (MODE == 0) v[i] = ld(row(b, base + g + 8 * (i >> 3), h) + 4 * (i & 7) + j); // i < 8: page g, else g + 8
      else v[i] = ld(row(b, base + i, h) + lane);
    }
  });
  if (acc == 0x12345678u) out[blockIdx.x] = acc;
}

__global__ void all_heads(const char *b, u32 *out) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int p0 = blockIdx.x * 32 + warp * 8; // a warp: 8 pages in 4 rounds of 2 pages x 8 heads
  const u32 acc = walk([&](int r, uint4 (&v)[16]) {
#pragma unroll
    for (int i = 0; i < 16; i++) v[i] = ld(row(b, p0 + 2 * r + (i >> 3), i & 7) + lane);
  });
  if (acc == 0x12345678u) out[blockIdx.x] = acc;
}

int main() {
  char *buf[2];
  u32 *out;
  for (int k = 0; k < 2; k++) {
    CK(cudaMalloc(&buf[k], BYTES));
    CK(cudaMemset(buf[k], 0x5a + k, BYTES)); // not zeros (METHOD.md)
  }
  CK(cudaMalloc(&out, 1 << 20));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  static_assert(PAGES % PER_CTA == 0 && PAGES % 256 == 0, "whole CTAs");
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const char *names[] = {"linear", "estimate", "row-major", "all-heads"};
  for (int v = 0; v < 4; v++) {
    std::vector<float> t;
    for (int it = 0; it < 25; it++) {
      const char *b = buf[it & 1];
      CK(cudaEventRecord(e0));
      if (v == 0) linear<<<sms * 4, 256>>>(b, out);
      else if (v == 1) per_head<0><<<dim3(PAGES / PER_CTA, HEADS), 128>>>(b, out);
      else if (v == 2) per_head<1><<<dim3(PAGES / PER_CTA, HEADS), 128>>>(b, out);
      else all_heads<<<PAGES / 32, 128>>>(b, out);
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      CK(cudaGetLastError());
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (it >= 3) t.push_back(ms * 1e3f);
    }
    std::sort(t.begin(), t.end());
    const float med = t[t.size() / 2];
    printf("%-10s %8.2f us  %6.2f TB/s  (%zu bytes, median of %zu)\n", names[v], med, BYTES / med / 1e6, BYTES, t.size());
  }
  return 0;
}
