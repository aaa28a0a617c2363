/*
 * trn_k_logprob: log-probabilities of chosen tokens from a chunk of logits,
 * with the entropy and, optionally, the gradient w.r.t. the logits.
 *
 * The caller computes logits for a chunk of rows at a time (one matrix
 * product against the LM head), so a long sequence never needs T x V
 * logits in memory. One block per row: a pass for the maximum, a pass for
 * the sum of exponentials (and the entropy's sum of p*z), and, when asked,
 * a pass writing dlogits.
 */
#include "trn_cuda_common.cuh"

#define S_THREADS 512

__global__ void
__launch_bounds__(S_THREADS)
    s_logprob(float *logprob, float *entropy, trn_bf16_t *dlogits,
              const float *logits, const int32_t *target, const float *g,
              const float *ge, int V, float inv_temp)
{
    __shared__ float shm[32];
    int row = blockIdx.x;
    const float *z = logits + (size_t) row * (size_t) V;
    int tgt = target[row];
    if (tgt < 0 || tgt >= V) {
        if (threadIdx.x == 0) {
            logprob[row] = 0.0f;
            if (entropy)
                entropy[row] = 0.0f;
        }
        if (dlogits)
            for (int j = threadIdx.x; j < V; j += blockDim.x)
                trn_st(dlogits + (size_t) row * V + j, 0.0f);
        return;
    }
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        mx = fmaxf(mx, z[j] * inv_temp);
    mx = trn_block_max(mx, shm);
    float se = 0.0f, sz = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float zz = z[j] * inv_temp;
        float e = expf(zz - mx);
        se += e;
        sz += e * zz;
    }
    se = trn_block_sum(se, shm);
    sz = trn_block_sum(sz, shm);
    float lse = mx + logf(se);
    /* H = lse - sum p z */
    float H = lse - sz / se;
    float lp = z[tgt] * inv_temp - lse;
    if (threadIdx.x == 0) {
        logprob[row] = lp;
        if (entropy)
            entropy[row] = H;
    }
    if (!dlogits)
        return;
    float gr = g ? g[row] : 0.0f;
    float gh = ge ? ge[row] : 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float zz = z[j] * inv_temp;
        float p = expf(zz - lse);
        /* d lp / dz_j = 1{j=t} - p_j ; d H / dz_j = -p_j (log p_j + H) */
        float d =
            gr * ((j == tgt ? 1.0f : 0.0f) - p) - gh * p * ((zz - lse) + H);
        trn_st(dlogits + (size_t) row * V + j, d * inv_temp);
    }
}

extern "C" lisa_rc_t
trn_k_logprob(float *logprob, float *entropy, trn_bf16_t *dlogits,
              const float *logits, const int32_t *target, const float *g,
              const float *ge, int rows, int V, float inv_temp,
              trn_cuda_stream_t *s)
{
    TRN_REQUIRE(logprob && logits && target && rows > 0 && V > 0);
    TRN_REQUIRE(inv_temp > 0.0f);
    s_logprob<<<rows, S_THREADS, 0, trn_stream(s)>>>(
        logprob, entropy, dlogits, logits, target, g, ge, V, inv_temp);
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}
