/*
 * trn_k_decode: the generation-side kernels: preparing the new tokens'
 * queries and keys (per-head RMSNorm, RoPE) and writing keys and values
 * into the KV cache, attention of new tokens over their cache, and
 * sampling.
 *
 * Decode attention (head_dim 32, 64 or 128; 1, 2, 4 or 8 query heads per
 * KV head): one block per (new token, KV head, split) serves all the query
 * heads that share the KV head, so each cached key and value is read once
 * per token rather than once per query head. The query heads are the
 * rows of tensor-core (mma.sync) tiles; keys and values come through
 * shared memory with cp.async, a tile ahead of the one being computed;
 * the online softmax runs on the accumulator fragments, and the block
 * merges its warps at the end. When few tokens would leave the
 * device idle (batch 1 decoding), a token's positions are split over
 * several blocks, sized from its real length, and a second kernel merges
 * the partial results by their log-sum-exp. Other shapes use a simpler
 * kernel of one block per (token, query head). Rows whose slot is
 * negative are padding and give zeros. Prefill tokens use the same
 * kernels (each sees positions up to its own); training uses the tiled
 * kernel in trn_k_attn.cu.
 *
 * Sampling: rows drawn greedily or at a temperature alone (the common
 * case) spread over many blocks: one pass per chunk of 2,048 logits
 * (chunk maximum, its index, sum of exponentials), then a warp per row
 * combines the chunks, picks the chunk holding the draw by their masses
 * and walks it. Rows with top-p or top-k take one block per row.
 * Temperature scales the logits; top-k and
 * top-p become one probability threshold found by bisection over its bit
 * pattern (no sort over the vocabulary; the last steps over the few
 * tokens near the threshold, in shared memory); the token is drawn by inverse
 * CDF in vocabulary order with a uniform from a counter-based generator keyed
 * by the row's seed.
 */
#include "trn_cuda_common.cuh"
#include "trn_cuda_mma.cuh"
#include "trn_cuda_trace.cuh"

#define S_WARPS 4
#define S_MAXE  4 /* dimensions per lane: D <= 128 */

/* Cache row of position p of the sequence in table row sl (rows of a
 * cache number under 2^31: trn_gpu_kv_new keeps n_blocks * block_size
 * there). */
__device__ __forceinline__ size_t
s_crow(const trn_kv_pages_t &pg, int sl, int p)
{
    int b = __ldg(pg.table + (size_t) sl * (size_t) pg.max_blocks +
                  (size_t) (p >> pg.bshift));
    return ((size_t) b << pg.bshift) + (size_t) (p & ((1 << pg.bshift) - 1));
}

/* The same as 32 bits (a register, where a tile's rows are kept). */
__device__ __forceinline__ uint32_t
s_crow32(const trn_kv_pages_t &pg, int sl, int p)
{
    return (uint32_t) s_crow(pg, sl, p);
}

static bool
s_pages_ok(const trn_kv_pages_t &pg)
{
    return pg.table && pg.max_blocks > 0 && pg.bshift >= 0 && pg.bshift <= 10;
}

__global__ void __launch_bounds__(32 * S_WARPS)
    s_attn_decode(trn_bf16_t *o, const trn_bf16_t *q, int stride,
                  const trn_bf16_t *ck, const trn_bf16_t *cv,
                  const int32_t *slot, const int32_t *pos, int H, int Hk, int D,
                  trn_kv_pages_t pg, float scale)
{
    __shared__ float sm_m[S_WARPS], sm_l[S_WARPS];
    __shared__ float sm_o[S_WARPS][S_MAXE * 32];
    int t = blockIdx.x, h = blockIdx.y, hk = h / (H / Hk);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (slot[t] < 0) { /* padding row */
        if (warp == 0)
            for (int d = lane; d < D; d += 32)
                trn_st(o + (size_t) t * (size_t) (H * D) + (size_t) h * D + d,
                       0.0f);
        return;
    }
    const trn_bf16_t *qr = q + (size_t) t * (size_t) stride + (size_t) h * D;
    float qv[S_MAXE], acc[S_MAXE];
#pragma unroll
    for (int e = 0; e < S_MAXE; e++) {
        int d = lane + 32 * e;
        qv[e] = d < D ? trn_ld(qr + d) : 0.0f;
        acc[e] = 0.0f;
    }
    int HkD = Hk * D, sl = slot[t];
    size_t base = (size_t) hk * D;
    float m = -INFINITY, l = 0.0f;
    for (int j = warp; j <= pos[t]; j += S_WARPS) {
        size_t row = s_crow(pg, sl, j) * (size_t) HkD;
        const trn_bf16_t *kr = ck + base + row;
        float sdot = 0.0f;
#pragma unroll
        for (int e = 0; e < S_MAXE; e++) {
            int d = lane + 32 * e;
            if (d < D)
                sdot += qv[e] * trn_ld(kr + d);
        }
        sdot = trn_warp_sum(sdot) * scale;
        float mn = fmaxf(m, sdot);
        float a = expf(m - mn), p = expf(sdot - mn);
        l = l * a + p;
        const trn_bf16_t *vr = cv + base + row;
#pragma unroll
        for (int e = 0; e < S_MAXE; e++) {
            int d = lane + 32 * e;
            acc[e] = acc[e] * a + (d < D ? p * trn_ld(vr + d) : 0.0f);
        }
        m = mn;
    }
    if (lane == 0) {
        sm_m[warp] = m;
        sm_l[warp] = l;
    }
#pragma unroll
    for (int e = 0; e < S_MAXE; e++)
        sm_o[warp][lane + 32 * e] = acc[e];
    __syncthreads();
    if (warp != 0)
        return;
    float M = -INFINITY;
    for (int w = 0; w < S_WARPS; w++)
        M = fmaxf(M, sm_m[w]);
    float L = 0.0f;
    float out[S_MAXE] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int w = 0; w < S_WARPS; w++) {
        if (sm_m[w] == -INFINITY)
            continue;
        float f = expf(sm_m[w] - M);
        L += sm_l[w] * f;
#pragma unroll
        for (int e = 0; e < S_MAXE; e++)
            out[e] += sm_o[w][lane + 32 * e] * f;
    }
    trn_bf16_t *orow = o + (size_t) t * (size_t) (H * D) + (size_t) h * D;
#pragma unroll
    for (int e = 0; e < S_MAXE; e++) {
        int d = lane + 32 * e;
        if (d < D)
            trn_st(orow + d, L > 0.0f ? out[e] / L : 0.0f);
    }
}

/* ---- q/k preparation -------------------------------------------------- */

#define S_PREP_WARPS 4
#define S_PREP_MAXD  256

/* One warp's head: RMSNorm of src (D bf16 values) with weight w, then
 * RoPE at position p, into d1 (and d2 when not NULL) as bf16; buf holds D
 * floats of the warp's shared memory. The one formula of the q/k
 * preparation, so the fused decode kernel gives the same bits. */
