// Argument checks of the typed operations that need no GPU: tensor validation, runtime options and
// the workspace-size functions (src/ops, src/runtime).
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "ops/chunk_cumsum.h"
#include "ops/ssd_backward.h"
#include "ops/ssd_forward.h"
#include "ops/tensor_check.h"
#include "runtime/runtime.h"

using namespace ssd;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Device pointers are never dereferenced by these checks: any aligned non-null value will do.
void* fake_pointer() { return reinterpret_cast<void*>(uintptr_t(1) << 20); }

void set_raw_dtype(ssd_tensor& t, int32_t raw) { std::memcpy(&t.dtype, &raw, sizeof raw); }

}  // namespace

TEST_CASE("check_tensor: a dtype outside the enum is an error naming the tensor and the number") {
  ssd_tensor t = contiguous_tensor(fake_pointer(), SSD_DTYPE_FP32, {4, 8});
  set_raw_dtype(t, 12345);
  Status s = check_tensor(t, {"dt", {-1, -1}, {SSD_DTYPE_BF16, SSD_DTYPE_FP32}});
  CHECK(s.code == SSD_ERROR_INVALID_DTYPE);
  CHECK(s.detail == "dt: dtype 12345 (not an ssd_dtype) (legal: bf16, fp32)");
  set_raw_dtype(t, -7);
  CHECK(contains(check_tensor(t, {"A", {-1, -1}, {SSD_DTYPE_FP32}}).detail, "A: dtype -7 (not an ssd_dtype)"));
  // A valid enumerator that is not allowed is named.
  t.dtype = SSD_DTYPE_INT32;
  CHECK(check_tensor(t, {"A", {-1, -1}, {SSD_DTYPE_FP32}}).detail == "A: dtype int32 (legal: fp32)");
}

TEST_CASE("create_runtime: options.mode and options.arch are range-checked as integers") {
  ssd_runtime_options o{};
  o.struct_size = sizeof(o);
  o.cache_mode = 3;  // off: nothing on disk
  int32_t raw = 7;
  std::memcpy(&o.mode, &raw, sizeof raw);
  auto r = create_runtime(o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code == SSD_ERROR_INVALID_ARGUMENT);
  CHECK(r.status().detail == "options.mode: 7 (legal: 0 deterministic, 1 fast)");
  o.mode = SSD_MODE_FAST;
  o.arch = 12345;
  r = create_runtime(o);
  REQUIRE_FALSE(r.ok());
  CHECK(contains(r.status().detail, "options.arch: 12345 (legal: 0 from the device, 80, 90, 901)"));
  o.arch = SSD_ARCH_SM90A;
  CHECK(create_runtime(o).ok());
}
