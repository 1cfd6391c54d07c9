// `ssdgen cache path | ls | verify | prune | clear | index --rebuild`: disk cache maintenance.
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <iterator>
#include <memory>
#include <tuple>

#include <fmt/format.h>

#include "cache/disk_cache.h"
#include "cli.h"
#include "config/config.h"

namespace ssdgen {
namespace {

void write_stdout(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

std::string format_time(int64_t unix_seconds) {
  if (unix_seconds <= 0) return "-";
  std::time_t t = std::time_t(unix_seconds);
  std::tm tm{};
  if (!::gmtime_r(&t, &tm)) return "-";
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm);
  return buf;
}

// The spec of a listed entry: its config label when the JSON still parses as a config.
std::string spec_label(const std::string& spec_json) {
  nlohmann::json j = nlohmann::json::parse(spec_json, nullptr, false);
  if (j.is_discarded() || json_nested_deeper_than(j, 8)) return spec_json;
  auto c = ssd::config_from_json(j);
  if (!c.ok()) return spec_json;
  return ssd::config_label(c.value());
}

nlohmann::json spec_value(const std::string& spec_json) {
  nlohmann::json j = nlohmann::json::parse(spec_json, nullptr, false);
  if (j.is_discarded() || json_nested_deeper_than(j, 8)) return spec_json;
  return j;
}

struct Opened {
  ssd::cache::Options options;
  std::unique_ptr<ssd::cache::DiskCache> cache;
};

// Maintenance follows SSD_CACHE_MODE like every other cache user: readonly and require-cached
// never store; under readonly `verify` reports bad entries without moving them and `prune` only
// reports; `clear` and `index --rebuild` need readwrite (the library refuses otherwise). A refused
// root (foreign owner, symlink, unsafe permissions) or SSD_CACHE_MODE=off is an error here.
ssd::Result<Opened> open_for_maintenance() {
  Opened o;
  SSD_ASSIGN_OR_RETURN(o.options, ssd::cache::options_from_env());
  o.cache = open_disk_cache(o.options);
  if (!o.cache->disk_enabled())
    return ssd::make_error(SSD_ERROR_CACHE, fmt::format("kernel cache at '{}' is not usable: {}", o.options.root,
                                                        o.cache->disabled_reason()));
  return o;
}

bool writable(const Opened& o) { return o.options.mode == ssd::cache::Mode::ReadWrite; }

int cache_path(Context& ctx) {
  auto options = ssd::cache::options_from_env();
  if (!options.ok()) return fail(ctx, options.status());
  std::unique_ptr<ssd::cache::DiskCache> opened = open_disk_cache(options.value());
  const ssd::cache::DiskCache& cache = *opened;
  const ssd::cache::Options& o = options.value();
  if (ctx.json) {
    print_json({{"root", o.root},
                {"mode", ssd::cache::mode_name(o.mode)},
                {"enabled", cache.disk_enabled()},
                {"disabled_reason", cache.disabled_reason()},
                {"max_bytes", o.max_bytes},
                {"group_shared", o.group_shared}});
    return kExitOk;
  }
  std::string text = fmt::format("root: {}\nmode: {}\n", o.root, ssd::cache::mode_name(o.mode));
  text += cache.disk_enabled() ? std::string("disk: enabled\n")
                               : fmt::format("disk: disabled ({})\n", cache.disabled_reason());
  text += fmt::format("max bytes: {} ({})\n", o.max_bytes, format_bytes(o.max_bytes));
  write_stdout(text);
  return kExitOk;
}

int cache_ls(Context& ctx) {
  auto opened = open_for_maintenance();
  if (!opened.ok()) return fail(ctx, opened.status());
  std::vector<ssd::cache::ListedEntry> entries = opened.value().cache->list();
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return std::tie(a.kernel, a.arch, a.spec_json, a.key) < std::tie(b.kernel, b.arch, b.spec_json, b.key);
  });
  uint64_t total = 0;
  for (const auto& e : entries) total += e.file_bytes;
  const std::string& root = opened.value().options.root;

  if (ctx.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& e : entries)
      list.push_back({{"key", e.key},
                      {"kernel", e.kernel},
                      {"arch", e.arch},
                      {"spec", spec_value(e.spec_json)},
                      {"label", spec_label(e.spec_json)},
                      {"file_bytes", e.file_bytes},
                      {"cubin_sha256", e.cubin_sha256},
                      {"created_unix", e.created_unix},
                      {"last_used_unix", e.last_used_unix}});
    print_json({{"root", root}, {"count", entries.size()}, {"total_bytes", total}, {"entries", list}});
    return kExitOk;
  }
  std::string text;
  if (!entries.empty()) {
    text += fmt::format("{:<12}  {:>10}  {:<16}  {}\n", "KEY", "SIZE", "LAST USED (UTC)", "SPEC");
    for (const auto& e : entries)
      text += fmt::format("{:<12}  {:>10}  {:<16}  {}\n", e.key.substr(0, 12), format_bytes(e.file_bytes),
                          format_time(e.last_used_unix), spec_label(e.spec_json));
  }
  text += fmt::format("{} entries, {} in {}\n", entries.size(), format_bytes(total), root);
  write_stdout(text);
  return kExitOk;
}

