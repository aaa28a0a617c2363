/*
 * trn_cuda: the trainer's GPU kernels behind a plain C11 interface.
 *
 * Only the .cu files in services/trainer/cuda/ include CUDA headers; the
 * rest of the trainer sees opaque device pointers and these launchers. Every
 * launcher takes the stream it runs on (NULL: the default stream), checks its
 * arguments, launches, checks the launch and returns a lisa_rc_t.
 *
 * Conventions:
 *  - Tensors are row-major. A Linear weight is [out, in] as in PyTorch.
 *  - bf16 values travel as uint16_t (the upper half of an IEEE float32).
 *  - "fp32" buffers are float. The residual stream and every gradient that
 *    accumulates over micro-batches are fp32; matrix-product inputs are bf16.
 *  - Reductions (norms, softmax, log-sum-exp) accumulate in fp32.
 *  - Each kernel has a plain-C reference (services/trainer/cpu/) that the
 *    GPU tests compare against.
 */
#ifndef TRN_CUDA_H
#define TRN_CUDA_H

#include "lisa/lisa_rc.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t trn_bf16_t;
typedef struct trn_cuda_stream trn_cuda_stream_t; /* a cudaStream_t */
typedef struct trn_blas trn_blas_t; /* cuBLASLt handle + workspace */

/* --- device, memory, streams ------------------------------------------ */

/* Selects device `dev` for the calling thread; LISA_UNAVAILABLE if absent. */
lisa_rc_t trn_cuda_set_device(int dev);
/* Number of visible CUDA devices (0 when no driver). */
int trn_cuda_device_count(void);
/* Whether the switch in environment variable `name` is on: unset, or
 * anything but a value starting with 0 (not cached: callers read it
 * once). */
int trn_env_on(const char *name);
/* Compute capability (major) of the current device; 0 when unknown. */
int trn_cuda_cc_major(void);
/* Device memory of `bytes` (NULL on failure, logged). */
void *trn_cuda_malloc(size_t bytes);
/* Frees *p and sets it to NULL; safe on NULL. */
void trn_cuda_free(void *pp);
/* Host <-> device copies (synchronous). */
lisa_rc_t trn_cuda_upload(void *dst, const void *src, size_t bytes);
lisa_rc_t trn_cuda_download(void *dst, const void *src, size_t bytes);
/* Device-to-device copy of `bytes` on `s`. */
lisa_rc_t trn_cuda_copy(void *dst, const void *src, size_t bytes,
                        trn_cuda_stream_t *s);
/* Device-to-device copy of `height` rows of `width` bytes, rows `spitch`
 * bytes apart in src and `dpitch` in dst, on `s`. */
lisa_rc_t trn_cuda_copy2d(void *dst, size_t dpitch, const void *src,
                          size_t spitch, size_t width, size_t height,
                          trn_cuda_stream_t *s);
/* Sets `bytes` of device memory to byte value `v` on `s`. */
lisa_rc_t trn_cuda_memset(void *p, int v, size_t bytes, trn_cuda_stream_t *s);
/* Waits for all work on the device. */
lisa_rc_t trn_cuda_sync(void);
/* A stream of its own that still orders itself after work on the default
 * stream (and the default stream after it); NULL on failure (logged). */
trn_cuda_stream_t *trn_cuda_stream_new(void);
/* Destroys *s (after its work) and sets it to NULL; safe on NULL. */
void trn_cuda_stream_destroy(trn_cuda_stream_t **s);
/* Waits for the work queued on `s`. */
lisa_rc_t trn_cuda_stream_sync(trn_cuda_stream_t *s);
/* Device time by class, from CUDA events on one stream (the default
 * stream unless trn_cuda_timer_stream says otherwise): each
 * mark closes the interval since the previous mark (or the start) and
 * charges it to its class. At most `max_marks` marks between two reads;
 * later ones are counted as dropped. */
typedef struct trn_cuda_timer trn_cuda_timer_t;
/* NULL on failure (logged). */
trn_cuda_timer_t *trn_cuda_timer_new(int n_classes, int max_marks);
void trn_cuda_timer_destroy(trn_cuda_timer_t **t);
/* Records the start of a run of marks; with marks unread, the time since
 * the last of them is charged to no class. */
