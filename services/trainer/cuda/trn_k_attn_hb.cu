/*
 * trn_k_attn_hb: the backward pass of causal grouped-query attention at
 * head_dim 128 on Hopper's asynchronous tensor cores (wgmma, sm_90a: built
 * for that target alone, beside trn_k_attn_h.cu). It replaces the main
 * kernel of trn_k_attn_bwd (trn_k_attn.cu) on a device of compute
 * capability 9.x unless LISA_ATTN_HOPPER_BWD=0; the Delta kernel before it and
 * the dq kernel after it are shared, and so are the layouts: q, k, v rows of
 * `stride` bf16, dO as [T][H*D], lse as [H][T] natural-log fp32, packed
 * sequences by a non-decreasing seg[t], dk and dv written as the portable
 * kernel writes them, dq added (without the softmax scale) into the fp32
 * buffer that the dq kernel scales and rounds.
 *
 * One block of two warpgroups per (128 keys, kv head); warpgroup w owns
 * keys 64w..64w+63 of the block's, warp i of it keys 16i..16i+15 of
 * those, and keeps their dK and dV (64 x 128 each) in accumulators for
 * the whole pass. The block loops over the query heads of the group and
 * the 64-row query tiles at or after its first key (up to the end of its
 * last key's sequence), as the FlashAttention-2 backward does, with keys
 * as the rows of every product so that the accumulators of one are the
 * register operand of the next:
 *
 *   S^T  = K_w Q^T        m64n64,  K and Q K-major in shared memory
 *   dP^T = V_w dO^T       m64n64,  the same with V and dO
 *   P^T  = exp2(S^T sc - lse log2 e),  dS^T = P^T (dP^T - Delta)
 *   dV  += P^T dO         m64n128, P^T from registers, dO MN-major
 *   dK  += dS^T Q         m64n128, dS^T from registers, Q MN-major
 *   dQ   = dS K           m64n64 per warpgroup (its 64 columns of dQ)
 *                         over the block's 128 keys: dS^T stored to
 *                         shared memory (swizzled) and read MN-major as
 *                         A, K MN-major as B; added with fp32 atomics
 *                         of two values (four values an atomic, or the
 *                         copy engine's bulk adds from shared memory,
 *                         were no faster on an H200).
 *
 * Every operand tile sits in shared memory in the 128-byte swizzle (see
 * trn_cuda_wgmma.cuh). K and V are copied once; Q, dO and the rows' lse
 * and Delta go through two buffers: tile it + 1 is copied (cp.async)
 * while tile it is computed. Two block barriers a tile: one after the
 * copies of the tile landed (which also frees the other buffers), one
 * after dS^T is whole. The mask is applied only on tiles where some pair
 * of the warpgroup's keys and the tile's queries is hidden (the diagonal,
 * sequence boundaries, the end); no branch surrounds a product in flight,
 * so a warpgroup none of whose keys the tile sees computes it masked
 * whole (only the first query tile of each head, for warpgroup 1). Blocks
 * run heaviest first (the first key tiles are seen by the most queries).
 */
#include "trn_cuda_common.cuh"
#include "trn_cuda_mma.cuh"
#include "trn_cuda_wgmma.cuh"

#define S_LOG2E 1.4426950408889634f

#define S_D   128          /* head_dim */
#define S_BK  128          /* keys a block, 64 a warpgroup */
#define S_BQ  64           /* queries a tile */
#define S_NTH 256          /* two warpgroups */
#define S_KT  (S_BK * 256) /* bytes of a 128-row tile (two halves) */
#define S_QT  (S_BQ * 256) /* bytes of a 64-row tile */
/* shared memory from its 1 KiB-aligned start: K, V, two Q, two dO, dS^T
 * (128 keys x 64 queries: one half), lse and Delta [2][64] each */
#define S_OFF_K  0
#define S_OFF_V  S_KT
#define S_OFF_Q  (2 * S_KT)
#define S_OFF_DO (2 * S_KT + 2 * S_QT)
#define S_OFF_DS (2 * S_KT + 4 * S_QT)
#define S_OFF_L  (S_OFF_DS + S_BK * 128)
#define S_SMEM   (S_OFF_L + 4 * S_BQ * 4 + 1024) /* with alignment slack */

static_assert(S_D == 128 && S_BK == 128 && S_BQ == 64, "tile shapes");

