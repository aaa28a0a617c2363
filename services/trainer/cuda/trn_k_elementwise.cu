/*
 * trn_k_elementwise: conversions, embedding gather/scatter and SwiGLU.
 */
#include "trn_cuda_common.cuh"

#include <stdint.h>

#define S_GRID(n) ((unsigned) ((n) / 256 + 1 > 65535 ? 65535 : (n) / 256 + 1))
#define S_FOR(i, n)                                                            \
    for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < (n);   \
         i += (size_t) gridDim.x * blockDim.x)

__global__ void
s_f32_to_bf16(trn_bf16_t *out, const float *in, size_t n)
{
    S_FOR(i, n) trn_st(out + i, in[i]);
}

__global__ void
s_bf16_to_f32(float *out, const trn_bf16_t *in, size_t n)
{
    S_FOR(i, n) out[i] = trn_ld(in + i);
}

extern "C" lisa_rc_t
trn_k_f32_to_bf16(trn_bf16_t *out, const float *in, size_t n,
                  trn_cuda_stream_t *s)
{
    TRN_REQUIRE(out && in);
    if (n == 0)
        return LISA_OK;
    s_f32_to_bf16<<<S_GRID(n), 256, 0, trn_stream(s)>>>(out, in, n);
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}

extern "C" lisa_rc_t
trn_k_bf16_to_f32(float *out, const trn_bf16_t *in, size_t n,
                  trn_cuda_stream_t *s)
{
    TRN_REQUIRE(out && in);
    if (n == 0)
        return LISA_OK;
    s_bf16_to_f32<<<S_GRID(n), 256, 0, trn_stream(s)>>>(out, in, n);
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}

__global__ void
s_embed_fwd(float *x, const trn_bf16_t *table, const int32_t *ids, int T, int C,
            int vocab)
{
    size_t n = (size_t) T * (size_t) C;
    S_FOR(i, n)
    {
        int t = (int) (i / (size_t) C), c = (int) (i % (size_t) C);
        int id = ids[t];
        x[i] = (id >= 0 && id < vocab)
                   ? trn_ld(table + (size_t) id * (size_t) C + (size_t) c)
                   : 0.0f;
    }
}

__global__ void
s_embed_bwd(float *dtable, const float *dx, const int32_t *ids, int T, int C,
            int vocab)
{
    size_t n = (size_t) T * (size_t) C;
    S_FOR(i, n)
    {
        int t = (int) (i / (size_t) C), c = (int) (i % (size_t) C);
        int id = ids[t];
        if (id >= 0 && id < vocab)
            atomicAdd(&dtable[(size_t) id * (size_t) C + (size_t) c], dx[i]);
    }
}

extern "C" lisa_rc_t
trn_k_embed_fwd(float *x, const trn_bf16_t *table, const int32_t *ids, int T,
                int C, int vocab, trn_cuda_stream_t *s)
{
    TRN_REQUIRE(x && table && ids && T > 0 && C > 0 && vocab > 0);
    size_t n = (size_t) T * (size_t) C;
    s_embed_fwd<<<S_GRID(n), 256, 0, trn_stream(s)>>>(x, table, ids, T, C,
                                                      vocab);
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}

extern "C" lisa_rc_t
trn_k_embed_bwd(float *dtable, const float *dx, const int32_t *ids, int T,
                int C, int vocab, trn_cuda_stream_t *s)
{
    TRN_REQUIRE(dtable && dx && ids && T > 0 && C > 0 && vocab > 0);
    size_t n = (size_t) T * (size_t) C;
    s_embed_bwd<<<S_GRID(n), 256, 0, trn_stream(s)>>>(dtable, dx, ids, T, C,
                                                      vocab);
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}

__global__ void
s_swiglu_fwd(trn_bf16_t *a, const trn_bf16_t *gu, int T, int I)
{
    size_t n = (size_t) T * (size_t) I;
    S_FOR(idx, n)
    {
        size_t t = idx / (size_t) I, i = idx % (size_t) I;
        const trn_bf16_t *row = gu + t * 2 * (size_t) I;
        float g = trn_ld(row + i), u = trn_ld(row + I + i);
        trn_st(a + idx, trn_round_bf16(g * trn_sigmoid(g)) * u);
    }
}

__global__ void
s_swiglu_bwd(trn_bf16_t *dgu, const trn_bf16_t *da, const trn_bf16_t *gu, int T,
             int I)
{
    size_t n = (size_t) T * (size_t) I;
    S_FOR(idx, n)
    {
        size_t t = idx / (size_t) I, i = idx % (size_t) I;
        const trn_bf16_t *row = gu + t * 2 * (size_t) I;
        trn_bf16_t *drow = dgu + t * 2 * (size_t) I;
        float g = trn_ld(row + i), u = trn_ld(row + I + i);
        float d = trn_ld(da + idx);
        float sg = trn_sigmoid(g);
        float silu = g * sg;
        trn_st(drow + i, d * u * sg * (1.0f + g * (1.0f - sg)));
        trn_st(drow + I + i, d * silu);
    }
}

