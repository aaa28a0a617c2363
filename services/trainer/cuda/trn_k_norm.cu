/*
 * trn_k_norm: RMSNorm forward and backward, one warp per row.
 *
 * The same kernels serve the model's hidden-size norms (rows = tokens) and
 * Qwen3's per-head q/k norms (rows = tokens x heads, dim = head_dim), which
 * is why rows are addressed through strides.
 *
 * The norms only move memory, so their speed is their bandwidth, and a
 * warp must have its whole row in flight at once: the forward's lanes load
 * all their values of a row into registers before using any (lane l the
 * values l, l+32, ..., summed in the same order as ever, so the results are
 * the same bits); the backward's lanes load groups of four (16-byte fp32 /
 * 8-byte bf16 accesses) where dim, strides and pointers allow, keep each
 * warp's dw in its own slice of shared memory (no atomics per row) and add
 * the block's sum to dw once. Other shapes take the scalar kernels. All
 * compute the same formula with the same bf16 rounding points; the
 * backward's sums may run in another order. trn_k_rmsnorm_fold makes the
 * input side of a norm folded into the product after it (decode steps).
 */
#include "trn_cuda_common.cuh"
#include "trn_cuda_trace.cuh"

#include <stdint.h>

#define S_WARPS 8

/* Offset of row r: rows come `group` to a line of `stride` values, each
 * `dim` wide (group 1: plain strided rows). */
__device__ __forceinline__ size_t
s_row(int r, int group, int stride, int dim)
{
    return (size_t) (r / group) * (size_t) stride +
           (size_t) (r % group) * (size_t) dim;
}

__device__ __forceinline__ float
s_ld1(const float *p)
{
    return *p;
}

__device__ __forceinline__ float
s_ld1(const trn_bf16_t *p)
{
    return trn_ld(p);
}

/* Four consecutive values: one 16-byte (fp32) or 8-byte (bf16) load. */
__device__ __forceinline__ void
s_ld4(const float *p, float v[4])
{
    float4 q = *reinterpret_cast<const float4 *>(p);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
}

__device__ __forceinline__ void
s_unpack4(uint2 q, float v[4])
{
    v[0] = __uint_as_float(q.x << 16);
    v[1] = __uint_as_float(q.x & 0xffff0000u);
    v[2] = __uint_as_float(q.y << 16);
    v[3] = __uint_as_float(q.y & 0xffff0000u);
}

__device__ __forceinline__ void
s_ld4(const trn_bf16_t *p, float v[4])
{
    s_unpack4(*reinterpret_cast<const uint2 *>(p), v);
}

/* Four values rounded to bf16 (as trn_st rounds one) and stored at once. */
__device__ __forceinline__ void
s_st4(trn_bf16_t *p, const float v[4])
{
    uint2 q;
    q.x = (uint32_t) __bfloat16_as_ushort(__float2bfloat16_rn(v[0])) |
          (uint32_t) __bfloat16_as_ushort(__float2bfloat16_rn(v[1])) << 16;
    q.y = (uint32_t) __bfloat16_as_ushort(__float2bfloat16_rn(v[2])) |
          (uint32_t) __bfloat16_as_ushort(__float2bfloat16_rn(v[3])) << 16;
    *reinterpret_cast<uint2 *>(p) = q;
}

/* ---- forward ----------------------------------------------------------- */

/* Scalar kernel: any dim, stride and alignment. */
template <typename In>
__global__ void
s_fwd_scalar(trn_bf16_t *out, int out_stride, float *rstd, const In *in,
             int in_stride, const trn_bf16_t *w, int rows, int dim, int group,
             float eps)
{
    int lane = threadIdx.x & 31;
    int row = blockIdx.x * S_WARPS + (threadIdx.x >> 5);
    if (row >= rows)
        return;
    const In *x = in + s_row(row, group, in_stride, dim);
    float ss = 0.0f;
    for (int j = lane; j < dim; j += 32) {
        float v = s_ld1(x + j);
        ss += v * v;
    }
    ss = trn_warp_sum(ss);
    float r = rsqrtf(ss / (float) dim + eps);
    if (lane == 0 && rstd)
        rstd[row] = r;
    trn_bf16_t *o = out + s_row(row, group, out_stride, dim);
    for (int j = lane; j < dim; j += 32) {
        float n = trn_round_bf16(s_ld1(x + j) * r);
        trn_st(o + j, trn_ld(w + j) * n);
    }
}

