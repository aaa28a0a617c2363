/*
 * trn_k_qk: Qwen3's per-head q/k RMSNorm and RoPE as one pass each way for
 * the training path (without norm weights, as Llama and Qwen2 have none,
 * RoPE alone: the raw head is rotated, and the backward rotates back).
 *
 * Forward: from the fused q|k|v rows the product wrote to the rows the
 * attention reads (queries and keys normed and rotated, values copied) in
 * one read and one write of the rows, with the same values as
 * trn_k_rmsnorm_fwd then trn_k_rope (same summation order for the sums of
 * squares, same rounding points; every product of the rotation is of two
 * bf16 values, hence exact in fp32, so the results match bit for bit).
 * Backward: the inverse rotation then the norm's backward, in place on the
 * q and k gradients, with the weights' gradients summed in registers and
 * added once per block.
 *
 * A block walks tokens; each token's cosines and sines are computed once
 * into shared memory; a warp takes a head row at a time (two rows' loads
 * in flight), lane l holding the row's values l, l + 32, ... as
 * trn_k_norm's kernels walk them, so a rotation pair (i, i + D/2) sits in
 * one lane for D >= 64 and in lanes l and l ^ D/2 below.
 */
#include "trn_cuda_common.cuh"

#include <stdint.h>

#define S_WARPS   8
#define S_ROWS    2    /* head rows a warp loads at once */
#define S_BWD_MAX 1024 /* most blocks of the backward (one dw add each) */

/* The token's cos and sin (sin negated when `inverse`) for i < D/2, as
 * trn_k_rope computes them. */
template <int D>
__device__ __forceinline__ void
s_angles(float *sc, float *ss, int p, float theta, int inverse)
{
    int i = threadIdx.x;
    if (i < D / 2) {
        float inv_freq = 1.0f / powf(theta, (float) (2 * i) / (float) D);
        float ang = (float) p * inv_freq;
        float c = trn_round_bf16(cosf(ang));
        float sn = trn_round_bf16(sinf(ang));
        sc[i] = c;
        ss[i] = inverse ? -sn : sn;
    }
}

/* Rotates a lane's values v[e] (row positions lane + 32e) by the token's
 * angles: pairs (i, i + D/2) as trn_k_rope pairs them. */
template <int D, int E>
__device__ __forceinline__ void
s_rotate(float (&v)[E], const float *sc, const float *ss, int lane)
{
    if (E >= 2) {
#pragma unroll
        for (int e = 0; e < E / 2; e++) {
            int i = lane + 32 * e;
            float c = sc[i], sn = ss[i];
            float x1 = v[e], x2 = v[e + E / 2];
            v[e] = x1 * c - x2 * sn;
            v[e + E / 2] = x2 * c + x1 * sn;
        }
    } else {
        const int half = D / 2;
        float other = __shfl_xor_sync(0xffffffffu, v[0], half);
        if (lane < D) {
            if (lane < half)
                v[0] = v[0] * sc[lane] - other * ss[lane];
            else
                v[0] = v[0] * sc[lane - half] + other * ss[lane - half];
        }
    }
}

/* Copies n bf16 values, 16 bytes at a time when `vec`. */
__device__ __forceinline__ void
s_copy(trn_bf16_t *dst, const trn_bf16_t *src, int n, int vec)
{
    if (vec) {
        const uint4 *s4 = reinterpret_cast<const uint4 *>(src);
        uint4 *d4 = reinterpret_cast<uint4 *>(dst);
        for (int i = threadIdx.x; i < n / 8; i += blockDim.x)
            d4[i] = s4[i];
    } else {
        for (int i = threadIdx.x; i < n; i += blockDim.x)
            dst[i] = src[i];
    }
}

/* This lane's values of the q and k norm weights (lane + 32 e). */
template <int D, int E>
__device__ __forceinline__ void
s_norm_weights(float (&wq)[E], float (&wk)[E], const trn_bf16_t *qw,
               const trn_bf16_t *kw, int lane)
{
#pragma unroll
    for (int e = 0; e < E; e++) {
        int j = lane + 32 * e;
        wq[e] = j < D && qw ? trn_ld(qw + j) : 0.0f;
        wk[e] = j < D && kw ? trn_ld(kw + j) : 0.0f;
    }
}

