/*
 * trn_k_attn: causal grouped-query attention, forward and backward, on the
 * tensor cores (mma.sync bf16 m16n8k16, fp32 accumulation), never holding a
 * T x T matrix: the forward pass streams key tiles with an online softmax
 * and keeps the log-sum-exp of every row; the backward pass recomputes the
 * probabilities tile by tile from it (the FlashAttention-2 scheme).
 *
 * Forward: one block of 4 warps per (128 query rows, query head), 32 rows
 * a warp. Backward: one block of 8 warps per (128 keys, kv head), looping
 * over the query heads of the group and the 64-row query tiles at or after
 * the key tile; dK and dV accumulate in registers, dQ in an fp32 buffer
 * through atomics. Both stream their tiles through shared memory with
 * cp.async, double-buffered (the next tile lands while this one is
 * computed), read every mma operand with ldmatrix from padded rows (no
 * bank conflicts), take exponentials base 2 with the scale folded in, skip
 * the mask on tiles that are wholly visible, and hand out the heaviest
 * causal tiles first. Before the backward pass one vectorised kernel forms
 * Delta = rowsum(dO * O) and zeroes the dq buffer; after it another
 * scales and rounds dq to bf16. See the notes above each kernel.
 *
 * Packed sequences: seg[t] is non-decreasing; a query attends to keys of
 * its own sequence at or before it. Tiles entirely in another sequence are
 * skipped.
 */
#include "trn_cuda_common.cuh"
#include "trn_cuda_flash.cuh"
#include "trn_cuda_mma.cuh"

#include <stdlib.h>
#include <string.h>

typedef __nv_bfloat16 bf16;

#define S_LOG2E 1.4426950408889634f
#define S_LN2   0.6931471805599453f

/* 4 bytes global -> shared; zeros where !ok. */
__device__ __forceinline__ void
s_cp4(void *dst, const void *src, bool ok)
{
    uint32_t a = (uint32_t) __cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(a),
                 "l"(src), "r"(ok ? 4 : 0));
}

/* ---- forward -----------------------------------------------------------
 *
 * One block of 4 warps per (128 query rows, query head); warp w owns rows
 * 32w..32w+31 as two m16 tiles, so every K and V fragment read from shared
 * memory feeds two products. Q stays in shared memory (read with ldmatrix
 * per key tile); scores, probabilities and output accumulators stay in
 * registers. Key tiles of 64 stream through two K/V buffers: the copy of
 * tile j+1 is issued right after the one barrier of tile j, and lands
 * while tile j is computed. At head_dim 128 a warp scores a tile 32 keys
 * at a time (the registers). Scores are kept in base-2 units (scale *
 * log2 e folded in), so every exponential is one ex2, and the output is
 * rescaled only when some row of the warp has a new max. Blocks run
 * heaviest first (the last query tiles see the most keys). */

#define S_FWD_WARPS 4
#define S_FWD_BQ    (32 * S_FWD_WARPS)
#define S_FWD_BK    64
/* keys a warp scores at once: 32 at head_dim 128 (the registers) */
#define S_FWD_BC(D) ((D) >= 128 ? 32 : 64)

/* The causal and sequence mask of a sub-tile of BC = 8 NS keys from kc
 * on, for the lane's four rows (rbase + 16m + 8half). */
template <int NS>
static __device__ __forceinline__ void
s_fwd_mask(float (&s)[2][NS][4], const int32_t *seg, int T, int rbase, int kc,
           int t)
{
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int r = rbase + (i >> 1) * 16 + (i & 1) * 8;
        const int sg = r < T ? seg[r] : -1;
#pragma unroll
        for (int n = 0; n < NS; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int tk = kc + n * 8 + 2 * t + e;
                if (tk > r || seg[min(tk, T - 1)] != sg)
                    s[i >> 1][n][(i & 1) * 2 + e] = -INFINITY;
            }
    }
}