/* Register kernel: lane l holds the row's values l, l+32, ... (at most E
 * of them), all loaded at once, so a row costs one memory latency; the sum
 * of squares runs in the scalar kernel's order (and trn_k_qk_fwd's), so
 * the results are the same bits. The products are formed before any store:
 * a weight load after a store that might alias it would wait for it. A
 * block is blockDim.x / 32 rows. */
template <typename In, int E>
__global__ void __launch_bounds__(256)
    s_fwd_regs(trn_bf16_t *out, int out_stride, float *rstd, const In *in,
               int in_stride, const trn_bf16_t *w, int rows, int dim, int group,
               float eps)
{
    int lane = threadIdx.x & 31;
    int row = blockIdx.x * (int) (blockDim.x >> 5) + (int) (threadIdx.x >> 5);
    if (row >= rows)
        return;
    const In *x = in + s_row(row, group, in_stride, dim);
    float v[E];
#pragma unroll
    for (int e = 0; e < E; e++) {
        int j = lane + 32 * e;
        v[e] = j < dim ? s_ld1(x + j) : 0.0f;
    }
    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < E; e++)
        ss += v[e] * v[e]; /* zeros past dim add nothing */
    ss = trn_warp_sum(ss);
    float r = rsqrtf(ss / (float) dim + eps);
#pragma unroll
    for (int e = 0; e < E; e++) {
        int j = lane + 32 * e;
        if (j < dim)
            v[e] = trn_ld(w + j) * trn_round_bf16(v[e] * r);
    }
    if (lane == 0 && rstd)
        rstd[row] = r;
    trn_bf16_t *o = out + s_row(row, group, out_stride, dim);
#pragma unroll
    for (int e = 0; e < E; e++) {
        int j = lane + 32 * e;
        if (j < dim)
            trn_st(o + j, v[e]);
    }
}

/* Few long rows (decode steps: a row per token of the batch): a block of
 * S_ROW_THREADS per row, thread i holding values i, i + S_ROW_THREADS, ...
 * (at most S_ROW_MAXE), so a row's loads spread over a whole block.
 * Launched to overlap the kernel before it: the weight is read first. */
#define S_ROW_THREADS 256
#define S_ROW_MAXE    16

/* A row kernel's start: this thread's weights (wv) before the wait for
 * the kernel before, its values of the row (xv) after; returns the sum
 * of their squares. */
template <typename In>
__device__ __forceinline__ float
s_row_in(float (&xv)[S_ROW_MAXE], float (&wv)[S_ROW_MAXE], const In *x,
         const trn_bf16_t *w, int dim, trn_tr_scope &tr)
{
#pragma unroll
    for (int e = 0; e < S_ROW_MAXE; e++) {
        int j = threadIdx.x + e * S_ROW_THREADS;
        wv[e] = j < dim ? trn_ld(w + j) : 0.0f;
    }
    trn_pdl_enter(); /* the weight before, the row after */
    tr.waited();
    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < S_ROW_MAXE; e++) {
        int j = threadIdx.x + e * S_ROW_THREADS;
        xv[e] = j < dim ? s_ld1(x + j) : 0.0f;
        ss += xv[e] * xv[e];
    }
    return ss;
}

