/*
 * trn_ops tests: the blocked, threaded matmuls against a naive triple
 * loop over awkward sizes (tails of every block), RMSNorm's backward
 * against finite differences (in double-checked float), RoPE's inverse
 * undoing it, and inv_freq as transformers computes it. The first test is
 * the usage example.
 */
#include "trn_ops.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void
fill(float *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (float) ((double) (seed >> 8) / 16777216.0 - 0.5);
    }
}

Test(trn_ops, usage)
{
    /* y = x W^T for a [2,3] input and a [4,3] weight */
    trn_pool_t *pool = trn_pool_new(2);
    float x[6] = {1, 2, 3, 4, 5, 6};
    float w[12] = {1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1};
    float y[8];
    trn_mm_nt(pool, y, x, w, 2, 3, 4);
    float want[8] = {1, 2, 3, 6, 4, 5, 6, 15};
    cr_assert_arr_eq(y, want, sizeof want);
    trn_pool_destroy(&pool);
}

Test(trn_ops, matmuls_match_naive_loops)
{
    trn_pool_t *pool = trn_pool_new(3);
    const size_t dims[][3] = {
        {1, 7, 5}, {5, 9, 70}, {37, 33, 130}, {64, 300, 17}};
    for (size_t c = 0; c < 4; c++) {
        size_t T = dims[c][0], in = dims[c][1], out = dims[c][2];
        float *x = malloc(T * in * 4), *w = malloc(out * in * 4);
        float *dy = malloc(T * out * 4), *y = malloc(T * out * 4);
        float *dx = malloc(T * in * 4), *dw = malloc(out * in * 4);
        fill(x, T * in, 1);
        fill(w, out * in, 2);
        fill(dy, T * out, 3);
        trn_mm_nt(pool, y, x, w, T, in, out);
        trn_mm_nn(pool, dx, dy, w, T, out, in, false);
        for (size_t i = 0; i < out * in; i++)
            dw[i] = 1.0f;
        trn_mm_tn(pool, dw, dy, x, T, out, in);
        /* largest error of each product against a double-precision loop */
        double ey = 0, ex = 0, ew = 0;
        for (size_t t = 0; t < T; t++)
            for (size_t o = 0; o < out; o++) {
                double s = 0;
                for (size_t i = 0; i < in; i++)
                    s += (double) x[t * in + i] * w[o * in + i];
                ey = fmax(ey, fabs(y[t * out + o] - s));
            }
        for (size_t t = 0; t < T; t++)
            for (size_t i = 0; i < in; i++) {
                double s = 0;
                for (size_t o = 0; o < out; o++)
                    s += (double) dy[t * out + o] * w[o * in + i];
                ex = fmax(ex, fabs(dx[t * in + i] - s));
            }
        for (size_t o = 0; o < out; o++)
            for (size_t i = 0; i < in; i++) {
                double s = 1.0;
                for (size_t t = 0; t < T; t++)
                    s += (double) dy[t * out + o] * x[t * in + i];
                ew = fmax(ew, fabs(dw[o * in + i] - s));
            }
        cr_assert_lt(ey, 1e-5, "case %zu: nt off by %g", c, ey);
        cr_assert_lt(ex, 1e-5, "case %zu: nn off by %g", c, ex);
        cr_assert_lt(ew, 1e-5, "case %zu: tn off by %g", c, ew);
        /* accumulate mode adds */
        trn_mm_nn(pool, dx, dy, w, T, out, in, true);
        float *dx1 = malloc(T * in * 4);
        trn_mm_nn(pool, dx1, dy, w, T, out, in, false);
        double ea = 0;
        for (size_t i = 0; i < T * in; i++)
            ea = fmax(ea, fabsf(dx[i] - 2 * dx1[i]));
        cr_assert_lt(ea, 1e-5);
        free(x), free(w), free(dy), free(y), free(dx), free(dw), free(dx1);
    }
    trn_pool_destroy(&pool);
}

