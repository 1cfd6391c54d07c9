/* ssdgen public C API.
 *
 * Every struct passed across this API starts with `struct_size`: set it to sizeof(the struct) as
 * your header declares it. The library reads only the fields that size covers, so a caller built
 * against an older header keeps working when fields are appended.
 *
 * Errors are values: every call returns an ssd_status; ssd_last_error_detail() returns a message
 * for the last failing call on the calling thread (it names the offending field where there is one).
 */
#ifndef SSD_SSD_H
#define SSD_SSD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define SSD_API
#else
#define SSD_API __attribute__((visibility("default")))
#endif

#define SSD_API_VERSION 1

/* Compatible with CUstream / CUcontext / CUfunction from cuda.h, without requiring it. */
typedef struct CUstream_st* ssd_cuda_stream;
typedef struct CUfunc_st* ssd_cuda_function;

typedef enum ssd_status {
  SSD_OK = 0,
  SSD_ERROR_INVALID_ARGUMENT = 1,   /* null handle, bad struct_size, bad enum value */
  SSD_ERROR_INVALID_CONFIG = 2,     /* a kernel specialization field is out of range */
  SSD_ERROR_INVALID_SHAPE = 3,      /* tensor shape does not match the others */
  SSD_ERROR_INVALID_STRIDE = 4,     /* tensor stride layout not supported */
  SSD_ERROR_INVALID_DTYPE = 5,      /* tensor dtype not allowed for that argument */
  SSD_ERROR_INVALID_ALIGNMENT = 6,  /* tensor pointer not aligned to its element size */
  SSD_ERROR_NULL_POINTER = 7,       /* a required tensor pointer is NULL */
  SSD_ERROR_UNSUPPORTED = 8,        /* valid request this build/target cannot serve */
  SSD_ERROR_NO_DRIVER = 9,          /* libcuda could not be loaded (no NVIDIA driver) */
  SSD_ERROR_NO_DEVICE = 10,         /* driver present but no usable device / context */
  SSD_ERROR_CUDA = 11,              /* a CUDA driver call failed (detail has the CUresult) */
  SSD_ERROR_COMPILE = 12,           /* NVRTC failed (detail has the compile log) */
  SSD_ERROR_CACHE_MISS = 13,        /* SSD_CACHE_MODE=require-cached and the kernel is not cached */
  SSD_ERROR_CACHE = 14,             /* cache maintenance failed (never returned on the kernel path) */
  SSD_ERROR_OUT_OF_MEMORY = 15,
  SSD_ERROR_WORKSPACE_TOO_SMALL = 16,
  SSD_ERROR_INTERNAL = 17
} ssd_status;

typedef enum ssd_kernel_id {
  SSD_KERNEL_CHUNK_CUMSUM_FWD = 1,  /* dt -> dt_out, dA_cumsum (math F1) */
  SSD_KERNEL_CHUNK_CUMSUM_BWD = 2,  /* ddA_cumsum, ddt_out -> ddt, per-chunk dA/ddt_bias partials (B12) */
  SSD_KERNEL_REDUCE_HEAD_PARTIALS = 3, /* (b, nchunks, h, k) fp64 partials -> (h, k) fp32, canonical order */
  SSD_KERNEL_BMM_CHUNK_FWD = 4,        /* CB = C B^T per (batch, chunk, group), lower triangle (F4) */
  SSD_KERNEL_CHUNK_STATE_FWD = 5,      /* per-chunk states s (F2), tensor cores */
  SSD_KERNEL_STATE_PASSING_FWD = 6,    /* entering states P and final states (F3) */
  SSD_KERNEL_CHUNK_SCAN_FWD = 7,       /* out = (intra-chunk + from-state) y, D, z gating (F5) */
  SSD_KERNEL_GATE_BWD = 8,             /* dy, dz and dD partials from dout (backward B-a) */
  SSD_KERNEL_CHUNK_SCAN_BWD_DSTATES = 9,  /* dP_c = sum_l eta exp(A_l) dy_l C_l^T (B-b), tensor cores */
  SSD_KERNEL_STATE_PASSING_BWD = 10,      /* ds, dinitial_states, rho partials (B-c) */
  SSD_KERNEL_CHUNK_SCAN_BWD_DX = 11,      /* dx, ddt_x, ddA next/prev terms (B-d, B-g), tensor cores */
  SSD_KERNEL_CHUNK_SCAN_BWD_DCB = 12,     /* dCB per group, heads summed in order (B-e), tensor cores */
  SSD_KERNEL_CHUNK_SCAN_BWD_DDA_INTRA = 13, /* ddA intra-chunk term per 64-row group (B-g), tensor cores */
  SSD_KERNEL_CHUNK_STATE_BWD_DB = 14,     /* dB (B-f), tensor cores */
  SSD_KERNEL_CHUNK_SCAN_BWD_DC = 15,      /* dC (B-f), tensor cores */
  SSD_KERNEL_CHUNK_SCAN_BWD_DDA = 16,     /* ddA = intra + next + prev + rho per position (B-g) */
  SSD_KERNEL_CHUNK_STATE_PASSING_FWD = 17, /* chunk states and the pass over chunks fused (F2 + F3):
                                             P and final states, bitwise those of kernels 5 then 6 */
  SSD_KERNEL_CHUNK_STATE_PASSING_BWD = 18, /* dP and the reverse pass over chunks fused (B-b + B-c):
                                             ds, dinitial_states, rho partials, bitwise those of 9 then 10 */
  SSD_KERNEL_CHUNK_SCAN_BWD_DCB_DDA_INTRA = 19 /* dCB and the ddA intra term from one dy x^T per head
                                                  (B-e + B-g): bitwise the outputs of 12 and 13 */
} ssd_kernel_id;

