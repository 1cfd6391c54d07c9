// ssdgen: argument parsing and dispatch. The subcommands live in cmd_*.cpp; docs/cli.md.
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli.h"
#include "compile/nvrtc_compiler.h"

namespace ssdgen {
namespace {

using Handler = int (*)(Context&, const std::vector<std::string>&);

struct Command {
  const char* name;
  Handler handler;
};

constexpr Command kCommands[] = {
    {"compile", cmd_compile}, {"emit", cmd_emit},   {"key", cmd_key},
    {"ptx", cmd_ptx},         {"cache", cmd_cache}, {"presets", cmd_presets},
    {"bench", cmd_bench},     {"check", cmd_check},
};

Handler find_command(const std::string& name) {
  for (const Command& c : kCommands)
    if (name == c.name) return c.handler;
  return nullptr;
}

std::string unknown_command(const std::string& name) {
  std::vector<std::string> names{"help"};
  for (const Command& c : kCommands) names.emplace_back(c.name);
  return fmt::format("unknown command '{}'{}", name, did_you_mean(name, names));
}

int print_version(const Context& ctx) {
  if (ctx.json) {
    print_json({{"version", SSD_VERSION_STRING},
                {"api_version", SSD_API_VERSION},
                {"nvrtc", ssd::nvrtc_version()},
                {"line", version_line()}});
  } else {
    std::printf("%s\n", version_line().c_str());
  }
  return kExitOk;
}

int run(Context& ctx, int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i] ? argv[i] : "");

  bool help = false;
  bool version = false;

  // Global options before the command.
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--json") ctx.json = true;
    else if (a == "--help" || a == "-h") help = true;
    else if (a == "--version" || a == "-V") version = true;
    else if (a.size() > 1 && a[0] == '-') return usage_error(ctx, fmt::format("unknown option '{}'", a));
    else break;
  }
  if (version) return print_version(ctx);
  if (i == args.size()) {
    if (help) {
      print_help("");
      return kExitOk;
    }
    usage_error(ctx, "missing command");
    return kExitUsage;
  }

  const std::string command = args[i];
  // --json and --help are accepted anywhere before a "--" (they take no value).
  std::vector<std::string> rest;
  bool options_done = false;
  for (size_t j = i + 1; j < args.size(); ++j) {
    const std::string& a = args[j];
    if (!options_done && a == "--") options_done = true;
    if (!options_done && a == "--json") ctx.json = true;
    else if (!options_done && (a == "--help" || a == "-h")) help = true;
    else rest.push_back(a);
  }

  if (command == "help") {
    const std::string topic = rest.empty() ? std::string() : rest.front();
    if (rest.size() > 1) return usage_error(ctx, "'help' takes at most one command");
    if (!print_help(topic)) return usage_error(ctx, unknown_command(topic));
    return kExitOk;
  }

  Handler handler = find_command(command);
  if (!handler) return usage_error(ctx, unknown_command(command));
  ctx.command = command;
  if (help) {
    print_help(command);
    return kExitOk;
  }
  return handler(ctx, rest);
}

}  // namespace
}  // namespace ssdgen

int main(int argc, char** argv) {
  // Outside the try: a failure still reports as --json asked (docs/cli.md promises the object).
  ssdgen::Context ctx;
  try {
    return ssdgen::run(ctx, argc, argv);
  } catch (const std::bad_alloc&) {
    return ssdgen::fail(ctx, SSD_ERROR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return ssdgen::fail(ctx, SSD_ERROR_INTERNAL, fmt::format("unexpected exception: {}", e.what()));
  } catch (...) {
    return ssdgen::fail(ctx, SSD_ERROR_INTERNAL, "unexpected exception");
  }
}
