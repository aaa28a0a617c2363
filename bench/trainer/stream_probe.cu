/*
 * trn_stream_probe: where a decode step's weight streaming loses to the
 * device's read rate. A step of a few tokens reads every weight once
 * (8 GB at the Qwen3-4B shape), so its floor is the read rate; the
 * products run well under it. This program times, on one GPU, the same
 * bytes streamed in ways that add one difference at a time:
 *
 *   read          one kernel summing all of them (16-byte loads): the
 *                 ceiling
 *   one-bulk      one kernel streaming all of them the way the skinny
 *                 products do (16 rows a tile, a stage of 16 bulk copies
 *                 of 2 KiB each, 2 stages in flight, three blocks a
 *                 processor) with no arithmetic: the copy pattern alone
 *   one-contig    the same with each stage one bulk copy of 32 KiB: the
 *                 pattern as a tile-major layout would give it
 *   one-bulk-r4   one-bulk with 4 stages in flight (one block a processor)
 *   layers-read   `read` as one kernel a product: the kernel boundaries
 *   layers-bulk   the layers' products as separate kernels with those
 *                 copies and no arithmetic, the grids the products take
 *                 (a block a tile, gate|up and the LM head over the
 *                 resident blocks), launched as the step launches them
 *   layers-contig the same with the 32 KiB copies
 *   layers-lds    layers-bulk where each warp reads its chunks of every
 *                 stage from shared memory as the products do (two
 *                 16-byte loads a lane a chunk)
 *   layers-mma    and multiplies them with one token group's values held
 *                 in registers (two mma a chunk a group)
 *   layers-out    and ends each tile as the products do: the warps' sums
 *                 through shared memory, summed and stored
 *   layers-out-r3 layers-out with 3 stages in flight (two blocks a
 *                 processor)
 *   layers-x      layers-out with the tokens' values loaded from global
 *                 memory a stage ahead, as the products load them
 *   layers-out32  layers-out with 32-row tiles of 16 chunks a stage (the
 *                 same slot bytes)
 *   layers-x32    layers-x with those tiles: half the tokens' loads
 *   layers-x32-r3 the same with 3 stages in flight
 *   layers-x32-c32 32-row tiles of 32 chunks (one block a processor)
 *   layers-x-late layers-x with the loaded values moved into the next
 *                 stage's registers after the slot is given back, so a warp
 *                 does not hold the slot while it waits for them
 *   layers-x-ef   layers-x with the weights' copies marked evict-first in
 *                 L2 (createpolicy), so the stream does not push the
 *                 tokens' rows out
 *   layers-xrep   layers-x with 8 copies of the tokens' rows, block b
 *                 reading copy b % 8 (whether the blocks' loads of the same
 *                 few lines of L2 are what costs)
 *   layers-x-all  layers-x with every product over the resident blocks
 *   layers-x32-c32-r3 32-row tiles of 32 chunks, 3 stages in flight (one
 *                 block a processor)
 *   x32-c32-r3-all the same with every product over the resident blocks
 *   products      the real products (trn_linear_fwd, _glu) of TOKENS
 *   products+l2   with the decode step's L2 hints (trn_linear_next)
 *
 * Each is a CUDA graph replayed (the median of 20 replays), so launch
 * costs are the step's. Usage: trn_stream_probe [TOKENS] [LAYERS]
 */
#include "probe_common.cuh"
#include "trn_cuda_mma.cuh"

#include <algorithm>
#include <stdlib.h>
#include <vector>

#define P_CS 32 /* 32-value chunks a row a stage */

/* What p_tiles' warps do with a stage: touch it, read their chunks as
 * the products do, multiply them too, end each tile as they do, and
 * load their tokens' values from global memory a stage ahead as they do
 * (P_X), the last with the loaded values handed to the next stage's
 * registers after the slot is given back rather than before (P_XL), or
 * P_X with the weights' copies marked to leave L2 first (P_XE). */
enum { P_TOUCH, P_LDS, P_MMA, P_OUT, P_X, P_XL, P_XE };

/* A stage slot's bytes: ROWS rows of CS chunks, each row 64 bytes past a
 * whole number of 128-byte lines (as the products lay them). */
template <int ROWS, int CS> constexpr int p_slot = ROWS *(CS * 64 + 64);