typedef enum ssd_dtype {
  SSD_DTYPE_BF16 = 1,
  SSD_DTYPE_FP16 = 2,
  SSD_DTYPE_FP32 = 3,
  SSD_DTYPE_INT32 = 4
} ssd_dtype;

typedef enum ssd_mode {
  SSD_MODE_DETERMINISTIC = 0, /* canonical reduction order, no atomics (docs/determinism.md) */
  SSD_MODE_FAST = 1           /* atomics allowed; results within tolerance, bits may vary */
} ssd_mode;

typedef enum ssd_arch {
  SSD_ARCH_SM80 = 80,
  SSD_ARCH_SM90 = 90,
  SSD_ARCH_SM90A = 901 /* sm_90a: Hopper with wgmma / setmaxnreg */
} ssd_arch;

/* Feature flags of a specialization (ssd_kernel_config.flags). */
enum {
  SSD_FLAG_DT_BIAS = 1u << 0,     /* dt_bias is added before softplus / clamp */
  SSD_FLAG_DT_SOFTPLUS = 1u << 1, /* softplus(dt + dt_bias) */
  SSD_FLAG_SEQ_IDX = 1u << 2,     /* packed sequences: state resets where seq_idx changes */
  SSD_FLAG_D = 1u << 3,           /* y += D * x */
  SSD_FLAG_D_PER_HEADDIM = 1u << 4, /* D has shape (h, p) instead of (h) (needs SSD_FLAG_D) */
  SSD_FLAG_Z = 1u << 5,           /* out = y * silu(z); in gate_bwd, chunk_scan_bwd_dstates, _dx and
                                     _ddA_intra also: dy is the gated dy, as two terms in x's dtype
                                     (dy and its rounding residual dy_lo) */
  SSD_FLAG_INITIAL_STATES = 1u << 6, /* initial_states given */
  SSD_FLAG_DDA_INCREMENTS = 1u << 7, /* chunk_cumsum_bwd: ddA is the gradient w.r.t. the increments
                                        a_l = dt_l A (the SSD backward's), not w.r.t. dA_cumsum */
  SSD_FLAG_STATES_IN_DTYPE = 1u << 8, /* chunk_state_passing_fwd writes and chunk_scan_fwd reads the
                                        entering states P in x's dtype instead of fp32 (ssd_forward's
                                        choice: chunk_scan_fwd rounds P to that dtype anyway) */
  SSD_FLAG_TWO_TERM_STATES = 1u << 9, /* chunk_state_fwd, chunk_state_passing_fwd,
                                        chunk_scan_bwd_dstates: the weighted operand of the state
                                        product enters the tensor cores as hi + lo in x's dtype (two
                                        mma per step; ssd_backward's choice, for dA's accuracy) */
  SSD_FLAG_TMA = 1u << 10 /* chunk_state_passing_fwd and chunk_scan_fwd on sm_90a (wgmma paths;
                             chunk_scan_fwd with SSD_FLAG_STATES_IN_DTYPE): their operand tiles come
                             by the tensor copy engine; the parameter blocks are the ones that end
                             with the tensor maps (ChunkStatePassingFwdTmaParams,
                             ChunkScanFwdTmaParams). ssd_forward's choice when x, B and C fit the
                             maps; the same bits as without */
};

