/*
 * GPU kernel tests: every trainer kernel against a plain-C reference in
 * double precision, on fresh random inputs, with outputs poisoned before
 * each run so an unwritten element fails. Prints one line per check and a
 * closing "N passed, N failed" line; exits non-zero on any failure.
 *
 *   trn_cuda_kernels_test            run the checks
 *   trn_cuda_kernels_test --bench    also time attention, the products and
 *                                    the norms and SwiGLU at Qwen3-4B shapes
 *   trn_cuda_kernels_test --attn     only the head_dim-128 attention checks
 *   trn_cuda_kernels_test --linear   only the products' checks
 *   trn_cuda_kernels_test --decode   only the decode and prefill attention
 *                                    checks (for one setting of
 *                                    LISA_CUDA_ATTN_STAGES)
 *   trn_cuda_kernels_test --bench-attn  those and the attention timings
 *                                    (forward: the default, the serial
 *                                    schedule, the portable kernel;
 *                                    backward: portable and Hopper)
 *   trn_cuda_kernels_test --attn-bench-only  the timings alone
 *   LISA_TEST_SCHEDS=none            the default and the portable kernel
 *                                    alone (LISA_TEST_SCHEDS=0: the
 *                                    serial schedule too, as unset)
 */
#include "trn_cuda.h"
#include "trn_safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int s_pass, s_fail;
static unsigned long long s_rng = 88172645463325252ull;

static double
s_rand(void) /* uniform in [-1, 1) */
{
    s_rng ^= s_rng << 13;
    s_rng ^= s_rng >> 7;
    s_rng ^= s_rng << 17;
    return (double) (s_rng >> 11) / (double) (1ull << 53) * 2.0 - 1.0;
}

static void
s_check(const char *what, double err, double tol)
{
    int ok = err <= tol && !isnan(err);
    printf("%-44s rel.err %.3e (tol %.0e) %s\n", what, err, tol,
           ok ? "ok" : "FAIL");
    if (ok)
        s_pass++;
    else
        s_fail++;
}

/* ||a - b|| / ||b|| over n values (b the reference). */
static double
s_relerr(const double *a, const double *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return sqrt(num) / (sqrt(den) + 1e-30);
}

/* Random bf16 host array with its exact values as doubles. */
static trn_bf16_t *
s_rand_bf16(size_t n, double scale, double **vals)
{
    trn_bf16_t *h = malloc(n * sizeof *h);
    *vals = malloc(n * sizeof **vals);
    for (size_t i = 0; i < n; i++) {
        h[i] = trn_f32_to_bf16((float) (s_rand() * scale));
        (*vals)[i] = trn_bf16_to_f32(h[i]);
    }
    return h;
}

static void *
s_dev(const void *host, size_t bytes)
{
    void *d = trn_cuda_malloc(bytes);
    if (!d)
        exit(2);
    if (host)
        trn_cuda_upload(d, host, bytes);
    else
        trn_cuda_memset(d, 0xff, bytes, NULL); /* poison: NaN patterns */
    return d;
}

static double *
s_get_bf16(const trn_bf16_t *d, size_t n)
{
    trn_bf16_t *h = malloc(n * sizeof *h);
    double *v = malloc(n * sizeof *v);
    trn_cuda_download(h, d, n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        v[i] = trn_bf16_to_f32(h[i]);
    free(h);
    return v;
}

static double *
s_get_f32(const float *d, size_t n)
{
    float *h = malloc(n * sizeof *h);
    double *v = malloc(n * sizeof *v);
    trn_cuda_download(h, d, n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        v[i] = h[i];
    free(h);
    return v;
}

#define RC(x)                                                                  \
    do {                                                                       \
        lisa_rc_t rc_ = (x);                                                   \
        if (rc_ != LISA_OK) {                                                  \
            printf("FAIL: %s returned %d\n", #x, (int) rc_);                   \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

/* ------------------------------------------------------------------ */

static void
test_linear(trn_blas_t *b)
{
    int T = 300, K = 256, N = 384;
    double *x, *w, *dy;
    trn_bf16_t *hx = s_rand_bf16((size_t) T * K, 1, &x);
    trn_bf16_t *hw = s_rand_bf16((size_t) N * K, 0.1, &w);
    trn_bf16_t *hdy = s_rand_bf16((size_t) T * N, 1, &dy);
    trn_bf16_t *dx_ = s_dev(hx, (size_t) T * K * 2);
    trn_bf16_t *dw_ = s_dev(hw, (size_t) N * K * 2);
    trn_bf16_t *ddy = s_dev(hdy, (size_t) T * N * 2);
    float *y32 = s_dev(NULL, (size_t) T * N * 4);
    trn_bf16_t *y16 = s_dev(NULL, (size_t) T * N * 2);
    trn_bf16_t *gx = s_dev(NULL, (size_t) T * K * 2);
    float *gw = s_dev(NULL, (size_t) N * K * 4);
    trn_cuda_memset(gw, 0, (size_t) N * K * 4, NULL);

    RC(trn_linear_fwd(b, y32, NULL, dx_, dw_, T, K, N, 0, NULL));
    RC(trn_linear_fwd(b, NULL, y16, dx_, dw_, T, K, N, 0, NULL));
    RC(trn_linear_bwd_data(b, gx, ddy, dw_, T, K, N, NULL));
    RC(trn_linear_bwd_weight(b, gw, ddy, dx_, T, K, N, 1, NULL));
    RC(trn_linear_bwd_weight(b, gw, ddy, dx_, T, K, N, 1, NULL)); /* twice */
    RC(trn_cuda_sync());

    double *ry = calloc((size_t) T * N, sizeof(double));
    double *rx = calloc((size_t) T * K, sizeof(double));
    double *rw = calloc((size_t) N * K, sizeof(double));
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += x[t * K + k] * w[n * K + k];
            ry[t * N + n] = s;
        }
    for (int t = 0; t < T; t++)
        for (int k = 0; k < K; k++) {
            double s = 0;
            for (int n = 0; n < N; n++)
                s += dy[t * N + n] * w[n * K + k];
            rx[t * K + k] = s;
        }
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) {
            double s = 0;
            for (int t = 0; t < T; t++)
                s += dy[t * N + n] * x[t * K + k];
            rw[n * K + k] = 2 * s;
        }
    double *g;
    s_check("linear fwd (fp32 out)",
            s_relerr(g = s_get_f32(y32, (size_t) T * N), ry, (size_t) T * N),
            1e-5);
    free(g);
    s_check("linear fwd (bf16 out)",
            s_relerr(g = s_get_bf16(y16, (size_t) T * N), ry, (size_t) T * N),
            5e-3);
    free(g);
    s_check("linear bwd data",
            s_relerr(g = s_get_bf16(gx, (size_t) T * K), rx, (size_t) T * K),
            5e-3);
    free(g);
    s_check("linear bwd weight (accumulated twice)",
            s_relerr(g = s_get_f32(gw, (size_t) N * K), rw, (size_t) N * K),
            1e-5);
    free(g);
    trn_cuda_free(&dx_), trn_cuda_free(&dw_), trn_cuda_free(&ddy);
    trn_cuda_free(&y32), trn_cuda_free(&y16), trn_cuda_free(&gx);
    trn_cuda_free(&gw);
    free(hx), free(hw), free(hdy), free(x), free(w), free(dy);
    free(ry), free(rx), free(rw);
}

/* ------------------------------------------------------------------ */

/* The backward's ways of writing dx. */
enum { S_DX_F32, S_DX_RESID, S_DX_BF16 };

/* One backward of test_rmsnorm's rows into a fresh dx (fp32 ones start at
 * random values, to check they accumulate) and a zeroed dw; checks dx
 * against dx0 + rgx and dw against rgw, and for S_DX_RESID that the bf16
 * copy is the updated dx rounded (bit for bit). */
static void
s_rmsnorm_bwd_check(int mode, int rows, int dim, int stride, int group,
                    const float *dxf, const trn_bf16_t *dxb,
                    const trn_bf16_t *dw, const trn_bf16_t *dg,
                    const float *rstd, const double *rgx, const double *rgw)
{
    size_t nd = (size_t) rows * dim;
    int ls = dim * group; /* outputs: packed rows */
    float *h0 = malloc(nd * 4);
    for (size_t i = 0; i < nd; i++)
        h0[i] = mode == S_DX_BF16 ? 0.0f : (float) s_rand();
    float *gx = s_dev(h0, nd * 4);
    trn_bf16_t *gb = s_dev(NULL, nd * 2);
    float *gw = s_dev(NULL, (size_t) dim * 4);
    RC(trn_cuda_memset(gw, 0, (size_t) dim * 4, NULL));
    if (mode == S_DX_F32)
        RC(trn_k_rmsnorm_bwd(gx, NULL, ls, 1, gw, dg, ls, dxf, dxb, stride, dw,
                             rstd, rows, dim, group, NULL));
    else if (mode == S_DX_RESID)
        RC(trn_k_rmsnorm_bwd_resid(gx, gb, ls, gw, dg, ls, dxf, stride, dw,
                                   rstd, rows, dim, NULL));
    else
        RC(trn_k_rmsnorm_bwd(NULL, gb, ls, 0, gw, dg, ls, dxf, dxb, stride, dw,
                             rstd, rows, dim, group, NULL));
    RC(trn_cuda_sync());
    static const char *what[] = {"fp32 dx", "fp32 dx + bf16 copy", "bf16 dx"};
    char name[96];
    double *ref = malloc(nd * 8), *g;
    for (size_t i = 0; i < nd; i++)
        ref[i] = h0[i] + rgx[i];
    snprintf(name, sizeof name, "rmsnorm bwd %dx%d %s", rows, dim, what[mode]);
    g = mode == S_DX_BF16 ? s_get_bf16(gb, nd) : s_get_f32(gx, nd);
    s_check(name, s_relerr(g, ref, nd), mode == S_DX_BF16 ? 8e-3 : 5e-3);
    if (mode == S_DX_RESID) {
        trn_bf16_t *hb = malloc(nd * 2);
        trn_cuda_download(hb, gb, nd * 2);
        size_t bad = 0;
        for (size_t i = 0; i < nd; i++)
            bad += hb[i] != trn_f32_to_bf16((float) g[i]);
        snprintf(name, sizeof name, "rmsnorm bwd %dx%d bf16 copy == bf16(dx)",
                 rows, dim);
        s_check(name, (double) bad, 0);
        free(hb);
    }
    free(g);
    snprintf(name, sizeof name, "rmsnorm bwd dw %dx%d %s", rows, dim,
             what[mode]);
    s_check(name, s_relerr(g = s_get_f32(gw, (size_t) dim), rgw, (size_t) dim),
            5e-3);
    free(g), free(ref), free(h0);
    trn_cuda_free(&gx), trn_cuda_free(&gb), trn_cuda_free(&gw);
}

static void
test_rmsnorm(int rows, int dim, int stride, int group, int f32_in)
{
    double eps = 1e-6;
    size_t n = (size_t) (rows / group) * stride;
    double *x, *w, *dout;
    trn_bf16_t *hx = s_rand_bf16(n, 2, &x);
    trn_bf16_t *hw = s_rand_bf16((size_t) dim, 1, &w);
    trn_bf16_t *hg = s_rand_bf16((size_t) rows * dim, 1, &dout);
    float *hxf = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        hxf[i] = (float) x[i];
    float *dxf = f32_in ? s_dev(hxf, n * 4) : NULL;
    trn_bf16_t *dxb = f32_in ? NULL : s_dev(hx, n * 2);
    trn_bf16_t *dw = s_dev(hw, (size_t) dim * 2);
    trn_bf16_t *dg = s_dev(hg, (size_t) rows * dim * 2);
    trn_bf16_t *out = s_dev(NULL, (size_t) rows * dim * 2);
    float *rstd = s_dev(NULL, (size_t) rows * 4);
    int ls = dim * group; /* outputs: packed rows */
    RC(trn_k_rmsnorm_fwd(out, ls, rstd, dxf, dxb, stride, dw, rows, dim, group,
                         (float) eps, NULL));
    RC(trn_cuda_sync());
    double *ro = malloc((size_t) rows * dim * 8);
    double *rgx = malloc((size_t) rows * dim * 8);
    double *rgw = calloc((size_t) dim, 8);
    for (int r = 0; r < rows; r++) {
        const double *xr =
            x + (size_t) (r / group) * stride + (size_t) (r % group) * dim;
        double ss = 0;
        for (int j = 0; j < dim; j++)
            ss += xr[j] * xr[j];
        double rs = 1 / sqrt(ss / dim + eps);
        double dot = 0;
        for (int j = 0; j < dim; j++) {
            double nn = xr[j] * rs, g = dout[(size_t) r * dim + j];
            ro[(size_t) r * dim + j] = w[j] * nn;
            dot += g * w[j] * nn;
            rgw[j] += g * nn;
        }
        dot /= dim;
        for (int j = 0; j < dim; j++) {
            double nn = xr[j] * rs, g = dout[(size_t) r * dim + j] * w[j];
            rgx[(size_t) r * dim + j] = rs * (g - nn * dot);
        }
    }
    char name[96];
    double *g;
    snprintf(name, sizeof name, "rmsnorm fwd %dx%d%s", rows, dim,
             f32_in ? " fp32 in" : " bf16 in");
    s_check(name,
            s_relerr(g = s_get_bf16(out, (size_t) rows * dim), ro,
                     (size_t) rows * dim),
            8e-3);
    free(g);
    s_rmsnorm_bwd_check(S_DX_F32, rows, dim, stride, group, dxf, dxb, dw, dg,
                        rstd, rgx, rgw);
    if (f32_in && group == 1)
        s_rmsnorm_bwd_check(S_DX_RESID, rows, dim, stride, group, dxf, dxb, dw,
                            dg, rstd, rgx, rgw);
    if (!f32_in)
        s_rmsnorm_bwd_check(S_DX_BF16, rows, dim, stride, group, dxf, dxb, dw,
                            dg, rstd, rgx, rgw);
    trn_cuda_free(&dxf), trn_cuda_free(&dxb), trn_cuda_free(&dw);
    trn_cuda_free(&dg), trn_cuda_free(&out), trn_cuda_free(&rstd);
    free(hx), free(hw), free(hg), free(hxf), free(x), free(w), free(dout);
    free(ro), free(rgx), free(rgw);
}

/* ------------------------------------------------------------------ */

static void
test_rope(void)
{
    int T = 200, heads = 6, D = 128, stride = 1024;
    double theta = 5e6;
    size_t n = (size_t) T * stride;
    double *x;
    trn_bf16_t *hx = s_rand_bf16(n, 1, &x);
    int32_t *pos = malloc((size_t) T * 4);
    for (int t = 0; t < T; t++)
        pos[t] = t * 97 % 20000; /* large positions too */
    trn_bf16_t *dx = s_dev(hx, n * 2);
    int32_t *dpos = s_dev(pos, (size_t) T * 4);
    RC(trn_k_rope(dx, stride, dpos, T, heads, D, (float) theta, 0, NULL));
    RC(trn_cuda_sync());
    double *got = s_get_bf16(dx, n);
    double *ref = malloc(n * 8);
    memcpy(ref, x, n * 8);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < heads; h++)
            for (int i = 0; i < D / 2; i++) {
                float inv = 1.0f / powf((float) theta, (float) (2 * i) / D);
                float ang = (float) pos[t] * inv;
                double c = trn_bf16_to_f32(trn_f32_to_bf16(cosf(ang)));
                double s = trn_bf16_to_f32(trn_f32_to_bf16(sinf(ang)));
                size_t b = (size_t) t * stride + (size_t) h * D;
                double x1 = x[b + i], x2 = x[b + i + D / 2];
                ref[b + i] = x1 * c - x2 * s;
                ref[b + i + D / 2] = x2 * c + x1 * s;
            }
    s_check("rope fwd (theta 5e6, positions to 20k)", s_relerr(got, ref, n),
            5e-3);
    free(got);
    RC(trn_k_rope(dx, stride, dpos, T, heads, D, (float) theta, 1, NULL));
    RC(trn_cuda_sync());
    got = s_get_bf16(dx, n);
    s_check("rope inverse(rope(x)) == x", s_relerr(got, x, n), 1e-2);
    free(got), free(ref), free(hx), free(x), free(pos);
    trn_cuda_free(&dx), trn_cuda_free(&dpos);
}

/* ------------------------------------------------------------------ */

/* The unfused training sequence trn_k_qk_fwd replaces: copy, the per-head
 * norms of the query and key heads, RoPE on both. */
static lisa_rc_t
s_qk_unfused_fwd(trn_bf16_t *qkvn, const trn_bf16_t *qkv, int stride, float *rq,
                 float *rk, const trn_bf16_t *qw, const trn_bf16_t *kw,
                 const int32_t *pos, int T, int H, int Hk, int D, float eps,
                 float theta)
{
    lisa_rc_t rc = trn_cuda_copy(qkvn, qkv, (size_t) T * stride * 2, NULL);
    if (rc == LISA_OK)
        rc = trn_k_rmsnorm_fwd(qkvn, stride, rq, NULL, qkv, stride, qw, T * H,
                               D, H, eps, NULL);
    if (rc == LISA_OK)
        rc = trn_k_rmsnorm_fwd(qkvn + H * D, stride, rk, NULL, qkv + H * D,
                               stride, kw, T * Hk, D, Hk, eps, NULL);
    if (rc == LISA_OK)
        rc = trn_k_rope(qkvn, stride, pos, T, H, D, theta, 0, NULL);
    if (rc == LISA_OK)
        rc = trn_k_rope(qkvn + H * D, stride, pos, T, Hk, D, theta, 0, NULL);
    return rc;
}

/* ... and the backward sequence trn_k_qk_bwd replaces. */
static lisa_rc_t
s_qk_unfused_bwd(trn_bf16_t *dqkv, int stride, float *gq, float *gk,
                 const trn_bf16_t *qkv, const trn_bf16_t *qw,
                 const trn_bf16_t *kw, const float *rq, const float *rk,
                 const int32_t *pos, int T, int H, int Hk, int D, float theta)
{
    lisa_rc_t rc = trn_k_rope(dqkv, stride, pos, T, H, D, theta, 1, NULL);
    if (rc == LISA_OK)
        rc = trn_k_rope(dqkv + H * D, stride, pos, T, Hk, D, theta, 1, NULL);
    if (rc == LISA_OK)
        rc = trn_k_rmsnorm_bwd(NULL, dqkv, stride, 0, gq, dqkv, stride, NULL,
                               qkv, stride, qw, rq, T * H, D, H, NULL);
    if (rc == LISA_OK)
        rc = trn_k_rmsnorm_bwd(NULL, dqkv + H * D, stride, 0, gk, dqkv + H * D,
                               stride, NULL, qkv + H * D, stride, kw, rk,
                               T * Hk, D, Hk, NULL);
    return rc;
}

/* Values (bf16 or fp32 bit patterns) that differ between two device
 * buffers in the first `cols` of each of `rows` lines of `stride`. */
static size_t
s_ndiff(const void *a, const void *b, size_t rows, size_t cols, size_t stride,
        size_t elem)
{
    size_t bytes = rows * stride * elem, n = 0;
    unsigned char *ha = malloc(bytes), *hb = malloc(bytes);
    trn_cuda_download(ha, a, bytes);
    trn_cuda_download(hb, b, bytes);
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
            size_t at = (r * stride + c) * elem;
            n += memcmp(ha + at, hb + at, elem) != 0;
        }
    free(ha), free(hb);
    return n;
}

/* trn_k_qk_fwd / trn_k_qk_bwd against the unfused kernels on the same
 * inputs: forward bit for bit (out of place and in place), backward's
 * gradients to rounding noise, value heads untouched. `pad` extra values
 * per line (an odd pad takes the unvectorised copy). */
static void
test_qk_fused(int T, int H, int Hk, int D, int pad)
{
    int S = (H + 2 * Hk) * D, stride = S + pad;
    float eps = 1e-6f, theta = 1e6f;
    size_t n = (size_t) T * stride;
    double *x, *gv, *qw, *kw, *dw0;
    trn_bf16_t *hx = s_rand_bf16(n, 2, &x), *hg = s_rand_bf16(n, 1, &gv);
    trn_bf16_t *hqw = s_rand_bf16((size_t) D, 1, &qw);
    trn_bf16_t *hkw = s_rand_bf16((size_t) D, 1, &kw);
    trn_bf16_t *hdw = s_rand_bf16((size_t) 2 * D, 1, &dw0);
    float *hdwf = malloc((size_t) 2 * D * 4);
    for (int j = 0; j < 2 * D; j++)
        hdwf[j] = (float) dw0[j]; /* the weight gradients accumulate */
    int32_t *pos = malloc((size_t) T * 4);
    for (int t = 0; t < T; t++)
        pos[t] = (t * 397 + 11) % 30000;
    trn_bf16_t *in = s_dev(hx, n * 2), *dqw = s_dev(hqw, (size_t) D * 2);
    trn_bf16_t *dkw = s_dev(hkw, (size_t) D * 2);
    int32_t *dpos = s_dev(pos, (size_t) T * 4);
    trn_bf16_t *ref = s_dev(NULL, n * 2), *out = s_dev(NULL, n * 2);
    trn_bf16_t *inpl = s_dev(hx, n * 2);
    float *rq = s_dev(NULL, (size_t) T * H * 4);
    float *rk = s_dev(NULL, (size_t) T * Hk * 4);
    float *fq = s_dev(NULL, (size_t) T * H * 4);
    float *fk = s_dev(NULL, (size_t) T * Hk * 4);
    float *fq2 = s_dev(NULL, (size_t) T * H * 4);
    float *fk2 = s_dev(NULL, (size_t) T * Hk * 4);
    RC(s_qk_unfused_fwd(ref, in, stride, rq, rk, dqw, dkw, dpos, T, H, Hk, D,
                        eps, theta));
    RC(trn_k_qk_fwd(out, in, stride, fq, fk, dqw, dkw, dpos, T, H, Hk, D, eps,
                    theta, NULL));
    RC(trn_k_qk_fwd(inpl, inpl, stride, fq2, fk2, dqw, dkw, dpos, T, H, Hk, D,
                    eps, theta, NULL));
    RC(trn_cuda_sync());
    size_t dv = s_ndiff(out, ref, (size_t) T, (size_t) S, (size_t) stride, 2);
    size_t dr = s_ndiff(fq, rq, (size_t) T, (size_t) H, (size_t) H, 4) +
                s_ndiff(fk, rk, (size_t) T, (size_t) Hk, (size_t) Hk, 4);
    size_t di = s_ndiff(inpl, ref, (size_t) T, (size_t) S, (size_t) stride, 2) +
                s_ndiff(fq2, rq, (size_t) T, (size_t) H, (size_t) H, 4) +
                s_ndiff(fk2, rk, (size_t) T, (size_t) Hk, (size_t) Hk, 4);
    char name[96];
    snprintf(name, sizeof name, "qk fwd T%d H%d/%d D%d values differing", T, H,
             Hk, D);
    s_check(name, (double) dv, 0);
    snprintf(name, sizeof name, "qk fwd T%d H%d/%d D%d rstd differing", T, H,
             Hk, D);
    s_check(name, (double) dr, 0);
    snprintf(name, sizeof name, "qk fwd T%d H%d/%d D%d in place differing", T,
             H, Hk, D);
    s_check(name, (double) di, 0);

    trn_bf16_t *ga = s_dev(hg, n * 2), *gb = s_dev(hg, n * 2);
    float *wa = s_dev(hdwf, (size_t) 2 * D * 4);
    float *wb = s_dev(hdwf, (size_t) 2 * D * 4);
    RC(s_qk_unfused_bwd(ga, stride, wa, wa + D, in, dqw, dkw, rq, rk, dpos, T,
                        H, Hk, D, theta));
    RC(trn_k_qk_bwd(gb, stride, wb, wb + D, in, dqw, dkw, rq, rk, dpos, T, H,
                    Hk, D, theta, NULL));
    RC(trn_cuda_sync());
    double *a = s_get_bf16(ga, n), *b = s_get_bf16(gb, n);
    size_t nd = 0, nv = 0;
    for (size_t i = 0; i < n; i++) {
        nd += a[i] != b[i];
        /* value heads and padding: the incoming gradient, untouched */
        if ((int) (i % (size_t) stride) >= (H + Hk) * D)
            nv += b[i] != gv[i];
    }
    snprintf(name, sizeof name, "qk bwd T%d H%d/%d D%d dqkv (%zu differ)", T, H,
             Hk, D, nd);
    s_check(name, s_relerr(b, a, n), 1e-3);
    snprintf(name, sizeof name, "qk bwd T%d H%d/%d D%d v untouched", T, H, Hk,
             D);
    s_check(name, (double) nv, 0);
    double *da = s_get_f32(wa, (size_t) 2 * D),
           *db = s_get_f32(wb, (size_t) 2 * D);
    snprintf(name, sizeof name, "qk bwd T%d H%d/%d D%d dw", T, H, Hk, D);
    s_check(name, s_relerr(db, da, (size_t) 2 * D), 1e-5);
    free(a), free(b), free(da), free(db);
    trn_cuda_free(&ga), trn_cuda_free(&gb), trn_cuda_free(&wa);
    trn_cuda_free(&wb), trn_cuda_free(&in), trn_cuda_free(&dqw);
    trn_cuda_free(&dkw), trn_cuda_free(&dpos), trn_cuda_free(&ref);
    trn_cuda_free(&out), trn_cuda_free(&inpl), trn_cuda_free(&rq);
    trn_cuda_free(&rk), trn_cuda_free(&fq), trn_cuda_free(&fk);
    trn_cuda_free(&fq2), trn_cuda_free(&fk2);
    free(hx), free(hg), free(hqw), free(hkw), free(hdw), free(hdwf);
    free(x), free(gv), free(qw), free(kw), free(dw0), free(pos);
}

/* ------------------------------------------------------------------ */

/* Bits of n bf16 values at d that differ from those at e. */
static size_t
s_bf16_diff(const trn_bf16_t *d, const trn_bf16_t *e, size_t n)
{
    trn_bf16_t *x = malloc(n * 2), *y = malloc(n * 2);
    trn_cuda_download(x, d, n * 2);
    trn_cuda_download(y, e, n * 2);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += x[i] != y[i];
    free(x), free(y);
    return bad;
}

/* SwiGLU forward and backward against the reference; with I a multiple of
 * 8 also the 8-wide kernels against the scalar ones (taken when the
 * buffers are not 16-byte aligned), which must give the same bits. */
static void
s_swiglu_check(int T, int I)
{
    size_t nh = (size_t) T * I, nf = 2 * nh;
    double *gu, *da;
    trn_bf16_t *hgu = s_rand_bf16(nf, 4, &gu);
    trn_bf16_t *hda = s_rand_bf16(nh, 1, &da);
    trn_bf16_t *dgu = s_dev(hgu, nf * 2);
    trn_bf16_t *dda = s_dev(hda, nh * 2);
    trn_bf16_t *a = s_dev(NULL, nh * 2);
    trn_bf16_t *g = s_dev(NULL, nf * 2);
    RC(trn_k_swiglu_fwd(a, dgu, T, I, NULL));
    RC(trn_k_swiglu_bwd(g, dda, dgu, T, I, NULL));
    RC(trn_cuda_sync());
    double *ra = malloc(nh * 8), *rg = malloc(nf * 8);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < I; i++) {
            double gg = gu[(size_t) t * 2 * I + i],
                   u = gu[(size_t) t * 2 * I + I + i];
            double sg = 1 / (1 + exp(-gg)), d = da[(size_t) t * I + i];
            ra[(size_t) t * I + i] = gg * sg * u;
            rg[(size_t) t * 2 * I + i] = d * u * sg * (1 + gg * (1 - sg));
            rg[(size_t) t * 2 * I + I + i] = d * gg * sg;
        }
    char name[96];
    double *got;
    snprintf(name, sizeof name, "swiglu fwd %dx%d", T, I);
    s_check(name, s_relerr(got = s_get_bf16(a, nh), ra, nh), 8e-3);
    free(got);
    snprintf(name, sizeof name, "swiglu bwd %dx%d", T, I);
    s_check(name, s_relerr(got = s_get_bf16(g, nf), rg, nf), 8e-3);
    free(got);
    if (I % 8 == 0) {
        /* the same values 8 bytes further on: scalar kernels */
        trn_bf16_t *gu2 = s_dev(NULL, nf * 2 + 8),
                   *da2 = s_dev(NULL, nh * 2 + 8);
        trn_bf16_t *a2 = s_dev(NULL, nh * 2 + 8), *g2 = s_dev(NULL, nf * 2 + 8);
        trn_cuda_upload(gu2 + 4, hgu, nf * 2);
        trn_cuda_upload(da2 + 4, hda, nh * 2);
        RC(trn_k_swiglu_fwd(a2 + 4, gu2 + 4, T, I, NULL));
        RC(trn_k_swiglu_bwd(g2 + 4, da2 + 4, gu2 + 4, T, I, NULL));
        RC(trn_cuda_sync());
        snprintf(name, sizeof name, "swiglu fwd %dx%d 8-wide == scalar (bits)",
                 T, I);
        s_check(name, (double) s_bf16_diff(a, a2 + 4, nh), 0);
        snprintf(name, sizeof name, "swiglu bwd %dx%d 8-wide == scalar (bits)",
                 T, I);
        s_check(name, (double) s_bf16_diff(g, g2 + 4, nf), 0);
        trn_cuda_free(&gu2), trn_cuda_free(&da2), trn_cuda_free(&a2);
        trn_cuda_free(&g2);
    }
    free(ra), free(rg), free(hgu), free(hda), free(gu), free(da);
    trn_cuda_free(&dgu), trn_cuda_free(&dda), trn_cuda_free(&a),
        trn_cuda_free(&g);
}

