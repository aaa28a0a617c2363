/*
 * trn_k_prefill: causal attention of prompt tokens over a paged KV cache,
 * for prompts and prompt chunks that follow a cached prefix (shared
 * blocks of an earlier sequence, or the part of a long prompt an earlier
 * step already ran). The new tokens' keys and values are in the cache
 * before it runs (trn_k_qk_prep writes them), so every key, old or new,
 * comes through the sequence's block table.
 *
 * The scheme, and its stages (trn_cuda_flash.cuh), are the training forward
 * kernel's (trn_k_attn.cu): one block of 4 warps per (query tile of up to
 * 128 rows of one sequence, query head), 32 rows a warp as two m16 tiles
 * (or 128 / HB rows of each of HB query heads of one KV head: s_attn_prefill);
 * mma.sync m16n8k16 in bf16 with fp32 accumulators; the online softmax in
 * base 2 with the scale folded in; key/value tiles of 64 positions through
 * two shared-memory buffers with cp.async (tile j+1 lands while tile j is
 * computed); operands read with ldmatrix from padded rows. What differs: the
 * tile's queries are at absolute positions p0.. of their sequence, so a key
 * at position j is visible to the query at position p iff j <= p, and the
 * key tiles run over positions 0..p0+rows-1 of the sequence, each row's
 * cache row looked up once in the table by the thread that copies it.
 * Sub-tiles wholly after a warp's last query are skipped, the mask is
 * applied only to those that cross the diagonal, and the host hands the
 * tiles over longest first. Grouped-query heads read their KV head's rows
 * (no repeated K/V).
 */
#include "trn_cuda_common.cuh"
#include "trn_cuda_flash.cuh"
#include "trn_cuda_mma.cuh"

#include <stdlib.h>
#include <string.h>

typedef __nv_bfloat16 bf16;

#define S_LOG2E 1.4426950408889634f
#define S_WARPS 4
#define S_BQ    (32 * S_WARPS) /* TRN_PREFILL_TILE_ROWS */
#define S_BK    64
/* keys a warp scores at once: 32 at head_dim 128 (the registers) */
#define S_BC(D) ((D) >= 128 ? 32 : 64)

static_assert(S_BQ == TRN_PREFILL_TILE_ROWS, "tile rows");

/* Cache row of position p of the sequence in table row sl (rows of a
 * cache number under 2^31: trn_gpu_kv_new keeps n_blocks * block_size
 * there). */
__device__ __forceinline__ size_t
s_row(const trn_kv_pages_t &pg, int sl, int p)
{
    int b = __ldg(pg.table + (size_t) sl * (size_t) pg.max_blocks +
                  (size_t) (p >> pg.bshift));
    return ((size_t) b << pg.bshift) + (size_t) (p & ((1 << pg.bshift) - 1));
}

/* The same as 32 bits (a register, where a tile's rows are kept). */
__device__ __forceinline__ uint32_t
s_row32(const trn_kv_pages_t &pg, int sl, int p)
{
    return (uint32_t) s_row(pg, sl, p);
}

/* The causal mask of a sub-tile of BC = 8 NS keys from position kc on,
 * for the lane's four rows (positions rbase + 16m + 8half). */
template <int NS>
static __device__ __forceinline__ void
s_fwd_mask(float (&s)[2][NS][4], int rbase, int kc, int t)
{
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int r = rbase + (i >> 1) * 16 + (i & 1) * 8;
#pragma unroll
        for (int n = 0; n < NS; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int tk = kc + n * 8 + 2 * t + e;
                if (tk > r)
                    s[i >> 1][n][(i & 1) * 2 + e] = -INFINITY;
            }
    }
}

/* HB query heads of one KV head a block (1, 2 or 4): the block's 128
 * rows are PT = 128 / HB positions of each of its heads (head h0 + r / PT,
 * position r % PT of its share of the tile), so the heads that share the
 * KV head read each key and value tile once; warp w's 32 rows are one
 * head's. A host tile of up to 128 rows is HB blocks (blockIdx.z: which
 * PT rows of it); with HB = 1 a block is a tile of one head. */