template <int D>
__global__ void __launch_bounds__(32 * S_FWD_WARPS, 2)
    s_attn_fwd_mma(trn_bf16_t *o, float *lse, const trn_bf16_t *q,
                   const trn_bf16_t *k, const trn_bf16_t *v, int stride,
                   const int32_t *seg, int T, int H, int Hk, float scale)
{
    constexpr int LDB = D + 8, NT = D / 8, BK = S_FWD_BK;
    constexpr int BC = S_FWD_BC(D), NS = BC / 8; /* sub-tile, its n-tiles */
    constexpr int BQ = S_FWD_BQ, NTH = 32 * S_FWD_WARPS, CH = D / 8;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Qs = reinterpret_cast<bf16 *>(smem);
    bf16 *Ks = Qs + BQ * LDB; /* [2][BK][LDB] */
    bf16 *Vs = Ks + 2 * BK * LDB;

    const int h = blockIdx.x, hk = h / (H / Hk);
    const int q0 = (gridDim.y - 1 - blockIdx.y) * BQ;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const size_t st = (size_t) stride;
    const int qlast = min(q0 + BQ, T) - 1;
    const int seg_first = seg[q0], seg_last = seg[qlast];

    /* key tiles wholly in earlier sequences form a prefix: count them */
    int kskip = 0;
    for (int j0 = 0; j0 <= q0 / BK; j0 += NTH) {
        int j = j0 + (int) threadIdx.x;
        bool before =
            j <= q0 / BK && seg[min(j * BK + BK - 1, T - 1)] < seg_first;
        kskip += __syncthreads_count(before);
    }
    const int kbeg = kskip * BK;
    const int ntiles = qlast >= kbeg ? (qlast - kbeg) / BK + 1 : 0;

    /* Q rows of this block, then the first K/V tile, as one copy group */
    for (int i = threadIdx.x; i < BQ * CH; i += NTH) {
        int r = i / CH, c = (i % CH) * 8;
        bool ok = q0 + r < T;
        trn_cp16(Qs + r * LDB + c,
                 q + (size_t) h * D + (size_t) (ok ? q0 + r : 0) * st + c, ok);
    }
    auto load_kv = [&](int buf, int k0) {
        bf16 *kd = Ks + buf * BK * LDB, *vd = Vs + buf * BK * LDB;
        for (int i = threadIdx.x; i < BK * CH; i += NTH) {
            int r = i / CH, c = (i % CH) * 8;
            bool ok = k0 + r < T;
            size_t off = (size_t) (ok ? k0 + r : 0) * st + (size_t) hk * D + c;
            trn_cp16(kd + r * LDB + c, k + off, ok);
            trn_cp16(vd + r * LDB + c, v + off, ok);
        }
    };
    if (ntiles > 0)
        load_kv(0, kbeg);
    trn_cp_commit();

    /* my four rows: i = 2m + half is row q0 + 32w + 16m + 8half + g */
    float acc[2][NT][4], mr[4], lr[4];
    trn_fa_init<NT>(acc, mr, lr);
    const float sc = scale * S_LOG2E;
    const int wfirst = q0 + warp * 32;
    const int rbase = wfirst + g;

    for (int j = 0; j < ntiles; j++) {
        const int k0 = kbeg + j * BK, buf = j & 1;
        /* tile j has landed, and every warp is done with tile j - 1,
         * whose buffers take tile j + 1 */
        trn_cp_wait<0>();
        __syncthreads();
        if (j + 1 < ntiles)
            load_kv(buf ^ 1, k0 + BK);
        trn_cp_commit();
#pragma unroll
        for (int sub = 0; sub < BK / BC; sub++) {
            const int kc = k0 + sub * BC;
            /* rows of this warp entirely before the sub-tile, or the
             * sub-tile wholly in earlier sequences: nothing to see */
            if (wfirst + 31 < kc || seg[min(kc + BC - 1, T - 1)] < seg_first)
                continue;
            const bf16 *Kb = Ks + (buf * BK + sub * BC) * LDB;
            const bf16 *Vb = Vs + (buf * BK + sub * BC) * LDB;
            const bool full = kc + BC - 1 <= q0 && seg[kc] == seg_last;

            float s[2][NS][4];
            trn_fa_scores<D, BC>(s, Qs, Kb, warp, lane);
            if (!full)
                s_fwd_mask<NS>(s, seg, T, rbase, kc, t);
            float alpha[4];
            trn_fa_softmax<NS>(s, mr, lr, alpha, sc);
            trn_fa_rescale<NT>(acc, alpha);
            trn_fa_pv<D, BC>(acc, s, Vb, lane);
        }
    }
    /* normalise and store */
    const size_t ost = (size_t) (H * D);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int m = i >> 1, e0 = (i & 1) * 2;
        const int r = rbase + m * 16 + (i & 1) * 8;
        if (r >= T)
            continue;
        float il = lr[i] > 0.0f ? 1.0f / lr[i] : 0.0f;
#pragma unroll
        for (int n = 0; n < NT; n++)
            *reinterpret_cast<uint32_t *>(o + (size_t) r * ost +
                                          (size_t) h * D + n * 8 + 2 * t) =
                trn_pack2(acc[m][n][e0] * il, acc[m][n][e0 + 1] * il);
        if (t == 0)
            lse[(size_t) h * T + r] =
                lr[i] > 0.0f ? (mr[i] + log2f(lr[i])) * S_LN2 : INFINITY;
    }
}