template <typename In>
__global__ void
__launch_bounds__(S_ROW_THREADS)
    s_fwd_row(trn_bf16_t *out, int out_stride, float *rstd, const In *in,
              int in_stride, const trn_bf16_t *w, int dim, float eps)
{
    __shared__ float shm[32];
    trn_tr_scope tr(TRN_TR_NORM_ROW, (unsigned) dim, 0);
    int row = blockIdx.x;
    const In *x = in + (size_t) row * (size_t) in_stride;
    float xv[S_ROW_MAXE], wv[S_ROW_MAXE];
    float ss = s_row_in<In>(xv, wv, x, w, dim, tr);
    ss = trn_block_sum(ss, shm);
    float r = rsqrtf(ss / (float) dim + eps);
    if (threadIdx.x == 0 && rstd)
        rstd[row] = r;
    trn_bf16_t *o = out + (size_t) row * (size_t) out_stride;
#pragma unroll
    for (int e = 0; e < S_ROW_MAXE; e++) {
        int j = threadIdx.x + e * S_ROW_THREADS;
        if (j < dim)
            trn_st(o + j, wv[e] * trn_round_bf16(xv[e] * r));
    }
}

/* Values per lane the register kernel is built for: the smallest that
 * holds dim / 32 is used; longer rows take the scalar kernel. */
#define S_E_CASES(X)                                                           \
    X(1) X(2) X(4) X(8) X(16) X(32) X(48) X(64) X(80) X(96) X(128)

static int
s_e(int dim)
{
    int need = TRN_CEIL_DIV(dim, 32);
    static const int es[] = {1, 2, 4, 8, 16, 32, 48, 64, 80, 96, 128};
    for (size_t i = 0; i < sizeof es / sizeof es[0]; i++)
        if (need <= es[i])
            return es[i];
    return 0;
}

template <typename In>
static lisa_rc_t
s_fwd(trn_bf16_t *out, int out_stride, float *rstd, const In *in, int in_stride,
      const trn_bf16_t *w, int rows, int dim, int group, float eps,
      cudaStream_t st)
{
    if (group == 1 && rows <= 256 && dim >= 1024 &&
        dim <= S_ROW_THREADS * S_ROW_MAXE) { /* decode steps */
        TRN_CUDA_TRY(trn_launch_pdl(s_fwd_row<In>, dim3((unsigned) rows),
                                    dim3(S_ROW_THREADS), 0, st, out, out_stride,
                                    rstd, in, in_stride, w, dim, eps));
        return LISA_OK;
    }
    /* few rows: a warp per block, to spread the rows over the
     * multiprocessors */
    int wpb = rows < 1024 ? 1 : 4;
    unsigned blocks = (unsigned) TRN_CEIL_DIV(rows, wpb);
    switch (s_e(dim)) {
#define S_CASE(E)                                                              \
    case E:                                                                    \
        s_fwd_regs<In, E><<<blocks, 32 * wpb, 0, st>>>(                        \
            out, out_stride, rstd, in, in_stride, w, rows, dim, group, eps);   \
        break;
        S_E_CASES(S_CASE)
#undef S_CASE
    default:
        s_fwd_scalar<In><<<TRN_CEIL_DIV(rows, S_WARPS), 32 * S_WARPS, 0, st>>>(
            out, out_stride, rstd, in, in_stride, w, rows, dim, group, eps);
    }
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}

extern "C" lisa_rc_t
trn_k_rmsnorm_fwd(trn_bf16_t *out, int out_stride, float *rstd,
                  const float *in_f32, const trn_bf16_t *in_bf16, int in_stride,
                  const trn_bf16_t *w, int rows, int dim, int group, float eps,
                  trn_cuda_stream_t *s)
{
    TRN_REQUIRE(out && w && (in_f32 || in_bf16) && rows > 0 && dim > 0);
    TRN_REQUIRE(group >= 1 && rows % group == 0);
    TRN_REQUIRE(in_stride >= dim * group && out_stride >= dim * group);
    if (in_f32)
        return s_fwd<float>(out, out_stride, rstd, in_f32, in_stride, w, rows,
                            dim, group, eps, trn_stream(s));
    return s_fwd<trn_bf16_t>(out, out_stride, rstd, in_bf16, in_stride, w, rows,
                             dim, group, eps, trn_stream(s));
}

