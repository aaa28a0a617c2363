/*
 * trn_k_attn_h: the causal grouped-query attention forward pass at head_dim
 * 128 on Hopper's asynchronous tensor cores (wgmma, sm_90a: this file is
 * built for that target alone, and trn_k_attn_fwd calls it only on compute
 * capability 9.x). Inputs, outputs and sequence rules are those of the
 * portable kernel in trn_k_attn.cu (o as [T][H*D] bf16, lse as [H][T]
 * natural-log fp32, packed sequences by a non-decreasing seg[t]), so the
 * backward pass reads what either kernel wrote.
 *
 * One block of two warpgroups (8 warps) per (128 query rows, query head);
 * warpgroup w owns rows 64w..64w+63, warp i of it rows 16i..16i+15 of
 * those. Q, K and V sit in shared memory in the 128-byte-swizzled layout
 * the tensor cores read: a 128 x 128 bf16 tile is two halves of 64
 * columns, each 128 rows of 128 bytes whose 16-byte chunk c of row r is
 * stored at chunk c ^ (r % 8) (atoms of 8 rows, 1 KiB apart). For each key
 * tile of 128: S = Q K^T as eight m64n128k16 products with both operands
 * in shared memory (K-major), the online softmax in base 2 on the
 * accumulators, then O += P V as eight products with P from registers (the
 * accumulator layout of S rounded to bf16 is the A fragment) and V read
 * from shared memory N-major (the transpose bit). K/V tiles come in with
 * cp.async (the swizzle computed here) through two buffers: tile j + 1 is
 * in flight while tile j is computed. The mask is applied only on tiles
 * some row sees partly (the diagonal, sequence starts); a warpgroup skips
 * tiles none of its rows sees; blocks run heaviest first.
 */
#include "trn_cuda_common.cuh"
#include "trn_cuda_mma.cuh"
#include "trn_cuda_wgmma.cuh"

#include <stdlib.h>
#include <string.h>

#define S_LN2 0.6931471805599453f

#define S_D    128           /* head_dim */
#define S_WGS  2             /* warpgroups a block */
#define S_BQ   (64 * S_WGS)  /* query rows a block */
#define S_BK   128           /* keys a tile */
#define S_NTH  (128 * S_WGS) /* threads a block */
#define S_HALF (128 * 128)   /* bytes of 64 columns of 128 rows */
#define S_TILE (2 * S_HALF)  /* bytes of a 128 x 128 bf16 tile */
/* Q, two K, two V; alignment slack */
#define S_SMEM (5 * S_TILE + 1024)

static_assert(S_BQ == 128 && S_BK == 128, "tiles of 128 rows");

/* The 128 rows from r0 of a [T][st] bf16 matrix, columns 0..127 of src,
 * into the swizzled tile at dst (rows past T are zeros). */
static __device__ __forceinline__ void
s_load(uint32_t dst, const trn_bf16_t *src, size_t st, int r0, int T)
{
#pragma unroll 4
    for (int i = threadIdx.x; i < 128 * 16; i += S_NTH) {
        const int r = i >> 4, c = i & 15;
        const bool ok = r0 + r < T;
        const trn_bf16_t *p = src + (size_t) (ok ? r0 + r : 0) * st + c * 8;
        trn_wg_cp16(dst + (c >> 3) * S_HALF + r * 128 +
                        (((c & 7) ^ (r & 7)) << 4),
                    p, ok);
    }
}

/* d (+)= A B, m64n128k16: A (64 x 16) and B (16 x 128, stored as 128 rows
 * of 16) K-major in shared memory; d is overwritten when !acc. */
static __device__ __forceinline__ void
s_mma_ss(float (&d)[64], uint64_t da, uint64_t db, int acc)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " TRN_WG_D64
        ", %64, %65, p, 1, 1, 0, 0;\n}\n"
        : TRN_WG_F64
        : "l"(da), "l"(db), "r"(acc));
}

/* Issues acc += P V for k-steps K0..K1-1: P (bf16 pairs in the A-fragment
 * order) against the V tile at Vb, k-step kk taking keys 16kk..16kk+15. */