/* Delta[h*T + t] = sum_d dO[t,h,d] * O[t,h,d] for the rows [t][h] of
 * dO and O (each [T][H*D]), and dq_acc (laid out as they are) zeroed: D/8
 * lanes a row, 8 elements a lane. */
template <int D>
__global__ void
s_attn_delta(float *delta, float *dq_acc, const trn_bf16_t *dout,
             const trn_bf16_t *o, int T, int H)
{
    constexpr int L = D / 8;
    const size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x;
    const size_t row = i / L, e = row * D + (i % L) * 8;
    const bool ok = row < (size_t) T * H;
    float s = 0.0f;
    if (ok) {
        uint4 a = *reinterpret_cast<const uint4 *>(dout + e);
        uint4 b = *reinterpret_cast<const uint4 *>(o + e);
        const __nv_bfloat162 *pa = reinterpret_cast<const __nv_bfloat162 *>(&a);
        const __nv_bfloat162 *pb = reinterpret_cast<const __nv_bfloat162 *>(&b);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float2 x = __bfloat1622float2(pa[j]), y = __bfloat1622float2(pb[j]);
            s = fmaf(x.x, y.x, fmaf(x.y, y.y, s));
        }
        float4 z = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        reinterpret_cast<float4 *>(dq_acc + e)[0] = z;
        reinterpret_cast<float4 *>(dq_acc + e)[1] = z;
    }
#pragma unroll
    for (int off = L / 2; off > 0; off >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, off);
    if (ok && i % L == 0)
        delta[(size_t) (row % H) * T + row / H] = s;
}

/* ---- backward ----------------------------------------------------------
 *
 * One block of 8 warps per (128 keys, kv head); warp w owns keys
 * 16w..16w+15 and keeps their dK and dV accumulators in registers for the
 * whole pass. For every 64-row query tile (of each query head of the
 * group) it forms S^T and dP^T for its keys (keys are the rows, so P^T and
 * dS^T come out in the accumulator layout that feeds dV += P^T dO and
 * dK += dS^T Q directly), then shares dS^T through shared memory so that
 * the warps, as 4 row tiles x 2 column halves, add dQ = dS K of the tile
 * into the fp32 dq buffer with paired atomics. Q, dO and the rows'
 * log-sum-exp, Delta and sequence of the next tile are copied in while
 * this one is computed; one barrier a tile suffices, as dS^T is
 * double-buffered. dS is kept without the softmax scale, which dK and dQ
 * take once at the end. Blocks run heaviest first (the first key tiles
 * are seen by the most queries). */

#define S_BWD_WARPS 8
#define S_BWD_BK    (16 * S_BWD_WARPS)
#define S_BWD_BQ    64

/* dS^T of a tile none of whose queries sees the warp's keys: zeros */
static __device__ __forceinline__ void
s_bwd_zero_ds(bf16 *dsb, int warp, int g, int t)
{
    constexpr int LDS = S_BWD_BQ + 8;
#pragma unroll
    for (int n = 0; n < 8; n++) {
        int c = n * 8 + 2 * t;
        *reinterpret_cast<uint32_t *>(dsb + (warp * 16 + g) * LDS + c) = 0u;
        *reinterpret_cast<uint32_t *>(dsb + (warp * 16 + g + 8) * LDS + c) = 0u;
    }
}

