/*
 * trn_ops: fp32 CPU kernels (see trn_ops.h).
 *
 * The matmuls are blocked so that a block of W rows stays in cache while
 * several X rows stream past it, with eight independent partial sums per
 * dot product so the compiler can vectorise without reassociating floats
 * behind our back. Tasks are 2-D tiles (rows x output columns) so that a
 * single decode row still spreads over every thread.
 */
#include "trn_ops.h"

#include <math.h>
#include <string.h>

#define S_ROWS 4  /* X rows per micro tile */
#define S_COLS 64 /* output columns per task */
#define S_RBLK 32 /* X rows per task */

typedef struct {
    float *y;
    const float *x, *w, *dy;
    size_t T, in, out;
    size_t nrb, ncb;
    bool acc;
} s_mm_t;

static inline float
s_dot(const float *a, const float *b, size_t n)
{
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t k = 0;
    for (; k + 8 <= n; k += 8)
        for (size_t j = 0; j < 8; j++)
            s[j] += a[k + j] * b[k + j];
    float t = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for (; k < n; k++)
        t += a[k] * b[k];
    return t;
}

/* Four dot products of w with x rows x0..x3. */
static inline void
s_dot4(const float *w, const float *x0, const float *x1, const float *x2,
       const float *x3, size_t n, float r[4])
{
    float s0[8] = {0}, s1[8] = {0}, s2[8] = {0}, s3[8] = {0};
    size_t k = 0;
    for (; k + 8 <= n; k += 8)
        for (size_t j = 0; j < 8; j++) {
            float wv = w[k + j];
            s0[j] += x0[k + j] * wv;
            s1[j] += x1[k + j] * wv;
            s2[j] += x2[k + j] * wv;
            s3[j] += x3[k + j] * wv;
        }
    float *ss[4] = {s0, s1, s2, s3};
    const float *xs[4] = {x0, x1, x2, x3};
    for (int q = 0; q < 4; q++) {
        const float *s = ss[q];
        float t =
            ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
        for (size_t kk = k; kk < n; kk++)
            t += xs[q][kk] * w[kk];
        r[q] = t;
    }
}

static void
s_nt_task(void *ctx, size_t task)
{
    const s_mm_t *c = ctx;
    size_t rb = task / c->ncb, cb = task % c->ncb;
    size_t t0 = rb * S_RBLK, t1 = t0 + S_RBLK < c->T ? t0 + S_RBLK : c->T;
    size_t o0 = cb * S_COLS, o1 = o0 + S_COLS < c->out ? o0 + S_COLS : c->out;
    size_t in = c->in;
    size_t t = t0;
    for (; t + S_ROWS <= t1; t += S_ROWS) {
        const float *x0 = c->x + t * in;
        for (size_t o = o0; o < o1; o++) {
            float r[4];
            s_dot4(c->w + o * in, x0, x0 + in, x0 + 2 * in, x0 + 3 * in, in, r);
            for (int q = 0; q < 4; q++)
                c->y[(t + (size_t) q) * c->out + o] = r[q];
        }
    }
    for (; t < t1; t++)
        for (size_t o = o0; o < o1; o++)
            c->y[t * c->out + o] = s_dot(c->x + t * in, c->w + o * in, in);
}

void
trn_mm_nt(trn_pool_t *pool, float *y, const float *x, const float *w, size_t T,
          size_t in, size_t out)
{
    s_mm_t c = {.y = y, .x = x, .w = w, .T = T, .in = in, .out = out};
    c.nrb = (T + S_RBLK - 1) / S_RBLK;
    c.ncb = (out + S_COLS - 1) / S_COLS;
    trn_pool_run(pool, c.nrb * c.ncb, s_nt_task, &c);
}

#define S_ICOLS 256 /* input columns per task of the backward matmuls */

/* dx rows [t0,t1) x columns [i0,i1): sum over o of dy[t,o] * w[o, i].
 * The dx tile stays in cache while W streams past it four rows at a time.
 */