/* The norm-in side of a norm folded into the next product (decode steps:
 * the first layer's, whose input no product gives): a block a row as in
 * s_fwd_row, xg = bf16(x * w) and ss[row] = the row's sum of squares (the
 * block's fixed order: the same bits run to run). The first S_ROW_MAXE
 * weights a thread are read before the wait for the kernel before; a
 * longer row's rest after it. */
__global__ void
__launch_bounds__(S_ROW_THREADS)
    s_fold_row(trn_bf16_t *xg, float *ss, const float *x, const trn_bf16_t *w,
               int dim)
{
    __shared__ float shm[32];
    trn_tr_scope tr(TRN_TR_NORM_ROW, (unsigned) dim, 1);
    const float *xr = x + (size_t) blockIdx.x * (size_t) dim;
    trn_bf16_t *o = xg + (size_t) blockIdx.x * (size_t) dim;
    float xv[S_ROW_MAXE], wv[S_ROW_MAXE];
    float sq = s_row_in<float>(xv, wv, xr, w, dim, tr);
    for (int j = threadIdx.x + S_ROW_MAXE * S_ROW_THREADS; j < dim;
         j += S_ROW_THREADS) {
        float v = xr[j];
        sq += v * v;
        trn_st(o + j, v * trn_ld(w + j));
    }
#pragma unroll
    for (int e = 0; e < S_ROW_MAXE; e++) {
        int j = threadIdx.x + e * S_ROW_THREADS;
        if (j < dim)
            trn_st(o + j, xv[e] * wv[e]);
    }
    sq = trn_block_sum(sq, shm);
    if (threadIdx.x == 0)
        ss[blockIdx.x] = sq;
}

extern "C" lisa_rc_t
trn_k_rmsnorm_fold(trn_bf16_t *xg, float *ss, const float *x,
                   const trn_bf16_t *w, int rows, int dim, trn_cuda_stream_t *s)
{
    TRN_REQUIRE(xg && ss && x && w && rows > 0 && dim > 0);
    TRN_CUDA_TRY(trn_launch_pdl(s_fold_row, dim3((unsigned) rows),
                                dim3(S_ROW_THREADS), 0, trn_stream(s), xg, ss,
                                x, w, dim));
    return LISA_OK;
}

/* ---- backward ---------------------------------------------------------- */

/* Where a backward writes dx: fp32 (accumulating or not) with an optional
 * bf16 copy of the result, or bf16. */
typedef struct {
    float *f;
    trn_bf16_t *b;
    trn_bf16_t *copy;
    int stride;
    int accumulate;
} s_dx_t;

/* Groups of four per lane the vector kernel is built for: the smallest
 * that holds dim / 128 is used; longer rows take the scalar kernel. */
#define S_NV_MAX      32
#define S_NV_CASES(X) X(1) X(2) X(4) X(8) X(16) X(20) X(24) X(S_NV_MAX)

static int
s_nv(int dim)
{
    int need = TRN_CEIL_DIV(dim / 4, 32);
    static const int nvs[] = {1, 2, 4, 8, 16, 20, 24, S_NV_MAX};
    for (size_t i = 0; i < sizeof nvs / sizeof nvs[0]; i++)
        if (need <= nvs[i])
            return nvs[i];
    return 0;
}

static int
s_aligned(const void *p, size_t a)
{
    return ((uintptr_t) p % a) == 0;
}

/* Whether the vector kernel can address every row of this shape (rows
 * of a line start dim apart, so they are aligned as dim is). */
static int
s_vec_ok(int dim, int in_stride, int out_stride)
{
    return dim % 4 == 0 && in_stride % 4 == 0 && out_stride % 4 == 0 &&
           s_nv(dim) > 0;
}

/* Scalar kernel: grid-stride over rows; each block sums its dw
 * contribution in shared memory and adds it to the global dw once. */