/* Tiles of ROWS rows of w [N][K] (bf16) in contiguous runs over the grid,
 * streamed through P_R stage slots of CS chunks a row as the bulk
 * products stream them, the warps' work with each stage as WORK says.
 * CONTIG: a stage is one copy of the same bytes from a tile-major place.
 * y: the tiles' sums (P_OUT, P_X); x: the 8 tokens' rows (P_X). With 32
 * rows a warp's two 16-row halves share each token fragment, so a stage
 * loads half the tokens' bytes a weight byte. */
template <bool CONTIG, int P_R, int WORK, int ROWS = 16, int CS = P_CS>
__global__ void __launch_bounds__(256)
    p_tiles(const trn_bf16_t *w, int K, int N, unsigned *sink, float *y,
            const trn_bf16_t *x, size_t xrep)
{
    constexpr int ROW = CS * 64 + 64, SLOT = p_slot<ROWS, CS>;
    constexpr int H = ROWS / 16; /* 16-row halves a tile */
    extern __shared__ __align__(128) unsigned char sm[];
    __shared__ __align__(8) uint64_t bar_mem[P_R];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int tiles = N / ROWS, G = (int) gridDim.x, b = (int) blockIdx.x;
    int q = tiles / G, rem = tiles % G;
    int t0 = b * q + (b < rem ? b : rem), nt = q + (b < rem);
    int chunks = K / 32, stages = (chunks + CS - 1) / CS;
    int total = nt * stages;
    uint32_t slots = (uint32_t) __cvta_generic_to_shared(sm);
    uint32_t bars = (uint32_t) __cvta_generic_to_shared(bar_mem);
    auto issue = [&](int gs) {
        int tile = t0 + gs / stages, st = gs % stages, slot = gs % P_R;
        int c0 = st * CS, cs = min(CS, chunks - c0);
        unsigned bytes = (unsigned) cs * 64u;
        uint32_t bar = bars + 8u * (uint32_t) slot;
        if (CONTIG) {
            if (lane == 0) {
                trn_mbar_arrive_tx(bar, ROWS * bytes);
                trn_bulk_g2s(slots + (uint32_t) (slot * SLOT),
                             w + (size_t) tile * ROWS * (size_t) K +
                                 (size_t) c0 * 32 * ROWS,
                             ROWS * bytes, bar);
            }
        } else {
            if (lane == 0)
                trn_mbar_arrive_tx(bar, ROWS * bytes);
            __syncwarp();
            if (lane < ROWS && WORK == P_XE)
                trn_bulk_g2s_hint(
                    slots + (uint32_t) (slot * SLOT + lane * ROW),
                    w + (size_t) (tile * ROWS + lane) * (size_t) K +
                        (size_t) c0 * 32,
                    bytes, bar, trn_l2_evict_first());
            else if (lane < ROWS)
                trn_bulk_g2s(slots + (uint32_t) (slot * SLOT + lane * ROW),
                             w + (size_t) (tile * ROWS + lane) * (size_t) K +
                                 (size_t) c0 * 32,
                             bytes, bar);
        }
    };
    if (warp == 0) {
        if (lane < P_R)
            trn_mbar_init(bars + 8u * (uint32_t) lane, 1);
        trn_mbar_init_fence();
        __syncwarp();
        for (int gs = 0; gs < P_R && gs < total; gs++)
            issue(gs);
    }
    __syncthreads();
    trn_pdl_enter();
    unsigned acc = 0;
    int g = lane >> 2, t = lane & 3;
    float fa[H][4] = {};
    const uint32_t xv0 = 0x3f803f80u ^ (uint32_t) lane, xv1 = xv0 + 1u;
    constexpr int CW = CS / 8; /* a warp's chunks a stage */
    const uint4 *xr =
        reinterpret_cast<const uint4 *>(x + (size_t) (blockIdx.x % 8) * xrep) +
        (size_t) g * (size_t) (K / 8) + t;
    uint4 vx[CW], nx[CW];
    if (WORK >= P_X)
#pragma unroll
        for (int i = 0; i < CW; i++) {
            int c = warp + 8 * i;
            vx[i] = c < chunks ? xr[4 * (size_t) c] : make_uint4(0, 0, 0, 0);
        }
    for (int gs = 0; gs < total; gs++) {
        int slot = gs % P_R, st = gs % stages;
        if (WORK >= P_X) {
            int cn = st + 1 < stages ? (st + 1) * CS : 0;
#pragma unroll
            for (int i = 0; i < CW; i++) {
                int c = cn + warp + 8 * i;
                nx[i] =
                    c < chunks ? xr[4 * (size_t) c] : make_uint4(0, 0, 0, 0);
            }
        }
        trn_mbar_wait(bars + 8u * (uint32_t) slot, (uint32_t) (gs / P_R) & 1u);
        if (WORK == P_TOUCH) {
            acc ^= *reinterpret_cast<const unsigned *>(sm + slot * SLOT +
                                                       threadIdx.x * 64);
        } else {
            const unsigned char *base = sm + slot * SLOT + g * ROW + t * 16;
#pragma unroll
            for (int i = 0; i < CW; i++) {
                int c = warp + 8 * i;
                if (st * CS + c >= chunks)
                    break;
#pragma unroll
                for (int h = 0; h < H; h++) {
                    const unsigned char *hb = base + h * 16 * ROW + c * 64;
                    uint4 va = *reinterpret_cast<const uint4 *>(hb);
                    uint4 vb = *reinterpret_cast<const uint4 *>(hb + 8 * ROW);
                    if (WORK == P_LDS) {
                        acc ^= va.x ^ va.w ^ vb.y ^ vb.z;
                        continue;
                    }
                    uint32_t a0[4] = {va.x, vb.x, va.y, vb.y};
                    uint32_t a1[4] = {va.z, vb.z, va.w, vb.w};
                    if (WORK >= P_X) {
                        trn_mma(fa[h], a0, vx[i].x, vx[i].y);
                        trn_mma(fa[h], a1, vx[i].z, vx[i].w);
                    } else {
                        trn_mma(fa[h], a0, xv0, xv1);
                        trn_mma(fa[h], a1, xv1, xv0);
                    }
                }
            }
        }
        if (WORK == P_X || WORK == P_XE)
#pragma unroll
            for (int i = 0; i < CW; i++)
                vx[i] = nx[i];
        __syncthreads();
        if (warp == 0 && gs + P_R < total)
            issue(gs + P_R);
        if (WORK == P_XL)
#pragma unroll
            for (int i = 0; i < CW; i++)
                vx[i] = nx[i];
        if constexpr (WORK >= P_OUT) {
            if (st < stages - 1)
                continue;
            __shared__ float red[8][ROWS][9]; /* the tile's end */
#pragma unroll
            for (int h = 0; h < H; h++) {
                red[warp][16 * h + g][2 * t] = fa[h][0];
                red[warp][16 * h + g][2 * t + 1] = fa[h][1];
                red[warp][16 * h + g + 8][2 * t] = fa[h][2];
                red[warp][16 * h + g + 8][2 * t + 1] = fa[h][3];
                fa[h][0] = fa[h][1] = fa[h][2] = fa[h][3] = 0.0f;
            }
            __syncthreads();
            if (threadIdx.x < ROWS * 8) {
                int r = threadIdx.x / 8, k = threadIdx.x % 8;
                float v = 0.0f;
                for (int i = 0; i < 8; i++)
                    v += red[i][r][k];
                y[(size_t) k * (size_t) N + (size_t) (t0 + gs / stages) * ROWS +
                  (size_t) r] = v;
            }
        }
    }
    if (WORK == P_MMA)
        acc ^= __float_as_uint(fa[0][0] + fa[0][1] + fa[0][2] + fa[0][3]);
    if (acc == 0x9e3779b9u)
        *sink = acc;
}

