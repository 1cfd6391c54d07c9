// Specialization validation, defaults, JSON form, presets.
#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include "config/config.h"
#include "kernels/family.h"
#include "presets.h"

using namespace ssd;

namespace {
std::string error_of(const ssd_kernel_config& c) {
  Status s = validate_config(c);
  REQUIRE_FALSE(s.ok());
  CHECK(s.code == SSD_ERROR_INVALID_CONFIG);
  return s.detail;
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// One refused config: the kernel's defaults with one change, and what the error must name.
struct BadConfig {
  ssd_kernel_id kernel;
  void (*change)(ssd_kernel_config& c);
  const char* error;
};
// Each change is refused, and it is the change that is refused: the defaults it starts from validate.
void check_refused(std::initializer_list<BadConfig> cases) {
  for (const BadConfig& b : cases) {
    ssd_kernel_config c = default_config(b.kernel);
    CAPTURE(b.kernel);
    CHECK(validate_config(c).ok());
    b.change(c);
    CAPTURE(b.error);
    CHECK(contains(error_of(c), b.error));
  }
}
}  // namespace

TEST_CASE("defaults validate and normalize to the default tile") {
  for (ssd_kernel_id k : {SSD_KERNEL_CHUNK_CUMSUM_FWD, SSD_KERNEL_CHUNK_CUMSUM_BWD, SSD_KERNEL_REDUCE_HEAD_PARTIALS}) {
    ssd_kernel_config c = default_config(k);
    CHECK(validate_config(c).ok());
    auto n = normalize_config(c);
    REQUIRE(n.ok());
    CHECK(n->tile.m == default_tile(c).m);
    CHECK(n->tile.n == default_tile(c).n);
    CHECK(n->tile.m != 0);
  }
}

TEST_CASE("default tile is a pure function of the specialization") {
  ssd_kernel_config a = default_config(SSD_KERNEL_CHUNK_CUMSUM_BWD);
  ssd_kernel_config b = a;
  CHECK(default_tile(a).m == default_tile(b).m);
  a.chunk_size = 16;
  CHECK(default_tile(a).n == 16);  // positions per step: never larger than the chunk
  CHECK(validate_config(*normalize_config(a)).ok());
}

TEST_CASE("every bad field is named with its legal values") {
  ssd_kernel_config c = default_config(SSD_KERNEL_CHUNK_CUMSUM_FWD);
  c.chunk_size = 48;
  std::string e = error_of(c);
  CHECK(contains(e, "chunk_size"));
  CHECK(contains(e, "16, 32, 64, 128, 256"));

  check_refused({
      {SSD_KERNEL_CHUNK_CUMSUM_FWD, [](ssd_kernel_config& k) { k.dtype = SSD_DTYPE_INT32; }, "dtype"},
      {SSD_KERNEL_CHUNK_CUMSUM_FWD, [](ssd_kernel_config& k) { k.flags = 1u << 7; }, "flags"},
      {SSD_KERNEL_CHUNK_CUMSUM_BWD, [](ssd_kernel_config& k) { k.tile.m = 48; }, "tile.m"},
      {SSD_KERNEL_CHUNK_CUMSUM_BWD, [](ssd_kernel_config& k) { k.chunk_size = 16; k.tile.n = 32; }, "tile.n"},
      {SSD_KERNEL_CHUNK_CUMSUM_BWD, [](ssd_kernel_config& k) { k.tile.m = 128; k.tile.n = 64; }, "m * n <= 2048"},
      // chunk_cumsum_fwd: m heads per block, n threads (kernel_params.cuh, cumsum_geom).
      {SSD_KERNEL_CHUNK_CUMSUM_FWD, [](ssd_kernel_config& k) { k.tile.m = 64; },
       "tile: 64x256 is not legal for chunk_cumsum_fwd (legal: m (heads per block) in 8, 16, 32)"},
      {SSD_KERNEL_CHUNK_CUMSUM_FWD, [](ssd_kernel_config& k) { k.tile.n = 96; },
       "n (threads per block) in 64, 128, 256"},
      // 32 * 257 * 8 bytes > 48 KiB at chunk 256 (legal at chunk 128: below).
      {SSD_KERNEL_CHUNK_CUMSUM_FWD, [](ssd_kernel_config& k) { k.tile = ssd_tile{32, 256, 0, 0, 0}; },
       "must fit in 48 KiB"},
      {SSD_KERNEL_CHUNK_CUMSUM_FWD, [](ssd_kernel_config& k) { k.headdim = 64; }, "headdim"},
      {SSD_KERNEL_CHUNK_CUMSUM_FWD, [](ssd_kernel_config& k) { k.tile.k = 16; }, "tile.k"},
      {SSD_KERNEL_CHUNK_CUMSUM_FWD, [](ssd_kernel_config& k) { k.mode = ssd_mode(7); }, "mode"},
      {SSD_KERNEL_CHUNK_CUMSUM_FWD, [](ssd_kernel_config& k) { k.arch = ssd_arch(75); }, "arch"},
      {SSD_KERNEL_CHUNK_CUMSUM_FWD, [](ssd_kernel_config& k) { k.kernel = ssd_kernel_id(99); }, "kernel"},
      {SSD_KERNEL_REDUCE_HEAD_PARTIALS, [](ssd_kernel_config& k) { k.partials = 9; }, "partials"},
      {SSD_KERNEL_REDUCE_HEAD_PARTIALS, [](ssd_kernel_config& k) { k.dtype = SSD_DTYPE_BF16; }, "dtype"},
  });
  c = default_config(SSD_KERNEL_CHUNK_CUMSUM_FWD);
  c.tile = ssd_tile{32, 256, 0, 0, 0};
  c.chunk_size = 128;
  CHECK(validate_config(c).ok());
}

TEST_CASE("forward kernels: fields and tiles are checked against the templates' constraints") {
  check_refused({
      {SSD_KERNEL_CHUNK_SCAN_FWD, [](ssd_kernel_config& k) { k.headdim = 48; }, "headdim"},
      {SSD_KERNEL_BMM_CHUNK_FWD, [](ssd_kernel_config& k) { k.flags = SSD_FLAG_Z; }, "flags"},
      {SSD_KERNEL_CHUNK_SCAN_FWD, [](ssd_kernel_config& k) { k.flags = SSD_FLAG_D_PER_HEADDIM; }, "D_per_headdim"},
      {SSD_KERNEL_CHUNK_SCAN_FWD, [](ssd_kernel_config& k) { k.dstate = 256; k.tile = {128, 64, 32, 0, 0}; }, "48 KiB"},
      {SSD_KERNEL_CHUNK_STATE_FWD, [](ssd_kernel_config& k) { k.dtype = SSD_DTYPE_FP32; }, "dtype"},
      {SSD_KERNEL_STATE_PASSING_FWD, [](ssd_kernel_config& k) { k.headdim = 64; }, "headdim"},
      // The fused state pass: at most 16 warps of 32 x 32; its flags are seq_idx, initial_states
      // and states_in_dtype (which only it and chunk_scan_fwd read).
      {SSD_KERNEL_CHUNK_STATE_PASSING_FWD,
       [](ssd_kernel_config& k) { k.headdim = 128; k.dstate = 256; k.tile = {128, 256, 16, 0, 0}; },
       "m * n <= 16384 (16 warps of 32 x 32)"},
      {SSD_KERNEL_CHUNK_STATE_PASSING_FWD, [](ssd_kernel_config& k) { k.flags = SSD_FLAG_Z; }, "flags"},
      {SSD_KERNEL_BMM_CHUNK_FWD, [](ssd_kernel_config& k) { k.flags = SSD_FLAG_STATES_IN_DTYPE; }, "flags"},
      {SSD_KERNEL_CHUNK_STATE_FWD, [](ssd_kernel_config& k) { k.flags = SSD_FLAG_STATES_IN_DTYPE; }, "flags"},
  });
  for (uint32_t flags : {uint32_t(SSD_FLAG_STATES_IN_DTYPE),
                         uint32_t(SSD_FLAG_SEQ_IDX | SSD_FLAG_INITIAL_STATES | SSD_FLAG_STATES_IN_DTYPE)}) {
    ssd_kernel_config k = default_config(SSD_KERNEL_CHUNK_STATE_PASSING_FWD);
    k.flags = flags;
    CHECK(validate_config(k).ok());
  }
  for (ssd_kernel_id k : {SSD_KERNEL_BMM_CHUNK_FWD, SSD_KERNEL_CHUNK_STATE_FWD, SSD_KERNEL_STATE_PASSING_FWD,
                          SSD_KERNEL_CHUNK_STATE_PASSING_FWD, SSD_KERNEL_CHUNK_SCAN_FWD}) {
    ssd_kernel_config d = default_config(k);
    d.dstate = k == SSD_KERNEL_STATE_PASSING_FWD ? 0 : 256;
    auto tiles = legal_tiles(d);
    CHECK(!tiles.empty());
    for (const ssd_tile& t : tiles) {
      d.tile = t;
      CHECK(validate_config(d).ok());
    }
  }
}

TEST_CASE("gate_bwd: needs z or D, takes no tile") {
  check_refused({
      {SSD_KERNEL_GATE_BWD, [](ssd_kernel_config& k) { k.flags = 0; }, "nothing to compute"},
      {SSD_KERNEL_GATE_BWD, [](ssd_kernel_config& k) { k.flags = SSD_FLAG_Z | SSD_FLAG_D_PER_HEADDIM; },
        "D_per_headdim only together with D"},
      {SSD_KERNEL_GATE_BWD, [](ssd_kernel_config& k) { k.tile.m = 64; }, "tile.m"},
      {SSD_KERNEL_GATE_BWD, [](ssd_kernel_config& k) { k.flags = SSD_FLAG_SEQ_IDX | SSD_FLAG_D; }, "flags"},
      {SSD_KERNEL_GATE_BWD, [](ssd_kernel_config& k) { k.headdim = 48; }, "headdim"},
  });
  auto n = normalize_config(default_config(SSD_KERNEL_GATE_BWD));
  REQUIRE(n.ok());
  CHECK(n->tile.m == 0);
}

TEST_CASE("read_config honours struct_size") {
  ssd_kernel_config c = default_config(SSD_KERNEL_CHUNK_CUMSUM_BWD);
  c.struct_size = 3;
  auto r = read_config(&c);
  CHECK(r.status().code == SSD_ERROR_INVALID_ARGUMENT);
  CHECK(contains(r.status().detail, "struct_size"));
  CHECK(read_config(nullptr).status().code == SSD_ERROR_INVALID_ARGUMENT);
  // An older caller whose struct ends before `partials` gets the default for it.
  c = default_config(SSD_KERNEL_CHUNK_CUMSUM_BWD);
  c.struct_size = offsetof(ssd_kernel_config, partials);
  c.partials = 5;  // beyond the caller's size: must be ignored
  auto old = read_config(&c);
  REQUIRE(old.ok());
  CHECK(old->partials == 0);
  CHECK(old->struct_size == sizeof(ssd_kernel_config));
}

TEST_CASE("read_config range-checks the enum fields as integers, naming the field") {
  // A C caller can store any int in an enum field; loading it as the enum is undefined behaviour
  // (UBSan: "load of value 12345, which is not a valid value for type 'ssd_arch'").
  auto with_raw = [](size_t offset, int32_t raw) {
    ssd_kernel_config c = default_config(SSD_KERNEL_CHUNK_CUMSUM_FWD);
    std::memcpy(reinterpret_cast<char*>(&c) + offset, &raw, sizeof raw);
    auto r = read_config(&c);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code == SSD_ERROR_INVALID_CONFIG);
    return r.status().detail;
  };
  CHECK(contains(with_raw(offsetof(ssd_kernel_config, kernel), 12345), "kernel: unknown id 12345 (legal: 1 chunk_cumsum_fwd"));
  CHECK(contains(with_raw(offsetof(ssd_kernel_config, kernel), -1), "kernel: unknown id -1"));
  CHECK(contains(with_raw(offsetof(ssd_kernel_config, dtype), 12345), "dtype: unknown value 12345 (legal: 1 bf16"));
  CHECK(contains(with_raw(offsetof(ssd_kernel_config, mode), 2), "mode: unknown value 2 (legal: 0 deterministic, 1 fast)"));
  CHECK(contains(with_raw(offsetof(ssd_kernel_config, arch), 12345), "arch: unknown value 12345 (legal: 80 sm_80"));
  CHECK(contains(with_raw(offsetof(ssd_kernel_config, arch), int32_t(0x80000000u)), "arch: unknown value"));
  // validate_config checks the integers too (its argument may be a struct from C).
  ssd_kernel_config c = default_config(SSD_KERNEL_CHUNK_CUMSUM_FWD);
  const int32_t raw = 12345;
  std::memcpy(&c.dtype, &raw, sizeof raw);
  CHECK(contains(error_of(c), "dtype: unknown value 12345 (legal: 1 bf16"));
}