template <typename In>
__global__ void
s_bwd_scalar(s_dx_t dx, float *dw, const trn_bf16_t *dout, int dout_stride,
             const In *in, int in_stride, const trn_bf16_t *w,
             const float *rstd, int rows, int dim, int group)
{
    extern __shared__ float s_dw[];
    int lane = threadIdx.x & 31;
    for (int j = threadIdx.x; j < dim; j += blockDim.x)
        s_dw[j] = 0.0f;
    __syncthreads();
    int warps_total = gridDim.x * S_WARPS;
    for (int row = blockIdx.x * S_WARPS + (threadIdx.x >> 5); row < rows;
         row += warps_total) {
        const In *x = in + s_row(row, group, in_stride, dim);
        const trn_bf16_t *gr = dout + s_row(row, group, dout_stride, dim);
        float r = rstd[row];
        float dot = 0.0f;
        for (int j = lane; j < dim; j += 32) {
            float n = s_ld1(x + j) * r;
            float g = trn_ld(gr + j);
            dot += g * trn_ld(w + j) * n;
            atomicAdd(&s_dw[j], g * trn_round_bf16(n));
        }
        dot = trn_warp_sum(dot) / (float) dim;
        size_t ob = s_row(row, group, dx.stride, dim);
        for (int j = lane; j < dim; j += 32) {
            float n = s_ld1(x + j) * r;
            float g = trn_ld(gr + j) * trn_ld(w + j);
            float d = r * (g - n * dot);
            if (dx.f) {
                float *p = dx.f + ob + (size_t) j;
                float v = dx.accumulate ? *p + d : d;
                *p = v;
                if (dx.copy)
                    trn_st(dx.copy + ob + (size_t) j, v);
            } else {
                trn_st(dx.b + ob + (size_t) j, d);
            }
        }
    }
    __syncthreads();
    for (int j = threadIdx.x; j < dim; j += blockDim.x)
        atomicAdd(&dw[j], s_dw[j]);
}

/* Vector kernel: a warp per row (grid-stride), the row's x, dout and the
 * weights in registers (loaded at once; the old dx too, before any store,
 * as in s_fwd_vec); warp w of a block sums its dw in shared floats
 * [w*dim, (w+1)*dim), lane l owning the groups of four l, l+32, ..., so no
 * atomics are needed until the block adds its sum to dw. */