lisa_rc_t trn_cuda_timer_start(trn_cuda_timer_t *t);
/* Charges the time since the previous mark to class cls. */
lisa_rc_t trn_cuda_timer_mark(trn_cuda_timer_t *t, int cls);
/* The stream later starts and marks are recorded on (NULL: the default
 * stream). */
void trn_cuda_timer_stream(trn_cuda_timer_t *t, trn_cuda_stream_t *s);
/* Waits for the device, adds each class's milliseconds since the last
 * read to ms[0..n_classes-1] and forgets the marks; returns the marks
 * dropped since the last read. */
int trn_cuda_timer_read(trn_cuda_timer_t *t, double *ms);
/* A timeline of the decode kernels, block by block (a build with the
 * LISA_CUDA_TRACE option; otherwise both return LISA_UNAVAILABLE): start
 * keeps the records of the kernels run from now on, at most `cap`; dump
 * waits for the device, writes them to f as CSV (kind, shape, grid,
 * block, multiprocessor, global timer at start, after the wait for the
 * kernel before, at the end) and stops recording. */
lisa_rc_t trn_cuda_trace_start(unsigned cap);
lisa_rc_t trn_cuda_trace_dump(FILE *f);
/* Page-locked host memory of `bytes` (NULL on failure, logged), so copies
 * from and to it can be queued on a stream; free with trn_cuda_host_free. */
void *trn_cuda_host_alloc(size_t bytes);
/* Frees *p (from trn_cuda_host_alloc) and sets it to NULL; safe on NULL. */
void trn_cuda_host_free(void *pp);
/* Host <-> device copies queued on `s` (host side page-locked for the copy
 * to overlap; the host buffer must stay untouched until `s` has run it). */
lisa_rc_t trn_cuda_upload_async(void *dst, const void *src, size_t bytes,
                                trn_cuda_stream_t *s);
lisa_rc_t trn_cuda_download_async(void *dst, const void *src, size_t bytes,
                                  trn_cuda_stream_t *s);

/* --- CUDA graphs: a recorded sequence of launches replayed as one ------ */

typedef struct trn_cuda_graph trn_cuda_graph_t;
/* Starts recording the launches this thread queues on `s` (not the default
 * stream) instead of running them. */
lisa_rc_t trn_cuda_capture_begin(trn_cuda_stream_t *s);
/* Ends the recording on `s`; when `ok` (every launch of the recording
 * succeeded), makes it a replayable graph in *out, else discards it.
 * Always leaves `s` out of capture mode. */
lisa_rc_t trn_cuda_capture_end(trn_cuda_stream_t *s, int ok,
                               trn_cuda_graph_t **out);
/* Queues one replay of `gr` on `s`. */
lisa_rc_t trn_cuda_graph_launch(trn_cuda_graph_t *gr, trn_cuda_stream_t *s);
/* Frees *gr and sets it to NULL; safe on NULL. */
void trn_cuda_graph_destroy(trn_cuda_graph_t **gr);
/* Free and total bytes of the current device. */
lisa_rc_t trn_cuda_mem_info(size_t *free_b, size_t *total_b);
/* Host-side bf16 conversions are trn_f32_to_bf16 / trn_bf16_to_f32
 * (trn_safetensors.h). */

/* --- matrix products (cuBLASLt, bf16 inputs, fp32 accumulation) -------- */

/* A cuBLASLt handle with a workspace; NULL on failure. */
trn_blas_t *trn_blas_new(void);
void trn_blas_destroy(trn_blas_t **self);

/* y[T,N] (= or +=, per `accumulate`) x[T,K] @ w[N,K]^T.
 * y is fp32 when y_f32 is non-NULL, else bf16 into y_bf16. */
lisa_rc_t trn_linear_fwd(trn_blas_t *b, float *y_f32, trn_bf16_t *y_bf16,
                         const trn_bf16_t *x, const trn_bf16_t *w, int T, int K,
                         int N, int accumulate, trn_cuda_stream_t *s);