/* Tile shape. Zero fields mean "the default for (arch, specialization)". Per kernel:
 *   chunk_cumsum_fwd/bwd: m = heads per thread block (32, 64, 128), n = positions staged through
 *                         shared memory per step (8, 16, 32, 64; <= chunk_size).
 *   reduce_head_partials:  m = heads per thread block (32, 64, 128, 256); n unused (0).
 *   bmm_chunk_fwd:         m x n = (l x s) output tile, each 16..128 dividing chunk_size.
 *   chunk_state_fwd:       m = headdim tile, n = dstate tile, k = positions per K step.
 *   state_passing_fwd:     m = state elements per block (64, 128, 256, 512).
 *   chunk_scan_fwd:        m = positions tile (64, 128), n = headdim tile, k = K step (16, 32, 64);
 *                          on sm_90a with chunk_size, headdim, dstate multiples of 64 (the wgmma
 *                          kernel): m 64 or 128, n 64 or 128 (m * n <= 8192), k = 64.
 *   gate_bwd:              no tile (one thread per headdim element of one head): all zeros.
 *   chunk_scan_bwd_dstates: as chunk_state_fwd (m = headdim, n = dstate, k = positions per step).
 *   state_passing_bwd:     m = state elements per block (64, 128, 256, 512).
 *   chunk_scan_bwd_dx:     m = positions tile (64, 128; m * headdim <= 8192), n = 0, k = K step.
 *   chunk_scan_bwd_dcb:    m x n = (l x s) tile of the lower triangle (16..128), k = headdim step.
 *   chunk_scan_bwd_ddA_intra: m = rows (64, 128), n = column tile (16, 32, 64), k = headdim step.
 *   chunk_state_bwd_db, chunk_scan_bwd_dc: m = positions, n = dstate tile, k = K step.
 *   chunk_scan_bwd_ddA:    m = threads per block (64, 128, 256).
 * warps and stages are derived from the tile and must be 0; k is 0 where unused. */
typedef struct ssd_tile {
  int32_t m;
  int32_t n;
  int32_t k;
  int32_t warps;
  int32_t stages;
} ssd_tile;

/* A kernel specialization: everything that changes the generated code. batch, seqlen, nheads,
 * pointers and strides are run-time arguments and never part of it. */
typedef struct ssd_kernel_config {
  size_t struct_size;
  ssd_kernel_id kernel;
  int32_t headdim;          /* p; 0 where the kernel does not use it (cumsum, reduce) */
  int32_t dstate;           /* n; 0 where unused */
  int32_t chunk_size;       /* Q: 16..256, power of two; 0 for reduce */
  int32_t heads_per_group;  /* r = h/g; 0 where unused */
  ssd_dtype dtype;          /* input dtype (dt for the cumsum kernels; fp32 for reduce) */
  uint32_t flags;           /* SSD_FLAG_* */
  ssd_tile tile;            /* zeros = default */
  ssd_mode mode;
  ssd_arch arch;
  int32_t partials;         /* reduce_head_partials: values per (b, c, h) record (1..8); else 0 */
} ssd_kernel_config;

/* Fill a config with defaults for `kernel` (dtype bf16, chunk 256, deterministic, sm_90, default tile). */
SSD_API void ssd_kernel_config_init(ssd_kernel_config* config, ssd_kernel_id kernel);
/* Check every field; on failure the detail names the field and its legal values. */
SSD_API ssd_status ssd_kernel_config_validate(const ssd_kernel_config* config);

SSD_API const char* ssd_status_string(ssd_status status);
/* Detail message of the last failing call on this thread ("" if none). Valid until the next call. */
SSD_API const char* ssd_last_error_detail(void);
SSD_API const char* ssd_version_string(void);

