/*
 * trn_k_attn: causal grouped-query attention, forward and backward, on the
 * tensor cores (mma.sync bf16 m16n8k16, fp32 accumulation), never holding a
 * T x T matrix: the forward pass streams key tiles with an online softmax
 * and keeps the log-sum-exp of every row; the backward pass recomputes the
 * probabilities tile by tile from it (the FlashAttention-2 scheme).
 *
 * Forward: one block of 8 warps per (128 query rows, query head). Backward:
 * one block of 4 warps per (64 keys, kv head), looping over the query heads
 * of the group and the query tiles at or after the key tile; dK and dV
 * accumulate in registers, dQ in an fp32 buffer through atomics. Both keep
 * their tiles in registers; see the notes above each kernel.
 *
 * Packed sequences: seg[t] is non-decreasing; a query attends to keys of
 * its own sequence at or before it. Tiles entirely in another sequence are
 * skipped.
 */
#include "trn_cuda_common.cuh"

#define S_BQ 64
#define S_BK 64

typedef __nv_bfloat16 bf16;

/* ---- forward on mma.sync (FlashAttention-2 register tiling) ------------
 *
 * One block of 8 warps per (128 query rows, query head); each warp owns 16
 * rows and keeps its Q fragments, scores, probabilities and output
 * accumulators in registers (mma.sync m16n8k16, bf16 in, fp32 out). The
 * accumulator layout of one product is the operand layout of the next, so
 * probabilities go from softmax to the P.V product without shared memory.
 * Fragment layout (PTX ISA, m16n8k16): lane = 4*g + t; A holds rows g and
 * g+8, columns 2t, 2t+1 (+8); B holds k rows 2t, 2t+1 (+8), column g; C
 * holds rows g, g+8, columns 2t, 2t+1. */

#define S_FWD_WARPS 8
#define S_FWD_BQ    (16 * S_FWD_WARPS)

__device__ __forceinline__ void
s_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0),
                   "r"(b1));
}