/* What a thread's loop needs. */
struct s_bctx {
    unsigned char *sm;    /* shared memory (aligned), generic */
    uint32_t base;        /* and its shared address */
    const trn_bf16_t *qh; /* column 0 of head 0 in q and in dO */
    const trn_bf16_t *doh;
    const float *lse, *delta;
    const int32_t *seg;
    size_t st, ost; /* row strides of q and dO */
    int T, H, G, hk, k0, nq;
    int wg, warp, g, t; /* warpgroup, warp in it, lane's row and pair */
    int kw, kr0, kr1;   /* warpgroup's first key, the lane's two keys */
    int skw, sk0, sk1;  /* their sequences (-2 past T) */
};

/* The query head and first row of iteration it. */
static __device__ __forceinline__ int
s_head(const s_bctx &c, int it)
{
    return c.hk * c.G + it / c.nq;
}

static __device__ __forceinline__ int
s_qrow(const s_bctx &c, int it)
{
    return c.k0 + (it % c.nq) * S_BQ;
}

/* Query tiles from k0 on, up to the end of the last key's sequence
 * (every thread of the block takes part). */
static __device__ __forceinline__ int
s_count_q(const int32_t *seg, int k0, int T)
{
    const int sl = seg[min(k0 + S_BK - 1, T - 1)];
    const int ntot = TRN_CEIL_DIV(T - k0, S_BQ);
    int n = 0;
    for (int j0 = 0; j0 < ntot; j0 += S_NTH) {
        const int j = j0 + (int) threadIdx.x;
        n += __syncthreads_count(j < ntot && seg[k0 + j * S_BQ] <= sl);
    }
    return n;
}

/* Copies Q, dO, lse and Delta of iteration it into buffer buf. */
static __device__ __forceinline__ void
s_load_q(const s_bctx &c, int buf, int it)
{
    const int h = s_head(c, it), q0 = s_qrow(c, it), tid = threadIdx.x;
    trn_wg_load<S_BQ, S_NTH>(c.base + S_OFF_Q + buf * S_QT,
                             c.qh + (size_t) h * S_D, c.st, q0, c.T, tid);
    trn_wg_load<S_BQ, S_NTH>(c.base + S_OFF_DO + buf * S_QT,
                             c.doh + (size_t) h * S_D, c.ost, q0, c.T, tid);
    if (tid < 2 * S_BQ) {
        const int r = tid & (S_BQ - 1), what = tid / S_BQ, tq = q0 + r;
        const bool ok = tq < c.T;
        const size_t at = (size_t) h * c.T + (ok ? tq : 0);
        trn_wg_cp4(c.base + S_OFF_L + ((what * 2 + buf) * S_BQ + r) * 4,
                   (what ? c.delta : c.lse) + at, ok);
    }
}

/* Issues S^T = K_w Q^T and dP^T = V_w dO^T, one commit group each. */
static __device__ __forceinline__ void
s_scores_issue(float (&sT)[32], float (&dpT)[32], const s_bctx &c, int buf)
{
    const uint32_t kw = c.base + S_OFF_K + c.wg * 64 * 128;
    const uint32_t vw = c.base + S_OFF_V + c.wg * 64 * 128;
    const uint32_t qb = c.base + S_OFF_Q + buf * S_QT;
    const uint32_t ob = c.base + S_OFF_DO + buf * S_QT;
    trn_wg_fence();
#pragma unroll
    for (int kk = 0; kk < S_D / 16; kk++) {
        const uint32_t ok = (kk >> 2) * (S_KT / 2) + (kk & 3) * 32;
        const uint32_t oq = (kk >> 2) * (S_QT / 2) + (kk & 3) * 32;
        trn_wg_ss64<0, 0>(sT, trn_wg_desc(kw + ok, 16),
                          trn_wg_desc(qb + oq, 16), kk > 0);
    }
    trn_wg_commit();
#pragma unroll
    for (int kk = 0; kk < S_D / 16; kk++) {
        const uint32_t ok = (kk >> 2) * (S_KT / 2) + (kk & 3) * 32;
        const uint32_t oq = (kk >> 2) * (S_QT / 2) + (kk & 3) * 32;
        trn_wg_ss64<0, 0>(dpT, trn_wg_desc(vw + ok, 16),
                          trn_wg_desc(ob + oq, 16), kk > 0);
    }
    trn_wg_commit();
}