template <typename In, int NV>
__global__ void __launch_bounds__(256)
    s_bwd_vec(s_dx_t dx, float *dw, const trn_bf16_t *dout, int dout_stride,
              const In *in, int in_stride, const trn_bf16_t *w,
              const float *rstd, int rows, int dim, int group)
{
    extern __shared__ float4 s_acc[];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int wpb = blockDim.x >> 5;
    int nc = dim >> 2;
    float4 *acc = s_acc + (size_t) warp * nc;
    for (int c = lane; c < nc; c += 32)
        acc[c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int row = blockIdx.x * wpb + warp; row < rows;
         row += gridDim.x * wpb) {
        const In *x = in + s_row(row, group, in_stride, dim);
        const trn_bf16_t *gr = dout + s_row(row, group, dout_stride, dim);
        float r = rstd[row];
        float v[NV][4];
        uint2 gp[NV], wp[NV];
#pragma unroll
        for (int k = 0; k < NV; k++) {
            int c = lane + 32 * k;
            if (c < nc) {
                s_ld4(x + 4 * c, v[k]);
                gp[k] = *reinterpret_cast<const uint2 *>(gr + 4 * c);
                wp[k] = *reinterpret_cast<const uint2 *>(w + 4 * c);
            } else {
                v[k][0] = v[k][1] = v[k][2] = v[k][3] = 0.0f;
                gp[k] = wp[k] = make_uint2(0u, 0u);
            }
        }
        float dot = 0.0f;
#pragma unroll
        for (int k = 0; k < NV; k++) {
            int c = lane + 32 * k;
            if (c < nc) {
                float wv[4], g[4];
                s_unpack4(wp[k], wv);
                s_unpack4(gp[k], g);
#pragma unroll
                for (int e = 0; e < 4; e++)
                    dot += g[e] * wv[e] * (v[k][e] * r);
            }
        }
        dot = trn_warp_sum(dot) / (float) dim;
        /* d into v, and dw; then the old dx, loaded all at once; then the
         * stores (loads after stores would each wait a latency) */
#pragma unroll
        for (int k = 0; k < NV; k++) {
            int c = lane + 32 * k;
            if (c < nc) {
                float wv[4], g[4];
                s_unpack4(wp[k], wv);
                s_unpack4(gp[k], g);
                float4 a = acc[c];
                float *ap = &a.x;
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float n = v[k][e] * r;
                    v[k][e] = r * (g[e] * wv[e] - n * dot);
                    ap[e] += g[e] * trn_round_bf16(n);
                }
                acc[c] = a;
            }
        }
        size_t ob = s_row(row, group, dx.stride, dim);
        if (dx.f && dx.accumulate) {
#pragma unroll
            for (int k = 0; k < NV; k++) {
                int c = lane + 32 * k;
                if (c < nc) {
                    float4 o = *reinterpret_cast<const float4 *>(
                        dx.f + ob + (size_t) 4 * c);
                    v[k][0] += o.x, v[k][1] += o.y, v[k][2] += o.z,
                        v[k][3] += o.w;
                }
            }
        }
#pragma unroll
        for (int k = 0; k < NV; k++) {
            int c = lane + 32 * k;
            if (c < nc) {
                if (dx.f) {
                    *reinterpret_cast<float4 *>(dx.f + ob + (size_t) 4 * c) =
                        make_float4(v[k][0], v[k][1], v[k][2], v[k][3]);
                    if (dx.copy)
                        s_st4(dx.copy + ob + (size_t) 4 * c, v[k]);
                } else {
                    s_st4(dx.b + ob + (size_t) 4 * c, v[k]);
                }
            }
        }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < nc; c += blockDim.x) {
        float4 t = s_acc[c];
        for (int i = 1; i < wpb; i++) {
            float4 u = s_acc[(size_t) i * nc + c];
            t.x += u.x, t.y += u.y, t.z += u.z, t.w += u.w;
        }
        atomicAdd(&dw[4 * c], t.x);
        atomicAdd(&dw[4 * c + 1], t.y);
        atomicAdd(&dw[4 * c + 2], t.z);
        atomicAdd(&dw[4 * c + 3], t.w);
    }
}

#define S_BWD_SMEM 49152 /* shared bytes a block may take without opt-in */

template <typename In, int NV>
static lisa_rc_t
s_bwd_vec_launch(const s_dx_t &dx, float *dw, const trn_bf16_t *dout,
                 int dout_stride, const In *in, int in_stride,
                 const trn_bf16_t *w, const float *rstd, int rows, int dim,
                 int group, cudaStream_t st)
{
    int wpb = S_BWD_SMEM / (dim * 4);
    if (wpb > S_WARPS)
        wpb = S_WARPS;
    if (wpb > rows)
        wpb = rows;
    size_t shm = (size_t) wpb * (size_t) dim * sizeof(float);
    int dev = 0, sms = 0, per_sm = 0;
    TRN_CUDA_TRY(cudaGetDevice(&dev));
    TRN_CUDA_TRY(
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    TRN_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, s_bwd_vec<In, NV>, 32 * wpb, shm));
    if (per_sm < 1)
        per_sm = 1;
    /* all blocks resident at once; each sums its dw once */
    int blocks = TRN_CEIL_DIV(rows, wpb);
    if (blocks > sms * per_sm)
        blocks = sms * per_sm;
    s_bwd_vec<In, NV><<<blocks, 32 * wpb, shm, st>>>(
        dx, dw, dout, dout_stride, in, in_stride, w, rstd, rows, dim, group);
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}

