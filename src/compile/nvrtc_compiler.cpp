#include "compile/nvrtc_compiler.h"

#include <algorithm>
#include <climits>
#include <string_view>

#include <fmt/format.h>
#include <nvrtc.h>

#include "config/config.h"

namespace ssd {
namespace {

// Owns one nvrtcProgram; compiles the unit with its template headers passed from memory.
class Program {
 public:
  ~Program() {
    if (prog_) nvrtcDestroyProgram(&prog_);
  }

  Status compile(const GeneratedUnit& unit, ssd_arch arch) {
    std::vector<const char*> names, contents;
    for (const std::string& path : unit.headers) {
      const EmbeddedFile* f = find_template(path);
      if (!f) return make_error(SSD_ERROR_INTERNAL, fmt::format("template header '{}' is not embedded", path));
      names.push_back(f->path);
      contents.push_back(f->content);
    }
    nvrtcResult r = nvrtcCreateProgram(&prog_, unit.source.c_str(), unit.file_name.c_str(), int(names.size()),
                                       contents.data(), names.data());
    if (r != NVRTC_SUCCESS)
      return make_error(SSD_ERROR_COMPILE, fmt::format("nvrtcCreateProgram: {}", nvrtcGetErrorString(r)));
    std::vector<std::string> options = compile_options(arch);
    std::vector<const char*> argv;
    for (const std::string& o : options) argv.push_back(o.c_str());
    r = nvrtcCompileProgram(prog_, int(argv.size()), argv.data());
    size_t log_size = 0;
    nvrtcGetProgramLogSize(prog_, &log_size);
    log_.assign(log_size, '\0');
    if (log_size) nvrtcGetProgramLog(prog_, log_.data());
    while (!log_.empty() && (log_.back() == '\0' || log_.back() == '\n')) log_.pop_back();
    if (r != NVRTC_SUCCESS)
      return make_error(SSD_ERROR_COMPILE, fmt::format("NVRTC failed to compile {} for {} ({}):\n{}", unit.file_name,
                                                       arch_name(arch), nvrtcGetErrorString(r), log_));
    return Status::Ok();
  }

  nvrtcProgram get() const { return prog_; }
  const std::string& log() const { return log_; }

 private:
  nvrtcProgram prog_ = nullptr;
  std::string log_;
};

// The number written right before `suffix` at its first occurrence that has one, e.g. 45056 for
// " bytes smem" in "Used 128 registers, ..., 45056 bytes smem"; with `prefix`, the digits must
// also follow it directly ("Used " 128). -1 if there is none or it does not fit an int32.
// Plain scanning, no std::regex: see docs/perf.md ("The in-process JIT crash").
int32_t number_before(std::string_view log, std::string_view prefix, std::string_view suffix) {
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  for (size_t at = log.find(suffix); at != std::string_view::npos; at = log.find(suffix, at + 1)) {
    size_t begin = at;
    while (begin > 0 && digit(log[begin - 1])) --begin;
    if (begin == at) continue;
    if (begin < prefix.size() || log.substr(begin - prefix.size(), prefix.size()) != prefix) continue;
    int64_t value = 0;
    for (size_t i = begin; i < at; ++i) {
      value = value * 10 + (log[i] - '0');
      if (value > INT32_MAX) return -1;
    }
    return int32_t(value);
  }
  return -1;
}

}  // namespace

PtxasReport parse_ptxas_report(std::string_view log) {
  PtxasReport r;
  r.registers = number_before(log, "Used ", " registers");
  r.shared_bytes = std::max(number_before(log, "", " bytes smem"), 0);  // ptxas omits "0 bytes smem"
  const int32_t stores = number_before(log, "", " bytes spill stores");
  const int32_t loads = number_before(log, "", " bytes spill loads");
  r.spill_bytes = int32_t(std::min<int64_t>(int64_t(std::max(stores, 0)) + std::max(loads, 0), INT32_MAX));
  return r;
}

std::vector<std::string> compile_options(ssd_arch arch) {
  return {fmt::format("--gpu-architecture={}", arch_name(arch)), "--std=c++17", "--fmad=true",
          "--ptxas-options=-v"};
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return fmt::format("{}.{}", major, minor);
}

namespace {
Result<std::string> program_ptx(nvrtcProgram prog) {
  size_t size = 0;
  nvrtcResult r = nvrtcGetPTXSize(prog, &size);
  if (r != NVRTC_SUCCESS) return make_error(SSD_ERROR_COMPILE, fmt::format("nvrtcGetPTXSize: {}", nvrtcGetErrorString(r)));
  std::string ptx(size, '\0');
  r = nvrtcGetPTX(prog, ptx.data());
  if (r != NVRTC_SUCCESS) return make_error(SSD_ERROR_COMPILE, fmt::format("nvrtcGetPTX: {}", nvrtcGetErrorString(r)));
  while (!ptx.empty() && ptx.back() == '\0') ptx.pop_back();
  return ptx;
}
}  // namespace

Result<CompiledCubin> compile_cubin(const GeneratedUnit& unit, ssd_arch arch, bool with_ptx) {
  Program program;
  SSD_RETURN_IF_ERROR(program.compile(unit, arch));
  size_t size = 0;
  nvrtcResult r = nvrtcGetCUBINSize(program.get(), &size);
  if (r != NVRTC_SUCCESS || size == 0)
    return make_error(SSD_ERROR_COMPILE, fmt::format("nvrtcGetCUBINSize: {}", nvrtcGetErrorString(r)));
  CompiledCubin out;
  out.cubin.resize(size);
  r = nvrtcGetCUBIN(program.get(), reinterpret_cast<char*>(out.cubin.data()));
  if (r != NVRTC_SUCCESS) return make_error(SSD_ERROR_COMPILE, fmt::format("nvrtcGetCUBIN: {}", nvrtcGetErrorString(r)));
  out.log = program.log();
  out.report = parse_ptxas_report(out.log);
  if (with_ptx) {
    SSD_ASSIGN_OR_RETURN(out.ptx, program_ptx(program.get()));
  }
  return out;
}

Result<std::string> compile_ptx(const GeneratedUnit& unit, ssd_arch arch) {
  Program program;
  SSD_RETURN_IF_ERROR(program.compile(unit, arch));
  return program_ptx(program.get());
}

}  // namespace ssd