int cache_verify(Context& ctx) {
  auto opened = open_for_maintenance();
  if (!opened.ok()) return fail(ctx, opened.status());
  const ssd::cache::VerifyReport report = opened.value().cache->verify_all();
  if (opened.value().options.mode == ssd::cache::Mode::ReadOnly && !report.problems.empty())
    note("SSD_CACHE_MODE=readonly: bad entries are reported but not moved to quarantine");
  const bool bad = report.quarantined > 0 || !report.problems.empty();
  const std::string& root = opened.value().options.root;
  if (ctx.json) {
    print_json({{"root", root},
                {"ok", report.ok},
                {"quarantined", report.quarantined},
                {"problems", report.problems},
                {"status", bad ? "bad" : "ok"}});
  } else {
    std::string text;
    for (const std::string& p : report.problems) text += "bad: " + p + "\n";
    text += fmt::format("{} entries ok, {} bad ({} quarantined)\n", report.ok,
                        std::max<size_t>(report.problems.size(), size_t(report.quarantined)), report.quarantined);
    write_stdout(text);
  }
  if (!bad) return kExitOk;
  return fail_stderr(SSD_ERROR_CACHE,
                     fmt::format("cache verify found {} bad entr{} in {} ({} moved to {}/quarantine)",
                                 std::max<size_t>(report.problems.size(), size_t(report.quarantined)),
                                 report.problems.size() == 1 ? "y" : "ies", root, report.quarantined, root));
}

int cache_prune(Context& ctx, const std::optional<std::string>& max_text) {
  std::optional<uint64_t> requested;
  if (max_text) {
    auto v = parse_byte_size(*max_text, "--max-bytes");
    if (!v.ok()) return fail(ctx, v.status());
    requested = v.value();
  }
  auto opened = open_for_maintenance();
  if (!opened.ok()) return fail(ctx, opened.status());
  const uint64_t max_bytes = requested ? *requested : opened.value().options.max_bytes;
  const ssd::cache::PruneReport r = opened.value().cache->prune(max_bytes);
  if (!writable(opened.value()))
    note(fmt::format("SSD_CACHE_MODE={}: nothing removed (report only)",
                     ssd::cache::mode_name(opened.value().options.mode)));
  if (ctx.json) {
    print_json({{"root", opened.value().options.root},
                {"max_bytes", max_bytes},
                {"removed", r.removed},
                {"bytes_before", r.bytes_before},
                {"bytes_after", r.bytes_after}});
  } else {
    write_stdout(fmt::format("removed {} entries: {} -> {} (limit {})\n", r.removed, format_bytes(r.bytes_before),
                             format_bytes(r.bytes_after), format_bytes(max_bytes)));
  }
  return kExitOk;
}

// A maintenance action that changes the cache: action(opened) on the opened cache, then
// report(opened) when it succeeded.
template <class Action, class Report>
int run_maintenance(Context& ctx, Action action, Report report) {
  auto opened = open_for_maintenance();
  if (!opened.ok()) return fail(ctx, opened.status());
  if (ssd::Status s = action(opened.value()); !s.ok()) return fail(ctx, s);
  report(opened.value());
  return kExitOk;
}

int cache_clear(Context& ctx) {
  return run_maintenance(
      ctx, [](Opened& o) { return o.cache->clear(); },
      [&](const Opened& o) {
        if (ctx.json)
          print_json({{"root", o.options.root}, {"cleared", true}});
        else
          write_stdout(fmt::format("cleared {}\n", o.options.root));
      });
}

int cache_index_rebuild(Context& ctx) {
  return run_maintenance(
      ctx, [](Opened& o) { return o.cache->rebuild_index(); },
      [&](const Opened& o) {
        const size_t n = o.cache->list().size();
        if (ctx.json)
          print_json({{"root", o.options.root}, {"rebuilt", true}, {"entries", n}});
        else
          write_stdout(fmt::format("rebuilt {}/index.json ({} entries)\n", o.options.root, n));
      });
}

}  // namespace

int cmd_cache(Context& ctx, const std::vector<std::string>& args) {
  ArgCursor cur(args);
  if (cur.done()) return usage_error(ctx, "missing cache action (path, ls, verify, prune, clear, index)");
  if (cur.at_option()) return usage_error(ctx, fmt::format("unknown option '{}'", cur.peek()));
  const std::string action = cur.take();
  static const std::vector<std::string> kActions = {"path", "ls", "list", "verify", "prune", "clear", "index"};
  if (std::find(kActions.begin(), kActions.end(), action) == kActions.end())
    return usage_error(ctx, fmt::format("unknown cache action '{}' (path, ls, verify, prune, clear, index){}", action,
                                        did_you_mean(action, kActions)));

  std::optional<std::string> max_bytes;
  bool rebuild = false;
  while (!cur.done()) {
    if (action == "prune") {
      if (auto v = cur.value("--max-bytes")) {
        max_bytes = v;
        continue;
      }
    }
    if (action == "index" && cur.flag("--rebuild")) {
      rebuild = true;
      continue;
    }
    if (cur.done()) break;
    if (cur.at_option()) return usage_error(ctx, fmt::format("unknown option '{}' for 'cache {}'", cur.peek(), action));
    return usage_error(ctx, fmt::format("unexpected argument '{}' for 'cache {}'", cur.peek(), action));
  }
  if (cur.error()) return usage_error(ctx, *cur.error());

  if (action == "path") return cache_path(ctx);
  if (action == "ls" || action == "list") return cache_ls(ctx);
  if (action == "verify") return cache_verify(ctx);
  if (action == "prune") return cache_prune(ctx, max_bytes);
  if (action == "clear") return cache_clear(ctx);
  if (action == "index") {
    if (!rebuild) return usage_error(ctx, "'cache index' needs --rebuild");
    return cache_index_rebuild(ctx);
  }
  return usage_error(ctx, fmt::format("unknown cache action '{}'", action));
}

}  // namespace ssdgen