__device__ __forceinline__ void
s_prep_head(const trn_bf16_t *src, const trn_bf16_t *w, float *buf, int D,
            int p, float eps, float theta, trn_bf16_t *d1, trn_bf16_t *d2,
            int lane)
{
    float ss = 0.0f;
    for (int d = lane; d < D; d += 32) {
        float x = trn_ld(src + d);
        buf[d] = x;
        ss += x * x;
    }
    ss = trn_warp_sum(ss);
    float r = rsqrtf(ss / (float) D + eps);
    if (w) /* Qwen3's per-head norm; Llama and Qwen2 rotate the raw head */
        for (int d = lane; d < D; d += 32)
            buf[d] = trn_round_bf16(trn_ld(w + d) * trn_round_bf16(buf[d] * r));
    __syncwarp();
    int half = D / 2;
    for (int i = lane; i < half; i += 32) {
        float inv_freq = 1.0f / powf(theta, (float) (2 * i) / (float) D);
        float ang = (float) p * inv_freq;
        float c = trn_round_bf16(cosf(ang));
        float sn = trn_round_bf16(sinf(ang));
        float x1 = buf[i], x2 = buf[i + half];
        float y1 = x1 * c - x2 * sn, y2 = x2 * c + x1 * sn;
        trn_st(d1 + i, y1);
        trn_st(d1 + i + half, y2);
        if (d2) {
            trn_st(d2 + i, y1);
            trn_st(d2 + i + half, y2);
        }
    }
}

/* One warp per (token, head) of the H query and Hk key heads: RMSNorm with
 * the head's weight (rounded to bf16 as trn_k_rmsnorm_fwd stores it), RoPE
 * as trn_k_rope computes it; queries and keys back in place, keys (and the
 * value head of the same index) into the cache too. */
__global__ void __launch_bounds__(32 * S_PREP_WARPS)
    s_qk_prep(trn_bf16_t *qkv, int stride, const trn_bf16_t *qw,
              const trn_bf16_t *kw, trn_bf16_t *ck, trn_bf16_t *cv,
              const int32_t *slot, const int32_t *pos, int T, int H, int Hk,
              int D, trn_kv_pages_t pg, float eps, float theta)
{
    __shared__ float sbuf[S_PREP_WARPS][S_PREP_MAXD];
    trn_pdl_enter();
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int row = blockIdx.x * S_PREP_WARPS + warp;
    if (row >= T * (H + Hk))
        return;
    int t = row / (H + Hk), hh = row % (H + Hk);
    int isq = hh < H, sl = slot[t], p = pos[t];
    if (!isq && sl < 0)
        return; /* padding row: nothing to cache */
    trn_bf16_t *src = qkv + (size_t) t * (size_t) stride + (size_t) hh * D;
    if (isq) {
        s_prep_head(src, qw, sbuf[warp], D, p, eps, theta, src, NULL, lane);
        return;
    }
    size_t HkD = (size_t) Hk * (size_t) D;
    int kh = hh - H;
    size_t at = s_crow(pg, sl, p) * HkD + (size_t) kh * D;
    /* keys into the cache, and in place too, for the prefill kernel */
    s_prep_head(src, kw, sbuf[warp], D, p, eps, theta, ck + at, src, lane);
    const trn_bf16_t *vs =
        qkv + (size_t) t * (size_t) stride + (size_t) (H + Hk + kh) * D;
    for (int d = lane; d < D; d += 32)
        cv[at + d] = vs[d];
}

extern "C" lisa_rc_t
trn_k_qk_prep(trn_bf16_t *qkv, int stride, const trn_bf16_t *q_norm,
              const trn_bf16_t *k_norm, trn_bf16_t *cache_k,
              trn_bf16_t *cache_v, const int32_t *slot, const int32_t *pos,
              int T, int H, int Hk, int D, trn_kv_pages_t pg, float eps,
              float theta, trn_cuda_stream_t *s)
{
    TRN_REQUIRE(qkv && !q_norm == !k_norm && cache_k && cache_v && slot && pos);
    TRN_REQUIRE(T > 0 && H > 0 && Hk > 0 && D > 0 && D % 2 == 0);
    TRN_REQUIRE(D <= S_PREP_MAXD && stride >= (H + 2 * Hk) * D &&
                s_pages_ok(pg));
    int rows = T * (H + Hk);
    TRN_CUDA_TRY(trn_launch_pdl(
        s_qk_prep, dim3((unsigned) TRN_CEIL_DIV(rows, S_PREP_WARPS)),
        dim3(32 * S_PREP_WARPS), 0, trn_stream(s), qkv, stride, q_norm, k_norm,
        cache_k, cache_v, slot, pos, T, H, Hk, D, pg, eps, theta));
    return LISA_OK;
}

/* ---- grouped-query decode attention ------------------------------------ */

#define S_GQ_TP     32 /* positions: the unit a token's splits are cut in */
#define S_GQ_SPLITS 32 /* most splits of one token's positions */

/* A split's partial result: m[G] (log2 units), l[G], then o[G][D]
 * (unnormalised). */
__device__ __forceinline__ size_t
s_gq_rec(int G, int D)
{
    return (size_t) G * (size_t) (D + 2);
}

/* The end of a grouped decode block: the NW warps' states (each query
 * head's maximum and sum in sm_m / sm_l, its unnormalised output in
 * sm_o[w][g * D + d]) merged by one thread per (query head, dimension),
 * then either the output (one split) or this split's record. */
template <int D, int G, int NW>
__device__ __forceinline__ void
s_gq_finish(trn_bf16_t *o, float *part, const float (*sm_m)[G],
            const float (*sm_l)[G], const float (*sm_o)[G * D], int t, int hk,
            int split, int nsplit, int H, int Hk)
{
    float *rec = part
                     ? part + ((size_t) t * (size_t) Hk * (size_t) nsplit +
                               (size_t) hk * (size_t) nsplit + (size_t) split) *
                                  s_gq_rec(G, D)
                     : NULL;
    for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
        int g = i / D;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < NW; w++)
            M = fmaxf(M, sm_m[w][g]);
        float L = 0.0f, acc = 0.0f;
        if (M != -INFINITY)
#pragma unroll
            for (int w = 0; w < NW; w++) {
                float f =
                    sm_m[w][g] == -INFINITY ? 0.0f : exp2f(sm_m[w][g] - M);
                L += sm_l[w][g] * f;
                acc += sm_o[w][i] * f;
            }
        if (nsplit == 1) {
            trn_st(o + (size_t) t * (size_t) (H * D) + (size_t) hk * G * D + i,
                   L > 0.0f ? acc / L : 0.0f);
        } else {
            rec[2 * G + i] = acc;
            if (i % D == 0) {
                rec[g] = M;
                rec[G + g] = L;
            }
        }
    }
}

/* Grouped decode attention on tensor cores (head_dim 32, 64 or 128, up
 * to 8 query heads per KV head): one block of NW warps per (token, KV
 * head, split) serves the query heads that share the KV head (the cache is
 * read once per token, not once per query head). Key and value tiles of
 * 16 NW positions (rows padded, so ldmatrix reads are free of bank
 * conflicts) come through shared memory with cp.async, ST deep (ST - 1
 * tiles in flight while the warps work on one). Each warp
 * takes 16 positions of a tile: the scores of the G query heads (rows of
 * an m16 tile, the rest zero) are one mma.sync per 16 dimensions and 8
 * positions; the online softmax runs on the accumulator fragments (a
 * row's 16 scores over 4 lanes); the probabilities, rounded to bf16 as the
 * training kernel rounds them, multiply the values in one more mma per 8
 * dimensions. The warps' states merge through shared memory.
 * With PREP (a step of one token per sequence) the block also does
 * s_qk_prep's work for its heads: its queries from the raw q|k|v row into
 * shared memory, the new key and value into the cache (by the split that
 * holds the new position), and into the tile that holds that position once
 * it has arrived, since that tile's copy may have read the row before the
 * write. Blocks of other KV heads or splits never read that row. */
