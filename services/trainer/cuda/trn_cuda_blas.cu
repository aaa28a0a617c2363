/*
 * trn_cuda_blas: the three products of a Linear layer through cuBLASLt.
 *
 * Row-major tensors are column-major transposes, so each row-major product
 * is expressed as the column-major product of the transposes:
 *   forward      y[T,N]  = x[T,K] w[N,K]^T  ->  y^T = w x^T     (op(w)=T)
 *   data grad    dx[T,K] = dy[T,N] w[N,K]   ->  dx^T = w^T dy^T (no ops)
 *   weight grad  dw[N,K] += dy^T x          ->  dw^T = x^T dy   (op(dy)=T)
 * Inputs are bf16, accumulation fp32 (CUBLAS_COMPUTE_32F), outputs bf16 or
 * fp32. Heuristic choices are cached per shape; for skinny products
 * (at most 128 rows of tokens: decode steps), where the first heuristic
 * choice is often not the fastest, the first use times up to 32
 * candidates on a scratch output and keeps the fastest (never while a
 * stream is being recorded into a graph). Forward products of up to four
 * tokens skip cuBLASLt for a matrix-vector kernel of this file, launched
 * to overlap the kernel before it (trn_launch_pdl). On the bulk-copy
 * skinny kernel a product may also take the hidden RMSNorm before it, or
 * give the input of the one after it (trn_linear_fwd_norm).
 */
#include "trn_cuda_common.cuh"
#include "trn_cuda_mma.cuh"
#include "trn_cuda_trace.cuh"

#include <cublasLt.h>
#include <stdint.h>
#include <stdlib.h>

#define S_WORKSPACE  (32u << 20)
#define S_CACHE      256
#define S_CANDIDATES 32 /* algorithms timed for skinny products */

typedef struct {
    int ta, tb, m, n, k, ctype, beta_one, valid;
    cublasLtMatmulAlgo_t algo;
} s_plan_t;

struct trn_blas {
    cublasLtHandle_t lt;
    void *workspace;
    s_plan_t cache[S_CACHE];
    int ncache;
    const char *next; /* trn_linear_next: weights to bring into L2 */
    size_t next_bytes;
    const char *pk_from, *pk_to; /* trn_linear_set_packed */
    size_t pk_bytes;
};

#define S_BLAS_TRY(call)                                                       \
    do {                                                                       \
        cublasStatus_t st_ = (call);                                           \
        if (st_ != CUBLAS_STATUS_SUCCESS) {                                    \
            fprintf(stderr, "trainer: cuBLASLt status %d at %s:%d\n",          \
                    (int) st_, __FILE__, __LINE__);                            \
            rc = LISA_ERR;                                                     \
            goto out;                                                          \
        }                                                                      \
    } while (0)

extern "C" trn_blas_t *
trn_blas_new(void)
{
    trn_blas_t *b = (trn_blas_t *) calloc(1, sizeof *b);
    if (!b)
        return NULL;
    if (cublasLtCreate(&b->lt) != CUBLAS_STATUS_SUCCESS) {
        free(b);
        return NULL;
    }
    b->workspace = trn_cuda_malloc(S_WORKSPACE);
    if (!b->workspace) {
        cublasLtDestroy(b->lt);
        free(b);
        return NULL;
    }
    return b;
}

extern "C" void
trn_blas_destroy(trn_blas_t **self)
{
    if (!self || !*self)
        return;
    trn_blas_t *b = *self;
    trn_cuda_free(&b->workspace);
    cublasLtDestroy(b->lt);
    free(b);
    *self = NULL;
}

/* Index of the fastest of `found` algorithms for this product, timed on
 * a scratch output (the first one when timing fails). */
static int
s_fastest(trn_blas_t *b, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la,
          cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc, const void *A,
          const void *B, const cublasLtMatmulHeuristicResult_t *res, int found,
          size_t c_bytes, cudaStream_t stream)
{
    int best = 0;
    float best_ms = -1.0f, alpha = 1.0f, beta = 0.0f;
    void *C = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    if (cudaMalloc(&C, c_bytes) != cudaSuccess ||
        cudaEventCreate(&e0) != cudaSuccess ||
        cudaEventCreate(&e1) != cudaSuccess)
        goto out;
    for (int i = 0; i < found; i++) {
        int ok = 1;
        for (int r = 0; r < 6 && ok; r++) { /* one warm-up, five timed */
            if (r == 1)
                cudaEventRecord(e0, stream);
            ok = cublasLtMatmul(b->lt, op, &alpha, A, la, B, lb, &beta, C, lc,
                                C, lc, &res[i].algo, b->workspace, S_WORKSPACE,
                                stream) == CUBLAS_STATUS_SUCCESS;
        }
        float ms = 0.0f;
        if (!ok || cudaEventRecord(e1, stream) != cudaSuccess ||
            cudaEventSynchronize(e1) != cudaSuccess ||
            cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess)
            continue;
        if (best_ms < 0.0f || ms < best_ms) {
            best = i;
            best_ms = ms;
        }
    }
out:
    cudaGetLastError();
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    if (C)
        cudaFree(C);
    return best;
}

/* Column-major D[m,n] = alpha op(A) op(B) + beta C (C same layout as D;
 * Cin NULL: C is D). */
static lisa_rc_t
s_gemm(trn_blas_t *b, int ta, int tb, int m, int n, int k, const void *A,
       int lda, const void *B, int ldb, void *C, int ldc, int c_f32, float beta,
       const void *Cin, cudaStream_t stream)
{
    lisa_rc_t rc = LISA_OK;
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cudaDataType_t ctype = c_f32 ? CUDA_R_32F : CUDA_R_16BF;
    float alpha = 1.0f;
    s_plan_t *plan = NULL;
    int beta_one = beta != 0.0f;

    S_BLAS_TRY(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    S_BLAS_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA,
                                              &opa, sizeof opa));
    S_BLAS_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB,
                                              &opb, sizeof opb));
    S_BLAS_TRY(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, ta ? k : m,
                                          ta ? m : k, lda));
    S_BLAS_TRY(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, tb ? n : k,
                                          tb ? k : n, ldb));
    S_BLAS_TRY(cublasLtMatrixLayoutCreate(&lc, ctype, m, n, ldc));

    for (int i = 0; i < b->ncache; i++) {
        s_plan_t *p = &b->cache[i];
        if (p->ta == ta && p->tb == tb && p->m == m && p->n == n && p->k == k &&
            p->ctype == c_f32 && p->beta_one == beta_one) {
            plan = p;
            break;
        }
    }
    if (!plan) {
        cublasLtMatmulPreference_t pref = NULL;
        cublasLtMatmulHeuristicResult_t res[S_CANDIDATES];
        int found = 0;
        size_t ws = S_WORKSPACE;
        /* skinny products (decode steps) are memory-bound and the first
         * heuristic choice is often not the fastest: time a few */
        cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
        int want = n <= 128 &&
                           cudaStreamIsCapturing(stream, &cap) == cudaSuccess &&
                           cap == cudaStreamCaptureStatusNone
                       ? S_CANDIDATES
                       : 1;
        S_BLAS_TRY(cublasLtMatmulPreferenceCreate(&pref));
        cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
        cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(
            b->lt, op, la, lb, lc, lc, pref, want, res, &found);
        cublasLtMatmulPreferenceDestroy(pref);
        if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
            fprintf(stderr, "trainer: no cuBLASLt algorithm for %dx%dx%d\n", m,
                    n, k);
            rc = LISA_ERR;
            goto out;
        }
        int best =
            found > 1
                ? s_fastest(b, op, la, lb, lc, A, B, res, found,
                            (size_t) m * (size_t) n * (c_f32 ? 4u : 2u), stream)
                : 0;
        plan = &b->cache[b->ncache < S_CACHE ? b->ncache++ : 0];
        plan->ta = ta;
        plan->tb = tb;
        plan->m = m;
        plan->n = n;
        plan->k = k;
        plan->ctype = c_f32;
        plan->beta_one = beta_one;
        plan->algo = res[best].algo;
        plan->valid = 1;
    }
    S_BLAS_TRY(cublasLtMatmul(b->lt, op, &alpha, A, la, B, lb, &beta,
                              Cin ? Cin : C, lc, C, lc, &plan->algo,
                              b->workspace, S_WORKSPACE, stream));
out:
    if (lc)
        cublasLtMatrixLayoutDestroy(lc);
    if (lb)
        cublasLtMatrixLayoutDestroy(lb);
    if (la)
        cublasLtMatrixLayoutDestroy(la);
    if (op)
        cublasLtMatmulDescDestroy(op);
    return rc;
}

/* ---- the next product's weights into L2 (trn_linear_next) ------------- */

/* Default of LISA_CUDA_L2PF. On an H200, batch-8 decode steps over
 * 2,500-token contexts took 4.04 ms with 8 MiB, 4.07 with none, 4.18 with
 * 16 and 4.34 with 32 (more evicts what the kernel before still reads).
 * With the weights' and the cache's reads marked evict-first (one H100,
 * three runs each): 4.519-4.542 ms with 8, 4.562-4.576 with none,
 * 4.667-4.682 with 16, 4.746-4.756 with 24. */
