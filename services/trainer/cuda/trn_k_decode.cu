/*
 * trn_k_decode: the generation-side kernels: writing keys and values into
 * the KV cache, attention of new tokens over their cache, and sampling.
 *
 * Decode attention: one block of 4 warps per (new token, query head); each
 * warp walks a quarter of the cached positions with an online softmax,
 * lanes holding D/32 dimensions each, and the four partial results are
 * merged in shared memory. Prefill tokens use the same kernel (each sees
 * positions up to its own), which is simple and fast enough for agent
 * turns; training uses the tiled kernel in trn_k_attn.cu.
 *
 * Sampling: one block per row. Temperature scales the logits; top-k and
 * top-p become one probability threshold found by bisection (no sort over
 * the vocabulary); the token is drawn by inverse CDF in vocabulary order
 * with a uniform from a counter-based generator keyed by the row's seed.
 */
#include "trn_cuda_common.cuh"

#define S_WARPS 4
#define S_MAXE  4 /* dimensions per lane: D <= 128 */

__global__ void
s_kv_write(trn_bf16_t *ck, trn_bf16_t *cv, const trn_bf16_t *k,
           const trn_bf16_t *v, int stride, const int32_t *slot,
           const int32_t *pos, int T, int HkD, int max_len)
{
    size_t total = (size_t) T * (size_t) HkD;
    for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < total;
         i += (size_t) gridDim.x * blockDim.x) {
        int t = (int) (i / (size_t) HkD), c = (int) (i % (size_t) HkD);
        size_t dst = ((size_t) slot[t] * (size_t) max_len + (size_t) pos[t]) *
                         (size_t) HkD +
                     (size_t) c;
        ck[dst] = k[(size_t) t * (size_t) stride + (size_t) c];
        cv[dst] = v[(size_t) t * (size_t) stride + (size_t) c];
    }
}

extern "C" lisa_rc_t
trn_k_kv_write(trn_bf16_t *cache_k, trn_bf16_t *cache_v, const trn_bf16_t *k,
               const trn_bf16_t *v, int stride, const int32_t *slot,
               const int32_t *pos, int T, int HkD, int max_len,
               trn_cuda_stream_t *s)
{
    TRN_REQUIRE(cache_k && cache_v && k && v && slot && pos && T > 0);
    TRN_REQUIRE(HkD > 0 && max_len > 0);
    size_t total = (size_t) T * (size_t) HkD;
    unsigned blocks =
        (unsigned) (total / 256 + 1 > 65535 ? 65535 : total / 256 + 1);
    s_kv_write<<<blocks, 256, 0, trn_stream(s)>>>(
        cache_k, cache_v, k, v, stride, slot, pos, T, HkD, max_len);
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}