TEST_CASE("JSON round trip and errors") {
  ssd_kernel_config c = default_config(SSD_KERNEL_CHUNK_CUMSUM_BWD);
  c.dtype = SSD_DTYPE_FP16;
  c.flags = SSD_FLAG_DT_BIAS | SSD_FLAG_DT_SOFTPLUS;
  c.tile = {32, 16, 0, 0, 0};
  c.mode = SSD_MODE_FAST;
  c.arch = SSD_ARCH_SM80;
  auto back = config_from_json(config_to_json(c));
  REQUIRE(back.ok());
  CHECK(config_record(back.value()) == config_record(c));

  CHECK(contains(config_from_json(nlohmann::json{{"kernel", "nope"}}).status().detail, "kernel"));
  CHECK(contains(config_from_json(nlohmann::json{{"kernel", "chunk_cumsum_fwd"}, {"colour", 1}}).status().detail, "colour"));
  CHECK(contains(config_from_json(nlohmann::json{{"kernel", "chunk_cumsum_fwd"}, {"chunk_size", "big"}}).status().detail,
                 "chunk_size"));
  CHECK(contains(config_from_json(nlohmann::json{{"kernel", "chunk_cumsum_fwd"}, {"flags", {"dt_bias", "x"}}}).status().detail,
                 "flags"));
  CHECK(contains(config_from_json(nlohmann::json{{"kernel", "chunk_cumsum_fwd"}, {"tile", {{"q", 1}}}}).status().detail,
                 "tile.q"));
  auto many = configs_from_json_text(R"({"configs": [{"kernel": "chunk_cumsum_fwd"}, {"kernel": "reduce_head_partials", "partials": 2}]})");
  REQUIRE(many.ok());
  CHECK(many->size() == 2);
  auto bad = configs_from_json_text(R"([{"kernel": "chunk_cumsum_fwd"}, {"kernel": "chunk_cumsum_fwd", "chunk_size": 7}])");
  CHECK(contains(bad.status().detail, "configs[1].chunk_size"));
  CHECK(configs_from_json_text("{not json").status().code == SSD_ERROR_INVALID_CONFIG);
}

