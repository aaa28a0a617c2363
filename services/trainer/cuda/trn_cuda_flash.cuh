/*
 * trn_cuda_flash: the stages of a flash-attention forward pass shared by
 * the training forward kernel (trn_k_attn.cu) and the prefill kernel
 * (trn_k_prefill.cu). A warp owns 32 query rows as two m16 tiles; a
 * sub-tile of BC keys is scored (S = Q K^T), masked by the caller, turned
 * into probabilities by the online softmax in base 2 (scores times sc =
 * scale * log2 e), and accumulated (O += P V). A lane's four rows are
 * i = 2m + half: row 32w + 16m + 8half + g of the tile.
 *
 * Every stage is forceinline and indexes its register arrays only by
 * compile-time constants, so a kernel built from them is the kernel with
 * the stages written out in place.
 */
#ifndef TRN_CUDA_FLASH_CUH
#define TRN_CUDA_FLASH_CUH

#include "trn_cuda_mma.cuh"

/* Output accumulators zeroed, running maxima -inf, running sums 0. */
template <int NT>
static __device__ __forceinline__ void
trn_fa_init(float (&acc)[2][NT][4], float (&mr)[4], float (&lr)[4])
{
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int n = 0; n < NT; n++)
            acc[m][n][0] = acc[m][n][1] = acc[m][n][2] = acc[m][n][3] = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        mr[i] = -INFINITY;
        lr[i] = 0.0f;
    }
}

/* s = Q K^T for the warp's 32 rows of Qs (row stride D + 8) and the BC
 * keys of Kb (the same stride). */
template <int D, int BC>
static __device__ __forceinline__ void
trn_fa_scores(float (&s)[2][BC / 8][4], const __nv_bfloat16 *Qs,
              const __nv_bfloat16 *Kb, int warp, int lane)
{
    constexpr int LDB = D + 8, KT = D / 16, NS = BC / 8;
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int n = 0; n < NS; n++)
            s[m][n][0] = s[m][n][1] = s[m][n][2] = s[m][n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KT; kk++) {
        uint32_t qa[2][4];
        trn_ldsm_a(qa[0], Qs, LDB, warp * 32, kk, lane);
        trn_ldsm_a(qa[1], Qs, LDB, warp * 32 + 16, kk, lane);
#pragma unroll
        for (int n = 0; n < NS; n += 2) {
            uint32_t b[4];
            trn_ldsm_bn(b, Kb, LDB, kk, n, lane);
#pragma unroll
            for (int m = 0; m < 2; m++) {
                trn_mma(s[m][n], qa[m], b[0], b[1]);
                trn_mma(s[m][n + 1], qa[m], b[2], b[3]);
            }
        }
    }
}

/* The online softmax of one sub-tile: running max (base-2 units) and sum
 * of each row updated, s replaced by its probabilities, alpha[i] the
 * factor row i's output must be rescaled by. */
template <int NS>
static __device__ __forceinline__ void
trn_fa_softmax(float (&s)[2][NS][4], float (&mr)[4], float (&lr)[4],
               float (&alpha)[4], float sc)
{
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int m = i >> 1, e0 = (i & 1) * 2;
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < NS; n++)
            mx = fmaxf(mx, fmaxf(s[m][n][e0], s[m][n][e0 + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        float mn = fmaxf(mr[i], mx * sc);
        float mu = mn == -INFINITY ? 0.0f : mn;
        alpha[i] = exp2f(mr[i] - mu);
        mr[i] = mn;
        float ps = 0.0f;
#pragma unroll
        for (int n = 0; n < NS; n++) {
            float p0 = exp2f(fmaf(s[m][n][e0], sc, -mu));
            float p1 = exp2f(fmaf(s[m][n][e0 + 1], sc, -mu));
            s[m][n][e0] = p0;
            s[m][n][e0 + 1] = p1;
            ps += p0 + p1;
        }
        ps += __shfl_xor_sync(0xffffffffu, ps, 1);
        ps += __shfl_xor_sync(0xffffffffu, ps, 2);
        lr[i] = lr[i] * alpha[i] + ps;
    }
}

/* The output rescaled by alpha, only when some row of the warp has a new
 * max. */
template <int NT>
static __device__ __forceinline__ void
trn_fa_rescale(float (&acc)[2][NT][4], const float (&alpha)[4])
{
    const bool same = alpha[0] == 1.0f && alpha[1] == 1.0f &&
                      alpha[2] == 1.0f && alpha[3] == 1.0f;
    if (!__all_sync(0xffffffffu, same)) {
#pragma unroll
        for (int m = 0; m < 2; m++)
#pragma unroll
            for (int n = 0; n < NT; n++) {
                acc[m][n][0] *= alpha[2 * m];
                acc[m][n][1] *= alpha[2 * m];
                acc[m][n][2] *= alpha[2 * m + 1];
                acc[m][n][3] *= alpha[2 * m + 1];
            }
    }
}

/* O += P V for the BC keys of Vb (row stride D + 8): P's accumulators are
 * the A operand as they stand. */
template <int D, int BC>
static __device__ __forceinline__ void
trn_fa_pv(float (&acc)[2][D / 8][4], const float (&s)[2][BC / 8][4],
          const __nv_bfloat16 *Vb, int lane)
{
    constexpr int LDB = D + 8, NT = D / 8;
#pragma unroll
    for (int kk = 0; kk < BC / 16; kk++) {
        uint32_t pa[2][4];
#pragma unroll
        for (int m = 0; m < 2; m++) {
            pa[m][0] = trn_pack2(s[m][2 * kk][0], s[m][2 * kk][1]);
            pa[m][1] = trn_pack2(s[m][2 * kk][2], s[m][2 * kk][3]);
            pa[m][2] = trn_pack2(s[m][2 * kk + 1][0], s[m][2 * kk + 1][1]);
            pa[m][3] = trn_pack2(s[m][2 * kk + 1][2], s[m][2 * kk + 1][3]);
        }
#pragma unroll
        for (int n = 0; n < NT; n += 2) {
            uint32_t b[4];
            trn_ldsm_b2(b, Vb, LDB, kk, n, lane);
#pragma unroll
            for (int m = 0; m < 2; m++) {
                trn_mma(acc[m][n], pa[m], b[0], b[1]);
                trn_mma(acc[m][n + 1], pa[m], b[2], b[3]);
            }
        }
    }
}

#endif