template <int D, int NW, int ST>
constexpr int
s_gm_smem(void)
{
    return ST * 2 * 16 * NW * (D + 8) * 2;
}

/* The new key and value (snew) into row r of a tile whose copy may have
 * read that row of the cache before the write: K rows first, V rows TE
 * elements on. */
template <int D, int NW>
static __device__ __forceinline__ void
s_gm_patch(__nv_bfloat16 *tile, const trn_bf16_t *snew, int r)
{
    constexpr int S_GQ_THREADS = 32 * NW, LD = D + 8, TE = 16 * NW * LD;
    __nv_bfloat16 *kr = tile + (size_t) r * LD;
    for (int c = threadIdx.x; c < D / 4; c += S_GQ_THREADS) {
        int e = (c % (D / 8)) * 8;
        const uint4 *src =
            reinterpret_cast<const uint4 *>(snew + (c < D / 8 ? 0 : D) + e);
        *reinterpret_cast<uint4 *>(kr + (c < D / 8 ? 0 : TE) + e) = *src;
    }
    __syncthreads();
}

/* One tile of a warp's 16 positions (from p0 in K and V): the scores of
 * the query rows (positions jt + 8 h + e for the lane, those from j1 on
 * masked), the online softmax over them (base 2, scale sl2) and O += P V
 * with the output rescaled. */
template <int D>
static __device__ __forceinline__ void
s_gm_step(float (&oacc)[D / 8][4], float &m_r, float &l_r,
          const uint32_t (&qa)[D / 16][2], const __nv_bfloat16 *K,
          const __nv_bfloat16 *V, int jt, int j1, float sl2, int p0, int lane)
{
    constexpr int LD = D + 8, KS = D / 16, NT = D / 8;
    float sc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int kk = 0; kk < KS; kk++) {
        uint32_t b[4];
        trn_ldsm_bn(b, K, LD, kk, p0 / 8, lane);
        uint32_t a[4] = {qa[kk][0], 0u, qa[kk][1], 0u};
        trn_mma(sc[0], a, b[0], b[1]);
        trn_mma(sc[1], a, b[2], b[3]);
    }
    float mx = m_r;
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float v = jt + 8 * h + e < j1 ? sc[h][e] * sl2 : -INFINITY;
            sc[h][e] = v;
            mx = fmaxf(mx, v);
        }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    float alpha = m_r == -INFINITY ? 0.0f : exp2f(m_r - mx);
    float ps = 0.0f;
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float p = sc[h][e] == -INFINITY ? 0.0f : exp2f(sc[h][e] - mx);
            sc[h][e] = p;
            ps += p;
        }
    ps += __shfl_xor_sync(0xffffffffu, ps, 1);
    ps += __shfl_xor_sync(0xffffffffu, ps, 2);
    l_r = l_r * alpha + ps;
    m_r = mx;
    uint32_t pa[4] = {trn_pack2(sc[0][0], sc[0][1]), 0u,
                      trn_pack2(sc[1][0], sc[1][1]), 0u};
#pragma unroll
    for (int d = 0; d < NT; d += 2) {
        oacc[d][0] *= alpha;
        oacc[d][1] *= alpha;
        oacc[d + 1][0] *= alpha;
        oacc[d + 1][1] *= alpha;
        uint32_t b[4];
        trn_ldsm_b2(b, V + p0 * LD, LD, 0, d, lane);
        trn_mma(oacc[d], pa, b[0], b[1]);
        trn_mma(oacc[d + 1], pa, b[2], b[3]);
    }
}

/* A warp's state of query row g (< G) into the merge area. */
template <int D, int G, int NW>
static __device__ __forceinline__ void
s_gm_stash(float (&sm_m)[NW][G], float (&sm_l)[NW][G], float (*sm_o)[G * D],
           const float (&oacc)[D / 8][4], float m_r, float l_r, int warp, int g,
           int tq)
{
    constexpr int NT = D / 8;
    if (tq == 0) {
        sm_m[warp][g] = m_r;
        sm_l[warp][g] = l_r;
    }
#pragma unroll
    for (int d = 0; d < NT; d++) {
        sm_o[warp][g * D + d * 8 + 2 * tq] = oacc[d][0];
        sm_o[warp][g * D + d * 8 + 2 * tq + 1] = oacc[d][1];
    }
}

