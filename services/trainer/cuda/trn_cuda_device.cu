/*
 * trn_cuda_device: devices, memory and host-side bf16 conversion.
 */
#include "trn_cuda_common.cuh"

#include <string.h>

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

extern "C" trn_bf16_t
trn_bf16_from_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN stays a quiet NaN */
        return (trn_bf16_t) ((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (trn_bf16_t) (u >> 16);
}

extern "C" float
trn_bf16_to_f32(trn_bf16_t b)
{
    uint32_t u = (uint32_t) b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
