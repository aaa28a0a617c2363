/*
 * trn_k_attn: causal grouped-query attention, forward and backward, on the
 * tensor cores (WMMA bf16 16x16x16, fp32 accumulation), never holding a
 * T x T matrix: the forward pass streams key tiles with an online softmax
 * and keeps the log-sum-exp of every row; the backward pass recomputes the
 * probabilities tile by tile from it (the FlashAttention-2 scheme).
 *
 * Forward: one block of 4 warps per (64 query rows, query head). Backward:
 * one block per (64 keys, kv head), looping over the query heads of the
 * group and the query tiles at or after the key tile; dK and dV accumulate
 * in shared memory, dQ in an fp32 buffer through atomics.
 *
 * Packed sequences: seg[t] is non-decreasing; a query attends to keys of
 * its own sequence at or before it. Tiles entirely in another sequence are
 * skipped.
 */
#include "trn_cuda_common.cuh"

#include <mma.h>

using namespace nvcuda;

#define S_BQ      64
#define S_BK      64
#define S_THREADS 128

typedef __nv_bfloat16 bf16;

/* Loads rows [r0, r0+64) of a [T, *] bf16 matrix (row t at base + t*stride)
 * into shared memory with leading dimension ld; rows past T are zero. */
template <int D>
__device__ __forceinline__ void
s_load_tile(bf16 *dst, int ld, const trn_bf16_t *base, size_t stride, int r0,
            int T)
{
    constexpr int V = D / 8; /* 16-byte vectors per row */
    for (int i = threadIdx.x; i < 64 * V; i += S_THREADS) {
        int r = i / V, c = (i % V) * 8;
        uint4 val = make_uint4(0, 0, 0, 0);
        if (r0 + r < T)
            val = *reinterpret_cast<const uint4 *>(
                base + (size_t) (r0 + r) * stride + c);
        *reinterpret_cast<uint4 *>(dst + r * ld + c) = val;
    }
}