__global__ void __launch_bounds__(32 * S_WARPS)
    s_attn_decode(trn_bf16_t *o, const trn_bf16_t *q, int stride,
                  const trn_bf16_t *ck, const trn_bf16_t *cv,
                  const int32_t *slot, const int32_t *pos, int H, int Hk, int D,
                  int max_len, float scale)
{
    __shared__ float sm_m[S_WARPS], sm_l[S_WARPS];
    __shared__ float sm_o[S_WARPS][S_MAXE * 32];
    int t = blockIdx.x, h = blockIdx.y, hk = h / (H / Hk);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const trn_bf16_t *qr = q + (size_t) t * (size_t) stride + (size_t) h * D;
    float qv[S_MAXE], acc[S_MAXE];
#pragma unroll
    for (int e = 0; e < S_MAXE; e++) {
        int d = lane + 32 * e;
        qv[e] = d < D ? trn_ld(qr + d) : 0.0f;
        acc[e] = 0.0f;
    }
    int HkD = Hk * D;
    size_t base =
        (size_t) slot[t] * (size_t) max_len * (size_t) HkD + (size_t) hk * D;
    float m = -INFINITY, l = 0.0f;
    for (int j = warp; j <= pos[t]; j += S_WARPS) {
        const trn_bf16_t *kr = ck + base + (size_t) j * (size_t) HkD;
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
        const trn_bf16_t *vr = cv + base + (size_t) j * (size_t) HkD;
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

extern "C" lisa_rc_t
trn_k_attn_decode(trn_bf16_t *o, const trn_bf16_t *q, int stride,
                  const trn_bf16_t *cache_k, const trn_bf16_t *cache_v,
                  const int32_t *slot, const int32_t *pos, int T, int H, int Hk,
                  int D, int max_len, trn_cuda_stream_t *s)
{
    TRN_REQUIRE(o && q && cache_k && cache_v && slot && pos && T > 0);
    TRN_REQUIRE(H > 0 && Hk > 0 && H % Hk == 0 && D > 0 && D <= 32 * S_MAXE);
    dim3 grid((unsigned) T, (unsigned) H);
    s_attn_decode<<<grid, 32 * S_WARPS, 0, trn_stream(s)>>>(
        o, q, stride, cache_k, cache_v, slot, pos, H, Hk, D, max_len,
        1.0f / sqrtf((float) D));
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}

/* ---- sampling ---------------------------------------------------------- */

#define S_ST 1024

__device__ __forceinline__ uint64_t
s_mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
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

__global__ void
__launch_bounds__(S_ST)
    s_sample(int32_t *tok, float *lp, const float *logits, const float *temp,
             const float *top_p, const int32_t *top_k, const uint64_t *seed,
             int V)
{
    __shared__ float shm[32];
    __shared__ float part[S_ST];
    __shared__ int pick;
    int row = blockIdx.x;
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
    float pmax = expf(bmx - bmx) * inv_z;
    /* threshold: the largest tau keeping top_k tokens and top_p mass */
    float tau = 0.0f;
    float P = top_p[row];
    int K = top_k[row];
    if ((P > 0.0f && P < 1.0f) || K > 1) {
        float lo = 0.0f, hi = pmax;
        for (int it = 0; it < 40; it++) {
            float mid = 0.5f * (lo + hi), mass, count;
            s_mass(z, V, bmx, inv_t, inv_z, mid, shm, &mass, &count);
            int ok = 1;
            if (P > 0.0f && P < 1.0f && mass < P)
                ok = 0;
            if (K > 1 && count < (float) K)
                ok = 0;
            if (ok)
                lo = mid; /* still keeps enough: raise the bar */
            else
                hi = mid;
        }
        tau = lo;
    }
    /* inverse CDF over kept tokens, in vocabulary order */
    int chunk = (V + S_ST - 1) / S_ST;
    int j0 = threadIdx.x * chunk, j1 = min(V, j0 + chunk);
    float s = 0.0f;
    for (int j = j0; j < j1; j++) {
        float p = expf(z[j] * inv_t - bmx) * inv_z;
        if (p >= tau)
            s += p;
    }
    part[threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float total = 0.0f;
        for (int i = 0; i < S_ST; i++)
            total += part[i];
        uint64_t r = s_mix64(seed[row]);
        float u = (float) (r >> 40) / 16777216.0f * total;
        int c = 0;
        float cum = 0.0f;
        while (c < S_ST - 1 && cum + part[c] <= u)
            cum += part[c++];
        int chosen = -1, last = -1;
        for (int j = c * chunk; j < min(V, (c + 1) * chunk); j++) {
            float p = expf(z[j] * inv_t - bmx) * inv_z;
            if (p < tau)
                continue;
            last = j;
            cum += p;
            if (cum > u) {
                chosen = j;
                break;
            }
        }
        if (chosen < 0)
            chosen = last >= 0 ? last : arg; /* rounding at the very end */
        tok[row] = chosen;
        lp[row] = z[chosen] * inv_t - lse;
    }
}

extern "C" lisa_rc_t
trn_k_sample(int32_t *tok, float *lp, const float *logits,
             const float *temperature, const float *top_p, const int32_t *top_k,
             const uint64_t *seed, int n, int V, trn_cuda_stream_t *s)
{
    TRN_REQUIRE(tok && lp && logits && temperature && top_p && top_k && seed);
    TRN_REQUIRE(n > 0 && V > 0);
    s_sample<<<n, S_ST, 0, trn_stream(s)>>>(tok, lp, logits, temperature, top_p,
                                            top_k, seed, V);
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}