template <int D, int G, bool PREP, int NW, int ST>
__global__ void __launch_bounds__(32 * NW)
    s_attn_gqa_mma(trn_bf16_t *o, float *part, const trn_bf16_t *q, int stride,
                   trn_bf16_t *ck, trn_bf16_t *cv, const int32_t *slot,
                   const int32_t *pos, int H, int Hk, trn_kv_pages_t pg,
                   float scale, const trn_bf16_t *qw, const trn_bf16_t *kw,
                   float eps, float theta, int ef)
{
    constexpr int S_GQ_THREADS = 32 * NW, S_GM_TP = 16 * NW;
    constexpr int LD = D + 8, KS = D / 16, NT = D / 8, TE = S_GM_TP * LD;
    static_assert(G <= 8, "query heads a KV head");
    extern __shared__ __align__(16) unsigned char s_dyn[];
    __nv_bfloat16 *tiles = reinterpret_cast<__nv_bfloat16 *>(s_dyn);
    __shared__ float sm_m[NW][G], sm_l[NW][G];
    trn_tr_scope tr(TRN_TR_ATTN, (unsigned) H, gridDim.z);
    if (!PREP) { /* after trn_k_qk_prep, whose keys the tiles may hold */
        trn_pdl_enter();
        tr.waited();
    }
    int t = blockIdx.x, hk = blockIdx.y, split = blockIdx.z;
    int nsplit = gridDim.z;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int g = lane >> 2, tq = lane & 3;
    int sl = slot[t];
    int n = sl < 0 ? 0 : pos[t] + 1;
    int units = (n + S_GQ_TP - 1) / S_GQ_TP;
    int per = (units + nsplit - 1) / nsplit;
    int j0 = split * per * S_GQ_TP;
    int j1 = min(n, j0 + per * S_GQ_TP);
    int nt = j1 > j0 ? (j1 - j0 + S_GM_TP - 1) / S_GM_TP : 0;
    size_t HkD = (size_t) Hk * D;
    size_t base = (size_t) hk * D;
    const uint64_t pol = ef ? trn_l2_evict_first() : 0;
    /* tile i's copies; rows past j1 are zero-filled (a zero probability
     * times a stale value could be NaN). A thread copies D / 16 chunks of
     * 16 bytes, each of another row: the rows' table look-ups first (all
     * in flight at once), then the copies. */
    auto issue = [&](int i) {
        if (i < nt) {
            constexpr int CPT = S_GM_TP * (D / 8) / S_GQ_THREADS;
            static_assert(CPT * S_GQ_THREADS == S_GM_TP * (D / 8), "copies");
            __nv_bfloat16 *sk = tiles + (size_t) (i % ST) * 2 * TE;
            int jt = j0 + i * S_GM_TP;
            uint32_t row[CPT];
#pragma unroll
            for (int k = 0; k < CPT; k++) {
                int p = (threadIdx.x + k * S_GQ_THREADS) / (D / 8);
                row[k] = jt + p < j1 ? s_crow32(pg, sl, jt + p) : 0u;
            }
#pragma unroll
            for (int k = 0; k < CPT; k++) {
                int c = threadIdx.x + k * S_GQ_THREADS;
                int p = c / (D / 8), e = (c % (D / 8)) * 8;
                bool ok = jt + p < j1;
                size_t off = base + e + (size_t) row[k] * HkD;
                if (pol) {
                    trn_cp16_hint(sk + p * LD + e, ck + off, ok, pol);
                    trn_cp16_hint(sk + TE + p * LD + e, cv + off, ok, pol);
                } else {
                    trn_cp16(sk + p * LD + e, ck + off, ok);
                    trn_cp16(sk + TE + p * LD + e, cv + off, ok);
                }
            }
        }
        trn_cp_commit();
    };
    /* With PREP the first tile's copies go out before the wait for the
     * q|k|v product: the slots, positions and block table were uploaded
     * before the step, and the rows it reads were written by earlier
     * steps (the new position's row, which this kernel writes, is patched
     * into its tile below). Measured on an H200: batch 8 over 2,500
     * positions 4.02-4.03 ms a step against 4.07. */
    for (int i = 0; i < ST - 1; i++)
        issue(i);
    if (PREP) {
        trn_pdl_enter();
        tr.waited();
    }
    /* the queries as A fragments (rows g < G; rows g + 8 are zero) */
    const trn_bf16_t *qr =
        q + (size_t) t * (size_t) stride + (size_t) hk * G * D;
    __shared__ __align__(16) trn_bf16_t sq[PREP ? G * D : 1];
    __shared__ __align__(16) trn_bf16_t snew[PREP ? 2 * D : 1];
    __shared__ float sbuf[PREP ? NW : 1][PREP ? D : 1];
    const int pnew = n - 1; /* the new token's position */
    const bool own = PREP && sl >= 0 && pnew >= j0 && pnew < j1;
    if (PREP && sl >= 0) {
        const trn_bf16_t *row = q + (size_t) t * (size_t) stride;
        size_t at = s_crow(pg, sl, pnew) * HkD + (size_t) hk * D;
        for (int h = warp; h <= G; h += NW) {
            if (h < G)
                s_prep_head(row + (size_t) (hk * G + h) * D, qw, sbuf[warp], D,
                            pnew, eps, theta, sq + h * D, NULL, lane);
            else
                s_prep_head(row + (size_t) (H + hk) * D, kw, sbuf[warp], D,
                            pnew, eps, theta, snew, own ? ck + at : NULL, lane);
        }
        const trn_bf16_t *vs = row + (size_t) (H + Hk + hk) * D;
        for (int d = threadIdx.x; d < D; d += S_GQ_THREADS) {
            snew[D + d] = vs[d];
            if (own)
                cv[at + d] = vs[d];
        }
        __syncthreads();
        qr = sq;
    }
    uint32_t qa[KS][2];
#pragma unroll
    for (int kk = 0; kk < KS; kk++) {
        const trn_bf16_t *qg = qr + (size_t) g * D + kk * 16 + 2 * tq;
        qa[kk][0] = g < G ? *reinterpret_cast<const uint32_t *>(qg) : 0u;
        qa[kk][1] = g < G ? *reinterpret_cast<const uint32_t *>(qg + 8) : 0u;
    }
    float oacc[NT][4];
#pragma unroll
    for (int d = 0; d < NT; d++)
        oacc[d][0] = oacc[d][1] = oacc[d][2] = oacc[d][3] = 0.0f;
    float m_r = -INFINITY, l_r = 0.0f;
    const float sl2 = scale * 1.4426950408889634f; /* log2 e */
    const int p0 = warp * 16;
    for (int i = 0; i < nt; i++) {
        trn_cp_wait<ST - 2>();
        __syncthreads(); /* tile i is in; tile i-1's reads are done */
        issue(i + ST - 1);
        const __nv_bfloat16 *K = tiles + (size_t) (i % ST) * 2 * TE;
        const __nv_bfloat16 *V = K + TE;
        if (own && pnew >= j0 + i * S_GM_TP && pnew < j0 + (i + 1) * S_GM_TP)
            s_gm_patch<D, NW>(tiles + (size_t) (i % ST) * 2 * TE, snew,
                              pnew - j0 - i * S_GM_TP);
        /* row g's scores: positions p0 + 8 h + 2 tq + e */
        s_gm_step<D>(oacc, m_r, l_r, qa, K, V, j0 + i * S_GM_TP + p0 + 2 * tq,
                     j1, sl2, p0, lane);
    }
    trn_cp_wait<0>();
    __syncthreads(); /* the tiles' memory is the warps' merge area now */
    float(*sm_o)[G * D] = reinterpret_cast<float(*)[G * D]>(s_dyn);
    if (g < G)
        s_gm_stash<D, G, NW>(sm_m, sm_l, sm_o, oacc, m_r, l_r, warp, g, tq);
    __syncthreads();
    s_gq_finish<D, G, NW>(o, part, sm_m, sm_l, sm_o, t, hk, split, nsplit, H,
                          Hk);
}

/* Merges the splits of (token, query head): one thread per dimension,
 * for up to MS splits. A thread's loads of every split's maximum, sum and
 * value go out at once (a loop over a run-time count would wait on each
 * in turn: on an H200, about 5 us a layer for 4 splits, most of it
 * latency); the sums then run in split order as before. */
template <int MS>
__global__ void
s_attn_merge(trn_bf16_t *o, const float *part, int H, int Hk, int D, int nsplit)
{
    trn_tr_scope tr(TRN_TR_MERGE, (unsigned) H, (unsigned) nsplit);
    trn_pdl_enter();
    tr.waited();
    int t = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
    int G = H / Hk, hk = h / G, g = h % G;
    const size_t rs = s_gq_rec(G, D);
    const float *rec0 =
        part + ((size_t) t * (size_t) Hk + (size_t) hk) * (size_t) nsplit * rs;
    float m[MS], l[MS], v[MS];
#pragma unroll
    for (int s = 0; s < MS; s++) {
        const float *rec = rec0 + (size_t) s * rs;
        bool in = s < nsplit;
        m[s] = in ? rec[g] : -INFINITY;
        l[s] = in ? rec[G + g] : 0.0f;
        v[s] = in ? rec[2 * G + (size_t) g * D + d] : 0.0f;
    }
    float M = -INFINITY;
#pragma unroll
    for (int s = 0; s < MS; s++)
        M = fmaxf(M, m[s]);
    float L = 0.0f, acc = 0.0f;
    if (M != -INFINITY)
#pragma unroll
        for (int s = 0; s < MS; s++) {
            if (m[s] == -INFINITY)
                continue;
            float f = exp2f(m[s] - M);
            L += l[s] * f;
            acc += v[s] * f;
        }
    trn_st(o + (size_t) t * (size_t) (H * D) + (size_t) h * D + d,
           L > 0.0f ? acc / L : 0.0f);
}

