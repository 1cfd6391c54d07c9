// `ssdgen emit`, `ssdgen key`, `ssdgen ptx`: look at one specialization without caching anything.
#include <cstdio>
#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "cli.h"
#include "codegen/codegen.h"
#include "compile/kernel_builder.h"
#include "compile/nvrtc_compiler.h"
#include "config/config.h"

namespace ssdgen {
namespace {

void write_stdout(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  if (!text.empty() && text.back() != '\n') std::fputc('\n', stdout);
  std::fflush(stdout);
}

// Scans `args` for the boolean options in `flags` and exactly one CONFIG. Returns an exit code
// (usage error) or -1 when parsing succeeded.
int scan_single_config(Context& ctx, const std::vector<std::string>& args,
                       const std::vector<std::pair<const char*, bool*>>& flags, std::string* config) {
  ArgCursor cur(args);
  std::vector<std::string> positional;
  while (!cur.done()) {
    bool matched = false;
    for (const auto& [name, target] : flags)
      if (cur.flag(name)) {
        *target = true;
        matched = true;
        break;
      }
    if (matched) continue;
    if (cur.done()) break;
    if (cur.at_option()) return usage_error(ctx, fmt::format("unknown option '{}'", cur.peek()));
    positional.push_back(cur.take());
  }
  if (cur.error()) return usage_error(ctx, *cur.error());
  if (positional.empty()) return usage_error(ctx, "missing CONFIG");
  if (positional.size() > 1)
    return usage_error(ctx, fmt::format("expected one CONFIG, got {} arguments (quote a CONFIG with "
                                        "spaces; separate key=value pairs with commas)",
                                        positional.size()));
  *config = positional.front();
  return -1;
}

// CONFIG text -> normalized config + generated unit.
struct Generated {
  ssd_kernel_config config;
  ssd::GeneratedUnit unit;
};

ssd::Result<Generated> generate(const std::string& text) {
  ssd_kernel_config parsed{};
  SSD_ASSIGN_OR_RETURN(parsed, parse_config_arg(text));
  Generated g{};
  SSD_ASSIGN_OR_RETURN(g.config, ssd::normalize_config(parsed));
  SSD_ASSIGN_OR_RETURN(g.unit, ssd::generate_unit(g.config));
  return g;
}

// What `emit` and `ptx` start from: the one CONFIG of `args` (scan_single_config), generated.
// Returns an exit code (usage or config error, reported) or -1 with *g filled.
int generate_single_config(Context& ctx, const std::vector<std::string>& args,
                           const std::vector<std::pair<const char*, bool*>>& flags, Generated* g) {
  std::string text;
  if (int rc = scan_single_config(ctx, args, flags, &text); rc >= 0) return rc;
  auto generated = generate(text);
  if (!generated.ok()) return fail(ctx, generated.status());
  *g = std::move(generated.value());
  return -1;
}

// The text of an embedded template header; nullopt when this build does not embed it.
std::optional<std::string> embedded_text(const std::string& header) {
  const ssd::EmbeddedFile* f = ssd::find_template(header);
  if (!f) return std::nullopt;
  return std::string(f->content);
}

}  // namespace

int cmd_emit(Context& ctx, const std::vector<std::string>& args) {
  bool headers = false;
  Generated g;
  if (int rc = generate_single_config(ctx, args, {{"--headers", &headers}}, &g); rc >= 0) return rc;
  const ssd::GeneratedUnit& unit = g.unit;

  if (ctx.json) {
    nlohmann::json j{{"config", ssd::config_to_json(g.config)},
                     {"label", ssd::config_label(g.config)},
                     {"file_name", unit.file_name},
                     {"symbol", unit.symbol},
                     {"block_threads", unit.block_threads},
                     {"dynamic_shared_bytes", unit.dynamic_shared_bytes},
                     {"headers", unit.headers},
                     {"source", unit.source}};
    if (headers) {
      nlohmann::json contents = nlohmann::json::object();
      for (const std::string& h : unit.headers) {
        const std::optional<std::string> text = embedded_text(h);
        contents[h] = text ? nlohmann::json(*text) : nlohmann::json(nullptr);
      }
      j["header_sources"] = contents;
    }
    print_json(j);
    return kExitOk;
  }

  write_stdout(unit.source);
  if (headers) {
    for (const std::string& h : unit.headers) {
      write_stdout(fmt::format("// ---- {}", h));
      write_stdout(embedded_text(h).value_or("// (not embedded in this build)"));
    }
  }
  return kExitOk;
}

int cmd_key(Context& ctx, const std::vector<std::string>& args) {
  bool explain = false;
  std::string text;
  if (int rc = scan_single_config(ctx, args, {{"--explain", &explain}}, &text); rc >= 0) return rc;
  auto parsed = parse_config_arg(text);
  if (!parsed.ok()) return fail(ctx, parsed.status());
  ssd::KernelBuilder builder(nullptr);
  auto plan = builder.plan(parsed.value());
  if (!plan.ok()) return fail(ctx, plan.status());
  const ssd::KernelKey& key = plan.value().key;

  if (ctx.json) {
    print_json({{"key", key.hex},
                {"record", key.record},
                {"config", ssd::config_to_json(plan.value().config)},
                {"label", ssd::config_label(plan.value().config)},
                {"symbol", plan.value().unit.symbol}});
    return kExitOk;
  }
  if (explain) {
    std::string record = key.record;
    if (!record.empty() && record.back() != '\n') record += '\n';
    write_stdout(record + "key=" + key.hex);
  } else {
    write_stdout(key.hex);
  }
  return kExitOk;
}

int cmd_ptx(Context& ctx, const std::vector<std::string>& args) {
  Generated g;
  if (int rc = generate_single_config(ctx, args, {}, &g); rc >= 0) return rc;
  auto ptx = ssd::compile_ptx(g.unit, g.config.arch);
  if (!ptx.ok()) return fail(ctx, ptx.status());
  if (ctx.json) {
    print_json({{"config", ssd::config_to_json(g.config)},
                {"label", ssd::config_label(g.config)},
                {"symbol", g.unit.symbol},
                {"arch", ssd::arch_name(g.config.arch)},
                {"nvrtc", ssd::nvrtc_version()},
                {"ptx", ptx.value()}});
    return kExitOk;
  }
  write_stdout(ptx.value());
  return kExitOk;
}

}  // namespace ssdgen