#define S_L2PF_MIB 8

/* A kernel's L2 hints. Its share of an L2 prefetch: blocks split [p, p +
 * bytes) in 16-byte-aligned slices and one thread a block asks for its
 * slice (a bulk prefetch: the copy engine fetches it, nothing is waited
 * for). And ef: the weights' reads mark their lines to leave L2 first
 * (s_weights_ef). */
struct s_pf_t {
    const char *p;
    unsigned long long bytes;
    int ef;
    int pk; /* the weights are packed (trn_linear_pack) */
};

__device__ __forceinline__ void
s_l2_prefetch(s_pf_t pf)
{
    if (!pf.p || threadIdx.x != 0)
        return;
    unsigned long long per =
        ((pf.bytes + gridDim.x - 1) / gridDim.x + 15) & ~15ull;
    unsigned long long off = (unsigned long long) blockIdx.x * per;
    if (off >= pf.bytes)
        return;
    unsigned long long n = pf.bytes - off < per ? pf.bytes - off : per;
    n &= ~15ull;
    while (n > 0) {
        unsigned c = n > (1u << 24) ? (1u << 24) : (unsigned) n;
        asm volatile(
            "cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(pf.p + off),
            "r"(c)
            : "memory");
        off += c;
        n -= c;
    }
}

/* The MiB a hint may cover (LISA_CUDA_L2PF, read once). */
static size_t
s_l2pf_cap(void)
{
    static long mib = -1;
    if (mib < 0) {
        const char *e = getenv("LISA_CUDA_L2PF");
        long v = e && *e ? atol(e) : S_L2PF_MIB;
        mib = v < 0 ? 0 : v > 1024 ? 1024 : v;
    }
    return (size_t) mib << 20;
}

extern "C" void
trn_linear_next(trn_blas_t *b, const void *w, size_t bytes)
{
    if (!b)
        return;
    size_t cap = s_l2pf_cap();
    b->next = w && cap > 0 && (uintptr_t) w % 16 == 0 ? (const char *) w : NULL;
    b->next_bytes = b->next ? (bytes < cap ? bytes : cap) & ~(size_t) 15 : 0;
}

/* Whether the skinny kernels' weight reads (the bulk kernel's copies,
 * s_gemv's loads) are marked evict-first in L2 (on; LISA_CUDA_WEIGHTS_EF=0
 * turns it off; read once). A step reads its weights once; without the
 * mark their stream pushes out of L2 the tokens' rows, which every block
 * reads, and the next product's weights asked in ahead. On an H100,
 * decode steps over 2,500 positions, alternating: batch 8 4.784-4.791 ms
 * against 4.875-4.888 (three runs each); batch 1 (s_gemv) 3.638-3.642
 * against 3.647-3.665 (two each), within its noise. */
static int
s_weights_ef(void)
{
    static int ef = -1;
    if (ef < 0)
        ef = trn_env_on("LISA_CUDA_WEIGHTS_EF");
    return ef;
}

/* The hints for this launch, the prefetch cleared (it serves one
 * product). */
static s_pf_t
s_take_pf(trn_blas_t *b)
{
    s_pf_t pf = {NULL, 0, s_weights_ef(), 0};
    if (b) {
        pf = {b->next, b->next_bytes, pf.ef, 0};
        b->next = NULL, b->next_bytes = 0;
    }
    return pf;
}

/* ---- forward of a few tokens: a matrix-vector kernel ------------------- */

#define S_GV_TMAX 4 /* most tokens the kernel serves */
#define S_GV_L    8 /* 16-byte weight loads a lane holds */

/* A 16-byte weight load that leaves L1 alone (each weight is read once a
 * step; the tokens' rows are what L1 should keep). */
__device__ __forceinline__ uint4
s_ld_stream(const uint4 *p)
{
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

/* s_ld_stream with an L2 cache policy (trn_l2_evict_first). */
__device__ __forceinline__ uint4
s_ld_stream_hint(const uint4 *p, uint64_t pol)
{
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, "
        "[%4], %5;\n"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p), "l"(pol));
    return v;
}

/* y[t, n] (=, or += into fp32) sum_k x[t, k] w[n, k] for TT tokens: each
 * warp takes a slice of one weight row (`ks` warps a row, ks rows' worth
 * of warps a block), every lane holding its S_GV_L 16-byte loads of it at
 * once, so a warp's whole slice is in flight in one memory latency. The
 * weights are loaded before trn_pdl_enter (nothing before this kernel in
 * a step writes them), so with overlapping launches the stream of weights
 * starts while the previous kernel still finishes; the tokens' rows are
 * read after. Memory-bound, like the decode step it serves.
 * With GLU (w holds N = 2I rows, gate rows then up rows) a block's row
 * pairs are gate row j and up row I + j, and it writes
 * yb[t, j] = silu(gate) * up instead, rounded as trn_k_swiglu_fwd rounds
 * the two products' bf16 outputs: the same bits without the gate|up row
 * or a SwiGLU kernel. With ef the weight loads are marked evict-first in
 * L2 (s_weights_ef). */
template <int TT, bool GLU>
__global__ void __launch_bounds__(256)
    s_gemv(float *yf, trn_bf16_t *yb, const trn_bf16_t *x, const trn_bf16_t *w,
           int K, int N, int accumulate, int ks, int ef)
{
    __shared__ float red[8][TT];
    trn_tr_scope tr(GLU ? TRN_TR_GEMV_GLU : TRN_TR_GEMV, N, K);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int r = warp / ks, slice = warp % ks;
    int I = N / 2, j = blockIdx.x * (4 / ks) + (r >> 1);
    int n = GLU ? (j < I ? (r & 1) * I + j : N) : blockIdx.x * (8 / ks) + r;
    int chunks = K / 8, per = (chunks + ks - 1) / ks;
    int c0 = slice * per + lane, c1 = min(chunks, slice * per + per);
    const uint4 *wr =
        reinterpret_cast<const uint4 *>(w) + (size_t) (n < N ? n : 0) * chunks;
    uint4 wv[S_GV_L];
    const uint64_t pol = ef ? trn_l2_evict_first() : 0;
#pragma unroll
    for (int u = 0; u < S_GV_L; u++) {
        int c = c0 + 32 * u;
        wv[u] = !(n < N && c < c1) ? make_uint4(0, 0, 0, 0)
                : ef               ? s_ld_stream_hint(wr + c, pol)
                                   : s_ld_stream(wr + c);
    }
    trn_pdl_enter();
    tr.waited();
    const uint4 *xr = reinterpret_cast<const uint4 *>(x);
    float a[TT];
#pragma unroll
    for (int t = 0; t < TT; t++)
        a[t] = 0.0f;
#pragma unroll
    for (int u = 0; u < S_GV_L; u++) {
        int c = c0 + 32 * u;
        if (c >= c1)
            break;
        const __nv_bfloat162 *w2 =
            reinterpret_cast<const __nv_bfloat162 *>(&wv[u]);
        float2 wf[4];
#pragma unroll
        for (int e = 0; e < 4; e++)
            wf[e] = __bfloat1622float2(w2[e]);
#pragma unroll
        for (int t = 0; t < TT; t++) {
            uint4 xv = xr[(size_t) t * chunks + c];
            const __nv_bfloat162 *x2 =
                reinterpret_cast<const __nv_bfloat162 *>(&xv);
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float2 xf = __bfloat1622float2(x2[e]);
                a[t] += wf[e].x * xf.x + wf[e].y * xf.y;
            }
        }
    }
#pragma unroll
    for (int t = 0; t < TT; t++) {
        float v = trn_warp_sum(a[t]);
        if (lane == 0)
            red[warp][t] = v;
    }
    __syncthreads();
    if (GLU) {
        if (slice == 0 && lane < TT && (r & 1) == 0 && n < N) {
            float gs = 0.0f, us = 0.0f;
            for (int i = 0; i < ks; i++) {
                gs += red[r * ks + i][lane];
                us += red[(r + 1) * ks + i][lane];
            }
            float g = trn_round_bf16(gs), u = trn_round_bf16(us);
            trn_st(yb + (size_t) lane * (size_t) I + (size_t) j,
                   trn_round_bf16(g * trn_sigmoid(g)) * u);
        }
    } else if (slice == 0 && lane < TT && n < N) {
        float sum = 0.0f;
        for (int i = 0; i < ks; i++)
            sum += red[r * ks + i][lane];
        size_t o = (size_t) lane * (size_t) N + (size_t) n;
        if (yf)
            yf[o] = (accumulate ? yf[o] : 0.0f) + sum;
        else
            trn_st(yb + o, sum);
    }
}

/* Warps a weight row is split over (1, 2, 4 or 8: a block holds whole
 * rows) so that a lane's share fits its S_GV_L loads; 0 when K is too
 * deep. */
static int
s_gemv_ks(int K)
{
    int chunks = K / 8;
    for (int ks = 1; ks <= 8; ks *= 2)
        if ((chunks + ks - 1) / ks <= 32 * S_GV_L)
            return ks;
    return 0;
}