template <int K0 = 0, int K1 = S_BK / 16>
static __device__ __forceinline__ void
s_pv_issue(float (&acc)[64], const uint32_t (&p)[32], uint32_t Vb)
{
#pragma unroll
    for (int kk = K0; kk < K1; kk++)
        trn_wg_rs128(acc, p[4 * kk], p[4 * kk + 1], p[4 * kk + 2],
                     p[4 * kk + 3], trn_wg_desc(Vb + kk * 2048, S_HALF));
}

/* Issues s = Q_w K^T: the warpgroup's 64 rows (Qw) against the 128 keys
 * (Kb). */
static __device__ __forceinline__ void
s_qk_issue(float (&s)[64], uint32_t Qw, uint32_t Kb)
{
#pragma unroll
    for (int kk = 0; kk < S_D / 16; kk++) {
        const uint32_t off = (kk >> 2) * S_HALF + (kk & 3) * 32;
        s_mma_ss(s, trn_wg_desc(Qw + off, 16), trn_wg_desc(Kb + off, 16),
                 kk > 0);
    }
}

/* P rounded to bf16: the accumulator layout of S read as A fragments
 * (k-step kk is registers 4kk..4kk+3). */
static __device__ __forceinline__ void
s_pack(uint32_t (&p)[32], const float (&s)[64])
{
#pragma unroll
    for (int j = 0; j < 32; j++)
        p[j] = trn_pack2(s[2 * j], s[2 * j + 1]);
}

/* The causal and sequence mask of a tile from key k0 for the lane's rows
 * r0 (s[4i + e]) and r0 + 8 (s[4i + 2 + e]); key 8i + 2t + e. */
static __device__ __forceinline__ void
s_mask(float (&s)[64], const int32_t *seg, int T, int r0, int k0, int t)
{
    const int sg0 = r0 < T ? seg[r0] : -1;
    const int sg1 = r0 + 8 < T ? seg[r0 + 8] : -1;
#pragma unroll
    for (int i = 0; i < 16; i++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int tk = k0 + 8 * i + 2 * t + e;
            const int sk = seg[min(tk, T - 1)];
            if (tk > r0 || sk != sg0)
                s[4 * i + e] = -INFINITY;
            if (tk > r0 + 8 || sk != sg1)
                s[4 * i + 2 + e] = -INFINITY;
        }
}

/* Zero, as the compiler cannot know: computed from the row sums, so
 * products whose descriptors add it are issued after the softmax (left
 * alone, the compiler moves them, and the wait for them, above it). */
static __device__ __forceinline__ uint32_t
s_after(const float (&lr)[2])
{
    uint32_t z;
    asm volatile("{\n.reg .pred p;\nsetp.lt.f32 p, %1, 0f00000000;\n"
                 "selp.u32 %0, 1024, 0, p;\n}\n"
                 : "=r"(z)
                 : "f"(lr[0] + lr[1]));
    return z;
}

/* The mask of a tile from key k0 as bits: bit x set where s[x] is hidden
 * (the layout of s_mask). SEG false: one sequence, the causal mask alone
 * (r0 and the keys are then positions; seg and T are not read). */
template <bool SEG = true>
static __device__ __forceinline__ uint64_t
s_mask_bits(const int32_t *seg, int T, int r0, int k0, int t)
{
    const int sg0 = !SEG ? 0 : r0 < T ? seg[r0] : -1;
    const int sg1 = !SEG ? 0 : r0 + 8 < T ? seg[r0 + 8] : -1;
    uint64_t m = 0;
#pragma unroll
    for (int i = 0; i < 16; i++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int tk = k0 + 8 * i + 2 * t + e;
            const int sk = SEG ? seg[min(tk, T - 1)] : 0;
            m |= (uint64_t) (tk > r0 || sk != sg0) << (4 * i + e);
            m |= (uint64_t) (tk > r0 + 8 || sk != sg1) << (4 * i + 2 + e);
        }
    return m;
}

/* The mask bits applied by selection (no branch). */
static __device__ __forceinline__ void
s_mask_apply(float (&s)[64], uint64_t m)
{
    const uint32_t lo = (uint32_t) m, hi = (uint32_t) (m >> 32);
#pragma unroll
    for (int x = 0; x < 32; x++) {
        s[x] = (lo >> x) & 1u ? -INFINITY : s[x];
        s[32 + x] = (hi >> x) & 1u ? -INFINITY : s[32 + x];
    }
}

