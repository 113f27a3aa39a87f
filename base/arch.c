/* arch.c — see arch.h. The numbers are NVIDIA's, from the CUDA C++ Programming Guide,
 * appendix "Compute Capabilities", table "Technical Specifications per Compute Capability"
 * (maximum shared memory per SM and per thread block, 32-bit registers per SM, maximum
 * resident threads and blocks per SM) and table "Feature Support per Compute Capability"
 * (cp.async from 8.0; FP8 tensor-core types from 8.9; thread-block clusters, distributed
 * shared memory, the Tensor Memory Accelerator's bulk copies and programmatic dependent
 * launch from 9.0). The 1 KiB of shared memory the system reserves for each resident block
 * is the same guide's (the "Shared Memory" sections of compute capabilities 8.x and 9.0:
 * the per-block maximum is the per-SM partition less 1 KB). The register and shared-memory
 * allocation units of qgen_arch_occupancy are those of the CUDA occupancy calculator
 * (cuda_occupancy.h): registers per warp in units of 256, four sub-partitions an SM, shared
 * memory in units of 128 bytes.
 */
#include "base/arch.h"

#include <string.h>

#define KIB 1024
#define AMPERE (QGEN_ARCH_CP_ASYNC)
#define ADA (QGEN_ARCH_CP_ASYNC | QGEN_ARCH_FP8_MMA)
#define HOPPER (QGEN_ARCH_CP_ASYNC | QGEN_ARCH_FP8_MMA | QGEN_ARCH_BULK | QGEN_ARCH_CLUSTER | QGEN_ARCH_PDL)

static const qgen_arch ARCHS[] = {
    {.sm = 80, .name = "sm_80", .gpus = "A100, A30", .smem_block = 163 * KIB, .smem_sm = 164 * KIB, .smem_reserved = KIB,
     .regs_sm = 65536, .threads_sm = 2048, .ctas_sm = 32, .features = AMPERE},
    {.sm = 86, .name = "sm_86", .gpus = "RTX 30xx, A10, A40, RTX A6000", .smem_block = 99 * KIB, .smem_sm = 100 * KIB,
     .smem_reserved = KIB, .regs_sm = 65536, .threads_sm = 1536, .ctas_sm = 16, .features = AMPERE},
    {.sm = 87, .name = "sm_87", .gpus = "Jetson AGX Orin", .smem_block = 163 * KIB, .smem_sm = 164 * KIB,
     .smem_reserved = KIB, .regs_sm = 65536, .threads_sm = 1536, .ctas_sm = 16, .features = AMPERE},
    {.sm = 89, .name = "sm_89", .gpus = "RTX 40xx, L4, L40S, RTX 6000 Ada", .smem_block = 99 * KIB, .smem_sm = 100 * KIB,
     .smem_reserved = KIB, .regs_sm = 65536, .threads_sm = 1536, .ctas_sm = 24, .features = ADA},
    {.sm = 90, .name = "sm_90", .gpus = "H100, H200, GH200", .smem_block = 227 * KIB, .smem_sm = 228 * KIB,
     .smem_reserved = KIB, .regs_sm = 65536, .threads_sm = 2048, .ctas_sm = 32, .features = HOPPER},
    {.sm = 100, .name = "sm_100", .gpus = "B200, GB200", .smem_block = 227 * KIB, .smem_sm = 228 * KIB,
     .smem_reserved = KIB, .regs_sm = 65536, .threads_sm = 2048, .ctas_sm = 32, .features = HOPPER},
    {.sm = 103, .name = "sm_103", .gpus = "B300, GB300", .smem_block = 227 * KIB, .smem_sm = 228 * KIB,
     .smem_reserved = KIB, .regs_sm = 65536, .threads_sm = 2048, .ctas_sm = 32, .features = HOPPER},
    {.sm = 110, .name = "sm_110", .gpus = "Jetson Thor", .smem_block = 227 * KIB, .smem_sm = 228 * KIB,
     .smem_reserved = KIB, .regs_sm = 65536, .threads_sm = 1536, .ctas_sm = 24, .features = HOPPER},
    {.sm = 120, .name = "sm_120", .gpus = "RTX 50xx, RTX PRO 6000 Blackwell", .smem_block = 99 * KIB,
     .smem_sm = 100 * KIB, .smem_reserved = KIB, .regs_sm = 65536, .threads_sm = 1536, .ctas_sm = 24, .features = HOPPER},
    {.sm = 121, .name = "sm_121", .gpus = "DGX Spark (GB10)", .smem_block = 99 * KIB, .smem_sm = 100 * KIB,
     .smem_reserved = KIB, .regs_sm = 65536, .threads_sm = 1536, .ctas_sm = 24, .features = HOPPER},
};
#define N_ARCHS ((int)(sizeof ARCHS / sizeof *ARCHS))

const qgen_arch *qgen_arch_of(int sm) {
  for (int i = 0; i < N_ARCHS; i++)
    if (ARCHS[i].sm == sm) return &ARCHS[i];
  return NULL;
}

const qgen_arch *qgen_arch_named(const char *name) {
  for (int i = 0; name && i < N_ARCHS; i++)
    if (!strcmp(ARCHS[i].name, name)) return &ARCHS[i];
  return NULL;
}

const qgen_arch *qgen_arch_at(int i) { return i >= 0 && i < N_ARCHS ? &ARCHS[i] : NULL; }

static int round_up(int x, int unit) { return (x + unit - 1) / unit * unit; }

int qgen_arch_occupancy(const qgen_arch *a, int threads, int regs, int smem) {
  if (!a || threads < 1 || threads > 1024 || regs < 0 || regs > 255 || smem < 0 || smem > a->smem_block) return 0;
  const int warps = (threads + 31) / 32;
  int n = a->ctas_sm;
  if (a->threads_sm / 32 / warps < n) n = a->threads_sm / 32 / warps;
  if (regs > 0) { /* each of the 4 sub-partitions holds whole warps' registers */
    const int per_warp = round_up(regs * 32, 256), part = a->regs_sm / 4 / per_warp;
    if (4 * part / warps < n) n = 4 * part / warps;
  }
  const int per_cta = round_up(smem, 128) + a->smem_reserved;
  if (a->smem_sm / per_cta < n) n = a->smem_sm / per_cta;
  return n;
}
