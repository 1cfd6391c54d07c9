/* Links against the installed libssdgen and checks a validation error comes back by value. */
#include <ssd/ssd.h>
#include <stdio.h>
#include <string.h>

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
  printf("consumer: ssdgen %s, %s\n", ssd_version_string(), ssd_status_string(SSD_ERROR_INVALID_CONFIG));
  return 0;
}
