/*
 * trn_gpu_offload: the optimizer state of a one-device model in
 * page-locked host memory (verl's fsdp_config.optimizer_offload and
 * param_offload on one GPU).
 *
 * The fp32 master weights and AdamW's two moments (12 bytes a parameter,
 * 48 GB of the 4B shape) leave the device for good; the device keeps the
 * bf16 working weights and the fp32 gradient, and the memory they used
 * goes to activations. An update streams the state through two sets of
 * chunk buffers on two streams: a chunk's three arrays go up, the AdamW
 * kernel updates them (and the chunk's bf16 weights) next to the
 * gradient on the device, and they come back, while the other stream
 * does the same for the next chunk, so the copies in both directions and
 * the kernels overlap. The update is the same arithmetic as on the
 * device (the same kernel, chunk by chunk), so the weights match the
 * resident path bit for bit.
 */
#include "trn_gpu_model_int.h"

#include <stdlib.h>
#include <string.h>

#define S_CHUNK ((size_t) 32 << 20) /* floats a chunk: 128 MB an array */

/* Floats a chunk (LISA_CUDA_OFFLOAD_CHUNK, for tests: several chunks of
 * a small model), at most the parameters. */
static size_t
s_chunk(size_t n)
{
    const char *e = getenv("LISA_CUDA_OFFLOAD_CHUNK");
    long long v = e && *e ? atoll(e) : 0;
    size_t ch = v >= 1024 ? (size_t) v : S_CHUNK;
    return n < ch ? n : ch;
}

/* the three arrays in their order in the host copy */
static void
s_arrays(trn_gpu_model_t *g, float ***dev)
{
    dev[0] = &g->w32;
    dev[1] = &g->m;
    dev[2] = &g->v;
}

static void
s_release(trn_gpu_model_t *g)
{
    trn_cuda_free(&g->opt_dev);
    trn_cuda_stream_destroy(&g->opt_st[0]);
    trn_cuda_stream_destroy(&g->opt_st[1]);
    trn_cuda_host_free(&g->hopt);
}

static lisa_rc_t
s_out(trn_gpu_model_t *g, trn_err_t *err)
{
    size_t n = g->n_params, ch = s_chunk(n);
    float **dev[3];
    s_arrays(g, dev);
    g->opt_chunk = ch;
    g->hopt = trn_cuda_host_alloc(3 * n * sizeof(float));
    g->opt_dev = trn_cuda_malloc(6 * ch * sizeof(float));
    g->opt_st[0] = trn_cuda_stream_new();
    g->opt_st[1] = trn_cuda_stream_new();
    if (!g->hopt || !g->opt_dev || !g->opt_st[0] || !g->opt_st[1]) {
        s_release(g);
        s_err(err, "optimizer offload: no page-locked host memory or "
                   "device buffers for it");
        return LISA_TOOLARGE;
    }
    lisa_rc_t rc = trn_cuda_sync();
    for (int i = 0; i < 3 && rc == LISA_OK; i++)
        rc = trn_cuda_download_async(g->hopt + (size_t) i * n, *dev[i],
                                     n * sizeof(float), NULL);
    if (rc == LISA_OK)
        rc = trn_cuda_sync();
    if (rc != LISA_OK) {
        s_release(g);
        s_err(err, "optimizer offload: copy to the host failed");
        return rc;
    }
    for (int i = 0; i < 3; i++)
        trn_cuda_free(dev[i]);
    g->opt_off = 1;
    return LISA_OK;
}

