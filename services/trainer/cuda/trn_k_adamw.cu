/*
 * trn_k_adamw: gradient norm and the AdamW update on fp32 master weights.
 *
 * The clipping factor is computed on the device from the sum of squares
 * (possibly all-reduced across ranks first), so no host round trip sits
 * between the backward pass and the update.
 */
#include "trn_cuda_common.cuh"

__global__ void
s_sumsq(float *out, const float *x, size_t n)
{
    __shared__ float shm[32];
    float s = 0.0f;
    for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n;
         i += (size_t) gridDim.x * blockDim.x)
        s += x[i] * x[i];
    s = trn_block_sum(s, shm);
    if (threadIdx.x == 0)
        atomicAdd(out, s);
}

extern "C" lisa_rc_t
trn_k_sumsq(float *out, const float *x, size_t n, trn_cuda_stream_t *s)
{
    TRN_REQUIRE(out && x);
    if (n == 0)
        return LISA_OK;
    size_t blocks = n / 1024 + 1;
    if (blocks > 1024)
        blocks = 1024;
    s_sumsq<<<(unsigned) blocks, 256, 0, trn_stream(s)>>>(out, x, n);
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}

__global__ void
s_adamw(float *w, trn_bf16_t *wb, float *m, float *v, const float *grad,
        size_t n, float lr, float b1, float b2, float eps, float wd, float bc1,
        float bc2, float clip, const float *sumsq)
{
    float scale = 1.0f;
    if (clip > 0.0f && sumsq) {
        float norm = sqrtf(*sumsq);
        if (norm > clip)
            scale = clip / (norm + 1e-6f);
    }
    for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n;
         i += (size_t) gridDim.x * blockDim.x) {
        float gr = grad[i] * scale;
        float mi = b1 * m[i] + (1.0f - b1) * gr;
        float vi = b2 * v[i] + (1.0f - b2) * gr * gr;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1, vhat = vi / bc2;
        float wi = w[i] * (1.0f - lr * wd) - lr * mhat / (sqrtf(vhat) + eps);
        w[i] = wi;
        if (wb)
            trn_st(wb + i, wi);
    }
}

extern "C" lisa_rc_t
trn_k_adamw(float *w, trn_bf16_t *wbf16, float *m, float *v, const float *grad,
            size_t n, float lr, float beta1, float beta2, float eps,
            float weight_decay, int step, float clip, const float *sumsq,
            trn_cuda_stream_t *s)
{
    TRN_REQUIRE(w && m && v && grad && step >= 1);
    if (n == 0)
        return LISA_OK;
    float bc1 = 1.0f - powf(beta1, (float) step);
    float bc2 = 1.0f - powf(beta2, (float) step);
    size_t blocks = n / 256 + 1;
    if (blocks > 4096)
        blocks = 4096;
    s_adamw<<<(unsigned) blocks, 256, 0, trn_stream(s)>>>(
        w, wbf16, m, v, grad, n, lr, beta1, beta2, eps, weight_decay, bc1, bc2,
        clip, sumsq);
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}