template <int D>
__global__ void
__launch_bounds__(S_THREADS)
    s_attn_fwd(trn_bf16_t *o, float *lse, const trn_bf16_t *q,
               const trn_bf16_t *k, const trn_bf16_t *v, int stride,
               const int32_t *seg, int T, int H, int Hk, float scale)
{
    constexpr int LDB = D + 8, LDS = S_BK + 4, LDP = S_BK + 8, LDO = D + 4;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Qs = reinterpret_cast<bf16 *>(smem);
    bf16 *Ks = Qs + S_BQ * LDB;
    bf16 *Vs = Ks + S_BK * LDB;
    float *Sf = reinterpret_cast<float *>(Vs + S_BK * LDB);
    bf16 *Pb = reinterpret_cast<bf16 *>(Sf + S_BQ * LDS);
    float *Oa = reinterpret_cast<float *>(Pb + S_BQ * LDP);
    float *mrow = Oa + S_BQ * LDO;
    float *lrow = mrow + S_BQ;

    const int h = blockIdx.y, hk = h / (H / Hk);
    const int q0 = blockIdx.x * S_BQ;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const size_t st = (size_t) stride;

    s_load_tile<D>(Qs, LDB, q + (size_t) h * D, st, q0, T);
    for (int i = threadIdx.x; i < S_BQ * LDO; i += S_THREADS)
        Oa[i] = 0.0f;
    if (threadIdx.x < S_BQ) {
        mrow[threadIdx.x] = -INFINITY;
        lrow[threadIdx.x] = 0.0f;
    }
    const int qlast = min(q0 + S_BQ, T) - 1;
    const int seg_first = seg[q0];
    const int r = warp * 16 + (lane >> 1), half = lane & 1;
    const int tq = q0 + r;
    const int seg_q = tq < T ? seg[tq] : -1;

    for (int k0 = 0; k0 <= qlast; k0 += S_BK) {
        if (seg[min(k0 + S_BK - 1, T - 1)] < seg_first)
            continue;
        __syncthreads();
        s_load_tile<D>(Ks, LDB, k + (size_t) hk * D, st, k0, T);
        s_load_tile<D>(Vs, LDB, v + (size_t) hk * D, st, k0, T);
        __syncthreads();

        /* S = Q K^T for this warp's 16 rows. */
        for (int n = 0; n < S_BK / 16; n++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.0f);
            for (int kk = 0; kk < D / 16; kk++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16,
                               wmma::row_major>
                    a;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16,
                               wmma::col_major>
                    b;
                wmma::load_matrix_sync(a, Qs + warp * 16 * LDB + kk * 16, LDB);
                wmma::load_matrix_sync(b, Ks + n * 16 * LDB + kk * 16, LDB);
                wmma::mma_sync(acc, a, b, acc);
            }
            wmma::store_matrix_sync(Sf + warp * 16 * LDS + n * 16, acc, LDS,
                                    wmma::mem_row_major);
        }
        __syncwarp();

        /* Online softmax: two lanes per row, 32 columns each. */
        float sv[32];
        float mx = -INFINITY;
        for (int j = 0; j < 32; j++) {
            int c = half * 32 + j, tk = k0 + c;
            bool ok = tq < T && tk < T && tk <= tq && seg[tk] == seg_q;
            sv[j] = ok ? Sf[r * LDS + c] * scale : -INFINITY;
            mx = fmaxf(mx, sv[j]);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        float m_old = mrow[r];
        float m_new = fmaxf(m_old, mx);
        float alpha = 1.0f, sum = 0.0f;
        if (m_new != -INFINITY) {
            alpha = expf(m_old - m_new);
            for (int j = 0; j < 32; j++) {
                float p = expf(sv[j] - m_new);
                sv[j] = p;
                sum += p;
            }
        } else {
            for (int j = 0; j < 32; j++)
                sv[j] = 0.0f;
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        for (int j = 0; j < 32; j++)
            Pb[r * LDP + half * 32 + j] = __float2bfloat16_rn(sv[j]);
        for (int c = half * (D / 2); c < (half + 1) * (D / 2); c++)
            Oa[r * LDO + c] *= alpha;
        __syncwarp();
        if (half == 0) {
            mrow[r] = m_new;
            lrow[r] = lrow[r] * alpha + sum;
        }
        __syncwarp();

        /* O += P V for this warp's rows. */
        for (int n = 0; n < D / 16; n++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::load_matrix_sync(acc, Oa + warp * 16 * LDO + n * 16, LDO,
                                   wmma::mem_row_major);
            for (int kk = 0; kk < S_BK / 16; kk++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16,
                               wmma::row_major>
                    a;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16,
                               wmma::row_major>
                    b;
                wmma::load_matrix_sync(a, Pb + warp * 16 * LDP + kk * 16, LDP);
                wmma::load_matrix_sync(b, Vs + kk * 16 * LDB + n * 16, LDB);
                wmma::mma_sync(acc, a, b, acc);
            }
            wmma::store_matrix_sync(Oa + warp * 16 * LDO + n * 16, acc, LDO,
                                    wmma::mem_row_major);
        }
        __syncwarp();
    }
    __syncwarp();
    for (int i = lane; i < 16 * D; i += 32) {
        int rr = warp * 16 + i / D, c = i % D, t = q0 + rr;
        if (t >= T)
            continue;
        float l = lrow[rr];
        float val = l > 0.0f ? Oa[rr * LDO + c] / l : 0.0f;
        trn_st(o + (size_t) t * (size_t) (H * D) + (size_t) h * D + c, val);
        if (c == 0)
            lse[(size_t) h * T + t] = l > 0.0f ? mrow[rr] + logf(l) : INFINITY;
    }
}

/* Delta[h*T + t] = sum_d dO[t,h,d] * O[t,h,d]; one warp per (t, h). */
__global__ void
s_attn_delta(float *delta, const trn_bf16_t *dout, const trn_bf16_t *o, int T,
             int H, int D)
{
    int w = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (w >= T * H)
        return;
    int t = w / H, h = w % H;
    size_t base = (size_t) t * (size_t) (H * D) + (size_t) h * D;
    float s = 0.0f;
    for (int d = lane; d < D; d += 32)
        s += trn_ld(dout + base + d) * trn_ld(o + base + d);
    s = trn_warp_sum(s);
    if (lane == 0)
        delta[(size_t) h * T + t] = s;
}

template <int D>
__global__ void
__launch_bounds__(S_THREADS)
    s_attn_bwd(trn_bf16_t *dk, trn_bf16_t *dv, int dstride, float *dq_acc,
               const float *delta, const trn_bf16_t *dout, const float *lse,
               const trn_bf16_t *q, const trn_bf16_t *k, const trn_bf16_t *v,
               int stride, const int32_t *seg, int T, int H, int Hk,
               float scale)
{
    constexpr int LDB = D + 8, LDS = S_BK + 4, LDP = S_BK + 8, LDO = D + 4;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Ks = reinterpret_cast<bf16 *>(smem);
    bf16 *Vs = Ks + S_BK * LDB;
    bf16 *Qs = Vs + S_BK * LDB;
    bf16 *dOs = Qs + S_BQ * LDB;
    float *Sf = reinterpret_cast<float *>(dOs + S_BQ * LDB);
    float *dPf = Sf + S_BQ * LDS;
    bf16 *Pb = reinterpret_cast<bf16 *>(dPf + S_BQ * LDS);
    bf16 *dSb = Pb + S_BQ * LDP;
    float *dKa = reinterpret_cast<float *>(dSb + S_BQ * LDP);
    float *dVa = dKa + S_BK * LDO;
    float *lse_s = dVa + S_BK * LDO;
    float *del_s = lse_s + S_BQ;
    float *dQt = Sf; /* reuses Sf and dPf once dS is formed */

    const int hk = blockIdx.y, G = H / Hk;
    const int k0 = blockIdx.x * S_BK;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const size_t st = (size_t) stride, ost = (size_t) (H * D);

    s_load_tile<D>(Ks, LDB, k + (size_t) hk * D, st, k0, T);
    s_load_tile<D>(Vs, LDB, v + (size_t) hk * D, st, k0, T);
    for (int i = threadIdx.x; i < S_BK * LDO; i += S_THREADS) {
        dKa[i] = 0.0f;
        dVa[i] = 0.0f;
    }
    const int seg_klast = seg[min(k0 + S_BK - 1, T - 1)];
    const int r = warp * 16 + (lane >> 1), half = lane & 1;

    for (int g = 0; g < G; g++) {
        const int h = hk * G + g;
        for (int q0 = (k0 / S_BQ) * S_BQ; q0 < T; q0 += S_BQ) {
            if (seg[q0] > seg_klast)
                break;
            __syncthreads();
            s_load_tile<D>(Qs, LDB, q + (size_t) h * D, st, q0, T);
            s_load_tile<D>(dOs, LDB, dout + (size_t) h * D, ost, q0, T);
            if (threadIdx.x < S_BQ) {
                int t = q0 + threadIdx.x;
                lse_s[threadIdx.x] = t < T ? lse[(size_t) h * T + t] : INFINITY;
                del_s[threadIdx.x] = t < T ? delta[(size_t) h * T + t] : 0.0f;
            }
            __syncthreads();

            /* S = Q K^T and dP = dO V^T for this warp's 16 query rows. */
            for (int n = 0; n < S_BK / 16; n++) {
                wmma::fragment<wmma::accumulator, 16, 16, 16, float> s_acc,
                    p_acc;
                wmma::fill_fragment(s_acc, 0.0f);
                wmma::fill_fragment(p_acc, 0.0f);
                for (int kk = 0; kk < D / 16; kk++) {
                    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16,
                                   wmma::row_major>
                        a;
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16,
                                   wmma::col_major>
                        b;
                    wmma::load_matrix_sync(a, Qs + warp * 16 * LDB + kk * 16,
                                           LDB);
                    wmma::load_matrix_sync(b, Ks + n * 16 * LDB + kk * 16, LDB);
                    wmma::mma_sync(s_acc, a, b, s_acc);
                    wmma::load_matrix_sync(a, dOs + warp * 16 * LDB + kk * 16,
                                           LDB);
                    wmma::load_matrix_sync(b, Vs + n * 16 * LDB + kk * 16, LDB);
                    wmma::mma_sync(p_acc, a, b, p_acc);
                }
                wmma::store_matrix_sync(Sf + warp * 16 * LDS + n * 16, s_acc,
                                        LDS, wmma::mem_row_major);
                wmma::store_matrix_sync(dPf + warp * 16 * LDS + n * 16, p_acc,
                                        LDS, wmma::mem_row_major);
            }
            __syncwarp();
            {
                int tq = q0 + r;
                int seg_q = tq < T ? seg[tq] : -1;
                for (int j = 0; j < 32; j++) {
                    int c = half * 32 + j, tk = k0 + c;
                    bool ok = tq < T && tk < T && tk <= tq && seg[tk] == seg_q;
                    float p =
                        ok ? expf(Sf[r * LDS + c] * scale - lse_s[r]) : 0.0f;
                    float ds = p * (dPf[r * LDS + c] - del_s[r]) * scale;
                    Pb[r * LDP + c] = __float2bfloat16_rn(p);
                    dSb[r * LDP + c] = __float2bfloat16_rn(ds);
                }
            }
            __syncthreads();

            /* dV += P^T dO and dK += dS^T Q for this warp's 16 keys. */
            for (int n = 0; n < D / 16; n++) {
                wmma::fragment<wmma::accumulator, 16, 16, 16, float> dv_acc,
                    dk_acc;
                wmma::load_matrix_sync(dv_acc, dVa + warp * 16 * LDO + n * 16,
                                       LDO, wmma::mem_row_major);
                wmma::load_matrix_sync(dk_acc, dKa + warp * 16 * LDO + n * 16,
                                       LDO, wmma::mem_row_major);
                for (int kk = 0; kk < S_BQ / 16; kk++) {
                    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16,
                                   wmma::col_major>
                        a;
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16,
                                   wmma::row_major>
                        b;
                    wmma::load_matrix_sync(a, Pb + kk * 16 * LDP + warp * 16,
                                           LDP);
                    wmma::load_matrix_sync(b, dOs + kk * 16 * LDB + n * 16,
                                           LDB);
                    wmma::mma_sync(dv_acc, a, b, dv_acc);
                    wmma::load_matrix_sync(a, dSb + kk * 16 * LDP + warp * 16,
                                           LDP);
                    wmma::load_matrix_sync(b, Qs + kk * 16 * LDB + n * 16, LDB);
                    wmma::mma_sync(dk_acc, a, b, dk_acc);
                }
                wmma::store_matrix_sync(dVa + warp * 16 * LDO + n * 16, dv_acc,
                                        LDO, wmma::mem_row_major);
                wmma::store_matrix_sync(dKa + warp * 16 * LDO + n * 16, dk_acc,
                                        LDO, wmma::mem_row_major);
            }

            /* dQ (this warp's 16 query rows) = dS K, added to dq_acc. */
            for (int n = 0; n < D / 16; n++) {
                wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
                wmma::fill_fragment(acc, 0.0f);
                for (int kk = 0; kk < S_BK / 16; kk++) {
                    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16,
                                   wmma::row_major>
                        a;
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16,
                                   wmma::row_major>
                        b;
                    wmma::load_matrix_sync(a, dSb + warp * 16 * LDP + kk * 16,
                                           LDP);
                    wmma::load_matrix_sync(b, Ks + kk * 16 * LDB + n * 16, LDB);
                    wmma::mma_sync(acc, a, b, acc);
                }
                wmma::store_matrix_sync(dQt + warp * 16 * LDO + n * 16, acc,
                                        LDO, wmma::mem_row_major);
            }
            __syncwarp();
            for (int i = lane; i < 16 * D; i += 32) {
                int rr = warp * 16 + i / D, c = i % D, t = q0 + rr;
                if (t < T)
                    atomicAdd(&dq_acc[((size_t) t * H + h) * D + c],
                              dQt[rr * LDO + c]);
            }
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < S_BK * D; i += S_THREADS) {
        int rr = i / D, c = i % D, t = k0 + rr;
        if (t >= T)
            continue;
        size_t off = (size_t) t * (size_t) dstride + (size_t) hk * D + c;
        trn_st(dk + off, dKa[rr * LDO + c]);
        trn_st(dv + off, dVa[rr * LDO + c]);
    }
}

/* dq[t, h*D + c] = bf16(dq_acc[(t*H + h)*D + c]). */
__global__ void
s_dq_store(trn_bf16_t *dq, int dstride, const float *dq_acc, int T, int H,
           int D)
{
    size_t n = (size_t) T * H * D;
    for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n;
         i += (size_t) gridDim.x * blockDim.x) {
        size_t t = i / ((size_t) H * D), hc = i % ((size_t) H * D);
        trn_st(dq + t * (size_t) dstride + hc, dq_acc[i]);
    }
}

template <int D>
static size_t
s_fwd_smem(void)
{
    return (size_t) 3 * 64 * (D + 8) * 2 + 64 * (64 + 4) * 4 +
           64 * (64 + 8) * 2 + 64 * (D + 4) * 4 + 2 * 64 * 4;
}

template <int D>
static size_t
s_bwd_smem(void)
{
    return (size_t) 4 * 64 * (D + 8) * 2 + 2 * 64 * (64 + 4) * 4 +
           2 * 64 * (64 + 8) * 2 + 2 * 64 * (D + 4) * 4 + 2 * 64 * 4;
}

template <int D>
static lisa_rc_t
s_fwd(trn_bf16_t *o, float *lse, const trn_bf16_t *q, const trn_bf16_t *k,
      const trn_bf16_t *v, int stride, const int32_t *seg, int T, int H, int Hk,
      cudaStream_t st)
{
    size_t shm = s_fwd_smem<D>();
    TRN_CUDA_TRY(cudaFuncSetAttribute(
        s_attn_fwd<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int) shm));
    dim3 grid(TRN_CEIL_DIV(T, S_BQ), H);
    s_attn_fwd<D><<<grid, S_THREADS, shm, st>>>(o, lse, q, k, v, stride, seg, T,
                                                H, Hk, 1.0f / sqrtf((float) D));
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}