/* Whether every pair of the warpgroup's keys and the tile's queries from
 * q0 is visible (all queries after all keys, one sequence, inside T). */
static __device__ __forceinline__ bool
s_unmasked(const s_bctx &c, int q0)
{
    return q0 >= c.kw + 63 && q0 + S_BQ - 1 < c.T &&
           c.seg[q0 + S_BQ - 1] == c.skw;
}

/* The causal and sequence mask of S^T: the lane's keys kr0 (sT[4j + e])
 * and kr1 (sT[4j + 2 + e]) against queries q0 + 8j + 2t + e. */
static __device__ __forceinline__ void
s_mask(float (&sT)[32], const s_bctx &c, int q0)
{
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int tq = q0 + 8 * j + 2 * c.t + e;
            const int sq = tq < c.T ? c.seg[tq] : -1;
            if (!(tq < c.T && c.kr0 <= tq && sq == c.sk0))
                sT[4 * j + e] = -INFINITY;
            if (!(tq < c.T && c.kr1 <= tq && sq == c.sk1))
                sT[4 * j + 2 + e] = -INFINITY;
        }
}

/* P^T in place from the queries' log-sum-exp (buffer lb, natural log). */
static __device__ __forceinline__ void
s_probs(float (&sT)[32], const float *lb, float sc, int t)
{
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const float2 l = *reinterpret_cast<const float2 *>(lb + 8 * j + 2 * t);
        const float l2[2] = {l.x * S_LOG2E, l.y * S_LOG2E};
#pragma unroll
        for (int x = 0; x < 4; x++)
            sT[4 * j + x] = exp2f(fmaf(sT[4 * j + x], sc, -l2[x & 1]));
    }
}

/* dS^T = P^T (dP^T - Delta) in place of dP^T, without the softmax scale
 * (dK and dQ take it at the end). */
static __device__ __forceinline__ void
s_dsT(float (&dpT)[32], const float (&pT)[32], const float *db, int t)
{
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const float2 d = *reinterpret_cast<const float2 *>(db + 8 * j + 2 * t);
        const float dl[2] = {d.x, d.y};
#pragma unroll
        for (int x = 0; x < 4; x++)
            dpT[4 * j + x] = pT[4 * j + x] * (dpT[4 * j + x] - dl[x & 1]);
    }
}

/* An accumulator rounded to bf16 pairs: the A fragments of the next
 * product (k-step kk is registers 4kk..4kk+3). */
static __device__ __forceinline__ void
s_pack(uint32_t (&p)[16], const float (&s)[32])
{
#pragma unroll
    for (int j = 0; j < 16; j++)
        p[j] = trn_pack2(s[2 * j], s[2 * j + 1]);
}

/* Issues d += A B over the tile's 64 queries: A (keys x queries) from
 * registers, B the Q or dO tile at b, read MN-major. */
static __device__ __forceinline__ void
s_acc_issue(float (&d)[64], const uint32_t (&a)[16], uint32_t b)
{
#pragma unroll
    for (int kk = 0; kk < S_BQ / 16; kk++)
        trn_wg_rs128(d, a[4 * kk], a[4 * kk + 1], a[4 * kk + 2], a[4 * kk + 3],
                     trn_wg_desc(b + kk * 2048, S_QT / 2));
}

/* dS^T of the lane's keys into the shared tile (row = key of the block,
 * 128 bytes of 64 queries, swizzled) for the dQ product. */
static __device__ __forceinline__ void
s_store_ds(const s_bctx &c, const uint32_t (&ds)[16])
{
    const int r = c.wg * 64 + c.warp * 16 + c.g; /* r % 8 == g */
    unsigned char *row = c.sm + S_OFF_DS + r * 128 + 4 * c.t;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const int ch = (j ^ c.g) << 4;
        *reinterpret_cast<uint32_t *>(row + ch) = ds[2 * j];
        *reinterpret_cast<uint32_t *>(row + 8 * 128 + ch) = ds[2 * j + 1];
    }
}

/* Issues dQ (64 queries x the warpgroup's 64 columns) = dS K over the
 * block's 128 keys: dS^T and K read MN-major. */
