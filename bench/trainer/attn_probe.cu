/*
 * trn_attn_probe: where a decode step's attention loses to the device's
 * read rate. At a few tokens over long contexts each layer's attention
 * reads its sequences' cached keys and values once (8 sequences x 2,500
 * positions of the Qwen3-4B shape: 82 MB a layer), so its floor is the
 * read rate; the decode kernel runs well under it. This program times, on
 * one GPU, the same bytes (36 layers' caches, distinct buffers so that L2
 * holds none of them) read in ways that add one difference at a time:
 *
 *   read          one kernel summing all of them: the ceiling
 *   layers-read   `read` as one kernel a layer
 *   copy          the decode kernel's grid (a block of 4 warps per token,
 *                 KV head and split, 4 splits at 8 tokens) and its copies:
 *                 tiles of 64 positions' keys and values through the block
 *                 table by 16-byte cp.async, 3 stages, no arithmetic
 *   copy-bulk     the same tiles by bulk copies (one 256-byte copy a
 *                 position's row of keys or values, on an mbarrier)
 *   copy-2        `copy` with 2 stages
 *   decode        the decode kernel itself (trn_k_attn_decode, with its
 *                 split merge)
 *   decode-prep   the kernel the step runs (trn_k_attn_decode_prep: the
 *                 new token's norms, rotation and cache write inside)
 *
 * Each is a CUDA graph replayed (the median of 20 replays), so launch
 * costs are the step's. Usage: trn_attn_probe [TOKENS] [POSITIONS]
 * [LAYERS]
 */
#include "probe_common.cuh"
#include "trn_cuda.h"

#define A_D   128 /* head_dim */
#define A_HK  8   /* KV heads */
#define A_G   4   /* query heads a KV head */
#define A_TP  64  /* positions a tile */
#define A_LD  (A_D + 8)
#define A_TE  (A_TP * A_LD) /* a tile's keys (or values), in values */
#define A_NTH 128
#define A_BS  4 /* log2 of the cache's block size (16 positions) */

/* Cache row of position p of the sequence in table row sl. */
__device__ __forceinline__ uint32_t
a_row(const int32_t *table, int max_blocks, int sl, int p)
{
    int b =
        __ldg(table + (size_t) sl * (size_t) max_blocks + (size_t) (p >> A_BS));
    return ((uint32_t) b << A_BS) + (uint32_t) (p & ((1 << A_BS) - 1));
}

/* The decode kernel's split of a token's n positions: this block's
 * j0 .. j1 - 1, in 32-position units. */
__device__ __forceinline__ void
a_split(int n, int &j0, int &j1)
{
    int units = (n + 31) / 32, nsplit = (int) gridDim.z;
    int per = (units + nsplit - 1) / nsplit;
    j0 = (int) blockIdx.z * per * 32;
    j1 = min(n, j0 + per * 32);
}

/* The decode kernel's copies alone: ST stages of A_TP positions' keys and
 * values, by 16-byte cp.async (each thread its rows' table entries first)
 * or, BULK, by one bulk copy a row and kind on a stage barrier. */