/* The online softmax of a tile for the lane's two rows: running max (base
 * 2 units, scores times sc) and the lane's part of the running sum (the
 * four lanes of a row add theirs at the end), s replaced by its
 * probabilities; alpha[hf] is the factor the output of row hf must be
 * rescaled by. */
static __device__ __forceinline__ void
s_softmax(float (&s)[64], float (&mr)[2], float (&lr)[2], float (&alpha)[2],
          float sc)
{
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        float mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < 16; i++)
            mx = fmaxf(mx, fmaxf(s[4 * i + 2 * hf], s[4 * i + 2 * hf + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mn = fmaxf(mr[hf], mx * sc);
        const float mu = mn == -INFINITY ? 0.0f : mn;
        alpha[hf] = exp2f(mr[hf] - mu);
        mr[hf] = mn;
        float ps = 0.0f;
#pragma unroll
        for (int i = 0; i < 16; i++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int x = 4 * i + 2 * hf + e;
                s[x] = exp2f(fmaf(s[x], sc, -mu));
                ps += s[x];
            }
        lr[hf] = lr[hf] * alpha[hf] + ps;
    }
}

static __device__ __forceinline__ void
s_rescale(float (&acc)[64], const float (&alpha)[2])
{
#pragma unroll
    for (int i = 0; i < 16; i++)
#pragma unroll
        for (int x = 0; x < 4; x++)
            acc[4 * i + x] *= alpha[x >> 1];
}

/* Normalised output rows and their log-sum-exp (natural log; lse may be
 * NULL). */
static __device__ __forceinline__ void
s_store(trn_bf16_t *o, float *lse, const float (&acc)[64], const float (&mr)[2],
        float (&lr)[2], int r0, int h, int T, int H, int t)
{
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        lr[hf] += __shfl_xor_sync(0xffffffffu, lr[hf], 1);
        lr[hf] += __shfl_xor_sync(0xffffffffu, lr[hf], 2);
    }
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int r = r0 + 8 * hf;
        if (r >= T)
            continue;
        const float il = lr[hf] > 0.0f ? 1.0f / lr[hf] : 0.0f;
        trn_bf16_t *orow =
            o + (size_t) r * (size_t) (H * S_D) + (size_t) h * S_D + 2 * t;
#pragma unroll
        for (int i = 0; i < 16; i++)
            *reinterpret_cast<uint32_t *>(orow + 8 * i) = trn_pack2(
                acc[4 * i + 2 * hf] * il, acc[4 * i + 2 * hf + 1] * il);
        if (t == 0 && lse)
            lse[(size_t) h * T + r] =
                lr[hf] > 0.0f ? (mr[hf] + log2f(lr[hf])) * S_LN2 : INFINITY;
    }
}

/* The first key the block's rows can see: key tiles wholly in sequences
 * before the block's first row's form a prefix, skipped. */
static __device__ __forceinline__ int
s_first_key(const int32_t *seg, int q0, int T)
{
    const int sf = seg[q0];
    int n = 0;
    for (int j0 = 0; j0 <= q0 / S_BK; j0 += (int) blockDim.x) {
        const int j = j0 + (int) threadIdx.x;
        const bool before =
            j <= q0 / S_BK && seg[min(j * S_BK + S_BK - 1, T - 1)] < sf;
        n += __syncthreads_count(before);
    }
    return n * S_BK;
}

/* What a warpgroup's loop over the key tiles needs. */
struct s_wg_ctx {
    uint32_t Qw, Ks, Vs;  /* its Q rows; the two K and two V buffers */
    const trn_bf16_t *kh; /* column 0 of its kv head in k and v */
    const trn_bf16_t *vh;
    size_t st; /* row stride of q, k, v */
    const int32_t *seg;
    int T, kbeg, ntiles;   /* first key, tiles from there */
    int wfirst, wlast;     /* its first and last rows (< T) */
    int sg_first, sg_last; /* their sequences */
    int r0, t;             /* the lane's first row, its column pair */
    float sc;              /* softmax scale times log2 e */
    /* the paged prefill (s_attn_prefill_wgmma): rows and keys are
     * positions of one sequence, whose cache rows its table row gives */
    const int32_t *tab;
    int bshift, plast; /* log2 of the block size; the last position */
};