static __device__ __forceinline__ void
s_dq_issue(float (&dq)[32], const s_bctx &c)
{
    const uint32_t ds = c.base + S_OFF_DS;
    const uint32_t kb = c.base + S_OFF_K + c.wg * (S_KT / 2);
    trn_wg_fence();
#pragma unroll
    for (int kk = 0; kk < S_BK / 16; kk++)
        trn_wg_ss64<1, 1>(dq, trn_wg_desc(ds + kk * 2048, S_BK * 128),
                          trn_wg_desc(kb + kk * 2048, S_KT / 2), kk > 0);
    trn_wg_commit();
}

/* dQ of the tile added into the fp32 buffer of query head h, two values
 * (the lane's column pair) an atomic add. */
static __device__ __forceinline__ void
s_dq_add(float *dq_acc, const float (&dq)[32], const s_bctx &c, int q0, int h)
{
    const int tq0 = q0 + c.warp * 16 + c.g, tq1 = tq0 + 8;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const int col = c.wg * 64 + 8 * j + 2 * c.t;
        if (tq0 < c.T)
            atomicAdd(reinterpret_cast<float2 *>(
                          dq_acc + ((size_t) tq0 * c.H + h) * S_D + col),
                      make_float2(dq[4 * j], dq[4 * j + 1]));
        if (tq1 < c.T)
            atomicAdd(reinterpret_cast<float2 *>(
                          dq_acc + ((size_t) tq1 * c.H + h) * S_D + col),
                      make_float2(dq[4 * j + 2], dq[4 * j + 3]));
    }
}

/* dK (with the softmax scale) and dV of the lane's keys. */
static __device__ __forceinline__ void
s_store_kv(trn_bf16_t *dk, trn_bf16_t *dv, int dstride, const float (&dK)[64],
           const float (&dV)[64], const s_bctx &c, float scale)
{
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int kr = hf ? c.kr1 : c.kr0;
        if (kr >= c.T)
            continue;
        const size_t row = (size_t) kr * (size_t) dstride + (size_t) c.hk * S_D;
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const size_t off = row + 8 * j + 2 * c.t;
            const int x = 4 * j + 2 * hf;
            *reinterpret_cast<uint32_t *>(dk + off) =
                trn_pack2(dK[x] * scale, dK[x + 1] * scale);
            *reinterpret_cast<uint32_t *>(dv + off) =
                trn_pack2(dV[x], dV[x + 1]);
        }
    }
}

/* The context of the calling thread (its warpgroup, warp and lane). */
static __device__ __forceinline__ void
s_ctx_init(s_bctx &c, unsigned char *sm, const trn_bf16_t *q,
           const trn_bf16_t *dout, const float *lse, const float *delta,
           const int32_t *seg, int stride, int T, int H, int Hk)
{
    const int lane = threadIdx.x & 31;
    c.sm = sm;
    c.base = trn_wg_saddr(sm);
    c.qh = q;
    c.doh = dout;
    c.lse = lse;
    c.delta = delta;
    c.seg = seg;
    c.st = (size_t) stride;
    c.ost = (size_t) H * S_D;
    c.T = T;
    c.H = H;
    c.G = H / Hk;
    c.hk = blockIdx.x;
    c.k0 = blockIdx.y * S_BK;
    c.nq = s_count_q(seg, c.k0, T);
    /* the warpgroup, as a value the compiler knows is warp-uniform */
    c.wg = __shfl_sync(0xffffffffu, (int) threadIdx.x >> 7, 0);
    c.warp = (threadIdx.x >> 5) & 3;
    c.g = lane >> 2;
    c.t = lane & 3;
    c.kw = c.k0 + 64 * c.wg;
    c.kr0 = c.kw + 16 * c.warp + c.g;
    c.kr1 = c.kr0 + 8;
    c.skw = c.kw < T ? seg[c.kw] : -2;
    c.sk0 = c.kr0 < T ? seg[c.kr0] : -2;
    c.sk1 = c.kr1 < T ? seg[c.kr1] : -2;
}

/* One query tile (iteration it, its copies landed in buffer buf): the
 * five products, dK and dV accumulated, dQ added into dq_acc. */