static void
test_swiglu_embed(void)
{
    s_swiglu_check(100, 700); /* I not a multiple of 8: scalar kernels */
    s_swiglu_check(64, 1024);
    s_swiglu_check(37, 9728); /* Qwen3-4B's intermediate size */

    /* embedding gather and scatter-add, with repeated ids */
    int V = 50, C = 96, T = 40;
    double *tab, *got;
    trn_bf16_t *htab = s_rand_bf16((size_t) V * C, 1, &tab);
    int32_t ids[40];
    for (int t = 0; t < T; t++)
        ids[t] = (t * 7) % 13;
    float *hdx = malloc((size_t) T * C * 4);
    double *rdt = calloc((size_t) V * C, 8), *rx = malloc((size_t) T * C * 8);
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) {
            hdx[t * C + c] = (float) s_rand();
            rdt[ids[t] * C + c] += hdx[t * C + c];
            rx[t * C + c] = tab[ids[t] * C + c];
        }
    trn_bf16_t *dtab = s_dev(htab, (size_t) V * C * 2);
    int32_t *dids = s_dev(ids, sizeof ids);
    float *dx = s_dev(NULL, (size_t) T * C * 4);
    float *ddx = s_dev(hdx, (size_t) T * C * 4);
    float *dgt = s_dev(NULL, (size_t) V * C * 4);
    trn_cuda_memset(dgt, 0, (size_t) V * C * 4, NULL);
    RC(trn_k_embed_fwd(dx, dtab, dids, T, C, V, NULL));
    RC(trn_k_embed_bwd(dgt, ddx, dids, T, C, V, NULL));
    RC(trn_cuda_sync());
    s_check("embedding fwd",
            s_relerr(got = s_get_f32(dx, (size_t) T * C), rx, (size_t) T * C),
            1e-7);
    free(got);
    s_check("embedding bwd (repeated ids)",
            s_relerr(got = s_get_f32(dgt, (size_t) V * C), rdt, (size_t) V * C),
            1e-6);
    free(got), free(hdx), free(rdt), free(rx), free(htab), free(tab);
    trn_cuda_free(&dtab), trn_cuda_free(&dids), trn_cuda_free(&dx);
    trn_cuda_free(&ddx), trn_cuda_free(&dgt);
}

/* ------------------------------------------------------------------ */

/* Sequences of random lengths (some of one token) whose starts fall
 * anywhere in the tiles; or one sequence when nseg is 1. */
static void
s_rand_segs(int32_t *seg, int T, int nseg)
{
    int cur = 0;
    for (int t = 0; t < T; t++) {
        if (t > 0 && nseg > 1 && (s_rand() + 1) * 0.5 * T < nseg - 1)
            cur++;
        seg[t] = cur;
    }
}

/* Reference attention in double over packed sequences. */
static void
s_attn_ref(const double *q, const double *k, const double *v, int stride,
           const int32_t *seg, int T, int H, int Hk, int D, const double *dout,
           double *o, double *lse, double *dq, double *dk, double *dv)
{
    int G = H / Hk;
    double scale = 1 / sqrt((double) D);
    double *p = malloc((size_t) T * 8), *dp = malloc((size_t) T * 8);
    memset(dq, 0, (size_t) T * stride * 8);
    memset(dk, 0, (size_t) T * stride * 8);
    memset(dv, 0, (size_t) T * stride * 8);
    for (int h = 0; h < H; h++) {
        int hk = h / G;
        for (int t = 0; t < T; t++) {
            const double *qr = q + (size_t) t * stride + h * D;
            double mx = -INFINITY;
            for (int u = 0; u <= t; u++) {
                if (seg[u] != seg[t]) {
                    p[u] = -INFINITY;
                    continue;
                }
                const double *kr = k + (size_t) u * stride + hk * D;
                double s = 0;
                for (int d = 0; d < D; d++)
                    s += qr[d] * kr[d];
                p[u] = s * scale;
                if (p[u] > mx)
                    mx = p[u];
            }
            double sum = 0;
            for (int u = 0; u <= t; u++) {
                p[u] = p[u] == -INFINITY ? 0 : exp(p[u] - mx);
                sum += p[u];
            }
            lse[(size_t) h * T + t] = mx + log(sum);
            double *orow = o + (size_t) t * H * D + h * D;
            for (int d = 0; d < D; d++) {
                double s = 0;
                for (int u = 0; u <= t; u++)
                    s += p[u] / sum * v[(size_t) u * stride + hk * D + d];
                orow[d] = s;
            }
            /* backward for this row */
            const double *dor = dout + (size_t) t * H * D + h * D;
            double delta = 0;
            for (int d = 0; d < D; d++)
                delta += dor[d] * orow[d];
            for (int u = 0; u <= t; u++) {
                double pp = p[u] / sum;
                double s = 0;
                for (int d = 0; d < D; d++)
                    s += dor[d] * v[(size_t) u * stride + hk * D + d];
                dp[u] = pp * (s - delta) * scale;
                for (int d = 0; d < D; d++)
                    dv[(size_t) u * stride + hk * D + d] += pp * dor[d];
            }
            for (int u = 0; u <= t; u++)
                for (int d = 0; d < D; d++) {
                    dq[(size_t) t * stride + h * D + d] +=
                        dp[u] * k[(size_t) u * stride + hk * D + d];
                    dk[(size_t) u * stride + hk * D + d] += dp[u] * qr[d];
                }
        }
    }
    free(p), free(dp);
}