__device__ __forceinline__ uint32_t
s_pack(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

__device__ __forceinline__ uint32_t
s_pair(const bf16 *p0, const bf16 *p1)
{
    uint16_t lo = *reinterpret_cast<const uint16_t *>(p0);
    uint16_t hi = *reinterpret_cast<const uint16_t *>(p1);
    return (uint32_t) lo | ((uint32_t) hi << 16);
}

/* Four 8x8 bf16 tiles of shared memory, transposed, into mma operand
 * registers (ldmatrix .trans): lane j names row j % 8 of tile j / 8, and
 * receives in register i the elements (2(j%4), j/4) and (2(j%4)+1, j/4)
 * of tile i, which is the B fragment of m16n8k16 for a row-major [k][n]
 * tile (and the A fragment for a [k][m] one). */
__device__ __forceinline__ void
s_ldsm_t(uint32_t r[4], const bf16 *p)
{
    uint32_t a = (uint32_t) __cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 "
                 "{%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* B fragments of n-tiles n and n+1 at k-step kk from a row-major [k][n]
 * tile in shared memory (row stride ld): b[0], b[1] for n; b[2], b[3]
 * for n + 1. */
__device__ __forceinline__ void
s_ldsm_b2(uint32_t b[4], const bf16 *base, int ld, int kk, int n, int lane)
{
    const int m = lane >> 3, row = lane & 7;
    s_ldsm_t(b, base + (kk * 16 + (m & 1) * 8 + row) * ld + (n + (m >> 1)) * 8);
}

template <int D>
__global__ void __launch_bounds__(32 * S_FWD_WARPS)
    s_attn_fwd_mma(trn_bf16_t *o, float *lse, const trn_bf16_t *q,
                   const trn_bf16_t *k, const trn_bf16_t *v, int stride,
                   const int32_t *seg, int T, int H, int Hk, float scale)
{
    constexpr int LDB = D + 8; /* padded rows: conflict-free fragments */
    constexpr int KT = D / 16; /* k-steps over the head dimension */
    constexpr int NT = D / 8;  /* output n-tiles */
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Ks = reinterpret_cast<bf16 *>(smem);
    bf16 *Vs = Ks + S_BK * LDB;
    int *segk = reinterpret_cast<int *>(Vs + S_BK * LDB);
    bf16 *Qs = Ks; /* Q is staged through the K/V space before the loop */

    const int h = blockIdx.y, hk = h / (H / Hk);
    const int q0 = blockIdx.x * S_FWD_BQ;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const size_t st = (size_t) stride;
    constexpr int NTH = 32 * S_FWD_WARPS;

    /* Q rows of this block -> registers */
    for (int i = threadIdx.x; i < S_FWD_BQ * (D / 8); i += NTH) {
        int r = i / (D / 8), c = (i % (D / 8)) * 8;
        uint4 val = make_uint4(0, 0, 0, 0);
        if (q0 + r < T)
            val = *reinterpret_cast<const uint4 *>(q + (size_t) h * D +
                                                   (size_t) (q0 + r) * st + c);
        *reinterpret_cast<uint4 *>(Qs + r * LDB + c) = val;
    }
    __syncthreads();
    uint32_t qa[KT][4];
    {
        const bf16 *qr = Qs + (warp * 16) * LDB;
#pragma unroll
        for (int kk = 0; kk < KT; kk++) {
            int c = kk * 16 + 2 * t;
            qa[kk][0] = *reinterpret_cast<const uint32_t *>(qr + g * LDB + c);
            qa[kk][1] =
                *reinterpret_cast<const uint32_t *>(qr + (g + 8) * LDB + c);
            qa[kk][2] =
                *reinterpret_cast<const uint32_t *>(qr + g * LDB + c + 8);
            qa[kk][3] =
                *reinterpret_cast<const uint32_t *>(qr + (g + 8) * LDB + c + 8);
        }
    }
    float acc[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++)
        acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    const int r0 = q0 + warp * 16 + g, r1 = r0 + 8; /* my two rows */
    const int sg0 = r0 < T ? seg[r0] : -1, sg1 = r1 < T ? seg[r1] : -1;
    const int qlast = min(q0 + S_FWD_BQ, T) - 1;
    const int seg_first = seg[q0], seg_last = seg[qlast];

    for (int k0 = 0; k0 <= qlast; k0 += S_BK) {
        int klast = min(k0 + S_BK, T) - 1;
        if (seg[klast] < seg_first)
            continue;
        __syncthreads();
        for (int i = threadIdx.x; i < S_BK * (D / 8); i += NTH) {
            int r = i / (D / 8), c = (i % (D / 8)) * 8;
            uint4 kv = make_uint4(0, 0, 0, 0), vv = kv;
            if (k0 + r < T) {
                size_t off = (size_t) (k0 + r) * st + (size_t) hk * D + c;
                kv = *reinterpret_cast<const uint4 *>(k + off);
                vv = *reinterpret_cast<const uint4 *>(v + off);
            }
            *reinterpret_cast<uint4 *>(Ks + r * LDB + c) = kv;
            *reinterpret_cast<uint4 *>(Vs + r * LDB + c) = vv;
        }
        if (threadIdx.x < S_BK)
            segk[threadIdx.x] =
                k0 + threadIdx.x < T ? seg[k0 + threadIdx.x] : -2;
        __syncthreads();
        /* rows of this warp entirely before the tile: nothing to see */
        if (q0 + warp * 16 + 15 < k0)
            continue;
        const bool full = klast <= q0 && seg[k0] == seg_last && klast < T;

        float s[8][4];
#pragma unroll
        for (int n = 0; n < 8; n++) {
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
            const bf16 *kr = Ks + (n * 8 + g) * LDB + 2 * t;
#pragma unroll
            for (int kk = 0; kk < KT; kk++) {
                uint32_t b0 = *reinterpret_cast<const uint32_t *>(kr + kk * 16);
                uint32_t b1 =
                    *reinterpret_cast<const uint32_t *>(kr + kk * 16 + 8);
                s_mma(s[n], qa[kk], b0, b1);
            }
        }
        /* scale, mask, running max */
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int n = 0; n < 8; n++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int col = n * 8 + 2 * t + (e & 1);
                int tk = k0 + col;
                int row = e < 2 ? r0 : r1;
                int sg = e < 2 ? sg0 : sg1;
                bool ok = full || (tk <= row && segk[col] == sg && row < T);
                s[n][e] = ok ? s[n][e] * scale : -INFINITY;
            }
            mx0 = fmaxf(mx0, fmaxf(s[n][0], s[n][1]));
            mx1 = fmaxf(mx1, fmaxf(s[n][2], s[n][3]));
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
        float a0 = mn0 == -INFINITY ? 1.0f : __expf(m0 - mn0);
        float a1 = mn1 == -INFINITY ? 1.0f : __expf(m1 - mn1);
        float ps0 = 0.0f, ps1 = 0.0f;
#pragma unroll
        for (int n = 0; n < 8; n++) {
            s[n][0] = mn0 == -INFINITY ? 0.0f : __expf(s[n][0] - mn0);
            s[n][1] = mn0 == -INFINITY ? 0.0f : __expf(s[n][1] - mn0);
            s[n][2] = mn1 == -INFINITY ? 0.0f : __expf(s[n][2] - mn1);
            s[n][3] = mn1 == -INFINITY ? 0.0f : __expf(s[n][3] - mn1);
            ps0 += s[n][0] + s[n][1];
            ps1 += s[n][2] + s[n][3];
        }
        ps0 += __shfl_xor_sync(0xffffffffu, ps0, 1);
        ps0 += __shfl_xor_sync(0xffffffffu, ps0, 2);
        ps1 += __shfl_xor_sync(0xffffffffu, ps1, 1);
        ps1 += __shfl_xor_sync(0xffffffffu, ps1, 2);
        l0 = l0 * a0 + ps0;
        l1 = l1 * a1 + ps1;
        m0 = mn0;
        m1 = mn1;
#pragma unroll
        for (int n = 0; n < NT; n++) {
            acc[n][0] *= a0;
            acc[n][1] *= a0;
            acc[n][2] *= a1;
            acc[n][3] *= a1;
        }
        /* O += P V: P's accumulators are the A operand as they stand */
#pragma unroll
        for (int kk = 0; kk < S_BK / 16; kk++) {
            uint32_t pa[4];
            pa[0] = s_pack(s[2 * kk][0], s[2 * kk][1]);
            pa[1] = s_pack(s[2 * kk][2], s[2 * kk][3]);
            pa[2] = s_pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            pa[3] = s_pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
            for (int n = 0; n < NT; n += 2) {
                uint32_t b[4];
                s_ldsm_b2(b, Vs, LDB, kk, n, lane);
                s_mma(acc[n], pa, b[0], b[1]);
                s_mma(acc[n + 1], pa, b[2], b[3]);
            }
        }
    }
    /* normalise and store */
    const size_t ost = (size_t) (H * D);
    float il0 = l0 > 0.0f ? 1.0f / l0 : 0.0f,
          il1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
#pragma unroll
    for (int n = 0; n < NT; n++) {
        int c = n * 8 + 2 * t;
        if (r0 < T)
            *reinterpret_cast<uint32_t *>(o + (size_t) r0 * ost +
                                          (size_t) h * D + c) =
                s_pack(acc[n][0] * il0, acc[n][1] * il0);
        if (r1 < T)
            *reinterpret_cast<uint32_t *>(o + (size_t) r1 * ost +
                                          (size_t) h * D + c) =
                s_pack(acc[n][2] * il1, acc[n][3] * il1);
    }
    if (t == 0) {
        if (r0 < T)
            lse[(size_t) h * T + r0] = l0 > 0.0f ? m0 + logf(l0) : INFINITY;
        if (r1 < T)
            lse[(size_t) h * T + r1] = l1 > 0.0f ? m1 + logf(l1) : INFINITY;
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

/* ---- backward on mma.sync ----------------------------------------------
 *
 * One block of 4 warps per (64 keys, kv head); warp w owns keys 16w..16w+15
 * and keeps their dK and dV accumulators in registers for the whole pass.
 * For every query tile (of each query head of the group) it forms S^T and
 * dP^T for its keys (keys are the rows, so P^T and dS^T come out in the
 * accumulator layout that feeds dV += P^T dO and dK += dS^T Q directly),
 * then shares dS^T through shared memory so that each warp adds 16 query
 * rows of dQ = dS K into the fp32 dq buffer with atomics. */

#define S_BWD_WARPS 4

template <int D>
__global__ void __launch_bounds__(32 * S_BWD_WARPS, 1)
    s_attn_bwd_mma(trn_bf16_t *dk, trn_bf16_t *dv, int dstride, float *dq_acc,
                   const float *delta, const trn_bf16_t *dout, const float *lse,
                   const trn_bf16_t *q, const trn_bf16_t *k,
                   const trn_bf16_t *v, int stride, const int32_t *seg, int T,
                   int H, int Hk, float scale)
{
    constexpr int LDB = D + 8, LDS = S_BK + 8;
    constexpr int KT = D / 16, NT = D / 8;
    constexpr int NTH = 32 * S_BWD_WARPS;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Ks = reinterpret_cast<bf16 *>(smem);
    bf16 *Vs = Ks + S_BK * LDB;
    bf16 *Qs = Vs + S_BK * LDB;
    bf16 *dOs = Qs + S_BQ * LDB;
    bf16 *dsT = dOs + S_BQ * LDB;
    float *lse_s = reinterpret_cast<float *>(dsT + S_BK * LDS);
    float *del_s = lse_s + S_BQ;
    int *segq = reinterpret_cast<int *>(del_s + S_BQ);

    const int hk = blockIdx.y, G = H / Hk;
    const int k0 = blockIdx.x * S_BK;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const size_t st = (size_t) stride, ost = (size_t) (H * D);

    for (int i = threadIdx.x; i < S_BK * (D / 8); i += NTH) {
        int r = i / (D / 8), c = (i % (D / 8)) * 8;
        uint4 kv = make_uint4(0, 0, 0, 0), vv = kv;
        if (k0 + r < T) {
            size_t off = (size_t) (k0 + r) * st + (size_t) hk * D + c;
            kv = *reinterpret_cast<const uint4 *>(k + off);
            vv = *reinterpret_cast<const uint4 *>(v + off);
        }
        *reinterpret_cast<uint4 *>(Ks + r * LDB + c) = kv;
        *reinterpret_cast<uint4 *>(Vs + r * LDB + c) = vv;
    }
    const int kr0 = k0 + warp * 16 + g, kr1 = kr0 + 8;
    const int sk0 = kr0 < T ? seg[kr0] : -2, sk1 = kr1 < T ? seg[kr1] : -2;
    const int seg_klast = seg[min(k0 + S_BK - 1, T - 1)];
    float dK[NT][4], dV[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            dK[n][e] = dV[n][e] = 0.0f;

    for (int gi = 0; gi < G; gi++) {
        const int h = hk * G + gi;
        for (int q0 = k0; q0 < T; q0 += S_BQ) {
            if (seg[q0] > seg_klast)
                break;
            __syncthreads();
            for (int i = threadIdx.x; i < S_BQ * (D / 8); i += NTH) {
                int r = i / (D / 8), c = (i % (D / 8)) * 8;
                uint4 qv = make_uint4(0, 0, 0, 0), ov = qv;
                if (q0 + r < T) {
                    qv = *reinterpret_cast<const uint4 *>(
                        q + (size_t) (q0 + r) * st + (size_t) h * D + c);
                    ov = *reinterpret_cast<const uint4 *>(
                        dout + (size_t) (q0 + r) * ost + (size_t) h * D + c);
                }
                *reinterpret_cast<uint4 *>(Qs + r * LDB + c) = qv;
                *reinterpret_cast<uint4 *>(dOs + r * LDB + c) = ov;
            }
            if (threadIdx.x < S_BQ) {
                int tq = q0 + threadIdx.x;
                lse_s[threadIdx.x] = tq < T ? lse[(size_t) h * T + tq] : 0.0f;
                del_s[threadIdx.x] = tq < T ? delta[(size_t) h * T + tq] : 0.0f;
                segq[threadIdx.x] = tq < T ? seg[tq] : -1;
            }
            __syncthreads();

            /* S^T = K_w Q^T and dP^T = V_w dO^T (16 keys x 64 queries) */
            float sT[8][4], dpT[8][4];
#pragma unroll
            for (int n = 0; n < 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    sT[n][e] = dpT[n][e] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < KT; kk++) {
                const bf16 *kr = Ks + (warp * 16 + g) * LDB + kk * 16 + 2 * t;
                const bf16 *vr = Vs + (warp * 16 + g) * LDB + kk * 16 + 2 * t;
                uint32_t ak[4], av[4];
                ak[0] = *reinterpret_cast<const uint32_t *>(kr);
                ak[1] = *reinterpret_cast<const uint32_t *>(kr + 8 * LDB);
                ak[2] = *reinterpret_cast<const uint32_t *>(kr + 8);
                ak[3] = *reinterpret_cast<const uint32_t *>(kr + 8 * LDB + 8);
                av[0] = *reinterpret_cast<const uint32_t *>(vr);
                av[1] = *reinterpret_cast<const uint32_t *>(vr + 8 * LDB);
                av[2] = *reinterpret_cast<const uint32_t *>(vr + 8);
                av[3] = *reinterpret_cast<const uint32_t *>(vr + 8 * LDB + 8);
#pragma unroll
                for (int n = 0; n < 8; n++) {
                    const bf16 *qb = Qs + (n * 8 + g) * LDB + kk * 16 + 2 * t;
                    const bf16 *ob = dOs + (n * 8 + g) * LDB + kk * 16 + 2 * t;
                    s_mma(sT[n], ak, *reinterpret_cast<const uint32_t *>(qb),
                          *reinterpret_cast<const uint32_t *>(qb + 8));
                    s_mma(dpT[n], av, *reinterpret_cast<const uint32_t *>(ob),
                          *reinterpret_cast<const uint32_t *>(ob + 8));
                }
            }
            /* P^T and dS^T in place */
#pragma unroll
            for (int n = 0; n < 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int col = n * 8 + 2 * t + (e & 1), tq = q0 + col;
                    int kr = e < 2 ? kr0 : kr1, sk = e < 2 ? sk0 : sk1;
                    bool ok = tq < T && kr <= tq && segq[col] == sk;
                    float p = ok ? __expf(sT[n][e] * scale - lse_s[col]) : 0.0f;
                    sT[n][e] = p;
                    dpT[n][e] = p * (dpT[n][e] - del_s[col]) * scale;
                }
                /* dV += P^T dO, dK += dS^T Q (k-steps over the 64 queries) */
#pragma unroll
            for (int kk = 0; kk < S_BQ / 16; kk++) {
                uint32_t pa[4], sa[4];
                pa[0] = s_pack(sT[2 * kk][0], sT[2 * kk][1]);
                pa[1] = s_pack(sT[2 * kk][2], sT[2 * kk][3]);
                pa[2] = s_pack(sT[2 * kk + 1][0], sT[2 * kk + 1][1]);
                pa[3] = s_pack(sT[2 * kk + 1][2], sT[2 * kk + 1][3]);
                sa[0] = s_pack(dpT[2 * kk][0], dpT[2 * kk][1]);
                sa[1] = s_pack(dpT[2 * kk][2], dpT[2 * kk][3]);
                sa[2] = s_pack(dpT[2 * kk + 1][0], dpT[2 * kk + 1][1]);
                sa[3] = s_pack(dpT[2 * kk + 1][2], dpT[2 * kk + 1][3]);
#pragma unroll
                for (int n = 0; n < NT; n += 2) {
                    uint32_t bo[4], bq[4];
                    s_ldsm_b2(bo, dOs, LDB, kk, n, lane);
                    s_ldsm_b2(bq, Qs, LDB, kk, n, lane);
                    s_mma(dV[n], pa, bo[0], bo[1]);
                    s_mma(dV[n + 1], pa, bo[2], bo[3]);
                    s_mma(dK[n], sa, bq[0], bq[1]);
                    s_mma(dK[n + 1], sa, bq[2], bq[3]);
                }
            }
            /* share dS^T: row = key (local), column = query (local) */
#pragma unroll
            for (int n = 0; n < 8; n++) {
                int c = n * 8 + 2 * t;
                *reinterpret_cast<uint32_t *>(dsT + (warp * 16 + g) * LDS + c) =
                    s_pack(dpT[n][0], dpT[n][1]);
                *reinterpret_cast<uint32_t *>(dsT + (warp * 16 + g + 8) * LDS +
                                              c) = s_pack(dpT[n][2], dpT[n][3]);
            }
            __syncthreads();
            /* dQ rows 16w.. of this tile = dS K over the block's 64 keys */
            {
                float dq[NT][4];
#pragma unroll
                for (int n = 0; n < NT; n++)
                    dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
                const int r = warp * 16 + g;
#pragma unroll
                for (int kk = 0; kk < S_BK / 16; kk++) {
                    /* A = dS (queries x keys) from dsT (keys x queries):
                     * tiles (keys +0, queries +0), (+0, +8), (+8, +0),
                     * (+8, +8) of this warp's 16 queries */
                    uint32_t a[4];
                    {
                        const int m = lane >> 3, row = lane & 7;
                        s_ldsm_t(a, dsT + (kk * 16 + (m >> 1) * 8 + row) * LDS +
                                        warp * 16 + (m & 1) * 8);
                    }
#pragma unroll
                    for (int n = 0; n < NT; n += 2) {
                        uint32_t b[4];
                        s_ldsm_b2(b, Ks, LDB, kk, n, lane);
                        s_mma(dq[n], a, b[0], b[1]);
                        s_mma(dq[n + 1], a, b[2], b[3]);
                    }
                }
                const int tq0 = q0 + r, tq1 = tq0 + 8;
#pragma unroll
                for (int n = 0; n < NT; n++) {
                    int c = n * 8 + 2 * t;
                    if (tq0 < T) {
                        float *p = dq_acc + ((size_t) tq0 * H + h) * D + c;
                        atomicAdd(p, dq[n][0]);
                        atomicAdd(p + 1, dq[n][1]);
                    }
                    if (tq1 < T) {
                        float *p = dq_acc + ((size_t) tq1 * H + h) * D + c;
                        atomicAdd(p, dq[n][2]);
                        atomicAdd(p + 1, dq[n][3]);
                    }
                }
            }
        }
    }
#pragma unroll
    for (int n = 0; n < NT; n++) {
        int c = n * 8 + 2 * t;
        if (kr0 < T) {
            size_t off = (size_t) kr0 * (size_t) dstride + (size_t) hk * D + c;
            *reinterpret_cast<uint32_t *>(dk + off) =
                s_pack(dK[n][0], dK[n][1]);
            *reinterpret_cast<uint32_t *>(dv + off) =
                s_pack(dV[n][0], dV[n][1]);
        }
        if (kr1 < T) {
            size_t off = (size_t) kr1 * (size_t) dstride + (size_t) hk * D + c;
            *reinterpret_cast<uint32_t *>(dk + off) =
                s_pack(dK[n][2], dK[n][3]);
            *reinterpret_cast<uint32_t *>(dv + off) =
                s_pack(dV[n][2], dV[n][3]);
        }
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
static lisa_rc_t
s_fwd(trn_bf16_t *o, float *lse, const trn_bf16_t *q, const trn_bf16_t *k,
      const trn_bf16_t *v, int stride, const int32_t *seg, int T, int H, int Hk,
      cudaStream_t st)
{
    /* K and V tiles (the Q staging area fits in the same space) + segs */
    size_t kv = (size_t) 2 * S_BK * (D + 8) * 2;
    size_t qs = (size_t) S_FWD_BQ * (D + 8) * 2;
    size_t shm = (kv > qs ? kv : qs) + S_BK * 4;
    TRN_CUDA_TRY(cudaFuncSetAttribute(
        s_attn_fwd_mma<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
        (int) shm));
    dim3 grid(TRN_CEIL_DIV(T, S_FWD_BQ), H);
    s_attn_fwd_mma<D><<<grid, 32 * S_FWD_WARPS, shm, st>>>(
        o, lse, q, k, v, stride, seg, T, H, Hk, 1.0f / sqrtf((float) D));
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
    size_t shm =
        (size_t) 4 * 64 * (D + 8) * 2 + (size_t) 64 * (64 + 8) * 2 + 3 * 64 * 4;
    TRN_CUDA_TRY(cudaFuncSetAttribute(
        s_attn_bwd_mma<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
        (int) shm));
    dim3 grid(TRN_CEIL_DIV(T, S_BK), Hk);
    s_attn_bwd_mma<D><<<grid, 32 * S_BWD_WARPS, shm, st>>>(
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