template <int D>
__global__ void __launch_bounds__(32 * S_WARPS)
    s_qk_fwd(trn_bf16_t *out, const trn_bf16_t *in, int stride, float *rstdq,
             float *rstdk, const trn_bf16_t *qw, const trn_bf16_t *kw,
             const int32_t *pos, int T, int H, int Hk, float eps, float theta,
             int copy_v, int vec)
{
    constexpr int E = D >= 32 ? D / 32 : 1;
    __shared__ float sc[D / 2], ss[D / 2];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, NR = H + Hk;
    float wq[E], wk[E];
    s_norm_weights<D, E>(wq, wk, qw, kw, lane);
    for (int t = blockIdx.x; t < T; t += gridDim.x) {
        __syncthreads(); /* the previous token's angles are used */
        s_angles<D>(sc, ss, pos[t], theta, 0);
        __syncthreads();
        const trn_bf16_t *src = in + (size_t) t * (size_t) stride;
        trn_bf16_t *dst = out + (size_t) t * (size_t) stride;
        if (copy_v)
            s_copy(dst + (size_t) NR * D, src + (size_t) NR * D, Hk * D, vec);
        for (int h0 = warp; h0 < NR; h0 += S_WARPS * S_ROWS) {
            float x[S_ROWS][E];
#pragma unroll
            for (int r = 0; r < S_ROWS; r++) {
                int hh = h0 + r * S_WARPS;
#pragma unroll
                for (int e = 0; e < E; e++) {
                    int j = lane + 32 * e;
                    x[r][e] = hh < NR && j < D
                                  ? trn_ld(src + (size_t) hh * D + j)
                                  : 0.0f;
                }
            }
#pragma unroll
            for (int r = 0; r < S_ROWS; r++) {
                int hh = h0 + r * S_WARPS;
                if (hh >= NR)
                    break; /* warp-uniform */
                int isq = hh < H;
                float sum = 0.0f;
#pragma unroll
                for (int e = 0; e < E; e++)
                    sum += x[r][e] * x[r][e];
                sum = trn_warp_sum(sum);
                float rs = rsqrtf(sum / (float) D + eps);
                if (lane == 0) {
                    if (isq)
                        rstdq[(size_t) t * H + hh] = rs;
                    else
                        rstdk[(size_t) t * Hk + (hh - H)] = rs;
                }
                float y[E];
#pragma unroll
                for (int e = 0; e < E; e++)
                    y[e] = !qw ? x[r][e] /* no q/k norm (Llama, Qwen2) */
                               : trn_round_bf16((isq ? wq[e] : wk[e]) *
                                                trn_round_bf16(x[r][e] * rs));
                s_rotate<D, E>(y, sc, ss, lane);
                trn_bf16_t *o = dst + (size_t) hh * D;
#pragma unroll
                for (int e = 0; e < E; e++) {
                    int j = lane + 32 * e;
                    if (j < D)
                        trn_st(o + j, y[e]);
                }
            }
        }
    }
}

