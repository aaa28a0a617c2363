/*
 * Shared helpers of the trainer's CUDA kernels (device side only).
 */
#ifndef TRN_CUDA_COMMON_CUH
#define TRN_CUDA_COMMON_CUH

#include "trn_cuda.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>

#define TRN_CEIL_DIV(a, b) (((a) + (b) -1) / (b))

/* Logs a CUDA error with its place and returns from the launcher. */
#define TRN_CUDA_TRY(call)                                                     \
    do {                                                                       \
        cudaError_t e_ = (call);                                               \
        if (e_ != cudaSuccess) {                                               \
            fprintf(stderr, "trainer: CUDA error %s at %s:%d: %s\n",           \
                    cudaGetErrorName(e_), __FILE__, __LINE__,                  \
                    cudaGetErrorString(e_));                                   \
            return LISA_ERR;                                                   \
        }                                                                      \
    } while (0)

/* After a launch: the launch error, if any. */
#define TRN_LAUNCH_CHECK() TRN_CUDA_TRY(cudaGetLastError())

/* Argument checks of a launcher: bad arguments are the caller's error. */
#define TRN_REQUIRE(cond)                                                      \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "trainer: bad kernel argument (%s) at %s:%d\n",    \
                    #cond, __FILE__, __LINE__);                                \
            return LISA_INVALID;                                               \
        }                                                                      \
    } while (0)

static inline cudaStream_t
trn_stream(trn_cuda_stream_t *s)
{
    return (cudaStream_t) s;
}

__device__ __forceinline__ float
trn_ld(const trn_bf16_t *p)
{
    return __bfloat162float(*reinterpret_cast<const __nv_bfloat16 *>(p));
}

__device__ __forceinline__ void
trn_st(trn_bf16_t *p, float v)
{
    *reinterpret_cast<__nv_bfloat16 *>(p) = __float2bfloat16_rn(v);
}

/* Rounds v to the nearest bf16 value, kept as a float. */
__device__ __forceinline__ float
trn_round_bf16(float v)
{
    return __bfloat162float(__float2bfloat16_rn(v));
}

__device__ __forceinline__ float
trn_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float
trn_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over a block of up to 1024 threads; every thread gets the result.
 * `shm` must hold 32 floats. */
__device__ __forceinline__ float
trn_block_sum(float v, float *shm)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int nwarps = (blockDim.x + 31) >> 5;
    v = trn_warp_sum(v);
    __syncthreads();
    if (lane == 0)
        shm[warp] = v;
    __syncthreads();
    v = lane < nwarps ? shm[lane] : 0.0f;
    return trn_warp_sum(v);
}

__device__ __forceinline__ float
trn_block_max(float v, float *shm)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int nwarps = (blockDim.x + 31) >> 5;
    v = trn_warp_max(v);
    __syncthreads();
    if (lane == 0)
        shm[warp] = v;
    __syncthreads();
    v = lane < nwarps ? shm[lane] : -INFINITY;
    return trn_warp_max(v);
}

/* 16 bytes global -> shared without registers (cp.async); zeros where
 * !ok. Both addresses 16-byte aligned. */
__device__ __forceinline__ void
trn_cp16(void *dst, const void *src, bool ok = true)
{
    uint32_t a = (uint32_t) __cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a),
                 "l"(src), "r"(ok ? 16 : 0));
}

/* Closes this thread's current group of copies. */
__device__ __forceinline__ void
trn_cp_commit(void)
{
    asm volatile("cp.async.commit_group;\n" ::);
}

/* Waits until at most N of this thread's copy groups are in flight. */
template <int N>
__device__ __forceinline__ void
trn_cp_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

#endif