static void
s_nn_task(void *ctx, size_t task)
{
    const s_mm_t *c = ctx;
    size_t rb = task / c->ncb, cb = task % c->ncb;
    size_t t0 = rb * S_RBLK, t1 = t0 + S_RBLK < c->T ? t0 + S_RBLK : c->T;
    size_t i0 = cb * S_ICOLS, i1 = i0 + S_ICOLS < c->in ? i0 + S_ICOLS : c->in;
    size_t n = i1 - i0, in = c->in, out = c->out;
    if (!c->acc)
        for (size_t t = t0; t < t1; t++)
            memset(c->y + t * in + i0, 0, n * sizeof(float));
    size_t o = 0;
    for (; o + 4 <= out; o += 4) {
        const float *w0 = c->w + o * in + i0, *w1 = w0 + in, *w2 = w1 + in,
                    *w3 = w2 + in;
        for (size_t t = t0; t < t1; t++) {
            const float *g = c->dy + t * out + o;
            float a0 = g[0], a1 = g[1], a2 = g[2], a3 = g[3];
            if (a0 == 0.0f && a1 == 0.0f && a2 == 0.0f && a3 == 0.0f)
                continue;
            float *d = c->y + t * in + i0;
            for (size_t i = 0; i < n; i++)
                d[i] += a0 * w0[i] + a1 * w1[i] + a2 * w2[i] + a3 * w3[i];
        }
    }
    for (; o < out; o++) {
        const float *w0 = c->w + o * in + i0;
        for (size_t t = t0; t < t1; t++) {
            float a0 = c->dy[t * out + o];
            float *d = c->y + t * in + i0;
            for (size_t i = 0; i < n; i++)
                d[i] += a0 * w0[i];
        }
    }
}

void
trn_mm_nn(trn_pool_t *pool, float *dx, const float *dy, const float *w,
          size_t T, size_t out, size_t in, bool acc)
{
    s_mm_t c = {.y = dx, .dy = dy, .w = w, .T = T, .in = in, .out = out};
    c.acc = acc;
    c.nrb = (T + S_RBLK - 1) / S_RBLK;
    c.ncb = (in + S_ICOLS - 1) / S_ICOLS;
    trn_pool_run(pool, c.nrb * c.ncb, s_nn_task, &c);
}

#define S_OBLK 32 /* weight rows per task of the weight gradient */

/* dw rows [o0,o1) x columns [i0,i1): += sum over t of dy[t,o] * x[t,i],
 * four positions at a time so each dw element is loaded once per four. */
static void
s_tn_task(void *ctx, size_t task)
{
    const s_mm_t *c = ctx;
    size_t ob = task / c->ncb, cb = task % c->ncb;
    size_t o0 = ob * S_OBLK, o1 = o0 + S_OBLK < c->out ? o0 + S_OBLK : c->out;
    size_t i0 = cb * S_ICOLS, i1 = i0 + S_ICOLS < c->in ? i0 + S_ICOLS : c->in;
    size_t n = i1 - i0, in = c->in, out = c->out;
    size_t t = 0;
    for (; t + 4 <= c->T; t += 4) {
        const float *x0 = c->x + t * in + i0, *x1 = x0 + in, *x2 = x1 + in,
                    *x3 = x2 + in;
        const float *g = c->dy + t * out;
        for (size_t o = o0; o < o1; o++) {
            float a0 = g[o], a1 = g[out + o], a2 = g[2 * out + o],
                  a3 = g[3 * out + o];
            if (a0 == 0.0f && a1 == 0.0f && a2 == 0.0f && a3 == 0.0f)
                continue;
            float *d = c->y + o * in + i0;
            for (size_t i = 0; i < n; i++)
                d[i] += a0 * x0[i] + a1 * x1[i] + a2 * x2[i] + a3 * x3[i];
        }
    }
    for (; t < c->T; t++) {
        const float *x0 = c->x + t * in + i0;
        for (size_t o = o0; o < o1; o++) {
            float a0 = c->dy[t * out + o];
            float *d = c->y + o * in + i0;
            for (size_t i = 0; i < n; i++)
                d[i] += a0 * x0[i];
        }
    }
}