/* The context of the calling thread's warpgroup (threads 128w..128w+127
 * hold rows 64w..64w+63 of the block's); kbeg and ntiles are the block's
 * (every thread of the block takes part). */
static __device__ __forceinline__ void
s_ctx_init(s_wg_ctx &c, uint32_t Qs, const trn_bf16_t *k, const trn_bf16_t *v,
           int stride, const int32_t *seg, int T, int hk, int q0, float sc)
{
    const int wg = min((int) threadIdx.x >> 7, S_WGS - 1);
    const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    c.Qw = Qs + wg * 64 * 128;
    c.Ks = Qs + S_TILE;
    c.Vs = Qs + 3 * S_TILE;
    /* k and v are never NULL; this form (and the min above) compiles to
     * the machine code that was measured */
    c.kh = k ? k + (size_t) hk * S_D : NULL;
    c.vh = v ? v + (size_t) hk * S_D : NULL;
    c.st = (size_t) stride;
    c.seg = seg;
    c.T = T;
    c.kbeg = s_first_key(seg, q0, T);
    c.ntiles = (min(q0 + S_BQ, T) - 1 - c.kbeg) / S_BK + 1;
    c.wfirst = q0 + 64 * wg;
    c.wlast = min(c.wfirst + 63, T - 1);
    c.sg_first = c.wfirst < T ? seg[c.wfirst] : 0;
    c.sg_last = seg[c.wlast];
    c.r0 = c.wfirst + 16 * warp + (lane >> 2);
    c.t = lane & 3;
    c.sc = sc;
}

/* Waits for this thread's copies, makes them visible to the tensor cores
 * and to every thread: after it, the buffers read before are free. */
static __device__ __forceinline__ void
s_tile_barrier(void)
{
    trn_cp_wait<0>();
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
}

/* Whether any row of the warpgroup sees tile j; and whether every row
 * sees all of it (no mask). */
static __device__ __forceinline__ bool
s_visible(const s_wg_ctx &c, int j)
{
    const int k0 = c.kbeg + j * S_BK;
    return j < c.ntiles && c.wfirst < c.T && k0 <= c.wlast &&
           c.seg[min(k0 + S_BK - 1, c.T - 1)] >= c.sg_first;
}

static __device__ __forceinline__ bool
s_unmasked(const s_wg_ctx &c, int k0)
{
    return k0 + S_BK - 1 <= c.wfirst && c.seg[k0] == c.sg_last;
}

/* The cache row of position p of the paged sequence. */
static __device__ __forceinline__ size_t
s_cache_row(const s_wg_ctx &c, int p)
{
    const int b = __ldg(c.tab + (p >> c.bshift));
    return ((size_t) b << c.bshift) + (size_t) (p & ((1 << c.bshift) - 1));
}

/* The 128 keys (or values) from position k0 of the paged sequence, column
 * 0..127 of src's rows, into the swizzled tile at dst (positions past
 * plast are zeros). */
static __device__ __forceinline__ void
s_load_paged(uint32_t dst, const trn_bf16_t *src, const s_wg_ctx &c, int k0)
{
#pragma unroll 4
    for (int i = threadIdx.x; i < 128 * 16; i += S_NTH) {
        const int r = i >> 4, cc = i & 15;
        const bool ok = k0 + r <= c.plast;
        const size_t row = ok ? s_cache_row(c, k0 + r) : 0;
        trn_wg_cp16(dst + (cc >> 3) * S_HALF + r * 128 +
                        (((cc & 7) ^ (r & 7)) << 4),
                    src + row * c.st + cc * 8, ok);
    }
}

/* A key or value tile from key k0: rows of k and v (PG false), or
 * positions of the paged sequence. */
template <bool PG>
static __device__ __forceinline__ void
s_load_kv(const s_wg_ctx &c, uint32_t dst, const trn_bf16_t *src, int k0)
{
    if constexpr (PG)
        s_load_paged(dst, src, c, k0);
    else
        s_load(dst, src, c.st, k0, c.T);
}

template <bool PG>
static __device__ __forceinline__ bool
s_unmasked_t(const s_wg_ctx &c, int k0)
{
    if constexpr (PG)
        return k0 + S_BK - 1 <= c.wfirst;
    else
        return s_unmasked(c, k0);
}

