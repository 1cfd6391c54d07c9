// The Hopper primitive layer (templates/ssd/primitives/hopper.cuh) on the CPU: NVRTC compiles the GPU
// tests' kernels for sm_90a, their PTX holds every primitive's instruction, ptxas honours setmaxnreg;
// other targets are refused with a clear error; tensor-map descriptions are validated by field.
#include <doctest/doctest.h>

#include <algorithm>
#include <iterator>
#include <string>

#include "../gpu/hopper_test_kernels.h"
#include "codegen/codegen.h"
#include "compile/nvrtc_compiler.h"
#include "runtime/tensor_map.h"

using namespace ssd;

namespace {

GeneratedUnit hopper_unit() {
  GeneratedUnit u;
  u.file_name = "hopper_primitives_test.cu";
  u.source = hopper_test::kernel_source();
  u.symbol = hopper_test::kCopySw128;
  auto headers = template_closure(u.source);
  REQUIRE(headers.ok());
  u.headers = *headers;
  return u;
}

// The test kernels compiled once for both cases below: one NVRTC run gives the cubin (with its ptxas
// report) and the PTX.
const Result<CompiledCubin>& hopper_compile() {
  static const Result<CompiledCubin> compiled = compile_cubin(hopper_unit(), SSD_ARCH_SM90A, /*with_ptx=*/true);
  return compiled;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("hopper primitives: the test kernels compile for sm_90a and their PTX has every primitive") {
  const GeneratedUnit u = hopper_unit();
  CHECK(std::find(u.headers.begin(), u.headers.end(), "ssd/primitives/hopper.cuh") != u.headers.end());
  const auto& compiled = hopper_compile();
  REQUIRE_MESSAGE(compiled.ok(), compiled.status().detail);
  const std::string* ptx = &compiled->ptx;
  for (const char* instruction :
       {"mbarrier.init.shared::cta.b64", "fence.mbarrier_init.release.cluster", "mbarrier.arrive.shared::cta.b64",
        "mbarrier.arrive.expect_tx.shared::cta.b64",
        "mbarrier.expect_tx.relaxed.cta.shared::cta.b64", "mbarrier.try_wait.parity.shared::cta.b64",
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
        "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group", "cp.async.bulk.shared::cluster.global",
        "cp.async.bulk.commit_group", "cp.async.bulk.wait_group.read 0", "cp.async.bulk.wait_group 0",
        "prefetch.tensormap", "fence.proxy.async.shared::cta", "setmaxnreg.inc.sync.aligned.u32 232",
        "setmaxnreg.dec.sync.aligned.u32 40", "wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned",
        "wgmma.wait_group.sync.aligned 1", "wgmma.wait_group.sync.aligned 0", "ldmatrix.sync.aligned.m8n8.x4"}) {
    CAPTURE(instruction);
    CHECK(ptx->find(instruction) != std::string::npos);
  }
  // One wgmma shape per instantiated (N, dtype); both operand sources.
  for (const char* shape : {"m64n64k16.f32.bf16.bf16", "m64n128k16.f32.bf16.bf16", "m64n256k16.f32.bf16.bf16",
                            "m64n128k16.f32.f16.f16", "m64n64k16.f32.f16.f16", "m64n256k16.f32.f16.f16",
                            "m64n32k16.f32.bf16.bf16", "m64n32k16.f32.f16.f16"}) {
    CAPTURE(shape);
    CHECK(ptx->find(std::string("wgmma.mma_async.sync.aligned.") + shape) != std::string::npos);
  }
  // Every instantiation is an entry point, and the register-A form ({a0..a3} operand) is there.
  for (const hopper_test::GemmVariant& v : hopper_test::kGemmVariants)
    CHECK(ptx->find(".entry " + hopper_test::gemm_name(v.dtype, v.n, v.consumers, v.layout)) != std::string::npos);
  CHECK(count(*ptx, "wgmma.mma_async") >= 4 * (std::size(hopper_test::kGemmVariants)));
  // The register-A form: the accumulator list is followed by a list of four A registers.
  bool register_a = false;
  for (size_t at = ptx->find("wgmma.mma_async"); at != std::string::npos; at = ptx->find("wgmma.mma_async", at + 1)) {
    const std::string line = ptx->substr(at, ptx->find('\n', at) - at);
    register_a |= line.find("}, {%r") != std::string::npos;
  }
  CHECK(register_a);
}

TEST_CASE("hopper primitives: the cubin builds for sm_90a, setmaxnreg is honoured, nothing spills") {
  const auto& cubin = hopper_compile();
  REQUIRE_MESSAGE(cubin.ok(), cubin.status().detail);
  CHECK(cubin->cubin.size() > 1000);
  INFO(cubin->log);
  // ptxas says C7508 when it ignores setmaxnreg (no register count at entry), and warns when it has to
  // serialize wgmma (a fragment touched while in flight).
  CHECK(cubin->log.find("C7508") == std::string::npos);
  CHECK(cubin->log.find("wgmma") == std::string::npos);
  CHECK(count(cubin->log, "bytes spill stores") == count(cubin->log, " 0 bytes spill stores"));
}

TEST_CASE("hopper primitives: other targets are refused by the header's guard") {
  const GeneratedUnit u = hopper_unit();
  for (ssd_arch arch : {SSD_ARCH_SM80, SSD_ARCH_SM90}) {
    auto r = compile_ptx(u, arch);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code == SSD_ERROR_COMPILE);
    CHECK(r.status().detail.find("needs the sm_90a target") != std::string::npos);
  }
}

TEST_CASE("tensor map descriptions are validated field by field (no driver needed)") {
  alignas(16) static unsigned char buffer[64];
  using cuda::TmaSwizzle;
  const cuda::TensorMapDesc good =
      cuda::matrix_map_desc(SSD_DTYPE_BF16, buffer, 512, 256, 256, 64, 64, TmaSwizzle::k128B);
  CHECK(cuda::validate_tensor_map(good).ok());
  CHECK(good.dims[0] == 256);
  CHECK(good.dims[1] == 512);
  CHECK(good.strides[1] == 512);
  CHECK(good.box[0] == 64);
  CHECK(good.box[1] == 64);

  auto refused = [](cuda::TensorMapDesc d, ssd_status code, const char* field) {
    Status s = cuda::validate_tensor_map(d);
    CAPTURE(field);
    CAPTURE(s.detail);
    CHECK(s.code == code);
    CHECK(s.detail.find(field) != std::string::npos);
  };
  cuda::TensorMapDesc d = good;
  d.dtype = SSD_DTYPE_INT32;
  d.box[0] = 32;  // 128 bytes of int32
  CHECK(cuda::validate_tensor_map(d).ok());
  d.dtype = ssd_dtype(99);
  refused(d, SSD_ERROR_INVALID_DTYPE, "dtype");
  d = good;
  d.rank = 6;
  refused(d, SSD_ERROR_INVALID_ARGUMENT, "rank");
  d = good;
  d.base = nullptr;
  refused(d, SSD_ERROR_NULL_POINTER, "base");
  d = good;
  d.base = buffer + 8;
  refused(d, SSD_ERROR_INVALID_ALIGNMENT, "base");
  d = good;
  d.dims[1] = 0;
  refused(d, SSD_ERROR_INVALID_SHAPE, "dims[1]");
  d = good;
  d.box[1] = 257;
  refused(d, SSD_ERROR_INVALID_SHAPE, "box[1]");
  d = good;
  d.strides[1] = 24;  // a row of 12 bf16
  refused(d, SSD_ERROR_INVALID_STRIDE, "strides[1]");
  d = good;
  d.box[0] = 96;  // 192 bytes: over the 128-byte swizzle span
  refused(d, SSD_ERROR_INVALID_SHAPE, "128-byte swizzle span");
  d.swizzle = TmaSwizzle::kNone;
  CHECK(cuda::validate_tensor_map(d).ok());
  d.box[0] = 4;  // 8 bytes
  refused(d, SSD_ERROR_INVALID_SHAPE, "multiple of 16");
  // A box may reach past the tensor (TMA fills zeros), e.g. the last tile of a 300-row matrix.
  d = cuda::matrix_map_desc(SSD_DTYPE_BF16, buffer, 30, 200, 200, 64, 64, TmaSwizzle::kNone);
  CHECK_MESSAGE(cuda::validate_tensor_map(d).ok(), cuda::validate_tensor_map(d).detail);
}

TEST_CASE("hopper primitives: without a register cap ptxas ignores setmaxnreg and says C7508 (the check above can fail)") {
  GeneratedUnit u;
  u.file_name = "setmaxnreg_uncapped.cu";
  u.source =
      "#include \"ssd/primitives/hopper.cuh\"\n"
      "extern \"C\" __global__ void uncapped(float* p) {\n"
      "  if (threadIdx.x >= 128) { ssd_kernels::ptx::setmaxnreg_dec<40>(); }\n"
      "  else { ssd_kernels::ptx::setmaxnreg_inc<232>(); p[threadIdx.x] = 1.f; }\n"
      "}\n";
  u.symbol = "uncapped";
  auto headers = template_closure(u.source);
  REQUIRE(headers.ok());
  u.headers = *headers;
  auto cubin = compile_cubin(u, SSD_ARCH_SM90A);
  REQUIRE_MESSAGE(cubin.ok(), cubin.status().detail);
  // Some NVRTC builds return no ptxas report at all; where there is one, it names C7508.
  if (cubin->log.find("registers") != std::string::npos) CHECK(cubin->log.find("C7508") != std::string::npos);
}