/* The merge's launch for nsplit (2 to S_GQ_SPLITS) splits. */
static lisa_rc_t
s_merge_go(trn_bf16_t *o, const float *part, int T, int H, int Hk, int D,
           int nsplit, cudaStream_t st)
{
    void (*k)(trn_bf16_t *, const float *, int, int, int, int) =
        nsplit <= 4    ? s_attn_merge<4>
        : nsplit <= 8  ? s_attn_merge<8>
        : nsplit <= 16 ? s_attn_merge<16>
                       : s_attn_merge<S_GQ_SPLITS>;
    TRN_CUDA_TRY(trn_launch_pdl(k, dim3((unsigned) T, (unsigned) H), dim3(D), 0,
                                st, o, part, H, Hk, D, nsplit));
    return LISA_OK;
}

extern "C" size_t
trn_k_attn_decode_scratch(int H, int Hk, int D)
{
    if (H <= 0 || Hk <= 0 || D <= 0)
        return 0;
    /* splits are used only while T*Hk is below two blocks per processor,
     * so T*Hk*nsplit stays under four per processor */
    return (size_t) 4 * (size_t) trn_sm_count() * (size_t) (H / Hk) *
           (size_t) (D + 2);
}

/* What the fused preparation needs (s_attn_gqa_mma's PREP). */
typedef struct {
    const trn_bf16_t *qw, *kw;
    float eps, theta;
} s_prep_t;

/* Whether the grouped kernel's cache copies are marked evict-first in L2
 * (on; LISA_CUDA_KV_EF=0 turns it off; read once). A step reads each
 * cached row once, and without the mark the stream pushes out what the
 * products after it read again: the tokens' rows and the weights the
 * products ask into L2 ahead (trn_linear_next). On an H100, batch-8 decode
 * steps over 2,500 positions: 4.620-4.626 ms against 4.728-4.730 (three
 * runs each, alternating); bringing the o product's weights into L2 from
 * the attention's blocks as well (8, 21 or 40 MiB) gained nothing more
 * (4.619-4.689 ms). */
static int
s_kv_ef(void)
{
    static int ef = -1;
    if (ef < 0)
        ef = trn_env_on("LISA_CUDA_KV_EF");
    return ef;
}

/* One launch of the grouped kernel with NW warps a block and ST tile
 * stages. */
template <int D, int G, int NW, int ST>
static lisa_rc_t
s_gqa_run(dim3 grid, trn_bf16_t *o, float *part, const trn_bf16_t *q,
          int stride, trn_bf16_t *ck, trn_bf16_t *cv, const int32_t *slot,
          const int32_t *pos, int H, int Hk, trn_kv_pages_t pg,
          const s_prep_t *prep, cudaStream_t st)
{
    /* the key/value tiles take more shared memory than a block gets
     * unasked */
    const int smem = s_gm_smem<D, NW, ST>();
    static int smem_set; /* per instantiation; the first call is never
                            inside a graph capture (decode records after a
                            direct run) */
    if (!smem_set) {
        if (cudaFuncSetAttribute(s_attn_gqa_mma<D, G, false, NW, ST>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 smem) != cudaSuccess ||
            cudaFuncSetAttribute(s_attn_gqa_mma<D, G, true, NW, ST>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 smem) != cudaSuccess)
            return LISA_ERR;
        smem_set = 1;
    }
    s_prep_t none = {NULL, NULL, 0.0f, 0.0f};
    const s_prep_t *pp = prep ? prep : &none;
    TRN_CUDA_TRY(trn_launch_pdl(prep ? s_attn_gqa_mma<D, G, true, NW, ST>
                                     : s_attn_gqa_mma<D, G, false, NW, ST>,
                                grid, dim3(32 * NW), (size_t) smem, st, o, part,
                                q, stride, ck, cv, slot, pos, H, Hk, pg,
                                1.0f / sqrtf((float) D), pp->qw, pp->kw,
                                pp->eps, pp->theta, s_kv_ef()));
    return LISA_OK;
}

/* The tile stages of the wider blocks for nsplit splits: three (two
 * tiles in flight while the warps work on a third; two such blocks, 104
 * KiB of tiles each at head_dim 128, still share a multiprocessor) unless
 * the splits are many (a block's positions then make a tile or two, and a
 * third stage only costs residency). LISA_CUDA_ATTN_STAGES=2 or 3 sets it
 * (read once). On an H200, decode steps over 2,500 positions: batch 8 (4
 * splits) 3.85 ms with three against 3.92 with two, batch 4 (8 splits)
 * 3.38 against 3.42, batch 1 (32 splits) 3.13 against 3.10-3.12. */
static int
s_gqa_stages(int nsplit)
{
    static int forced = -1;
    if (forced < 0) {
        const char *e = getenv("LISA_CUDA_ATTN_STAGES");
        int v = e && *e ? atoi(e) : 0;
        forced = v == 2 || v == 3 ? v : 0;
    }
    return forced ? forced : nsplit >= 16 ? 2 : 3;
}

/* Whether T tokens' blocks (one per token and KV head) are few, under
 * two per multiprocessor: then a token's positions split over several
 * blocks, when scratch allows, and the blocks are the wider kind. */
static bool
s_gqa_few(int T, int Hk)
{
    return (long) T * Hk < 2L * trn_sm_count();
}

template <int D, int G>
static lisa_rc_t
s_gqa_launch(trn_bf16_t *o, const trn_bf16_t *q, int stride, trn_bf16_t *ck,
             trn_bf16_t *cv, const int32_t *slot, const int32_t *pos, int T,
             int H, int Hk, trn_kv_pages_t pg, float *scratch,
             size_t scratch_floats, const s_prep_t *prep, cudaStream_t st)
{
    size_t rec = (size_t) G * (size_t) (D + 2);
    long blocks = (long) T * Hk, want = 2L * trn_sm_count();
    bool few = s_gqa_few(T, Hk);
    int nsplit = 1;
    if (scratch && few) {
        /* at most two blocks a processor (every block resident in one
         * round): batch 8 of Qwen3-4B takes 4 splits, 256 blocks (5
         * splits, 320 blocks, were 1% slower on an H200) */
        nsplit = blocks * 2 <= want ? (int) (want / blocks)
                                    : (int) ((want + blocks - 1) / blocks);
        /* the longest a sequence can be: the table's reach */
        long reach = (long) pg.max_blocks << pg.bshift;
        int tiles = (int) ((reach + S_GQ_TP - 1) / S_GQ_TP);
        nsplit = nsplit > tiles ? tiles : nsplit;
        nsplit = nsplit > S_GQ_SPLITS ? S_GQ_SPLITS : nsplit;
        while (nsplit > 1 &&
               (size_t) blocks * (size_t) nsplit * rec > scratch_floats)
            nsplit--;
    }
    dim3 grid((unsigned) T, (unsigned) Hk, (unsigned) nsplit);
    /* blocks of 4 warps (64 positions a tile) where the blocks are few;
     * of 2 (32 positions) where they fill the device: two or three of
     * the wider ones (three stages or two) fit a multiprocessor's shared
     * memory, so a batch of 64 tokens' 512 blocks would take two rounds;
     * six of the narrow ones fit */
    float *part = nsplit > 1 ? scratch : NULL;
    lisa_rc_t rc = !few
                       ? s_gqa_run<D, G, 2, 2>(grid, o, part, q, stride, ck, cv,
                                               slot, pos, H, Hk, pg, prep, st)
                   : s_gqa_stages(nsplit) == 3
                       ? s_gqa_run<D, G, 4, 3>(grid, o, part, q, stride, ck, cv,
                                               slot, pos, H, Hk, pg, prep, st)
                       : s_gqa_run<D, G, 4, 2>(grid, o, part, q, stride, ck, cv,
                                               slot, pos, H, Hk, pg, prep, st);
    if (rc != LISA_OK)
        return rc;
    return nsplit > 1 ? s_merge_go(o, scratch, T, H, Hk, D, nsplit, st)
                      : LISA_OK;
}

