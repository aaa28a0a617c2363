/*
 * trn_k_norm: RMSNorm forward and backward, one warp per row.
 *
 * The same kernels serve the model's hidden-size norms (rows = tokens) and
 * Qwen3's per-head q/k norms (rows = tokens x heads, dim = head_dim), which
 * is why rows are addressed through strides.
 */
#include "trn_cuda_common.cuh"

#define S_WARPS 8

__device__ __forceinline__ float
s_in(const float *f, const trn_bf16_t *b, size_t i)
{
    return f ? f[i] : trn_ld(b + i);
}

/* Offset of row r: rows come `group` to a line of `stride` values, each
 * `dim` wide (group 1: plain strided rows). */
__device__ __forceinline__ size_t
s_row(int r, int group, int stride, int dim)
{
    return (size_t) (r / group) * (size_t) stride +
           (size_t) (r % group) * (size_t) dim;
}

__global__ void
s_rmsnorm_fwd(trn_bf16_t *out, int out_stride, float *rstd, const float *in_f,
              const trn_bf16_t *in_b, int in_stride, const trn_bf16_t *w,
              int rows, int dim, int group, float eps)
{
    int lane = threadIdx.x & 31;
    int row = blockIdx.x * S_WARPS + (threadIdx.x >> 5);
    if (row >= rows)
        return;
    size_t base = s_row(row, group, in_stride, dim);
    float ss = 0.0f;
    for (int j = lane; j < dim; j += 32) {
        float x = s_in(in_f, in_b, base + (size_t) j);
        ss += x * x;
    }
    ss = trn_warp_sum(ss);
    float r = rsqrtf(ss / (float) dim + eps);
    if (lane == 0 && rstd)
        rstd[row] = r;
    trn_bf16_t *o = out + s_row(row, group, out_stride, dim);
    for (int j = lane; j < dim; j += 32) {
        float n = trn_round_bf16(s_in(in_f, in_b, base + (size_t) j) * r);
        trn_st(o + j, trn_ld(w + j) * n);
    }
}

/* The same for few long rows (decode steps): one block per row, each
 * thread holding up to S_ROW_MAXE of the row's values in registers, so the
 * row is read once. */
#define S_ROW_THREADS 256
#define S_ROW_MAXE    16

__global__ void
__launch_bounds__(S_ROW_THREADS)
    s_rmsnorm_row(trn_bf16_t *out, int out_stride, float *rstd,
                  const float *in_f, const trn_bf16_t *in_b, int in_stride,
                  const trn_bf16_t *w, int dim, float eps)
{
    __shared__ float shm[32];
    int row = blockIdx.x;
    size_t base = (size_t) row * (size_t) in_stride;
    float xv[S_ROW_MAXE], wv[S_ROW_MAXE];
    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < S_ROW_MAXE; e++) {
        int j = threadIdx.x + e * S_ROW_THREADS;
        xv[e] = j < dim ? s_in(in_f, in_b, base + (size_t) j) : 0.0f;
        wv[e] = j < dim ? trn_ld(w + j) : 0.0f;
        ss += xv[e] * xv[e];
    }
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

extern "C" lisa_rc_t
trn_k_rmsnorm_fwd(trn_bf16_t *out, int out_stride, float *rstd,
                  const float *in_f32, const trn_bf16_t *in_bf16, int in_stride,
                  const trn_bf16_t *w, int rows, int dim, int group, float eps,
                  trn_cuda_stream_t *s)
{
    TRN_REQUIRE(out && w && (in_f32 || in_bf16) && rows > 0 && dim > 0);
    TRN_REQUIRE(group >= 1 && rows % group == 0);
    TRN_REQUIRE(in_stride >= dim * group && out_stride >= dim * group);
    if (group == 1 && dim >= 1024 && dim <= S_ROW_THREADS * S_ROW_MAXE &&
        rows <= 256) {
        s_rmsnorm_row<<<rows, S_ROW_THREADS, 0, trn_stream(s)>>>(
            out, out_stride, rstd, in_f32, in_bf16, in_stride, w, dim, eps);
        TRN_LAUNCH_CHECK();
        return LISA_OK;
    }
    s_rmsnorm_fwd<<<TRN_CEIL_DIV(rows, S_WARPS), 32 * S_WARPS, 0,
                    trn_stream(s)>>>(out, out_stride, rstd, in_f32, in_bf16,
                                     in_stride, w, rows, dim, group, eps);
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}

/* Grid-stride over rows; each block sums its dw contribution in shared
 * memory and adds it to the global dw once. */
__global__ void
s_rmsnorm_bwd(float *dx_f, trn_bf16_t *dx_b, int dx_stride, int accumulate,
              float *dw, const trn_bf16_t *dout, int dout_stride,
              const float *in_f, const trn_bf16_t *in_b, int in_stride,
              const trn_bf16_t *w, const float *rstd, int rows, int dim,
              int group)
{
    extern __shared__ float s_dw[];
    int lane = threadIdx.x & 31;
    for (int j = threadIdx.x; j < dim; j += blockDim.x)
        s_dw[j] = 0.0f;
    __syncthreads();
    int warps_total = gridDim.x * S_WARPS;
    for (int row = blockIdx.x * S_WARPS + (threadIdx.x >> 5); row < rows;
         row += warps_total) {
        size_t ib = s_row(row, group, in_stride, dim);
        size_t gb = s_row(row, group, dout_stride, dim);
        float r = rstd[row];
        float dot = 0.0f;
        for (int j = lane; j < dim; j += 32) {
            float n = s_in(in_f, in_b, ib + (size_t) j) * r;
            float g = trn_ld(dout + gb + (size_t) j);
            dot += g * trn_ld(w + j) * n;
            atomicAdd(&s_dw[j], g * trn_round_bf16(n));
        }
        dot = trn_warp_sum(dot) / (float) dim;
        size_t ob = s_row(row, group, dx_stride, dim);
        for (int j = lane; j < dim; j += 32) {
            float n = s_in(in_f, in_b, ib + (size_t) j) * r;
            float g = trn_ld(dout + gb + (size_t) j) * trn_ld(w + j);
            float d = r * (g - n * dot);
            if (dx_f)
                dx_f[ob + (size_t) j] =
                    accumulate ? dx_f[ob + (size_t) j] + d : d;
            else
                trn_st(dx_b + ob + (size_t) j, d);
        }
    }
    __syncthreads();
    for (int j = threadIdx.x; j < dim; j += blockDim.x)
        atomicAdd(&dw[j], s_dw[j]);
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
    int blocks = TRN_CEIL_DIV(rows, S_WARPS);
    if (blocks > 264)
        blocks = 264; /* two waves of 132 multiprocessors */
    size_t shm = (size_t) dim * sizeof(float);
    s_rmsnorm_bwd<<<blocks, 32 * S_WARPS, shm, trn_stream(s)>>>(
        dx_f32, dx_bf16, dx_stride, accumulate, dw, dout, dout_stride, in_f32,
        in_bf16, in_stride, w, rstd, rows, dim, group);
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}