/* Most tokens the matrix-vector kernel takes (LISA_CUDA_GEMV_TOKENS, 0 to
 * S_GV_TMAX, default 1: at 2 to 4 tokens cuBLASLt measured faster on an
 * H200; 0 leaves every product to cuBLASLt). */
static int
s_gemv_tmax(void)
{
    static int tmax = -1;
    if (tmax < 0) {
        const char *e = getenv("LISA_CUDA_GEMV_TOKENS");
        int v = e && *e ? atoi(e) : 1;
        tmax = v < 0 ? 0 : v > S_GV_TMAX ? S_GV_TMAX : v;
    }
    return tmax;
}

/* Whether the matrix-vector kernel serves a product of this shape: up
 * to four tokens (decode steps of a few sequences), rows of at most 16384
 * values, and outputs up to 65536 wide (the LM head stays with cuBLASLt,
 * which streams it at the copy rate). Its 16-byte loads also need x and w
 * 16-byte aligned. */
static int
s_gemv_fits(int T, int K, int N)
{
    return T <= s_gemv_tmax() && K % 8 == 0 && s_gemv_ks(K) > 0 && N <= 65536;
}

static int
s_aligned16(const void *p)
{
    return (uintptr_t) p % 16 == 0;
}

/* ---- forward of 2 to 16 tokens: a skinny product on the tensor cores -- */

#define S_SK_TMAX 16 /* most tokens the kernel serves */
#define S_SK_W    8  /* warps a block: each takes a slice of the rows' K */
/* 32-value chunks a lane loads at once (8: fewer blocks fit a processor,
 * and a decode step at batch 8 took 6.9 ms against 4.2) */
#define S_SK_U 4

/* Where the skinny kernels' warps meet: each warp's partial sums of the
 * block's 16 rows for its NT token tiles. */
template <int NT> using s_red_t = float[S_SK_W][16][8 * NT + 1];

/* ---- RMSNorm folded into the products (trn_linear_norm_fits) ----------
 * A decode layer's norms move little memory, but each is a kernel on the
 * step's critical path (its run and two hand-overs). Folded, they cost
 * the products around them an epilogue's worth of work: a product that
 * adds into the residual (o, down: "norm out") writes, besides y, the
 * next norm's input xg = bf16(y * w) and each 16-output tile's sums of
 * y^2 a token (a block a tile, so tile = o0 / 16); the product after it
 * ("norm in": q|k|v, gate|up, the LM head) reads xg as its x and scales
 * each token's sums by rsqrt(sum of the partials / dim + eps) before
 * rounding. Every sum runs in a fixed order: the same bits run to run. */
enum { S_NF_NONE, S_NF_IN, S_NF_OUT };

/* A product's fold (trn_cuda.h's sides; a NULL ss: no such side). */
struct s_fold_t {
    trn_norm_in_t in;
    trn_norm_out_t out;
};

/* What the epilogue needs of a fold: the tokens' scales (norm in, in
 * shared memory), the outputs' side (norm out) and this thread's
 * weight of the next norm (its output of the block's tile). */
struct s_ep_t {
    const float *rs;
    trn_norm_out_t out;
    float wn;
};

/* Partials a lane loads at once for its token's scale. */
#define S_NIN_E 8

/* A norm-in block's scales, one a token, into shared memory (returned):
 * token tok's partials are summed by its 32 / NT lanes, lane j taking
 * j, j + 32 / NT, ... in order, S_NIN_E * NT loads in flight at once, and
 * the lanes meet by shuffles. Every thread calls it, after
 * trn_pdl_enter (the kernel before wrote the partials) and after its
 * first token loads are on the way: the partials' latency runs beside
 * theirs, which the main loop waits for anyway. The epilogue's first
 * __syncthreads orders the scales before their readers. */
