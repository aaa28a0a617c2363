/*
 * trn_cuda_mma: tensor-core fragments shared by the attention kernels
 * (training and decode): mma.sync m16n8k16 in bf16 with fp32
 * accumulators, and ldmatrix loads of its operands from shared memory.
 */
#ifndef TRN_CUDA_MMA_CUH
#define TRN_CUDA_MMA_CUH

#include <cuda_bf16.h>
#include <stdint.h>

/* Fragment layout of mma.sync m16n8k16 (PTX ISA): lane = 4*g + t; A holds
 * rows g and g+8, columns 2t, 2t+1 (+8); B holds k rows 2t, 2t+1 (+8),
 * column g; C holds rows g, g+8, columns 2t, 2t+1. The accumulator layout
 * of one product is the A operand layout of the next. Shared-memory tiles
 * are row-major with rows padded by 8 elements: the eight 16-byte rows one
 * ldmatrix phase reads then fall in distinct banks. */

__device__ __forceinline__ void
trn_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0),
                   "r"(b1));
}

__device__ __forceinline__ uint32_t
trn_pack2(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

/* Four 8x8 bf16 tiles of shared memory into registers (ldmatrix): lane j
 * names row j % 8 of tile j / 8; register i receives tile i with lane
 * 4r + c holding (row r, columns 2c, 2c+1). */
__device__ __forceinline__ void
trn_ldsm(uint32_t r[4], const __nv_bfloat16 *p)
{
    uint32_t a = (uint32_t) __cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 "
                 "{%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* The same, transposed: register i receives the elements (2(j%4), j/4)
 * and (2(j%4)+1, j/4) of tile i, which is the B fragment of m16n8k16 for a
 * row-major [k][n] tile (and the A fragment for a [k][m] one). */
__device__ __forceinline__ void
trn_ldsm_t(uint32_t r[4], const __nv_bfloat16 *p)
{
    uint32_t a = (uint32_t) __cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 "
                 "{%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* A fragment (16 rows from row m0, k-step kk) of a row-major [m][k] tile. */
__device__ __forceinline__ void
trn_ldsm_a(uint32_t a[4], const __nv_bfloat16 *base, int ld, int m0, int kk,
           int lane)
{
    trn_ldsm(a, base + (m0 + (lane & 15)) * ld + kk * 16 + (lane >> 4) * 8);
}

/* B fragments of n-tiles n and n+1 at k-step kk from a row-major [n][k]
 * tile (B = the tile transposed, as K in Q K^T): b[0], b[1] for n; b[2],
 * b[3] for n + 1. */
__device__ __forceinline__ void
trn_ldsm_bn(uint32_t b[4], const __nv_bfloat16 *base, int ld, int kk, int n,
            int lane)
{
    const int m = lane >> 3, row = lane & 7;
    trn_ldsm(b, base + ((n + (m >> 1)) * 8 + row) * ld + kk * 16 + (m & 1) * 8);
}

/* B fragments of n-tiles n and n+1 at k-step kk from a row-major [k][n]
 * tile (as V in P V): b[0], b[1] for n; b[2], b[3] for n + 1. */
__device__ __forceinline__ void
trn_ldsm_b2(uint32_t b[4], const __nv_bfloat16 *base, int ld, int kk, int n,
            int lane)
{
    const int m = lane >> 3, row = lane & 7;
    trn_ldsm_t(b,
               base + (kk * 16 + (m & 1) * 8 + row) * ld + (n + (m >> 1)) * 8);
}

#endif