template <int D>
static lisa_rc_t
s_bwd(trn_bf16_t *dk, trn_bf16_t *dv, int dstride, float *dq_acc,
      const float *delta, const trn_bf16_t *dout, const float *lse,
      const trn_bf16_t *q, const trn_bf16_t *k, const trn_bf16_t *v, int stride,
      const int32_t *seg, int T, int H, int Hk, cudaStream_t st)
{
    size_t shm = s_bwd_smem<D>();
    TRN_CUDA_TRY(cudaFuncSetAttribute(
        s_attn_bwd<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int) shm));
    dim3 grid(TRN_CEIL_DIV(T, S_BK), Hk);
    s_attn_bwd<D><<<grid, S_THREADS, shm, st>>>(
        dk, dv, dstride, dq_acc, delta, dout, lse, q, k, v, stride, seg, T, H,
        Hk, 1.0f / sqrtf((float) D));
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}

#define S_DISPATCH(fn, D, ...)                                                 \
    switch (D) {                                                               \
    case 16:                                                                   \
        return fn<16>(__VA_ARGS__);                                            \
    case 32:                                                                   \
        return fn<32>(__VA_ARGS__);                                            \
    case 64:                                                                   \
        return fn<64>(__VA_ARGS__);                                            \
    case 128:                                                                  \
        return fn<128>(__VA_ARGS__);                                           \
    default:                                                                   \
        return LISA_UNSUPPORTED;                                               \
    }