template <int NT>
__device__ __forceinline__ const float *
s_nin_rstd(const trn_norm_in_t &nin, int T)
{
    __shared__ float rs[8 * NT];
    const int L = 32 / NT, E = S_NIN_E * NT;
    int tok = (int) threadIdx.x / L, j = (int) threadIdx.x % L;
    const float *p = nin.ss + (size_t) (tok < T ? tok : 0) * (size_t) nin.nss;
    float s = 0.0f;
    for (int i0 = j; i0 < nin.nss; i0 += E * L) {
        float v[E];
#pragma unroll
        for (int e = 0; e < E; e++) {
            int i = i0 + e * L;
            v[e] = tok < T && i < nin.nss ? p[i] : 0.0f;
        }
#pragma unroll
        for (int e = 0; e < E; e++)
            s += v[e];
    }
    for (int o = L / 2; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    if (j == 0 && tok < T)
        rs[tok] = rsqrtf(s / (float) nin.dim + nin.eps);
    return rs;
}

/* A norm-out block's partial sums of squares: v (this thread's new
 * residual value, 0 where it has none) squared and summed over the
 * tile's 16 outputs of each token in a fixed order (a warp's rows by
 * shuffles, then the warps in order through shared memory), into
 * ss[tok * nss + tile]. Every thread calls it (epilogue layout: thread
 * r * 8 NT + tok). */
template <int NT>
__device__ __forceinline__ void
s_nout_ss(float v, float *ss, int nss, int tile, int T)
{
    __shared__ float part[4 * NT][8 * NT];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float q = v * v;
    for (int o = 8 * NT; o < 32; o <<= 1)
        q += __shfl_xor_sync(0xffffffffu, q, o);
    if (warp < 4 * NT && lane < 8 * NT)
        part[warp][lane] = q;
    __syncthreads();
    if ((int) threadIdx.x < T) {
        float s = 0.0f;
        for (int w = 0; w < 4 * NT; w++)
            s += part[w][threadIdx.x];
        ss[(size_t) threadIdx.x * (size_t) nss + (size_t) tile] = s;
    }
}

/* The skinny kernel's end: each warp's partial sums (acc, NT token
 * tiles) meet in shared memory in a fixed order, and the block writes the
 * tile's outputs o0 .. o0 + on - 1 (GLU: silu(gate) * up rounded as
 * trn_k_swiglu_fwd rounds; else y =, or += into fp32). With a norm in
 * (NF) the sums are scaled by their token's ep.rs first; with a norm out
 * the fp32 y's new values also give xg and the tile's partial sums of
 * squares (tile o0 / 16: a norm-out block's tile is whole and aligned).
 * In a cluster of S > 1 blocks that split the tile's K (s_skinny_bulk),
 * block 0 sums every block's warps, block after block, and writes; the
 * others leave once it has read them. Every thread of the cluster calls
 * it. */
template <int NT, bool GLU, int NF>
__device__ __forceinline__ void
s_skinny_out(s_red_t<NT> &red, const float (&acc)[NT][4], float *yf,
             trn_bf16_t *yb, int T, int N, int accumulate, int o0, int on,
             const s_ep_t &ep, unsigned S = 1)
{
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int g = lane >> 2, t = lane & 3;
    int I = N / 2;
#pragma unroll
    for (int q = 0; q < NT; q++) {
        red[warp][g][8 * q + 2 * t] = acc[q][0];
        red[warp][g][8 * q + 2 * t + 1] = acc[q][1];
        red[warp][g + 8][8 * q + 2 * t] = acc[q][2];
        red[warp][g + 8][8 * q + 2 * t + 1] = acc[q][3];
    }
    if (S > 1)
        trn_cluster_sync();
    else
        __syncthreads();
    const bool mine = S == 1 || trn_cluster_rank() == 0;
    int r = threadIdx.x / (8 * NT), tok = threadIdx.x % (8 * NT);
    const bool out = r < 16 && tok < T && r < on;
    /* row rr's sum: the cluster's blocks in order, each one's warps in
     * order (with S = 1 the block's warps alone) */
    auto sum_of = [&](int rr) {
        float s = 0.0f;
        for (unsigned c = 0; c < S; c++)
            for (int i = 0; i < S_SK_W; i++)
                s += c == 0 ? red[i][rr][tok]
                            : trn_ld_cluster(&red[i][rr][tok], c);
        return s;
    };
    float gs = 0.0f, us = 0.0f, sum = 0.0f;
    if (mine && out) {
        if (GLU)
            gs = sum_of(r), us = sum_of(r + 8);
        else
            sum = sum_of(r);
    }
    if (S > 1) {
        trn_cluster_sync(); /* block 0 has read the others' sums */
        if (!mine)
            return;
    }
    float v = 0.0f; /* norm out: the new residual value */
    /* no thread leaves early: a block may have more tiles to do */
    if (out) {
        if (GLU) {
            if (NF == S_NF_IN)
                gs *= ep.rs[tok], us *= ep.rs[tok];
            float gg = trn_round_bf16(gs), uu = trn_round_bf16(us);
            trn_st(yb + (size_t) tok * (size_t) I + (size_t) (o0 + r),
                   trn_round_bf16(gg * trn_sigmoid(gg)) * uu);
        } else {
            if (NF == S_NF_IN)
                sum *= ep.rs[tok];
            size_t o = (size_t) tok * (size_t) N + (size_t) (o0 + r);
            if (yf) {
                v = (accumulate ? yf[o] : 0.0f) + sum;
                yf[o] = v;
                if (NF == S_NF_OUT)
                    trn_st(ep.out.xg + o, v * ep.wn);
            } else {
                trn_st(yb + o, sum);
            }
        }
    }
    if constexpr (NF == S_NF_OUT)
        s_nout_ss<NT>(v, ep.out.ss, N / 16, o0 / 16, T);
}

/* The skinny kernels' start: lane (g, t)'s token rows (xr: its 16-byte
 * column t of token 8 q + g; xok: whether that token is one) and zero
 * sums. */
template <int NT>
__device__ __forceinline__ void
s_sk_start(const uint4 *(&xr)[NT], bool (&xok)[NT], float (&acc)[NT][4],
           const trn_bf16_t *x, size_t row16, int T, int g, int t)
{
#pragma unroll
    for (int q = 0; q < NT; q++) {
        int tok = 8 * q + g;
        xok[q] = tok < T;
        xr[q] = reinterpret_cast<const uint4 *>(x) +
                (size_t) (xok[q] ? tok : 0) * row16 + t;
        acc[q][0] = acc[q][1] = acc[q][2] = acc[q][3] = 0.0f;
    }
}

/* y[t, n] (=, or += into fp32) sum_k x[t, k] w[n, k] for T <= 8 NT tokens,
 * memory-bound like s_gemv but with the products on the tensor cores
 * (mma.sync m16n8k16), so the arithmetic of 5 to 16 tokens stays far
 * under the time the weights take to stream. A block takes 16 weight rows
 * (the A operand's rows; with GLU gate rows j..j+7 and their up rows as
 * rows 8..15) and its S_SK_W warps split their K in slices of 32-value
 * chunks; the tokens are the B operand's columns (8 an n-tile, rows past
 * T zero). A dot product does not care in which order its K runs, so a
 * lane loads 8 consecutive values of its row (one 16-byte load) and of
 * its token's row, and hands values 0-3 to one product and 4-7 to the
 * next as fragment columns 2t, 2t+1, 2t+8, 2t+9: A and B agree on the
 * order, and each load is one 16-byte access. The warps' partial sums
 * meet in shared memory in a fixed order (deterministic), and the
 * epilogue writes as s_gemv does (GLU: silu(gate) * up rounded as
 * trn_k_swiglu_fwd rounds). */
template <int NT, int U, bool GLU>
__global__ void __launch_bounds__(32 * S_SK_W)
    s_skinny(float *yf, trn_bf16_t *yb, const trn_bf16_t *x,
             const trn_bf16_t *w, int T, int K, int N, int accumulate,
             s_pf_t pf)
{
    __shared__ s_red_t<NT> red;
    trn_tr_scope tr(GLU ? TRN_TR_SKINNY_GLU : TRN_TR_SKINNY, N, K);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int g = lane >> 2, t = lane & 3;
    int I = N / 2, j0 = blockIdx.x * 8;
    int nA, nB; /* the weight rows of A rows g and g+8 */
    if (GLU) {
        int ok = j0 + g < I;
        nA = ok ? j0 + g : N;
        nB = ok ? I + j0 + g : N;
    } else {
        nA = blockIdx.x * 16 + g;
        nB = nA + 8;
    }
    int chunks = K / 32, per = (chunks + S_SK_W - 1) / S_SK_W;
    int c0 = warp * per, c1 = min(chunks, c0 + per);
    size_t row16 = (size_t) K / 8; /* 16-byte units a row */
    const uint4 *wa = reinterpret_cast<const uint4 *>(w) +
                      (size_t) (nA < N ? nA : 0) * row16 + t;
    const uint4 *wb = reinterpret_cast<const uint4 *>(w) +
                      (size_t) (nB < N ? nB : 0) * row16 + t;
    const uint4 *xr[NT];
    bool xok[NT];
    float acc[NT][4];
    s_sk_start<NT>(xr, xok, acc, x, row16, T, g, t);
    uint4 va[U], vb[U], vx[U][NT];
    const uint4 z = make_uint4(0, 0, 0, 0);
    /* the first chunks' weights before the wait (nothing earlier in a
     * step writes them), their tokens' values after it; from then on a
     * group's weights and tokens are loaded together, before the
     * products of the group before it */
#pragma unroll
    for (int u = 0; u < U; u++) {
        int c = c0 + u;
        va[u] = nA < N && c < c1 ? s_ld_stream(wa + 4 * (size_t) c) : z;
        vb[u] = nB < N && c < c1 ? s_ld_stream(wb + 4 * (size_t) c) : z;
    }
    trn_pdl_enter();
    tr.waited();
#pragma unroll
    for (int u = 0; u < U; u++)
#pragma unroll
        for (int q = 0; q < NT; q++)
            vx[u][q] = xok[q] && c0 + u < c1 ? xr[q][4 * (size_t) (c0 + u)] : z;
    for (int c = c0; c < c1; c += U) {
        uint4 na[U], nb[U], nx[U][NT];
        int cn = c + U;
#pragma unroll
        for (int u = 0; u < U; u++) {
            int cc = cn + u;
            bool in = cc < c1;
            na[u] = nA < N && in ? s_ld_stream(wa + 4 * (size_t) cc) : z;
            nb[u] = nB < N && in ? s_ld_stream(wb + 4 * (size_t) cc) : z;
#pragma unroll
            for (int q = 0; q < NT; q++)
                nx[u][q] = xok[q] && in ? xr[q][4 * (size_t) cc] : z;
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            uint32_t a0[4] = {va[u].x, vb[u].x, va[u].y, vb[u].y};
            uint32_t a1[4] = {va[u].z, vb[u].z, va[u].w, vb[u].w};
#pragma unroll
            for (int q = 0; q < NT; q++) {
                trn_mma(acc[q], a0, vx[u][q].x, vx[u][q].y);
                trn_mma(acc[q], a1, vx[u][q].z, vx[u][q].w);
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            va[u] = na[u];
            vb[u] = nb[u];
#pragma unroll
            for (int q = 0; q < NT; q++)
                vx[u][q] = nx[u][q];
        }
    }
    s_l2_prefetch(pf); /* this block's weights are in */
    int rows = GLU ? 8 : 16, o0 = blockIdx.x * rows;
    s_skinny_out<NT, GLU, S_NF_NONE>(red, acc, yf, yb, T, N, accumulate, o0,
                                     min(rows, (GLU ? I : N) - o0), s_ep_t{});
}

/* ---- the skinny product with its weights copied in bulk --------------
 * The same products and epilogue as s_skinny, but the block's 16 weight
 * rows reach shared memory by bulk copies (cp.async.bulk, the copy engine:
 * no registers held, completion counted in bytes on an mbarrier), in
 * stages of S_SB_CS 32-value chunks a row, R stages in flight. The
 * first R stages are asked for before the wait for the kernel before
 * (weights: nothing earlier in a step writes them), so a block that
 * becomes resident while that kernel's last blocks run has up to R x 33
 * KiB on the way when its inputs are ready, where s_skinny has its first
 * U chunks a warp. LISA_CUDA_SKINNY_BULK=R sets the stages: 2 (the
 * default on Hopper; 67,584 bytes of stage slots and the warps' sums
 * past them, three blocks a processor), 3 (two) or 0 (s_skinny instead).
 * A block may take several tiles of outputs (s_sb_run): the stages then
 * run on from one tile to the next, the copies of the next tile's rows
 * in flight while the warps finish this one. */
#define S_SB_CS   32                  /* 32-value chunks a row a stage */
#define S_SB_RMAX 3                   /* most stages in flight */
#define S_SB_ROW  (S_SB_CS * 64 + 64) /* a row's bytes in a stage slot */
#define S_SB_SLOT (16 * S_SB_ROW)     /* a stage slot: 16 rows */
/* Stages of a row of K values. */
__host__ __device__ __forceinline__ int
s_sb_stages(int K)
{
    return (K / 32 + S_SB_CS - 1) / S_SB_CS;
}

/* Rows sit S_SB_ROW apart, 64 bytes past a whole number of 128-byte
 * lines: the 8 lanes of a quarter-warp (rows g, g + 1; lanes t 0-3) read
 * 16 bytes each from 8 distinct 16-byte bank groups. */

/* Stage st (of a tile's stages) of the tile's rows (nrow: the weight row
 * of slot row `lane`, N where there is none) into stage slot `slot`;
 * lanes 0-15 of the calling warp copy a row each, lane 0 announces the
 * bytes first. */
__device__ __forceinline__ void
s_sb_issue(uint32_t slots, uint32_t bars, const trn_bf16_t *w, int nrow, int N,
           int K, int st, int slot, int lane, uint64_t pol)
{
    int chunks = K / 32, c0 = st * S_SB_CS;
    int cs = chunks - c0 < S_SB_CS ? chunks - c0 : S_SB_CS;
    unsigned bytes = (unsigned) cs * 64u;
    unsigned rows = __popc(__ballot_sync(0xffffffffu, lane < 16 && nrow < N));
    uint32_t bar = bars + 8u * (uint32_t) slot;
    if (lane == 0)
        trn_mbar_arrive_tx(bar, rows * bytes);
    __syncwarp();
    if (lane < 16 && nrow < N) {
        uint32_t dst = slots + (uint32_t) (slot * S_SB_SLOT + lane * S_SB_ROW);
        const trn_bf16_t *src =
            w + (size_t) nrow * (size_t) K + (size_t) c0 * 32;
        if (pol)
            trn_bulk_g2s_hint(dst, src, bytes, bar, pol);
        else
            trn_bulk_g2s(dst, src, bytes, bar);
    }
}

/* Stage st of a tile of packed weights (trn_linear_pack) into stage slot
 * `slot`: slot rows 0.. from the weight rows [a0, a0 + na) and, with GLU,
 * rows 8.. from [b0, b0 + nb), each run one bulk copy (the stage's rows
 * of a run are contiguous, cs values each), lane 0 announcing the bytes
 * first. */
__device__ __forceinline__ void
s_sb_issue_pk(uint32_t slots, uint32_t bars, const trn_bf16_t *w, int N, int K,
              int st, int slot, int a0, int na, int b0, int nb, int lane,
              uint64_t pol)
{
    if (lane != 0)
        return;
    int v0 = st * S_SB_CS * 32;
    int cs = K - v0 < S_SB_CS * 32 ? K - v0 : S_SB_CS * 32;
    unsigned row = (unsigned) cs * 2u;
    uint32_t bar = bars + 8u * (uint32_t) slot;
    trn_mbar_arrive_tx(bar, (unsigned) (na + nb) * row);
    const trn_bf16_t *base = w + (size_t) N * (size_t) v0;
    uint32_t dst = slots + (uint32_t) (slot * S_SB_SLOT);
    const trn_bf16_t *src[2] = {base + (size_t) a0 * (size_t) cs,
                                base + (size_t) b0 * (size_t) cs};
    unsigned bytes[2] = {(unsigned) na * row, (unsigned) nb * row};
    for (int h = 0; h < 2; h++) {
        if (!bytes[h])
            continue;
        uint32_t d = dst + (uint32_t) h * 8u * row;
        if (pol)
            trn_bulk_g2s_hint(d, src[h], bytes[h], bar, pol);
        else
            trn_bulk_g2s(d, src[h], bytes[h], bar);
    }
}

/* A bulk block's outputs: the grid's clusters (a block each, or S blocks
 * that split K) share the product's `outs` outputs in contiguous runs, the
 * first outs % clusters one longer, and a cluster takes its run in `nt`
 * tiles of at most `per` outputs, as equal as they come (with one cluster
 * per `per` outputs, the grid the default launch makes, a run is one
 * whole tile). */
struct s_run_t {
    int lo, len, nt;
};

__device__ __forceinline__ s_run_t
s_sb_run(int outs, int per, unsigned S)
{
    int G = (int) (gridDim.x / S), b = (int) (blockIdx.x / S);
    int q = outs / G, rem = outs % G;
    s_run_t u;
    u.lo = b * q + (b < rem ? b : rem);
    u.len = q + (b < rem);
    u.nt = (u.len + per - 1) / per;
    return u;
}

/* Tile k of run u: its first output and its count. */
__device__ __forceinline__ int
s_sb_tile0(s_run_t u, int k)
{
    return u.lo + (int) ((long) u.len * k / u.nt);
}

/* The weight row slot row r holds for the tile of outputs o0 .. o1 - 1
 * (N where there is none): with GLU gate rows then up rows (8 each). */
template <bool GLU>
__device__ __forceinline__ int
s_sb_row(int r, int o0, int o1, int N)
{
    if (GLU) {
        int j = o0 + (r & 7);
        return j < o1 ? (r < 8 ? j : N / 2 + j) : N;
    }
    return o0 + r < o1 ? o0 + r : N;
}

template <int NT, int R, bool GLU, int NF, bool PK>
__global__ void __launch_bounds__(32 * S_SK_W)
    s_skinny_bulk(float *yf, trn_bf16_t *yb, const trn_bf16_t *x,
                  const trn_bf16_t *w, int T, int K, int N, int accumulate,
                  s_pf_t pf, s_fold_t fold)
{
    extern __shared__ __align__(128) unsigned char s_sb[];
    __shared__ __align__(8) uint64_t bar_mem[R];
    trn_tr_scope tr(GLU ? TRN_TR_SKINNY_BULK_GLU : TRN_TR_SKINNY_BULK, N, K);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int g = lane >> 2, t = lane & 3, r = lane & 15;
    /* in a cluster of S blocks, block c takes the c-th S-th of the
     * stages of K (one tile: the launch gives a cluster one) */
    const unsigned S = trn_cluster_size(), cr = S > 1 ? trn_cluster_rank() : 0;
    const s_run_t u = s_sb_run(GLU ? N / 2 : N, GLU ? 8 : 16, S);
    int chunks = K / 32, stages_k = s_sb_stages(K);
    int st0 = (int) (cr * (unsigned) stages_k / S);
    int stages = (int) ((cr + 1) * (unsigned) stages_k / S) - st0;
    int total = u.nt * stages; /* the block's stages, tile after tile */
    uint32_t slots = (uint32_t) __cvta_generic_to_shared(s_sb);
    uint32_t bars = (uint32_t) __cvta_generic_to_shared(bar_mem);
    /* warp 0 copies the stages, the first R of them now */
    const uint64_t pol = pf.ef ? trn_l2_evict_first() : 0;
    auto issue = [&](int gs) {
        int k = gs / stages;
        int o0 = s_sb_tile0(u, k), o1 = s_sb_tile0(u, k + 1);
        if (PK) {
            int n = o1 - o0;
            s_sb_issue_pk(slots, bars, w, N, K, st0 + gs % stages, gs % R, o0,
                          n, GLU ? N / 2 + o0 : 0, GLU ? n : 0, lane, pol);
            return;
        }
        int nrow = s_sb_row<GLU>(r, o0, o1, N);
        s_sb_issue(slots, bars, w, nrow, N, K, st0 + gs % stages, gs % R, lane,
                   pol);
    };
    if (warp == 0) {
        if (lane < R)
            trn_mbar_init(bars + 8u * (uint32_t) lane, 1);
        trn_mbar_init_fence();
        __syncwarp();
        for (int gs = 0; gs < R && gs < total; gs++)
            issue(gs);
    }
    s_ep_t ep = {};
    if constexpr (NF == S_NF_OUT) { /* a weight too: before the wait */
        int er = (int) threadIdx.x / (8 * NT);
        ep.out = fold.out;
        ep.wn =
            er < 16 && u.lo + er < N ? trn_ld(fold.out.w + u.lo + er) : 0.0f;
    }
    __syncthreads();
    trn_pdl_enter();
    tr.waited();
    size_t row16 = (size_t) K / 8;
    const uint4 *xr[NT];
    bool xok[NT];
    float acc[NT][4];
    s_sk_start<NT>(xr, xok, acc, x, row16, T, g, t);
    const uint4 z = make_uint4(0, 0, 0, 0);
    /* a warp's chunks of a stage: warp, warp + 8, ...; their tokens'
     * values are loaded a stage ahead (the next tile's first stage reads
     * the same values as this tile's) */
    const int CW = S_SB_CS / S_SK_W;
    uint4 vx[CW][NT], nx[CW][NT];
#pragma unroll
    for (int i = 0; i < CW; i++)
#pragma unroll
        for (int q = 0; q < NT; q++) {
            int c = st0 * S_SB_CS + warp + S_SK_W * i;
            vx[i][q] = xok[q] && c < chunks ? xr[q][4 * (size_t) c] : z;
        }
    if constexpr (NF == S_NF_IN)
        ep.rs = s_nin_rstd<NT>(fold.in, T);
    /* the warps' partial sums meet past the stage slots */
    s_red_t<NT> &red = *reinterpret_cast<s_red_t<NT> *>(s_sb + R * S_SB_SLOT);
    for (int k = 0, gs = 0; k < u.nt; k++) {
        /* packed: the parities of rows g and g + 8's weight rows (odd rows
         * have their chunks swapped in pairs) */
        int ta = s_sb_tile0(u, k) + g;
        int pa = PK ? ta & 1 : 0, pb = PK ? (GLU ? N / 2 + ta : ta + 8) & 1 : 0;
        for (int st = st0; st < st0 + stages; st++, gs++) {
            int c0 = st * S_SB_CS;
            int cn = st + 1 < st0 + stages ? c0 + S_SB_CS : st0 * S_SB_CS;
#pragma unroll
            for (int i = 0; i < CW; i++)
#pragma unroll
                for (int q = 0; q < NT; q++) {
                    int c = cn + warp + S_SK_W * i;
                    nx[i][q] = xok[q] && c < chunks ? xr[q][4 * (size_t) c] : z;
                }
            int slot = gs % R;
            trn_mbar_wait(bars + 8u * (uint32_t) slot,
                          (uint32_t) (gs / R) & 1u);
            /* a slot row's pitch: padded, or packed rows back to back */
            int pitch =
                PK ? (chunks - c0 < S_SB_CS ? chunks - c0 : S_SB_CS) * 64
                   : S_SB_ROW;
            const unsigned char *base =
                s_sb + slot * S_SB_SLOT + g * pitch + t * 16;
#pragma unroll
            for (int i = 0; i < CW; i++) {
                int c = warp + S_SK_W * i;
                if (c0 + c >= chunks)
                    break;
                uint4 va =
                    *reinterpret_cast<const uint4 *>(base + (c ^ pa) * 64);
                uint4 vb = *reinterpret_cast<const uint4 *>(base + 8 * pitch +
                                                            (c ^ pb) * 64);
                uint32_t a0[4] = {va.x, vb.x, va.y, vb.y};
                uint32_t a1[4] = {va.z, vb.z, va.w, vb.w};
#pragma unroll
                for (int q = 0; q < NT; q++) {
                    trn_mma(acc[q], a0, vx[i][q].x, vx[i][q].y);
                    trn_mma(acc[q], a1, vx[i][q].z, vx[i][q].w);
                }
            }
#pragma unroll
            for (int i = 0; i < CW; i++)
#pragma unroll
                for (int q = 0; q < NT; q++)
                    vx[i][q] = nx[i][q];
            __syncthreads(); /* every warp is done with the slot */
            if (warp == 0 && gs + R < total)
                issue(gs + R);
        }
        if (k + 1 == u.nt)
            s_l2_prefetch(pf); /* this block's weights are in */
        int o0 = s_sb_tile0(u, k);
        s_skinny_out<NT, GLU, NF>(red, acc, yf, yb, T, N, accumulate, o0,
                                  s_sb_tile0(u, k + 1) - o0, ep, S);
#pragma unroll
        for (int q = 0; q < NT; q++)
            acc[q][0] = acc[q][1] = acc[q][2] = acc[q][3] = 0.0f;
    }
}

/* The bulk-copy skinny kernel's stages in flight (LISA_CUDA_SKINNY_BULK:
 * 2, the default, or 3; 0, or a device before compute capability 9.x:
 * off, the register-fed kernel). On an H200, batch-8 decode steps over
 * 2,500 positions: 3.92 ms with 2 stages, 4.44 with 3, 4.07 off. Read
 * once. */
static int
s_skinny_bulk_stages(void)
{
    static int r = -1;
    if (r < 0) {
        const char *e = getenv("LISA_CUDA_SKINNY_BULK");
        int v = e && *e ? atoi(e) : 2, dev = 0, major = 0;
        bool hopper =
            cudaGetDevice(&dev) == cudaSuccess &&
            cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                                   dev) == cudaSuccess &&
            major >= 9;
        r = v >= 2 && v <= S_SB_RMAX && hopper ? v : 0;
    }
    return r;
}

/* ---- packed weights (trn_linear_pack) ---------------------------------
 * One thread a 16-byte unit of w: unit u of row n, in stage s = u /
 * (CS / 8), goes to the stage's run (N * s * CS values in), row n at n *
 * cs (cs: the stage's values a row), its 64-byte chunk swapped with its
 * pair when n is odd. */
__global__ void
s_pack(trn_bf16_t *dst, const trn_bf16_t *w, int N, int K)
{
    const int CS = TRN_LINEAR_PACK_CS, ku = K / 8;
    size_t units = (size_t) N * (size_t) ku;
    for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < units;
         i += (size_t) gridDim.x * blockDim.x) {
        size_t n = i / (size_t) ku;
        int k = (int) (i % (size_t) ku) * 8, s = k / CS, kk = k % CS;
        int cs = K - s * CS < CS ? K - s * CS : CS;
        int ch = (kk / 32) ^ (int) (n & 1), e = kk % 32;
        size_t off = (size_t) N * (size_t) s * CS + n * (size_t) cs +
                     (size_t) ch * 32 + (size_t) e;
        *reinterpret_cast<uint4 *>(dst + off) =
            *reinterpret_cast<const uint4 *>(w + i * 8);
    }
}