/* a[T,I] (bf16) = silu(x w_gate^T) * (x w_up^T) for w = [2I, K] (gate
 * rows, then up rows), in one kernel, with the bits trn_linear_fwd into
 * bf16 followed by trn_k_swiglu_fwd give; for the few tokens
 * trn_linear_glu_fits accepts (a decode step of one sequence). */
int trn_linear_glu_fits(int T, int K, int I);
lisa_rc_t trn_linear_fwd_glu(trn_blas_t *b, trn_bf16_t *a, const trn_bf16_t *x,
                             const trn_bf16_t *w, int T, int K, int I,
                             trn_cuda_stream_t *s);
/* The weights the product after the next one through b will read (a
 * decode step's chain): the next forward product of 2 to 8 tokens (the
 * skinny kernel) has each block, once its own weights are in, ask for its
 * share of up to LISA_CUDA_L2PF MiB of them (default S_L2PF_MIB in
 * trn_cuda_blas.cu; 0: off) to be brought into L2, so that memory is kept
 * busy through the kernel's last blocks and the next kernel's first. A
 * hint for one product (any product through b takes it); NULL clears it. */
void trn_linear_next(trn_blas_t *b, const void *w, size_t bytes);

/* Packed weights for the few-token products (decode steps): w[N,K] laid
 * out stage by stage (TRN_LINEAR_PACK_CS values of every row, then the
 * next TRN_LINEAR_PACK_CS, the last stage the rest), so that the rows of a
 * tile's stage are one contiguous run and reach shared memory in one bulk
 * copy; within a stage, odd rows have their 64-byte chunks swapped in
 * pairs (no two rows of a quarter-warp's reads share a bank). The same
 * element count as w. trn_linear_pack writes it (K a multiple of 64);
 * trn_linear_set_packed tells b that the products through it reading
 * weights in [from, from + bytes) find them packed at the same offsets
 * from `to` (NULL: none). Only the bulk kernel reads the packed copy;
 * every other path reads `from`. */
#define TRN_LINEAR_PACK_CS 1024
lisa_rc_t trn_linear_pack(trn_bf16_t *dst, const trn_bf16_t *w, int N, int K,
                          trn_cuda_stream_t *s);
void trn_linear_set_packed(trn_blas_t *b, const void *from, const void *to,
                           size_t bytes);
/* Whether the products read a packed copy here (the bulk kernel runs:
 * compute capability 9.x, LISA_CUDA_SKINNY_BULK not 0). */
int trn_linear_pack_used(void);

/* RMSNorm folded into the products around it (decode steps of a few
 * tokens). A product that adds into the fp32 residual y (the "norm out"
 * side) also writes, from each new value v of y, xg = bf16(v * w) for the
 * next norm's weight w, and the sum of v^2 over each 16-output tile of
 * each token: ss[t * N/16 + tile], summed in a fixed order (the same bits
 * run to run). The product after it (the "norm in" side) takes xg as its
 * x and multiplies token t's sums by rsqrt(sum of its nss partials / dim
 * + eps) before anything is rounded. That is rstd * (W bf16(v * w))
 * where the separate norm gives W bf16(w * bf16(v * rstd)): equal to
 * bf16 rounding, not the same bits; y itself is unchanged. */
#define TRN_LINEAR_NORM_TMAX 16 /* most tokens a folded product takes */

typedef struct {
    const float *ss; /* [T, nss] partial sums of squares */
    int nss;         /* partials a token */
    int dim;         /* the norm's width (x's K) */
    float eps;
} trn_norm_in_t;

typedef struct {
    trn_bf16_t *xg;      /* [T, N] bf16(y * w) */
    const trn_bf16_t *w; /* [N] the next norm's weight */
    float *ss;           /* [T, N / 16] */
} trn_norm_out_t;

/* Whether a forward product of T tokens, K in and N out may take a norm
 * in (out 0) or give a norm out (out 1): the bulk-copy skinny kernel's
 * shapes (Hopper, LISA_CUDA_SKINNY_BULK not 0, T in the skinny range up
 * to TRN_LINEAR_NORM_TMAX), and for a norm out a grid of a block per
 * 16-output tile in one round (N % 16 == 0; LISA_CUDA_SKINNY_SPREAD not
 * spreading the plain products). For gate|up with SwiGLU, N is 2I. */