extern "C" lisa_rc_t
trn_k_attn_fwd(trn_bf16_t *o, float *lse, const trn_bf16_t *q,
               const trn_bf16_t *k, const trn_bf16_t *v, int stride,
               const int32_t *seg, int T, int H, int Hk, int D,
               trn_cuda_stream_t *s)
{
    TRN_REQUIRE(o && lse && q && k && v && seg && T > 0);
    TRN_REQUIRE(H > 0 && Hk > 0 && H % Hk == 0 && stride % 8 == 0);
    S_DISPATCH(s_fwd, D, o, lse, q, k, v, stride, seg, T, H, Hk, trn_stream(s));
}

extern "C" lisa_rc_t
trn_k_attn_bwd(trn_bf16_t *dq, trn_bf16_t *dk, trn_bf16_t *dv, int dstride,
               float *scratch, const trn_bf16_t *dout, const trn_bf16_t *o,
               const float *lse, const trn_bf16_t *q, const trn_bf16_t *k,
               const trn_bf16_t *v, int stride, const int32_t *seg, int T,
               int H, int Hk, int D, trn_cuda_stream_t *s)
{
    TRN_REQUIRE(dq && dk && dv && scratch && dout && o && lse && q && k && v);
    TRN_REQUIRE(seg && T > 0 && H > 0 && Hk > 0 && H % Hk == 0);
    TRN_REQUIRE(stride % 8 == 0 && dstride % 8 == 0);
    if (D != 16 && D != 32 && D != 64 && D != 128)
        return LISA_UNSUPPORTED;
    cudaStream_t st = trn_stream(s);
    float *delta = scratch;
    float *dq_acc = scratch + (size_t) T * H;
    TRN_CUDA_TRY(cudaMemsetAsync(dq_acc, 0, (size_t) T * H * D * 4, st));
    s_attn_delta<<<TRN_CEIL_DIV(T * H, 8), 256, 0, st>>>(delta, dout, o, T, H,
                                                         D);
    TRN_LAUNCH_CHECK();
    lisa_rc_t rc;
    switch (D) {
    case 16:
        rc = s_bwd<16>(dk, dv, dstride, dq_acc, delta, dout, lse, q, k, v,
                       stride, seg, T, H, Hk, st);
        break;
    case 32:
        rc = s_bwd<32>(dk, dv, dstride, dq_acc, delta, dout, lse, q, k, v,
                       stride, seg, T, H, Hk, st);
        break;
    case 64:
        rc = s_bwd<64>(dk, dv, dstride, dq_acc, delta, dout, lse, q, k, v,
                       stride, seg, T, H, Hk, st);
        break;
    default:
        rc = s_bwd<128>(dk, dv, dstride, dq_acc, delta, dout, lse, q, k, v,
                        stride, seg, T, H, Hk, st);
        break;
    }
    if (rc != LISA_OK)
        return rc;
    size_t n = (size_t) T * H * D;
    unsigned blocks = (unsigned) (n / 256 + 1 > 65535 ? 65535 : n / 256 + 1);
    s_dq_store<<<blocks, 256, 0, st>>>(dq, dstride, dq_acc, T, H, D);
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}
