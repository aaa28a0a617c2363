/*
 * trn_k_rope: half-split rotary embedding, as transformers' Qwen3 does it.
 *
 * inv_freq[i] = 1 / theta^(2i/D) in fp32; angle = pos * inv_freq[i] in fp32;
 * cos and sin are rounded to bf16 before use; lanes i and i + D/2 rotate
 * together. The backward pass is the same rotation with the sine negated.
 */
#include "trn_cuda_common.cuh"

__global__ void
s_rope(trn_bf16_t *x, int stride, const int32_t *pos, int T, int heads, int D,
       float theta, int inverse)
{
    int half = D / 2;
    size_t total = (size_t) T * (size_t) heads * (size_t) half;
    for (size_t idx = blockIdx.x * (size_t) blockDim.x + threadIdx.x;
         idx < total; idx += (size_t) gridDim.x * blockDim.x) {
        int i = (int) (idx % (size_t) half);
        size_t th = idx / (size_t) half;
        int h = (int) (th % (size_t) heads);
        int t = (int) (th / (size_t) heads);
        float inv_freq = 1.0f / powf(theta, (float) (2 * i) / (float) D);
        float ang = (float) pos[t] * inv_freq;
        float c = trn_round_bf16(cosf(ang));
        float sn = trn_round_bf16(sinf(ang));
        if (inverse)
            sn = -sn;
        trn_bf16_t *p = x + (size_t) t * (size_t) stride + (size_t) h * D;
        float x1 = trn_ld(p + i), x2 = trn_ld(p + i + half);
        trn_st(p + i, x1 * c - x2 * sn);
        trn_st(p + i + half, x2 * c + x1 * sn);
    }
}

extern "C" lisa_rc_t
trn_k_rope(trn_bf16_t *x, int stride, const int32_t *pos, int T, int heads,
           int D, float theta, int inverse, trn_cuda_stream_t *s)
{
    TRN_REQUIRE(x && pos && T > 0 && heads > 0 && D > 0 && D % 2 == 0);
    TRN_REQUIRE(stride >= heads * D || stride > 0);
    size_t total = (size_t) T * (size_t) heads * (size_t) (D / 2);
    size_t blocks = TRN_CEIL_DIV(total, (size_t) 256);
    if (blocks > 65535)
        blocks = 65535;
    s_rope<<<(unsigned) blocks, 256, 0, trn_stream(s)>>>(
        x, stride, pos, T, heads, D, theta, inverse);
    TRN_LAUNCH_CHECK();
    return LISA_OK;
}
