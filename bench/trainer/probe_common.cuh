/*
 * What the decode probes (stream_probe.cu, attn_probe.cu) share: a CUDA
 * check that ends the program, the plain read that is each probe's
 * ceiling, and the timing of a captured graph.
 */
#ifndef PROBE_COMMON_CUH
#define PROBE_COMMON_CUH

#include "trn_cuda_common.cuh"

#include <algorithm>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

#define CK(x)                                                                  \
    do {                                                                       \
        cudaError_t e_ = (x);                                                  \
        if (e_ != cudaSuccess) {                                               \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__,                 \
                    cudaGetErrorString(e_));                                   \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

static __global__ void
p_read(const uint4 *p, size_t n16, unsigned *sink)
{
    size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x;
    size_t s = (size_t) gridDim.x * blockDim.x;
    unsigned acc = 0;
    for (; i + 3 * s < n16; i += 4 * s) {
        uint4 a = __ldcs(p + i), b = __ldcs(p + i + s);
        uint4 c = __ldcs(p + i + 2 * s), d = __ldcs(p + i + 3 * s);
        acc ^= a.x ^ b.y ^ c.z ^ d.w;
    }
    for (; i < n16; i += s)
        acc ^= p[i].x;
    if (acc == 0x9e3779b9u)
        *sink = acc;
}

static float
p_median(std::vector<float> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

/* Captures fn's launches on st as a graph, replays it 20 times (after 3),
 * the median in ms. */
template <typename F>
static float
p_time(cudaStream_t st, F fn)
{
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    fn();
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<float> ts;
    for (int i = 0; i < 23; i++) {
        CK(cudaEventRecord(a, st));
        CK(cudaGraphLaunch(ge, st));
        CK(cudaEventRecord(b, st));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        if (i >= 3)
            ts.push_back(ms);
    }
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    return p_median(ts);
}

#endif
