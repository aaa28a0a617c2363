/*
 * trn_cuda_device: devices, memory and host-side bf16 conversion.
 */
#include "trn_cuda_common.cuh"

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
