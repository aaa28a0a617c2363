/*
 * trn_cuda_device: devices, memory and host-side bf16 conversion.
 */
#include "trn_cuda_common.cuh"

#include <stdlib.h>

extern "C" int
trn_env_on(const char *name)
{
    const char *e = getenv(name);
    return !(e && *e == '0');
}

int
trn_pdl_on(void)
{
    static int on = -1; /* racy first read: every thread computes the same */
    if (on < 0)
        on = trn_env_on("LISA_CUDA_PDL");
    return on;
}

int
trn_sm_count(void)
{
    static int cached;
    if (cached > 0)
        return cached;
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) !=
            cudaSuccess ||
        n <= 0) {
        cudaGetLastError();
        return 132;
    }
    cached = n;
    return n;
}

extern "C" lisa_rc_t
trn_cuda_set_device(int dev)
{
    int n = trn_cuda_device_count();
    if (dev < 0 || dev >= n) {
        fprintf(stderr, "trainer: CUDA device %d not available (%d found)\n",
                dev, n);
        return LISA_UNAVAILABLE;
    }
    TRN_CUDA_TRY(cudaSetDevice(dev));
    return LISA_OK;
}

extern "C" int
trn_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" int
trn_cuda_cc_major(void)
{
    int dev = 0, m = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, dev) !=
            cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return m;
}

extern "C" void *
trn_cuda_malloc(size_t bytes)
{
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        fprintf(stderr, "trainer: cudaMalloc(%zu) failed: %s\n", bytes,
                cudaGetErrorString(e));
        cudaGetLastError();
        return NULL;
    }
    return p;
}

extern "C" void
trn_cuda_free(void *pp)
{
    void **p = (void **) pp;
    if (p && *p) {
        cudaFree(*p);
        *p = NULL;
    }
}

extern "C" lisa_rc_t
trn_cuda_upload(void *dst, const void *src, size_t bytes)
{
    TRN_CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
    return LISA_OK;
}

extern "C" lisa_rc_t
trn_cuda_download(void *dst, const void *src, size_t bytes)
{
    TRN_CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
    return LISA_OK;
}

extern "C" lisa_rc_t
trn_cuda_copy(void *dst, const void *src, size_t bytes, trn_cuda_stream_t *s)
{
    TRN_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                 trn_stream(s)));
    return LISA_OK;
}

extern "C" lisa_rc_t
trn_cuda_copy2d(void *dst, size_t dpitch, const void *src, size_t spitch,
                size_t width, size_t height, trn_cuda_stream_t *s)
{
    if (width == 0 || height == 0)
        return LISA_OK;
    TRN_CUDA_TRY(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height,
                                   cudaMemcpyDeviceToDevice, trn_stream(s)));
    return LISA_OK;
}

extern "C" lisa_rc_t
trn_cuda_memset(void *p, int v, size_t bytes, trn_cuda_stream_t *s)
{
    TRN_CUDA_TRY(cudaMemsetAsync(p, v, bytes, trn_stream(s)));
    return LISA_OK;
}

extern "C" lisa_rc_t
trn_cuda_sync(void)
{
    TRN_CUDA_TRY(cudaDeviceSynchronize());
    return LISA_OK;
}

extern "C" lisa_rc_t
trn_cuda_mem_info(size_t *free_b, size_t *total_b)
{
    TRN_CUDA_TRY(cudaMemGetInfo(free_b, total_b));
    return LISA_OK;
}

extern "C" trn_cuda_stream_t *
trn_cuda_stream_new(void)
{
    cudaStream_t st = NULL;
    /* default flags: a blocking stream, ordered with the legacy default
     * stream that training and the synchronous copies use */
    cudaError_t e = cudaStreamCreate(&st);
    if (e != cudaSuccess) {
        fprintf(stderr, "trainer: cudaStreamCreate failed: %s\n",
                cudaGetErrorString(e));
        cudaGetLastError();
        return NULL;
    }
    return (trn_cuda_stream_t *) st;
}

extern "C" void
trn_cuda_stream_destroy(trn_cuda_stream_t **s)
{
    if (s && *s) {
        cudaStreamSynchronize(trn_stream(*s));
        cudaStreamDestroy(trn_stream(*s));
        *s = NULL;
    }
}

extern "C" lisa_rc_t
trn_cuda_stream_sync(trn_cuda_stream_t *s)
{
    TRN_CUDA_TRY(cudaStreamSynchronize(trn_stream(s)));
    return LISA_OK;
}

extern "C" void *
trn_cuda_host_alloc(size_t bytes)
{
    void *p = NULL;
    cudaError_t e = cudaMallocHost(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        fprintf(stderr, "trainer: cudaMallocHost(%zu) failed: %s\n", bytes,
                cudaGetErrorString(e));
        cudaGetLastError();
        return NULL;
    }
    return p;
}

extern "C" void
trn_cuda_host_free(void *pp)
{
    void **p = (void **) pp;
    if (p && *p) {
        cudaFreeHost(*p);
        *p = NULL;
    }
}

extern "C" lisa_rc_t
trn_cuda_upload_async(void *dst, const void *src, size_t bytes,
                      trn_cuda_stream_t *s)
{
    TRN_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
                                 trn_stream(s)));
    return LISA_OK;
}

extern "C" lisa_rc_t
trn_cuda_download_async(void *dst, const void *src, size_t bytes,
                        trn_cuda_stream_t *s)
{
    TRN_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost,
                                 trn_stream(s)));
    return LISA_OK;
}

