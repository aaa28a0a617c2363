/*
 * trn_cuda_wgmma: what the sm_90a kernels need to drive Hopper's
 * asynchronous tensor cores (wgmma): shared-memory matrix descriptors for
 * the 128-byte swizzle, cp.async into swizzled tiles, and the fence /
 * commit / wait steps of a warpgroup's products. Included only by files
 * built for sm_90a.
 *
 * Swizzled tile: a tile of R rows x 128 bf16 columns is two halves of 64
 * columns, each R rows of 128 bytes whose 16-byte chunk c of row r sits at
 * chunk c ^ (r % 8); 8-row atoms are 1 KiB apart and the tile starts on a
 * 1 KiB boundary. Read K-major (the contraction along a row) the
 * descriptor's start advances 32 bytes a k-step of 16; read MN-major (the
 * contraction down the rows) it advances 2 KiB a k-step, the leading
 * offset naming the distance between 64-column halves.
 */
#ifndef TRN_CUDA_WGMMA_CUH
#define TRN_CUDA_WGMMA_CUH

#include "trn_cuda.h"

#include <stdint.h>

__device__ __forceinline__ uint32_t
trn_wg_saddr(const void *p)
{
    return (uint32_t) __cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared address a (cp.async); zeros where !ok. */
__device__ __forceinline__ void
trn_wg_cp16(uint32_t a, const void *src, bool ok)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a),
                 "l"(src), "r"(ok ? 16 : 0));
}

/* 4 bytes global -> shared address a (cp.async); zeros where !ok. */
__device__ __forceinline__ void
trn_wg_cp4(uint32_t a, const void *src, bool ok)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(a),
                 "l"(src), "r"(ok ? 4 : 0));
}

/* Rows r0.. (R of them) of a [T][st] bf16 matrix, columns 0..127 of src,
 * into the swizzled tile at dst (rows at or past T are zeros), by
 * threads tid of NTH. */
template <int R, int NTH>
__device__ __forceinline__ void
trn_wg_load(uint32_t dst, const trn_bf16_t *src, size_t st, int r0, int T,
            int tid)
{
    static_assert(R * 16 % NTH == 0, "whole rounds of copies");
#pragma unroll
    for (int j = 0; j < R * 16 / NTH; j++) {
        const int i = tid + j * NTH, r = i >> 4, c = i & 15;
        const bool ok = r0 + r < T;
        const trn_bf16_t *p = src + (size_t) (ok ? r0 + r : 0) * st + c * 8;
        trn_wg_cp16(dst + (c >> 3) * (R * 128) + r * 128 +
                        (((c & 7) ^ (r & 7)) << 4),
                    p, ok);
    }
}

/* Descriptor of the swizzled matrix at addr: 128-byte swizzle, 8-row
 * atoms 1 KiB apart, `lbo` bytes between 64-column halves (MN-major). */
__device__ __forceinline__ uint64_t
trn_wg_desc(uint32_t addr, uint32_t lbo)
{
    return (uint64_t) ((addr & 0x3FFFFu) >> 4) | ((uint64_t) (lbo >> 4) << 16) |
           ((uint64_t) (1024 >> 4) << 32) | (1ull << 62);
}

/* Orders this thread's register writes before the products issued next
 * (before the first product and whenever an operand register changed). */
__device__ __forceinline__ void
trn_wg_fence(void)
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void
trn_wg_commit(void)
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

/* Makes this thread's ordinary shared-memory writes (and landed cp.async
 * copies) visible to the tensor cores' reads; a barrier then publishes
 * them to the warpgroup. */
__device__ __forceinline__ void
trn_wg_proxy_fence(void)
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* Waits until at most N groups of products are in flight. */
template <int N>
__device__ __forceinline__ void
trn_wg_wait(void)
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/* After a wait: the compiler may read d (written by finished products)
 * only from here on. */
template <int M>
__device__ __forceinline__ void
trn_wg_touch(float (&d)[M])
{
#pragma unroll
    for (int i = 0; i < M; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}

/* Keeps A fragments of products in flight alive until their wait. */
template <int M>
__device__ __forceinline__ void
trn_wg_keep(uint32_t (&p)[M])
{
#pragma unroll
    for (int i = 0; i < M; i++)
        asm volatile("" : "+r"(p[i])::"memory");
}

#define TRN_WG_D32                                                             \
    "{%0, %1, %2, %3, %4, %5, %6, %7, "                                        \
    "%8, %9, %10, %11, %12, %13, %14, %15, "                                   \
    "%16, %17, %18, %19, %20, %21, %22, %23, "                                 \
    "%24, %25, %26, %27, %28, %29, %30, %31}"
#define TRN_WG_D64                                                             \
    "{%0, %1, %2, %3, %4, %5, %6, %7, "                                        \
    "%8, %9, %10, %11, %12, %13, %14, %15, "                                   \
    "%16, %17, %18, %19, %20, %21, %22, %23, "                                 \
    "%24, %25, %26, %27, %28, %29, %30, %31, "                                 \
    "%32, %33, %34, %35, %36, %37, %38, %39, "                                 \
    "%40, %41, %42, %43, %44, %45, %46, %47, "                                 \
    "%48, %49, %50, %51, %52, %53, %54, %55, "                                 \
    "%56, %57, %58, %59, %60, %61, %62, %63}"
#define TRN_WG_F8(i)                                                           \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]),                \
        "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define TRN_WG_F32 TRN_WG_F8(0), TRN_WG_F8(8), TRN_WG_F8(16), TRN_WG_F8(24)
#define TRN_WG_F64                                                             \
    TRN_WG_F32, TRN_WG_F8(32), TRN_WG_F8(40), TRN_WG_F8(48), TRN_WG_F8(56)

/* d (+)= A B, m64n64k16, both operands in shared memory; TA, TB: read
 * MN-major (transposed); d is overwritten when !acc. */
template <int TA, int TB>
__device__ __forceinline__ void
trn_wg_ss64(float (&d)[32], uint64_t da, uint64_t db, int acc)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " TRN_WG_D32
        ", %32, %33, p, 1, 1, %35, %36;\n}\n"
        : TRN_WG_F32
        : "l"(da), "l"(db), "r"(acc), "n"(TA), "n"(TB));
}

/* d += A B, m64n128k16: A from registers (the m16n8k16 A fragment of the
 * warp's 16 rows), B (16 x 128) MN-major in shared memory. */
__device__ __forceinline__ void
trn_wg_rs128(float (&d)[64], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
             uint64_t db)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " TRN_WG_D64
        ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : TRN_WG_F64
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db), "r"(1));
}

#endif