static void
test_attention(int T, int H, int Hk, int D, int nseg)
{
    int stride = (H + 2 * Hk) * D; /* q | k | v packed per token */
    size_t n = (size_t) T * stride;
    double *qkv, *dout;
    trn_bf16_t *hqkv = s_rand_bf16(n, 1.5, &qkv);
    trn_bf16_t *hdo = s_rand_bf16((size_t) T * H * D, 1, &dout);
    int32_t *seg = malloc((size_t) T * 4);
    if (nseg < 0) /* random starts (and lengths of one token) */
        s_rand_segs(seg, T, -nseg);
    else
        for (int t = 0; t < T; t++)
            seg[t] = (int) ((long) t * nseg / T);
    trn_bf16_t *d_qkv = s_dev(hqkv, n * 2);
    trn_bf16_t *d_do = s_dev(hdo, (size_t) T * H * D * 2);
    int32_t *d_seg = s_dev(seg, (size_t) T * 4);
    trn_bf16_t *d_o = s_dev(NULL, (size_t) T * H * D * 2);
    float *d_lse = s_dev(NULL, (size_t) T * H * 4);
    trn_bf16_t *d_dqkv = s_dev(NULL, n * 2);
    float *scratch = s_dev(NULL, (size_t) T * H * (D + 1) * 4);
    const trn_bf16_t *q = d_qkv, *k = d_qkv + H * D, *v = d_qkv + (H + Hk) * D;
    RC(trn_k_attn_fwd(d_o, d_lse, q, k, v, stride, d_seg, T, H, Hk, D, NULL));
    RC(trn_k_attn_bwd(d_dqkv, d_dqkv + H * D, d_dqkv + (H + Hk) * D, stride,
                      scratch, d_do, d_o, d_lse, q, k, v, stride, d_seg, T, H,
                      Hk, D, NULL));
    RC(trn_cuda_sync());
    double *ro = malloc((size_t) T * H * D * 8),
           *rl = malloc((size_t) T * H * 8);
    double *rg = malloc(n * 8), *rdk = malloc(n * 8), *rdv = malloc(n * 8);
    s_attn_ref(qkv, qkv + H * D, qkv + (H + Hk) * D, stride, seg, T, H, Hk, D,
               dout, ro, rl, rg, rdk, rdv);
    for (size_t t = 0; t < (size_t) T; t++) /* merge into one q|k|v layout */
        for (int j = 0; j < Hk * D; j++) {
            rg[t * stride + H * D + j] = rdk[t * stride + j];
            rg[t * stride + (H + Hk) * D + j] = rdv[t * stride + j];
        }
    char name[96];
    double *got;
    snprintf(name, sizeof name, "attention fwd T=%d H=%d Hk=%d D=%d seqs=%d", T,
             H, Hk, D, seg[T - 1] + 1);
    s_check(name,
            s_relerr(got = s_get_bf16(d_o, (size_t) T * H * D), ro,
                     (size_t) T * H * D),
            1e-2);
    free(got);
    snprintf(name, sizeof name, "attention lse D=%d", D);
    s_check(
        name,
        s_relerr(got = s_get_f32(d_lse, (size_t) T * H), rl, (size_t) T * H),
        1e-3);
    free(got);
    snprintf(name, sizeof name, "attention bwd dq|dk|dv D=%d", D);
    s_check(name, s_relerr(got = s_get_bf16(d_dqkv, n), rg, n), 2e-2);
    free(got);
    free(ro), free(rl), free(rg), free(rdk), free(rdv), free(hqkv), free(hdo);
    free(qkv), free(dout), free(seg);
    trn_cuda_free(&d_qkv), trn_cuda_free(&d_do), trn_cuda_free(&d_seg);
    trn_cuda_free(&d_o), trn_cuda_free(&d_lse), trn_cuda_free(&d_dqkv);
    trn_cuda_free(&scratch);
}

/* max over i of |a - b| / max(|b|, 1) (lse values near 0 compare
 * absolutely) */
static double
s_maxrel(const double *a, const double *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]) / fmax(fabs(b[i]), 1.0);
        if (!(d <= m))
            m = d; /* NaN sticks */
    }
    return m;
}

/* The attention forward pass under the settings of run `how`: 0 the
 * default path (the wgmma kernel at head_dim 128 on a Hopper device, its
 * schedule as LISA_ATTN_H_SCHED says), 1 its serial schedule (0),
 * S_PORTABLE the portable kernel (LISA_ATTN_PORTABLE=1). The environment
 * is restored after. */
#define S_PORTABLE 2
static const char *const s_sched_names[S_PORTABLE + 1] = {"default", "0",
                                                          "portable"};

/* Whether run `how` is wanted: the default and portable runs always;
 * the others when LISA_TEST_SCHEDS (names, comma-separated) is unset or
 * names them. */
static int
s_sched_on(int how)
{
    const char *l = getenv("LISA_TEST_SCHEDS");
    if (how == 0 || how == S_PORTABLE || !l)
        return 1;
    size_t n = strlen(s_sched_names[how]);
    for (const char *p = l; (p = strstr(p, s_sched_names[how])) != NULL; p += n)
        if ((p == l || p[-1] == ',') && (p[n] == ',' || p[n] == 0))
            return 1;
    return 0;
}

static lisa_rc_t
s_attn_fwd_as(int how, trn_bf16_t *o, float *lse, const trn_bf16_t *q,
              const trn_bf16_t *k, const trn_bf16_t *v, int stride,
              const int32_t *seg, int T, int H, int Hk, int D)
{
    const char *var =
        how == S_PORTABLE ? "LISA_ATTN_PORTABLE" : "LISA_ATTN_H_SCHED";
    const char *old = getenv(var);
    char keep[32] = "";
    if (old)
        snprintf(keep, sizeof keep, "%s", old);
    if (how > 0)
        setenv(var, how == S_PORTABLE ? "1" : s_sched_names[how], 1);
    lisa_rc_t rc =
        trn_k_attn_fwd(o, lse, q, k, v, stride, seg, T, H, Hk, D, NULL);
    if (how > 0 && old)
        setenv(var, keep, 1);
    else if (how > 0)
        unsetenv(var);
    return rc;
}

/* The forward pass on the default path and with the other schedules
 * against the portable one, on the same inputs, outputs poisoned before
 * each run: o within bf16 rounding, lse within 1e-4. Prints how many
 * outputs differ in any bit (none: both runs took the same kernel). */
static void
test_attn_paths(int T, int H, int Hk, int nseg)
{
    const int D = 128, stride = (H + 2 * Hk) * D;
    size_t n = (size_t) T * stride, no = (size_t) T * H * D;
    double *qkv;
    trn_bf16_t *hqkv = s_rand_bf16(n, 1.5, &qkv);
    int32_t *seg = malloc((size_t) T * 4);
    s_rand_segs(seg, T, nseg);
    trn_bf16_t *d_qkv = s_dev(hqkv, n * 2);
    int32_t *d_seg = s_dev(seg, (size_t) T * 4);
    trn_bf16_t *d_o = s_dev(NULL, no * 2);
    float *d_lse = s_dev(NULL, (size_t) T * H * 4);
    const trn_bf16_t *q = d_qkv, *k = d_qkv + H * D, *v = d_qkv + (H + Hk) * D;
    /* the portable run first; each other checked as it comes (a run
     * that never ends leaves the ones before it printed) */
    double *o[S_PORTABLE + 1], *l[S_PORTABLE + 1];
    for (int r = 0; r <= S_PORTABLE; r++) {
        const int how = (r + S_PORTABLE) % (S_PORTABLE + 1);
        o[how] = l[how] = NULL;
        if (!s_sched_on(how))
            continue;
        RC(trn_cuda_memset(d_o, 0xff, no * 2, NULL));
        RC(trn_cuda_memset(d_lse, 0xff, (size_t) T * H * 4, NULL));
        RC(s_attn_fwd_as(how, d_o, d_lse, q, k, v, stride, d_seg, T, H, Hk, D));
        RC(trn_cuda_sync());
        o[how] = s_get_bf16(d_o, no);
        l[how] = s_get_f32(d_lse, (size_t) T * H);
        if (how == S_PORTABLE)
            continue;
        size_t diff = 0;
        for (size_t i = 0; i < no; i++)
            diff += memcmp(&o[how][i], &o[S_PORTABLE][i], sizeof(double)) != 0;
        char name[96];
        snprintf(name, sizeof name,
                 "attn fwd %s vs portable T=%d H=%d Hk=%d seqs=%d",
                 s_sched_names[how], T, H, Hk, seg[T - 1] + 1);
        s_check(name, s_relerr(o[how], o[S_PORTABLE], no), 1e-2);
        printf("  (%zu of %zu outputs differ)\n", diff, no);
        s_check("attn lse vs portable (max rel)",
                s_maxrel(l[how], l[S_PORTABLE], (size_t) T * H), 1e-4);
        fflush(stdout);
    }
    for (int how = 0; how <= S_PORTABLE; how++)
        free(o[how]), free(l[how]);
    free(hqkv), free(qkv), free(seg);
    trn_cuda_free(&d_qkv), trn_cuda_free(&d_seg), trn_cuda_free(&d_o);
    trn_cuda_free(&d_lse);
}

/* An environment variable set for a call, and what it was before. */
typedef struct {
    const char *var;
    int had;
    char old[32];
} s_env_t;

/* Sets var to val (NULL: leaves it as it is) and remembers its value. */
static s_env_t
s_env_push(const char *var, const char *val)
{
    s_env_t e = {.var = var};
    const char *old = getenv(var);
    e.had = old != NULL;
    if (old)
        snprintf(e.old, sizeof e.old, "%s", old);
    if (val)
        setenv(var, val, 1);
    return e;
}

static void
s_env_pop(const s_env_t *e)
{
    if (e->had)
        setenv(e->var, e->old, 1);
    else
        unsetenv(e->var);
}

/* The attention backward pass with LISA_ATTN_HOPPER_BWD set to `hopper`
 * (NULL: as it is) for the call; the environment is restored after. */
static lisa_rc_t
s_attn_bwd_as(const char *hopper, trn_bf16_t *dqkv, float *scratch,
              const trn_bf16_t *dout, const trn_bf16_t *o, const float *lse,
              const trn_bf16_t *qkv, int stride, const int32_t *seg, int T,
              int H, int Hk, int D)
{
    s_env_t e1 = s_env_push("LISA_ATTN_HOPPER_BWD", hopper);
    lisa_rc_t rc = trn_k_attn_bwd(
        dqkv, dqkv + H * D, dqkv + (H + Hk) * D, stride, scratch, dout, o, lse,
        qkv, qkv + H * D, qkv + (H + Hk) * D, stride, seg, T, H, Hk, D, NULL);
    s_env_pop(&e1);
    return rc;
}

/* ||a - b|| / ||b|| over columns ca.. of a and cb.. of b (w of them) of
 * T rows of `stride` values each. */
static double
s_cols_relerr(const double *a, int ca, const double *b, int cb, int stride,
              int T, int w)
{
    double num = 0, den = 0;
    for (size_t t = 0; t < (size_t) T; t++)
        for (int j = 0; j < w; j++) {
            double x = a[t * stride + ca + j], y = b[t * stride + cb + j];
            num += (x - y) * (x - y);
            den += y * y;
        }
    return sqrt(num) / (sqrt(den) + 1e-30);
}

/* dq, dk and dv of run `got` (one q|k|v layout) against the same parts
 * of a reference: `ref` in that layout, or (refk, refv non-NULL) the
 * reference's dq in the q columns of ref and its dk, dv from column 0 of
 * refk and refv. */
static void
s_check_dqkv(const char *what, const double *got, const double *ref,
             const double *refk, const double *refv, int T, int H, int Hk)
{
    const int D = 128, stride = (H + 2 * Hk) * D;
    const char *part[3] = {"dq", "dk", "dv"};
    const int col[3] = {0, H * D, (H + Hk) * D}, w[3] = {H * D, Hk * D, Hk * D};
    for (int i = 0; i < 3; i++) {
        const double *r = i == 0 || !refk ? ref : i == 1 ? refk : refv;
        int rc = refk && i > 0 ? 0 : col[i];
        char name[96];
        snprintf(name, sizeof name, "%s %s", what, part[i]);
        s_check(name, s_cols_relerr(got, col[i], r, rc, stride, T, w[i]), 2e-2);
    }
}

/* The backward pass at head_dim 128 with LISA_ATTN_HOPPER_BWD=1 (the
 * wgmma kernel) against the portable kernel, on the same inputs and the
 * same forward outputs, dq|dk|dv and the scratch poisoned before each
 * run: dq, dk and dv each within bf16 rounding; with `ref`, both against
 * the double reference too. Skipped, with a note, on a device not of
 * compute capability 9.x (there the switch changes nothing). */
static void
test_attn_bwd_paths(int T, int H, int Hk, int nseg, int ref)
{
    const int D = 128, stride = (H + 2 * Hk) * D;
    if (trn_cuda_cc_major() != 9) {
        printf("attn bwd hopper T=%d H=%d Hk=%d: skipped (not compute "
               "capability 9.x)\n",
               T, H, Hk);
        return;
    }
    size_t n = (size_t) T * stride, no = (size_t) T * H * D;
    size_t nscr = (size_t) T * H * (D + 1) * 4;
    double *qkv, *dout;
    trn_bf16_t *hqkv = s_rand_bf16(n, 1.5, &qkv);
    trn_bf16_t *hdo = s_rand_bf16(no, 1, &dout);
    int32_t *seg = malloc((size_t) T * 4);
    s_rand_segs(seg, T, nseg);
    trn_bf16_t *d_qkv = s_dev(hqkv, n * 2), *d_do = s_dev(hdo, no * 2);
    int32_t *d_seg = s_dev(seg, (size_t) T * 4);
    trn_bf16_t *d_o = s_dev(NULL, no * 2), *d_dqkv = s_dev(NULL, n * 2);
    float *d_lse = s_dev(NULL, (size_t) T * H * 4), *scr = s_dev(NULL, nscr);
    RC(trn_k_attn_fwd(d_o, d_lse, d_qkv, d_qkv + H * D, d_qkv + (H + Hk) * D,
                      stride, d_seg, T, H, Hk, D, NULL));
    double *got[2];
    for (int r = 0; r < 2; r++) { /* the portable kernel, then wgmma */
        RC(trn_cuda_memset(d_dqkv, 0xff, n * 2, NULL));
        RC(trn_cuda_memset(scr, 0xff, nscr, NULL));
        RC(s_attn_bwd_as(r ? "1" : "0", d_dqkv, scr, d_do, d_o, d_lse, d_qkv,
                         stride, d_seg, T, H, Hk, D));
        RC(trn_cuda_sync());
        got[r] = s_get_bf16(d_dqkv, n);
    }
    char name[96];
    snprintf(name, sizeof name, "attn bwd hopper vs portable T=%d G=%d s=%d", T,
             H / Hk, seg[T - 1] + 1);
    s_check_dqkv(name, got[1], got[0], NULL, NULL, T, H, Hk);
    if (ref) {
        double *ro = malloc(no * 8), *rl = malloc((size_t) T * H * 8);
        double *rq = malloc(n * 8), *rk = malloc(n * 8), *rv = malloc(n * 8);
        s_attn_ref(qkv, qkv + H * D, qkv + (H + Hk) * D, stride, seg, T, H, Hk,
                   D, dout, ro, rl, rq, rk, rv);
        snprintf(name, sizeof name, "attn bwd hopper vs ref T=%d", T);
        s_check_dqkv(name, got[1], rq, rk, rv, T, H, Hk);
        snprintf(name, sizeof name, "attn bwd portable vs ref T=%d", T);
        s_check_dqkv(name, got[0], rq, rk, rv, T, H, Hk);
        free(ro), free(rl), free(rq), free(rk), free(rv);
    }
    fflush(stdout);
    free(got[0]), free(got[1]), free(hqkv), free(hdo), free(qkv);
    free(dout);
    free(seg);
    trn_cuda_free(&d_qkv), trn_cuda_free(&d_do), trn_cuda_free(&d_seg);
    trn_cuda_free(&d_o), trn_cuda_free(&d_dqkv), trn_cuda_free(&d_lse);
    trn_cuda_free(&scr);
}

/* ------------------------------------------------------------------ */

/* Log-probs, entropy, lse and dlogits against a double reference, for a
 * vocabulary of V (a multiple of 4 takes the kernels' 16-byte loads). */