extern "C" lisa_rc_t
trn_linear_pack(trn_bf16_t *dst, const trn_bf16_t *w, int N, int K,
                trn_cuda_stream_t *s)
{
    static_assert(TRN_LINEAR_PACK_CS == S_SB_CS * 32, "a stage's values");
    TRN_REQUIRE(dst && w && N > 0 && K > 0 && K % 64 == 0 && dst != w);
    TRN_REQUIRE(s_aligned16(dst) && s_aligned16(w));
    size_t units = (size_t) N * (size_t) (K / 8);
    size_t blocks = (units + 255) / 256;
    s_pack<<<(unsigned) (blocks < 65535 * 16 ? blocks : 65535 * 16), 256, 0,
             trn_stream(s)>>>(dst, w, N, K);
    TRN_CUDA_TRY(cudaGetLastError());
    return LISA_OK;
}

extern "C" int
trn_linear_pack_used(void)
{
    return s_skinny_bulk_stages() != 0;
}

extern "C" void
trn_linear_set_packed(trn_blas_t *b, const void *from, const void *to,
                      size_t bytes)
{
    if (!b)
        return;
    b->pk_from = to ? (const char *) from : NULL;
    b->pk_to = to ? (const char *) to : NULL;
    b->pk_bytes = to ? bytes : 0;
}

