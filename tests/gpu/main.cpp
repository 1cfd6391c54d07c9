// GPU test runner: says up front whether a GPU is there; without one every case is skipped and
// doctest's summary counts them (never a silent pass).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "gpu_support.h"

int main(int argc, char** argv) {
  if (gputest::gpu_available()) {
    char name[256] = {0};
    CUdevice dev;
    gputest::drv().cuCtxGetDevice(&dev);
    gputest::drv().cuDeviceGetName(name, sizeof(name), dev);
    std::printf("GPU tests on: %s\n", name);
  } else {
    std::printf("GPU tests SKIPPED (every case below is counted as skipped): %s\n",
                gputest::gpu_unavailable_reason().c_str());
  }
  doctest::Context context(argc, argv);
  return context.run();
}