static void
test_logprob_v(int V)
{
    int rows = 37;
    char what[96];
    float inv_temp = 1.0f / 0.7f;
    size_t n = (size_t) rows * V;
    float *z = malloc(n * 4), *g = malloc((size_t) rows * 4),
          *ge = malloc((size_t) rows * 4);
    int32_t *tgt = malloc((size_t) rows * 4);
    for (size_t i = 0; i < n; i++)
        z[i] = (float) (s_rand() * 8);
    for (int r = 0; r < rows; r++) {
        tgt[r] = r == 5 ? -1 : (int) ((unsigned) (r * 7919) % (unsigned) V);
        g[r] = (float) s_rand();
        ge[r] = (float) s_rand() * 0.1f;
    }
    float *dz = s_dev(z, n * 4), *dg = s_dev(g, (size_t) rows * 4),
          *dge = s_dev(ge, (size_t) rows * 4);
    int32_t *dt = s_dev(tgt, (size_t) rows * 4);
    float *lp = s_dev(NULL, (size_t) rows * 4),
          *ent = s_dev(NULL, (size_t) rows * 4);
    float *lse = s_dev(NULL, (size_t) rows * 4);
    trn_bf16_t *dl = s_dev(NULL, n * 2);
    RC(trn_k_logprob(lp, ent, lse, dz, dt, rows, V, inv_temp, NULL));
    RC(trn_k_logprob_bwd(dl, dz, dt, lse, ent, dg, dge, rows, V, inv_temp,
                         NULL));
    RC(trn_cuda_sync());
    double *rlp = calloc((size_t) rows, 8), *rent = calloc((size_t) rows, 8);
    double *rlse = calloc((size_t) rows, 8);
    double *rdl = calloc(n, 8);
    for (int r = 0; r < rows; r++) {
        if (tgt[r] < 0)
            continue;
        const float *zr = z + (size_t) r * V;
        double mx = -INFINITY, se = 0;
        for (int j = 0; j < V; j++)
            mx = fmax(mx, zr[j] * (double) inv_temp);
        for (int j = 0; j < V; j++)
            se += exp(zr[j] * (double) inv_temp - mx);
        double lse = mx + log(se), H = 0;
        for (int j = 0; j < V; j++) {
            double lpj = zr[j] * (double) inv_temp - lse;
            H -= exp(lpj) * lpj;
        }
        rlp[r] = zr[tgt[r]] * (double) inv_temp - lse;
        rent[r] = H;
        rlse[r] = lse;
        for (int j = 0; j < V; j++) {
            double lpj = zr[j] * (double) inv_temp - lse, p = exp(lpj);
            rdl[(size_t) r * V + j] =
                inv_temp * (g[r] * ((j == tgt[r]) - p) - ge[r] * p * (lpj + H));
        }
    }
    double *got;
    snprintf(what, sizeof what, "logprob of chosen tokens (T=0.7), V=%d", V);
    s_check(what,
            s_relerr(got = s_get_f32(lp, (size_t) rows), rlp, (size_t) rows),
            1e-5);
    free(got);
    snprintf(what, sizeof what, "entropy, V=%d", V);
    s_check(what,
            s_relerr(got = s_get_f32(ent, (size_t) rows), rent, (size_t) rows),
            1e-5);
    free(got);
    snprintf(what, sizeof what, "log-sum-exp, V=%d", V);
    s_check(what,
            s_relerr(got = s_get_f32(lse, (size_t) rows), rlse, (size_t) rows),
            1e-6);
    free(got);
    snprintf(what, sizeof what, "dlogits (logprob + entropy terms), V=%d", V);
    s_check(what, s_relerr(got = s_get_bf16(dl, n), rdl, n), 8e-3);
    free(got), free(rlp), free(rent), free(rlse), free(rdl), free(z), free(g),
        free(ge), free(tgt);
    trn_cuda_free(&dz), trn_cuda_free(&dg), trn_cuda_free(&dge),
        trn_cuda_free(&dt);
    trn_cuda_free(&lp), trn_cuda_free(&ent), trn_cuda_free(&lse),
        trn_cuda_free(&dl);
}

static void
test_logprob(void)
{
    test_logprob_v(5003);
    test_logprob_v(5004);
}

static void
test_adamw(void)
{
    size_t n = 100003;
    float *w = malloc(n * 4), *m = calloc(n, 4), *v = calloc(n, 4),
          *gr = malloc(n * 4);
    double ss = 0;
    for (size_t i = 0; i < n; i++) {
        w[i] = (float) s_rand();
        gr[i] = (float) s_rand() * 0.5f;
        ss += (double) gr[i] * gr[i];
    }
    float *dw = s_dev(w, n * 4), *dm = s_dev(m, n * 4), *dv = s_dev(v, n * 4),
          *dg = s_dev(gr, n * 4);
    float *dss = s_dev(NULL, 4);
    trn_bf16_t *wb = s_dev(NULL, n * 2);
    trn_cuda_memset(dss, 0, 4, NULL);
    RC(trn_k_sumsq(dss, dg, n, NULL));
    float clip = 1.0f, lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f,
          wd = 0.01f;
    for (int step = 1; step <= 3; step++)
        RC(trn_k_adamw(dw, wb, dm, dv, dg, n, lr, b1, b2, eps, wd, step, clip,
                       dss, NULL));
    RC(trn_cuda_sync());
    double norm = sqrt(ss), scale = norm > clip ? clip / (norm + 1e-6) : 1;
    double *ref = malloc(n * 8), *rss = malloc(8);
    rss[0] = ss;
    for (size_t i = 0; i < n; i++) {
        double wi = w[i], mi = 0, vi = 0;
        for (int step = 1; step <= 3; step++) {
            double g = gr[i] * scale;
            mi = b1 * mi + (1 - b1) * g;
            vi = b2 * vi + (1 - b2) * g * g;
            double mh = mi / (1 - pow(b1, step)), vh = vi / (1 - pow(b2, step));
            wi = wi * (1 - lr * wd) - lr * mh / (sqrt(vh) + eps);
        }
        ref[i] = wi;
    }
    double *got;
    s_check("grad sum of squares", s_relerr(got = s_get_f32(dss, 1), rss, 1),
            1e-5);
    free(got);
    s_check("adamw 3 steps with clipping (fp32 master)",
            s_relerr(got = s_get_f32(dw, n), ref, n), 1e-6);
    free(got);
    s_check("adamw bf16 copy", s_relerr(got = s_get_bf16(wb, n), ref, n), 5e-3);
    free(got), free(ref), free(rss), free(w), free(m), free(v), free(gr);
    trn_cuda_free(&dw), trn_cuda_free(&dm), trn_cuda_free(&dv),
        trn_cuda_free(&dg);
    trn_cuda_free(&dss), trn_cuda_free(&wb);
}

/* ------------------------------------------------------------------ */

/* The forward of a few tokens (one token: the matrix-vector path): fp32
 * output accumulated onto what it held, bf16 output overwritten. */
static void
test_linear_few(trn_blas_t *b, int T, int K, int N)
{
    double *x, *w, *y0;
    trn_bf16_t *hx = s_rand_bf16((size_t) T * K, 1, &x);
    trn_bf16_t *hw = s_rand_bf16((size_t) N * K, 0.1, &w);
    trn_bf16_t *hy0 = s_rand_bf16((size_t) T * N, 1, &y0);
    float *fy0 = malloc((size_t) T * N * 4);
    for (size_t i = 0; i < (size_t) T * N; i++)
        fy0[i] = (float) y0[i];
    trn_bf16_t *dx_ = s_dev(hx, (size_t) T * K * 2);
    trn_bf16_t *dw_ = s_dev(hw, (size_t) N * K * 2);
    float *y32 = s_dev(fy0, (size_t) T * N * 4);
    trn_bf16_t *y16 = s_dev(NULL, (size_t) T * N * 2);
    RC(trn_linear_fwd(b, y32, NULL, dx_, dw_, T, K, N, 1, NULL));
    /* with an L2 prefetch hint (here its own weights): the same results */
    trn_linear_next(b, dw_, (size_t) N * K * 2);
    RC(trn_linear_fwd(b, NULL, y16, dx_, dw_, T, K, N, 0, NULL));
    RC(trn_cuda_sync());
    double *ry = malloc((size_t) T * N * 8), *ra = malloc((size_t) T * N * 8);
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += x[(size_t) t * K + k] * w[(size_t) n * K + k];
            ry[(size_t) t * N + n] = s;
            ra[(size_t) t * N + n] = s + y0[(size_t) t * N + n];
        }
    char what[96];
    double *g = s_get_f32(y32, (size_t) T * N);
    snprintf(what, sizeof what, "linear fwd T=%d K=%d N=%d (fp32 +=)", T, K, N);
    s_check(what, s_relerr(g, ra, (size_t) T * N), 1e-5);
    free(g);
    g = s_get_bf16(y16, (size_t) T * N);
    snprintf(what, sizeof what, "linear fwd T=%d K=%d N=%d (bf16)", T, K, N);
    s_check(what, s_relerr(g, ry, (size_t) T * N), 5e-3);
    free(g);
    trn_cuda_free(&dx_), trn_cuda_free(&dw_), trn_cuda_free(&y32);
    trn_cuda_free(&y16);
    free(hx), free(hw), free(hy0), free(x), free(w), free(y0), free(fy0);
    free(ry), free(ra);
}

/* The gate|up product with SwiGLU in its kernel (trn_linear_fwd_glu)
 * against the product into bf16 then trn_k_swiglu_fwd: the same bits. */
static void
test_linear_glu(trn_blas_t *b, int T, int K, int I)
{
    double *x, *w;
    trn_bf16_t *hx = s_rand_bf16((size_t) T * K, 1, &x);
    trn_bf16_t *hw = s_rand_bf16((size_t) 2 * I * K, 0.1, &w);
    trn_bf16_t *dx_ = s_dev(hx, (size_t) T * K * 2);
    trn_bf16_t *dw_ = s_dev(hw, (size_t) 2 * I * K * 2);
    trn_bf16_t *gu = s_dev(NULL, (size_t) T * 2 * I * 2);
    trn_bf16_t *a1 = s_dev(NULL, (size_t) T * I * 2);
    trn_bf16_t *a2 = s_dev(NULL, (size_t) T * I * 2);
    trn_linear_next(b, dw_, (size_t) I * K * 2); /* a prefetch hint */
    RC(trn_linear_fwd_glu(b, a1, dx_, dw_, T, K, I, NULL));
    RC(trn_linear_fwd(b, NULL, gu, dx_, dw_, T, K, 2 * I, 0, NULL));
    RC(trn_k_swiglu_fwd(a2, gu, T, I, NULL));
    RC(trn_cuda_sync());
    double *g1 = s_get_bf16(a1, (size_t) T * I);
    double *g2 = s_get_bf16(a2, (size_t) T * I);
    double diff = 0;
    for (size_t i = 0; i < (size_t) T * I; i++)
        diff = fmax(diff, fabs(g1[i] - g2[i]));
    char what[96];
    snprintf(what, sizeof what, "linear + swiglu T=%d K=%d I=%d (max diff)", T,
             K, I);
    s_check(what, diff, 0);
    trn_cuda_free(&dx_), trn_cuda_free(&dw_), trn_cuda_free(&gu);
    trn_cuda_free(&a1), trn_cuda_free(&a2);
    free(hx), free(x), free(hw), free(w), free(g1), free(g2);
}

/* The products of a few tokens on packed weights (trn_linear_pack,
 * trn_linear_set_packed) against the same products on the plain ones: the
 * same bits (the bulk kernel does the same arithmetic on the same values;
 * only where they come from differs). With GLU the gate|up product. */
static void
test_linear_packed(trn_blas_t *b, int T, int K, int N, int glu)
{
    double *x, *w;
    trn_bf16_t *hx = s_rand_bf16((size_t) T * K, 1, &x);
    trn_bf16_t *hw = s_rand_bf16((size_t) N * K, 0.1, &w);
    trn_bf16_t *dx_ = s_dev(hx, (size_t) T * K * 2);
    /* the weights inside a larger arena, as the model's are */
    size_t off = 4096, wn = (size_t) N * K;
    trn_bf16_t *arena = s_dev(NULL, (off + wn) * 2);
    trn_bf16_t *packed = s_dev(NULL, (off + wn) * 2);
    RC(trn_cuda_upload(arena + off, hw, wn * 2));
    int outs = glu ? N / 2 : N;
    float *y[2];
    trn_bf16_t *yb[2];
    for (int p = 0; p < 2; p++) {
        y[p] = s_dev(NULL, (size_t) T * outs * 4);
        yb[p] = s_dev(NULL, (size_t) T * outs * 2);
        RC(trn_cuda_memset(y[p], 0, (size_t) T * outs * 4, NULL));
        if (p == 1) {
            RC(trn_linear_pack(packed + off, arena + off, N, K, NULL));
            trn_linear_set_packed(b, arena, packed, (off + wn) * 2);
        }
        /* a prefetch hint inside the arena: it follows the weights */
        trn_linear_next(b, arena + off, wn * 2);
        if (glu) {
            RC(trn_linear_fwd_glu(b, yb[p], dx_, arena + off, T, K, N / 2,
                                  NULL));
        } else {
            RC(trn_linear_fwd(b, y[p], NULL, dx_, arena + off, T, K, N, 1,
                              NULL));
            RC(trn_linear_fwd(b, NULL, yb[p], dx_, arena + off, T, K, N, 0,
                              NULL));
        }
    }
    trn_linear_set_packed(b, NULL, NULL, 0);
    RC(trn_cuda_sync());
    double *g[4] = {s_get_f32(y[0], (size_t) T * outs),
                    s_get_f32(y[1], (size_t) T * outs),
                    s_get_bf16(yb[0], (size_t) T * outs),
                    s_get_bf16(yb[1], (size_t) T * outs)};
    double diff = 0, big = 0;
    for (size_t i = 0; i < (size_t) T * outs; i++) {
        diff = fmax(diff, fabs(g[0][i] - g[1][i]));
        diff = fmax(diff, fabs(g[2][i] - g[3][i]));
        big = fmax(big, fabs(g[2][i]));
    }
    char what[112];
    snprintf(what, sizeof what, "packed %s T=%d K=%d N=%d (max diff)",
             glu ? "gate|up" : "linear", T, K, N);
    s_check(what, diff, 0);
    /* and the outputs are not all zero (the check above would pass) */
    snprintf(what, sizeof what, "packed %s T=%d K=%d N=%d (outputs set)",
             glu ? "gate|up" : "linear", T, K, N);
    s_check(what, big > 0 ? 0 : 1, 0);
    for (int i = 0; i < 4; i++)
        free(g[i]);
    for (int p = 0; p < 2; p++)
        trn_cuda_free(&y[p]), trn_cuda_free(&yb[p]);
    trn_cuda_free(&dx_), trn_cuda_free(&arena), trn_cuda_free(&packed);
    free(hx), free(x), free(hw), free(w);
}

/* ---- RMSNorm folded into the products (trn_linear_norm_fits) ----- */

#define S_FOLD_EPS 1e-6f

/* One shape's inputs for the fold checks: an o-like product (K in, C
 * out) adding into the residual y0 ([tmax, C] fp32), the next norm's
 * weight wn (also on the host: hwn), then a plain product (N out) and a
 * gate|up product with SwiGLU (2I out) of the normed rows. */
typedef struct {
    int C, K, N, I, tmax;
    trn_bf16_t *xo, *wo, *wn, *wq, *wgu, *hwn;
    float *y0;
} s_fold_in_t;

/* n random bf16 values in [offset - scale, offset + scale) on the device
 * (and on the host in *host when it is not NULL). */
static trn_bf16_t *
s_fold_rand(size_t n, double scale, double offset, trn_bf16_t **host)
{
    trn_bf16_t *h = malloc(n * 2);
    for (size_t i = 0; i < n; i++)
        h[i] = trn_f32_to_bf16((float) (offset + s_rand() * scale));
    trn_bf16_t *d = s_dev(h, n * 2);
    if (host)
        *host = h;
    else
        free(h);
    return d;
}

static s_fold_in_t
s_fold_in_new(int C, int K, int N, int I, int tmax)
{
    s_fold_in_t f = {.C = C, .K = K, .N = N, .I = I, .tmax = tmax};
    f.xo = s_fold_rand((size_t) tmax * K, 1, 0, NULL);
    f.wo = s_fold_rand((size_t) C * K, 0.05, 0, NULL);
    f.wn = s_fold_rand((size_t) C, 0.5, 1, &f.hwn);
    f.wq = s_fold_rand((size_t) N * C, 0.05, 0, NULL);
    f.wgu = s_fold_rand((size_t) 2 * I * C, 0.05, 0, NULL);
    float *hy = malloc((size_t) tmax * C * 4);
    for (size_t i = 0; i < (size_t) tmax * C; i++)
        hy[i] = (float) (2 * s_rand());
    f.y0 = s_dev(hy, (size_t) tmax * C * 4);
    free(hy);
    return f;
}

static void
s_fold_in_free(s_fold_in_t *f)
{
    trn_cuda_free(&f->xo), trn_cuda_free(&f->wo), trn_cuda_free(&f->wn);
    trn_cuda_free(&f->wq), trn_cuda_free(&f->wgu), trn_cuda_free(&f->y0);
    free(f->hwn);
}

/* What one run gives (device, poisoned first): the residual y, the
 * normed rows h (folded: bf16(y * wn)) and their partial sums of squares
 * ss, the plain product q and the gate|up product a. */
typedef struct {
    float *y, *ss;
    trn_bf16_t *h, *q, *a;
} s_fold_out_t;

static s_fold_out_t
s_fold_out_new(const s_fold_in_t *in)
{
    size_t T = (size_t) in->tmax, C = (size_t) in->C;
    s_fold_out_t o = {s_dev(NULL, T * C * 4), s_dev(NULL, T * (C / 16) * 4),
                      s_dev(NULL, T * C * 2), s_dev(NULL, T * in->N * 2),
                      s_dev(NULL, T * in->I * 2)};
    return o;
}

static void
s_fold_out_free(s_fold_out_t *o)
{
    trn_cuda_free(&o->y), trn_cuda_free(&o->ss), trn_cuda_free(&o->h);
    trn_cuda_free(&o->q), trn_cuda_free(&o->a);
}

/* How s_fold_run runs the norm: its own kernel, folded into the products,
 * or its input side made by trn_k_rmsnorm_fold (one partial a token). */
enum { S_FOLD_APART, S_FOLD_IN_OUT, S_FOLD_PREP };

/* The three products at T tokens with the norm between them as `how`
 * says, y starting from y0. */