TEST_CASE("hostile JSON values: invalid UTF-8, control bytes, huge integers are config errors naming the field") {
  using nlohmann::json;
  auto error = [](const json& j) {
    auto r = config_from_json(j);  // before: type_error 316 escaped from the message's dump()
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code == SSD_ERROR_INVALID_CONFIG);
    return r.status().detail;
  };
  CHECK(error(json{{"kernel", "chunk_cumsum_fwd"}, {"chunk_size", "\xfb"}}) ==
        "chunk_size: expected an integer, got \"\\xfb\"");
  CHECK(error(json{{"kernel", "chunk_cumsum_fwd"}, {"tile", {{"m", "64\xc3"}}}}) ==
        "tile.m: expected an integer, got \"64\\xc3\"");
  // Control bytes are escaped; UTF-8 text is kept; long values are cut at a character boundary.
  CHECK(contains(error(json{{"kernel", std::string("a\0b\x1b[2J\n", 8)}}), "unknown value 'a\\x00b\\x1b[2J\\x0a'"));
  CHECK(contains(error(json{{"kernel", "chunk_cumsum_fwd"}, {"dtype", "b\xc3\xa9" "f"}}), "unknown value 'b\xc3\xa9" "f'"));
  CHECK(contains(error(json{{"kernel", "chunk_cumsum_fwd"}, {"flags", {"\x7f"}}}), "unknown flag '\\x7f'"));
  CHECK(contains(error(json{{"kernel", "chunk_cumsum_fwd"}, {"\x1b", 1}}), "\\x1b: unknown field"));
  // C1 controls (CSI is U+009B, "\xc2\x9b" in UTF-8) are valid UTF-8 but escaped as well.
  CHECK(contains(error(json{{"kernel", "a\xc2\x9b" "2J"}}), "unknown value 'a\\xc2\\x9b2J'"));
  CHECK(contains(error(json{{"kernel", "chunk_cumsum_fwd"}, {"chunk_size", std::string(39, 'x') + "\xc3\xa9yyy"}}),
                 "got \"" + std::string(39, 'x') + "...\""));
  // 2^63 and more: the value as given, not wrapped to a negative number.
  CHECK(error(json{{"kernel", "chunk_cumsum_fwd"}, {"chunk_size", uint64_t(18446744073709551615ull)}}) ==
        "chunk_size: 18446744073709551615 is out of range");
  CHECK(error(json{{"kernel", "chunk_cumsum_fwd"}, {"tile", {{"n", uint64_t(1) << 63}}}}) ==
        "tile.n: 9223372036854775808 is out of range");
  CHECK(error(json{{"kernel", "chunk_cumsum_fwd"}, {"chunk_size", uint64_t(1) << 31}}) ==
        "chunk_size: 2147483648 is out of range");
  CHECK(contains(error(json{{"kernel", "chunk_cumsum_fwd"}, {"chunk_size", int64_t(-1)}}), "chunk_size: -1 is not legal"));
}