typedef lisa_rc_t (*s_gqa_fn)(trn_bf16_t *, const trn_bf16_t *, int,
                              trn_bf16_t *, trn_bf16_t *, const int32_t *,
                              const int32_t *, int, int, int, trn_kv_pages_t,
                              float *, size_t, const s_prep_t *, cudaStream_t);

/* The grouped kernel's launcher for head_dim D and G query heads per KV
 * head (1, 2, 4 or 8), or NULL for another G. */
template <int D>
static s_gqa_fn
s_gqa_pick(int G)
{
    switch (G) {
    case 1:
        return s_gqa_launch<D, 1>;
    case 2:
        return s_gqa_launch<D, 2>;
    case 4:
        return s_gqa_launch<D, 4>;
    case 8:
        return s_gqa_launch<D, 8>;
    default:
        return NULL;
    }
}

/* The grouped kernel's launcher for this shape (head_dim 32, 64 or 128,
 * 16-byte query loads), or NULL: the simple kernel's shapes. */
static s_gqa_fn
s_gqa_for(int stride, int H, int Hk, int D)
{
    if (stride % 8 != 0)
        return NULL;
    int G = H / Hk;
    return D == 128  ? s_gqa_pick<128>(G)
           : D == 64 ? s_gqa_pick<64>(G)
           : D == 32 ? s_gqa_pick<32>(G)
                     : NULL;
}

extern "C" lisa_rc_t
trn_k_attn_decode(trn_bf16_t *o, const trn_bf16_t *q, int stride,
                  const trn_bf16_t *cache_k, const trn_bf16_t *cache_v,
                  const int32_t *slot, const int32_t *pos, int T, int H, int Hk,
                  int D, trn_kv_pages_t pg, float *scratch,
                  size_t scratch_floats, trn_cuda_stream_t *s)
{
    TRN_REQUIRE(o && q && cache_k && cache_v && slot && pos && T > 0);
    TRN_REQUIRE(H > 0 && Hk > 0 && H % Hk == 0 && D > 0 && D <= 32 * S_MAXE);
    TRN_REQUIRE(s_pages_ok(pg));
    cudaStream_t st = trn_stream(s);
    s_gqa_fn f = s_gqa_for(stride, H, Hk, D);
    if (f)
        return f(o, q, stride, const_cast<trn_bf16_t *>(cache_k),
                 const_cast<trn_bf16_t *>(cache_v), slot, pos, T, H, Hk, pg,
                 scratch, scratch_floats, NULL, st);
    dim3 grid((unsigned) T, (unsigned) H);
    s_attn_decode<<<grid, 32 * S_WARPS, 0, st>>>(o, q, stride, cache_k, cache_v,
                                                 slot, pos, H, Hk, D, pg,
                                                 1.0f / sqrtf((float) D));
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}

extern "C" lisa_rc_t
trn_k_attn_decode_prep(trn_bf16_t *o, const trn_bf16_t *qkv, int stride,
                       const trn_bf16_t *q_norm, const trn_bf16_t *k_norm,
                       trn_bf16_t *cache_k, trn_bf16_t *cache_v,
                       const int32_t *slot, const int32_t *pos, int T, int H,
                       int Hk, int D, trn_kv_pages_t pg, float eps, float theta,
                       float *scratch, size_t scratch_floats,
                       trn_cuda_stream_t *s)
{
    TRN_REQUIRE(o && qkv && !q_norm == !k_norm && cache_k && cache_v && slot &&
                pos && T > 0);
    TRN_REQUIRE(H > 0 && Hk > 0 && H % Hk == 0 && D > 0 && D % 2 == 0 &&
                D <= S_PREP_MAXD && stride >= (H + 2 * Hk) * D &&
                s_pages_ok(pg));
    s_gqa_fn f = s_gqa_few(T, Hk) ? s_gqa_for(stride, H, Hk, D) : NULL;
    if (!f) { /* the two kernels (q|k|v written back) */
        lisa_rc_t rc = trn_k_qk_prep(const_cast<trn_bf16_t *>(qkv), stride,
                                     q_norm, k_norm, cache_k, cache_v, slot,
                                     pos, T, H, Hk, D, pg, eps, theta, s);
        if (rc != LISA_OK)
            return rc;
        return trn_k_attn_decode(o, qkv, stride, cache_k, cache_v, slot, pos, T,
                                 H, Hk, D, pg, scratch, scratch_floats, s);
    }
    s_prep_t prep = {q_norm, k_norm, eps, theta};
    return f(o, qkv, stride, cache_k, cache_v, slot, pos, T, H, Hk, pg, scratch,
             scratch_floats, &prep, trn_stream(s));
}

/* ---- sampling ---------------------------------------------------------- */

#define S_ST   1024
#define S_CAND 6144 /* top-p / top-k candidates kept in shared memory */

__device__ __forceinline__ uint64_t
s_mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* One step of a warp's inverse-CDF walk over 32 tokens from `base`: lane
 * `lane` holds its token's probability p (0 when not `live`); *cum is the
 * mass before base. Sets *chosen to the first token where the running
 * mass passes u, else *last to the last live token, and adds the 32's
 * mass to *cum. */
__device__ __forceinline__ void
s_walk32(float p, bool live, float u, int base, int lane, float *cum,
         int *chosen, int *last)
{
    float sc = p;
    for (int o = 1; o < 32; o <<= 1) {
        float y = __shfl_up_sync(0xffffffffu, sc, o);
        if (lane >= o)
            sc += y;
    }
    unsigned hit = __ballot_sync(0xffffffffu, live && *cum + sc > u);
    unsigned km = __ballot_sync(0xffffffffu, live);
    if (hit)
        *chosen = base + __ffs((int) hit) - 1;
    else if (km)
        *last = base + 31 - __clz((int) km);
    *cum += __shfl_sync(0xffffffffu, sc, 31);
}

/* Sum of p_j over j with p_j >= tau (and, in count, how many). */
__device__ void
s_mass(const float *z, int V, float mx, float inv_t, float inv_z, float tau,
       float *shm, float *mass, float *count)
{
    float s = 0.0f, c = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float p = expf(z[j] * inv_t - mx) * inv_z;
        if (p >= tau) {
            s += p;
            c += 1.0f;
        }
    }
    *mass = trn_block_sum(s, shm);
    *count = trn_block_sum(c, shm);
}

/* Whether a row's draw needs no threshold: greedy, or temperature alone
 * (top_p outside (0, 1) and top_k of at most 1). */
__device__ __forceinline__ int
s_plain(const float *temp, const float *top_p, const int32_t *top_k, int row)
{
    float P = top_p[row];
    int K = top_k[row];
    int greedy = !(temp[row] > 0.0f) || K == 1;
    return greedy || !((P > 0.0f && P < 1.0f) || K > 1);
}