template <bool PG>
static __device__ __forceinline__ uint64_t
s_mask_bits_t(const s_wg_ctx &c, int k0)
{
    if constexpr (PG)
        return s_mask_bits<false>(NULL, 0, c.r0, k0, c.t);
    else
        return s_mask_bits(c.seg, c.T, c.r0, k0, c.t);
}

/* Serial schedule: per tile, S = Q K^T, the softmax, then O += P V, each
 * product waited for before the next step; K_j and V_j land together. */
static __device__ __forceinline__ void
s_loop_serial(const s_wg_ctx &c, float (&acc)[64], float (&mr)[2],
              float (&lr)[2])
{
    for (int j = 0; j < c.ntiles; j++) {
        const int k0 = c.kbeg + j * S_BK, buf = j & 1;
        s_tile_barrier();
        if (j + 1 < c.ntiles) {
            s_load(c.Ks + (buf ^ 1) * S_TILE, c.kh, c.st, k0 + S_BK, c.T);
            s_load(c.Vs + (buf ^ 1) * S_TILE, c.vh, c.st, k0 + S_BK, c.T);
        }
        trn_cp_commit();
        if (!s_visible(c, j))
            continue;
        float s[64], alpha[2];
        uint32_t p[32];
        trn_wg_fence();
        s_qk_issue(s, c.Qw, c.Ks + buf * S_TILE);
        trn_wg_commit();
        trn_wg_wait<0>();
        trn_wg_touch(s);
        if (!s_unmasked(c, k0))
            s_mask(s, c.seg, c.T, c.r0, k0, c.t);
        s_softmax(s, mr, lr, alpha, c.sc);
        s_rescale(acc, alpha);
        s_pack(p, s);
        trn_wg_fence();
        s_pv_issue(acc, p, c.Vs + buf * S_TILE);
        trn_wg_commit();
        trn_wg_wait<0>();
        trn_wg_touch(acc);
        trn_wg_keep(p);
    }
}

/* Overlapped schedule: stage j issues S_j = Q K_j and then O += P_{j-1}
 * V_{j-1}, waits for S_j only and runs its softmax while the tensor
 * cores do P V, then waits for that, rescales O and keeps P_j for stage
 * j + 1. Copies run one tile ahead per operand: stage j needs K_j and
 * V_{j-1} and fetches K_{j+1} and V_j, into buffers whose last readers
 * finished in stage j - 1. The k-steps of P V from EARLY on are issued
 * after the softmax: with all of them before it, the compiler places the
 * wait for P V early in the softmax. No branch surrounds a product in
 * flight (the compiler would serialise them): every tile is computed, the
 * ones no row of the warpgroup sees masked whole. */
template <int EARLY, bool PG = false>
static __device__ __forceinline__ void
s_loop_pipe(const s_wg_ctx &c, float (&acc)[64], float (&mr)[2], float (&lr)[2])
{
    uint32_t p[32];
    float s[64], alpha[2];
    /* stage 0: S_0 alone */
    s_tile_barrier();
    if (c.ntiles > 1)
        s_load_kv<PG>(c, c.Ks + S_TILE, c.kh, c.kbeg + S_BK);
    s_load_kv<PG>(c, c.Vs, c.vh, c.kbeg);
    trn_cp_commit();
    trn_wg_fence();
    s_qk_issue(s, c.Qw, c.Ks);
    trn_wg_commit();
    trn_wg_wait<0>();
    trn_wg_touch(s);
    if (!s_unmasked_t<PG>(c, c.kbeg)) {
        if constexpr (PG)
            s_mask_apply(s, s_mask_bits_t<true>(c, c.kbeg));
        else
            s_mask(s, c.seg, c.T, c.r0, c.kbeg, c.t);
    }
    s_softmax(s, mr, lr, alpha, c.sc);
    s_pack(p, s);
    for (int j = 1; j < c.ntiles; j++) {
        const int k0 = c.kbeg + j * S_BK;
        uint64_t m = 0; /* nothing in flight here: a branch is free */
        if (!s_unmasked_t<PG>(c, k0))
            m = s_mask_bits_t<PG>(c, k0);
        s_tile_barrier();
        if (j + 1 < c.ntiles)
            s_load_kv<PG>(c, c.Ks + ((j + 1) & 1) * S_TILE, c.kh, k0 + S_BK);
        s_load_kv<PG>(c, c.Vs + (j & 1) * S_TILE, c.vh, k0);
        trn_cp_commit();
        trn_wg_fence();
        s_qk_issue(s, c.Qw, c.Ks + (j & 1) * S_TILE);
        trn_wg_commit();
        s_pv_issue<0, EARLY>(acc, p, c.Vs + ((j - 1) & 1) * S_TILE);
        trn_wg_commit();
        trn_wg_wait<1>();
        trn_wg_touch(s);
        s_mask_apply(s, m);
        s_softmax(s, mr, lr, alpha, c.sc);
        if (EARLY < S_BK / 16) {
            trn_wg_fence(); /* the rest of P V, after the softmax */
            s_pv_issue<EARLY, S_BK / 16>(
                acc, p, c.Vs + ((j - 1) & 1) * S_TILE + s_after(lr));
            trn_wg_commit();
        }
        trn_wg_wait<0>();
        trn_wg_touch(acc);
        trn_wg_keep(p);
        s_rescale(acc, alpha);
        s_pack(p, s);
    }
    /* last stage: P V of the last tile */
    s_tile_barrier();
    trn_wg_fence();
    s_pv_issue(acc, p, c.Vs + ((c.ntiles - 1) & 1) * S_TILE);
    trn_wg_commit();
    trn_wg_wait<0>();
    trn_wg_touch(acc);
    trn_wg_keep(p);
}