static void
s_fold_run(trn_blas_t *b, const s_fold_in_t *in, s_fold_out_t *o, int T,
           int how)
{
    int C = in->C, K = in->K;
    trn_norm_out_t no = {o->h, in->wn, o->ss};
    trn_norm_in_t ni = {o->ss, how == S_FOLD_PREP ? 1 : C / 16, C, S_FOLD_EPS};
    RC(trn_cuda_copy(o->y, in->y0, (size_t) T * C * 4, NULL));
    if (how == S_FOLD_IN_OUT)
        RC(trn_linear_fwd_norm(b, o->y, NULL, in->xo, in->wo, T, K, C, 1, NULL,
                               &no, NULL));
    else
        RC(trn_linear_fwd(b, o->y, NULL, in->xo, in->wo, T, K, C, 1, NULL));
    if (how == S_FOLD_APART) {
        RC(trn_k_rmsnorm_fwd(o->h, C, NULL, o->y, NULL, C, in->wn, T, C, 1,
                             S_FOLD_EPS, NULL));
        RC(trn_linear_fwd(b, NULL, o->q, o->h, in->wq, T, C, in->N, 0, NULL));
        RC(trn_linear_fwd_glu(b, o->a, o->h, in->wgu, T, C, in->I, NULL));
    } else {
        if (how == S_FOLD_PREP)
            RC(trn_k_rmsnorm_fold(o->h, o->ss, o->y, in->wn, T, C, NULL));
        RC(trn_linear_fwd_norm(b, NULL, o->q, o->h, in->wq, T, C, in->N, 0, &ni,
                               NULL, NULL));
        RC(trn_linear_fwd_glu_norm(b, o->a, o->h, in->wgu, T, C, in->I, &ni,
                                   NULL));
    }
    RC(trn_cuda_sync());
}

/* The folded side's own values against the residual's exact bits: xg
 * equal to bf16(y * wn) (returns the values that differ), and each
 * token's partial sums (nss a token) adding up to its sum of y^2 (the
 * largest relative error in *err). */
static size_t
s_fold_side(const s_fold_in_t *in, const s_fold_out_t *o, int T, int nss,
            double *err)
{
    size_t C = (size_t) in->C, n = (size_t) T * C, bad = 0;
    float *y = malloc(n * 4), *ss = malloc((size_t) T * nss * 4);
    trn_bf16_t *xg = malloc(n * 2);
    trn_cuda_download(y, o->y, n * 4);
    trn_cuda_download(xg, o->h, n * 2);
    trn_cuda_download(ss, o->ss, (size_t) T * nss * 4);
    *err = 0;
    for (int t = 0; t < T; t++) {
        double want = 0, got = 0;
        for (size_t c = 0; c < C; c++) {
            float v = y[t * C + c], w = trn_bf16_to_f32(in->hwn[c]);
            want += (double) v * v;
            bad += xg[t * C + c] != trn_f32_to_bf16(v * w);
        }
        for (int i = 0; i < nss; i++)
            got += ss[(size_t) t * nss + i];
        *err = fmax(*err, fabs(got - want) / want);
    }
    free(y), free(ss), free(xg);
    return bad;
}

/* One token count: the folded products (and the prepared input side)
 * against the norm apart (to bf16 rounding: 1e-2), the residual bit for
 * bit, and a second folded run bit for bit with the first. */
static void
s_fold_check(trn_blas_t *b, const s_fold_in_t *in, int T)
{
    int C = in->C, N = in->N, I = in->I;
    char what[96], *tail = what;
    tail += snprintf(what, sizeof what, "norm fold T=%d C=%d N=%d I=%d", T, C,
                     N, I);
    size_t left = sizeof what - (size_t) (tail - what);
    if (!trn_linear_norm_fits(T, in->K, C, 1) ||
        !trn_linear_norm_fits(T, C, N, 0) ||
        !trn_linear_norm_fits(T, C, 2 * I, 0)) {
        printf("%-44s skipped (not on the bulk skinny kernel)\n", what);
        return;
    }
    s_fold_out_t o[4];
    for (int i = 0; i < 4; i++)
        o[i] = s_fold_out_new(in);
    s_fold_run(b, in, &o[0], T, S_FOLD_APART);
    s_fold_run(b, in, &o[1], T, S_FOLD_IN_OUT);
    s_fold_run(b, in, &o[2], T, S_FOLD_IN_OUT);
    s_fold_run(b, in, &o[3], T, S_FOLD_PREP);
    size_t n = (size_t) T * C, nq = (size_t) T * N, na = (size_t) T * I;
    double *q0 = s_get_bf16(o[0].q, nq), *a0 = s_get_bf16(o[0].a, na);
    for (int i = 1; i < 4; i += 2) {
        double *q = s_get_bf16(o[i].q, nq), *a = s_get_bf16(o[i].a, na);
        const char *kind = i == 1 ? "folded" : "prepared";
        snprintf(tail, left, ": %s q", kind);
        s_check(what, s_relerr(q, q0, nq), 1e-2);
        snprintf(tail, left, ": %s gate|up", kind);
        s_check(what, s_relerr(a, a0, na), 1e-2);
        free(q), free(a);
    }
    snprintf(tail, left, ": residual (values that differ)");
    s_check(what, (double) s_ndiff(o[1].y, o[0].y, 1, n, n, 4), 0);
    double err = 0;
    snprintf(tail, left, ": xg = bf16(y w) (values that differ)");
    s_check(what, (double) s_fold_side(in, &o[1], T, C / 16, &err), 0);
    snprintf(tail, left, ": partial sums of squares");
    s_check(what, err, 1e-5);
    snprintf(tail, left, ": prepared xg (values that differ)");
    s_check(what, (double) s_fold_side(in, &o[3], T, 1, &err), 0);
    snprintf(tail, left, ": prepared sums of squares");
    s_check(what, err, 1e-5);
    size_t diff = s_ndiff(o[1].y, o[2].y, 1, n, n, 4) +
                  s_ndiff(o[1].h, o[2].h, 1, n, n, 2) +
                  s_ndiff(o[1].ss, o[2].ss, 1, n / 16, n / 16, 4) +
                  s_ndiff(o[1].q, o[2].q, 1, nq, nq, 2) +
                  s_ndiff(o[1].a, o[2].a, 1, na, na, 2);
    snprintf(tail, left, ": run twice (values that differ)");
    s_check(what, (double) diff, 0);
    for (int i = 0; i < 4; i++)
        s_fold_out_free(&o[i]);
    free(q0), free(a0);
}

/* The fold at one shape (K: the o-like product's input) for 2 to 16
 * tokens: one and two token tiles, short ones. */
static void
test_linear_norm(trn_blas_t *b, int C, int K, int N, int I)
{
    static const int Ts[] = {2, 5, 8, 12, 16};
    s_fold_in_t in = s_fold_in_new(C, K, N, I, 16);
    for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++)
        s_fold_check(b, &in, Ts[i]);
    s_fold_in_free(&in);
}

/* The sampler's seed mixer (SplitMix64's finaliser), as the kernels use
 * it: the draw of a row is the top 24 bits of mix(seed) over 2^24. */