/* ---- runtime ---------------------------------------------------------------------------- */

typedef struct ssd_runtime ssd_runtime;

typedef struct ssd_runtime_options {
  size_t struct_size;
  ssd_mode mode;           /* mode used by ssd_chunk_cumsum_* (default deterministic) */
  int32_t arch;            /* 0: from the device of the current context; else an ssd_arch value */
  const char* cache_dir;   /* NULL: $SSD_CACHE_DIR, else $XDG_CACHE_HOME/ssdgen, else ~/.cache/ssdgen */
  int32_t cache_mode;      /* -1: from $SSD_CACHE_MODE; 0 readwrite, 1 readonly, 2 require-cached, 3 off */
  /* ssd_forward / ssd_backward launch their kernels through a graph the runtime caches per launch
   * sequence (one cuGraphLaunch instead of up to 15 cuLaunchKernel; same bits; docs/api.md "Launch
   * graphs"). 0 (default): on unless $SSD_LAUNCH_GRAPHS is "0"; 1 on; 2 off. It occupies what was
   * cache_mode's tail padding (sizeof unchanged, so an older caller's ssd_runtime_options_init
   * buffer still fits), and 0, a zero-filled struct's value, is the default. */
  int32_t launch_graphs;
} ssd_runtime_options;

SSD_API void ssd_runtime_options_init(ssd_runtime_options* options);
/* options may be NULL (defaults). Does not need a GPU; kernels are loaded on first use. */
SSD_API ssd_status ssd_runtime_create(const ssd_runtime_options* options, ssd_runtime** runtime);
SSD_API void ssd_runtime_destroy(ssd_runtime* runtime);

typedef struct ssd_kernel ssd_kernel; /* owned by the runtime; valid until ssd_runtime_destroy */

typedef struct ssd_kernel_info {
  size_t struct_size;
  ssd_cuda_function function;  /* CUfunction in the context that was current at ssd_get_kernel */
  const char* symbol;          /* mangled-free entry name */
  const char* key;             /* 64 hex chars: SHA-256 of the canonical key record */
  const char* cubin_sha256;    /* 64 hex chars */
  int32_t block_threads;       /* threads per block */
  int32_t dynamic_shared_bytes;
  int32_t registers;           /* per thread, from ptxas (-1 if unknown) */
  int32_t static_shared_bytes; /* from ptxas (-1 if unknown) */
  ssd_kernel_config config;    /* the normalized config (default tile filled in) */
} ssd_kernel_info;

/* Memory, then disk cache, then NVRTC. Needs a CUDA context (current, or device 0's primary). */
SSD_API ssd_status ssd_get_kernel(ssd_runtime* runtime, const ssd_kernel_config* config,
                                  ssd_kernel** kernel);
SSD_API ssd_status ssd_kernel_get_info(const ssd_kernel* kernel, ssd_kernel_info* info);

/* Launch a kernel from ssd_get_kernel with a caller-chosen grid and the kernel's block size.
 * `params` is the usual cuLaunchKernel parameter array (one pointer to each argument). Prefer the
 * typed entry points below, which validate their tensors. */
SSD_API ssd_status ssd_kernel_launch(const ssd_kernel* kernel, uint32_t grid_x, uint32_t grid_y,
                                     uint32_t grid_z, void** params, ssd_cuda_stream stream);

/* ---- tensors and the typed operations --------------------------------------------------- */

#define SSD_MAX_DIMS 6

/* A device tensor: pointer + dtype + shape + strides, strides in elements (not bytes). */
typedef struct ssd_tensor {
  void* data;
  ssd_dtype dtype;
  int32_t ndim;
  int64_t shape[SSD_MAX_DIMS];
  int64_t strides[SSD_MAX_DIMS];
} ssd_tensor;

typedef struct ssd_launch_options {
  size_t struct_size;
  ssd_tile tile;         /* main kernel's tile; zeros = default for (arch, specialization) */
  ssd_tile reduce_tile;  /* tile of the deterministic reduction kernel (reduce_head_partials) */
  int32_t max_blocks;    /* 0: one block per work item; else a persistent grid of at most this many */
  int32_t mode;          /* -1: the runtime's mode; else an ssd_mode value */
} ssd_launch_options;