int trn_linear_norm_fits(int T, int K, int N, int out);
/* trn_linear_fwd with a norm in (nin, else NULL) or a norm out (nout,
 * else NULL; y_f32 then required), at most one of them, for shapes
 * trn_linear_norm_fits accepts; with neither, trn_linear_fwd. */
lisa_rc_t trn_linear_fwd_norm(trn_blas_t *b, float *y_f32, trn_bf16_t *y_bf16,
                              const trn_bf16_t *x, const trn_bf16_t *w, int T,
                              int K, int N, int accumulate,
                              const trn_norm_in_t *nin,
                              const trn_norm_out_t *nout, trn_cuda_stream_t *s);
/* trn_linear_fwd_glu with a norm in (trn_linear_norm_fits(T, K, 2I, 0)):
 * the gate and up sums both scaled, then rounded as without it. */
lisa_rc_t trn_linear_fwd_glu_norm(trn_blas_t *b, trn_bf16_t *a,
                                  const trn_bf16_t *x, const trn_bf16_t *w,
                                  int T, int K, int I, const trn_norm_in_t *nin,
                                  trn_cuda_stream_t *s);
/* y[T,N] = res[T,N] + x[T,K] @ w[N,K]^T, all fp32 but x and w (res may
 * be y: then as trn_linear_fwd accumulating). A residual connection in one
 * pass, without copying res first. */
lisa_rc_t trn_linear_fwd_res(trn_blas_t *b, float *y, const float *res,
                             const trn_bf16_t *x, const trn_bf16_t *w, int T,
                             int K, int N, trn_cuda_stream_t *s);
/* dx[T,K] (bf16, overwritten) = dy[T,N] @ w[N,K]. */
lisa_rc_t trn_linear_bwd_data(trn_blas_t *b, trn_bf16_t *dx,
                              const trn_bf16_t *dy, const trn_bf16_t *w, int T,
                              int K, int N, trn_cuda_stream_t *s);
/* dw[N,K] (fp32) += dy[T,N]^T @ x[T,K] (= when !accumulate: dw is not
 * read). */
lisa_rc_t trn_linear_bwd_weight(trn_blas_t *b, float *dw, const trn_bf16_t *dy,
                                const trn_bf16_t *x, int T, int K, int N,
                                int accumulate, trn_cuda_stream_t *s);

/* --- element-wise and row kernels -------------------------------------- */

/* out[i] = bf16(in[i]) for n values. */
lisa_rc_t trn_k_f32_to_bf16(trn_bf16_t *out, const float *in, size_t n,
                            trn_cuda_stream_t *s);
/* out[i] = float(in[i]) for n values. */
lisa_rc_t trn_k_bf16_to_f32(float *out, const trn_bf16_t *in, size_t n,
                            trn_cuda_stream_t *s);

/* Embedding: x[t,:] = float(table[ids[t],:]) for t < T. Ids >= vocab are an
 * error reported through *bad (device int, may be NULL) and give zeros. */
lisa_rc_t trn_k_embed_fwd(float *x, const trn_bf16_t *table, const int32_t *ids,
                          int T, int C, int vocab, trn_cuda_stream_t *s);
/* dtable[ids[t],:] += dx[t,:] (fp32 atomics). */
lisa_rc_t trn_k_embed_bwd(float *dtable, const float *dx, const int32_t *ids,
                          int T, int C, int vocab, trn_cuda_stream_t *s);

/* RMSNorm as Qwen3RMSNorm: out = w * bf16(x * rsqrt(mean(x^2) + eps)).
 * Rows are `rows` vectors of `dim` values, `group` of them side by side in
 * each line of a buffer: row r starts at (r/group)*stride + (r%group)*dim
 * (group 1: row r at r*stride; group = heads: Qwen3's per-head q/k norms
 * inside a fused q|k|v row). Input is fp32 (in_f32) or bf16 (in_bf16).
 * rstd[r] is saved for the backward pass. */
