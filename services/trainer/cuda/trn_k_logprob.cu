/*
 * trn_k_logprob: log-probabilities of chosen tokens from a chunk of logits,
 * with the entropy, and the gradient w.r.t. the logits.
 *
 * The caller computes logits for a chunk of rows at a time (one matrix
 * product against the LM head), so a long sequence never needs T x V
 * logits in memory. One block per row, and one pass over the row each
 * way: the forward keeps a running maximum with the sum of exponentials
 * and the sum of p*z rescaled as the maximum grows (online softmax), then
 * the block's threads combine theirs; it writes the log-sum-exp with the
 * log-prob and the entropy, and the backward reads those two instead of
 * making them again, so it only streams the logits in and dlogits out.
 * At a 4k-token sequence of a 152k vocabulary that is two reads of 2.5 GB
 * and one write of 1.2 GB, where a maximum pass, a sum pass and a
 * gradient pass took five reads.
 */
#include "trn_cuda_common.cuh"
#include "trn_cuda_mma.cuh"

#define S_THREADS 512

/* Folds value zz into a running (max m, sum of e^(z-m) s, sum of
 * e^(z-m) z sz). */
__device__ __forceinline__ void
s_online(float &m, float &s, float &sz, float zz)
{
    if (zz > m) {
        float r = __expf(m - zz); /* 0 when m was -inf */
        s *= r;
        sz *= r;
        m = zz;
    }
    float e = __expf(zz - m);
    s += e;
    sz += e * zz;
}

__global__ void
__launch_bounds__(S_THREADS)
    s_logprob(float *logprob, float *entropy, float *lse_out,
              const float *logits, const int32_t *target, int V, float inv_temp)
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
            if (lse_out)
                lse_out[row] = 0.0f;
        }
        return;
    }
    float m = -INFINITY, s = 0.0f, sz = 0.0f;
    if ((V & 3) == 0) { /* rows of whole 16-byte groups */
        const float4 *z4 = reinterpret_cast<const float4 *>(z);
#pragma unroll 2
        for (int j = threadIdx.x; j < V / 4; j += blockDim.x) {
            float4 v = z4[j];
            s_online(m, s, sz, v.x * inv_temp);
            s_online(m, s, sz, v.y * inv_temp);
            s_online(m, s, sz, v.z * inv_temp);
            s_online(m, s, sz, v.w * inv_temp);
        }
    } else {
        for (int j = threadIdx.x; j < V; j += blockDim.x)
            s_online(m, s, sz, z[j] * inv_temp);
    }
    float mx = trn_block_max(m, shm);
    float r = m == -INFINITY ? 0.0f : __expf(m - mx);
    float se = trn_block_sum(s * r, shm);
    float sez = trn_block_sum(sz * r, shm);
    float lse = mx + logf(se);
    if (threadIdx.x == 0) {
        logprob[row] = z[tgt] * inv_temp - lse;
        if (entropy) /* H = lse - sum p z */
            entropy[row] = lse - sez / se;
        if (lse_out)
            lse_out[row] = lse;
    }
}

/* dlogit j of a row whose logit is zj: d lp / dz_j = 1{j=t} - p_j and
 * d H / dz_j = -p_j (log p_j + H), times the loss's gradients w.r.t. lp
 * (gr) and H (gh), and inv_temp. */
__device__ __forceinline__ float
s_dlogit(float zj, int j, int tgt, float lse, float gr, float gh, float H,
         float inv_temp)
{
    float lp = zj * inv_temp - lse;
    float p = __expf(lp);
    float d = gr * ((j == tgt ? 1.0f : 0.0f) - p) - gh * p * (lp + H);
    return d * inv_temp;
}

__global__ void
__launch_bounds__(S_THREADS)
    s_logprob_bwd(trn_bf16_t *dlogits, const float *logits,
                  const int32_t *target, const float *lse_in, const float *ent,
                  const float *g, const float *ge, int V, float inv_temp)
{
    int row = blockIdx.x;
    const float *z = logits + (size_t) row * (size_t) V;
    trn_bf16_t *dz = dlogits + (size_t) row * (size_t) V;
    int tgt = target[row];
    if (tgt < 0 || tgt >= V) {
        for (int j = threadIdx.x; j < V; j += blockDim.x)
            trn_st(dz + j, 0.0f);
        return;
    }
    float lse = lse_in[row];
    float gr = g ? g[row] : 0.0f;
    float gh = ge ? ge[row] : 0.0f;
    float H = ge ? ent[row] : 0.0f;
    if ((V & 3) == 0) {
        const float4 *z4 = reinterpret_cast<const float4 *>(z);
#pragma unroll 2
        for (int j = threadIdx.x; j < V / 4; j += blockDim.x) {
            float4 v = z4[j];
            float d0 = s_dlogit(v.x, 4 * j, tgt, lse, gr, gh, H, inv_temp);
            float d1 = s_dlogit(v.y, 4 * j + 1, tgt, lse, gr, gh, H, inv_temp);
            float d2 = s_dlogit(v.z, 4 * j + 2, tgt, lse, gr, gh, H, inv_temp);
            float d3 = s_dlogit(v.w, 4 * j + 3, tgt, lse, gr, gh, H, inv_temp);
            reinterpret_cast<uint2 *>(dz)[j] =
                make_uint2(trn_pack2(d0, d1), trn_pack2(d2, d3));
        }
    } else {
        for (int j = threadIdx.x; j < V; j += blockDim.x)
            trn_st(dz + j, s_dlogit(z[j], j, tgt, lse, gr, gh, H, inv_temp));
    }
}

extern "C" lisa_rc_t
trn_k_logprob(float *logprob, float *entropy, float *lse, const float *logits,
              const int32_t *target, int rows, int V, float inv_temp,
              trn_cuda_stream_t *s)
{
    TRN_REQUIRE(logprob && logits && target && rows > 0 && V > 0);
    TRN_REQUIRE(inv_temp > 0.0f);
    s_logprob<<<rows, S_THREADS, 0, trn_stream(s)>>>(
        logprob, entropy, lse, logits, target, V, inv_temp);
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}

extern "C" lisa_rc_t
trn_k_logprob_bwd(trn_bf16_t *dlogits, const float *logits,
                  const int32_t *target, const float *lse, const float *entropy,
                  const float *g, const float *ge, int rows, int V,
                  float inv_temp, trn_cuda_stream_t *s)
{
    TRN_REQUIRE(dlogits && logits && target && lse && rows > 0 && V > 0);
    TRN_REQUIRE(inv_temp > 0.0f && (!ge || entropy));
    s_logprob_bwd<<<rows, S_THREADS, 0, trn_stream(s)>>>(
        dlogits, logits, target, lse, entropy, g, ge, V, inv_temp);
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}
