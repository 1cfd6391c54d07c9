// The ptxas -v report parser (compile/nvrtc_compiler.h) on real logs: NVRTC 13.0's reports for the
// nemotronh-56b preset kernels, as compile_cubin receives them. The expected figures are what the
// std::regex parser it replaced returned for the same logs (identical on all 36 kernels of the
// preset for sm_80 and sm_90a, and on the edge cases below).
#include <doctest/doctest.h>

#include <string>

#include "compile/nvrtc_compiler.h"

using ssd::parse_ptxas_report;

namespace {

// chunk_scan_fwd bf16 p=64 n=256 Q=256 r=32 flags=D tile=64x64 det sm_80
constexpr const char* k_sm80_chunk_scan_fwd = R"LOG(ptxas info    : 44 bytes gmem, 136 bytes cmem[4]
ptxas info    : Compiling entry function 'ssd_chunk_scan_fwd' for 'sm_80'
ptxas info    : Function properties for ssd_chunk_scan_fwd
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 220 registers, used 1 barriers, 46592 bytes smem, 776 bytes cmem[0], 16 bytes cmem[2]
ptxas info    : Compile time = 437.737 ms)LOG";

// chunk_scan_bwd_dx bf16 p=64 n=256 Q=256 r=32 flags=D tile=128x0 det sm_90a
constexpr const char* k_sm90a_chunk_scan_bwd_dx = R"LOG(ptxas info    : 41 bytes gmem
ptxas info    : Compiling entry function 'ssd_chunk_scan_bwd_dx' for 'sm_90a'
ptxas info    : Function properties for ssd_chunk_scan_bwd_dx
ptxas         .     24 bytes stack frame, 16 bytes spill stores, 28 bytes spill loads
ptxas info    : Used 128 registers, used 1 barriers, 24 bytes cumulative stack size, 45056 bytes smem
ptxas info    : Compile time = 797.831 ms)LOG";

// chunk_scan_bwd_dc bf16 p=64 n=256 Q=256 r=32 tile=128x64 det sm_90a
constexpr const char* k_sm90a_chunk_scan_bwd_dc = R"LOG(ptxas info    : 44 bytes gmem
ptxas info    : Compiling entry function 'ssd_chunk_scan_bwd_dc' for 'sm_90a'
ptxas info    : Function properties for ssd_chunk_scan_bwd_dc
ptxas         .     8 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 8 bytes cumulative stack size, 45568 bytes smem
ptxas info    : Compile time = 977.099 ms)LOG";

// chunk_scan_bwd_dcb bf16 p=64 Q=256 r=32 tile=32x64 det sm_90a
constexpr const char* k_sm90a_chunk_scan_bwd_dcb = R"LOG(ptxas info    : 39 bytes gmem
ptxas info    : Compiling entry function 'ssd_chunk_scan_bwd_dcb' for 'sm_90a'
ptxas info    : Function properties for ssd_chunk_scan_bwd_dcb
ptxas         .     8 bytes stack frame, 6 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 8 bytes cumulative stack size, 43392 bytes smem
ptxas info    : Compile time = 496.296 ms)LOG";

// state_passing_fwd fp32 Q=256 tile=256x0 det sm_90a
constexpr const char* k_sm90a_state_passing_fwd = R"LOG(ptxas info    : 14 bytes gmem
ptxas info    : Compiling entry function 'ssd_state_passing_fwd' for 'sm_90a'
ptxas info    : Function properties for ssd_state_passing_fwd
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers
ptxas info    : Compile time = 47.546 ms)LOG";

// chunk_scan_bwd_ddA fp32 Q=256 tile=128x0 det sm_80
constexpr const char* k_sm80_chunk_scan_bwd_ddA = R"LOG(ptxas info    : 22 bytes gmem, 56 bytes cmem[4]
ptxas info    : Compiling entry function 'ssd_chunk_scan_bwd_ddA' for 'sm_80'
ptxas info    : Function properties for ssd_chunk_scan_bwd_ddA
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 1 barriers, 4100 bytes smem, 488 bytes cmem[0], 8 bytes cmem[2]
ptxas info    : Compile time = 58.591 ms)LOG";

void check_report(const char* log, int32_t registers, int32_t shared, int32_t spill) {
  const ssd::PtxasReport r = parse_ptxas_report(log);
  CHECK(r.registers == registers);
  CHECK(r.shared_bytes == shared);
  CHECK(r.spill_bytes == spill);
}

}  // namespace

TEST_CASE("ptxas report: registers, static shared memory and spills of real NVRTC logs") {
  check_report(k_sm80_chunk_scan_fwd, 220, 46592, 0);       // cmem after smem, no spills
  check_report(k_sm90a_chunk_scan_bwd_dx, 128, 45056, 44);  // 16 stores + 28 loads
  check_report(k_sm90a_chunk_scan_bwd_dc, 255, 45568, 20);
  check_report(k_sm90a_chunk_scan_bwd_dcb, 168, 43392, 14);
  check_report(k_sm90a_state_passing_fwd, 32, 0, 0);        // no smem: ptxas omits the field
  check_report(k_sm80_chunk_scan_bwd_ddA, 32, 4100, 0);
}

TEST_CASE("ptxas report: absent and malformed reports") {
  check_report("", -1, 0, 0);  // NVRTC builds that give no report (the device machine's)
  check_report("ptxas info    : Compile time = 1.0 ms", -1, 0, 0);
  check_report("Used registers, bytes smem", -1, 0, 0);
  // The first occurrence that carries a number wins, as with the regex search it replaces.
  check_report("Used 3 registers\nUsed 9 registers", 3, 0, 0);
  check_report("Used x12 registers, 1 bytes smem", -1, 1, 0);
  check_report("xUsed 5 registers", 5, 0, 0);
  check_report("Used  5 registers", -1, 0, 0);  // two spaces: not the report's format
  check_report("Used 12registers Used 13 registers", 13, 0, 0);
  check_report(" bytes smem 12 bytes smem, a bytes smem", -1, 12, 0);
  check_report("ab12 bytes spill stores, 0 bytes spill loads", -1, 0, 12);
  check_report("00012 bytes smem", -1, 12, 0);
  check_report("2147483647 bytes smem", -1, 2147483647, 0);
  // Values past int32 are unknown (the regex version threw std::out_of_range from std::stoi).
  check_report("Used 99999999999 registers, 2147483648 bytes smem", -1, 0, 0);
  check_report("2147483647 bytes spill stores, 2147483647 bytes spill loads", -1, 0, 2147483647);
}