lisa_rc_t trn_k_rmsnorm_fwd(trn_bf16_t *out, int out_stride, float *rstd,
                            const float *in_f32, const trn_bf16_t *in_bf16,
                            int in_stride, const trn_bf16_t *w, int rows,
                            int dim, int group, float eps,
                            trn_cuda_stream_t *s);
/* The norm-in side of an RMSNorm folded into the next product (see
 * trn_linear_norm_fits) where no product gives it: for `rows` fp32 rows of
 * `dim` values (contiguous), xg = bf16(x * w) and ss[r] = the row's sum of
 * squares (one partial a row: nss 1). */
lisa_rc_t trn_k_rmsnorm_fold(trn_bf16_t *xg, float *ss, const float *x,
                             const trn_bf16_t *w, int rows, int dim,
                             trn_cuda_stream_t *s);
/* Backward of trn_k_rmsnorm_fwd. dout is bf16 rows (stride dout_stride).
 * dx is written (fp32 when dx_f32, accumulating if accumulate; else bf16 at
 * dx_bf16, overwritten, stride dx_stride); dw (fp32, [dim]) accumulates. */
lisa_rc_t trn_k_rmsnorm_bwd(float *dx_f32, trn_bf16_t *dx_bf16, int dx_stride,
                            int accumulate, float *dw, const trn_bf16_t *dout,
                            int dout_stride, const float *in_f32,
                            const trn_bf16_t *in_bf16, int in_stride,
                            const trn_bf16_t *w, const float *rstd, int rows,
                            int dim, int group, trn_cuda_stream_t *s);
/* The backward of a hidden-size norm (group 1, fp32 input `in`) into the
 * residual stream's gradient: dx (fp32, stride dx_stride) accumulates as
 * trn_k_rmsnorm_bwd with accumulate 1 does, and when dx_copy is not NULL
 * the updated dx rounded to bf16 is also written there (same stride), as
 * trn_k_f32_to_bf16 would convert it afterwards; dw accumulates. */
lisa_rc_t trn_k_rmsnorm_bwd_resid(float *dx, trn_bf16_t *dx_copy, int dx_stride,
                                  float *dw, const trn_bf16_t *dout,
                                  int dout_stride, const float *in,
                                  int in_stride, const trn_bf16_t *w,
                                  const float *rstd, int rows, int dim,
                                  trn_cuda_stream_t *s);

/* Half-split RoPE, in place, on `heads` heads of width D for each token t
 * at x + t*stride + h*D, with positions pos[t], as transformers computes it
 * (inv_freq in fp32, cos/sin rounded to bf16). inverse=1 applies the
 * transpose (the backward pass). */
lisa_rc_t trn_k_rope(trn_bf16_t *x, int stride, const int32_t *pos, int T,
                     int heads, int D, float theta, int inverse,
                     trn_cuda_stream_t *s);

/* Qwen3's per-head q/k norm and RoPE in one pass (the training path): for
 * each token t, qkv and qkvn are lines of `stride` values holding H query,
 * Hk key and Hk value heads of width D (D in {16, 32, 64, 128}, H % Hk ==
 * 0). Query and key heads are RMS-normed (weights q_norm / k_norm) and
 * rotated at pos[t] into qkvn, value heads copied (qkvn may be qkv: then in
 * place); rstdq[t*H + h] and rstdk[t*Hk + h] are saved. Bit for bit the
 * values of trn_k_rmsnorm_fwd then trn_k_rope on the same rows. With
 * q_norm and k_norm NULL (Llama, Qwen2: no q/k norms) the heads are
 * rotated unnormed. */
lisa_rc_t trn_k_qk_fwd(trn_bf16_t *qkvn, const trn_bf16_t *qkv, int stride,
                       float *rstdq, float *rstdk, const trn_bf16_t *q_norm,
                       const trn_bf16_t *k_norm, const int32_t *pos, int T,
                       int H, int Hk, int D, float eps, float theta,
                       trn_cuda_stream_t *s);
