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

/* SwiGLU's gate: silu(g) = g * trn_sigmoid(g) (the one formula of the
 * kernels that compute it, so they give the same bits). */
__device__ __forceinline__ float
trn_sigmoid(float g)
{
    return 1.0f / (1.0f + expf(-g));
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

/* trn_cp16 with an L2 cache policy (trn_l2_evict_first). */
__device__ __forceinline__ void
trn_cp16_hint(void *dst, const void *src, bool ok, uint64_t pol)
{
    uint32_t a = (uint32_t) __cvta_generic_to_shared(dst);
    asm volatile(
        "cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::
            "r"(a),
        "l"(src), "r"(ok ? 16 : 0), "l"(pol));
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

/* ---- bulk copies counted on a shared-memory barrier (sm_90) ------------
 * A barrier of `count` arrivals whose phase also waits for the bytes
 * announced on it; cp.async.bulk (the copy engine: no registers held)
 * counts its bytes off on completion. Shared addresses are 32-bit
 * (__cvta_generic_to_shared). */
__device__ __forceinline__ void
trn_mbar_init(uint32_t bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar),
                 "r"(count)
                 : "memory");
}

/* Makes the barriers this thread initialised visible to the copy engine. */
__device__ __forceinline__ void
trn_mbar_init_fence(void)
{
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/* Announces tx bytes more for the barrier's phase, and arrives. */
__device__ __forceinline__ void
trn_mbar_arrive_tx(uint32_t bar, unsigned tx)
{
    asm volatile(
        "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
        "r"(tx)
        : "memory");
}

/* Waits for the barrier's phase of this parity to complete. */
__device__ __forceinline__ void
trn_mbar_wait(uint32_t bar, uint32_t parity)
{
    asm volatile("{\n.reg .pred p;\n"
                 "TRN_MBAR_WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra TRN_MBAR_WAIT;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}

/* bytes (a multiple of 16; both addresses 16-byte aligned) global ->
 * shared, counted on bar. */
__device__ __forceinline__ void
trn_bulk_g2s(uint32_t dst, const void *src, unsigned bytes, uint32_t bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx"
                 "::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}

/* An L2 policy that marks the lines an access brings in to leave first
 * (data read once, such as a decode step's weights). Its encoding is not
 * 0, which callers take for no policy. */
__device__ __forceinline__ uint64_t
trn_l2_evict_first(void)
{
    uint64_t pol;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n"
                 : "=l"(pol));
    return pol;
}

/* trn_bulk_g2s with an L2 cache policy (trn_l2_evict_first). */
__device__ __forceinline__ void
trn_bulk_g2s_hint(uint32_t dst, const void *src, unsigned bytes, uint32_t bar,
                  uint64_t pol)
{
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx"
        "::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n" ::"r"(dst),
        "l"(src), "r"(bytes), "r"(bar), "l"(pol)
        : "memory");
}

/* ---- programmatic dependent launch (decode steps) -----------------------
 * A kernel launched with trn_launch_pdl may start while the kernel before
 * it on the stream is still finishing, so its blocks are resident when
 * that one's last blocks end: a decode step is hundreds of short kernels,
 * and this hides each one's launch and ramp. Such a kernel calls
 * trn_pdl_enter() before it reads anything an earlier kernel wrote and
 * before it writes anything; before that it may only read what the
 * kernel just before it cannot write (weights: only the optimizer, weight
 * loads and collectives write them, and none of those lets its successor
 * start early). trn_pdl_enter() waits for the previous kernel to finish
 * and then lets the next one start; since every such kernel waits before
 * it lets its successor in, a kernel never overlaps more than the one
 * before it. On a plain launch both are no-ops. */
__device__ __forceinline__ void
trn_pdl_enter(void)
{
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

/* Whether launches may overlap (LISA_CUDA_PDL=0 turns it off; read once). */
int trn_pdl_on(void);

/* Multiprocessors of the current device (asked once per process, which
 * drives one device; 132 when the device does not say). */
int trn_sm_count(void);

/* trn_k_attn_fwd at head_dim 128 on Hopper's asynchronous tensor cores
 * (trn_k_attn_h.cu, sm_90a): the same arguments and outputs; the caller
 * checks the device is of compute capability 9.x. */
lisa_rc_t trn_k_attn_fwd_h(trn_bf16_t *o, float *lse, const trn_bf16_t *q,
                           const trn_bf16_t *k, const trn_bf16_t *v, int stride,
                           const int32_t *seg, int T, int H, int Hk,
                           cudaStream_t st);

/* trn_k_attn_prefill at head_dim 128 on Hopper's asynchronous tensor
 * cores (trn_k_attn_h.cu): the same arguments and output; the caller
 * checks the device (trn_attn_hopper). */
lisa_rc_t trn_k_attn_prefill_h(trn_bf16_t *o, const trn_bf16_t *q, int stride,
                               const trn_bf16_t *cache_k,
                               const trn_bf16_t *cache_v, trn_kv_pages_t pg,
                               const trn_prefill_tile_t *tiles, int ntiles,
                               int H, int Hk, cudaStream_t st);

/* Whether head_dim-128 attention forward passes run on the Hopper kernels
 * (trn_k_attn.cu: compute capability 9.x, LISA_ATTN_PORTABLE unset). */
bool trn_attn_hopper(void);

/* The main kernel of trn_k_attn_bwd at head_dim 128 on Hopper's
 * asynchronous tensor cores (trn_k_attn_hb.cu, sm_90a): dk and dv written,
 * dq added unscaled into dq_acc, from Delta (see trn_k_attn_bwd); the
 * caller checks the device is of compute capability 9.x. */
lisa_rc_t trn_k_attn_bwd_h(trn_bf16_t *dk, trn_bf16_t *dv, int dstride,
                           float *dq_acc, const float *delta,
                           const trn_bf16_t *dout, const float *lse,
                           const trn_bf16_t *q, const trn_bf16_t *k,
                           const trn_bf16_t *v, int stride, const int32_t *seg,
                           int T, int H, int Hk, cudaStream_t st);

/* ---- thread block clusters (sm_90) ---------------------------------------
 * A kernel launched with a cluster of n blocks (trn_launch_pdl_cl) may
 * read its cluster's other blocks' shared memory. Without one, a block is
 * a cluster of one. */
__device__ __forceinline__ unsigned
trn_cluster_rank(void)
{
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}

__device__ __forceinline__ unsigned
trn_cluster_size(void)
{
    unsigned n;
    asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(n));
    return n;
}

/* Every thread of every block of the cluster; what a thread wrote to
 * shared memory before it is visible to the cluster after it. */
__device__ __forceinline__ void
trn_cluster_sync(void)
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;\n" ::
                     : "memory");
}