static __device__ __forceinline__ void
s_tile(float (&dK)[64], float (&dV)[64], float *dq_acc, const s_bctx &c, int it,
       int buf, float sc)
{
    const int h = s_head(c, it), q0 = s_qrow(c, it);
    const float *lb =
        reinterpret_cast<const float *>(c.sm + S_OFF_L) + buf * S_BQ;
    const float *db = lb + 2 * S_BQ;
    float sT[32], dpT[32], dq[32];
    uint32_t p[16], ds[16];
    s_scores_issue(sT, dpT, c, buf);
    trn_wg_wait<1>(); /* S^T; dP^T may be in flight */
    trn_wg_touch(sT);
    if (!s_unmasked(c, q0))
        s_mask(sT, c, q0);
    s_probs(sT, lb, sc, c.t);
    s_pack(p, sT);
    trn_wg_fence();
    s_acc_issue(dV, p, c.base + S_OFF_DO + buf * S_QT);
    trn_wg_commit();
    trn_wg_wait<1>(); /* dP^T; dV may be in flight */
    trn_wg_touch(dpT);
    s_dsT(dpT, sT, db, c.t);
    s_pack(ds, dpT);
    s_store_ds(c, ds);
    trn_wg_fence();
    s_acc_issue(dK, ds, c.base + S_OFF_Q + buf * S_QT);
    trn_wg_commit();
    /* dS^T whole, and visible to the tensor cores */
    trn_wg_proxy_fence();
    __syncthreads();
    s_dq_issue(dq, c);
    trn_wg_wait<0>();
    trn_wg_touch(dq);
    trn_wg_touch(dK);
    trn_wg_touch(dV);
    trn_wg_keep(p);
    trn_wg_keep(ds);
    s_dq_add(dq_acc, dq, c, q0, h);
}

__global__ void
__launch_bounds__(S_NTH, 1)
    s_attn_bwd_wgmma(trn_bf16_t *dk, trn_bf16_t *dv, int dstride, float *dq_acc,
                     const float *delta, const trn_bf16_t *dout,
                     const float *lse, const trn_bf16_t *q, const trn_bf16_t *k,
                     const trn_bf16_t *v, int stride, const int32_t *seg, int T,
                     int H, int Hk, float scale)
{
    extern __shared__ unsigned char smem[];
    unsigned char *sm = smem + ((1024u - (trn_wg_saddr(smem) & 1023u)) & 1023u);
    s_bctx c;
    s_ctx_init(c, sm, q, dout, lse, delta, seg, stride, T, H, Hk);
    const int niter = c.nq * c.G;
    const size_t kcol = (size_t) c.hk * S_D;

    trn_wg_load<S_BK, S_NTH>(c.base + S_OFF_K, k + kcol, c.st, c.k0, T,
                             threadIdx.x);
    trn_wg_load<S_BK, S_NTH>(c.base + S_OFF_V, v + kcol, c.st, c.k0, T,
                             threadIdx.x);
    if (niter > 0)
        s_load_q(c, 0, 0);
    trn_cp_commit();

    float dK[64], dV[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        dK[i] = dV[i] = 0.0f;
    for (int it = 0; it < niter; it++) {
        const int buf = it & 1;
        /* tile it has landed; every thread is done with tile it - 1 (its
         * products waited for), whose buffers take tile it + 1 */
        trn_cp_wait<0>();
        trn_wg_proxy_fence();
        __syncthreads();
        if (it + 1 < niter)
            s_load_q(c, buf ^ 1, it + 1);
        trn_cp_commit();
        s_tile(dK, dV, dq_acc, c, it, buf, scale * S_LOG2E);
    }
    s_store_kv(dk, dv, dstride, dK, dV, c, scale);
}

lisa_rc_t
trn_k_attn_bwd_h(trn_bf16_t *dk, trn_bf16_t *dv, int dstride, float *dq_acc,
                 const float *delta, const trn_bf16_t *dout, const float *lse,
                 const trn_bf16_t *q, const trn_bf16_t *k, const trn_bf16_t *v,
                 int stride, const int32_t *seg, int T, int H, int Hk,
                 cudaStream_t st)
{
    TRN_CUDA_TRY(cudaFuncSetAttribute(
        s_attn_bwd_wgmma, cudaFuncAttributeMaxDynamicSharedMemorySize, S_SMEM));
    dim3 grid(Hk, TRN_CEIL_DIV(T, S_BK));
    s_attn_bwd_wgmma<<<grid, S_NTH, S_SMEM, st>>>(
        dk, dv, dstride, dq_acc, delta, dout, lse, q, k, v, stride, seg, T, H,
        Hk, 1.0f / sqrtf((float) S_D));
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}
