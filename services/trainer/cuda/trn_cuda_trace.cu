/*
 * trn_cuda_trace: the host side of the kernel timeline (see
 * trn_cuda_trace.cuh): a device buffer of records, handed to every file
 * of instrumented kernels, then copied back and written as CSV.
 */
#include "trn_cuda.h"
#include "trn_cuda_trace.cuh"

#include <stdio.h>
#include <stdlib.h>

#ifdef TRN_CUDA_TRACE

extern "C" int trn_trace_attach_blas(const trn_trace_t *t);
extern "C" int trn_trace_attach_decode(const trn_trace_t *t);
extern "C" int trn_trace_attach_norm(const trn_trace_t *t);

static trn_trace_t s_tr;

static int
s_attach(const trn_trace_t *t)
{
    return trn_trace_attach_blas(t) | trn_trace_attach_decode(t) |
           trn_trace_attach_norm(t);
}

extern "C" lisa_rc_t
trn_cuda_trace_start(unsigned cap)
{
    if (cap == 0)
        return LISA_INVALID;
    if (s_tr.rec && s_tr.cap < cap) { /* a larger buffer asked for */
        cudaFree(s_tr.rec);
        cudaFree(s_tr.n);
        s_tr = (trn_trace_t){NULL, NULL, 0};
    }
    if (!s_tr.rec) {
        if (cudaMalloc((void **) &s_tr.rec, (size_t) cap * sizeof *s_tr.rec) !=
                cudaSuccess ||
            cudaMalloc((void **) &s_tr.n, sizeof *s_tr.n) != cudaSuccess)
            return LISA_ERR;
        s_tr.cap = cap;
    }
    if (cudaMemset(s_tr.n, 0, sizeof *s_tr.n) != cudaSuccess ||
        s_attach(&s_tr) != 0)
        return LISA_ERR;
    return LISA_OK;
}

extern "C" lisa_rc_t
trn_cuda_trace_dump(FILE *f)
{
    trn_trace_t off = {NULL, NULL, 0};
    unsigned n = 0;
    if (!s_tr.rec || cudaDeviceSynchronize() != cudaSuccess ||
        cudaMemcpy(&n, s_tr.n, sizeof n, cudaMemcpyDeviceToHost) !=
            cudaSuccess ||
        s_attach(&off) != 0)
        return LISA_ERR;
    unsigned kept = n < s_tr.cap ? n : s_tr.cap;
    trn_trace_rec_t *r = (trn_trace_rec_t *) malloc(kept * sizeof *r + 1);
    if (!r || cudaMemcpy(r, s_tr.rec, kept * sizeof *r,
                         cudaMemcpyDeviceToHost) != cudaSuccess) {
        free(r);
        return LISA_ERR;
    }
    fprintf(f, "kind,a,b,grid,block,sm,t_start,t_wait,t_end\n");
    for (unsigned i = 0; i < kept; i++)
        fprintf(f, "%u,%u,%u,%u,%u,%u,%llu,%llu,%llu\n", r[i].kind, r[i].a,
                r[i].b, r[i].grid, r[i].block, r[i].sm, r[i].t0, r[i].t1,
                r[i].t2);
    free(r);
    if (n > kept)
        fprintf(stderr, "trace: %u records dropped (buffer of %u)\n", n - kept,
                kept);
    return LISA_OK;
}

#else

extern "C" lisa_rc_t
trn_cuda_trace_start(unsigned cap)
{
    (void) cap;
    return LISA_UNAVAILABLE;
}

extern "C" lisa_rc_t
trn_cuda_trace_dump(FILE *f)
{
    (void) f;
    return LISA_UNAVAILABLE;
}

#endif