/* Backward of trn_k_qk_fwd, in place on the query and key heads of dqkv
 * (lines of `stride` like qkv, the pre-norm rows; value heads untouched):
 * inverse RoPE then the norm's backward; dq_norm and dk_norm (fp32 [D])
 * accumulate the weights' gradients. The values of trn_k_rope(inverse)
 * then trn_k_rmsnorm_bwd, up to the order of the weight-gradient sums.
 * With q_norm, k_norm, dq_norm and dk_norm NULL: the inverse RoPE alone. */
lisa_rc_t trn_k_qk_bwd(trn_bf16_t *dqkv, int stride, float *dq_norm,
                       float *dk_norm, const trn_bf16_t *qkv,
                       const trn_bf16_t *q_norm, const trn_bf16_t *k_norm,
                       const float *rstdq, const float *rstdk,
                       const int32_t *pos, int T, int H, int Hk, int D,
                       float theta, trn_cuda_stream_t *s);

/* SwiGLU: a[t,i] = silu(gu[t,i]) * gu[t,I+i] with gu = [gate | up]. */
lisa_rc_t trn_k_swiglu_fwd(trn_bf16_t *a, const trn_bf16_t *gu, int T, int I,
                           trn_cuda_stream_t *s);
/* dgu from da and gu (both halves). */
lisa_rc_t trn_k_swiglu_bwd(trn_bf16_t *dgu, const trn_bf16_t *da,
                           const trn_bf16_t *gu, int T, int I,
                           trn_cuda_stream_t *s);

/* --- attention ---------------------------------------------------------- */

/* Causal grouped-query attention over packed sequences, without a T x T
 * matrix in memory. q/k/v rows are at base + t*stride + head*D (q has H
 * heads, k and v have Hk; query head h uses kv head h / (H/Hk)). seg[t] is
 * the sequence index of token t (tokens of one sequence are contiguous);
 * tokens attend only within their sequence. o is [T, H*D]; lse[h*T + t]
 * keeps the log-sum-exp for the backward pass. q, k and v are 16-byte
 * aligned. */
lisa_rc_t trn_k_attn_fwd(trn_bf16_t *o, float *lse, const trn_bf16_t *q,
                         const trn_bf16_t *k, const trn_bf16_t *v, int stride,
                         const int32_t *seg, int T, int H, int Hk, int D,
                         trn_cuda_stream_t *s);
/* Backward: dq/dk/dv written at the same layout as q/k/v (stride dstride),
 * overwritten. `scratch` holds T*H*(D+1) floats; scratch, dq, dout and o
 * are 16-byte aligned as q, k and v are. */
lisa_rc_t trn_k_attn_bwd(trn_bf16_t *dq, trn_bf16_t *dk, trn_bf16_t *dv,
                         int dstride, float *scratch, const trn_bf16_t *dout,
                         const trn_bf16_t *o, const float *lse,
                         const trn_bf16_t *q, const trn_bf16_t *k,
                         const trn_bf16_t *v, int stride, const int32_t *seg,
                         int T, int H, int Hk, int D, trn_cuda_stream_t *s);

/* --- log-probs of chosen tokens ---------------------------------------- */

/* For `rows` rows of fp32 logits [rows, V] (scaled by inv_temp):
 * logprob[r] = log softmax(logits[r])[target[r]], entropy[r] and the
 * log-sum-exp lse[r] (each may be NULL). Targets < 0 mark rows to skip
 * (logprob 0). One read of the logits. */
lisa_rc_t trn_k_logprob(float *logprob, float *entropy, float *lse,
                        const float *logits, const int32_t *target, int rows,
                        int V, float inv_temp, trn_cuda_stream_t *s);
/* The backward of trn_k_logprob from the lse (and, with ge, the entropy)
 * it wrote for the same logits: dlogits[r,j] (bf16) = inv_temp * (g[r] *
 * (1{j=target} - p_j) + ge[r] * dH/dz_j), where g and ge (may be NULL) are
 * the gradients of the loss w.r.t. logprob and entropy; zeros on skipped
 * rows. One read of the logits. */