/* A bulk product's weights at their packed copy, if b has one that holds
 * them (K a multiple of 64); the prefetch hint follows them. */
static void
s_pk_map(const trn_blas_t *b, const trn_bf16_t **w, int K, s_pf_t *pf)
{
    if (!b || !b->pk_to || K % 64 != 0)
        return;
    const char *p = (const char *) *w;
    if (p < b->pk_from || p >= b->pk_from + b->pk_bytes)
        return;
    *w = (const trn_bf16_t *) (b->pk_to + (p - b->pk_from));
    pf->pk = 1;
    if (pf->p && pf->p >= b->pk_from && pf->p < b->pk_from + b->pk_bytes)
        pf->p = b->pk_to + (pf->p - b->pk_from);
}

/* Blocks a multiprocessor for the bulk products: LISA_CUDA_SKINNY_SPREAD
 * ="g,p" (or "g") sets g for SwiGLU's gate|up and p for the others; 0
 * gives a block a tile. Unset: as many as are resident at once, or a
 * block a tile where the tiles are fewer (the 4B shape's gate|up makes 3.07
 * rounds of resident blocks; q|k|v, o and down a round or less, so they
 * keep a block a tile). On an H200, batch-8 decode steps over 2,500
 * positions: 3.98-4.03 ms with gate|up spread over the resident blocks
 * (three a processor) against 4.13-4.14 with a block a tile; two a
 * processor 4.07, one 4.73, four (two rounds) 4.31; spreading the others
 * over three, two or one a processor 4.19-4.74. Read once: negative
 * means unset. */
static void
s_spread(float *glu, float *plain)
{
    static bool read;
    static float g = -1.0f, p = -1.0f; /* negative: unset */
    if (!read) {
        const char *e = getenv("LISA_CUDA_SKINNY_SPREAD");
        int got = e ? sscanf(e, "%f,%f", &g, &p) : 0; /* "g" alone: p unset */
        g = got >= 1 && g >= 0.0f ? g : -1.0f;
        p = got >= 2 && p >= 0.0f ? p : -1.0f;
        read = true;
    }
    *glu = g;
    *plain = p;
}

/* A bulk block's dynamic shared memory: R stage slots, then the warps'
 * sums. */
template <int NT, int R>
static constexpr int
s_bulk_smem(void)
{
    return R * S_SB_SLOT + (int) sizeof(s_red_t<NT>);
}

/* The blocks of this instantiation a multiprocessor holds (asked once,
 * after allowing its shared memory). */
template <int NT, int R, bool GLU, int NF, bool PK = false>
static lisa_rc_t
s_bulk_resident(int *out)
{
    static int resident; /* per instantiation, set once */
    if (!resident) {
        int n = 0;
        TRN_CUDA_TRY(cudaFuncSetAttribute(
            s_skinny_bulk<NT, R, GLU, NF, PK>,
            cudaFuncAttributeMaxDynamicSharedMemorySize, s_bulk_smem<NT, R>()));
        TRN_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &n, s_skinny_bulk<NT, R, GLU, NF, PK>, 32 * S_SK_W,
            (size_t) s_bulk_smem<NT, R>()));
        resident = n < 1 ? 1 : n;
    }
    *out = resident;
    return LISA_OK;
}

/* Whether a product of few tiles splits each tile's K over a cluster of
 * blocks (on; LISA_CUDA_SKINNY_SPLIT=0 turns it off; read once). */
static int
s_split_on(void)
{
    static int on = -1;
    if (on < 0)
        on = trn_env_on("LISA_CUDA_SKINNY_SPLIT");
    return on;
}