TEST_CASE("duplicate JSON keys are refused, naming the key") {
  auto dup = [](const std::string& text) {
    auto r = configs_from_json_text(text);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code == SSD_ERROR_INVALID_CONFIG);
    return r.status().detail;
  };
  CHECK(dup(R"({"kernel":"chunk_cumsum_fwd","chunk_size":64,"chunk_size":128})") == "configs: chunk_size: given twice");
  CHECK(dup(R"({"kernel":"chunk_cumsum_fwd","tile":{"m":64,"n":16,"m":32}})") == "configs: tile.m: given twice");
  CHECK(dup(R"([{"kernel":"chunk_cumsum_fwd"},{"kernel":"chunk_cumsum_bwd","kernel":"chunk_cumsum_fwd"}])") ==
        "configs[1].kernel: given twice");
  CHECK(dup(R"({"configs":[{"kernel":"chunk_cumsum_fwd"}],"configs":[]})") == "configs: configs: given twice");
  CHECK(dup(R"({"configs":[[1,{"a":1}],{"kernel":"chunk_cumsum_fwd","dtype":"fp16","dtype":"bf16"}]})") ==
        "configs: configs[1].dtype: given twice");
  // The same key in different objects, or at different depths, is no duplicate.
  auto two = configs_from_json_text(
      R"([{"kernel":"chunk_cumsum_fwd","chunk_size":64,"tile":{"m":16}},{"kernel":"chunk_cumsum_fwd","chunk_size":128}])");
  REQUIRE(two.ok());
  CHECK(two->at(0).chunk_size == 64);
  CHECK(two->at(1).chunk_size == 128);
  // Syntax errors say where; the input they quote is escaped.
  auto syntax = parse_config_json("{\"kernel\": \"\xfb\"}");
  REQUIRE_FALSE(syntax.ok());
  CHECK(contains(syntax.status().detail, "invalid JSON: parse error at line 1, column"));
  CHECK(contains(syntax.status().detail, "\\xfb"));
  CHECK_FALSE(contains(syntax.status().detail, "\xfb"));
}