template <typename In>
static lisa_rc_t
s_bwd(const s_dx_t &dx, float *dw, const trn_bf16_t *dout, int dout_stride,
      const In *in, int in_stride, const trn_bf16_t *w, const float *rstd,
      int rows, int dim, int group, cudaStream_t st)
{
    int vec = s_vec_ok(dim, in_stride, dout_stride) && dx.stride % 4 == 0 &&
              s_aligned(in, 4 * sizeof(In)) && s_aligned(dout, 8) &&
              s_aligned(w, 8) &&
              (dx.f ? s_aligned(dx.f, 16) : s_aligned(dx.b, 8)) &&
              (!dx.copy || s_aligned(dx.copy, 8)) && dim * 4 <= S_BWD_SMEM;
    if (vec) {
        switch (s_nv(dim)) {
#define S_CASE(NV)                                                             \
    case NV:                                                                   \
        return s_bwd_vec_launch<In, NV>(dx, dw, dout, dout_stride, in,         \
                                        in_stride, w, rstd, rows, dim, group,  \
                                        st);
            S_NV_CASES(S_CASE)
#undef S_CASE
        default:
            return LISA_ERR;
        }
    }
    int blocks = TRN_CEIL_DIV(rows, S_WARPS);
    if (blocks > 264)
        blocks = 264; /* two waves of 132 multiprocessors */
    size_t shm = (size_t) dim * sizeof(float);
    if (shm > S_BWD_SMEM)
        TRN_CUDA_TRY(cudaFuncSetAttribute(
            s_bwd_scalar<In>, cudaFuncAttributeMaxDynamicSharedMemorySize,
            (int) shm));
    s_bwd_scalar<In><<<blocks, 32 * S_WARPS, shm, st>>>(
        dx, dw, dout, dout_stride, in, in_stride, w, rstd, rows, dim, group);
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}

static lisa_rc_t
s_bwd_any(const s_dx_t &dx, float *dw, const trn_bf16_t *dout, int dout_stride,
          const float *in_f32, const trn_bf16_t *in_bf16, int in_stride,
          const trn_bf16_t *w, const float *rstd, int rows, int dim, int group,
          trn_cuda_stream_t *s)
{
    if (in_f32)
        return s_bwd<float>(dx, dw, dout, dout_stride, in_f32, in_stride, w,
                            rstd, rows, dim, group, trn_stream(s));
    return s_bwd<trn_bf16_t>(dx, dw, dout, dout_stride, in_bf16, in_stride, w,
                             rstd, rows, dim, group, trn_stream(s));
}

extern "C" lisa_rc_t
trn_k_rmsnorm_bwd(float *dx_f32, trn_bf16_t *dx_bf16, int dx_stride,
                  int accumulate, float *dw, const trn_bf16_t *dout,
                  int dout_stride, const float *in_f32,
                  const trn_bf16_t *in_bf16, int in_stride, const trn_bf16_t *w,
                  const float *rstd, int rows, int dim, int group,
                  trn_cuda_stream_t *s)
{
    TRN_REQUIRE((dx_f32 || dx_bf16) && dw && dout && w && rstd);
    TRN_REQUIRE((in_f32 || in_bf16) && rows > 0 && dim > 0 && dim <= 16384);
    TRN_REQUIRE(group >= 1 && rows % group == 0);
    s_dx_t dx = {dx_f32, dx_f32 ? NULL : dx_bf16, NULL, dx_stride, accumulate};
    return s_bwd_any(dx, dw, dout, dout_stride, in_f32, in_bf16, in_stride, w,
                     rstd, rows, dim, group, s);
}

extern "C" lisa_rc_t
trn_k_rmsnorm_bwd_resid(float *dx, trn_bf16_t *dx_copy, int dx_stride,
                        float *dw, const trn_bf16_t *dout, int dout_stride,
                        const float *in, int in_stride, const trn_bf16_t *w,
                        const float *rstd, int rows, int dim,
                        trn_cuda_stream_t *s)
{
    TRN_REQUIRE(dx && dw && dout && in && w && rstd);
    TRN_REQUIRE(rows > 0 && dim > 0 && dim <= 16384);
    s_dx_t d = {dx, NULL, dx_copy, dx_stride, 1};
    return s_bwd_any(d, dw, dout, dout_stride, in, NULL, in_stride, w, rstd,
                     rows, dim, 1, s);
}

TRN_TRACE_TU(norm)
