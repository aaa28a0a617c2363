/*
 * trn_cuda_trace: a timeline of a decode step's kernels, block by block,
 * for finding where the time between kernels goes (a build option,
 * LISA_CUDA_TRACE; in a build without it everything here is empty and the
 * kernels' machine code is unchanged).
 *
 * An instrumented kernel opens a trn_tr_scope at its start, calls
 * waited() right after trn_pdl_enter(), and the scope's end writes one
 * record a block (thread 0's view): the global timer at the start, after
 * the wait and at the end, the multiprocessor, the block, the grid, and
 * the kernel's kind and shape. Each file of kernels that includes this
 * holds its own pointer to the record buffer (TRN_TRACE_TU names its
 * setter), set by trn_cuda_trace_start (trn_cuda_trace.cu).
 */
#ifndef TRN_CUDA_TRACE_CUH
#define TRN_CUDA_TRACE_CUH

/* kinds of instrumented kernels */
enum {
    TRN_TR_SKINNY = 1,
    TRN_TR_SKINNY_GLU,
    TRN_TR_SKINNY_BULK,
    TRN_TR_SKINNY_BULK_GLU,
    TRN_TR_GEMV,
    TRN_TR_GEMV_GLU,
    TRN_TR_ATTN,
    TRN_TR_MERGE,
    TRN_TR_NORM_ROW,
};

typedef struct {
    unsigned long long t0, t1, t2; /* start, after the wait, end (ns) */
    unsigned kind, a, b;           /* kind; shape (N, K; heads, splits) */
    unsigned grid, block, sm;
} trn_trace_rec_t;

typedef struct {
    trn_trace_rec_t *rec;
    unsigned *n; /* records claimed (may pass cap: those are dropped) */
    unsigned cap;
} trn_trace_t;

#ifdef TRN_CUDA_TRACE

static __device__ trn_trace_t s_trace_dev; /* one per file of kernels */

__device__ __forceinline__ unsigned long long
trn_tr_now(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
    return t;
}

struct trn_tr_scope {
    unsigned long long t0, t1;
    unsigned kind, a, b;
    __device__ trn_tr_scope(unsigned k, unsigned a_, unsigned b_)
        : t0(trn_tr_now()), t1(0), kind(k), a(a_), b(b_)
    {
    }
    __device__ void waited(void)
    {
        t1 = trn_tr_now();
    }
    __device__ ~trn_tr_scope()
    {
        if (threadIdx.x != 0 || !s_trace_dev.rec)
            return;
        unsigned i = atomicAdd(s_trace_dev.n, 1u);
        if (i >= s_trace_dev.cap)
            return;
        unsigned sm;
        asm volatile("mov.u32 %0, %%smid;\n" : "=r"(sm));
        trn_trace_rec_t r;
        r.t0 = t0;
        r.t1 = t1 ? t1 : t0;
        r.t2 = trn_tr_now();
        r.kind = kind, r.a = a, r.b = b;
        r.grid = gridDim.x * gridDim.y * gridDim.z;
        r.block =
            blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
        r.sm = sm;
        s_trace_dev.rec[i] = r;
    }
};

/* The setter of this file's buffer pointer: trn_trace_attach_<name>. */
#define TRN_TRACE_TU(name)                                                     \
    extern "C" int trn_trace_attach_##name(const trn_trace_t *t)               \
    {                                                                          \
        return cudaMemcpyToSymbol(s_trace_dev, t, sizeof *t) == cudaSuccess    \
                   ? 0                                                         \
                   : -1;                                                       \
    }

#else

struct trn_tr_scope {
    __device__ trn_tr_scope(unsigned, unsigned, unsigned)
    {
    }
    __device__ void waited(void)
    {
    }
};

#define TRN_TRACE_TU(name)

#endif

#endif