SSD_API void ssd_launch_options_init(ssd_launch_options* options);

/* dt preprocessing and within-chunk cumulative sum (math F1):
 *   dt_out[b,h,c,l]    = clamp(softplus?(dt[b,t,h] + dt_bias[h]), lo, hi), 0 at padding t >= L
 *   dA_cumsum[b,h,c,l] = sum_{k<=l} dt_out[b,h,c,k] * A[h]   (left-to-right, docs/determinism.md) */
typedef struct ssd_chunk_cumsum_fwd_args {
  size_t struct_size;
  int32_t chunk_size;
  int32_t dt_softplus;
  float dt_limit_lo;      /* default 0 */
  float dt_limit_hi;      /* default +inf */
  ssd_tensor dt;          /* (b, L, h) bf16/fp16/fp32, any strides */
  ssd_tensor A;           /* (h) fp32 */
  ssd_tensor dt_bias;     /* (h) fp32, or data == NULL for none */
  ssd_tensor dt_out;      /* (b, h, nchunks, Q) fp32, Q-axis stride 1 */
  ssd_tensor dA_cumsum;   /* (b, h, nchunks, Q) fp32, Q-axis stride 1 */
} ssd_chunk_cumsum_fwd_args;

/* Adjoint of ssd_chunk_cumsum_fwd:
 *   g[l]         = ddt_out[l] + A * sum_{k>=l} ddA_cumsum[k]   (reverse scan, right-to-left)
 *   ddt[b,t,h]   = g masked by the clamp, times sigmoid(u) with softplus
 *   dA[h]        = sum over b, c, l of dt_out * sum_{k>=l} ddA_cumsum[k]
 *   ddt_bias[h]  = sum over b, c, l of ddt
 * In deterministic mode dA and ddt_bias are summed in the canonical order of docs/determinism.md
 * through a workspace; in fast mode with atomics (dA and ddt_bias are zeroed by the call). */
typedef struct ssd_chunk_cumsum_bwd_args {
  size_t struct_size;
  int32_t chunk_size;
  int32_t dt_softplus;
  float dt_limit_lo;
  float dt_limit_hi;
  ssd_tensor dt;          /* (b, L, h) as in the forward */
  ssd_tensor A;           /* (h) fp32 */
  ssd_tensor dt_bias;     /* (h) fp32 or data == NULL */
  ssd_tensor ddA_cumsum;  /* (b, h, nchunks, Q) fp32, Q-axis stride 1 */
  ssd_tensor ddt_out;     /* (b, h, nchunks, Q) fp32, Q-axis stride 1 */
  ssd_tensor ddt;         /* (b, L, h), dtype of dt, any strides */
  ssd_tensor dA;          /* (h) fp32 */
  ssd_tensor ddt_bias;    /* (h) fp32; required iff dt_bias is given */
  void* workspace;        /* NULL: allocated by the library (stream-ordered), with a one-time warning */
  size_t workspace_bytes;
} ssd_chunk_cumsum_bwd_args;

SSD_API void ssd_chunk_cumsum_fwd_args_init(ssd_chunk_cumsum_fwd_args* args);
SSD_API void ssd_chunk_cumsum_bwd_args_init(ssd_chunk_cumsum_bwd_args* args);

SSD_API ssd_status ssd_chunk_cumsum_fwd(ssd_runtime* runtime, const ssd_chunk_cumsum_fwd_args* args,
                                        const ssd_launch_options* options, ssd_cuda_stream stream);
SSD_API ssd_status ssd_chunk_cumsum_bwd_workspace_size(const ssd_chunk_cumsum_bwd_args* args,
                                                       size_t* bytes);
SSD_API ssd_status ssd_chunk_cumsum_bwd(ssd_runtime* runtime, const ssd_chunk_cumsum_bwd_args* args,
                                        const ssd_launch_options* options, ssd_cuda_stream stream);

/* ---- the SSD forward (mamba_chunk_scan_combined) ---------------------------------------- */

/* out = SSD(x, dt, A, B, C; D, z, dt_bias, initial_states, seq_idx), math §2. Stages: chunk_cumsum,
 * bmm_chunk (C B^T), chunk_state_passing (chunk states and the pass over chunks), chunk_scan;
 * intermediates go to the workspace in the layout ssd_forward_workspace_layout reports. */