template <int D>
__global__ void __launch_bounds__(32 * S_WARPS)
    s_qk_bwd(trn_bf16_t *dqkv, int stride, float *dwq, float *dwk,
             const trn_bf16_t *qkv, const trn_bf16_t *qw, const trn_bf16_t *kw,
             const float *rstdq, const float *rstdk, const int32_t *pos, int T,
             int H, int Hk, float theta)
{
    constexpr int E = D >= 32 ? D / 32 : 1;
    __shared__ float sc[D / 2], ss[D / 2], sdw[2][D];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, NR = H + Hk;
    for (int j = threadIdx.x; j < 2 * D; j += blockDim.x)
        sdw[j / D][j % D] = 0.0f;
    float wq[E], wk[E], aq[E], ak[E];
    s_norm_weights<D, E>(wq, wk, qw, kw, lane);
#pragma unroll
    for (int e = 0; e < E; e++)
        aq[e] = ak[e] = 0.0f;
    for (int t = blockIdx.x; t < T; t += gridDim.x) {
        __syncthreads();
        s_angles<D>(sc, ss, pos[t], theta, 1);
        __syncthreads();
        size_t base = (size_t) t * (size_t) stride;
        for (int h0 = warp; h0 < NR; h0 += S_WARPS * S_ROWS) {
            float g[S_ROWS][E], x[S_ROWS][E], rs[S_ROWS];
#pragma unroll
            for (int r = 0; r < S_ROWS; r++) {
                int hh = h0 + r * S_WARPS;
                rs[r] = hh >= NR ? 0.0f
                        : hh < H ? rstdq[(size_t) t * H + hh]
                                 : rstdk[(size_t) t * Hk + (hh - H)];
#pragma unroll
                for (int e = 0; e < E; e++) {
                    int j = lane + 32 * e;
                    size_t at = base + (size_t) hh * D + j;
                    int ok = hh < NR && j < D;
                    g[r][e] = ok ? trn_ld(dqkv + at) : 0.0f;
                    x[r][e] = ok ? trn_ld(qkv + at) : 0.0f;
                }
            }
#pragma unroll
            for (int r = 0; r < S_ROWS; r++) {
                int hh = h0 + r * S_WARPS;
                if (hh >= NR)
                    break; /* warp-uniform */
                int isq = hh < H;
                /* inverse rotation, rounded as trn_k_rope stores it */
                s_rotate<D, E>(g[r], sc, ss, lane);
                if (!qw) { /* no q/k norm: the rotated gradient is d(raw) */
                    trn_bf16_t *o = dqkv + base + (size_t) hh * D;
#pragma unroll
                    for (int e = 0; e < E; e++) {
                        int j = lane + 32 * e;
                        if (j < D)
                            trn_st(o + j, g[r][e]);
                    }
                    continue;
                }
                float dot = 0.0f;
#pragma unroll
                for (int e = 0; e < E; e++) {
                    g[r][e] = trn_round_bf16(g[r][e]);
                    float n = x[r][e] * rs[r];
                    float w = isq ? wq[e] : wk[e];
                    dot += g[r][e] * w * n;
                    if (isq)
                        aq[e] += g[r][e] * trn_round_bf16(n);
                    else
                        ak[e] += g[r][e] * trn_round_bf16(n);
                }
                dot = trn_warp_sum(dot) / (float) D;
                trn_bf16_t *o = dqkv + base + (size_t) hh * D;
#pragma unroll
                for (int e = 0; e < E; e++) {
                    int j = lane + 32 * e;
                    float n = x[r][e] * rs[r];
                    float gw = g[r][e] * (isq ? wq[e] : wk[e]);
                    float d = rs[r] * (gw - n * dot);
                    if (j < D)
                        trn_st(o + j, d);
                }
            }
        }
    }
    if (!qw)
        return; /* no norm weights to differentiate (block-uniform) */
    __syncthreads();
#pragma unroll
    for (int e = 0; e < E; e++) {
        int j = lane + 32 * e;
        if (j < D) {
            atomicAdd(&sdw[0][j], aq[e]);
            atomicAdd(&sdw[1][j], ak[e]);
        }
    }
    __syncthreads();
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
        atomicAdd(&dwq[j], sdw[0][j]);
        atomicAdd(&dwk[j], sdw[1][j]);
    }
}

static int
s_aligned16(const void *p)
{
    return ((uintptr_t) p & 15u) == 0;
}