/* S^T = K_w Q^T and dP^T = V_w dO^T (the warp's 16 keys x 64 queries) */
template <int D>
static __device__ __forceinline__ void
s_bwd_scores(float (&sT)[8][4], float (&dpT)[8][4], const bf16 *Ks,
             const bf16 *Vs, const bf16 *Qb, const bf16 *dOb, int warp,
             int lane)
{
    constexpr int LDB = D + 8, KT = D / 16;
#pragma unroll
    for (int n = 0; n < 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            sT[n][e] = dpT[n][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KT; kk++) {
        uint32_t ak[4], av[4];
        trn_ldsm_a(ak, Ks, LDB, warp * 16, kk, lane);
        trn_ldsm_a(av, Vs, LDB, warp * 16, kk, lane);
#pragma unroll
        for (int n = 0; n < 8; n += 2) {
            uint32_t bq[4], bo[4];
            trn_ldsm_bn(bq, Qb, LDB, kk, n, lane);
            trn_ldsm_bn(bo, dOb, LDB, kk, n, lane);
            trn_mma(sT[n], ak, bq[0], bq[1]);
            trn_mma(sT[n + 1], ak, bq[2], bq[3]);
            trn_mma(dpT[n], av, bo[0], bo[1]);
            trn_mma(dpT[n + 1], av, bo[2], bo[3]);
        }
    }
}

/* The causal and sequence mask of S^T: keys kr0 and kr1 (of sequences
 * sk0, sk1) against the tile's queries from q0 (of sequences segb) */
static __device__ __forceinline__ void
s_bwd_mask(float (&sT)[8][4], const int *segb, int q0, int T, int kr0, int kr1,
           int sk0, int sk1, int t)
{
#pragma unroll
    for (int n = 0; n < 8; n++)
#pragma unroll
        for (int e1 = 0; e1 < 2; e1++) {
            const int col = n * 8 + 2 * t + e1;
            const int tq = q0 + col, sq = segb[col];
            if (!(tq < T && kr0 <= tq && sq == sk0))
                sT[n][e1] = -INFINITY;
            if (!(tq < T && kr1 <= tq && sq == sk1))
                sT[n][2 + e1] = -INFINITY;
        }
}

/* P^T from the rows' log-sum-exp, and dS^T = P^T (dP^T - Delta) without
 * the softmax scale (dK and dQ take it at the end), in place */
static __device__ __forceinline__ void
s_bwd_probs(float (&sT)[8][4], float (&dpT)[8][4], const float *lseb,
            const float *delb, float sc, int t)
{
#pragma unroll
    for (int n = 0; n < 8; n++)
#pragma unroll
        for (int e1 = 0; e1 < 2; e1++) {
            const int col = n * 8 + 2 * t + e1;
            const float l2 = lseb[col] * S_LOG2E, dl = delb[col];
            float p0 = exp2f(fmaf(sT[n][e1], sc, -l2));
            float p1 = exp2f(fmaf(sT[n][2 + e1], sc, -l2));
            sT[n][e1] = p0;
            sT[n][2 + e1] = p1;
            dpT[n][e1] = p0 * (dpT[n][e1] - dl);
            dpT[n][2 + e1] = p1 * (dpT[n][2 + e1] - dl);
        }
}

/* dV += P^T dO, dK += dS^T Q (k-steps over the 64 queries) */
template <int D>
static __device__ __forceinline__ void
s_bwd_accum(float (&dK)[D / 8][4], float (&dV)[D / 8][4],
            const float (&sT)[8][4], const float (&dpT)[8][4], const bf16 *Qb,
            const bf16 *dOb, int lane)
{
    constexpr int LDB = D + 8, NT = D / 8;
#pragma unroll
    for (int kk = 0; kk < S_BWD_BQ / 16; kk++) {
        uint32_t pa[4], sa[4];
        pa[0] = trn_pack2(sT[2 * kk][0], sT[2 * kk][1]);
        pa[1] = trn_pack2(sT[2 * kk][2], sT[2 * kk][3]);
        pa[2] = trn_pack2(sT[2 * kk + 1][0], sT[2 * kk + 1][1]);
        pa[3] = trn_pack2(sT[2 * kk + 1][2], sT[2 * kk + 1][3]);
        sa[0] = trn_pack2(dpT[2 * kk][0], dpT[2 * kk][1]);
        sa[1] = trn_pack2(dpT[2 * kk][2], dpT[2 * kk][3]);
        sa[2] = trn_pack2(dpT[2 * kk + 1][0], dpT[2 * kk + 1][1]);
        sa[3] = trn_pack2(dpT[2 * kk + 1][2], dpT[2 * kk + 1][3]);
#pragma unroll
        for (int n = 0; n < NT; n += 2) {
            uint32_t bo[4], bq[4];
            trn_ldsm_b2(bo, dOb, LDB, kk, n, lane);
            trn_ldsm_b2(bq, Qb, LDB, kk, n, lane);
            trn_mma(dV[n], pa, bo[0], bo[1]);
            trn_mma(dV[n + 1], pa, bo[2], bo[3]);
            trn_mma(dK[n], sa, bq[0], bq[1]);
            trn_mma(dK[n + 1], sa, bq[2], bq[3]);
        }
    }
}

/* share dS^T: row = key (local), column = query (local) */
static __device__ __forceinline__ void
s_bwd_share_ds(bf16 *dsb, const float (&dpT)[8][4], int warp, int g, int t)
{
    constexpr int LDS = S_BWD_BQ + 8;
#pragma unroll
    for (int n = 0; n < 8; n++) {
        int c = n * 8 + 2 * t;
        *reinterpret_cast<uint32_t *>(dsb + (warp * 16 + g) * LDS + c) =
            trn_pack2(dpT[n][0], dpT[n][1]);
        *reinterpret_cast<uint32_t *>(dsb + (warp * 16 + g + 8) * LDS + c) =
            trn_pack2(dpT[n][2], dpT[n][3]);
    }
}

/* dQ (query rows 16(w%4).., columns of half w/4) = dS K over the block's
 * 128 keys, added into the fp32 buffer of query head h */
template <int D>
static __device__ __forceinline__ void
s_bwd_dq(float *dq_acc, const bf16 *dsb, const bf16 *Ks, int q0, int h, int T,
         int H, int warp, int lane, int g, int t)
{
    constexpr int BK = S_BWD_BK, LDB = D + 8, LDS = S_BWD_BQ + 8;
    constexpr int DQS = D >= 32 ? 2 : 1; /* dQ column halves */
    constexpr int NTQ = D / 8 / DQS;
    const int mt = warp & 3, dh = warp >> 2;
    if (dh < DQS) {
        float dq[NTQ][4];
#pragma unroll
        for (int n = 0; n < NTQ; n++)
            dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) {
            /* A = dS (queries x keys) from dsT (keys x queries):
             * tiles (keys +0, queries +0), (+0, +8), (+8, +0),
             * (+8, +8) of these 16 queries */
            uint32_t a[4];
            {
                const int m = lane >> 3, row = lane & 7;
                trn_ldsm_t(a, dsb + (kk * 16 + (m >> 1) * 8 + row) * LDS +
                                  mt * 16 + (m & 1) * 8);
            }
#pragma unroll
            for (int n = 0; n < NTQ; n += 2) {
                uint32_t b[4];
                trn_ldsm_b2(b, Ks, LDB, kk, dh * NTQ + n, lane);
                trn_mma(dq[n], a, b[0], b[1]);
                trn_mma(dq[n + 1], a, b[2], b[3]);
            }
        }
        const int tq0 = q0 + mt * 16 + g, tq1 = tq0 + 8;
#pragma unroll
        for (int n = 0; n < NTQ; n++) {
            int c = (dh * NTQ + n) * 8 + 2 * t;
            if (tq0 < T)
                atomicAdd(reinterpret_cast<float2 *>(
                              dq_acc + ((size_t) tq0 * H + h) * D + c),
                          make_float2(dq[n][0], dq[n][1]));
            if (tq1 < T)
                atomicAdd(reinterpret_cast<float2 *>(
                              dq_acc + ((size_t) tq1 * H + h) * D + c),
                          make_float2(dq[n][2], dq[n][3]));
        }
    }
}