/* Plain draws spread each row over many blocks. Pass 1, one block per
 * chunk of S_CH logits: the chunk's largest scaled logit (and its lowest
 * index) and the sum of exp(scaled logit - that largest). */
#define S_CH  2048
#define S_CHT 256

__global__ void
__launch_bounds__(S_CHT)
    s_sample_chunks(float *cm, float *cs, int32_t *ca, const float *logits,
                    const float *temp, const float *top_p, const int32_t *top_k,
                    int V, int nch)
{
    __shared__ float shm[32];
    __shared__ int amin;
    int row = blockIdx.y, c = blockIdx.x;
    if (!s_plain(temp, top_p, top_k, row))
        return;
    float T = temp[row];
    int greedy = !(T > 0.0f) || top_k[row] == 1;
    float inv_t = greedy ? 1.0f : 1.0f / T;
    const float *z = logits + (size_t) row * (size_t) V;
    int j0 = c * S_CH, j1 = min(V, j0 + S_CH);
    float mx = -INFINITY;
    int arg = V;
    for (int j = j0 + (int) threadIdx.x; j < j1; j += S_CHT) {
        float v = z[j] * inv_t;
        if (v > mx) {
            mx = v;
            arg = j;
        }
    }
    if (threadIdx.x == 0)
        amin = V;
    float bmx = trn_block_max(mx, shm);
    if (mx == bmx)
        atomicMin(&amin, arg);
    float se = 0.0f;
    for (int j = j0 + (int) threadIdx.x; j < j1; j += S_CHT)
        se += expf(z[j] * inv_t - bmx);
    se = trn_block_sum(se, shm); /* its barriers also publish amin */
    if (threadIdx.x == 0) {
        size_t k = (size_t) row * (size_t) nch + (size_t) c;
        cm[k] = bmx;
        cs[k] = se;
        ca[k] = amin < V ? amin : j0;
    }
}

/* Pass 2, one warp per row: the row's maximum and log-sum-exp from its
 * chunks; greedy takes the first chunk's index of the maximum; a draw
 * picks the chunk by the chunks' masses, then walks it in vocabulary
 * order as s_sample does. */
__global__ void
s_sample_plain(int32_t *tok, float *lp, const float *cm, const float *cs,
               const int32_t *ca, const float *logits, const float *temp,
               const float *top_p, const int32_t *top_k, const uint64_t *seed,
               int V, int nch)
{
    int row = blockIdx.x, lane = threadIdx.x;
    if (!s_plain(temp, top_p, top_k, row))
        return;
    float T = temp[row];
    int greedy = !(T > 0.0f) || top_k[row] == 1;
    float inv_t = greedy ? 1.0f : 1.0f / T;
    const float *z = logits + (size_t) row * (size_t) V;
    const float *m = cm + (size_t) row * (size_t) nch;
    const float *sm = cs + (size_t) row * (size_t) nch;
    const int32_t *am = ca + (size_t) row * (size_t) nch;
    float bmx = -INFINITY;
    for (int c = lane; c < nch; c += 32)
        bmx = fmaxf(bmx, m[c]);
    bmx = trn_warp_max(bmx);
    float se = 0.0f;
    int first = nch;
    for (int c = lane; c < nch; c += 32) {
        se += sm[c] * expf(m[c] - bmx);
        if (m[c] == bmx && c < first)
            first = c;
    }
    se = trn_warp_sum(se);
    for (int o = 16; o > 0; o >>= 1)
        first = min(first, __shfl_xor_sync(0xffffffffu, first, o));
    float lse = bmx + logf(se);
    if (greedy) {
        if (lane == 0) {
            int pick = am[first < nch ? first : 0];
            tok[row] = pick;
            lp[row] = z[pick] - lse;
        }
        return;
    }
    float inv_z = 1.0f / se;
    /* the chunk holding the draw: a scan over the chunks' masses */
    uint64_t r = s_mix64(seed[row]);
    float frac = (float) (r >> 40) / 16777216.0f;
    float carry = 0.0f, total = 0.0f;
    for (int c = lane; c < nch; c += 32)
        total += sm[c] * expf(m[c] - bmx) * inv_z;
    total = trn_warp_sum(total);
    float u = frac * total;
    int pickc = -1, lastnz = -1;
    float cum0 = 0.0f;
    for (int base = 0; base < nch && pickc < 0; base += 32) {
        int c = base + lane;
        float mass = c < nch ? sm[c] * expf(m[c] - bmx) * inv_z : 0.0f;
        float incl = mass;
        for (int o = 1; o < 32; o <<= 1) {
            float y = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o)
                incl += y;
        }
        float excl = incl - mass;
        unsigned in = __ballot_sync(0xffffffffu, c < nch && mass > 0.0f &&
                                                     carry + excl <= u &&
                                                     u < carry + incl);
        unsigned nz = __ballot_sync(0xffffffffu, c < nch && mass > 0.0f);
        if (in) {
            int w = __ffs((int) in) - 1;
            pickc = base + w;
            cum0 = carry + __shfl_sync(0xffffffffu, excl, w);
        } else if (nz) {
            int w = 31 - __clz((int) nz);
            lastnz = base + w;
            cum0 = carry + __shfl_sync(0xffffffffu, excl, w);
        }
        carry += __shfl_sync(0xffffffffu, incl, 31);
    }
    if (pickc < 0) /* u rounded up to the total: the last chunk with mass */
        pickc = lastnz >= 0 ? lastnz : 0;
    float cum = cum0;
    int chosen = -1, last = -1;
    int a0 = pickc * S_CH, a1 = min(V, a0 + S_CH);
    for (int base = a0; base < a1 && chosen < 0; base += 32) {
        int j = base + lane;
        float p = j < a1 ? expf(z[j] * inv_t - bmx) * inv_z : 0.0f;
        s_walk32(p, j < a1, u, base, lane, &cum, &chosen, &last);
    }
    if (lane == 0) {
        if (chosen < 0) /* rounding at the very end */
            chosen = last >= 0 ? last : am[first < nch ? first : 0];
        tok[row] = chosen;
        lp[row] = z[chosen] * inv_t - lse;
    }
}

/* The sampling threshold of a row (every thread of the block calls it):
 * the largest tau keeping top_k tokens and top_p mass. Bisection over the
 * bit patterns of tau (probabilities are non-negative floats, ordered as
 * their bits) ends on an exact probability value once no token lies
 * between the bounds; once few tokens do, they are copied to shared
 * memory (cands, *ncand) and the remaining steps run there, with the mass
 * above the upper bound carried along. 0 without top-p and top-k. */