template <int ST, bool BULK>
__global__ void
__launch_bounds__(A_NTH)
    a_copy(const trn_bf16_t *ck, const trn_bf16_t *cv, const int32_t *table,
           int max_blocks, int n, unsigned *sink)
{
    extern __shared__ __align__(128) unsigned char sm[];
    __shared__ __align__(8) uint64_t bar_mem[ST];
    __nv_bfloat16 *tiles = reinterpret_cast<__nv_bfloat16 *>(sm);
    int t = blockIdx.x, hk = blockIdx.y, j0, j1;
    a_split(n, j0, j1);
    int nt = j1 > j0 ? (j1 - j0 + A_TP - 1) / A_TP : 0;
    const size_t HkD = (size_t) A_HK * A_D, base = (size_t) hk * A_D;
    uint32_t bars = (uint32_t) __cvta_generic_to_shared(bar_mem);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    auto issue = [&](int i) {
        if (i >= nt) {
            if (!BULK)
                trn_cp_commit();
            return;
        }
        __nv_bfloat16 *sk = tiles + (size_t) (i % ST) * 2 * A_TE;
        int jt = j0 + i * A_TP;
        if (BULK) {
            if (warp != 0)
                return;
            int rows = min(A_TP, j1 - jt);
            uint32_t bar = bars + 8u * (uint32_t) (i % ST);
            if (lane == 0)
                trn_mbar_arrive_tx(bar, (unsigned) rows * 2u * A_D * 2u);
            __syncwarp();
            for (int p = lane; p < rows; p += 32) {
                size_t off =
                    base + (size_t) a_row(table, max_blocks, t, jt + p) * HkD;
                uint32_t dk =
                    (uint32_t) __cvta_generic_to_shared(sk + p * A_LD);
                trn_bulk_g2s(dk, ck + off, A_D * 2u, bar);
                trn_bulk_g2s(dk + A_TE * 2u, cv + off, A_D * 2u, bar);
            }
            return;
        }
        constexpr int CPT = A_TP * (A_D / 8) / A_NTH;
        uint32_t row[CPT];
#pragma unroll
        for (int k = 0; k < CPT; k++) {
            int p = (threadIdx.x + k * A_NTH) / (A_D / 8);
            row[k] = jt + p < j1 ? a_row(table, max_blocks, t, jt + p) : 0u;
        }
#pragma unroll
        for (int k = 0; k < CPT; k++) {
            int c = threadIdx.x + k * A_NTH;
            int p = c / (A_D / 8), e = (c % (A_D / 8)) * 8;
            bool ok = jt + p < j1;
            size_t off = base + e + (size_t) row[k] * HkD;
            trn_cp16(sk + p * A_LD + e, ck + off, ok);
            trn_cp16(sk + A_TE + p * A_LD + e, cv + off, ok);
        }
        trn_cp_commit();
    };
    if (BULK && threadIdx.x == 0) {
        for (int s = 0; s < ST; s++)
            trn_mbar_init(bars + 8u * (uint32_t) s, 1);
        trn_mbar_init_fence();
    }
    __syncthreads();
    for (int i = 0; i < ST - 1; i++)
        issue(i);
    unsigned acc = 0;
    for (int i = 0; i < nt; i++) {
        if (BULK)
            trn_mbar_wait(bars + 8u * (uint32_t) (i % ST),
                          (uint32_t) (i / ST) & 1u);
        else
            trn_cp_wait<ST - 2>();
        __syncthreads(); /* tile i is in; tile i - 1's reads are done */
        issue(i + ST - 1);
        const unsigned char *tb =
            reinterpret_cast<const unsigned char *>(tiles) +
            (size_t) (i % ST) * 2 * A_TE * 2;
        acc ^= *reinterpret_cast<const unsigned *>(tb + threadIdx.x * 64);
    }
    if (!BULK)
        trn_cp_wait<0>();
    if (acc == 0x9e3779b9u)
        *sink = acc;
}

template <int ST, bool BULK>
static void
a_copy_go(const trn_bf16_t *ck, const trn_bf16_t *cv, const int32_t *table,
          int max_blocks, int T, int n, int nsplit, unsigned *sink,
          cudaStream_t st)
{
    const int smem = ST * 2 * A_TE * 2;
    static bool set;
    if (!set) {
        CK(cudaFuncSetAttribute(a_copy<ST, BULK>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                smem));
        set = true;
    }
    a_copy<ST, BULK><<<dim3(T, A_HK, nsplit), A_NTH, smem, st>>>(
        ck, cv, table, max_blocks, n, sink);
    CK(cudaGetLastError());
}