/* dK (with the softmax scale) and dV of the lane's keys kr0, kr1 */
template <int D>
static __device__ __forceinline__ void
s_bwd_store(trn_bf16_t *dk, trn_bf16_t *dv, int dstride,
            const float (&dK)[D / 8][4], const float (&dV)[D / 8][4], int kr0,
            int kr1, int hk, int T, float scale, int t)
{
    constexpr int NT = D / 8;
#pragma unroll
    for (int n = 0; n < NT; n++) {
        int c = n * 8 + 2 * t;
        if (kr0 < T) {
            size_t off = (size_t) kr0 * (size_t) dstride + (size_t) hk * D + c;
            *reinterpret_cast<uint32_t *>(dk + off) =
                trn_pack2(dK[n][0] * scale, dK[n][1] * scale);
            *reinterpret_cast<uint32_t *>(dv + off) =
                trn_pack2(dV[n][0], dV[n][1]);
        }
        if (kr1 < T) {
            size_t off = (size_t) kr1 * (size_t) dstride + (size_t) hk * D + c;
            *reinterpret_cast<uint32_t *>(dk + off) =
                trn_pack2(dK[n][2] * scale, dK[n][3] * scale);
            *reinterpret_cast<uint32_t *>(dv + off) =
                trn_pack2(dV[n][2], dV[n][3]);
        }
    }
}

