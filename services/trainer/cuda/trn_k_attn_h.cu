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

#include <cuda.h>
#include <cudaTypedefs.h>
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
/* Q, two K, two V, four copy barriers; alignment slack */
#define S_SMEM (5 * S_TILE + 64 + 1024)

static_assert(S_BQ == 128 && S_BK == 128, "tiles of 128 rows");

static __device__ __forceinline__ uint32_t
s_saddr(const void *p)
{
    return (uint32_t) __cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared address a (cp.async); zeros where !ok. */
static __device__ __forceinline__ void
s_cp16(uint32_t a, const void *src, bool ok)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a),
                 "l"(src), "r"(ok ? 16 : 0));
}

/* The 128 rows from r0 of a [T][st] bf16 matrix, columns 0..127 of src,
 * into the swizzled tile at dst (rows past T are zeros). */
template <int NTH = S_NTH>
static __device__ __forceinline__ void
s_load(uint32_t dst, const trn_bf16_t *src, size_t st, int r0, int T,
       int tid = threadIdx.x)
{
#pragma unroll 4
    for (int i = tid; i < 128 * 16; i += NTH) {
        const int r = i >> 4, c = i & 15;
        const bool ok = r0 + r < T;
        const trn_bf16_t *p = src + (size_t) (ok ? r0 + r : 0) * st + c * 8;
        s_cp16(dst + (c >> 3) * S_HALF + r * 128 + (((c & 7) ^ (r & 7)) << 4),
               p, ok);
    }
}

/* Shared-memory matrix descriptor: 128-byte swizzle, 8-row groups 1 KiB
 * apart, `lbo` bytes between 64-column halves (read N-major only). */
static __device__ __forceinline__ uint64_t
s_desc(uint32_t addr, uint32_t lbo)
{
    return (uint64_t) ((addr & 0x3FFFFu) >> 4) | ((uint64_t) (lbo >> 4) << 16) |
           ((uint64_t) (1024 >> 4) << 32) | (1ull << 62);
}

static __device__ __forceinline__ void
s_wg_fence(void)
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

static __device__ __forceinline__ void
s_wg_commit(void)
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

/* Waits until at most N groups of products are in flight; d (written by
 * the finished ones) is read only after. */
template <int N>
static __device__ __forceinline__ void
s_wg_wait(float (&d)[64])
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#pragma unroll
    for (int i = 0; i < 64; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}

/* Keeps the A fragments of products in flight alive until their wait
 * (the tensor cores read them after the issue). */
static __device__ __forceinline__ void
s_keep(uint32_t (&p)[32])
{
#pragma unroll
    for (int i = 0; i < 32; i++)
        asm volatile("" : "+r"(p[i])::"memory");
}

#define S_D64                                                                  \
    "{%0, %1, %2, %3, %4, %5, %6, %7, "                                        \
    "%8, %9, %10, %11, %12, %13, %14, %15, "                                   \
    "%16, %17, %18, %19, %20, %21, %22, %23, "                                 \
    "%24, %25, %26, %27, %28, %29, %30, %31, "                                 \
    "%32, %33, %34, %35, %36, %37, %38, %39, "                                 \
    "%40, %41, %42, %43, %44, %45, %46, %47, "                                 \
    "%48, %49, %50, %51, %52, %53, %54, %55, "                                 \
    "%56, %57, %58, %59, %60, %61, %62, %63}"
#define S_F8(i)                                                                \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]),                \
        "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define S_F64                                                                  \
    S_F8(0), S_F8(8), S_F8(16), S_F8(24), S_F8(32), S_F8(40), S_F8(48), S_F8(56)

/* d (+)= A B, m64n128k16: A (64 x 16) and B (16 x 128, stored as 128 rows
 * of 16) K-major in shared memory; d is overwritten when !acc. */
static __device__ __forceinline__ void
s_mma_ss(float (&d)[64], uint64_t da, uint64_t db, int acc)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " S_D64
                 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : S_F64
                 : "l"(da), "l"(db), "r"(acc));
}

/* d += A B, m64n128k16: A from registers (the m16n8k16 A fragment of the
 * warp's 16 rows), B (16 x 128) N-major in shared memory. */
static __device__ __forceinline__ void
s_mma_rs(float (&d)[64], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
         uint64_t db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " S_D64
                 ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                 : S_F64
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db), "r"(1));
}