template <int D, int HB>
__global__ void __launch_bounds__(32 * S_WARPS, 2)
    s_attn_prefill(trn_bf16_t *o, const trn_bf16_t *q, int stride,
                   const trn_bf16_t *ck, const trn_bf16_t *cv,
                   trn_kv_pages_t pg, const trn_prefill_tile_t *tiles, int H,
                   int Hk, float scale)
{
    constexpr int LDB = D + 8, NT = D / 8, BK = S_BK;
    constexpr int BC = S_BC(D), NS = BC / 8; /* sub-tile, its n-tiles */
    constexpr int BQ = S_BQ, NTH = 32 * S_WARPS, CH = D / 8;
    constexpr int PT = BQ / HB; /* positions a block, each of HB heads */
    static_assert(PT % 32 == 0, "a warp's rows are one head's");
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Qs = reinterpret_cast<bf16 *>(smem);
    bf16 *Ks = Qs + BQ * LDB; /* [2][BK][LDB] */
    bf16 *Vs = Ks + 2 * BK * LDB;

    const int h0 = blockIdx.x * HB, hk = h0 / (H / Hk);
    const trn_prefill_tile_t tl = tiles[blockIdx.y];
    const int r0 = (int) blockIdx.z * PT; /* the block's share of the tile */
    if (r0 >= tl.rows)
        return; /* a short tile: nothing here */
    const int rows = min(tl.rows - r0, PT), sl = tl.slot;
    const int p0 = tl.p0 + r0, row0 = tl.row0 + r0;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const size_t st = (size_t) stride, HkD = (size_t) Hk * D;
    const int plast = p0 + rows - 1; /* the block's last query position */
    const int ntiles = plast / BK + 1;

    /* Q rows of this block, then the first K/V tile, as one copy group */
    for (int i = threadIdx.x; i < BQ * CH; i += NTH) {
        int r = i / CH, c = (i % CH) * 8, pr = r % PT;
        bool ok = pr < rows;
        trn_cp16(Qs + r * LDB + c,
                 q + (size_t) (h0 + r / PT) * D +
                     (size_t) (row0 + (ok ? pr : 0)) * st + c,
                 ok);
    }
    /* positions past plast are zero-filled (masked, but a zero probability
     * times a stale value could be NaN) */
    /* a thread copies D / 16 chunks, each of another row: the rows' table
     * look-ups first (all in flight at once), then the copies */
    auto load_kv = [&](int buf, int k0) {
        constexpr int CPT = BK * CH / NTH;
        static_assert(CPT * NTH == BK * CH, "copies");
        bf16 *kd = Ks + buf * BK * LDB, *vd = Vs + buf * BK * LDB;
        uint32_t row[CPT];
#pragma unroll
        for (int k = 0; k < CPT; k++) {
            int r = (threadIdx.x + k * NTH) / CH;
            row[k] = k0 + r <= plast ? s_row32(pg, sl, k0 + r) : 0u;
        }
#pragma unroll
        for (int k = 0; k < CPT; k++) {
            int i = threadIdx.x + k * NTH;
            int r = i / CH, c = (i % CH) * 8;
            bool ok = k0 + r <= plast;
            size_t off = (size_t) hk * D + c + (size_t) row[k] * HkD;
            trn_cp16(kd + r * LDB + c, ck + off, ok);
            trn_cp16(vd + r * LDB + c, cv + off, ok);
        }
    };
    load_kv(0, 0);
    trn_cp_commit();

    /* my four rows: i = 2m + half is tile row 32w + 16m + 8half + g */
    float acc[2][NT][4], mr[4], lr[4];
    trn_fa_init<NT>(acc, mr, lr);
    const float sc = scale * S_LOG2E;
    const int pw = (warp * 32) % PT; /* the warp's first row's position */
    const int wfirst = p0 + pw;      /* (absolute) */
    const int rbase = wfirst + g;

    for (int j = 0; j < ntiles; j++) {
        const int k0 = j * BK, buf = j & 1;
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
            /* the warp's rows all before the sub-tile, or all past the
             * tile's last (a short tile): nothing to see */
            if (wfirst + 31 < kc || kc > plast || pw >= rows)
                continue;
            const bf16 *Kb = Ks + (buf * BK + sub * BC) * LDB;
            const bf16 *Vb = Vs + (buf * BK + sub * BC) * LDB;
            /* every key of the sub-tile at or before the warp's first row */
            const bool full = kc + BC - 1 <= wfirst;

            float s[2][NS][4];
            trn_fa_scores<D, BC>(s, Qs, Kb, warp, lane);
            if (!full)
                s_fwd_mask<NS>(s, rbase, kc, t);
            float alpha[4];
            trn_fa_softmax<NS>(s, mr, lr, alpha, sc);
            trn_fa_rescale<NT>(acc, alpha);
            trn_fa_pv<D, BC>(acc, s, Vb, lane);
        }
    }
    /* normalise and store the tile's real rows */
    const size_t ost = (size_t) (H * D);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int m = i >> 1, e0 = (i & 1) * 2;
        const int r = warp * 32 + g + m * 16 + (i & 1) * 8; /* block row */
        const int pr = r % PT, h = h0 + r / PT;
        if (pr >= rows)
            continue;
        float il = lr[i] > 0.0f ? 1.0f / lr[i] : 0.0f;
#pragma unroll
        for (int n = 0; n < NT; n++)
            *reinterpret_cast<uint32_t *>(o + (size_t) (row0 + pr) * ost +
                                          (size_t) h * D + n * 8 + 2 * t) =
                trn_pack2(acc[m][n][e0] * il, acc[m][n][e0 + 1] * il);
    }
}

