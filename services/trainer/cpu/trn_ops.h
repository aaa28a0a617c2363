/*
 * trn_ops: the fp32 CPU kernels of the Qwen3 reference backend.
 *
 * Row-major everywhere; a linear layer's weight is [out, in] as PyTorch
 * stores it, so a forward projection is Y = X W^T. The three matmul shapes
 * a transformer's forward and backward need are here, split into tasks on
 * a trn_pool; everything else is row-local and cheap next to them.
 */
#ifndef TRN_OPS_H
#define TRN_OPS_H

#include "trn_pool.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* y[T,out] = x[T,in] @ w[out,in]^T. */
void trn_mm_nt(trn_pool_t *pool, float *y, const float *x, const float *w,
               size_t T, size_t in, size_t out);

/* dx[T,in] (+)= dy[T,out] @ w[out,in]; accumulates when `acc`. */
void trn_mm_nn(trn_pool_t *pool, float *dx, const float *dy, const float *w,
               size_t T, size_t out, size_t in, bool acc);

/* dw[out,in] += dy[T,out]^T @ x[T,in]. */
void trn_mm_tn(trn_pool_t *pool, float *dw, const float *dy, const float *x,
               size_t T, size_t out, size_t in);

/* RMSNorm of `rows` rows of `dim`: y = x * rstd * w, rstd per row saved. */
void trn_rmsnorm(float *y, float *rstd, const float *x, const float *w,
                 size_t rows, size_t dim, float eps);

/* RMSNorm backward: dx += d/dx, dw += d/dw (rstd from the forward). */
void trn_rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x,
                     const float *rstd, const float *w, size_t rows,
                     size_t dim);

/* Half-split RoPE in place on rows of `nheads` heads of `hd` lanes; row r is
 * at position pos[r]. `inverse` applies the transpose (for backward). */
void trn_rope(float *x, size_t rows, size_t nheads, size_t hd,
              const int32_t *pos, const float *inv_freq, bool inverse);

/* inv_freq[i] = 1 / theta^(2i/hd) in fp32, as transformers computes it. */
void trn_rope_inv_freq(float *inv_freq, size_t hd, double theta);

/* silu(x) = x * sigmoid(x). */
float trn_silu(float x);

/* x[i] = exp(x[i] - shift) for every i, in a loop the compiler vectorises
 * (expf from libm does not): a degree-7 polynomial on the reduced
 * argument, within 2 ulp of expf down to -87 and 0 below about -88. For
 * -1e9 <= x[i] - shift <= 0.4, as in a softmax after its maximum (or its
 * log-sum-exp) is subtracted. */
void trn_exp_shifted(float *x, size_t n, float shift);

/* sum_i a[i] * b[i], with four partial sums (the vectoriser does not
 * reorder a float sum by itself). */
float trn_dot(const float *a, const float *b, size_t n);

#endif