__device__ float
s_threshold(const float *z, int V, float bmx, float inv_t, float inv_z,
            float pmax, float P, int K, float *shm, float *cands, int *ncand)
{
    float tau = 0.0f;
    if ((P > 0.0f && P < 1.0f) || K > 1) {
        unsigned lo = 0u, hi = __float_as_uint(pmax) + 1u;
        float cnt_lo = (float) V, cnt_hi = 0.0f, mass_hi = 0.0f;
        int cand = 0; /* candidates in shared memory */
        while (hi - lo > 1u && cnt_lo > cnt_hi) {
            if (!cand && cnt_lo - cnt_hi <= (float) S_CAND) {
                if (threadIdx.x == 0)
                    *ncand = 0;
                __syncthreads();
                float flo = __uint_as_float(lo), fhi = __uint_as_float(hi);
                for (int j = threadIdx.x; j < V; j += blockDim.x) {
                    float p = expf(z[j] * inv_t - bmx) * inv_z;
                    if (p >= flo && p < fhi) {
                        int at = atomicAdd(ncand, 1);
                        if (at < S_CAND)
                            cands[at] = p;
                    }
                }
                __syncthreads();
                cand = 1;
            }
            unsigned mid = lo + (hi - lo) / 2u;
            float fm = __uint_as_float(mid), mass, count;
            if (cand) {
                float sm = 0.0f, c = 0.0f;
                for (int i = threadIdx.x; i < min(*ncand, S_CAND);
                     i += blockDim.x)
                    if (cands[i] >= fm) {
                        sm += cands[i];
                        c += 1.0f;
                    }
                mass = mass_hi + trn_block_sum(sm, shm);
                count = cnt_hi + trn_block_sum(c, shm);
            } else {
                s_mass(z, V, bmx, inv_t, inv_z, fm, shm, &mass, &count);
            }
            int ok = 1;
            if (P > 0.0f && P < 1.0f && mass < P)
                ok = 0;
            if (K > 1 && count < (float) K)
                ok = 0;
            if (ok) { /* still keeps enough: raise the bar */
                lo = mid;
                cnt_lo = count;
            } else {
                hi = mid;
                cnt_hi = count;
                mass_hi = mass;
            }
        }
        tau = __uint_as_float(lo);
    }
    return tau;
}

__global__ void
__launch_bounds__(S_ST)
    s_sample(int32_t *tok, float *lp, const float *logits, const float *temp,
             const float *top_p, const int32_t *top_k, const uint64_t *seed,
             int V, int split)
{
    __shared__ float shm[32];
    __shared__ float part[32];
    __shared__ float cands[S_CAND];
    __shared__ int pick, ncand;
    int row = blockIdx.x;
    if (split && s_plain(temp, top_p, top_k, row))
        return; /* s_sample_chunks + s_sample_plain draw it */
    const float *z = logits + (size_t) row * (size_t) V;
    float T = temp[row];
    int greedy = !(T > 0.0f) || top_k[row] == 1;
    float inv_t = greedy ? 1.0f : 1.0f / T;
    /* max (and its index, for greedy) */
    float mx = -INFINITY;
    int arg = 0;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float v = z[j] * inv_t;
        if (v > mx) {
            mx = v;
            arg = j;
        }
    }
    float bmx = trn_block_max(mx, shm);
    float se = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        se += expf(z[j] * inv_t - bmx);
    se = trn_block_sum(se, shm);
    float lse = bmx + logf(se);
    if (greedy) {
        if (threadIdx.x == 0)
            pick = V;
        __syncthreads();
        if (mx == bmx)
            atomicMin(&pick, arg);
        __syncthreads();
        if (threadIdx.x == 0) {
            tok[row] = pick;
            lp[row] = z[pick] - lse;
        }
        return;
    }
    float inv_z = 1.0f / se;
    float tau = s_threshold(z, V, bmx, inv_t, inv_z, expf(bmx - bmx) * inv_z,
                            top_p[row], top_k[row], shm, cands, &ncand);
    /* inverse CDF over kept tokens, in vocabulary order: each warp sums a
     * contiguous range (lanes reading side by side), a scan over the
     * warps' sums finds the range holding the draw, and warp 0 walks that
     * range 32 tokens at a time */
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int nw = S_ST / 32, wc = (V + nw - 1) / nw;
    int w0 = warp * wc, w1 = min(V, w0 + wc);
    float s = 0.0f;
    for (int j = w0 + lane; j < w1; j += 32) {
        float p = expf(z[j] * inv_t - bmx) * inv_z;
        if (p >= tau)
            s += p;
    }
    s = trn_warp_sum(s);
    if (lane == 0)
        part[warp] = s;
    __syncthreads();
    if (warp != 0)
        return;
    float incl = part[lane]; /* nw == 32 */
    for (int o = 1; o < 32; o <<= 1) {
        float y = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o)
            incl += y;
    }
    float excl = __shfl_up_sync(0xffffffffu, incl, 1);
    if (lane == 0)
        excl = 0.0f;
    float total = __shfl_sync(0xffffffffu, incl, 31);
    uint64_t r = s_mix64(seed[row]);
    float u = (float) (r >> 40) / 16777216.0f * total;
    unsigned in = __ballot_sync(0xffffffffu, excl <= u && u < incl);
    unsigned nz = __ballot_sync(0xffffffffu, incl > excl);
    /* u rounded up to the total: the last range with any mass */
    int c = in ? __ffs((int) in) - 1 : nz ? 31 - __clz((int) nz) : 31;
    float cum = __shfl_sync(0xffffffffu, excl, c);
    int chosen = -1, last = -1;
    int a0 = c * wc, a1 = min(V, a0 + wc);
    for (int base = a0; base < a1 && chosen < 0; base += 32) {
        int j = base + lane;
        float p = 0.0f;
        bool kept = false;
        if (j < a1) {
            p = expf(z[j] * inv_t - bmx) * inv_z;
            kept = p >= tau;
            p = kept ? p : 0.0f;
        }
        s_walk32(p, kept, u, base, lane, &cum, &chosen, &last);
    }
    if (lane == 0) {
        if (chosen < 0) /* rounding at the very end */
            chosen = last >= 0 ? last : arg;
        tok[row] = chosen;
        lp[row] = z[chosen] * inv_t - lse;
    }
}

extern "C" size_t
trn_k_sample_scratch(int n, int V)
{
    if (n <= 0 || V <= 0)
        return 0;
    return (size_t) 3 * (size_t) n * (size_t) ((V + S_CH - 1) / S_CH);
}

extern "C" lisa_rc_t
trn_k_sample(int32_t *tok, float *lp, const float *logits,
             const float *temperature, const float *top_p, const int32_t *top_k,
             const uint64_t *seed, int n, int V, float *scratch,
             size_t scratch_floats, trn_cuda_stream_t *s)
{
    TRN_REQUIRE(tok && lp && logits && temperature && top_p && top_k && seed);
    TRN_REQUIRE(n > 0 && V > 0);
    cudaStream_t st = trn_stream(s);
    int nch = (V + S_CH - 1) / S_CH;
    int split = scratch && scratch_floats >= trn_k_sample_scratch(n, V);
    if (split) {
        size_t k = (size_t) n * (size_t) nch;
        float *cm = scratch, *cs = scratch + k;
        int32_t *ca = (int32_t *) (void *) (scratch + 2 * k);
        s_sample_chunks<<<dim3((unsigned) nch, (unsigned) n), S_CHT, 0, st>>>(
            cm, cs, ca, logits, temperature, top_p, top_k, V, nch);
        TRN_LAUNCH_CHECK();
        s_sample_plain<<<n, 32, 0, st>>>(tok, lp, cm, cs, ca, logits,
                                         temperature, top_p, top_k, seed, V,
                                         nch);
        TRN_LAUNCH_CHECK();
    }
    s_sample<<<n, S_ST, 0, st>>>(tok, lp, logits, temperature, top_p, top_k,
                                 seed, V, split);
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}

TRN_TRACE_TU(decode)