struct p_shape {
    const char *name;
    int K, N, spread;
};

/* Launches p_tiles over the resident blocks (spread) or a block a tile. */
template <bool CONTIG, int P_R, int WORK = P_TOUCH, int ROWS = 16,
          int CS = P_CS>
static void
p_tiles_go(const trn_bf16_t *w, int K, int N, int spread, unsigned *sink,
           cudaStream_t st, float *y = NULL, const trn_bf16_t *x = NULL,
           size_t xrep = 0, int all = 0)
{
    static int resident;
    int smem = P_R * p_slot<ROWS, CS>;
    auto k = p_tiles<CONTIG, P_R, WORK, ROWS, CS>;
    if (!resident) {
        CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                smem));
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, k, 256,
                                                         smem));
        resident *= trn_sm_count();
    }
    int grid = spread || all ? std::min(resident, N / ROWS) : N / ROWS;
    CK(trn_launch_pdl(k, dim3(grid), dim3(256), (size_t) smem, st, w, K, N,
                      sink, y, x, xrep));
}

int
main(int argc, char **argv)
{
    int T = argc > 1 ? atoi(argv[1]) : 8, L = argc > 2 ? atoi(argv[2]) : 36;
    const int C = 2560, I = 9728, Q = 4096, S = 6144, V = 151936;
    p_shape lay[4] = {{"qkv", C, S, 0},
                      {"o", Q, C, 0},
                      {"gate|up", C, 2 * I, 1},
                      {"down", I, C, 0}};
    p_shape head = {"lm head", C, V, 1};
    size_t per = 0;
    for (auto &s : lay)
        per += (size_t) s.K * s.N;
    size_t n = per * L + (size_t) head.K * head.N; /* values */
    trn_bf16_t *w;
    CK(cudaMalloc(&w, n * 2));
    CK(cudaMemset(w, 0, n * 2));
    unsigned *sink;
    CK(cudaMalloc(&sink, 4));
    trn_bf16_t *x, *a;
    float *y;
    CK(cudaMalloc(&x, (size_t) 8 * std::max(T, 8) * I * 2)); /* 8 copies */
    CK(cudaMalloc(&a, (size_t) T * I * 2));
    CK(cudaMalloc(&y, (size_t) std::max(T, 8) * V * 4));
    CK(cudaMemset(x, 0, (size_t) 8 * std::max(T, 8) * I * 2));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    int sms = trn_sm_count();
    trn_blas_t *bl = trn_blas_new();
    trn_cuda_stream_t *ts = (trn_cuda_stream_t *) st;
    double gb = (double) n * 2 / 1e9;
    printf("stream probe: %d layers + LM head, %.2f GB of bf16 weights, %d "
           "tokens, %d processors\n",
           L, gb, T, sms);

    /* fn(weights, shape, the next product's weights and bytes) over the
     * step */
    std::vector<const trn_bf16_t *> ps;
    std::vector<const p_shape *> ss;
    {
        const trn_bf16_t *p = w;
        for (int l = 0; l < L; l++)
            for (auto &s : lay) {
                ps.push_back(p), ss.push_back(&s);
                p += (size_t) s.K * s.N;
            }
        ps.push_back(p), ss.push_back(&head);
    }
    auto each = [&](auto fn) {
        for (size_t i = 0; i < ps.size(); i++) {
            size_t nb = i + 1 < ps.size()
                            ? (size_t) ss[i + 1]->K * ss[i + 1]->N * 2
                            : 0;
            fn(ps[i], *ss[i], nb ? ps[i + 1] : NULL, nb);
        }
    };
    struct {
        const char *name;
        float ms;
    } r[24];
    int nr = 0;
    /* a variant timed over the step's products, one launch (go) each */
    auto layers = [&](const char *name, auto go) {
        r[nr].name = name;
        r[nr++].ms = p_time(st, [&] {
            each([&](const trn_bf16_t *p, const p_shape &s, const void *,
                     size_t) { go(p, s); });
        });
    };
    r[nr].name = "read";
    r[nr++].ms = p_time(st, [&] {
        p_read<<<sms * 8, 256, 0, st>>>((const uint4 *) w, n / 8, sink);
    });
    /* all the bytes as one matrix of K = C */
    int Nall = (int) (n / C / 16 * 16);
    r[nr].name = "one-bulk";
    r[nr++].ms =
        p_time(st, [&] { p_tiles_go<false, 2>(w, C, Nall, 1, sink, st); });
    r[nr].name = "one-contig";
    r[nr++].ms =
        p_time(st, [&] { p_tiles_go<true, 2>(w, C, Nall, 1, sink, st); });
    r[nr].name = "one-bulk-r4";
    r[nr++].ms =
        p_time(st, [&] { p_tiles_go<false, 4>(w, C, Nall, 1, sink, st); });
    layers("layers-read", [&](const trn_bf16_t *p, const p_shape &s) {
        p_read<<<sms * 8, 256, 0, st>>>((const uint4 *) p,
                                        (size_t) s.K * s.N / 8, sink);
    });
    layers("layers-bulk", [&](const trn_bf16_t *p, const p_shape &s) {
        p_tiles_go<false, 2>(p, s.K, s.N, s.spread, sink, st);
    });
    layers("layers-contig", [&](const trn_bf16_t *p, const p_shape &s) {
        p_tiles_go<true, 2>(p, s.K, s.N, s.spread, sink, st);
    });
    layers("layers-lds", [&](const trn_bf16_t *p, const p_shape &s) {
        p_tiles_go<false, 2, P_LDS>(p, s.K, s.N, s.spread, sink, st);
    });
    layers("layers-mma", [&](const trn_bf16_t *p, const p_shape &s) {
        p_tiles_go<false, 2, P_MMA>(p, s.K, s.N, s.spread, sink, st);
    });
    layers("layers-out", [&](const trn_bf16_t *p, const p_shape &s) {
        p_tiles_go<false, 2, P_OUT>(p, s.K, s.N, s.spread, sink, st, y);
    });
    layers("layers-out-r3", [&](const trn_bf16_t *p, const p_shape &s) {
        p_tiles_go<false, 3, P_OUT>(p, s.K, s.N, s.spread, sink, st, y);
    });
    layers("layers-x", [&](const trn_bf16_t *p, const p_shape &s) {
        p_tiles_go<false, 2, P_X>(p, s.K, s.N, s.spread, sink, st, y, x);
    });
    layers("layers-x-late", [&](const trn_bf16_t *p, const p_shape &s) {
        p_tiles_go<false, 2, P_XL>(p, s.K, s.N, s.spread, sink, st, y, x);
    });
    layers("layers-x-ef", [&](const trn_bf16_t *p, const p_shape &s) {
        p_tiles_go<false, 2, P_XE>(p, s.K, s.N, s.spread, sink, st, y, x);
    });
    layers("layers-xrep", [&](const trn_bf16_t *p, const p_shape &s) {
        p_tiles_go<false, 2, P_X>(p, s.K, s.N, s.spread, sink, st, y, x,
                                  (size_t) std::max(T, 8) * I);
    });
    layers("layers-x-all", [&](const trn_bf16_t *p, const p_shape &s) {
        p_tiles_go<false, 2, P_X>(p, s.K, s.N, s.spread, sink, st, y, x, 0, 1);
    });
    layers("layers-out32", [&](const trn_bf16_t *p, const p_shape &s) {
        p_tiles_go<false, 2, P_OUT, 32, 16>(p, s.K, s.N, s.spread, sink, st, y);
    });
    layers("layers-x32", [&](const trn_bf16_t *p, const p_shape &s) {
        p_tiles_go<false, 2, P_X, 32, 16>(p, s.K, s.N, s.spread, sink, st, y,
                                          x);
    });
    layers("layers-x32-r3", [&](const trn_bf16_t *p, const p_shape &s) {
        p_tiles_go<false, 3, P_X, 32, 16>(p, s.K, s.N, s.spread, sink, st, y,
                                          x);
    });
    layers("layers-x32-c32", [&](const trn_bf16_t *p, const p_shape &s) {
        p_tiles_go<false, 2, P_X, 32, 32>(p, s.K, s.N, s.spread, sink, st, y,
                                          x);
    });
    layers("layers-x32-c32-r3", [&](const trn_bf16_t *p, const p_shape &s) {
        p_tiles_go<false, 3, P_X, 32, 32>(p, s.K, s.N, s.spread, sink, st, y,
                                          x);
    });
    layers("x32-c32-r3-all", [&](const trn_bf16_t *p, const p_shape &s) {
        p_tiles_go<false, 3, P_X, 32, 32>(p, s.K, s.N, s.spread, sink, st, y, x,
                                          0, 1);
    });
    int ok = 1;
    for (int hint = 0; hint < 2; hint++) {
        r[nr].name = hint ? "products+l2" : "products";
        r[nr++].ms = p_time(st, [&] {
            each([&](const trn_bf16_t *p, const p_shape &s, const void *nx,
                     size_t nb) {
                trn_linear_next(bl, hint ? nx : NULL, hint ? nb : 0);
                lisa_rc_t rc;
                if (s.N == 2 * I)
                    rc = trn_linear_fwd_glu(bl, a, x, p, T, s.K, I, ts);
                else if (s.N == S)
                    rc = trn_linear_fwd(bl, NULL, a, x, p, T, s.K, s.N, 0, ts);
                else
                    rc = trn_linear_fwd(bl, y, NULL, s.K == I ? a : x, p, T,
                                        s.K, s.N, s.N == C, ts);
                ok &= rc == LISA_OK;
            });
        });
    }
    if (!ok)
        fprintf(stderr, "stream probe: a product failed\n");
    for (int i = 0; i < nr; i++)
        printf("%-14s %8.3f ms %7.0f GB/s  %5.1f%% of read\n", r[i].name,
               r[i].ms, gb / r[i].ms * 1e3, 100.0 * r[0].ms / r[i].ms);
    trn_blas_destroy(&bl);
    return ok ? 0 : 1;
}