Test(trn_ops, rmsnorm_backward_matches_finite_differences)
{
    enum { R = 3, D = 10 };
    float x[R * D], w[D], dy[R * D], y[R * D], rs[R];
    fill(x, R * D, 4);
    fill(w, D, 5);
    fill(dy, R * D, 6);
    float dx[R * D] = {0}, dw[D] = {0};
    trn_rmsnorm(y, rs, x, w, R, D, 1e-6f);
    trn_rmsnorm_bwd(dx, dw, dy, x, rs, w, R, D);
    /* L = sum dy * y; check dL/dx and dL/dw numerically */
    for (size_t k = 0; k < R * D + D; k++) {
        float *p = k < R * D ? &x[k] : &w[k - R * D];
        float save = *p, h = 1e-3f;
        double l[2];
        for (int s = 0; s < 2; s++) {
            *p = save + (s ? -h : h);
            trn_rmsnorm(y, rs, x, w, R, D, 1e-6f);
            l[s] = 0;
            for (size_t i = 0; i < R * D; i++)
                l[s] += (double) dy[i] * y[i];
        }
        *p = save;
        double fd = (l[0] - l[1]) / (2 * h);
        double an = k < R * D ? dx[k] : dw[k - R * D];
        cr_assert(fabs(fd - an) < 2e-3, "k=%zu fd %g an %g", k, fd, an);
    }
}

Test(trn_ops, rope_inverse_undoes_rope_and_keeps_norms)
{
    enum { R = 4, NH = 3, HD = 8 };
    float x[R * NH * HD], orig[R * NH * HD], inv[HD / 2];
    int32_t pos[R] = {0, 1, 17, 4000};
    fill(x, sizeof x / 4, 7);
    memcpy(orig, x, sizeof x);
    trn_rope_inv_freq(inv, HD, 1e6);
    cr_assert_eq(inv[0], 1.0f);
    cr_assert_float_eq(inv[1], 1.0f / powf(1e6f, 0.25f), 1e-9);
    trn_rope(x, R, NH, HD, pos, inv, false);
    /* position 0 is the identity; rotations keep each pair's norm */
    cr_assert_arr_eq(x, orig, NH * HD * sizeof(float));
    for (size_t r = 0; r < R; r++)
        for (size_t h = 0; h < NH; h++)
            for (size_t i = 0; i < HD / 2; i++) {
                const float *a = x + (r * NH + h) * HD;
                const float *b = orig + (r * NH + h) * HD;
                cr_assert_float_eq(hypotf(a[i], a[i + HD / 2]),
                                   hypotf(b[i], b[i + HD / 2]), 1e-5);
            }
    /* half-split pairing: lane 0 pairs with lane HD/2 at angle pos*inv[0] */
    const float *a = x + (1 * NH) * HD, *b = orig + (1 * NH) * HD;
    cr_assert_float_eq(a[0], b[0] * cosf(1) - b[HD / 2] * sinf(1), 1e-6);
    trn_rope(x, R, NH, HD, pos, inv, true);
    for (size_t i = 0; i < sizeof x / 4; i++)
        cr_assert_float_eq(x[i], orig[i], 1e-5);
}

Test(trn_ops, exp_shifted_matches_expf_within_two_ulp)
{
    enum { N = 200001 };
    float *x = malloc(N * sizeof *x);
    for (size_t i = 0; i < N; i++)
        x[i] =
            3.0f - 100.0f * (float) i / (N - 1); /* shift 3: t in [-100, 0] */
    trn_exp_shifted(x, N, 3.0f);
    for (size_t i = 0; i < N; i++) {
        float t = (3.0f - 100.0f * (float) i / (N - 1)) - 3.0f;
        float want = expf(t);
        if (t > -86.0f)
            cr_assert_leq(fabsf(x[i] - want), 2.5e-7f * want, "t=%g: %g vs %g",
                          (double) t, (double) x[i], (double) want);
        else
            cr_assert_leq(x[i], 1e-37f, "t=%g: %g", (double) t, (double) x[i]);
        cr_assert_geq(x[i], 0.0f);
    }
    /* the top of the range, and a small overshoot from rounding */
    float y[3] = {5.0f, 5.0f + 1e-6f, 4.0f};
    trn_exp_shifted(y, 3, 5.0f);
    cr_assert_float_eq(y[0], 1.0f, 1e-7);
    cr_assert_float_eq(y[1], 1.0f, 1e-5);
    cr_assert_float_eq(y[2], expf(-1.0f), 2e-7);
    free(x);
}

Test(trn_ops, dot_matches_a_double_sum_for_every_length)
{
    float a[37], b[37];
    fill(a, 37, 3);
    fill(b, 37, 4);
    for (size_t n = 0; n <= 37; n++) {
        double want = 0;
        for (size_t i = 0; i < n; i++)
            want += (double) a[i] * (double) b[i];
        cr_assert_float_eq(trn_dot(a, b, n), want, 1e-5, "n=%zu", n);
    }
}
