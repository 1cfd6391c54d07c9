/* Links against the installed libssdgen and checks a validation error comes back by value; then
 * JIT-compiles the forward's kernels of a small shape through the installed library (NVRTC, no GPU)
 * with ssd_forward_prepare, into a private empty cache. */
#define _DEFAULT_SOURCE /* mkdtemp */
#include <ssd/ssd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ssd_tensor shape_only(ssd_dtype dtype, int ndim, const int64_t* shape) {
  ssd_tensor t;
  memset(&t, 0, sizeof(t));
  t.dtype = dtype;
  t.ndim = ndim;
  int64_t stride = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    t.shape[i] = shape[i];
    t.strides[i] = stride;
    stride *= shape[i];
  }
  return t;
}

int main(void) {
  ssd_kernel_config c;
  ssd_kernel_config_init(&c, SSD_KERNEL_CHUNK_CUMSUM_FWD);
  if (ssd_kernel_config_validate(&c) != SSD_OK) return 1;
  c.chunk_size = 48;
  if (ssd_kernel_config_validate(&c) != SSD_ERROR_INVALID_CONFIG) return 2;
  if (!strstr(ssd_last_error_detail(), "chunk_size")) return 3;
  /* The backward's entry points link and validate without a GPU: no tensors -> x is named. */
  ssd_backward_args b;
  ssd_backward_args_init(&b);
  size_t bytes = 0;
  if (ssd_backward_workspace_size(&b, &bytes) == SSD_OK) return 4;
  if (!strstr(ssd_last_error_detail(), "x")) return 5;

  /* Prepare: shapes and dtypes only (pointers NULL), arch given, no device. */
  char dir[] = "/tmp/ssd_consumer_cache.XXXXXX";
  if (!mkdtemp(dir)) return 6;
  ssd_runtime_options ro;
  ssd_runtime_options_init(&ro);
  ro.cache_dir = dir;
  ro.cache_mode = 0;
  ssd_runtime* rt = NULL;
  if (ssd_runtime_create(&ro, &rt) != SSD_OK) return 7;
  const int64_t bthp[] = {1, 64, 2, 32}, bth[] = {1, 64, 2}, h[] = {2}, btgn[] = {1, 64, 1, 16};
  ssd_forward_args f;
  ssd_forward_args_init(&f);
  f.chunk_size = 64;
  f.x = shape_only(SSD_DTYPE_BF16, 4, bthp);
  f.dt = shape_only(SSD_DTYPE_FP32, 3, bth);
  f.A = shape_only(SSD_DTYPE_FP32, 1, h);
  f.B = shape_only(SSD_DTYPE_BF16, 4, btgn);
  f.C = shape_only(SSD_DTYPE_BF16, 4, btgn);
  f.out = shape_only(SSD_DTYPE_BF16, 4, bthp);
  ssd_prepare_options po;
  ssd_prepare_options_init(&po);
  po.arch = SSD_ARCH_SM90A;
  ssd_prepare_report report;
  memset(&report, 0, sizeof(report));
  report.struct_size = sizeof(report);
  ssd_status s = ssd_forward_prepare(rt, &f, &po, &report);
  ssd_runtime_destroy(rt);
  char cmd[sizeof(dir) + 16];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  if (system(cmd) != 0) return 8;
  if (s != SSD_OK) {
    fprintf(stderr, "ssd_forward_prepare: %s: %s\n", ssd_status_string(s), ssd_last_error_detail());
    return 9;
  }
  if (report.kernels != 4 || report.compiled != 4) return 10;  /* the forward's four kernels */
  printf("consumer: ssdgen %s, %s; prepared %d kernels (%d compiled) in %.2f s\n", ssd_version_string(),
         ssd_status_string(SSD_ERROR_INVALID_CONFIG), report.kernels, report.compiled, report.seconds);
  return 0;
}