/* ---- graphs ------------------------------------------------------------- */

extern "C" lisa_rc_t
trn_cuda_capture_begin(trn_cuda_stream_t *s)
{
    if (!s)
        return LISA_INVALID; /* the legacy default stream cannot record */
    /* thread-local: other threads' CUDA calls stay legal meanwhile */
    TRN_CUDA_TRY(cudaStreamBeginCapture(trn_stream(s),
                                        cudaStreamCaptureModeThreadLocal));
    return LISA_OK;
}

extern "C" lisa_rc_t
trn_cuda_capture_end(trn_cuda_stream_t *s, int ok, trn_cuda_graph_t **out)
{
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    *out = NULL;
    cudaError_t e = cudaStreamEndCapture(trn_stream(s), &graph);
    if (e != cudaSuccess || !graph || !ok) {
        if (e != cudaSuccess)
            fprintf(stderr, "trainer: stream capture failed: %s\n",
                    cudaGetErrorString(e));
        if (graph)
            cudaGraphDestroy(graph);
        cudaGetLastError();
        return ok ? LISA_ERR : LISA_OK;
    }
    e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        fprintf(stderr, "trainer: graph instantiation failed: %s\n",
                cudaGetErrorString(e));
        cudaGetLastError();
        return LISA_ERR;
    }
    *out = (trn_cuda_graph_t *) exec;
    return LISA_OK;
}

extern "C" lisa_rc_t
trn_cuda_graph_launch(trn_cuda_graph_t *gr, trn_cuda_stream_t *s)
{
    TRN_REQUIRE(gr);
    TRN_CUDA_TRY(cudaGraphLaunch((cudaGraphExec_t) gr, trn_stream(s)));
    return LISA_OK;
}

extern "C" void
trn_cuda_graph_destroy(trn_cuda_graph_t **gr)
{
    if (gr && *gr) {
        cudaGraphExecDestroy((cudaGraphExec_t) *gr);
        *gr = NULL;
    }
}

/* ---- timers ------------------------------------------------------------ */

struct trn_cuda_timer {
    int n_classes, max_marks, n, dropped;
    cudaEvent_t *ev; /* max_marks + 1: the start, then the marks */
    int *cls;        /* the class of mark i (ev[i + 1]) */
    cudaStream_t st; /* where the events are recorded */
};

extern "C" void
trn_cuda_timer_destroy(trn_cuda_timer_t **tp)
{
    trn_cuda_timer_t *t = tp ? *tp : NULL;
    if (!t)
        return;
    for (int i = 0; i <= t->max_marks; i++)
        if (t->ev[i])
            cudaEventDestroy(t->ev[i]);
    free(t->ev);
    free(t->cls);
    free(t);
    *tp = NULL;
}

extern "C" trn_cuda_timer_t *
trn_cuda_timer_new(int n_classes, int max_marks)
{
    if (n_classes < 1 || max_marks < 1)
        return NULL;
    trn_cuda_timer_t *t = (trn_cuda_timer_t *) calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->n_classes = n_classes;
    t->max_marks = max_marks;
    t->ev = (cudaEvent_t *) calloc((size_t) max_marks + 1, sizeof *t->ev);
    t->cls = (int *) calloc((size_t) max_marks, sizeof *t->cls);
    bool ok = t->ev && t->cls;
    for (int i = 0; ok && i <= max_marks; i++)
        ok = cudaEventCreate(&t->ev[i]) == cudaSuccess;
    if (!ok) {
        cudaGetLastError();
        fprintf(stderr, "trainer: no CUDA events for a timer\n");
        trn_cuda_timer_destroy(&t);
    }
    return t;
}

/* A mark of class -1 charges nothing. */
static lisa_rc_t
s_timer_mark(trn_cuda_timer_t *t, int cls)
{
    if (t->n >= t->max_marks) {
        t->dropped++;
        return LISA_OK;
    }
    TRN_CUDA_TRY(cudaEventRecord(t->ev[t->n + 1], t->st));
    t->cls[t->n++] = cls;
    return LISA_OK;
}

extern "C" lisa_rc_t
trn_cuda_timer_start(trn_cuda_timer_t *t)
{
    TRN_REQUIRE(t);
    if (t->n > 0) /* marks unread: the gap before this start is not charged */
        return s_timer_mark(t, -1);
    TRN_CUDA_TRY(cudaEventRecord(t->ev[0], t->st));
    return LISA_OK;
}

extern "C" void
trn_cuda_timer_stream(trn_cuda_timer_t *t, trn_cuda_stream_t *s)
{
    if (t)
        t->st = trn_stream(s);
}

extern "C" lisa_rc_t
trn_cuda_timer_mark(trn_cuda_timer_t *t, int cls)
{
    TRN_REQUIRE(t && cls >= 0 && cls < t->n_classes);
    return s_timer_mark(t, cls);
}

extern "C" int
trn_cuda_timer_read(trn_cuda_timer_t *t, double *ms)
{
    if (!t || !ms)
        return 0;
    if (t->n > 0 && cudaEventSynchronize(t->ev[t->n]) == cudaSuccess)
        for (int i = 0; i < t->n; i++) {
            float e = 0.0f;
            if (t->cls[i] >= 0 &&
                cudaEventElapsedTime(&e, t->ev[i], t->ev[i + 1]) == cudaSuccess)
                ms[t->cls[i]] += e;
        }
    cudaGetLastError();
    int dropped = t->dropped;
    t->n = 0;
    t->dropped = 0;
    return dropped;
}