extern "C" lisa_rc_t
trn_k_qk_fwd(trn_bf16_t *qkvn, const trn_bf16_t *qkv, int stride, float *rstdq,
             float *rstdk, const trn_bf16_t *q_norm, const trn_bf16_t *k_norm,
             const int32_t *pos, int T, int H, int Hk, int D, float eps,
             float theta, trn_cuda_stream_t *s)
{
    TRN_REQUIRE(qkvn && qkv && rstdq && rstdk && !q_norm == !k_norm && pos);
    TRN_REQUIRE(T > 0 && H > 0 && Hk > 0 && H % Hk == 0);
    TRN_REQUIRE(D == 16 || D == 32 || D == 64 || D == 128);
    TRN_REQUIRE(stride >= (H + 2 * Hk) * D);
    int copy_v = qkvn != qkv;
    int vec = s_aligned16(qkvn) && s_aligned16(qkv) && stride % 8 == 0;
    dim3 grid((unsigned) T), block(32 * S_WARPS);
    cudaStream_t st = trn_stream(s);
    switch (D) {
    case 16:
        s_qk_fwd<16><<<grid, block, 0, st>>>(qkvn, qkv, stride, rstdq, rstdk,
                                             q_norm, k_norm, pos, T, H, Hk, eps,
                                             theta, copy_v, vec);
        break;
    case 32:
        s_qk_fwd<32><<<grid, block, 0, st>>>(qkvn, qkv, stride, rstdq, rstdk,
                                             q_norm, k_norm, pos, T, H, Hk, eps,
                                             theta, copy_v, vec);
        break;
    case 64:
        s_qk_fwd<64><<<grid, block, 0, st>>>(qkvn, qkv, stride, rstdq, rstdk,
                                             q_norm, k_norm, pos, T, H, Hk, eps,
                                             theta, copy_v, vec);
        break;
    default:
        s_qk_fwd<128><<<grid, block, 0, st>>>(qkvn, qkv, stride, rstdq, rstdk,
                                              q_norm, k_norm, pos, T, H, Hk,
                                              eps, theta, copy_v, vec);
        break;
    }
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}

extern "C" lisa_rc_t
trn_k_qk_bwd(trn_bf16_t *dqkv, int stride, float *dq_norm, float *dk_norm,
             const trn_bf16_t *qkv, const trn_bf16_t *q_norm,
             const trn_bf16_t *k_norm, const float *rstdq, const float *rstdk,
             const int32_t *pos, int T, int H, int Hk, int D, float theta,
             trn_cuda_stream_t *s)
{
    TRN_REQUIRE(dqkv && qkv && !q_norm == !k_norm && !q_norm == !dq_norm &&
                !dq_norm == !dk_norm);
    TRN_REQUIRE(rstdq && rstdk && pos);
    TRN_REQUIRE(T > 0 && H > 0 && Hk > 0 && H % Hk == 0);
    TRN_REQUIRE(D == 16 || D == 32 || D == 64 || D == 128);
    TRN_REQUIRE(stride >= (H + 2 * Hk) * D);
    dim3 grid((unsigned) (T < S_BWD_MAX ? T : S_BWD_MAX)), block(32 * S_WARPS);
    cudaStream_t st = trn_stream(s);
    switch (D) {
    case 16:
        s_qk_bwd<16><<<grid, block, 0, st>>>(dqkv, stride, dq_norm, dk_norm,
                                             qkv, q_norm, k_norm, rstdq, rstdk,
                                             pos, T, H, Hk, theta);
        break;
    case 32:
        s_qk_bwd<32><<<grid, block, 0, st>>>(dqkv, stride, dq_norm, dk_norm,
                                             qkv, q_norm, k_norm, rstdq, rstdk,
                                             pos, T, H, Hk, theta);
        break;
    case 64:
        s_qk_bwd<64><<<grid, block, 0, st>>>(dqkv, stride, dq_norm, dk_norm,
                                             qkv, q_norm, k_norm, rstdq, rstdk,
                                             pos, T, H, Hk, theta);
        break;
    default:
        s_qk_bwd<128><<<grid, block, 0, st>>>(dqkv, stride, dq_norm, dk_norm,
                                              qkv, q_norm, k_norm, rstdq, rstdk,
                                              pos, T, H, Hk, theta);
        break;
    }
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}