lisa_rc_t trn_k_logprob_bwd(trn_bf16_t *dlogits, const float *logits,
                            const int32_t *target, const float *lse,
                            const float *entropy, const float *g,
                            const float *ge, int rows, int V, float inv_temp,
                            trn_cuda_stream_t *s);

/* --- initialisation ---------------------------------------------------- */

/* x[i] = std * N(0,1), from a counter-based generator keyed by seed. */
lisa_rc_t trn_k_fill_normal(float *x, size_t n, uint64_t seed, float std,
                            trn_cuda_stream_t *s);
/* x[i] = v. */
lisa_rc_t trn_k_fill_const(float *x, size_t n, float v, trn_cuda_stream_t *s);

/* A projection's bias (Qwen2's q/k/v): x[t*stride + j] += b[j] for t < T,
 * j < n (bf16 in place). */
lisa_rc_t trn_k_bias_add(trn_bf16_t *x, int stride, const trn_bf16_t *b, int T,
                         int n, trn_cuda_stream_t *s);
/* Its gradient: db[j] += sum over t < T of dx[t*stride + j] (fp32). */
lisa_rc_t trn_k_bias_grad(float *db, const trn_bf16_t *dx, int stride, int T,
                          int n, trn_cuda_stream_t *s);

/* --- generation ----------------------------------------------------------- */

/* Where a paged KV cache keeps a sequence's positions: the cache (per
 * layer, keys and values each) is n_blocks * block_size rows of Hk*D bf16
 * values; position p of the sequence in table row `slot` is cache row
 * table[slot * max_blocks + (p >> bshift)] * block_size + (p & (block_size
 * - 1)), block_size = 1 << bshift. `table` is on the device; a kernel reads
 * only the entries of positions it touches. */
typedef struct {
    const int32_t *table; /* [rows, max_blocks] block ids */
    int max_blocks;       /* entries a row */
    int bshift;           /* log2 of the block size */
} trn_kv_pages_t;

/* The new tokens' side of a decode layer in one pass over the fused q|k|v
 * rows (row t at qkv + t*stride: H query heads, then Hk key heads, then Hk
 * value heads, D values each): Qwen3's per-head RMSNorm (weights q_norm,
 * k_norm) and RoPE at pos[t] on the queries and the keys (both in place),
 * then keys and values written into the caches at position pos[t] of the
 * sequence in table row slot[t] (see trn_kv_pages_t). Same values as
 * trn_k_rmsnorm_fwd then trn_k_rope, then the copy. Rows
 * with slot[t] < 0 are padding: queries only, no cache write. q_norm and
 * k_norm NULL: no norm (Llama, Qwen2), RoPE alone. */
lisa_rc_t trn_k_qk_prep(trn_bf16_t *qkv, int stride, const trn_bf16_t *q_norm,
                        const trn_bf16_t *k_norm, trn_bf16_t *cache_k,
                        trn_bf16_t *cache_v, const int32_t *slot,
                        const int32_t *pos, int T, int H, int Hk, int D,
                        trn_kv_pages_t pg, float eps, float theta,
                        trn_cuda_stream_t *s);
/* Attention of T new tokens (q rows at q + t*stride) over positions
 * 0..pos[t] of their sequence (table row slot[t]); o is [T, H*D]; rows
 * with slot[t] < 0 give zeros. `scratch` (scratch_floats floats, may be
 * NULL) lets few tokens split their positions over several blocks; the
 * split count depends only on T, the shape, max_blocks << bshift and the
 * scratch size, so a recorded launch stays valid as sequences grow and
 * their tables change (the table's address must stay). */
lisa_rc_t trn_k_attn_decode(trn_bf16_t *o, const trn_bf16_t *q, int stride,
                            const trn_bf16_t *cache_k,
                            const trn_bf16_t *cache_v, const int32_t *slot,
                            const int32_t *pos, int T, int H, int Hk, int D,
                            trn_kv_pages_t pg, float *scratch,
                            size_t scratch_floats, trn_cuda_stream_t *s);
