// Every kernel family (src/kernels) gets these checks without a test of its own: its descriptor is
// consistent with the public enum, its defaults validate and generate a unit, every legal tile
// validates and reaches the template unchanged, and the fields it does not read are refused.
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "codegen/codegen.h"
#include "config/config.h"
#include "kernels/family.h"

using namespace ssd;

namespace {
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("kernel families: one descriptor per id, in enum order, names unique and parseable") {
  const auto& families = kernel_families();
  REQUIRE(!families.empty());
  std::set<std::string> names;
  for (size_t i = 0; i < families.size(); ++i) {
    const KernelFamily& f = *families[i];
    const std::string name = f.name;  // CAPTURE of a const char* prints the pointer
    CAPTURE(name);
    CHECK(int(f.id) == int(i) + 1);  // the enum starts at 1 and has no gaps
    CHECK(find_family(f.id) == &f);
    CHECK(names.insert(f.name).second);
    CHECK(std::string(kernel_name(f.id)) == f.name);
    auto parsed = parse_kernel_name(f.name);
    REQUIRE(parsed.ok());
    CHECK(parsed.value() == f.id);
  }
  CHECK(find_family(0) == nullptr);
  CHECK(find_family(int64_t(families.size()) + 1) == nullptr);
}

TEST_CASE("kernel families: defaults validate, normalize and generate a unit that instantiates the template") {
  for (const KernelFamily* f : kernel_families()) {
    const std::string name = f->name;
    CAPTURE(name);
    const ssd_kernel_config c = default_config(f->id);
    REQUIRE_MESSAGE(validate_config(c).ok(), validate_config(c).detail);
    auto n = normalize_config(c);
    REQUIRE(n.ok());
    auto unit = generate_unit(n.value());
    REQUIRE_MESSAGE(unit.ok(), unit.status().detail);
    CHECK(unit->symbol == std::string("ssd_") + f->name);
    CHECK(contains(unit->source, std::string("#include \"") + f->header + "\""));
    CHECK(contains(unit->source, "struct Spec {"));
    CHECK(contains(unit->source, std::string("ssd_kernels::") + f->params + " params"));
    CHECK(contains(unit->source, std::string("ssd_kernels::") + f->function + "<Spec>(params);"));
    CHECK(unit->block_threads > 0);
  }
}

TEST_CASE("kernel families: every legal tile validates, and its m x n x k reaches the Spec") {
  for (const KernelFamily* f : kernel_families()) {
    const std::string name = f->name;
    CAPTURE(name);
    const ssd_kernel_config c = default_config(f->id);
    const std::vector<ssd_tile> tiles = legal_tiles(c);
    CHECK(!tiles.empty());
    for (const ssd_tile& t : tiles) {
      ssd_kernel_config l = c;
      l.tile = t;
      CAPTURE(config_label(l));
      REQUIRE_MESSAGE(validate_config(l).ok(), validate_config(l).detail);
      auto n = normalize_config(l);
      REQUIRE(n.ok());
      if (t.m || t.n || t.k) CHECK((n->tile.m == t.m && n->tile.n == t.n && n->tile.k == t.k));
    }
  }
}

TEST_CASE("kernel families: a flag the family does not read, warps or stages are refused naming the field") {
  for (const KernelFamily* f : kernel_families()) {
    const std::string name = f->name;
    CAPTURE(name);
    ssd_kernel_config c = default_config(f->id);
    for (int shift = 0; shift < 32; ++shift) {  // every bit, named or not
      const uint32_t bit = 1u << shift;
      if (f->allowed_flags & bit) continue;
      ssd_kernel_config bad = c;
      bad.flags |= bit;
      const Status s = validate_config(bad);
      CHECK(s.code == SSD_ERROR_INVALID_CONFIG);
      CHECK(contains(s.detail, "flags: "));
      CHECK(contains(s.detail, std::string("for ") + f->name));
    }
    for (int which = 0; which < 2; ++which) {
      ssd_kernel_config bad = c;
      (which ? bad.tile.stages : bad.tile.warps) = 2;
      CHECK(contains(validate_config(bad).detail, which ? "tile.stages: 2" : "tile.warps: 2"));
    }
  }
}