/* Issues acc += P V for k-steps K0..K1-1: P (bf16 pairs in the A-fragment
 * order) against the V tile at Vb, k-step kk taking keys 16kk..16kk+15. */
template <int K0 = 0, int K1 = S_BK / 16>
static __device__ __forceinline__ void
s_pv_issue(float (&acc)[64], const uint32_t (&p)[32], uint32_t Vb)
{
#pragma unroll
    for (int kk = K0; kk < K1; kk++)
        s_mma_rs(acc, p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3],
                 s_desc(Vb + kk * 2048, S_HALF));
}

/* Issues s = Q_w K^T: the warpgroup's 64 rows (Qw) against the 128 keys
 * (Kb). */
static __device__ __forceinline__ void
s_qk_issue(float (&s)[64], uint32_t Qw, uint32_t Kb)
{
#pragma unroll
    for (int kk = 0; kk < S_D / 16; kk++) {
        const uint32_t off = (kk >> 2) * S_HALF + (kk & 3) * 32;
        s_mma_ss(s, s_desc(Qw + off, 16), s_desc(Kb + off, 16), kk > 0);
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
 * (the layout of s_mask). */
static __device__ __forceinline__ uint64_t
s_mask_bits(const int32_t *seg, int T, int r0, int k0, int t)
{
    const int sg0 = r0 < T ? seg[r0] : -1;
    const int sg1 = r0 + 8 < T ? seg[r0 + 8] : -1;
    uint64_t m = 0;
#pragma unroll
    for (int i = 0; i < 16; i++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int tk = k0 + 8 * i + 2 * t + e;
            const int sk = seg[min(tk, T - 1)];
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

/* Normalised output rows and their log-sum-exp (natural log). */
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
        if (t == 0)
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
    uint32_t mb; /* the tensor copies' barriers: K of buffer b at mb + 8b,
                  * V at mb + 16 + 8b */
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
    c.kh = k ? k + (size_t) hk * S_D : NULL; /* NULL: tensor copies */
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
    c.mb = Qs + 5 * S_TILE;
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
        s_wg_fence();
        s_qk_issue(s, c.Qw, c.Ks + buf * S_TILE);
        s_wg_commit();
        s_wg_wait<0>(s);
        if (!s_unmasked(c, k0))
            s_mask(s, c.seg, c.T, c.r0, k0, c.t);
        s_softmax(s, mr, lr, alpha, c.sc);
        s_rescale(acc, alpha);
        s_pack(p, s);
        s_wg_fence();
        s_pv_issue(acc, p, c.Vs + buf * S_TILE);
        s_wg_commit();
        s_wg_wait<0>(acc);
        s_keep(p);
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
template <int EARLY>
static __device__ __forceinline__ void
s_loop_pipe(const s_wg_ctx &c, float (&acc)[64], float (&mr)[2], float (&lr)[2])
{
    uint32_t p[32];
    float s[64], alpha[2];
    /* stage 0: S_0 alone */
    s_tile_barrier();
    if (c.ntiles > 1)
        s_load(c.Ks + S_TILE, c.kh, c.st, c.kbeg + S_BK, c.T);
    s_load(c.Vs, c.vh, c.st, c.kbeg, c.T);
    trn_cp_commit();
    s_wg_fence();
    s_qk_issue(s, c.Qw, c.Ks);
    s_wg_commit();
    s_wg_wait<0>(s);
    if (!s_unmasked(c, c.kbeg))
        s_mask(s, c.seg, c.T, c.r0, c.kbeg, c.t);
    s_softmax(s, mr, lr, alpha, c.sc);
    s_pack(p, s);
    for (int j = 1; j < c.ntiles; j++) {
        const int k0 = c.kbeg + j * S_BK;
        uint64_t m = 0; /* nothing in flight here: a branch is free */
        if (!s_unmasked(c, k0))
            m = s_mask_bits(c.seg, c.T, c.r0, k0, c.t);
        s_tile_barrier();
        if (j + 1 < c.ntiles)
            s_load(c.Ks + ((j + 1) & 1) * S_TILE, c.kh, c.st, k0 + S_BK, c.T);
        s_load(c.Vs + (j & 1) * S_TILE, c.vh, c.st, k0, c.T);
        trn_cp_commit();
        s_wg_fence();
        s_qk_issue(s, c.Qw, c.Ks + (j & 1) * S_TILE);
        s_wg_commit();
        s_pv_issue<0, EARLY>(acc, p, c.Vs + ((j - 1) & 1) * S_TILE);
        s_wg_commit();
        s_wg_wait<1>(s);
        s_mask_apply(s, m);
        s_softmax(s, mr, lr, alpha, c.sc);
        if (EARLY < S_BK / 16) {
            s_wg_fence(); /* the rest of P V, after the softmax */
            s_pv_issue<EARLY, S_BK / 16>(
                acc, p, c.Vs + ((j - 1) & 1) * S_TILE + s_after(lr));
            s_wg_commit();
        }
        s_wg_wait<0>(acc);
        s_keep(p);
        s_rescale(acc, alpha);
        s_pack(p, s);
    }
    /* last stage: P V of the last tile */
    s_tile_barrier();
    s_wg_fence();
    s_pv_issue(acc, p, c.Vs + ((c.ntiles - 1) & 1) * S_TILE);
    s_wg_commit();
    s_wg_wait<0>(acc);
    s_keep(p);
}

template <int EARLY>
__global__ void
__launch_bounds__(S_NTH, 1)
    s_attn_fwd_wgmma(trn_bf16_t *o, float *lse, const trn_bf16_t *q,
                     const trn_bf16_t *k, const trn_bf16_t *v, int stride,
                     const int32_t *seg, int T, int H, int Hk, float sc)
{
    extern __shared__ unsigned char smem[];
    const uint32_t Qs = (s_saddr(smem) + 1023u) & ~1023u;
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

/* ---- warp-specialised variant ------------------------------------------
 *
 * The two warpgroups run apart: a third warpgroup copies Q and the K/V
 * tiles and hands them over through named barriers (one per buffer,
 * operand and warpgroup for "landed", one per buffer and operand for
 * "free"), so a warpgroup never waits for the other and one's softmax
 * overlaps the other's products. The copiers signal K_t and V_{t-1}
 * together once they landed, then wait until V_{t-2}'s buffer is free to
 * fetch V_t, and until K_{t-1}'s is free to fetch K_{t+1}. The copiers
 * give registers up (setmaxnreg) so the two others can hold theirs: the
 * register file of a quarter of the multiprocessor serves three warps. */

#define S_WS_NTH       (S_NTH + 128)
#define S_FULL         (128 + 128)   /* a warpgroup waits, the copiers arrive */
#define S_FREE         (S_NTH + 128) /* both warpgroups arrive, copiers wait */
#define S_WS_REG_COPY  40            /* registers a copier thread keeps */
#define S_WS_REG_MMA   232           /* and a warpgroup thread takes */
#define S_BAR_FK(b, w) (1 + 2 * (b) + (w))
#define S_BAR_FV(b, w) (5 + 2 * (b) + (w))
#define S_BAR_EK(b)    (9 + (b))
#define S_BAR_EV(b)    (11 + (b))
#define S_BAR_TURN(w)  (13 + (w)) /* warpgroup w may issue its products */

static __device__ __forceinline__ void
s_bar_sync(int id, int n)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

static __device__ __forceinline__ void
s_bar_arrive(int id, int n)
{
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

/* The copier's copies so far have landed: visible to the tensor cores
 * and, after the next arrival, to the warpgroups. */
static __device__ __forceinline__ void
s_ws_landed(void)
{
    trn_cp_wait<0>();
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __threadfence_block();
}

/* The copier warpgroup (thread l of 128). */
static __device__ __forceinline__ void
s_ws_copier(const s_wg_ctx &c, uint32_t Qs, const trn_bf16_t *qh, int q0, int l)
{
    const int n = c.ntiles;
    s_load<128>(Qs, qh, c.st, q0, c.T, l);
    s_load<128>(c.Ks, c.kh, c.st, c.kbeg, c.T, l);
    trn_cp_commit();
    for (int t = 0; t < n; t++) {
        const int k0 = c.kbeg + t * S_BK;
        s_ws_landed(); /* K_t and V_{t-1} */
        s_bar_arrive(S_BAR_FK(t & 1, 0), S_FULL);
        s_bar_arrive(S_BAR_FK(t & 1, 1), S_FULL);
        if (t >= 1) {
            s_bar_arrive(S_BAR_FV((t - 1) & 1, 0), S_FULL);
            s_bar_arrive(S_BAR_FV((t - 1) & 1, 1), S_FULL);
        }
        if (t >= 2)
            s_bar_sync(S_BAR_EV(t & 1), S_FREE);
        s_load<128>(c.Vs + (t & 1) * S_TILE, c.vh, c.st, k0, c.T, l);
        if (t + 1 < n) {
            if (t >= 1)
                s_bar_sync(S_BAR_EK((t + 1) & 1), S_FREE);
            s_load<128>(c.Ks + ((t + 1) & 1) * S_TILE, c.kh, c.st, k0 + S_BK,
                        c.T, l);
        }
        trn_cp_commit();
    }
    s_ws_landed();
    s_bar_arrive(S_BAR_FV((n - 1) & 1, 0), S_FULL);
    s_bar_arrive(S_BAR_FV((n - 1) & 1, 1), S_FULL);
}

#define S_FREE_TMA (S_NTH + 32) /* the tensor-copy variant: one copier warp */

static __device__ __forceinline__ void
s_mbar_wait(uint32_t a, uint32_t parity)
{
    asm volatile("{\n.reg .pred P1;\nS_WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
                 "@!P1 bra S_WAIT;\n}\n" ::"r"(a),
                 "r"(parity)
                 : "memory");
}

/* Waits until operand op (0 K, 1 V) of tile t has landed in its buffer:
 * the copiers' named barrier, or the tensor copy's (completed once per
 * fill; fill t / 2 of buffer t % 2 has parity (t / 2) % 2). */
template <bool TMA>
static __device__ __forceinline__ void
s_full(const s_wg_ctx &c, int op, int t, int wg)
{
    if (TMA)
        s_mbar_wait(c.mb + 16 * op + 8 * (t & 1), (uint32_t) (t >> 1) & 1u);
    else
        s_bar_sync(op ? S_BAR_FV(t & 1, wg) : S_BAR_FK(t & 1, wg), S_FULL);
}

/* A warpgroup's loop: the overlapped schedule of s_loop_pipe with the
 * copier's barriers in place of the block's. Buffers are handed back
 * after the stage's last wait (K_j: the copier waits for it when t + 2 <
 * ntiles; V_{j-1}: when j + 1 < ntiles). */
template <int EARLY, bool TURNS, bool TMA>
static __device__ __forceinline__ void
s_ws_consumer(const s_wg_ctx &c, float (&acc)[64], float (&mr)[2],
              float (&lr)[2], int wg)
{
    constexpr int FREE = TMA ? S_FREE_TMA : S_FREE;
    const int n = c.ntiles;
    if (TURNS && wg == 1 && n > 1) /* warpgroup 0 issues first */
        s_bar_arrive(S_BAR_TURN(0), S_NTH);
    uint32_t p[32];
    float s[64], alpha[2];
    s_full<TMA>(c, 0, 0, wg);
    s_wg_fence();
    s_qk_issue(s, c.Qw, c.Ks);
    s_wg_commit();
    s_wg_wait<0>(s);
    if (2 < n)
        s_bar_arrive(S_BAR_EK(0), FREE);
    if (!s_unmasked(c, c.kbeg))
        s_mask(s, c.seg, c.T, c.r0, c.kbeg, c.t);
    s_softmax(s, mr, lr, alpha, c.sc);
    s_pack(p, s);
    for (int j = 1; j < n; j++) {
        const int k0 = c.kbeg + j * S_BK;
        const uint32_t Vb = c.Vs + ((j - 1) & 1) * S_TILE;
        uint64_t m = 0;
        if (!s_unmasked(c, k0))
            m = s_mask_bits(c.seg, c.T, c.r0, k0, c.t);
        s_full<TMA>(c, 0, j, wg);
        s_full<TMA>(c, 1, j - 1, wg);
        if (TURNS)
            s_bar_sync(S_BAR_TURN(wg), S_NTH);
        s_wg_fence();
        s_qk_issue(s, c.Qw, c.Ks + (j & 1) * S_TILE);
        s_wg_commit();
        s_pv_issue<0, EARLY>(acc, p, Vb);
        s_wg_commit();
        if (TURNS && (wg == 0 || j + 1 < n)) /* the other's turn */
            s_bar_arrive(S_BAR_TURN(wg ^ 1), S_NTH);
        s_wg_wait<1>(s);
        s_mask_apply(s, m);
        s_softmax(s, mr, lr, alpha, c.sc);
        if (EARLY < S_BK / 16) {
            s_wg_fence();
            s_pv_issue<EARLY, S_BK / 16>(acc, p, Vb + s_after(lr));
            s_wg_commit();
        }
        s_wg_wait<0>(acc);
        s_keep(p);
        if (j + 2 < n)
            s_bar_arrive(S_BAR_EK(j & 1), FREE);
        if (j + 1 < n)
            s_bar_arrive(S_BAR_EV((j - 1) & 1), FREE);
        s_rescale(acc, alpha);
        s_pack(p, s);
    }
    s_full<TMA>(c, 1, n - 1, wg);
    s_wg_fence();
    s_pv_issue(acc, p, c.Vs + ((n - 1) & 1) * S_TILE);
    s_wg_commit();
    s_wg_wait<0>(acc);
    s_keep(p);
}

template <int EARLY, bool TURNS>
__global__ void
__launch_bounds__(S_WS_NTH, 1)
    s_attn_fwd_ws(trn_bf16_t *o, float *lse, const trn_bf16_t *q,
                  const trn_bf16_t *k, const trn_bf16_t *v, int stride,
                  const int32_t *seg, int T, int H, int Hk, float sc)
{
    extern __shared__ unsigned char smem[];
    const uint32_t Qs = (s_saddr(smem) + 1023u) & ~1023u;
    const int h = blockIdx.x;
    const int q0 = (int) (gridDim.y - 1 - blockIdx.y) * S_BQ;
    /* the warpgroup, as a value the compiler knows is warp-uniform */
    const int wg = __shfl_sync(0xffffffffu, (int) threadIdx.x >> 7, 0);
    s_wg_ctx c;
    s_ctx_init(c, Qs, k, v, stride, seg, T, h / (H / Hk), q0, sc);
    if (wg == S_WGS) {
        asm volatile(
            "setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(S_WS_REG_COPY));
        s_ws_copier(c, Qs, q + (size_t) h * S_D, q0, (int) threadIdx.x - S_NTH);
    } else {
        asm volatile(
            "setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(S_WS_REG_MMA));
        float acc[64], mr[2] = {-INFINITY, -INFINITY}, lr[2] = {0.0f, 0.0f};
#pragma unroll
        for (int i = 0; i < 64; i++)
            acc[i] = 0.0f;
        s_ws_consumer<EARLY, TURNS, false>(c, acc, mr, lr, wg);
        s_store(o, lse, acc, mr, lr, c.r0, h, T, H, c.t);
    }
}

/* ---- tensor-copy variant ------------------------------------------------
 *
 * The warp-specialised kernel with the bulk tensor copy engine in place of
 * cp.async: one thread of the copier warp issues each 128 x 64 box (the
 * engine writes the 128-byte swizzle itself) onto an mbarrier that
 * completes when the bytes have landed; the warpgroups wait on it. Free
 * buffers are still announced through named barriers. */

static __device__ __forceinline__ void
s_mbar_init(uint32_t a)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(a));
}

static __device__ __forceinline__ void
s_mbar_expect(uint32_t a, uint32_t bytes)
{
    asm volatile(
        "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(a),
        "r"(bytes)
        : "memory");
}

/* The 128 rows from row r of columns col..col+127 of map m into the tile
 * at dst (two boxes of 64 columns), completing on mbarrier mb. */
static __device__ __forceinline__ void
s_tma_tile(uint32_t dst, const CUtensorMap *m, int col, int r, uint32_t mb)
{
#pragma unroll
    for (int hf = 0; hf < 2; hf++)
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier:"
                     ":complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
                         dst + hf * S_HALF),
                     "l"((uint64_t) m), "r"(col + 64 * hf), "r"(r), "r"(mb)
                     : "memory");
}

/* The copier warp (lane l; lane 0 issues): the order of s_ws_copier. */
static __device__ __forceinline__ void
s_tma_copier(const s_wg_ctx &c, const CUtensorMap *tq, const CUtensorMap *tk,
             const CUtensorMap *tv, int h, int hk, int q0, int l)
{
    const int n = c.ntiles;
    if (l == 0) {
        s_mbar_expect(c.mb, 2 * S_TILE);
        s_tma_tile(c.Qw, tq, h * S_D, q0, c.mb);
        s_tma_tile(c.Ks, tk, hk * S_D, c.kbeg, c.mb);
    }
    for (int t = 0; t < n; t++) {
        const int k0 = c.kbeg + t * S_BK;
        if (t >= 2)
            s_bar_sync(S_BAR_EV(t & 1), S_FREE_TMA);
        if (l == 0) {
            s_mbar_expect(c.mb + 16 + 8 * (t & 1), S_TILE);
            s_tma_tile(c.Vs + (t & 1) * S_TILE, tv, hk * S_D, k0,
                       c.mb + 16 + 8 * (t & 1));
        }
        if (t + 1 < n) {
            if (t >= 1)
                s_bar_sync(S_BAR_EK((t + 1) & 1), S_FREE_TMA);
            if (l == 0) {
                s_mbar_expect(c.mb + 8 * ((t + 1) & 1), S_TILE);
                s_tma_tile(c.Ks + ((t + 1) & 1) * S_TILE, tk, hk * S_D,
                           k0 + S_BK, c.mb + 8 * ((t + 1) & 1));
            }
        }
        __syncwarp();
    }
}

template <bool TURNS>
__global__ void
__launch_bounds__(S_WS_NTH, 1)
    s_attn_fwd_tma(trn_bf16_t *o, float *lse,
                   const __grid_constant__ CUtensorMap tq,
                   const __grid_constant__ CUtensorMap tk,
                   const __grid_constant__ CUtensorMap tv, const int32_t *seg,
                   int T, int H, int Hk, float sc)
{
    extern __shared__ unsigned char smem[];
    const uint32_t Qs = (s_saddr(smem) + 1023u) & ~1023u;
    const int h = blockIdx.x, hk = h / (H / Hk);
    const int q0 = (int) (gridDim.y - 1 - blockIdx.y) * S_BQ;
    const int wg = __shfl_sync(0xffffffffu, (int) threadIdx.x >> 7, 0);
    if (threadIdx.x == 0) {
        for (int i = 0; i < 4; i++)
            s_mbar_init(Qs + 5 * S_TILE + 8 * i);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    s_wg_ctx c; /* its barrier also publishes the mbarriers */
    s_ctx_init(c, Qs, NULL, NULL, 0, seg, T, 0, q0, sc);
    if (wg == S_WGS) {
        asm volatile(
            "setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(S_WS_REG_COPY));
        c.Qw = Qs;
        if (threadIdx.x < S_NTH + 32)
            s_tma_copier(c, &tq, &tk, &tv, h, hk, q0, threadIdx.x & 31);
    } else {
        asm volatile(
            "setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(S_WS_REG_MMA));
        float acc[64], mr[2] = {-INFINITY, -INFINITY}, lr[2] = {0.0f, 0.0f};
#pragma unroll
        for (int i = 0; i < 64; i++)
            acc[i] = 0.0f;
        s_ws_consumer<6, TURNS, true>(c, acc, mr, lr, wg);
        s_store(o, lse, acc, mr, lr, c.r0, h, T, H, c.t);
    }
}

/* The driver's tensor-map encoder, looked up once (NULL if missing). */
static PFN_cuTensorMapEncodeTiled_v12000
s_encoder(void)
{
    static PFN_cuTensorMapEncodeTiled_v12000 fn = NULL;
    static int tried = 0; /* racy first call: every thread finds the same */
    if (!tried) {
        void *p = NULL;
        cudaDriverEntryPointQueryResult qr;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p,
                                             12000, cudaEnableDefault,
                                             &qr) == cudaSuccess &&
            qr == cudaDriverEntryPointSuccess)
            fn = (PFN_cuTensorMapEncodeTiled_v12000) p;
        tried = 1;
    }
    return fn;
}

/* A map of the [T][cols] bf16 matrix at base (rows `stride` elements
 * apart) in boxes of 128 rows x 64 columns, 128-byte swizzled, zeros past
 * the edges. */
static bool
s_tmap(CUtensorMap *m, const trn_bf16_t *base, int cols, int T, int stride)
{
    PFN_cuTensorMapEncodeTiled_v12000 enc = s_encoder();
    cuuint64_t dims[2] = {(cuuint64_t) cols, (cuuint64_t) T};
    cuuint64_t strides[1] = {(cuuint64_t) stride * 2};
    cuuint32_t box[2] = {64, 128}, es[2] = {1, 1};
    return enc &&
           enc(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *) base, dims,
               strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
               CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

static lisa_rc_t
s_launch_tma(bool turns, trn_bf16_t *o, float *lse, const trn_bf16_t *q,
             const trn_bf16_t *k, const trn_bf16_t *v, int stride,
             const int32_t *seg, int T, int H, int Hk, cudaStream_t st)
{
    CUtensorMap tq, tk, tv;
    if (!s_tmap(&tq, q, H * S_D, T, stride) ||
        !s_tmap(&tk, k, Hk * S_D, T, stride) ||
        !s_tmap(&tv, v, Hk * S_D, T, stride)) {
        fprintf(stderr, "trainer: tensor maps unavailable for attention\n");
        return LISA_UNSUPPORTED;
    }
    auto kern = turns ? s_attn_fwd_tma<true> : s_attn_fwd_tma<false>;
    TRN_CUDA_TRY(cudaFuncSetAttribute(
        kern, cudaFuncAttributeMaxDynamicSharedMemorySize, S_SMEM));
    dim3 grid(H, TRN_CEIL_DIV(T, S_BQ));
    kern<<<grid, S_WS_NTH, S_SMEM, st>>>(o, lse, tq, tk, tv, seg, T, H, Hk,
                                         1.0f / sqrtf((float) S_D) *
                                             1.4426950408889634f);
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}

typedef void (*s_kernel_t)(trn_bf16_t *, float *, const trn_bf16_t *,
                           const trn_bf16_t *, const trn_bf16_t *, int,
                           const int32_t *, int, int, int, float);

/* The kernel and its threads by LISA_ATTN_H_SCHED (read every call, for
 * comparison): 0 block-synchronous and serial; 6 block-synchronous and
 * overlapped, 6 of P V's 8 k-steps issued before the softmax and the rest
 * after it (see s_after); w6, w7 the warp-specialised kernel with 6 or 7
 * before; p6 that kernel at 6 with the two warpgroups taking turns to
 * issue their products (one's softmax under the other's products); t6
 * and u6 (see trn_k_attn_fwd_h) the warp-specialised kernel fed by the
 * tensor copy engine, without and with turns. Default 6. */
static s_kernel_t
s_pick(int *nth)
{
    const char *e = getenv("LISA_ATTN_H_SCHED");
    if (!e || !*e)
        e = "6";
    const bool ws = e[0] == 'w' || e[0] == 'p';
    const int v = atoi(ws ? e + 1 : e);
    *nth = ws ? S_WS_NTH : S_NTH;
    if (e[0] == 'p')
        return s_attn_fwd_ws<6, true>;
    if (ws)
        return v == 7 ? s_attn_fwd_ws<7, false> : s_attn_fwd_ws<6, false>;
    return v == 0 ? s_attn_fwd_wgmma<0> : s_attn_fwd_wgmma<6>;
}

lisa_rc_t
trn_k_attn_fwd_h(trn_bf16_t *o, float *lse, const trn_bf16_t *q,
                 const trn_bf16_t *k, const trn_bf16_t *v, int stride,
                 const int32_t *seg, int T, int H, int Hk, cudaStream_t st)
{
    const char *e = getenv("LISA_ATTN_H_SCHED");
    if (e && (e[0] == 't' || e[0] == 'u')) /* tensor copies; u: turns */
        return s_launch_tma(e[0] == 'u', o, lse, q, k, v, stride, seg, T, H, Hk,
                            st);
    int nth;
    s_kernel_t kern = s_pick(&nth);
    TRN_CUDA_TRY(cudaFuncSetAttribute(
        kern, cudaFuncAttributeMaxDynamicSharedMemorySize, S_SMEM));
    dim3 grid(H, TRN_CEIL_DIV(T, S_BQ));
    kern<<<grid, nth, S_SMEM, st>>>(o, lse, q, k, v, stride, seg, T, H, Hk,
                                    1.0f / sqrtf((float) S_D) *
                                        1.4426950408889634f);
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}