template <int D>
__global__ void __launch_bounds__(32 * S_BWD_WARPS, 1)
    s_attn_bwd_mma(trn_bf16_t *dk, trn_bf16_t *dv, int dstride, float *dq_acc,
                   const float *delta, const trn_bf16_t *dout, const float *lse,
                   const trn_bf16_t *q, const trn_bf16_t *k,
                   const trn_bf16_t *v, int stride, const int32_t *seg, int T,
                   int H, int Hk, float scale)
{
    constexpr int BK = S_BWD_BK, BQ = S_BWD_BQ, LDB = D + 8, LDS = BQ + 8;
    constexpr int NT = D / 8, CH = D / 8;
    constexpr int NTH = 32 * S_BWD_WARPS;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Ks = reinterpret_cast<bf16 *>(smem);
    bf16 *Vs = Ks + BK * LDB;
    bf16 *Qs = Vs + BK * LDB; /* [2][BQ][LDB] */
    bf16 *dOs = Qs + 2 * BQ * LDB;
    bf16 *dsT = dOs + 2 * BQ * LDB; /* [2][BK][LDS] */
    float *lse_s = reinterpret_cast<float *>(dsT + 2 * BK * LDS); /* [2][BQ] */
    float *del_s = lse_s + 2 * BQ;
    int *segq = reinterpret_cast<int *>(del_s + 2 * BQ);

    const int hk = blockIdx.x, G = H / Hk;
    const int k0 = blockIdx.y * BK;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const size_t st = (size_t) stride, ost = (size_t) (H * D);
    const int seg_klast = seg[min(k0 + BK - 1, T - 1)];

    /* query tiles from k0 on, up to the end of the last key's sequence */
    int nq = 0;
    {
        const int ntot = TRN_CEIL_DIV(T - k0, BQ);
        for (int j0 = 0; j0 < ntot; j0 += NTH) {
            int j = j0 + (int) threadIdx.x;
            bool in = j < ntot && seg[k0 + j * BQ] <= seg_klast;
            nq += __syncthreads_count(in);
        }
    }
    const int niter = nq * G;

    for (int i = threadIdx.x; i < BK * CH; i += NTH) {
        int r = i / CH, c = (i % CH) * 8;
        bool ok = k0 + r < T;
        size_t off = (size_t) (ok ? k0 + r : 0) * st + (size_t) hk * D + c;
        trn_cp16(Ks + r * LDB + c, k + off, ok);
        trn_cp16(Vs + r * LDB + c, v + off, ok);
    }
    auto load_q = [&](int buf, int it) {
        const int h = hk * G + it / nq, qq = k0 + (it % nq) * BQ;
        bf16 *qd = Qs + buf * BQ * LDB, *od = dOs + buf * BQ * LDB;
        for (int i = threadIdx.x; i < BQ * CH; i += NTH) {
            int r = i / CH, c = (i % CH) * 8;
            bool ok = qq + r < T;
            size_t row = (size_t) (ok ? qq + r : 0);
            trn_cp16(qd + r * LDB + c, q + row * st + (size_t) h * D + c, ok);
            trn_cp16(od + r * LDB + c, dout + row * ost + (size_t) h * D + c,
                     ok);
        }
        int i = threadIdx.x;
        if (i < 3 * BQ) {
            int r = i % BQ, what = i / BQ, tq = qq + r;
            bool ok = tq < T;
            size_t at = (size_t) h * T + (ok ? tq : 0);
            if (what == 0)
                s_cp4(lse_s + buf * BQ + r, lse + at, ok);
            else if (what == 1)
                s_cp4(del_s + buf * BQ + r, delta + at, ok);
            else
                s_cp4(segq + buf * BQ + r, seg + (ok ? tq : 0), ok);
        }
    };
    if (niter > 0)
        load_q(0, 0);
    trn_cp_commit();
    trn_cp_wait<0>();
    __syncthreads();

    const int kw = k0 + warp * 16; /* this warp's first key */
    const int kr0 = kw + g, kr1 = kr0 + 8;
    const int sk0 = kr0 < T ? seg[kr0] : -2, sk1 = kr1 < T ? seg[kr1] : -2;
    const int skw = kw < T ? seg[kw] : -2;
    const float sc = scale * S_LOG2E;
    float dK[NT][4], dV[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            dK[n][e] = dV[n][e] = 0.0f;

    for (int it = 0; it < niter; it++) {
        const int buf = it & 1;
        const int h = hk * G + it / nq, q0 = k0 + (it % nq) * BQ;
        /* the buffers of tile it - 1 take tile it + 1: every warp passed
         * the barrier after reading them */
        if (it + 1 < niter)
            load_q(buf ^ 1, it + 1);
        trn_cp_commit();
        bf16 *dsb = dsT + buf * BK * LDS;
        const bf16 *Qb = Qs + buf * BQ * LDB, *dOb = dOs + buf * BQ * LDB;
        const float *lseb = lse_s + buf * BQ, *delb = del_s + buf * BQ;
        const int *segb = segq + buf * BQ;

        if (kw > q0 + BQ - 1) {
            /* every query of the tile is before this warp's keys */
            s_bwd_zero_ds(dsb, warp, g, t);
        } else {
            float sT[8][4], dpT[8][4];
            s_bwd_scores<D>(sT, dpT, Ks, Vs, Qb, dOb, warp, lane);
            /* P^T and dS^T in place; the mask only where some pair of
             * the warp's keys and the tile's queries is hidden */
            const bool full =
                q0 >= kw + 15 && q0 + BQ - 1 < T && segb[BQ - 1] == skw;
            if (!full)
                s_bwd_mask(sT, segb, q0, T, kr0, kr1, sk0, sk1, t);
            s_bwd_probs(sT, dpT, lseb, delb, sc, t);
            s_bwd_accum<D>(dK, dV, sT, dpT, Qb, dOb, lane);
            s_bwd_share_ds(dsb, dpT, warp, g, t);
        }
        /* tile it + 1 has landed and dS^T is whole */
        trn_cp_wait<0>();
        __syncthreads();
        s_bwd_dq<D>(dq_acc, dsb, Ks, q0, h, T, H, warp, lane, g, t);
    }
    s_bwd_store<D>(dk, dv, dstride, dK, dV, kr0, kr1, hk, T, scale, t);
}

/* dq[t, h*D + c] = bf16(scale * dq_acc[(t*H + h)*D + c]), 8 a thread. */
__global__ void
s_dq_store(trn_bf16_t *dq, int dstride, const float *dq_acc, int T, int H,
           int D, float scale)
{
    const size_t n = (size_t) T * H * D / 8, HD = (size_t) H * D;
    for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n;
         i += (size_t) gridDim.x * blockDim.x) {
        const size_t e = i * 8, t = e / HD, hc = e % HD;
        float4 a = reinterpret_cast<const float4 *>(dq_acc + e)[0];
        float4 b = reinterpret_cast<const float4 *>(dq_acc + e)[1];
        uint4 r;
        r.x = trn_pack2(a.x * scale, a.y * scale);
        r.y = trn_pack2(a.z * scale, a.w * scale);
        r.z = trn_pack2(b.x * scale, b.y * scale);
        r.w = trn_pack2(b.z * scale, b.w * scale);
        *reinterpret_cast<uint4 *>(dq + t * (size_t) dstride + hc) = r;
    }
}