static lisa_rc_t
s_in(trn_gpu_model_t *g, trn_err_t *err)
{
    size_t n = g->n_params;
    float **dev[3];
    s_arrays(g, dev);
    for (int i = 0; i < 3; i++) {
        *dev[i] = trn_cuda_malloc(n * sizeof(float));
        if (!*dev[i]) {
            for (int j = 0; j <= i; j++)
                trn_cuda_free(dev[j]);
            s_err(err, "optimizer offload: out of device memory to bring "
                       "the optimizer state back");
            return LISA_TOOLARGE;
        }
    }
    lisa_rc_t rc = LISA_OK;
    for (int i = 0; i < 3 && rc == LISA_OK; i++)
        rc = trn_cuda_upload_async(*dev[i], g->hopt + (size_t) i * n,
                                   n * sizeof(float), NULL);
    if (rc == LISA_OK)
        rc = trn_cuda_sync();
    if (rc != LISA_OK) {
        for (int i = 0; i < 3; i++)
            trn_cuda_free(dev[i]);
        s_err(err, "optimizer offload: copy back to the device failed");
        return rc;
    }
    s_release(g);
    g->opt_off = 0;
    return LISA_OK;
}

lisa_rc_t
trn_gpu_model_set_optim_offload(trn_gpu_model_t *g, int on, trn_err_t *err)
{
    if (!g) {
        s_err(err, "optimizer offload: no model");
        return LISA_INVALID;
    }
    if ((on != 0) == (g->opt_off != 0))
        return LISA_OK;
    if (g->dist) {
        s_err(err, "optimizer offload is for one device; with data parallel "
                   "the moments are sharded across the ranks instead");
        return LISA_UNSUPPORTED;
    }
    if (g->state_off) {
        s_err(err, "optimizer offload: the training state is off the device "
                   "(bring it back first)");
        return LISA_CONFLICT;
    }
    return on ? s_out(g, err) : s_in(g, err);
}

int
trn_gpu_model_optim_offloaded(const trn_gpu_model_t *g)
{
    return g && g->opt_off;
}

lisa_rc_t
trn_gpu_model_adamw_offloaded(trn_gpu_model_t *g, float lr, float beta1,
                              float beta2, float eps, float weight_decay,
                              float clip)
{
    lisa_rc_t rc = LISA_OK;
    size_t n = g->n_params, ch = g->opt_chunk;
    float *h = g->hopt;
    for (size_t off = 0, c = 0; off < n; off += ch, c++) {
        size_t k = n - off < ch ? n - off : ch, b = k * sizeof(float);
        trn_cuda_stream_t *s = g->opt_st[c % 2];
        /* a set is reused two chunks later on the same stream: ordered */
        float *w = g->opt_dev + (c % 2) * 3 * ch, *m = w + ch, *v = m + ch;
        S_TRY(trn_cuda_upload_async(w, h + off, b, s));
        S_TRY(trn_cuda_upload_async(m, h + n + off, b, s));
        S_TRY(trn_cuda_upload_async(v, h + 2 * n + off, b, s));
        S_TRY(trn_k_adamw(w, g->wb + off, m, v, g->grad + off, k, lr, beta1,
                          beta2, eps, weight_decay, g->step, clip, g->scalar,
                          s));
        S_TRY(trn_cuda_download_async(h + off, w, b, s));
        S_TRY(trn_cuda_download_async(h + n + off, m, b, s));
        S_TRY(trn_cuda_download_async(h + 2 * n + off, v, b, s));
    }
out:
    if (trn_cuda_stream_sync(g->opt_st[0]) != LISA_OK ||
        trn_cuda_stream_sync(g->opt_st[1]) != LISA_OK)
        rc = rc == LISA_OK ? LISA_ERR : rc;
    return rc;
}

lisa_rc_t
trn_gpu_model_offload_get(trn_gpu_model_t *g, float *w, float *m, float *v)
{
    size_t n = g->n_params;
    float *dst[3] = {w, m, v};
    for (int i = 0; i < 3; i++)
        if (dst[i])
            memcpy(dst[i], g->hopt + (size_t) i * n, n * sizeof(float));
    return LISA_OK;
}

lisa_rc_t
trn_gpu_model_offload_set(trn_gpu_model_t *g, const float *m, const float *v)
{
    size_t n = g->n_params;
    memcpy(g->hopt + n, m, n * sizeof(float));
    memcpy(g->hopt + 2 * n, v, n * sizeof(float));
    return LISA_OK;
}

void
trn_gpu_model_offload_free(trn_gpu_model_t *g)
{
    s_release(g);
}