/* The same, eight values per 16-byte access (I a multiple of 8, buffers
 * 16-byte aligned): vector v covers a[t, 8i .. 8i+7] with t = v / I8,
 * i = v % I8. Each value goes through the same expressions as above, so the
 * results are the same bits. Idx: 32-bit indices when the count fits. */
__device__ __forceinline__ void
s_unpack8(uint4 q, float v[8])
{
    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int p = 0; p < 4; p++) {
        v[2 * p] = __uint_as_float(w[p] << 16);
        v[2 * p + 1] = __uint_as_float(w[p] & 0xffff0000u);
    }
}

__device__ __forceinline__ uint4
s_pack8(const float v[8])
{
    uint32_t w[4];
#pragma unroll
    for (int p = 0; p < 4; p++)
        w[p] =
            (uint32_t) __bfloat16_as_ushort(__float2bfloat16_rn(v[2 * p])) |
            (uint32_t) __bfloat16_as_ushort(__float2bfloat16_rn(v[2 * p + 1]))
                << 16;
    return make_uint4(w[0], w[1], w[2], w[3]);
}

template <typename Idx>
__global__ void
s_swiglu_fwd8(uint4 *a, const uint4 *gu, Idx T, Idx I8)
{
    trn_pdl_enter(); /* launched to overlap the kernel before it */
    Idx n = T * I8;
    for (Idx v = blockIdx.x * (Idx) blockDim.x + threadIdx.x; v < n;
         v += (Idx) gridDim.x * blockDim.x) {
        Idx t = v / I8, i = v - t * I8;
        const uint4 *row = gu + t * 2 * I8;
        float g[8], u[8], o[8];
        s_unpack8(row[i], g);
        s_unpack8(row[I8 + i], u);
#pragma unroll
        for (int e = 0; e < 8; e++)
            o[e] = trn_round_bf16(g[e] * trn_sigmoid(g[e])) * u[e];
        a[v] = s_pack8(o);
    }
}

template <typename Idx>
__global__ void
s_swiglu_bwd8(uint4 *dgu, const uint4 *da, const uint4 *gu, Idx T, Idx I8)
{
    Idx n = T * I8;
    for (Idx v = blockIdx.x * (Idx) blockDim.x + threadIdx.x; v < n;
         v += (Idx) gridDim.x * blockDim.x) {
        Idx t = v / I8, i = v - t * I8;
        const uint4 *row = gu + t * 2 * I8;
        uint4 *drow = dgu + t * 2 * I8;
        float g[8], u[8], d[8], dg[8], du[8];
        s_unpack8(row[i], g);
        s_unpack8(row[I8 + i], u);
        s_unpack8(da[v], d);
#pragma unroll
        for (int e = 0; e < 8; e++) {
            float sg = trn_sigmoid(g[e]);
            float silu = g[e] * sg;
            dg[e] = d[e] * u[e] * sg * (1.0f + g[e] * (1.0f - sg));
            du[e] = d[e] * silu;
        }
        drow[i] = s_pack8(dg);
        drow[I8 + i] = s_pack8(du);
    }
}

/* Whether the eight-wide kernels apply. */
static int
s_swiglu_vec(int I, const void *p, const void *q, const void *r)
{
    return I % 8 == 0 && (uintptr_t) p % 16 == 0 && (uintptr_t) q % 16 == 0 &&
           (uintptr_t) r % 16 == 0;
}

extern "C" lisa_rc_t
trn_k_swiglu_fwd(trn_bf16_t *a, const trn_bf16_t *gu, int T, int I,
                 trn_cuda_stream_t *s)
{
    TRN_REQUIRE(a && gu && T > 0 && I > 0);
    size_t n = (size_t) T * (size_t) I;
    if (s_swiglu_vec(I, a, gu, gu)) {
        size_t nv = n / 8;
        /* 2 * nv: the gate|up rows' vectors are indexed too */
        if (2 * nv < UINT32_MAX)
            TRN_CUDA_TRY(trn_launch_pdl(
                s_swiglu_fwd8<uint32_t>, dim3(S_GRID(nv)), dim3(256), 0,
                trn_stream(s), (uint4 *) a, (const uint4 *) gu, (uint32_t) T,
                (uint32_t) (I / 8)));
        else
            s_swiglu_fwd8<size_t><<<S_GRID(nv), 256, 0, trn_stream(s)>>>(
                (uint4 *) a, (const uint4 *) gu, (size_t) T, (size_t) (I / 8));
    } else {
        s_swiglu_fwd<<<S_GRID(n), 256, 0, trn_stream(s)>>>(a, gu, T, I);
    }
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}

