// ssdgen command-line tool: what the subcommand files share (docs/cli.md).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/disk_cache.h"
#include "common/status.h"
#include "ssd/ssd.h"

namespace ssdgen {

// Process exit codes (docs/cli.md, `ssdgen --help`). Keep the three in step.
enum ExitCode : int {
  kExitOk = 0,
  kExitUsage = 1,        // bad flags / subcommand
  kExitInvalid = 2,      // invalid config or argument value (SSD_ERROR_INVALID_* and friends)
  kExitCompile = 3,      // NVRTC failed
  kExitCacheMiss = 4,    // SSD_CACHE_MODE=require-cached and a kernel is not cached
  kExitCache = 5,        // cache verification found bad entries / cache maintenance failed
  kExitNoDevice = 6,     // no CUDA driver or device (GPU subcommands)
  kExitCheckFailed = 7,  // `ssdgen check`: the GPU result is outside the tolerance
  kExitInternal = 70,    // anything else (internal error, out of memory)
};

// The one place that maps a library status to an exit code.
int exit_code_for(ssd_status status);
// "SSD_ERROR_INVALID_CONFIG", ...: ssd_status_string, as the C API reports it.
const char* status_name(ssd_status status);

// Output settings shared by every subcommand.
struct Context {
  bool json = false;       // --json: machine-readable result on stdout
  std::string command;     // subcommand being run, for messages ("compile", "cache verify")
};

// Prints `ssdgen: error: <STATUS>: <detail>` on stderr (and, with --json, an error object on
// stdout); returns the exit code for the status.
int fail(const Context& ctx, const ssd::Status& status);
int fail(const Context& ctx, ssd_status code, const std::string& detail);
// Only the stderr line (for commands whose --json output already reports the failure).
int fail_stderr(ssd_status code, const std::string& detail);
// Usage error: `ssdgen: error: usage: <detail>` plus a hint; returns kExitUsage.
int usage_error(const Context& ctx, const std::string& detail);
// `ssdgen: note: <text>` on stderr.
void note(const std::string& text);

// Opens the disk cache. A disabled cache is something the caller reports itself (once), so the
// library's own "kernel cache disabled" warning is dropped; its other messages pass through.
std::unique_ptr<ssd::cache::DiskCache> open_disk_cache(const ssd::cache::Options& options);

// Writes `j` to stdout, pretty-printed; invalid UTF-8 is replaced rather than thrown on.
void print_json(const nlohmann::json& j);

// Iterative depth check: refuse hostile JSON before anything recursive (dump, messages) sees it.
bool json_nested_deeper_than(const nlohmann::json& root, int limit);

// Minimal option scanner: `--name value`, `--name=value`, short `-j N` / `-jN`, `--` ends options.
class ArgCursor {
 public:
  explicit ArgCursor(std::vector<std::string> args) : args_(std::move(args)) {}
  // True at the end or after an error. Steps over a first "--" (which ends the options).
  bool done() {
    skip_double_dash();
    return error_ || i_ >= args_.size();
  }
  // True (and consumes) if the current argument is exactly one of the flag names.
  bool flag(const char* name, const char* alias = nullptr);
  // If the current argument is option `name` (or `alias`): consumes it and its value. A missing
  // value sets error(). Returns nullopt when the current argument is something else.
  std::optional<std::string> value(const char* name, const char* alias = nullptr);
  // The current argument looks like an option (starts with '-', is not "-", and options are on).
  bool at_option() const;
  const std::string& peek() const { return args_[i_]; }
  std::string take() { return args_[i_++]; }
  const std::optional<std::string>& error() const { return error_; }

 private:
  void skip_double_dash();
  std::vector<std::string> args_;
  size_t i_ = 0;
  bool options_done_ = false;
  std::optional<std::string> error_;
};

// Reads a whole (regular) file or "-" for stdin, with a size bound. INVALID_ARGUMENT on failure.
ssd::Result<std::string> read_text_file(const std::string& path, uint64_t max_bytes = 64ull << 20);

// "1048576", "512K", "64M", "4G", "1T" (binary units, optional trailing "B"/"iB").
ssd::Result<uint64_t> parse_byte_size(const std::string& text, const char* what);
// A positive integer option value (e.g. -j); INVALID_ARGUMENT naming `what` otherwise.
ssd::Result<int> parse_positive_int(const std::string& text, const char* what, int max_value);
std::string format_bytes(uint64_t bytes);
// "; did you mean 'compile'?" when `word` is a likely typo of one of `candidates`, else "".
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

// CONFIG syntax (docs/cli.md): a JSON file path, inline JSON starting with '{', or compact
// `key=value,...` pairs. Everything is turned into JSON and goes through config_from_json, so the
// validation messages are the library's.
ssd::Result<nlohmann::json> compact_config_to_json(const std::string& text);
ssd::Result<ssd_kernel_config> parse_config_arg(const std::string& text);
// A file (or "-") holding one config, an array of them, or {"configs": [...]}.
ssd::Result<std::vector<ssd_kernel_config>> read_configs_file(const std::string& path);

// SHAPE syntax of `compile --shape` (docs/cli.md): compact `key=value,...`, inline JSON, or a JSON
// file (one shape object, an array of them, or {"shapes": [...]}).
ssd::Result<std::vector<nlohmann::json>> parse_shape_arg(const std::string& text);
// The kernels ssd_forward / ssd_backward use for one shape (its "pass" field: forward, backward or
// both), through the library's prepare code.
ssd::Result<std::vector<ssd_kernel_config>> shape_kernel_configs(const nlohmann::json& shape, ssd_arch arch,
                                                                  ssd_mode mode);

// Subcommands. `args` are the arguments after the subcommand name.
int cmd_compile(Context& ctx, const std::vector<std::string>& args);
int cmd_presets(Context& ctx, const std::vector<std::string>& args);
int cmd_emit(Context& ctx, const std::vector<std::string>& args);
int cmd_key(Context& ctx, const std::vector<std::string>& args);
int cmd_ptx(Context& ctx, const std::vector<std::string>& args);
int cmd_cache(Context& ctx, const std::vector<std::string>& args);
int cmd_bench(Context& ctx, const std::vector<std::string>& args);  // GPU
int cmd_check(Context& ctx, const std::vector<std::string>& args);  // GPU

// Help texts (help.cpp). `command` is "" for the overview; returns false for an unknown command.
bool print_help(const std::string& command);
std::string version_line();

}  // namespace ssdgen