TEST_CASE("presets expand to valid configs") {
  REQUIRE(ssdgen::find_preset("small").ok());
  REQUIRE(ssdgen::find_preset("nemotronh-56b").ok());
  CHECK(contains(ssdgen::find_preset("tiny").status().detail, "nemotronh-56b"));
  for (const ssdgen::ModelPreset& p : ssdgen::model_presets())
    for (ssd_arch a : {SSD_ARCH_SM80, SSD_ARCH_SM90, SSD_ARCH_SM90A})
      for (ssd_mode m : {SSD_MODE_DETERMINISTIC, SSD_MODE_FAST})
        for (const ssd_kernel_config& c : ssdgen::preset_configs(p, a, m)) CHECK(validate_config(c).ok());
}

TEST_CASE("legal tiles all validate") {
  for (ssd_kernel_id k : {SSD_KERNEL_CHUNK_CUMSUM_FWD, SSD_KERNEL_REDUCE_HEAD_PARTIALS}) {
    ssd_kernel_config c = default_config(k);
    auto tiles = legal_tiles(c);
    CHECK(tiles.size() >= 4);
    for (const ssd_tile& t : tiles) {
      c.tile = t;
      CHECK(validate_config(c).ok());
    }
  }
}

TEST_CASE("backward kernels: defaults are legal for every shape; fields they do not read must be 0") {
  const ssd_kernel_id kernels[] = {SSD_KERNEL_GATE_BWD, SSD_KERNEL_CHUNK_SCAN_BWD_DSTATES, SSD_KERNEL_STATE_PASSING_BWD,
                                   SSD_KERNEL_CHUNK_SCAN_BWD_DX,      SSD_KERNEL_CHUNK_SCAN_BWD_DCB,
                                   SSD_KERNEL_CHUNK_SCAN_BWD_DDA_INTRA, SSD_KERNEL_CHUNK_STATE_BWD_DB,
                                   SSD_KERNEL_CHUNK_SCAN_BWD_DC,      SSD_KERNEL_CHUNK_SCAN_BWD_DDA};
  int checked = 0;
  for (int32_t Q : {64, 128, 256})
    for (int32_t P : {32, 64, 128})
      for (int32_t N : {16, 64, 256})
        for (ssd_kernel_id k : kernels) {
          const ssd_kernel_config c = config_for_shape(k, {Q, P, N, 8, SSD_DTYPE_BF16},
                                                       SSD_FLAG_SEQ_IDX | SSD_FLAG_D | SSD_FLAG_Z,
                                                       SSD_MODE_DETERMINISTIC, SSD_ARCH_SM90A);
          CAPTURE(config_label(c));
          REQUIRE(validate_config(c).ok());
          auto n = normalize_config(c);
          REQUIRE(n.ok());
          ssd_kernel_config explicit_tile = c;
          explicit_tile.tile = n->tile;  // the default tile, given explicitly, passes the tile rules
          CHECK(validate_config(explicit_tile).ok());
          const std::vector<ssd_tile> tiles = legal_tiles(c);
          CHECK(!tiles.empty());
          for (const ssd_tile& t : tiles) {
            ssd_kernel_config l = c;
            l.tile = t;
            CHECK(validate_config(l).ok());
          }
          ++checked;
        }
  CHECK(checked == 27 * 9);  // gate_bwd + the eight kernels per shape
  for (ssd_kernel_id k : kernels) {
    ssd_kernel_config c = default_config(k);
    CAPTURE(kernel_name(k));
    CHECK(validate_config(c).ok());
    c.partials = 1;
    CHECK(contains(error_of(c), "partials"));
  }
  ssd_kernel_config c = default_config(SSD_KERNEL_CHUNK_SCAN_BWD_DCB);
  c.dstate = 64;  // dcb contracts over headdim only
  CHECK(contains(error_of(c), "dstate"));
  c = default_config(SSD_KERNEL_CHUNK_SCAN_BWD_DX);
  c.tile = {64, 32, 32, 0, 0};  // dx holds all of headdim: n must be 0
  CHECK(contains(error_of(c), "tile"));
  c = default_config(SSD_KERNEL_CHUNK_SCAN_BWD_DX);
  c.headdim = 128;
  c.tile = {128, 0, 32, 0, 0};  // 128 x 128 accumulators per block is over the register budget
  CHECK(contains(error_of(c), "m * headdim <= 8192"));
  c = default_config(SSD_KERNEL_STATE_PASSING_BWD);
  c.dtype = SSD_DTYPE_FP32;  // ds is stored in the input dtype
  CHECK(contains(error_of(c), "dtype"));
  c = default_config(SSD_KERNEL_CHUNK_SCAN_BWD_DCB);
  c.flags = SSD_FLAG_Z;  // dCB does not read dy's second term: z would only split the cache
  CHECK(contains(error_of(c), "flags"));
  // With z, the kernels that build dA's terms from dy take gate_bwd's two terms of dy.
  for (ssd_kernel_id k : {SSD_KERNEL_CHUNK_SCAN_BWD_DSTATES, SSD_KERNEL_CHUNK_SCAN_BWD_DX,
                          SSD_KERNEL_CHUNK_SCAN_BWD_DDA_INTRA}) {
    c = default_config(k);
    c.flags |= SSD_FLAG_Z;
    CAPTURE(kernel_name(k));
    CHECK(validate_config(c).ok());
  }
  c = default_config(SSD_KERNEL_CHUNK_STATE_FWD);
  c.flags = SSD_FLAG_Z;  // the forward's chunk states have no dy
  CHECK(contains(error_of(c), "flags"));
  c = default_config(SSD_KERNEL_CHUNK_CUMSUM_FWD);
  c.flags = SSD_FLAG_DDA_INCREMENTS;  // only the backward cumsum reads it
  CHECK(contains(error_of(c), "flags"));
  c = default_config(SSD_KERNEL_CHUNK_CUMSUM_BWD);
  c.flags = SSD_FLAG_DDA_INCREMENTS;
  CHECK(validate_config(c).ok());
}