void
trn_mm_tn(trn_pool_t *pool, float *dw, const float *dy, const float *x,
          size_t T, size_t out, size_t in)
{
    s_mm_t c = {.y = dw, .dy = dy, .x = x, .T = T, .in = in, .out = out};
    c.ncb = (in + S_ICOLS - 1) / S_ICOLS;
    trn_pool_run(pool, (out + S_OBLK - 1) / S_OBLK * c.ncb, s_tn_task, &c);
}

void
trn_rmsnorm(float *y, float *rstd, const float *x, const float *w, size_t rows,
            size_t dim, float eps)
{
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * dim;
        double ss = 0;
        for (size_t i = 0; i < dim; i++)
            ss += (double) xr[i] * (double) xr[i];
        float var = (float) (ss / (double) dim);
        float rs = 1.0f / sqrtf(var + eps);
        rstd[r] = rs;
        float *yr = y + r * dim;
        for (size_t i = 0; i < dim; i++)
            yr[i] = w[i] * (xr[i] * rs);
    }
}

void
trn_rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x,
                const float *rstd, const float *w, size_t rows, size_t dim)
{
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * dim, *gr = dy + r * dim;
        float rs = rstd[r];
        double dot = 0;
        for (size_t i = 0; i < dim; i++) {
            dot += (double) (gr[i] * w[i]) * (double) xr[i];
            dw[i] += gr[i] * xr[i] * rs;
        }
        float k = (float) (dot / (double) dim) * rs * rs * rs;
        float *dr = dx + r * dim;
        for (size_t i = 0; i < dim; i++)
            dr[i] += rs * gr[i] * w[i] - k * xr[i];
    }
}

void
trn_rope_inv_freq(float *inv_freq, size_t hd, double theta)
{
    float base = (float) theta;
    for (size_t i = 0; i < hd / 2; i++) {
        float e = (float) (2 * i) / (float) hd;
        inv_freq[i] = 1.0f / powf(base, e);
    }
}

void
trn_rope(float *x, size_t rows, size_t nheads, size_t hd, const int32_t *pos,
         const float *inv_freq, bool inverse)
{
    size_t half = hd / 2;
    for (size_t r = 0; r < rows; r++) {
        float p = (float) pos[r];
        for (size_t i = 0; i < half; i++) {
            float ang = p * inv_freq[i];
            float c = cosf(ang), s = sinf(ang);
            if (inverse)
                s = -s;
            for (size_t h = 0; h < nheads; h++) {
                float *v = x + (r * nheads + h) * hd;
                float x1 = v[i], x2 = v[i + half];
                v[i] = x1 * c - x2 * s;
                v[i + half] = x2 * c + x1 * s;
            }
        }
    }
}

float
trn_silu(float x)
{
    return x / (1.0f + expf(-x));
}

void
trn_exp_shifted(float *x, size_t n, float shift)
{
    const float log2e = 1.44269504088896341f;
    const float ln2_hi = 0.693145751953125f, ln2_lo = 1.428606765330187e-6f;
    /* Integer selects only: the vectoriser turns them into masks, where a
     * float select would need -ffinite-math-only. */
    for (size_t i = 0; i < n; i++) {
        float t = x[i] - shift;
        /* ku = round(t / ln 2) for t <= 0, so |f| <= ln 2 / 2 */
        int ku = (int) (t * log2e - 0.5f);
        int k = ku < -126 ? -126 : ku;
        k = k > 0 ? 0 : k;
        float kf = (float) k;
        float f = (t - kf * ln2_hi) - kf * ln2_lo;
        float p = 1.0f / 5040.0f;
        p = p * f + 1.0f / 720.0f;
        p = p * f + 1.0f / 120.0f;
        p = p * f + 1.0f / 24.0f;
        p = p * f + 1.0f / 6.0f;
        p = p * f + 0.5f;
        p = p * f + 1.0f;
        p = p * f + 1.0f;
        union {
            uint32_t u;
            float f;
        } sc = {.u = (uint32_t) (k + 127) << 23}, r;
        r.f = p * sc.f;
        r.u &= ku < -126 ? 0u : 0xffffffffu; /* far below: exactly 0 */
        x[i] = r.f;
    }
}

float
trn_dot(const float *a, const float *b, size_t n)
{
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
    }
    for (; i < n; i++)
        s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}