typedef struct ssd_forward_args {
  size_t struct_size;
  int32_t chunk_size;       /* Q: 64, 128, 256 */
  int32_t dt_softplus;
  float dt_limit_lo;        /* default 0 */
  float dt_limit_hi;        /* default +inf */
  ssd_tensor x;             /* (b, L, h, p) bf16/fp16; p in 32, 64, 128 */
  ssd_tensor dt;            /* (b, L, h) bf16/fp16/fp32 */
  ssd_tensor A;             /* (h) fp32 */
  ssd_tensor B;             /* (b, L, g, n) x's dtype; n in 16, 32, 64, 128, 256; h % g == 0 */
  ssd_tensor C;             /* (b, L, g, n) x's dtype */
  ssd_tensor D;             /* (h) or (h, p) fp32, or data == NULL */
  ssd_tensor z;             /* (b, L, h, p) x's dtype, or data == NULL */
  ssd_tensor dt_bias;       /* (h) fp32, or data == NULL */
  ssd_tensor initial_states;/* (b, h, p, n) fp32 with unit n-stride and p-stride n, or data == NULL */
  ssd_tensor seq_idx;       /* (b, L) int32, non-decreasing ids >= 0 per row, or data == NULL */
  ssd_tensor out;           /* (b, L, h, p) x's dtype */
  ssd_tensor out_x;         /* (b, L, h, p) x's dtype: y before gating; required iff z is given */
  ssd_tensor final_states;  /* (b, h, p, n) fp32 (unit n-stride, p-stride n), or data == NULL */
  void* workspace;          /* NULL: allocated and freed by the call (stream-ordered), warned once */
  size_t workspace_bytes;
} ssd_forward_args;

/* Where the intermediates live in the workspace (byte offsets; each tensor contiguous):
 *   dt_out, dA_cumsum (b, h, nchunks, Q) fp32; CB (b, nchunks, g, Q, Q) fp32, lower triangle s <= l
 *   valid; states (b, nchunks, h, p, n) in x's dtype: the entering states P_c (after the call). */
typedef struct ssd_forward_layout {
  size_t struct_size;
  size_t total_bytes;
  size_t dt_out_offset;
  size_t dA_cumsum_offset;
  size_t CB_offset;
  size_t states_offset;
} ssd_forward_layout;

SSD_API void ssd_forward_args_init(ssd_forward_args* args);
SSD_API ssd_status ssd_forward_workspace_layout(const ssd_forward_args* args, ssd_forward_layout* layout);
/* Tiles are the defaults for (arch, shape); options->mode is honoured, tile and max_blocks are not. */
SSD_API ssd_status ssd_forward(ssd_runtime* runtime, const ssd_forward_args* args,
                               const ssd_launch_options* options, ssd_cuda_stream stream);

/* ---- the SSD backward ------------------------------------------------------------------- */

/* Every gradient of ssd_forward (math §3), given dout = d loss / d out and optionally dfinal_states.
 * The forward's intermediates are recomputed (bitwise as ssd_forward computes them); the forward
 * inputs follow ssd_forward's rules. In deterministic mode every gradient is summed in the
 * canonical order of docs/determinism.md (the same bits for any tile, grid, batch composition);
 * fast mode uses atomics for the dD, dA, ddt_bias, rho and ddA-intra sums. */
typedef struct ssd_backward_args {
  size_t struct_size;
  int32_t chunk_size;       /* as in the forward */
  int32_t dt_softplus;
  float dt_limit_lo;
  float dt_limit_hi;
  int32_t mode;             /* -1 (default): the runtime's mode; else an ssd_mode */
  /* the forward's inputs */
  ssd_tensor x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx;
  ssd_tensor out_x;         /* (b, L, h, p) x's dtype: the forward's y before gating; required iff z */
  ssd_tensor dout;          /* (b, L, h, p) x's dtype */
  ssd_tensor dfinal_states; /* (b, h, p, n) fp32 (unit n-stride, p-stride n), or data == NULL (= 0) */
  /* the gradients (written) */
  ssd_tensor dx;            /* (b, L, h, p) x's dtype */
  ssd_tensor ddt;           /* (b, L, h) dt's dtype */
  ssd_tensor dA;            /* (h) fp32 */
  ssd_tensor dB, dC;        /* (b, L, g, n) x's dtype */
  ssd_tensor dD;            /* D's shape, fp32, contiguous; required iff D (else data == NULL) */
  ssd_tensor dz;            /* (b, L, h, p) x's dtype; required iff z */
  ssd_tensor ddt_bias;      /* (h) fp32; required iff dt_bias */
  ssd_tensor dinitial_states; /* (b, h, p, n) fp32 (unit n-stride, p-stride n); required iff initial_states */
} ssd_backward_args;