template <int D>
static lisa_rc_t
s_fwd(trn_bf16_t *o, float *lse, const trn_bf16_t *q, const trn_bf16_t *k,
      const trn_bf16_t *v, int stride, const int32_t *seg, int T, int H, int Hk,
      cudaStream_t st)
{
    /* Q rows + two K and two V buffers */
    size_t shm = (size_t) (S_FWD_BQ + 4 * S_FWD_BK) * (D + 8) * 2;
    TRN_CUDA_TRY(cudaFuncSetAttribute(
        s_attn_fwd_mma<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
        (int) shm));
    dim3 grid(H, TRN_CEIL_DIV(T, S_FWD_BQ));
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
    /* K, V; two each of Q, dO, dS^T and the rows' lse, Delta, seg */
    size_t shm = (size_t) (2 * S_BWD_BK + 4 * S_BWD_BQ) * (D + 8) * 2 +
                 (size_t) 2 * S_BWD_BK * (S_BWD_BQ + 8) * 2 +
                 (size_t) 6 * S_BWD_BQ * 4;
    TRN_CUDA_TRY(cudaFuncSetAttribute(
        s_attn_bwd_mma<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
        (int) shm));
    dim3 grid(Hk, TRN_CEIL_DIV(T, S_BWD_BK));
    s_attn_bwd_mma<D><<<grid, 32 * S_BWD_WARPS, shm, st>>>(
        dk, dv, dstride, dq_acc, delta, dout, lse, q, k, v, stride, seg, T, H,
        Hk, 1.0f / sqrtf((float) D));
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}