template <int D, int HB>
static lisa_rc_t
s_prefill_hb(trn_bf16_t *o, const trn_bf16_t *q, int stride,
             const trn_bf16_t *ck, const trn_bf16_t *cv, trn_kv_pages_t pg,
             const trn_prefill_tile_t *tiles, int ntiles, int H, int Hk,
             cudaStream_t st)
{
    /* Q rows + two K and two V buffers */
    const int shm = (S_BQ + 4 * S_BK) * (D + 8) * 2;
    static int attr_set; /* per instantiation; the first call is never
                            inside a graph capture */
    if (!attr_set) {
        TRN_CUDA_TRY(cudaFuncSetAttribute(
            s_attn_prefill<D, HB>, cudaFuncAttributeMaxDynamicSharedMemorySize,
            shm));
        attr_set = 1;
    }
    dim3 grid((unsigned) (H / HB), (unsigned) ntiles, (unsigned) HB);
    s_attn_prefill<D, HB><<<grid, 32 * S_WARPS, (size_t) shm, st>>>(
        o, q, stride, ck, cv, pg, tiles, H, Hk, 1.0f / sqrtf((float) D));
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}

/* Query heads a block takes (s_attn_prefill's HB): the most of 4, 2 that
 * divides the query heads a KV head, else 1; LISA_CUDA_PREFILL_PACK=0
 * keeps a head a block (read once). */
static int
s_prefill_heads(int H, int Hk)
{
    static int pack = -1;
    if (pack < 0)
        pack = trn_env_on("LISA_CUDA_PREFILL_PACK");
    int G = H / Hk;
    return !pack ? 1 : G % 4 == 0 ? 4 : G % 2 == 0 ? 2 : 1;
}

template <int D>
static lisa_rc_t
s_prefill(trn_bf16_t *o, const trn_bf16_t *q, int stride, const trn_bf16_t *ck,
          const trn_bf16_t *cv, trn_kv_pages_t pg,
          const trn_prefill_tile_t *tiles, int ntiles, int H, int Hk,
          cudaStream_t st)
{
    switch (s_prefill_heads(H, Hk)) {
    case 4:
        return s_prefill_hb<D, 4>(o, q, stride, ck, cv, pg, tiles, ntiles, H,
                                  Hk, st);
    case 2:
        return s_prefill_hb<D, 2>(o, q, stride, ck, cv, pg, tiles, ntiles, H,
                                  Hk, st);
    default:
        return s_prefill_hb<D, 1>(o, q, stride, ck, cv, pg, tiles, ntiles, H,
                                  Hk, st);
    }
}

/* Whether head_dim 128 takes the wgmma kernel (trn_k_attn_h.cu) where
 * trn_attn_hopper allows: unless LISA_ATTN_HOPPER_PREFILL is 0 (read every
 * call). */
static bool
s_hopper_prefill(void)
{
    const char *e = getenv("LISA_ATTN_HOPPER_PREFILL");
    return !(e && strcmp(e, "0") == 0);
}

extern "C" lisa_rc_t
trn_k_attn_prefill(trn_bf16_t *o, const trn_bf16_t *q, int stride,
                   const trn_bf16_t *cache_k, const trn_bf16_t *cache_v,
                   trn_kv_pages_t pg, const trn_prefill_tile_t *tiles,
                   int ntiles, int H, int Hk, int D, trn_cuda_stream_t *s)
{
    TRN_REQUIRE(o && q && cache_k && cache_v && tiles && ntiles > 0);
    TRN_REQUIRE(H > 0 && Hk > 0 && H % Hk == 0 && stride % 8 == 0);
    TRN_REQUIRE(((uintptr_t) q & 15) == 0 && ((uintptr_t) cache_k & 15) == 0 &&
                ((uintptr_t) cache_v & 15) == 0);
    TRN_REQUIRE(pg.table && pg.max_blocks > 0 && pg.bshift >= 0 &&
                pg.bshift <= 10 && ntiles <= 65535);
    cudaStream_t st = trn_stream(s);
    if (D == 128 && trn_attn_hopper() && s_hopper_prefill())
        return trn_k_attn_prefill_h(o, q, stride, cache_k, cache_v, pg, tiles,
                                    ntiles, H, Hk, st);
    switch (D) {
    case 16:
        return s_prefill<16>(o, q, stride, cache_k, cache_v, pg, tiles, ntiles,
                             H, Hk, st);
    case 32:
        return s_prefill<32>(o, q, stride, cache_k, cache_v, pg, tiles, ntiles,
                             H, Hk, st);
    case 64:
        return s_prefill<64>(o, q, stride, cache_k, cache_v, pg, tiles, ntiles,
                             H, Hk, st);
    case 128:
        return s_prefill<128>(o, q, stride, cache_k, cache_v, pg, tiles, ntiles,
                              H, Hk, st);
    default:
        return LISA_UNSUPPORTED;
    }
}