SSD_API void ssd_backward_args_init(ssd_backward_args* args);
/* Bytes of workspace ssd_backward needs for these arguments in args->mode (with mode -1: in
 * deterministic mode, which needs at least as much as fast mode). */
SSD_API ssd_status ssd_backward_workspace_size(const ssd_backward_args* args, size_t* bytes);
/* workspace: NULL (allocated and freed by the call, stream-ordered, warned once) or at least
 * ssd_backward_workspace_size bytes, 256-byte aligned, owned by the caller until the stream has
 * passed the call. Nothing is launched unless every kernel is available. */
SSD_API ssd_status ssd_backward(ssd_runtime* runtime, const ssd_backward_args* args, void* workspace,
                                size_t workspace_bytes, ssd_cuda_stream stream);

/* ---- preparing the kernels of a call ahead of time -------------------------------------- */

/* ssd_forward_prepare / ssd_backward_prepare build every kernel that ssd_forward / ssd_backward
 * with the same arguments will use — from the runtime's memory, the disk cache, or NVRTC, several
 * compiles in parallel — without a device, without libcuda and without launching anything. Call them
 * at model load so the first real call does not compile; the call then finds the kernels in the
 * runtime's memory (runtime given) or in the disk cache (any runtime with the same cache).
 *
 * The arguments are validated as the call validates them (errors name the field), except that
 * tensor pointers are never used: a required tensor may have data == NULL, and any non-NULL value
 * (real or fake) marks an optional tensor (D, z, dt_bias, initial_states, seq_idx, ...) as given,
 * exactly as it does for the call. Shapes, strides, dtypes and flags must be those of the call.
 * The workspace fields are ignored. */
typedef struct ssd_prepare_options {
  size_t struct_size;
  int32_t arch;  /* 0: the runtime's arch option, else the device of the current context (needs a
                    driver); else an ssd_arch value: no device is needed */
  int32_t mode;  /* -1: the mode the call would run in (ssd_backward: args.mode if >= 0, else the
                    runtime's; no runtime: deterministic); else an ssd_mode value */
  int32_t jobs;  /* compile threads: 0 = one per online CPU; 1 = one after another */
} ssd_prepare_options;

/* What a prepare call did; filled on success (fields up to struct_size). */
typedef struct ssd_prepare_report {
  size_t struct_size;
  int32_t kernels;      /* distinct kernel specializations the call needs */
  int32_t compiled;     /* compiled by NVRTC in this prepare */
  int32_t from_disk;    /* read from the disk cache */
  int32_t from_memory;  /* already in the runtime's memory */
  double seconds;       /* wall time of the prepare */
} ssd_prepare_report;

SSD_API void ssd_prepare_options_init(ssd_prepare_options* options);
/* runtime: the runtime the calls will use (kernels stay in its memory), or NULL (a temporary one
 * with the default cache settings: the kernels land in the disk cache only). options and report
 * may be NULL. Every kernel is attempted; on failure the first failing kernel's status is returned,
 * its detail names the kernel (for SSD_ERROR_COMPILE, with the compile log). */
SSD_API ssd_status ssd_forward_prepare(ssd_runtime* runtime, const ssd_forward_args* args,
                                       const ssd_prepare_options* options, ssd_prepare_report* report);
SSD_API ssd_status ssd_backward_prepare(ssd_runtime* runtime, const ssd_backward_args* args,
                                        const ssd_prepare_options* options, ssd_prepare_report* report);

#ifdef __cplusplus
}
#endif

#endif /* SSD_SSD_H */