static bool
s_aligned16(const void *p)
{
    return ((uintptr_t) p & 15) == 0;
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

/* Whether the device is of compute capability 9.x (asked once). */
static bool
s_sm90(void)
{
    static int major = -1; /* racy first read: every thread finds the same */
    if (major < 0)
        major = trn_cuda_cc_major();
    return major == 9;
}

/* Whether LISA_ATTN_PORTABLE is set to anything but 0 (read every call):
 * the portable mma.sync kernels only. */
static bool
s_portable(void)
{
    const char *e = getenv("LISA_ATTN_PORTABLE");
    return e && *e && strcmp(e, "0") != 0;
}

/* Whether the forward pass at head_dim 128 runs the wgmma kernel
 * (trn_k_attn_h.cu): on a device of compute capability 9.x, unless
 * s_portable. */
static bool
s_hopper_fwd(void)
{
    return s_sm90() && !s_portable();
}

bool
trn_attn_hopper(void)
{
    return s_hopper_fwd();
}

/* Whether the backward pass at head_dim 128 runs the wgmma kernel
 * (trn_k_attn_hb.cu): on a device of compute capability 9.x unless
 * LISA_ATTN_HOPPER_BWD is 0 (read every call) or s_portable. */
static bool
s_hopper_bwd(void)
{
    const char *e = getenv("LISA_ATTN_HOPPER_BWD");
    return s_sm90() && !(e && strcmp(e, "0") == 0) && !s_portable();
}

extern "C" lisa_rc_t
trn_k_attn_fwd(trn_bf16_t *o, float *lse, const trn_bf16_t *q,
               const trn_bf16_t *k, const trn_bf16_t *v, int stride,
               const int32_t *seg, int T, int H, int Hk, int D,
               trn_cuda_stream_t *s)
{
    TRN_REQUIRE(o && lse && q && k && v && seg && T > 0);
    TRN_REQUIRE(H > 0 && Hk > 0 && H % Hk == 0 && stride % 8 == 0);
    TRN_REQUIRE(s_aligned16(q) && s_aligned16(k) && s_aligned16(v));
    if (D == 128 && s_hopper_fwd())
        return trn_k_attn_fwd_h(o, lse, q, k, v, stride, seg, T, H, Hk,
                                trn_stream(s));
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
    TRN_REQUIRE(s_aligned16(q) && s_aligned16(k) && s_aligned16(v));
    TRN_REQUIRE(s_aligned16(dq) && s_aligned16(dout) && s_aligned16(o) &&
                s_aligned16(scratch));
    if (D != 16 && D != 32 && D != 64 && D != 128)
        return LISA_UNSUPPORTED;
    cudaStream_t st = trn_stream(s);
    float *dq_acc = scratch; /* first: the paired atomics need 8 bytes */
    float *delta = scratch + (size_t) T * H * D;
    const unsigned nb = (unsigned) TRN_CEIL_DIV((size_t) T * H * (D / 8), 256);
    switch (D) {
    case 16:
        s_attn_delta<16><<<nb, 256, 0, st>>>(delta, dq_acc, dout, o, T, H);
        break;
    case 32:
        s_attn_delta<32><<<nb, 256, 0, st>>>(delta, dq_acc, dout, o, T, H);
        break;
    case 64:
        s_attn_delta<64><<<nb, 256, 0, st>>>(delta, dq_acc, dout, o, T, H);
        break;
    default:
        s_attn_delta<128><<<nb, 256, 0, st>>>(delta, dq_acc, dout, o, T, H);
        break;
    }
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
        rc = s_hopper_bwd()
                 ? trn_k_attn_bwd_h(dk, dv, dstride, dq_acc, delta, dout, lse,
                                    q, k, v, stride, seg, T, H, Hk, st)
                 : s_bwd<128>(dk, dv, dstride, dq_acc, delta, dout, lse, q, k,
                              v, stride, seg, T, H, Hk, st);
        break;
    }
    if (rc != LISA_OK)
        return rc;
    size_t n = (size_t) T * H * D / 8 / 256 + 1;
    unsigned blocks = (unsigned) (n > 65535 ? 65535 : n);
    s_dq_store<<<blocks, 256, 0, st>>>(dq, dstride, dq_acc, T, H, D,
                                       1.0f / sqrtf((float) D));
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}