template <int EARLY>
__global__ void
__launch_bounds__(S_NTH, 1)
    s_attn_fwd_wgmma(trn_bf16_t *o, float *lse, const trn_bf16_t *q,
                     const trn_bf16_t *k, const trn_bf16_t *v, int stride,
                     const int32_t *seg, int T, int H, int Hk, float sc)
{
    extern __shared__ unsigned char smem[];
    const uint32_t Qs = (trn_wg_saddr(smem) + 1023u) & ~1023u;
    const int h = blockIdx.x, hk = h / (H / Hk);
    const int q0 = (int) (gridDim.y - 1 - blockIdx.y) * S_BQ;
    s_wg_ctx c;
    s_ctx_init(c, Qs, k, v, stride, seg, T, hk, q0, sc);

    /* Q and the first K (and V) tile, one copy group */
    s_load(Qs, q + (size_t) h * S_D, c.st, q0, T);
    s_load(c.Ks, c.kh, c.st, c.kbeg, T);
    if (EARLY == 0)
        s_load(c.Vs, c.vh, c.st, c.kbeg, T);
    trn_cp_commit();

    float acc[64], mr[2] = {-INFINITY, -INFINITY}, lr[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < 64; i++)
        acc[i] = 0.0f;
    if (EARLY > 0)
        s_loop_pipe<EARLY>(c, acc, mr, lr);
    else
        s_loop_serial(c, acc, mr, lr);
    s_store(o, lse, acc, mr, lr, c.r0, h, T, H, c.t);
}

typedef void (*s_kernel_t)(trn_bf16_t *, float *, const trn_bf16_t *,
                           const trn_bf16_t *, const trn_bf16_t *, int,
                           const int32_t *, int, int, int, float);

/* The kernel by LISA_ATTN_H_SCHED (read every call, for comparison): 0
 * block-synchronous and serial; 6 (the default) block-synchronous and
 * overlapped, 6 of P V's 8 k-steps issued before the softmax and the rest
 * after it (see s_after). Warp-specialised schedules (a copier warpgroup
 * or warp, the tensor copy engine, setmaxnreg, the two warpgroups taking
 * turns) were measured slower at 16k (340-343 against 395 TFLOP/s) and
 * are not kept. */
static s_kernel_t
s_pick(void)
{
    const char *e = getenv("LISA_ATTN_H_SCHED");
    return e && strcmp(e, "0") == 0 ? s_attn_fwd_wgmma<0> : s_attn_fwd_wgmma<6>;
}