/* The float at p (this block's shared memory) in block `rank` of the
 * cluster. */
__device__ __forceinline__ float
trn_ld_cluster(const float *p, unsigned rank)
{
    uint32_t a = (uint32_t) __cvta_generic_to_shared(p), ra;
    float v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
                 : "=r"(ra)
                 : "r"(a), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];\n"
                 : "=f"(v)
                 : "r"(ra)
                 : "memory");
    return v;
}

/* Launches kernel k<<<grid, block, smem, st>>>(args...) in clusters of
 * cluster.x * cluster.y * cluster.z blocks (one: none), allowed to start
 * before the previous kernel on st ends (see trn_pdl_enter). */
template <typename... P, typename... A>
static inline cudaError_t
trn_launch_pdl_cl(void (*k)(P...), dim3 grid, dim3 block, size_t smem,
                  cudaStream_t st, dim3 cluster, A... args)
{
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[2];
    unsigned n = 0;
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    if (trn_pdl_on()) {
        at[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[n++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster.x * cluster.y * cluster.z > 1) {
        at[n].id = cudaLaunchAttributeClusterDimension;
        at[n].val.clusterDim.x = cluster.x;
        at[n].val.clusterDim.y = cluster.y;
        at[n++].val.clusterDim.z = cluster.z;
    }
    cfg.attrs = at;
    cfg.numAttrs = n;
    return cudaLaunchKernelEx(&cfg, k, static_cast<P>(args)...);
}

/* Launches kernel k<<<grid, block, smem, st>>>(args...), allowed to start
 * before the previous kernel on st ends (see trn_pdl_enter). */
template <typename... P, typename... A>
static inline cudaError_t
trn_launch_pdl(void (*k)(P...), dim3 grid, dim3 block, size_t smem,
               cudaStream_t st, A... args)
{
    return trn_launch_pdl_cl(k, grid, block, smem, st, dim3(1), args...);
}

#endif
