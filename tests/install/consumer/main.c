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
  printf("consumer: ssdgen %s, %s\n", ssd_version_string(), ssd_status_string(SSD_ERROR_INVALID_CONFIG));
  return 0;
}