lisa_rc_t
trn_k_attn_fwd_h(trn_bf16_t *o, float *lse, const trn_bf16_t *q,
                 const trn_bf16_t *k, const trn_bf16_t *v, int stride,
                 const int32_t *seg, int T, int H, int Hk, cudaStream_t st)
{
    s_kernel_t kern = s_pick();
    TRN_CUDA_TRY(cudaFuncSetAttribute(
        kern, cudaFuncAttributeMaxDynamicSharedMemorySize, S_SMEM));
    dim3 grid(H, TRN_CEIL_DIV(T, S_BQ));
    kern<<<grid, S_NTH, S_SMEM, st>>>(o, lse, q, k, v, stride, seg, T, H, Hk,
                                      1.0f / sqrtf((float) S_D) *
                                          1.4426950408889634f);
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}

/* ---- the paged prefill (trn_k_attn_prefill at head_dim 128) ------------ */

/* One block of two warpgroups per (query tile of up to 128 rows of one
 * sequence, query head), as trn_k_prefill.cu's portable kernel divides the
 * work, with the training forward's overlapped schedule: the tile's rows
 * are positions p0.. of the sequence, its keys positions 0..p0+rows-1
 * read through the sequence's block table (each row's cache row looked
 * up by the thread that copies it), the causal mask by position on the
 * tiles that cross a warpgroup's first row. */
__global__ void
__launch_bounds__(S_NTH, 1)
    s_attn_prefill_wgmma(trn_bf16_t *o, const trn_bf16_t *q, int stride,
                         const trn_bf16_t *ck, const trn_bf16_t *cv,
                         trn_kv_pages_t pg, const trn_prefill_tile_t *tiles,
                         int H, int Hk, float sc)
{
    extern __shared__ unsigned char smem[];
    const uint32_t Qs = (trn_wg_saddr(smem) + 1023u) & ~1023u;
    const int h = blockIdx.x, hk = h / (H / Hk);
    const trn_prefill_tile_t tl = tiles[blockIdx.y];
    const int wg = min((int) threadIdx.x >> 7, S_WGS - 1);
    const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    s_wg_ctx c;
    c.Qw = Qs + wg * 64 * 128;
    c.Ks = Qs + S_TILE;
    c.Vs = Qs + 3 * S_TILE;
    c.kh = ck + (size_t) hk * S_D;
    c.vh = cv + (size_t) hk * S_D;
    c.st = (size_t) Hk * S_D;
    c.seg = NULL;
    c.T = 0;
    c.tab = pg.table + (size_t) tl.slot * (size_t) pg.max_blocks;
    c.bshift = pg.bshift;
    c.plast = tl.p0 + tl.rows - 1;
    c.kbeg = 0;
    c.ntiles = c.plast / S_BK + 1;
    c.wfirst = tl.p0 + 64 * wg;
    c.wlast = min(c.wfirst + 63, c.plast);
    c.sg_first = c.sg_last = 0;
    c.r0 = c.wfirst + 16 * warp + (lane >> 2);
    c.t = lane & 3;
    c.sc = sc;

    /* Q and the first K tile, one copy group */
    s_load(Qs, q + (size_t) h * S_D, (size_t) stride, tl.row0,
           tl.row0 + tl.rows);
    s_load_paged(c.Ks, c.kh, c, 0);
    trn_cp_commit();

    float acc[64], mr[2] = {-INFINITY, -INFINITY}, lr[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < 64; i++)
        acc[i] = 0.0f;
    s_loop_pipe<6, true>(c, acc, mr, lr);
    /* the lane's rows as rows of o: row0 + (position - p0) */
    s_store(o, NULL, acc, mr, lr, tl.row0 + (c.r0 - tl.p0), h,
            tl.row0 + tl.rows, H, c.t);
}

lisa_rc_t
trn_k_attn_prefill_h(trn_bf16_t *o, const trn_bf16_t *q, int stride,
                     const trn_bf16_t *cache_k, const trn_bf16_t *cache_v,
                     trn_kv_pages_t pg, const trn_prefill_tile_t *tiles,
                     int ntiles, int H, int Hk, cudaStream_t st)
{
    TRN_CUDA_TRY(cudaFuncSetAttribute(
        s_attn_prefill_wgmma, cudaFuncAttributeMaxDynamicSharedMemorySize,
        S_SMEM));
    dim3 grid((unsigned) H, (unsigned) ntiles);
    s_attn_prefill_wgmma<<<grid, S_NTH, S_SMEM, st>>>(
        o, q, stride, cache_k, cache_v, pg, tiles, H, Hk,
        1.0f / sqrtf((float) S_D) * 1.4426950408889634f);
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}
