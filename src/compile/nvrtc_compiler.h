// NVRTC: generated unit -> cubin (or PTX) for one exact arch. Template headers are passed from memory.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "codegen/codegen.h"
#include "common/status.h"

namespace ssd {

// The ordered NVRTC options for an arch; part of the key.
std::vector<std::string> compile_options(ssd_arch arch);
std::string nvrtc_version();  // "13.0"

// The resource figures of a `ptxas -v` report (the first entry function's): registers (-1 if the
// log has no report: some NVRTC builds give none), static shared memory (0 when absent: ptxas omits
// it for kernels without any), spill stores + loads.
struct PtxasReport {
  int32_t registers = -1;
  int32_t shared_bytes = 0;
  int32_t spill_bytes = 0;
};
PtxasReport parse_ptxas_report(std::string_view log);

struct CompiledCubin {
  std::vector<uint8_t> cubin;
  std::string log;     // NVRTC + ptxas (-v) log
  PtxasReport report;  // parsed from the log's ptxas report
  std::string ptx;     // the same compile's PTX, when asked for (with_ptx)
};

// On failure: SSD_ERROR_COMPILE with the full compile log in the detail.
// with_ptx: also return the PTX of this compile (what compile_ptx gives, without a second compile).
Result<CompiledCubin> compile_cubin(const GeneratedUnit& unit, ssd_arch arch, bool with_ptx = false);
Result<std::string> compile_ptx(const GeneratedUnit& unit, ssd_arch arch);

}  // namespace ssd