/* The blocks that split a tile's K (s_skinny_bulk's clusters): as many as
 * the resident blocks leave room for (R = 2: three a processor, R = 3:
 * two), at most 4 and no more than the stages of K; 1 for GLU products
 * and where every tile already has a block of its own and more. The
 * products o and down of the 4B shape have 160 tiles, so 160 blocks
 * (one a processor, most of them) streamed them before; gate|up's 1,216
 * keep one each. A function of the shape and the device only, so a
 * product gives the same bits with and without a fold. */
template <int R, bool GLU>
static int
s_split_blocks(int tiles, int K)
{
    if (GLU || !s_split_on())
        return 1;
    long room = (R == 2 ? 3 : 2) * (long) trn_sm_count();
    long s = room / tiles, stages = s_sb_stages(K);
    s = s < stages ? s : stages;
    return s >= 2 ? (int) (s < 4 ? s : 4) : 1;
}

template <int NT, int R, bool GLU, int NF, bool PK>
static lisa_rc_t
s_skinny_bulk_go(float *yf, trn_bf16_t *yb, const trn_bf16_t *x,
                 const trn_bf16_t *w, int T, int K, int N, int accumulate,
                 s_pf_t pf, const s_fold_t &f, cudaStream_t st)
{
    int resident = 0;
    lisa_rc_t rc = s_bulk_resident<NT, R, GLU, NF, PK>(&resident);
    if (rc != LISA_OK)
        return rc;
    /* the grid: a block a tile, or contiguous runs of outputs (s_sb_run),
     * so every block streams the same bytes and no last round of blocks
     * ends the product on a few processors; a norm out always a block a
     * tile (its partial sums are a whole tile's; trn_linear_norm_fits
     * takes it only where that is the grid anyway) */
    const int outs = GLU ? N / 2 : N,
              tiles = (outs + (GLU ? 7 : 15)) / (GLU ? 8 : 16);
    float sg, sp;
    s_spread(&sg, &sp);
    float v = GLU ? sg : sp;
    long sms = trn_sm_count();
    long G = v > 0.0f ? (long) (v * (float) sms + 0.5f) : 0;
    if (v < 0.0f) /* unset: the resident blocks, a tile at least */
        G = resident * sms < tiles ? resident * sms : tiles;
    G = G < 1 || NF == S_NF_OUT ? tiles : G > outs ? outs : G;
    const int S = s_split_blocks<R, GLU>(tiles, K);
    if (S > 1) /* a cluster a tile */
        G = (long) tiles * S;
    TRN_CUDA_TRY(trn_launch_pdl_cl(
        s_skinny_bulk<NT, R, GLU, NF, PK>, dim3((unsigned) G),
        dim3(32 * S_SK_W), (size_t) s_bulk_smem<NT, R>(), st,
        dim3((unsigned) S), yf, yb, x, w, T, K, N, accumulate, pf, f));
    return LISA_OK;
}

template <int NT, bool GLU, int NF>
static lisa_rc_t
s_skinny_bulk_fwd(float *yf, trn_bf16_t *yb, const trn_bf16_t *x,
                  const trn_bf16_t *w, int T, int K, int N, int accumulate,
                  s_pf_t pf, const s_fold_t &f, cudaStream_t st)
{
    /* packed weights: their own instantiations, so that the plain
     * kernel's registers stay as they were (three blocks a processor) */
    if (s_skinny_bulk_stages() == 2)
        return pf.pk ? s_skinny_bulk_go<NT, 2, GLU, NF, true>(
                           yf, yb, x, w, T, K, N, accumulate, pf, f, st)
                     : s_skinny_bulk_go<NT, 2, GLU, NF, false>(
                           yf, yb, x, w, T, K, N, accumulate, pf, f, st);
    return pf.pk ? s_skinny_bulk_go<NT, 3, GLU, NF, true>(yf, yb, x, w, T, K, N,
                                                          accumulate, pf, f, st)
                 : s_skinny_bulk_go<NT, 3, GLU, NF, false>(
                       yf, yb, x, w, T, K, N, accumulate, pf, f, st);
}

/* The bulk product with the fold f asks for: a norm in, a norm out (not
 * with GLU) or none. */
template <int NT, bool GLU>
static lisa_rc_t
s_skinny_bulk_nf(float *yf, trn_bf16_t *yb, const trn_bf16_t *x,
                 const trn_bf16_t *w, int T, int K, int N, int accumulate,
                 s_pf_t pf, const s_fold_t &f, cudaStream_t st)
{
    const int out = GLU ? S_NF_NONE : S_NF_OUT; /* no GLU kernel gives one */
    if (f.in.ss)
        return s_skinny_bulk_fwd<NT, GLU, S_NF_IN>(yf, yb, x, w, T, K, N,
                                                   accumulate, pf, f, st);
    if (f.out.ss && !GLU)
        return s_skinny_bulk_fwd<NT, GLU, out>(yf, yb, x, w, T, K, N,
                                               accumulate, pf, f, st);
    return s_skinny_bulk_fwd<NT, GLU, S_NF_NONE>(yf, yb, x, w, T, K, N,
                                                 accumulate, pf, f, st);
}

/* The token counts the skinny kernel serves: LISA_CUDA_SKINNY_MIN (default
 * 2) to LISA_CUDA_SKINNY_MAX (default 8, at most S_SK_TMAX). On an H200,
 * in decode steps over 2,500-token contexts, it beat cuBLASLt's tuned
 * choice at 4 tokens (3.57 against 3.80 ms a step), tied at 8 and lost at
 * 16 (5.47 against 5.01 ms). */
static int
s_skinny_env(const char *name, int dflt)
{
    const char *e = getenv(name);
    int v = e && *e ? atoi(e) : dflt;
    return v < 1 ? 1 : v;
}

static int
s_skinny_min(void)
{
    static int tmin = -1;
    if (tmin < 0)
        tmin = s_skinny_env("LISA_CUDA_SKINNY_MIN", 2);
    return tmin;
}

static int
s_skinny_max(void)
{
    static int tmax = -1;
    if (tmax < 0) {
        int v = s_skinny_env("LISA_CUDA_SKINNY_MAX", 8);
        tmax = v > S_SK_TMAX ? S_SK_TMAX : v;
    }
    return tmax;
}

/* The widest product the skinny kernel serves (LISA_CUDA_SKINNY_WIDE;
 * default: any, the LM head included, whose 9,496 tiles at Qwen3-4B's
 * vocabulary the bulk kernel spreads over its resident blocks). On an
 * H200, decode steps over 2,500 positions: batch 8 3.954 / 3.973 ms
 * against 3.993 / 3.985 with the head on cuBLASLt (65536), batch 4 3.503
 * against 3.529, batch 2 3.292 against 3.318. */
static long
s_skinny_wide(void)
{
    static long v = -1;
    if (v < 0) {
        const char *e = getenv("LISA_CUDA_SKINNY_WIDE");
        v = e && *e ? atol(e) : (1L << 30);
        v = v < 1 ? 1 : v > (1L << 30) ? (1L << 30) : v;
    }
    return v;
}

/* Whether the skinny kernel serves a product of this shape (tokens the
 * matrix-vector kernel leaves, within its range; rows a whole number of
 * 32-value chunks; outputs up to s_skinny_wide). */
static int
s_skinny_fits(int T, int K, int N)
{
    return T <= s_skinny_max() && T >= s_skinny_min() && T > s_gemv_tmax() &&
           K % 32 == 0 && K >= 32 && N <= s_skinny_wide();
}

template <int NT, int U, bool GLU>
static lisa_rc_t
s_skinny_go(dim3 grid, float *yf, trn_bf16_t *yb, const trn_bf16_t *x,
            const trn_bf16_t *w, int T, int K, int N, int accumulate, s_pf_t pf,
            cudaStream_t st)
{
    TRN_CUDA_TRY(trn_launch_pdl(s_skinny<NT, U, GLU>, grid, dim3(32 * S_SK_W),
                                0, st, yf, yb, x, w, T, K, N, accumulate, pf));
    return LISA_OK;
}

/* The skinny product (a fold, f, only on the bulk kernel: callers check
 * trn_linear_norm_fits). */
template <bool GLU>
static lisa_rc_t
s_skinny_fwd(const trn_blas_t *b, float *yf, trn_bf16_t *yb,
             const trn_bf16_t *x, const trn_bf16_t *w, int T, int K, int N,
             int accumulate, s_pf_t pf, const s_fold_t &f, cudaStream_t st)
{
    if (s_skinny_bulk_stages()) {
        s_pk_map(b, &w, K, &pf); /* only the bulk kernel reads it */
        return T <= 8 ? s_skinny_bulk_nf<1, GLU>(yf, yb, x, w, T, K, N,
                                                 accumulate, pf, f, st)
                      : s_skinny_bulk_nf<2, GLU>(yf, yb, x, w, T, K, N,
                                                 accumulate, pf, f, st);
    }
    int rows = GLU ? 8 : 16, outs = GLU ? N / 2 : N;
    dim3 grid((unsigned) ((outs + rows - 1) / rows));
    if (T <= 8)
        return s_skinny_go<1, S_SK_U, GLU>(grid, yf, yb, x, w, T, K, N,
                                           accumulate, pf, st);
    return s_skinny_go<2, S_SK_U, GLU>(grid, yf, yb, x, w, T, K, N, accumulate,
                                       pf, st);
}