TEST_CASE("a dtype that exists but is not legal for a kernel is named in the message, not numbered") {
  struct Case {
    ssd_kernel_id kernel;
    ssd_dtype dtype;
    const char* expected;
  };
  for (const Case& k : {Case{SSD_KERNEL_CHUNK_CUMSUM_FWD, SSD_DTYPE_INT32, "dtype: int32 is not legal for chunk_cumsum_fwd (legal: bf16, fp16, fp32)"},
                        Case{SSD_KERNEL_CHUNK_CUMSUM_BWD, SSD_DTYPE_INT32, "dtype: int32 is not legal for chunk_cumsum_bwd"},
                        Case{SSD_KERNEL_REDUCE_HEAD_PARTIALS, SSD_DTYPE_INT32, "dtype: int32 is not legal for reduce_head_partials (legal: fp32)"},
                        Case{SSD_KERNEL_GATE_BWD, SSD_DTYPE_FP32, "dtype: fp32 is not legal for gate_bwd"},
                        Case{SSD_KERNEL_STATE_PASSING_FWD, SSD_DTYPE_BF16, "dtype: bf16 is not legal for state_passing_fwd"},
                        Case{SSD_KERNEL_STATE_PASSING_BWD, SSD_DTYPE_INT32, "dtype: int32 is not legal for state_passing_bwd"},
                        Case{SSD_KERNEL_CHUNK_SCAN_FWD, SSD_DTYPE_INT32, "dtype: int32 is not legal for chunk_scan_fwd"}}) {
    ssd_kernel_config c = default_config(k.kernel);
    c.dtype = k.dtype;
    const std::string e = error_of(c);
    CAPTURE(e);
    CHECK(contains(e, k.expected));
  }
}
