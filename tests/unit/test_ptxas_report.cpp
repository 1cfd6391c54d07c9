// The ptxas -v report parser (compile/nvrtc_compiler.h) on real logs: NVRTC 13.0's reports for the
// nemotronh-56b preset kernels, as compile_cubin receives them (tests/unit/inputs/ptxas_reports.log). The expected figures are what the
// std::regex parser it replaced returned for the same logs (identical on all 36 kernels of the
// preset for sm_80 and sm_90a, and on the edge cases below).
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "compile/nvrtc_compiler.h"

using ssd::parse_ptxas_report;

namespace {

void check_report(const std::string& log, int32_t registers, int32_t shared, int32_t spill) {
  const ssd::PtxasReport r = parse_ptxas_report(log);
  CHECK(r.registers == registers);
  CHECK(r.shared_bytes == shared);
  CHECK(r.spill_bytes == spill);
}

// The sections of tests/unit/inputs/ptxas_reports.log: '== label | registers R | shared S | spill P',
// then the log's lines.
struct RecordedReport {
  std::string label, log;
  int32_t registers = 0, shared = 0, spill = 0;
};
std::vector<RecordedReport> recorded_reports() {
  std::ifstream in(std::string(SSD_TEST_INPUTS_DIR) + "/ptxas_reports.log");
  REQUIRE(in.good());
  std::vector<RecordedReport> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("#", 0) == 0) continue;
    if (line.rfind("== ", 0) == 0) {
      RecordedReport r;
      const size_t bar = line.find(" | ");
      REQUIRE(bar != std::string::npos);
      r.label = line.substr(3, bar - 3);
      REQUIRE(std::sscanf(line.c_str() + bar, " | registers %d | shared %d | spill %d", &r.registers, &r.shared,
                          &r.spill) == 3);
      out.push_back(r);
    } else {
      REQUIRE(!out.empty());
      out.back().log += (out.back().log.empty() ? "" : "\n") + line;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("ptxas report: registers, static shared memory and spills of real NVRTC logs") {
  const std::vector<RecordedReport> reports = recorded_reports();
  CHECK(reports.size() == 6);
  for (const RecordedReport& r : reports) {
    CAPTURE(r.label);
    check_report(r.log, r.registers, r.shared, r.spill);
  }
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