/* Whether a norm-out product of N outputs at T tokens runs a block a
 * 16-output tile in one round of resident blocks, the grid the bulk
 * kernel gives it without a fold (LISA_CUDA_SKINNY_SPREAD's p unset or
 * 0). */
static int
s_nout_grid_ok(int T, int N)
{
    float sg, sp;
    s_spread(&sg, &sp);
    if (N % 16 != 0 || sp > 0.0f)
        return 0;
    if (sp == 0.0f) /* a block a tile asked for */
        return 1;
    int res = 0, two = s_skinny_bulk_stages() == 2;
    lisa_rc_t rc = T <= 8
                       ? (two ? s_bulk_resident<1, 2, false, S_NF_OUT>(&res)
                              : s_bulk_resident<1, 3, false, S_NF_OUT>(&res))
                       : (two ? s_bulk_resident<2, 2, false, S_NF_OUT>(&res)
                              : s_bulk_resident<2, 3, false, S_NF_OUT>(&res));
    return rc == LISA_OK && (long) (N / 16) <= (long) res * trn_sm_count();
}

template <bool GLU>
static lisa_rc_t
s_gemv_fwd(float *yf, trn_bf16_t *yb, const trn_bf16_t *x, const trn_bf16_t *w,
           int T, int K, int N, int accumulate, cudaStream_t st)
{
    int ks = s_gemv_ks(K), rows = 8 / ks;
    dim3 grid((unsigned) ((N + rows - 1) / rows)), block(256);
    void (*k)(float *, trn_bf16_t *, const trn_bf16_t *, const trn_bf16_t *,
              int, int, int, int, int) = T == 1   ? s_gemv<1, GLU>
                                         : T == 2 ? s_gemv<2, GLU>
                                         : T == 3 ? s_gemv<3, GLU>
                                                  : s_gemv<4, GLU>;
    TRN_CUDA_TRY(trn_launch_pdl(k, grid, block, 0, st, yf, yb, x, w, K, N,
                                accumulate, ks, s_weights_ef()));
    return LISA_OK;
}

extern "C" int
trn_linear_glu_fits(int T, int K, int I)
{
    /* row pairs in a block: at most four warps a row */
    return I > 0 && ((s_gemv_fits(T, K, 2 * I) && s_gemv_ks(K) <= 4) ||
                     s_skinny_fits(T, K, 2 * I));
}

extern "C" lisa_rc_t
trn_linear_fwd_glu(trn_blas_t *b, trn_bf16_t *a, const trn_bf16_t *x,
                   const trn_bf16_t *w, int T, int K, int I,
                   trn_cuda_stream_t *s)
{
    TRN_REQUIRE(a && x && w && trn_linear_glu_fits(T, K, I));
    TRN_REQUIRE(s_aligned16(x) && s_aligned16(w));
    s_pf_t pf = s_take_pf(b);
    if (s_skinny_fits(T, K, 2 * I))
        return s_skinny_fwd<true>(b, NULL, a, x, w, T, K, 2 * I, 0, pf,
                                  s_fold_t{}, trn_stream(s));
    return s_gemv_fwd<true>(NULL, a, x, w, T, K, 2 * I, 0, trn_stream(s));
}

extern "C" lisa_rc_t
trn_linear_fwd(trn_blas_t *b, float *y_f32, trn_bf16_t *y_bf16,
               const trn_bf16_t *x, const trn_bf16_t *w, int T, int K, int N,
               int accumulate, trn_cuda_stream_t *s)
{
    TRN_REQUIRE(b && x && w && (y_f32 || y_bf16) && T > 0 && K > 0 && N > 0);
    s_pf_t pf = s_take_pf(b);
    if (s_gemv_fits(T, K, N) && s_aligned16(x) && s_aligned16(w))
        return s_gemv_fwd<false>(y_f32, y_f32 ? NULL : y_bf16, x, w, T, K, N,
                                 accumulate, trn_stream(s));
    if (s_skinny_fits(T, K, N) && s_aligned16(x) && s_aligned16(w))
        return s_skinny_fwd<false>(b, y_f32, y_f32 ? NULL : y_bf16, x, w, T, K,
                                   N, accumulate, pf, s_fold_t{},
                                   trn_stream(s));
    void *y = y_f32 ? (void *) y_f32 : (void *) y_bf16;
    return s_gemm(b, 1, 0, N, T, K, w, K, x, K, y, N, y_f32 != NULL,
                  accumulate ? 1.0f : 0.0f, NULL, trn_stream(s));
}

extern "C" int
trn_linear_norm_fits(int T, int K, int N, int out)
{
    return T <= TRN_LINEAR_NORM_TMAX && N > 0 && s_skinny_bulk_stages() &&
           s_skinny_fits(T, K, N) && (!out || s_nout_grid_ok(T, N));
}

/* Whether a norm in, if any, is one the kernels can take. */
static int
s_nin_ok(const trn_norm_in_t *nin)
{
    return !nin || (nin->ss && nin->nss > 0 && nin->dim > 0);
}

extern "C" lisa_rc_t
trn_linear_fwd_norm(trn_blas_t *b, float *y_f32, trn_bf16_t *y_bf16,
                    const trn_bf16_t *x, const trn_bf16_t *w, int T, int K,
                    int N, int accumulate, const trn_norm_in_t *nin,
                    const trn_norm_out_t *nout, trn_cuda_stream_t *s)
{
    if (!nin && !nout)
        return trn_linear_fwd(b, y_f32, y_bf16, x, w, T, K, N, accumulate, s);
    s_fold_t f = {};
    TRN_REQUIRE(b && x && w && (y_f32 || y_bf16) && !(nin && nout));
    TRN_REQUIRE(trn_linear_norm_fits(T, K, N, nout != NULL));
    TRN_REQUIRE(s_aligned16(x) && s_aligned16(w) && s_nin_ok(nin));
    if (nin)
        f.in = *nin;
    if (nout) {
        TRN_REQUIRE(y_f32 && nout->xg && nout->w && nout->ss);
        f.out = *nout;
    }
    return s_skinny_fwd<false>(b, y_f32, y_f32 ? NULL : y_bf16, x, w, T, K, N,
                               accumulate, s_take_pf(b), f, trn_stream(s));
}

extern "C" lisa_rc_t
trn_linear_fwd_glu_norm(trn_blas_t *b, trn_bf16_t *a, const trn_bf16_t *x,
                        const trn_bf16_t *w, int T, int K, int I,
                        const trn_norm_in_t *nin, trn_cuda_stream_t *s)
{
    if (!nin)
        return trn_linear_fwd_glu(b, a, x, w, T, K, I, s);
    s_fold_t f = {};
    TRN_REQUIRE(a && x && w && I > 0 && trn_linear_norm_fits(T, K, 2 * I, 0));
    TRN_REQUIRE(s_aligned16(x) && s_aligned16(w) && s_nin_ok(nin));
    f.in = *nin;
    return s_skinny_fwd<true>(b, NULL, a, x, w, T, K, 2 * I, 0, s_take_pf(b), f,
                              trn_stream(s));
}

extern "C" lisa_rc_t
trn_linear_fwd_res(trn_blas_t *b, float *y, const float *res,
                   const trn_bf16_t *x, const trn_bf16_t *w, int T, int K,
                   int N, trn_cuda_stream_t *s)
{
    TRN_REQUIRE(b && y && res && x && w && T > 0 && K > 0 && N > 0);
    if (res == y)
        return trn_linear_fwd(b, y, NULL, x, w, T, K, N, 1, s);
    return s_gemm(b, 1, 0, N, T, K, w, K, x, K, y, N, 1, 1.0f, res,
                  trn_stream(s));
}

extern "C" lisa_rc_t
trn_linear_bwd_data(trn_blas_t *b, trn_bf16_t *dx, const trn_bf16_t *dy,
                    const trn_bf16_t *w, int T, int K, int N,
                    trn_cuda_stream_t *s)
{
    TRN_REQUIRE(b && dx && dy && w && T > 0 && K > 0 && N > 0);
    return s_gemm(b, 0, 0, K, T, N, w, K, dy, N, dx, K, 0, 0.0f, NULL,
                  trn_stream(s));
}

extern "C" lisa_rc_t
trn_linear_bwd_weight(trn_blas_t *b, float *dw, const trn_bf16_t *dy,
                      const trn_bf16_t *x, int T, int K, int N, int accumulate,
                      trn_cuda_stream_t *s)
{
    TRN_REQUIRE(b && dw && dy && x && T > 0 && K > 0 && N > 0);
    return s_gemm(b, 0, 1, K, N, T, x, K, dy, N, dw, K, 1,
                  accumulate ? 1.0f : 0.0f, NULL, trn_stream(s));
}

TRN_TRACE_TU(blas)
