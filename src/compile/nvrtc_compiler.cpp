#include "compile/nvrtc_compiler.h"

#include <cctype>

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

// The integer just before `suffix` ("Used 96 registers" -> suffix " registers"), -1 if absent.
// Plain scanning: std::regex crashes inside some host processes (issue 13).
int number_before(const std::string& log, const char* suffix) {
  const size_t at = log.find(suffix);
  if (at == std::string::npos || at == 0) return -1;
  size_t begin = at;
  while (begin > 0 && std::isdigit(static_cast<unsigned char>(log[begin - 1]))) --begin;
  if (begin == at || at - begin > 9) return -1;
  return std::stoi(log.substr(begin, at - begin));
}

}  // namespace

std::vector<std::string> compile_options(ssd_arch arch) {
  return {fmt::format("--gpu-architecture={}", arch_name(arch)), "--std=c++17", "--fmad=true",
          "--ptxas-options=-v"};
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return fmt::format("{}.{}", major, minor);
}

Result<CompiledCubin> compile_cubin(const GeneratedUnit& unit, ssd_arch arch) {
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
  out.registers = number_before(out.log, " registers");
  int smem = number_before(out.log, " bytes smem");
  out.shared_bytes = smem < 0 ? 0 : smem;
  int spill_st = number_before(out.log, " bytes spill stores");
  int spill_ld = number_before(out.log, " bytes spill loads");
  out.spill_bytes = std::max(spill_st, 0) + std::max(spill_ld, 0);
  return out;
}

Result<std::string> compile_ptx(const GeneratedUnit& unit, ssd_arch arch) {
  Program program;
  SSD_RETURN_IF_ERROR(program.compile(unit, arch));
  size_t size = 0;
  nvrtcResult r = nvrtcGetPTXSize(program.get(), &size);
  if (r != NVRTC_SUCCESS) return make_error(SSD_ERROR_COMPILE, fmt::format("nvrtcGetPTXSize: {}", nvrtcGetErrorString(r)));
  std::string ptx(size, '\0');
  r = nvrtcGetPTX(program.get(), ptx.data());
  if (r != NVRTC_SUCCESS) return make_error(SSD_ERROR_COMPILE, fmt::format("nvrtcGetPTX: {}", nvrtcGetErrorString(r)));
  while (!ptx.empty() && ptx.back() == '\0') ptx.pop_back();
  return ptx;
}

}  // namespace ssd