int
main(int argc, char **argv)
{
    int T = argc > 1 ? atoi(argv[1]) : 8, n = argc > 2 ? atoi(argv[2]) : 2500;
    int L = argc > 3 ? atoi(argv[3]) : 36;
    if (T < 1 || T > 64 || n < 1 || L < 1) {
        fprintf(stderr, "usage: trn_attn_probe [TOKENS 1-64] [POSITIONS] "
                        "[LAYERS]\n");
        return 2;
    }
    const int H = A_HK * A_G, S = (H + 2 * A_HK) * A_D;
    int mb = (n + (1 << A_BS) - 1) >> A_BS; /* blocks a sequence */
    size_t rows = (size_t) T * mb << A_BS, per = rows * A_HK * A_D;
    /* a layer's keys then its values, layer after layer */
    trn_bf16_t *kv;
    CK(cudaMalloc(&kv, per * 2 * 2 * (size_t) L));
    CK(cudaMemset(kv, 0, per * 2 * 2 * (size_t) L));
    /* every sequence's blocks in order, the sequences one after another */
    std::vector<int32_t> tab((size_t) T * mb);
    for (size_t i = 0; i < tab.size(); i++)
        tab[i] = (int32_t) i;
    int32_t *dtab, *dsl, *dps;
    CK(cudaMalloc(&dtab, tab.size() * 4));
    CK(cudaMemcpy(dtab, tab.data(), tab.size() * 4, cudaMemcpyHostToDevice));
    std::vector<int32_t> sl(T), ps(T, n - 1);
    for (int t = 0; t < T; t++)
        sl[t] = t;
    CK(cudaMalloc(&dsl, (size_t) T * 4));
    CK(cudaMalloc(&dps, (size_t) T * 4));
    CK(cudaMemcpy(dsl, sl.data(), (size_t) T * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dps, ps.data(), (size_t) T * 4, cudaMemcpyHostToDevice));
    trn_bf16_t *q, *o, *w;
    CK(cudaMalloc(&q, (size_t) T * S * 2));
    CK(cudaMalloc(&o, (size_t) T * H * A_D * 2));
    CK(cudaMalloc(&w, (size_t) A_D * 2));
    CK(cudaMemset(q, 0, (size_t) T * S * 2));
    CK(cudaMemset(w, 0, (size_t) A_D * 2));
    size_t ns = trn_k_attn_decode_scratch(H, A_HK, A_D);
    float *scr;
    CK(cudaMalloc(&scr, ns * 4));
    unsigned *sink;
    CK(cudaMalloc(&sink, 4));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    trn_cuda_stream_t *ts = (trn_cuda_stream_t *) st;
    trn_kv_pages_t pg = {dtab, mb, A_BS};
    int sms = trn_sm_count();
    /* the decode kernel's splits: as many as keep two blocks a processor */
    long blocks = (long) T * A_HK, want = 2L * sms;
    int nsplit = blocks * 2 <= want ? (int) (want / blocks)
                                    : (int) ((want + blocks - 1) / blocks);
    nsplit = nsplit < 1 ? 1 : nsplit > 32 ? 32 : nsplit;
    /* the bytes the step reads: each sequence's n positions, keys and
     * values, every KV head */
    double gb = 2.0 * T * n * A_HK * A_D * 2 * L / 1e9;
    printf("attention probe: %d layers, %d tokens over %d positions, %.2f GB "
           "of cache read, %d splits, %d processors\n",
           L, T, n, gb, nsplit, sms);
    auto K = [&](int l) { return kv + (size_t) l * per * 2; };
    auto V = [&](int l) { return kv + (size_t) l * per * 2 + per; };
    int ok = 1;
    /* the real kernels once outside a capture (their first call sets
     * attributes) */
    ok &= trn_k_attn_decode(o, q, S, K(0), V(0), dsl, dps, T, H, A_HK, A_D, pg,
                            scr, ns, ts) == LISA_OK;
    ok &=
        trn_k_attn_decode_prep(o, q, S, w, w, K(0), V(0), dsl, dps, T, H, A_HK,
                               A_D, pg, 1e-6f, 1e6f, scr, ns, ts) == LISA_OK;
    CK(cudaStreamSynchronize(st));
    struct {
        const char *name;
        float ms;
    } r[8];
    int nr = 0;
    auto layers = [&](const char *name, auto go) {
        r[nr].name = name;
        r[nr++].ms = p_time(st, [&] {
            for (int l = 0; l < L; l++)
                go(l);
        });
    };
    /* whole caches (every block of every sequence, a little past n) */
    size_t all16 = per * 2 * (size_t) L / 8;
    r[nr].name = "read";
    r[nr++].ms = p_time(st, [&] {
        p_read<<<sms * 8, 256, 0, st>>>((const uint4 *) kv, all16, sink);
    });
    layers("layers-read", [&](int l) {
        p_read<<<sms * 8, 256, 0, st>>>((const uint4 *) K(l), per * 2 / 8,
                                        sink);
    });
    layers("copy", [&](int l) {
        a_copy_go<3, false>(K(l), V(l), dtab, mb, T, n, nsplit, sink, st);
    });
    layers("copy-bulk", [&](int l) {
        a_copy_go<3, true>(K(l), V(l), dtab, mb, T, n, nsplit, sink, st);
    });
    layers("copy-2", [&](int l) {
        a_copy_go<2, false>(K(l), V(l), dtab, mb, T, n, nsplit, sink, st);
    });
    layers("decode", [&](int l) {
        ok &= trn_k_attn_decode(o, q, S, K(l), V(l), dsl, dps, T, H, A_HK, A_D,
                                pg, scr, ns, ts) == LISA_OK;
    });
    layers("decode-prep", [&](int l) {
        ok &= trn_k_attn_decode_prep(o, q, S, w, w, K(l), V(l), dsl, dps, T, H,
                                     A_HK, A_D, pg, 1e-6f, 1e6f, scr, ns,
                                     ts) == LISA_OK;
    });
    if (!ok)
        fprintf(stderr, "attention probe: a kernel failed\n");
    /* read and layers-read stream whole caches (rows / T positions a
     * sequence); the others n positions: each against its own bytes */
    double whole = (double) per * 2 * 2 * L / 1e9;
    for (int i = 0; i < nr; i++) {
        double b = i < 2 ? whole : gb;
        printf("%-12s %8.3f ms %7.0f GB/s\n", r[i].name, r[i].ms,
               b / r[i].ms * 1e3);
    }
    return ok ? 0 : 1;
}