extern "C" lisa_rc_t
trn_k_swiglu_bwd(trn_bf16_t *dgu, const trn_bf16_t *da, const trn_bf16_t *gu,
                 int T, int I, trn_cuda_stream_t *s)
{
    TRN_REQUIRE(dgu && da && gu && T > 0 && I > 0);
    size_t n = (size_t) T * (size_t) I;
    if (s_swiglu_vec(I, dgu, da, gu)) {
        size_t nv = n / 8;
        if (2 * nv < UINT32_MAX)
            s_swiglu_bwd8<uint32_t><<<S_GRID(nv), 256, 0, trn_stream(s)>>>(
                (uint4 *) dgu, (const uint4 *) da, (const uint4 *) gu,
                (uint32_t) T, (uint32_t) (I / 8));
        else
            s_swiglu_bwd8<size_t><<<S_GRID(nv), 256, 0, trn_stream(s)>>>(
                (uint4 *) dgu, (const uint4 *) da, (const uint4 *) gu,
                (size_t) T, (size_t) (I / 8));
    } else {
        s_swiglu_bwd<<<S_GRID(n), 256, 0, trn_stream(s)>>>(dgu, da, gu, T, I);
    }
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}

/* splitmix64: a counter-based generator, so any element can be drawn
 * independently of the others. */
__device__ __forceinline__ uint64_t
s_mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

__global__ void
s_fill_normal(float *x, size_t n, uint64_t seed, float std)
{
    S_FOR(i, n)
    {
        uint64_t r = s_mix(seed ^ s_mix(i));
        float u1 = ((float) (r >> 40) + 0.5f) / 16777216.0f;
        float u2 = (float) ((r >> 16) & 0xffffffu) / 16777216.0f;
        x[i] = std * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    }
}

__global__ void
s_fill_const(float *x, size_t n, float v)
{
    S_FOR(i, n) x[i] = v;
}

extern "C" lisa_rc_t
trn_k_fill_normal(float *x, size_t n, uint64_t seed, float std,
                  trn_cuda_stream_t *s)
{
    TRN_REQUIRE(x);
    if (n == 0)
        return LISA_OK;
    s_fill_normal<<<S_GRID(n), 256, 0, trn_stream(s)>>>(x, n, seed, std);
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}

extern "C" lisa_rc_t
trn_k_fill_const(float *x, size_t n, float v, trn_cuda_stream_t *s)
{
    TRN_REQUIRE(x);
    if (n == 0)
        return LISA_OK;
    s_fill_const<<<S_GRID(n), 256, 0, trn_stream(s)>>>(x, n, v);
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}

__global__ void
s_gather_rows(trn_bf16_t *out, const trn_bf16_t *in, const int32_t *idx, int n,
              int C)
{
    size_t total = (size_t) n * (size_t) C;
    S_FOR(i, total)
    {
        size_t r = i / (size_t) C, c = i % (size_t) C;
        out[i] = in[(size_t) idx[r] * (size_t) C + c];
    }
}

extern "C" lisa_rc_t
trn_k_gather_rows(trn_bf16_t *out, const trn_bf16_t *in, const int32_t *idx,
                  int n, int C, trn_cuda_stream_t *s)
{
    TRN_REQUIRE(out && in && idx && n > 0 && C > 0);
    size_t total = (size_t) n * (size_t) C;
    s_gather_rows<<<S_GRID(total), 256, 0, trn_stream(s)>>>(out, in, idx, n, C);
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}

/* ---- projection biases (Qwen2's q/k/v) --------------------------------- */

__global__ void
s_bias_add(trn_bf16_t *x, int stride, const trn_bf16_t *b, int T, int n)
{
    size_t total = (size_t) T * (size_t) n;
    for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < total;
         i += (size_t) gridDim.x * blockDim.x) {
        size_t t = i / (size_t) n, j = i % (size_t) n;
        trn_bf16_t *p = x + t * (size_t) stride + j;
        trn_st(p, trn_ld(p) + trn_ld(b + j));
    }
}

extern "C" lisa_rc_t
trn_k_bias_add(trn_bf16_t *x, int stride, const trn_bf16_t *b, int T, int n,
               trn_cuda_stream_t *s)
{
    TRN_REQUIRE(x && b && T > 0 && n > 0 && stride >= n);
    size_t total = (size_t) T * (size_t) n;
    s_bias_add<<<S_GRID(total), 256, 0, trn_stream(s)>>>(x, stride, b, T, n);
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}

/* One thread a column: db[j] += sum over rows of dx[t][j], in fp32. */
__global__ void
s_bias_grad(float *db, const trn_bf16_t *dx, int stride, int T, int n)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n)
        return;
    float acc = 0.0f;
    for (int t = 0; t < T; t++)
        acc += trn_ld(dx + (size_t) t * (size_t) stride + j);
    db[j] += acc;
}

extern "C" lisa_rc_t
trn_k_bias_grad(float *db, const trn_bf16_t *dx, int stride, int T, int n,
                trn_cuda_stream_t *s)
{
    TRN_REQUIRE(db && dx && T > 0 && n > 0 && stride >= n);
    s_bias_grad<<<(unsigned) ((n + 255) / 256), 256, 0, trn_stream(s)>>>(
        db, dx, stride, T, n);
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}