static uint64_t
s_mix64_ref(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Sampling: the chunked path (greedy and temperature-only rows) against
 * the one-block-per-row path on the same rows and seeds, and both against
 * a double reference for the greedy choice and the reported logprob; rows
 * with top-p keep the one-block path either way. */
static void
test_sample(void)
{
    enum { N = 12 };
    int V = 151936;
    size_t n = (size_t) N * V;
    float *hz = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        hz[i] = (float) (s_rand() * 6.0);
    hz[(size_t) 3 * V + 77777] = 9.0f; /* a clear maximum in a late chunk */
    float temp[N], topp[N];
    int32_t topk[N];
    uint64_t seed[N];
    for (int i = 0; i < N; i++) {
        temp[i] = i % 3 == 0 ? 0.0f : 0.7f + 0.1f * (float) (i % 4);
        topp[i] = i % 5 == 4 ? 0.8f : 1.0f;
        topk[i] = i == 7 ? 1 : 0;
        seed[i] = 1234u + (uint64_t) i;
    }
    float *dz = s_dev(hz, n * 4), *dt = s_dev(temp, sizeof temp);
    float *dp = s_dev(topp, sizeof topp);
    int32_t *dk = s_dev(topk, sizeof topk);
    uint64_t *ds = s_dev(seed, sizeof seed);
    int32_t *t1 = s_dev(NULL, N * 4), *t2 = s_dev(NULL, N * 4);
    float *l1 = s_dev(NULL, N * 4), *l2 = s_dev(NULL, N * 4);
    size_t nss = trn_k_sample_scratch(N, V);
    float *ss = s_dev(NULL, nss * 4);
    RC(trn_k_sample(t1, l1, dz, dt, dp, dk, ds, N, V, NULL, 0, NULL));
    RC(trn_k_sample(t2, l2, dz, dt, dp, dk, ds, N, V, ss, nss, NULL));
    RC(trn_cuda_sync());
    int32_t k1[N], k2[N];
    float p1[N], p2[N];
    trn_cuda_download(k1, t1, sizeof k1);
    trn_cuda_download(k2, t2, sizeof k2);
    trn_cuda_download(p1, l1, sizeof p1);
    trn_cuda_download(p2, l2, sizeof p2);
    int differ = 0, bad_greedy = 0, off_draw = 0;
    double worst = 0;
    for (int i = 0; i < N; i++) {
        int greedy = !(temp[i] > 0) || topk[i] == 1;
        double it = greedy ? 1.0 : 1.0 / temp[i], mx = -1e300, z = 0;
        const float *row = hz + (size_t) i * V;
        int arg = 0;
        for (int j = 0; j < V; j++)
            if (row[j] * it > mx) {
                mx = row[j] * it;
                arg = j;
            }
        for (int j = 0; j < V; j++)
            z += exp(row[j] * it - mx);
        double lse = mx + log(z);
        /* Both paths invert the same draw (frac of the kept mass) over
         * the vocabulary in order, summing in float in different orders:
         * a token whose double-precision CDF interval lies farther than
         * rounding from the draw is wrong; two paths may differ only
         * where the draw falls within rounding of a boundary. */
        if (!greedy && topp[i] >= 1.0f && topk[i] == 0) {
            uint64_t r = s_mix64_ref(seed[i]);
            double frac = (double) (float) ((float) (r >> 40) / 16777216.0f);
            double c0[2] = {0, 0}, c1[2] = {0, 0}, cum = 0;
            for (int j = 0; j < V; j++) {
                double pj = exp(row[j] * it - lse);
                for (int w = 0; w < 2; w++)
                    if (j == (w ? k2[i] : k1[i])) {
                        c0[w] = cum;
                        c1[w] = cum + pj;
                    }
                cum += pj;
            }
            for (int w = 0; w < 2; w++)
                off_draw += frac < c0[w] - 1e-5 || frac > c1[w] + 1e-5;
            differ += k1[i] != k2[i] &&
                      fmin(fabs(frac - c1[0]), fabs(frac - c1[1])) > 1e-5;
        } else {
            differ += k1[i] != k2[i];
        }
        bad_greedy += greedy && (k2[i] != arg || k1[i] != arg);
        worst = fmax(worst, fabs(p2[i] - (row[k2[i]] * it - lse)));
        worst = fmax(worst, fabs(p1[i] - (row[k1[i]] * it - lse)));
    }
    s_check("sample: chunked vs one-block tokens (of 12, away from a "
            "boundary)",
            differ, 0);
    s_check("sample: tokens off the draw's CDF interval", off_draw, 0);
    s_check("sample: greedy picks that are not the argmax", bad_greedy, 0);
    s_check("sample: logprob vs double log-softmax (max abs)", worst, 1e-4);
    free(hz);
    trn_cuda_free(&dz), trn_cuda_free(&dt), trn_cuda_free(&dp);
    trn_cuda_free(&dk), trn_cuda_free(&ds), trn_cuda_free(&t1);
    trn_cuda_free(&t2), trn_cuda_free(&l1), trn_cuda_free(&l2);
    trn_cuda_free(&ss);
}

/* A paged cache's table for the tests: nsl rows of mb blocks each, the
 * ids a shuffled permutation of nsl * mb + 3 blocks (so no sequence's
 * blocks are contiguous or in order, and some blocks belong to none). */
typedef struct {
    int32_t *table; /* host [nsl * mb] */
    int32_t *dtable;
    int mb, bs, bshift, n_blocks;
} s_pages_t;

static s_pages_t
s_pages_new(int nsl, int max_len, int bs)
{
    s_pages_t p = {.bs = bs};
    while ((1 << p.bshift) < bs)
        p.bshift++;
    p.mb = (max_len + bs - 1) / bs;
    p.n_blocks = nsl * p.mb + 3;
    int32_t *perm = malloc((size_t) p.n_blocks * 4);
    for (int i = 0; i < p.n_blocks; i++)
        perm[i] = i;
    for (int i = p.n_blocks - 1; i > 0; i--) {
        int j = (int) ((s_rand() * 0.5 + 0.5) * (i + 1));
        j = j > i ? i : j;
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    p.table = malloc((size_t) nsl * p.mb * 4);
    memcpy(p.table, perm, (size_t) nsl * p.mb * 4);
    free(perm);
    p.dtable = s_dev(p.table, (size_t) nsl * p.mb * 4);
    return p;
}

static trn_kv_pages_t
s_pages_dev(const s_pages_t *p)
{
    trn_kv_pages_t pg = {p->dtable, p->mb, p->bshift};
    return pg;
}

/* The cache row of position j of table row sl. */
static size_t
s_prow(const s_pages_t *p, int sl, int j)
{
    return (size_t) p->table[(size_t) sl * p->mb + j / p->bs] * p->bs +
           (size_t) (j % p->bs);
}

static void
s_pages_free(s_pages_t *p)
{
    free(p->table);
    trn_cuda_free(&p->dtable);
}

/* Decode side: trn_k_qk_prep (per-head norm + RoPE + cache write) and
 * trn_k_attn_decode over the cache it wrote, against double references,
 * through a shuffled block table of blocks of `bs` positions. Tokens sit
 * in distinct cache rows; `pad` makes every fourth row padding (slot
 * -1), `split` gives the attention its scratch so few tokens split their
 * positions over several blocks. `fused` runs trn_k_attn_decode_prep
 * instead (one token per sequence: every token its own slot), which
 * leaves the queries unwritten: the reference attention then takes the
 * reference's queries. */
static void
test_decode_bs(int T, int H, int Hk, int D, int max_len, int pad, int split,
               int fused, int bs)
{
    int nsl = fused ? T : 5, S = (H + 2 * Hk) * D, HkD = Hk * D, G = H / Hk;
    double eps = 1e-6, theta = 1e6;
    s_pages_t pages = s_pages_new(nsl, max_len, bs);
    trn_kv_pages_t pg = s_pages_dev(&pages);
    size_t nq = (size_t) T * S,
           nc = (size_t) pages.n_blocks * (size_t) bs * HkD;
    double *x, *ck0, *cv0, *qw, *kw;
    trn_bf16_t *hx = s_rand_bf16(nq, 2, &x);
    trn_bf16_t *hck = s_rand_bf16(nc, 1, &ck0), *hcv = s_rand_bf16(nc, 1, &cv0);
    trn_bf16_t *hqw = s_rand_bf16((size_t) D, 1, &qw);
    trn_bf16_t *hkw = s_rand_bf16((size_t) D, 1, &kw);
    int32_t *slot = malloc((size_t) T * 4), *pos = malloc((size_t) T * 4);
    for (int t = 0; t < T; t++) {
        slot[t] = pad && t % 4 == 3 ? -1 : t % nsl;
        /* distinct rows: one band of positions per t / nsl, late ones long */
        pos[t] = (t / nsl) * (max_len / 8) + (t % nsl) * 3;
        if (t == 0)
            pos[t] = max_len - 1;
    }
    trn_bf16_t *dqkv = s_dev(hx, nq * 2), *dck = s_dev(hck, nc * 2);
    trn_bf16_t *dcv = s_dev(hcv, nc * 2);
    trn_bf16_t *dqw = s_dev(hqw, (size_t) D * 2),
               *dkw = s_dev(hkw, (size_t) D * 2);
    int32_t *dslot = s_dev(slot, (size_t) T * 4),
            *dpos = s_dev(pos, (size_t) T * 4);
    trn_bf16_t *dout = s_dev(NULL, (size_t) T * H * D * 2);
    size_t nscr = trn_k_attn_decode_scratch(H, Hk, D);
    float *scr = split ? s_dev(NULL, nscr * 4) : NULL;
    if (fused) {
        RC(trn_k_attn_decode_prep(dout, dqkv, S, dqw, dkw, dck, dcv, dslot,
                                  dpos, T, H, Hk, D, pg, (float) eps,
                                  (float) theta, scr, split ? nscr : 0, NULL));
    } else {
        RC(trn_k_qk_prep(dqkv, S, dqw, dkw, dck, dcv, dslot, dpos, T, H, Hk, D,
                         pg, (float) eps, (float) theta, NULL));
        RC(trn_k_attn_decode(dout, dqkv, S, dck, dcv, dslot, dpos, T, H, Hk, D,
                             pg, scr, split ? nscr : 0, NULL));
    }
    RC(trn_cuda_sync());
    double *gq = s_get_bf16(dqkv, nq), *gk = s_get_bf16(dck, nc);
    double *gv = s_get_bf16(dcv, nc),
           *go = s_get_bf16(dout, (size_t) T * H * D);
    /* reference prep: queries and keys normalised and rotated */
    size_t nrow = (size_t) T * (H + Hk) * D;
    double *rp = calloc(nrow, 8), *gp = calloc(nrow, 8);
    double *rv = calloc((size_t) T * HkD, 8),
           *gvv = calloc((size_t) T * HkD, 8);
    size_t np = 0, nv = 0;
    for (int t = 0; t < T; t++)
        for (int hh = 0; hh < H + Hk; hh++) {
            int isq = hh < H;
            if (!isq && slot[t] < 0)
                continue;
            const double *src = x + (size_t) t * S + (size_t) hh * D;
            double ss = 0, y[256];
            for (int d = 0; d < D; d++)
                ss += src[d] * src[d];
            float r = 1.0f / sqrtf((float) (ss / D) + (float) eps);
            for (int d = 0; d < D; d++) {
                float nrm =
                    trn_bf16_to_f32(trn_f32_to_bf16((float) src[d] * r));
                y[d] = trn_bf16_to_f32(
                    trn_f32_to_bf16((float) (isq ? qw : kw)[d] * nrm));
            }
            size_t cbase =
                s_prow(&pages, slot[t] < 0 ? 0 : slot[t], pos[t]) * HkD +
                (size_t) (hh - H) * D;
            for (int i = 0; i < D / 2; i++) {
                float inv = 1.0f / powf((float) theta, (float) (2 * i) / D);
                float ang = (float) pos[t] * inv;
                double c = trn_bf16_to_f32(trn_f32_to_bf16(cosf(ang)));
                double sn = trn_bf16_to_f32(trn_f32_to_bf16(sinf(ang)));
                rp[np + i] = y[i] * c - y[i + D / 2] * sn;
                rp[np + i + D / 2] = y[i + D / 2] * c + y[i] * sn;
            }
            if (isq && fused) { /* unwritten: attend with the reference */
                for (int d = 0; d < D; d++)
                    gq[(size_t) t * S + (size_t) hh * D + d] = rp[np + d];
                continue; /* and check only what it wrote: the keys */
            }
            for (int d = 0; d < D; d++)
                gp[np + d] = isq ? gq[(size_t) t * S + (size_t) hh * D + d]
                                 : gk[cbase + d];
            np += (size_t) D;
            if (!isq) {
                for (int d = 0; d < D; d++) {
                    rv[nv + d] =
                        x[(size_t) t * S + (size_t) (H + Hk + hh - H) * D + d];
                    gvv[nv + d] = gv[cbase + d];
                }
                nv += (size_t) D;
            }
        }
    char what[96];
    snprintf(what, sizeof what, "qk prep T=%d H=%d Hk=%d D=%d%s%s", T, H, Hk, D,
             pad ? " pad" : "", fused ? " fused" : "");
    s_check(what, s_relerr(gp, rp, np), 5e-3);
    snprintf(what, sizeof what, "qk prep values into the cache (D=%d)", D);
    s_check(what, s_relerr(gvv, rv, nv), 0);
    /* reference attention over what the cache now holds */
    size_t no = (size_t) T * H * D;
    double *ro = calloc(no, 8), *sc = malloc((size_t) max_len * 8);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H && slot[t] >= 0; h++) {
            const double *q = gq + (size_t) t * S + (size_t) h * D;
            int hk = h / G;
            double mx = -1e300, z = 0;
            for (int j = 0; j <= pos[t]; j++) {
                const double *k =
                    gk + s_prow(&pages, slot[t], j) * HkD + (size_t) hk * D;
                double s2 = 0;
                for (int d = 0; d < D; d++)
                    s2 += q[d] * k[d];
                sc[j] = s2 / sqrt((double) D);
                mx = fmax(mx, sc[j]);
            }
            for (int j = 0; j <= pos[t]; j++)
                z += (sc[j] = exp(sc[j] - mx));
            for (int j = 0; j <= pos[t]; j++) {
                const double *v =
                    gv + s_prow(&pages, slot[t], j) * HkD + (size_t) hk * D;
                for (int d = 0; d < D; d++)
                    ro[(size_t) t * H * D + (size_t) h * D + d] +=
                        sc[j] / z * v[d];
            }
        }
    snprintf(what, sizeof what,
             "decode attention T=%d G=%d D=%d len<=%d bs=%d%s%s%s", T, G, D,
             max_len, bs, pad ? " pad" : "", split ? " split" : "",
             fused ? " fused" : "");
    s_check(what, s_relerr(go, ro, no), 1e-2);
    free(hx), free(x), free(hck), free(ck0), free(hcv), free(cv0), free(hqw);
    free(qw), free(hkw), free(kw), free(slot), free(pos), free(gq), free(gk);
    free(gv), free(go), free(rp), free(gp), free(rv), free(gvv), free(ro);
    free(sc);
    trn_cuda_free(&dqkv), trn_cuda_free(&dck), trn_cuda_free(&dcv);
    trn_cuda_free(&dqw), trn_cuda_free(&dkw), trn_cuda_free(&dslot);
    trn_cuda_free(&dpos), trn_cuda_free(&dout), trn_cuda_free(&scr);
    s_pages_free(&pages);
}

static void
test_decode(int T, int H, int Hk, int D, int max_len, int pad, int split,
            int fused)
{
    test_decode_bs(T, H, Hk, D, max_len, pad, split, fused, 16);
}

/* The paged prefill kernel against a double reference: sequences with
 * cached prefixes of the lengths in pre[] and n_new[] new rows each
 * (packed in that order), keys and values of every position already in
 * a cache read through a shuffled table of blocks of `bs` positions; the
 * tiles of up to 128 rows are listed longest first, as the engine's step
 * lists them. Rows of the output not written stay poisoned and fail. */
static void
test_prefill(int H, int Hk, int D, int bs, int nseq, const int *pre,
             const int *n_new)
{
    int S = (H + 2 * Hk) * D, HkD = Hk * D, G = H / Hk, max_len = 0, T = 0;
    for (int i = 0; i < nseq; i++) {
        max_len = pre[i] + n_new[i] > max_len ? pre[i] + n_new[i] : max_len;
        T += n_new[i];
    }
    s_pages_t pages = s_pages_new(nseq, max_len, bs);
    size_t nq = (size_t) T * S, nc = (size_t) pages.n_blocks * bs * HkD;
    double *x, *gk, *gv;
    trn_bf16_t *hx = s_rand_bf16(nq, 2, &x);
    trn_bf16_t *hck = s_rand_bf16(nc, 2, &gk), *hcv = s_rand_bf16(nc, 1, &gv);
    trn_prefill_tile_t tiles[64];
    int nt = 0, r0 = 0;
    for (int i = 0; i < nseq; i++) {
        for (int r = 0; r < n_new[i]; r += TRN_PREFILL_TILE_ROWS) {
            int k = n_new[i] - r;
            tiles[nt].row0 = r0 + r;
            tiles[nt].rows =
                k < TRN_PREFILL_TILE_ROWS ? k : TRN_PREFILL_TILE_ROWS;
            tiles[nt].slot = i;
            tiles[nt].p0 = pre[i] + r;
            nt++;
        }
        r0 += n_new[i];
    }
    for (int a = 0; a < nt; a++) /* longest first */
        for (int b = a + 1; b < nt; b++)
            if (tiles[b].p0 + tiles[b].rows > tiles[a].p0 + tiles[a].rows) {
                trn_prefill_tile_t t = tiles[a];
                tiles[a] = tiles[b];
                tiles[b] = t;
            }
    trn_bf16_t *dq = s_dev(hx, nq * 2), *dck = s_dev(hck, nc * 2);
    trn_bf16_t *dcv = s_dev(hcv, nc * 2);
    trn_bf16_t *dout = s_dev(NULL, (size_t) T * H * D * 2);
    trn_prefill_tile_t *dtiles = s_dev(tiles, (size_t) nt * sizeof *tiles);
    RC(trn_k_attn_prefill(dout, dq, S, dck, dcv, s_pages_dev(&pages), dtiles,
                          nt, H, Hk, D, NULL));
    RC(trn_cuda_sync());
    size_t no = (size_t) T * H * D;
    double *go = s_get_bf16(dout, no), *ro = calloc(no, 8);
    double *sc = malloc((size_t) max_len * 8);
    r0 = 0;
    for (int i = 0; i < nseq; i++) {
        for (int r = 0; r < n_new[i]; r++) {
            int t = r0 + r, p = pre[i] + r;
            for (int h = 0; h < H; h++) {
                const double *q = x + (size_t) t * S + (size_t) h * D;
                size_t ko = (size_t) (h / G) * D;
                double mx = -1e300, z = 0;
                for (int j = 0; j <= p; j++) {
                    const double *k = gk + s_prow(&pages, i, j) * HkD + ko;
                    double s2 = 0;
                    for (int d = 0; d < D; d++)
                        s2 += q[d] * k[d];
                    sc[j] = s2 / sqrt((double) D);
                    mx = fmax(mx, sc[j]);
                }
                for (int j = 0; j <= p; j++)
                    z += (sc[j] = exp(sc[j] - mx));
                double *orow = ro + (size_t) t * H * D + (size_t) h * D;
                for (int j = 0; j <= p; j++) {
                    const double *v = gv + s_prow(&pages, i, j) * HkD + ko;
                    for (int d = 0; d < D; d++)
                        orow[d] += sc[j] / z * v[d];
                }
            }
        }
        r0 += n_new[i];
    }
    char what[120];
    int n = snprintf(what, sizeof what, "prefill H=%d G=%d D=%d bs=%d pre", H,
                     G, D, bs);
    for (int i = 0; i < nseq && n > 0 && n < (int) sizeof what; i++)
        n += snprintf(what + n, sizeof what - (size_t) n, "%s%d+%d",
                      i ? "," : " ", pre[i], n_new[i]);
    s_check(what, s_relerr(go, ro, no), 1e-2);
    free(hx), free(x), free(hck), free(gk), free(hcv), free(gv);
    free(go), free(ro), free(sc);
    trn_cuda_free(&dq), trn_cuda_free(&dck), trn_cuda_free(&dcv);
    trn_cuda_free(&dout), trn_cuda_free(&dtiles);
    s_pages_free(&pages);
}

/* Prefixes of 0, 1, bs - 1, bs and several blocks and a part, chunks of
 * a row, short ones, a full tile and several tiles with a short last. */
static void
test_prefill_set(int H, int Hk, int D, int bs)
{
    int pre[6] = {0, 1, bs - 1, bs, 3 * bs + 5, 0};
    int nn[6] = {200, 37, 128, 1, 130, 5};
    test_prefill(H, Hk, D, bs, 6, pre, nn);
}

/* Attention at head_dim 128 (the wgmma kernel on Hopper): shorter than a
 * tile, a tile, tiles with a short last; GQA groups of 1, 4 and 8;
 * sequence starts inside tiles; 4k; then each schedule against the
 * portable kernel. */
static void
s_attn_tests(void)
{
    /* head_dim 128 (the wgmma kernel on Hopper): shorter than a tile, a
     * tile, tiles with a short last; GQA groups of 1, 4 and 8; sequence
     * starts inside tiles; 4k */
    test_attention(77, 4, 4, 128, 1);
    test_attention(128, 8, 2, 128, 1);
    test_attention(300, 8, 1, 128, -5);
    test_attention(700, 16, 2, 128, -9);
    test_attention(4096, 2, 2, 128, -6);
    test_attn_paths(1, 4, 1, 1);
    test_attn_paths(100, 8, 8, 1);
    test_attn_paths(333, 8, 2, 7);
    test_attn_paths(1000, 16, 2, 40);
    test_attn_paths(4096, 32, 8, 1);
    test_attn_paths(4096, 32, 4, 12);
    test_attn_paths(6000, 8, 1, 3);
    /* the Hopper backward pass (LISA_ATTN_HOPPER_BWD=1): shorter than a
     * query tile, lengths not a multiple of the tiles, 1k, 4k; GQA
     * groups of 1, 4 and 8; sequence starts inside tiles */
    test_attn_bwd_paths(37, 4, 4, 1, 1);
    test_attn_bwd_paths(200, 8, 2, 5, 1);
    test_attn_bwd_paths(1000, 8, 1, 9, 1);
    test_attn_bwd_paths(1024, 8, 8, 3, 1);
    test_attn_bwd_paths(4096, 4, 1, 6, 1);
    test_attn_bwd_paths(4096, 32, 8, 1, 0);
    test_attn_bwd_paths(4096, 16, 2, 12, 0);
}

/* Decode attention (separate and fused preparation, paged blocks of 16,
 * 32 and 64) and the paged prefill kernel: the kinds the environment picks
 * (LISA_CUDA_ATTN_STAGES; the `--decode` run takes one setting at a
 * time). */
static void
s_decode_tests(void)
{
    for (int fu = 0; fu < 2; fu++) { /* separate kernels, then fused */
        test_decode(1, 32, 8, 128, 2048, 0, 1, fu); /* batch 1, split */
        test_decode(1, 32, 8, 128, 300, 0, 0, fu);  /* no scratch: one block */
        test_decode(40, 32, 8, 128, 512, 1, 1, fu); /* Qwen3-4B, padding */
        test_decode(13, 8, 2, 64, 256, 1, 1, fu);
        test_decode(7, 4, 2, 32, 96, 0, 1, fu);    /* the test model's heads */
        test_decode(5, 16, 2, 128, 200, 1, 1, fu); /* eight query heads */
        test_decode(6, 8, 8, 64, 150, 0, 1, fu);   /* one: plain multi-head */
        test_decode(9, 6, 2, 16, 64, 1, 0, fu);    /* other shapes: simple */
    }
    test_decode(64, 32, 8, 128, 257, 1, 1, 1); /* the bench's batch */
    for (int bi = 0; bi < 3; bi++) { /* paged: blocks of 16, 32 and 64 */
        int bs = 16 << bi;
        test_decode_bs(1, 32, 8, 128, 1000, 0, 1, 1, bs); /* split, fused */
        test_decode_bs(1, 32, 8, 128, 1000, 0, 1, 0, bs);
        test_decode_bs(40, 32, 8, 128, 512, 1, 1, 0, bs);
        test_decode_bs(13, 8, 2, 64, 256, 1, 1, 1, bs);
        test_decode_bs(5, 16, 2, 128, 200, 1, 1, 0, bs); /* G = 8 */
        test_decode_bs(6, 8, 8, 64, 150, 0, 1, 1, bs);   /* G = 1 */
        test_decode_bs(7, 4, 2, 32, 96, 0, 1, 0, bs);
        test_decode_bs(9, 6, 2, 16, 64, 1, 0, 0, bs); /* the simple kernel */
        /* 2 to 8 splits (batch 16, 8 and 4 of Qwen3-4B) */
        test_decode_bs(8, 32, 8, 128, 1000, 0, 1, 1, bs);
        test_decode_bs(8, 32, 8, 128, 1000, 1, 1, 0, bs);
        test_decode_bs(4, 32, 8, 128, 700, 0, 1, 1, bs);
        test_decode_bs(16, 32, 8, 128, 300, 1, 1, 1, bs);
        test_decode_bs(6, 8, 8, 64, 150, 0, 1, 0, bs);   /* G = 1 */
        test_decode_bs(20, 16, 2, 32, 400, 0, 1, 1, bs); /* G = 8 */
        test_prefill_set(32, 8, 128, bs);                /* Qwen3-4B heads */
        test_prefill_set(16, 2, 128, bs);                /* G = 8 */
        test_prefill_set(8, 4, 64, bs);                  /* G = 2 */
        test_prefill_set(8, 8, 64, bs);                  /* G = 1 */
        test_prefill_set(4, 2, 32, bs);                  /* the test model */
        test_prefill_set(4, 2, 16, bs);                  /* the tiny fixtures */
    }
}

/* ------------------------------------------------------------------ */

static double
s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int
s_cmp(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : x > y;
}

/* Mean seconds of one call of `what` over 50 back-to-back calls. */
#define S_TIME(secs, what)                                                     \
    do {                                                                       \
        RC(what);                                                              \
        RC(trn_cuda_sync());                                                   \
        double t0_ = s_now();                                                  \
        for (int r_ = 0; r_ < 50; r_++)                                        \
            RC(what);                                                          \
        RC(trn_cuda_sync());                                                   \
        secs = (s_now() - t0_) / 50;                                           \
    } while (0)

/* The element-wise kernels of a layer at Qwen3-4B's shape (4k tokens),
 * with the bytes each must move, and the decode step's norm (64 rows). */
static void
bench_elementwise(void)
{
    int T = 4096, C = 2560, I = 9728;
    size_t nc = (size_t) T * C, ni = (size_t) T * I;
    float *x = s_dev(NULL, nc * 4), *dx = s_dev(NULL, nc * 4);
    float *rstd = s_dev(NULL, (size_t) T * 4),
          *dw = s_dev(NULL, (size_t) C * 4);
    trn_bf16_t *h = s_dev(NULL, nc * 2), *hb = s_dev(NULL, nc * 2);
    trn_bf16_t *w = s_dev(NULL, (size_t) C * 2);
    trn_bf16_t *gu = s_dev(NULL, 2 * ni * 2), *dgu = s_dev(NULL, 2 * ni * 2);
    trn_bf16_t *a = s_dev(NULL, ni * 2);
    RC(trn_k_fill_normal(x, nc, 1, 1.0f, NULL));
    RC(trn_cuda_memset(dx, 0, nc * 4, NULL));
    RC(trn_cuda_memset(dw, 0, (size_t) C * 4, NULL));
    RC(trn_cuda_memset(h, 0, nc * 2, NULL));
    RC(trn_cuda_memset(w, 0, (size_t) C * 2, NULL));
    RC(trn_cuda_memset(gu, 0, 2 * ni * 2, NULL));
    RC(trn_cuda_memset(a, 0, ni * 2, NULL));
    double t;
    S_TIME(t,
           trn_k_rmsnorm_fwd(h, C, rstd, x, NULL, C, w, T, C, 1, 1e-6f, NULL));
    printf("rmsnorm fwd %dx%d fp32 in      %8.1f us %7.0f GB/s\n", T, C,
           t * 1e6, nc * 6.0 / t / 1e9);
    S_TIME(t, trn_k_rmsnorm_bwd(dx, NULL, C, 1, dw, h, C, x, NULL, C, w, rstd,
                                T, C, 1, NULL));
    printf("rmsnorm bwd %dx%d fp32 dx      %8.1f us %7.0f GB/s\n", T, C,
           t * 1e6, nc * 14.0 / t / 1e9);
    S_TIME(t, trn_k_rmsnorm_bwd_resid(dx, hb, C, dw, h, C, x, C, w, rstd, T, C,
                                      NULL));
    printf("rmsnorm bwd %dx%d + bf16 copy  %8.1f us %7.0f GB/s\n", T, C,
           t * 1e6, nc * 16.0 / t / 1e9);
    S_TIME(t, trn_k_f32_to_bf16(hb, dx, nc, NULL));
    printf("f32 to bf16 %dx%d              %8.1f us %7.0f GB/s\n", T, C,
           t * 1e6, nc * 6.0 / t / 1e9);
    S_TIME(t,
           trn_k_rmsnorm_fwd(h, C, NULL, x, NULL, C, w, 64, C, 1, 1e-6f, NULL));
    printf("rmsnorm fwd 64x%d (decode)     %8.1f us\n", C, t * 1e6);
    S_TIME(t, trn_k_swiglu_fwd(a, gu, T, I, NULL));
    printf("swiglu fwd %dx%d              %8.1f us %7.0f GB/s\n", T, I, t * 1e6,
           ni * 6.0 / t / 1e9);
    S_TIME(t, trn_k_swiglu_bwd(dgu, a, gu, T, I, NULL));
    printf("swiglu bwd %dx%d              %8.1f us %7.0f GB/s\n", T, I, t * 1e6,
           ni * 10.0 / t / 1e9);
    trn_cuda_free(&x), trn_cuda_free(&dx), trn_cuda_free(&rstd);
    trn_cuda_free(&dw), trn_cuda_free(&h), trn_cuda_free(&hb);
    trn_cuda_free(&w), trn_cuda_free(&gu), trn_cuda_free(&dgu);
    trn_cuda_free(&a);
}

/* The causal attention forward pass at Qwen3-4B's heads (H=32, Hk=8,
 * D=128): the default path (the wgmma kernel on a Hopper device), its
 * other schedules and the portable kernel (see s_attn_fwd_as), each the median
 * of 7 batches of back-to-back calls timed between synchronisations (a batch
 * does about 20 TFLOP, so the sync is noise), after 3 warm-up calls. */
static void
bench_attn_fwd(void)
{
    int Ts[3] = {4096, 16384, 32768};
    printf("\n-- attention forward, causal, H=32 Hk=8 D=128 --\n");
    for (int ti = 0; ti < 3; ti++) {
        int T = Ts[ti], H = 32, Hk = 8, D = 128, stride = (H + 2 * Hk) * D;
        size_t n = (size_t) T * stride;
        double *vals;
        trn_bf16_t *h = s_rand_bf16(n, 1, &vals);
        trn_bf16_t *qkv = s_dev(h, n * 2);
        trn_bf16_t *o = s_dev(NULL, (size_t) T * H * D * 2);
        float *lse = s_dev(NULL, (size_t) T * H * 4);
        int32_t *seg = calloc((size_t) T, 4);
        int32_t *dseg = s_dev(seg, (size_t) T * 4);
        const trn_bf16_t *q = qkv, *k = qkv + H * D, *v = qkv + (H + Hk) * D;
        double flops = 4.0 * T * (double) T / 2 * D * H, tp[S_PORTABLE + 1];
        int reps = flops > 2e13 ? 1 : (int) (2e13 / flops);
        for (int how = 0; how <= S_PORTABLE; how++) {
            tp[how] = 0;
            if (!s_sched_on(how))
                continue;
            for (int w = 0; w < 3; w++)
                RC(s_attn_fwd_as(how, o, lse, q, k, v, stride, dseg, T, H, Hk,
                                 D));
            RC(trn_cuda_sync());
            double t[7];
            for (int bi = 0; bi < 7; bi++) {
                double t0 = s_now();
                for (int r = 0; r < reps; r++)
                    RC(s_attn_fwd_as(how, o, lse, q, k, v, stride, dseg, T, H,
                                     Hk, D));
                RC(trn_cuda_sync());
                t[bi] = (s_now() - t0) / reps;
            }
            qsort(t, 7, 8, s_cmp);
            tp[how] = t[3];
        }
        printf("attn fwd T=%-6d", T);
        for (int how = 0; how <= S_PORTABLE; how++)
            if (tp[how] > 0)
                printf(" | %s %.3f ms %.1f TFLOP/s", s_sched_names[how],
                       tp[how] * 1e3, flops / tp[how] / 1e12);
        printf(" | x%.2f\n", tp[S_PORTABLE] / tp[0]);
        trn_cuda_free(&qkv), trn_cuda_free(&o), trn_cuda_free(&lse);
        trn_cuda_free(&dseg), free(seg), free(h), free(vals);
    }
}

/* The causal attention backward pass at Qwen3-4B's heads (H=32, Hk=8,
 * D=128): the portable kernel and the wgmma one (LISA_ATTN_HOPPER_BWD=1),
 * timed as bench_attn_fwd times (the Delta and dq kernels included).
 * TFLOP/s count 2.5 times the causal forward's 4 T^2/2 H D (five
 * products of the size of its two). */
static void
bench_attn_bwd(void)
{
    int Ts[3] = {4096, 16384, 32768};
    printf("\n-- attention backward, causal, H=32 Hk=8 D=128 --\n");
    if (trn_cuda_cc_major() != 9)
        printf("(not compute capability 9: both run the portable kernel)\n");
    for (int ti = 0; ti < 3; ti++) {
        int T = Ts[ti], H = 32, Hk = 8, D = 128, stride = (H + 2 * Hk) * D;
        size_t n = (size_t) T * stride, no = (size_t) T * H * D;
        double *vals;
        trn_bf16_t *h = s_rand_bf16(n, 1, &vals);
        trn_bf16_t *qkv = s_dev(h, n * 2), *dqkv = s_dev(NULL, n * 2);
        trn_bf16_t *o = s_dev(NULL, no * 2), *dout = s_dev(h, no * 2);
        float *lse = s_dev(NULL, (size_t) T * H * 4);
        float *scr = s_dev(NULL, (size_t) T * H * (D + 1) * 4);
        int32_t *seg = calloc((size_t) T, 4);
        int32_t *dseg = s_dev(seg, (size_t) T * 4);
        RC(trn_k_attn_fwd(o, lse, qkv, qkv + H * D, qkv + (H + Hk) * D, stride,
                          dseg, T, H, Hk, D, NULL));
        double flops = 2.5 * 4.0 * T * (double) T / 2 * D * H, tp[2];
        int reps = flops > 2e13 ? 1 : (int) (2e13 / flops);
        for (int r = 0; r < 2; r++) {
            const char *val = r ? "1" : "0";
            for (int w = 0; w < 3; w++)
                RC(s_attn_bwd_as(val, dqkv, scr, dout, o, lse, qkv, stride,
                                 dseg, T, H, Hk, D));
            RC(trn_cuda_sync());
            double t[7];
            for (int bi = 0; bi < 7; bi++) {
                double t0 = s_now();
                for (int i = 0; i < reps; i++)
                    RC(s_attn_bwd_as(val, dqkv, scr, dout, o, lse, qkv, stride,
                                     dseg, T, H, Hk, D));
                RC(trn_cuda_sync());
                t[bi] = (s_now() - t0) / reps;
            }
            qsort(t, 7, 8, s_cmp);
            tp[r] = t[3];
        }
        printf("attn bwd T=%-6d | portable %.3f ms %.1f TFLOP/s | hopper %.3f "
               "ms %.1f TFLOP/s | x%.2f\n",
               T, tp[0] * 1e3, flops / tp[0] / 1e12, tp[1] * 1e3,
               flops / tp[1] / 1e12, tp[0] / tp[1]);
        fflush(stdout);
        trn_cuda_free(&qkv), trn_cuda_free(&dqkv), trn_cuda_free(&o);
        trn_cuda_free(&dout), trn_cuda_free(&lse), trn_cuda_free(&scr);
        trn_cuda_free(&dseg), free(seg), free(h), free(vals);
    }
}

static void
bench(trn_blas_t *b)
{
    printf("\n-- bench (median of 10 after 3 warm-ups) --\n");
    int Ts[2] = {4096, 16384};
    for (int ti = 0; ti < 2; ti++) {
        int T = Ts[ti], H = 32, Hk = 8, D = 128, stride = (H + 2 * Hk) * D;
        size_t n = (size_t) T * stride;
        double *vals;
        trn_bf16_t *h = s_rand_bf16(n, 1, &vals);
        trn_bf16_t *qkv = s_dev(h, n * 2), *dqkv = s_dev(NULL, n * 2);
        trn_bf16_t *o = s_dev(NULL, (size_t) T * H * D * 2);
        trn_bf16_t *dout = s_dev(h, (size_t) T * H * D * 2);
        float *lse = s_dev(NULL, (size_t) T * H * 4);
        float *scr = s_dev(NULL, (size_t) T * H * (D + 1) * 4);
        int32_t *seg = calloc((size_t) T, 4);
        int32_t *dseg = s_dev(seg, (size_t) T * 4);
        double tf[10], tb[10];
        for (int it = 0; it < 13; it++) {
            double t0 = s_now();
            RC(trn_k_attn_fwd(o, lse, qkv, qkv + H * D, qkv + (H + Hk) * D,
                              stride, dseg, T, H, Hk, D, NULL));
            RC(trn_cuda_sync());
            double t1 = s_now();
            RC(trn_k_attn_bwd(dqkv, dqkv + H * D, dqkv + (H + Hk) * D, stride,
                              scr, dout, o, lse, qkv, qkv + H * D,
                              qkv + (H + Hk) * D, stride, dseg, T, H, Hk, D,
                              NULL));
            RC(trn_cuda_sync());
            double t2 = s_now();
            if (it >= 3) {
                tf[it - 3] = t1 - t0;
                tb[it - 3] = t2 - t1;
            }
        }
        qsort(tf, 10, 8, s_cmp);
        qsort(tb, 10, 8, s_cmp);
        double flops = 4.0 * T * (double) T / 2 * D * H; /* causal */
        printf("attention T=%-6d fwd %8.3f ms %6.1f TFLOP/s | bwd %8.3f ms "
               "%6.1f TFLOP/s\n",
               T, tf[5] * 1e3, flops / tf[5] / 1e12, tb[5] * 1e3,
               2.5 * flops / tb[5] / 1e12);
        trn_cuda_free(&qkv), trn_cuda_free(&dqkv), trn_cuda_free(&o);
        trn_cuda_free(&dout), trn_cuda_free(&lse), trn_cuda_free(&scr);
        trn_cuda_free(&dseg), free(seg), free(h), free(vals);
    }
    /* Qwen3-4B's per-head q/k norm and RoPE at 4k tokens: the unfused
     * sequences against the fused kernels (per call, a sample 20 calls) */
    {
        int T = 4096, H = 32, Hk = 8, D = 128, S = (H + 2 * Hk) * D;
        size_t n = (size_t) T * S;
        double *vals;
        trn_bf16_t *h = s_rand_bf16(n, 1, &vals);
        trn_bf16_t *qkv = s_dev(h, n * 2), *qkvn = s_dev(NULL, n * 2);
        trn_bf16_t *g0 = s_dev(h, n * 2), *dq = s_dev(h, n * 2);
        trn_bf16_t *w = s_dev(h, (size_t) D * 2);
        float *rq = s_dev(NULL, (size_t) T * H * 4);
        float *rk = s_dev(NULL, (size_t) T * Hk * 4);
        float *dw = s_dev(NULL, (size_t) 2 * D * 4);
        trn_cuda_memset(dw, 0, (size_t) 2 * D * 4, NULL);
        int32_t *pos = malloc((size_t) T * 4);
        for (int t = 0; t < T; t++)
            pos[t] = t;
        int32_t *dpos = s_dev(pos, (size_t) T * 4);
        double tq[4][10];
        for (int it = 0; it < 13; it++)
            for (int k = 0; k < 4; k++) {
                if (k >= 2)
                    RC(trn_cuda_copy(dq, g0, n * 2, NULL));
                RC(trn_cuda_sync());
                double t0 = s_now();
                for (int r = 0; r < 20; r++) {
                    if (k == 0)
                        RC(s_qk_unfused_fwd(qkvn, qkv, S, rq, rk, w, w, dpos, T,
                                            H, Hk, D, 1e-6f, 1e6f));
                    else if (k == 1)
                        RC(trn_k_qk_fwd(qkvn, qkv, S, rq, rk, w, w, dpos, T, H,
                                        Hk, D, 1e-6f, 1e6f, NULL));
                    else if (k == 2)
                        RC(s_qk_unfused_bwd(dq, S, dw, dw + D, qkv, w, w, rq,
                                            rk, dpos, T, H, Hk, D, 1e6f));
                    else
                        RC(trn_k_qk_bwd(dq, S, dw, dw + D, qkv, w, w, rq, rk,
                                        dpos, T, H, Hk, D, 1e6f, NULL));
                }
                RC(trn_cuda_sync());
                if (it >= 3)
                    tq[k][it - 3] = (s_now() - t0) / 20;
            }
        for (int k = 0; k < 4; k++)
            qsort(tq[k], 10, 8, s_cmp);
        printf("q/k norm+rope T=%d fwd: unfused %6.1f us, fused %6.1f us "
               "(x%.2f)\n",
               T, tq[0][5] * 1e6, tq[1][5] * 1e6, tq[0][5] / tq[1][5]);
        printf("q/k norm+rope T=%d bwd: unfused %6.1f us, fused %6.1f us "
               "(x%.2f)\n",
               T, tq[2][5] * 1e6, tq[3][5] * 1e6, tq[2][5] / tq[3][5]);
        trn_cuda_free(&qkv), trn_cuda_free(&qkvn), trn_cuda_free(&g0);
        trn_cuda_free(&dq), trn_cuda_free(&w), trn_cuda_free(&rq);
        trn_cuda_free(&rk), trn_cuda_free(&dw), trn_cuda_free(&dpos);
        free(pos), free(h), free(vals);
    }
    /* the MLP up-projection of Qwen3-4B at 4k tokens */
    int T = 4096, K = 2560, N = 2 * 9728;
    trn_bf16_t *x = s_dev(NULL, (size_t) T * K * 2),
               *w = s_dev(NULL, (size_t) N * K * 2);
    trn_bf16_t *y = s_dev(NULL, (size_t) T * N * 2);
    double *vals;
    trn_bf16_t *hx = s_rand_bf16((size_t) N * K, 1, &vals);
    trn_cuda_upload(w, hx, (size_t) N * K * 2);
    trn_cuda_upload(x, hx, (size_t) T * K * 2);
    double tm[10];
    for (int it = 0; it < 13; it++) {
        double t0 = s_now();
        RC(trn_linear_fwd(b, NULL, y, x, w, T, K, N, 0, NULL));
        RC(trn_cuda_sync());
        if (it >= 3)
            tm[it - 3] = s_now() - t0;
    }
    qsort(tm, 10, 8, s_cmp);
    printf("linear %dx%dx%d bf16: %.3f ms %.1f TFLOP/s\n", T, K, N, tm[5] * 1e3,
           2.0 * T * K * N / tm[5] / 1e12);
    trn_cuda_free(&x), trn_cuda_free(&w), trn_cuda_free(&y), free(hx),
        free(vals);
    bench_elementwise();
}

/* The decode step's pieces at the Qwen3-4B shape, with the bytes each
 * must read: achieved bandwidth per product, attention and sampling. */
static void
bench_decode(trn_blas_t *b)
{
    printf("\n-- decode pieces, Qwen3-4B shape (mean of 50 calls) --\n");
    int C = 2560, I = 9728, H = 32, Hk = 8, D = 128, V = 151936;
    int S = (H + 2 * Hk) * D;
    struct {
        const char *name;
        int K, N;
    } lin[] = {{"qkv", C, S},
               {"o", H * D, C},
               {"gate|up", C, 2 * I},
               {"down", I, C},
               {"lm head", C, V}};
    size_t wmax = (size_t) V * C;
    trn_bf16_t *w = s_dev(NULL, wmax * 2),
               *x = s_dev(NULL, (size_t) 64 * I * 2);
    RC(trn_cuda_memset(w, 0, wmax * 2, NULL));
    RC(trn_cuda_memset(x, 0, (size_t) 64 * I * 2, NULL));
    float *y = s_dev(NULL, (size_t) 64 * V * 4);
    int Ms[6] = {1, 2, 4, 8, 16, 64};
    for (size_t i = 0; i < sizeof lin / sizeof lin[0]; i++)
        for (int mi = 0; mi < 6; mi++) {
            int M = Ms[mi];
            double t;
            S_TIME(t, trn_linear_fwd(b, y, NULL, x, w, M, lin[i].K, lin[i].N, 0,
                                     NULL));
            double bytes = 2.0 * lin[i].K * lin[i].N;
            printf("linear %-8s M=%-3d %8.1f us %7.0f GB/s\n", lin[i].name, M,
                   t * 1e6, bytes / t / 1e9);
        }
    {
        double t;
        for (int M = 1; M <= 16; M *= 8) {
            if (!trn_linear_glu_fits(M, C, I))
                continue;
            S_TIME(t, trn_linear_fwd_glu(NULL, (trn_bf16_t *) y, x, w, M, C, I,
                                         NULL));
            printf("linear gate|up + swiglu M=%-2d %8.1f us %7.0f GB/s\n", M,
                   t * 1e6, 4.0 * C * I / t / 1e9);
        }
    }
    /* attention over 192 cached positions (the bench's mean), blocks of
     * 16 positions, each sequence's blocks one after the other */
    int max_len = 272, bs = 16, mb = max_len / bs;
    int32_t *tab = malloc((size_t) 64 * mb * 4);
    for (int i = 0; i < 64 * mb; i++)
        tab[i] = i;
    int32_t *dtab = s_dev(tab, (size_t) 64 * mb * 4);
    trn_kv_pages_t pg = {dtab, mb, 4};
    for (int bi = 0; bi < 2; bi++) {
        int T = bi ? 64 : 1, len = 192;
        size_t nc = (size_t) T * max_len * Hk * D;
        trn_bf16_t *ck = s_dev(NULL, nc * 2), *cv = s_dev(NULL, nc * 2);
        trn_bf16_t *q = s_dev(NULL, (size_t) T * S * 2);
        trn_bf16_t *o = s_dev(NULL, (size_t) T * H * D * 2);
        RC(trn_cuda_memset(ck, 0, nc * 2, NULL));
        RC(trn_cuda_memset(cv, 0, nc * 2, NULL));
        RC(trn_cuda_memset(q, 0, (size_t) T * S * 2, NULL));
        int32_t sl[64], ps[64];
        for (int t = 0; t < T; t++)
            sl[t] = t, ps[t] = len - 1;
        int32_t *dsl = s_dev(sl, (size_t) T * 4),
                *dps = s_dev(ps, (size_t) T * 4);
        size_t ns = trn_k_attn_decode_scratch(H, Hk, D);
        float *scr = s_dev(NULL, ns * 4);
        double t;
        S_TIME(t, trn_k_attn_decode(o, q, S, ck, cv, dsl, dps, T, H, Hk, D, pg,
                                    scr, ns, NULL));
        double bytes = 2.0 * T * len * Hk * D * 2;
        printf("decode attention T=%-3d len %d %8.1f us %7.0f GB/s\n", T, len,
               t * 1e6, bytes / t / 1e9);
        S_TIME(t, trn_k_qk_prep(q, S, w, w, ck, cv, dsl, dps, T, H, Hk, D, pg,
                                1e-6f, 1e6f, NULL));
        printf("qk prep T=%-3d %8.1f us\n", T, t * 1e6);
        S_TIME(t,
               trn_k_attn_decode_prep(o, q, S, w, w, ck, cv, dsl, dps, T, H, Hk,
                                      D, pg, 1e-6f, 1e6f, scr, ns, NULL));
        printf("decode attention with qk prep (fused) T=%-3d %8.1f us\n", T,
               t * 1e6);
        trn_cuda_free(&ck), trn_cuda_free(&cv), trn_cuda_free(&q);
        trn_cuda_free(&o), trn_cuda_free(&dsl), trn_cuda_free(&dps);
        trn_cuda_free(&scr);
    }
    trn_cuda_free(&dtab);
    free(tab);
    /* a prefill of 64 prompts of 128 tokens: the decode kernel and the
     * paged prefill kernel over the cache against the training kernel over
     * the packed prompts; then 8 chunks of 512 after prefixes of 3,584
     * (the prefill kernel; FLOP/s counted over the visible keys) */
    {
        int T = 64 * 128, ml = 4096, mb2 = ml / 16;
        size_t nc = (size_t) 64 * ml * Hk * D;
        int32_t *tb = malloc((size_t) 64 * mb2 * 4);
        for (int i = 0; i < 64 * mb2; i++)
            tb[i] = i;
        int32_t *dtb = s_dev(tb, (size_t) 64 * mb2 * 4);
        trn_kv_pages_t pg2 = {dtb, mb2, 4};
        trn_prefill_tile_t tl[64];
        for (int i = 0; i < 64; i++)
            tl[i] = (trn_prefill_tile_t){i * 128, 128, i, 0};
        trn_prefill_tile_t *dtl = s_dev(tl, sizeof tl);
        trn_bf16_t *ck = s_dev(NULL, nc * 2), *cv = s_dev(NULL, nc * 2);
        trn_bf16_t *q = s_dev(NULL, (size_t) T * S * 2);
        trn_bf16_t *o = s_dev(NULL, (size_t) T * H * D * 2);
        float *lse = s_dev(NULL, (size_t) T * H * 4);
        RC(trn_cuda_memset(ck, 0, nc * 2, NULL));
        RC(trn_cuda_memset(cv, 0, nc * 2, NULL));
        RC(trn_cuda_memset(q, 0, (size_t) T * S * 2, NULL));
        int32_t *sl = malloc((size_t) T * 4), *ps = malloc((size_t) T * 4);
        for (int t = 0; t < T; t++)
            sl[t] = t / 128, ps[t] = t % 128;
        int32_t *dsl = s_dev(sl, (size_t) T * 4),
                *dps = s_dev(ps, (size_t) T * 4);
        double t1, t2;
        double t3, t4;
        S_TIME(t1, trn_k_attn_decode(o, q, S, ck, cv, dsl, dps, T, H, Hk, D,
                                     pg2, NULL, 0, NULL));
        S_TIME(t2, trn_k_attn_fwd(o, lse, q, q + H * D, q + (H + Hk) * D, S,
                                  dsl, T, H, Hk, D, NULL));
        S_TIME(t3, trn_k_attn_prefill(o, q, S, ck, cv, pg2, dtl, 64, H, Hk, D,
                                      NULL));
        printf("prefill attention 64 x 128: decode kernel %8.1f us, training "
               "kernel %8.1f us, paged prefill kernel %8.1f us\n",
               t1 * 1e6, t2 * 1e6, t3 * 1e6);
        /* 8 sequences, chunks of 512 new rows after 3,584 cached */
        trn_prefill_tile_t tc[32];
        for (int i = 0; i < 32; i++) /* longest first: the last tiles */
            tc[i] = (trn_prefill_tile_t){(i % 8) * 512 + (3 - i / 8) * 128, 128,
                                         i % 8, 3584 + (3 - i / 8) * 128};
        trn_prefill_tile_t *dtc = s_dev(tc, sizeof tc);
        S_TIME(t4, trn_k_attn_prefill(o, q, S, ck, cv, pg2, dtc, 32, H, Hk, D,
                                      NULL));
        double fl = 0; /* 4 H D per visible (query, key) pair */
        for (int r = 0; r < 512; r++)
            fl += 4.0 * H * D * (3584 + r + 1) * 8;
        printf("prefill attention 8 chunks of 512 after 3584: %8.1f us "
               "%6.1f TFLOP/s\n",
               t4 * 1e6, fl / t4 / 1e12);
        trn_cuda_free(&dtl), trn_cuda_free(&dtc), trn_cuda_free(&dtb);
        free(tb);
        trn_cuda_free(&ck), trn_cuda_free(&cv), trn_cuda_free(&q);
        trn_cuda_free(&o), trn_cuda_free(&lse), trn_cuda_free(&dsl);
        trn_cuda_free(&dps), free(sl), free(ps);
    }
    /* sampling 64 rows (temperature only, and top-p 0.9) */
    int32_t *tok = s_dev(NULL, 64 * 4);
    float *lp = s_dev(NULL, 64 * 4);
    float tmp[64], tp[64], tp9[64];
    int32_t tk[64];
    uint64_t sd[64];
    for (int i = 0; i < 64; i++)
        tmp[i] = 1.0f, tp[i] = 1.0f, tp9[i] = 0.9f, tk[i] = 0,
        sd[i] = (uint64_t) i;
    float *dtmp = s_dev(tmp, 256), *dtp = s_dev(tp, 256),
          *dtp9 = s_dev(tp9, 256);
    int32_t *dtk = s_dev(tk, 256);
    uint64_t *dsd = s_dev(sd, 512);
    RC(trn_k_fill_normal(y, (size_t) 64 * V, 5, 3.0f, NULL));
    double t;
    size_t nss = trn_k_sample_scratch(64, V);
    float *ss = s_dev(NULL, nss * 4);
    S_TIME(t,
           trn_k_sample(tok, lp, y, dtmp, dtp, dtk, dsd, 64, V, NULL, 0, NULL));
    printf("sample 64 rows, temperature only, a block per row %8.1f us\n",
           t * 1e6);
    S_TIME(t,
           trn_k_sample(tok, lp, y, dtmp, dtp, dtk, dsd, 64, V, ss, nss, NULL));
    printf("sample 64 rows, temperature only, chunked %8.1f us\n", t * 1e6);
    trn_cuda_free(&ss);
    S_TIME(t, trn_k_sample(tok, lp, y, dtmp, dtp9, dtk, dsd, 64, V, NULL, 0,
                           NULL));
    printf("sample 64 rows, top-p 0.9       %8.1f us\n", t * 1e6);
    trn_cuda_free(&tok), trn_cuda_free(&lp), trn_cuda_free(&dtmp);
    trn_cuda_free(&dtp), trn_cuda_free(&dtp9), trn_cuda_free(&dtk);
    trn_cuda_free(&dsd), trn_cuda_free(&w), trn_cuda_free(&x);
    trn_cuda_free(&y);
}

int
main(int argc, char **argv)
{
    /* the matrix-vector kernel at every token count it has (the product
     * default is one token), unless the caller chose */
    setenv("LISA_CUDA_GEMV_TOKENS", "4", 0);
    /* and the skinny kernel at every count it has (two n-tiles too) */
    setenv("LISA_CUDA_SKINNY_MAX", "16", 0);
    if (trn_cuda_device_count() < 1) {
        printf("no CUDA device\n0 passed, 1 failed\n");
        return 1;
    }
    RC(trn_cuda_set_device(0));
    trn_blas_t *b = trn_blas_new();
    if (!b) {
        printf("cuBLASLt unavailable\n");
        return 1;
    }
    if (argc > 1 && (strcmp(argv[1], "--attn") == 0 ||
                     strcmp(argv[1], "--bench-attn") == 0 ||
                     strcmp(argv[1], "--attn-bench-only") == 0)) {
        if (strcmp(argv[1], "--attn-bench-only") != 0)
            s_attn_tests();
        if (strcmp(argv[1], "--attn") != 0) {
            bench_attn_fwd();
            bench_attn_bwd();
        }
        trn_blas_destroy(&b);
        printf("\n%d passed, %d failed\n", s_pass, s_fail);
        return s_fail ? 1 : 0;
    }
    if (argc > 1 && strcmp(argv[1], "--decode") == 0) {
        s_decode_tests();
        trn_blas_destroy(&b);
        printf("\n%d passed, %d failed\n", s_pass, s_fail);
        return s_fail ? 1 : 0;
    }
    test_linear(b);
    /* the matrix-vector kernel: 1 to 4 tokens, rows split over 1, 2, 4
     * and 8 warps */
    test_linear_few(b, 1, 2560, 700);  /* two warps a row */
    test_linear_few(b, 1, 1024, 4100); /* a warp per row */
    test_linear_few(b, 1, 4096, 2560); /* the output projection's shape */
    test_linear_few(b, 1, 136, 3000);  /* a slice shorter than a warp */
    test_linear_few(b, 1, 9728, 2560); /* down: eight warps a row */
    test_linear_few(b, 2, 2560, 6144); /* q|k|v */
    test_linear_few(b, 3, 1024, 600);
    test_linear_few(b, 4, 9728, 2560); /* down */
    test_linear_few(b, 4, 6000, 333);  /* four warps a row, a short block */
    test_linear_few(b, 4, 16384, 100); /* the deepest it takes */
    test_linear_few(b, 4, 16392, 100); /* deeper: cuBLASLt's */
    test_linear_few(b, 1, 64, 70000);  /* wider than it takes: cuBLASLt's */
    /* the skinny tensor-core kernel: 5 to 16 tokens here (2 to 16 at the
     * product's defaults), rows a whole number of 32-value chunks */
    test_linear_few(b, 5, 1024, 600);
    test_linear_few(b, 8, 2560, 6144);  /* q|k|v at batch 8 */
    test_linear_few(b, 8, 9728, 2560);  /* down */
    test_linear_few(b, 16, 4096, 2560); /* o at batch 16: two n-tiles */
    test_linear_few(b, 13, 2560, 700);  /* a last block of 12 rows */
    test_linear_few(b, 6, 96, 50);      /* fewer chunks than warps */
    test_linear_few(b, 9, 16384, 100);
    test_linear_few(b, 17, 1024, 600); /* seventeen tokens: cuBLASLt's */
    test_linear_few(b, 8, 1000, 64);   /* K not in 32-value chunks */
    /* as wide as the LM head: the skinny kernel's (many tiles a block;
     * cuBLASLt's under LISA_CUDA_SKINNY_WIDE=65536) */
    test_linear_few(b, 8, 256, 151936);
    test_linear_glu(b, 1, 2560, 9728); /* Qwen3-4B's gate|up */
    test_linear_glu(b, 1, 136, 301);   /* a last block with one pair */
    test_linear_glu(b, 3, 1024, 700);  /* three tokens */
    test_linear_glu(b, 4, 8192, 64);   /* four warps a row */
    test_linear_glu(b, 8, 2560, 9728); /* skinny: batch 8 */
    test_linear_glu(b, 16, 1024, 700); /* two n-tiles, a short last block */
    test_linear_glu(b, 5, 96, 301);
    /* packed weights: the 4B shape's products at batch 8 (q|k|v; o and
     * down split over clusters, down's last stage half a stage; gate|up
     * spread over the resident blocks, tiles starting at odd rows; the
     * LM head), a last tile of 8 rows, K with a last stage of 64 values,
     * 16 tokens, and a few */
    test_linear_packed(b, 8, 2560, 6144, 0);
    test_linear_packed(b, 8, 4096, 2560, 0);
    test_linear_packed(b, 8, 9728, 2560, 0);
    test_linear_packed(b, 8, 2560, 2 * 9728, 1);
    test_linear_packed(b, 8, 2560, 151936, 0);
    test_linear_packed(b, 8, 1088, 1000, 0);
    test_linear_packed(b, 16, 1024, 2 * 700, 1);
    test_linear_packed(b, 5, 2560, 2560, 0);
    s_check("linear + swiglu: shapes it does not take",
            trn_linear_glu_fits(17, 64, 64) || trn_linear_glu_fits(5, 72, 64) ||
                    trn_linear_glu_fits(1, 8200, 64) ||
                    trn_linear_glu_fits(1, 64, 40000) ||
                    !trn_linear_glu_fits(1, 64, 32768)
                ? 1.0
                : 0.0,
            0);
    /* RMSNorm folded into the products: Qwen3-4B's o (into the residual),
     * q|k|v and gate|up, then a small shape (a down-like product first) */
    test_linear_norm(b, 2560, 4096, 6144, 9728);
    test_linear_norm(b, 1024, 512, 768, 512);
    const char *bulk = getenv("LISA_CUDA_SKINNY_BULK");
    s_check("norm fold: taken at T=8 on Hopper (not: 1)",
            trn_cuda_cc_major() >= 9 && !(bulk && *bulk) &&
                    !trn_linear_norm_fits(8, 4096, 2560, 1)
                ? 1.0
                : 0.0,
            0);
    s_check("norm fold: shapes it does not take",
            trn_linear_norm_fits(17, 1024, 1024, 0) ||
                    trn_linear_norm_fits(8, 1000, 1024, 0) ||
                    trn_linear_norm_fits(8, 1024, 1000, 1) ||
                    trn_linear_norm_fits(1, 1024, 1024, 0)
                ? 1.0
                : 0.0,
            0);
    if (argc > 1 && strcmp(argv[1], "--linear") == 0) {
        trn_blas_destroy(&b);
        printf("\n%d passed, %d failed\n", s_pass, s_fail);
        return s_fail ? 1 : 0;
    }
    test_rmsnorm(257, 2560, 2560, 1, 1);
    test_rmsnorm(4096, 2560, 2560, 1, 1); /* several rows per warp */
    test_rmsnorm(64, 2560, 2560, 1, 1);   /* decode rows: a warp a block */
    test_rmsnorm(70, 3000, 3004, 1, 1);
    test_rmsnorm(3, 1500, 1600, 1, 0);
    test_rmsnorm(300 * 4, 128, 128, 1, 0);
    test_rmsnorm(77 * 4, 128, 6 * 128, 4, 0); /* head rows in q|k|v lines */
    /* shapes the vector kernels leave to the scalar ones */
    test_rmsnorm(3, 1501, 1600, 1, 0);   /* dim not a multiple of 4 */
    test_rmsnorm(40, 256, 257, 1, 0);    /* odd stride */
    test_rmsnorm(30 * 3, 64, 194, 3, 1); /* head rows, odd line stride */
    test_rmsnorm(5, 5000, 5000, 1, 1);   /* longer than a warp's registers */
    test_rmsnorm(2, 12300, 12300, 1, 1); /* dw over 48 KiB of shared memory */
    test_rope();
    test_qk_fused(300, 32, 8, 128, 0); /* Qwen3-4B heads */
    test_qk_fused(1, 32, 8, 128, 0);
    test_qk_fused(77, 4, 2, 16, 5); /* odd padding: unvectorised copy */
    test_qk_fused(50, 6, 2, 32, 0);
    test_qk_fused(33, 8, 4, 64, 8);
    test_swiglu_embed();
    test_attention(300, 4, 2, 64, 2);
    test_attention(300, 4, 2, 128, 3);
    test_attention(150, 4, 1, 16, 1);
    test_attention(64, 2, 2, 32, 1);
    test_attention(513, 4, 2, 128, 4); /* a last query tile of one row */
    s_attn_tests();
    s_decode_tests();
    test_sample();
    test_logprob();
    test_adamw();
    if (argc > 1 && strcmp(argv[1], "--bench") == 0) {
        bench_decode(b);
        bench(b);
    }
    if (argc > 1 && (strcmp(argv[1], "--bench") == 0 ||
                     strcmp(argv[1], "--bench-attn") == 0)) {
        bench_attn_fwd();
        bench_attn_bwd();
    }
    trn_blas_destroy(&b);
    printf("\n%d passed, %d failed\n", s_pass, s_fail);
    return s_fail ? 1 : 0;
}