/* trn_k_qk_prep and trn_k_attn_decode in one kernel, for a step in which
 * every sequence (slot) has exactly one new token: the same results, the
 * new keys and values in the cache, but q|k|v is only read (its queries
 * and keys are not written back). Shapes the grouped kernel does not serve,
 * and steps with enough tokens to fill the device without splitting (where
 * the preparation would sit on every block's path: measured slower on an
 * H200), run the two kernels. */
lisa_rc_t trn_k_attn_decode_prep(trn_bf16_t *o, const trn_bf16_t *qkv,
                                 int stride, const trn_bf16_t *q_norm,
                                 const trn_bf16_t *k_norm, trn_bf16_t *cache_k,
                                 trn_bf16_t *cache_v, const int32_t *slot,
                                 const int32_t *pos, int T, int H, int Hk,
                                 int D, trn_kv_pages_t pg, float eps,
                                 float theta, float *scratch,
                                 size_t scratch_floats, trn_cuda_stream_t *s);
/* A query tile of the paged prefill: `rows` (1..128) packed rows from
 * row0, consecutive new tokens of the sequence in table row `slot`, the
 * first at position p0 (0 for a fresh prompt, the cached prefix's length
 * for the first tile of a chunk after it). */
typedef struct {
    int32_t row0, rows, slot, p0;
} trn_prefill_tile_t;
#define TRN_PREFILL_TILE_ROWS 128
/* Causal attention of prompt tokens over their sequences' caches (the new
 * tokens' keys and values already written by trn_k_qk_prep): for each of
 * the ntiles tiles (device array), the queries of its rows (q + row *
 * stride + h*D) attend to positions 0..p0+r of its sequence, read through
 * the table. o is [rows, H*D] at the same packed rows. Tiles run in the
 * order given (put the longest first). head_dim 64 or 128 (and 16, 32),
 * H % Hk == 0, stride % 8 == 0, q 16-byte aligned. */
lisa_rc_t trn_k_attn_prefill(trn_bf16_t *o, const trn_bf16_t *q, int stride,
                             const trn_bf16_t *cache_k,
                             const trn_bf16_t *cache_v, trn_kv_pages_t pg,
                             const trn_prefill_tile_t *tiles, int ntiles, int H,
                             int Hk, int D, trn_cuda_stream_t *s);
/* Floats of scratch that let trn_k_attn_decode split as far as it would. */
size_t trn_k_attn_decode_scratch(int H, int Hk, int D);
/* out[i,:] = in[idx[i],:] for n rows of C bf16 values. */
lisa_rc_t trn_k_gather_rows(trn_bf16_t *out, const trn_bf16_t *in,
                            const int32_t *idx, int n, int C,
                            trn_cuda_stream_t *s);
/* Samples one token per row of fp32 logits [n, V] with per-row
 * temperature, top_p, top_k and seed; writes the token and its logprob
 * (see trn_sample_t in trn_gpu_model.h). */
lisa_rc_t trn_k_sample(int32_t *tok, float *lp, const float *logits,
                       const float *temperature, const float *top_p,
                       const int32_t *top_k, const uint64_t *seed, int n, int V,
                       float *scratch, size_t scratch_floats,
                       trn_cuda_stream_t *s);
/* Floats of scratch with which trn_k_sample spreads greedy and
 * temperature-only rows over many blocks (without: one block per row). */
size_t trn_k_sample_scratch(int n, int V);

/* --- optimizer ----------------------------------------------------------- */

/* out[0] += sum(x[i]^2) (fp32, device scalar) over n values. */
lisa_rc_t trn_k_sumsq(float *out, const float *x, size_t n,
                      trn_cuda_stream_t *s);
/* AdamW on fp32 master weights with decoupled weight decay; the gradient is
 * multiplied by min(1, clip / sqrt(*sumsq)) when clip > 0 (sumsq on device).
 * Writes the bf16 copy of the weights when wbf16 is non-NULL. */
lisa_rc_t trn_k_adamw(float *w, trn_bf16_t *wbf16, float *m, float *v,
                      const float *grad, size_t n, float lr, float beta1,
                      float beta2, float eps, float weight_decay, int step,
                      float clip, const float *sumsq, trn_cuda_stream_t *s);

#ifdef __cplusplus
}
#endif

#endif
