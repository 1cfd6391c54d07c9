// The argument checks of the typed operations through the public C API (include/ssd/ssd.h,
// docs/api.md), without a GPU: ssd_forward, ssd_backward, ssd_chunk_cumsum_fwd/_bwd, their
// workspace-size / layout functions and ssd_forward_prepare / ssd_backward_prepare.
//
// Device pointers are fake (aligned, never dereferenced). Each case runs against every entry point
// that takes the same arguments: the size functions and the calls must refuse it with the expected
// status and a detail naming the field; prepare must refuse it too, except for pointer problems
// (prepare never reads pointers, docs/api.md). A call whose arguments pass validation goes on to
// load its kernels and stops there: the test runtime has an arch (no device query), requires cached
// kernels and has an empty cache, so it answers SSD_ERROR_NO_DRIVER / NO_DEVICE without a GPU and
// SSD_ERROR_CACHE_MISS with one. Nothing is compiled and nothing is launched.
#include <doctest/doctest.h>

#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "ssd/ssd.h"

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

template <class T>
std::vector<T> joined(std::vector<T> a, const std::vector<T>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// ---- fake device memory ------------------------------------------------------------------------

// Each tensor gets its own 1 MiB-aligned fake address (never dereferenced).
void* fake_device_pointer() {
  static uintptr_t next = uintptr_t(1) << 32;
  next += uintptr_t(1) << 20;
  return reinterpret_cast<void*>(next);
}

// Row-major strides whose rows (the innermost axis) hold `row_factor` times the innermost extent,
// with `inner_stride` between its elements: (1, 1) is contiguous; (2, 2) puts the elements on every
// other slot; (2, 1) keeps them packed at the start of padded rows.
void set_row_major_strides(ssd_tensor& t, int64_t row_factor, int64_t inner_stride) {
  int64_t next = row_factor * t.shape[t.ndim - 1];
  t.strides[t.ndim - 1] = inner_stride;
  for (int k = t.ndim - 2; k >= 0; --k) {
    t.strides[k] = next;
    next *= t.shape[k];
  }
}

ssd_tensor device_tensor(ssd_dtype dtype, const std::vector<int64_t>& shape) {
  ssd_tensor t{};
  t.data = fake_device_pointer();
  t.dtype = dtype;
  t.ndim = int32_t(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) t.shape[i] = shape[i];
  set_row_major_strides(t, 1, 1);
  return t;
}

void set_raw_dtype(ssd_tensor& t, int32_t raw) { std::memcpy(&t.dtype, &raw, sizeof raw); }

const char* dtype_text(ssd_dtype d) {
  switch (d) {
    case SSD_DTYPE_BF16: return "bf16";
    case SSD_DTYPE_FP16: return "fp16";
    case SSD_DTYPE_FP32: return "fp32";
    case SSD_DTYPE_INT32: return "int32";
  }
  return "?";
}

// ---- the runtime the calls run on ----------------------------------------------------------------

class TestRuntime {
 public:
  TestRuntime() {
    std::string pattern = (std::filesystem::temp_directory_path() / "ssd_api_checks_XXXXXX").string();
    if (!mkdtemp(pattern.data())) return;
    cache_dir_ = pattern;
    ssd_runtime_options o;
    ssd_runtime_options_init(&o);
    o.arch = SSD_ARCH_SM90A;  // no device query
    o.cache_mode = 2;         // require-cached against an empty cache: never compiles
    o.cache_dir = cache_dir_.c_str();
    if (ssd_runtime_create(&o, &runtime_) != SSD_OK) runtime_ = nullptr;
  }
  ~TestRuntime() {
    ssd_runtime_destroy(runtime_);
    std::error_code ignored;
    if (!cache_dir_.empty()) std::filesystem::remove_all(cache_dir_, ignored);
  }
  ssd_runtime* get() const { return runtime_; }

 private:
  std::string cache_dir_;
  ssd_runtime* runtime_ = nullptr;
};

ssd_runtime* test_runtime() {
  static TestRuntime runtime;
  return runtime.get();
}

// What a call returns once its arguments have passed validation (see the top of the file).
bool passed_validation(ssd_status s) {
  return s == SSD_ERROR_NO_DRIVER || s == SSD_ERROR_NO_DEVICE || s == SSD_ERROR_CACHE_MISS;
}

// ---- entry points and cases ----------------------------------------------------------------------

enum class Stage {
  Size,     // workspace size / layout: validates everything but the workspace
  Prepare,  // validates everything but pointers and the workspace
  Call,     // validates everything, then needs kernels
};

bool accepted(Stage stage, ssd_status s) {
  switch (stage) {
    case Stage::Size: return s == SSD_OK;
    case Stage::Prepare: return s == SSD_ERROR_CACHE_MISS;
    case Stage::Call: return passed_validation(s);
  }
  return false;
}

template <class Args>
struct EntryPoint {
  const char* name;
  Stage stage;
  std::function<ssd_status(const Args*)> run;
};

// Which entry points refuse a case.
enum class Scope {
  All,
  PointerReaders,  // a pointer problem: not prepare
};

template <class Args>
struct Case {
  std::string what;
  std::function<void(Args&)> mutate;
  ssd_status status;   // SSD_OK: every entry point accepts the mutated arguments
  std::string detail;  // part of ssd_last_error_detail()
  Scope scope = Scope::All;
};

template <class Args>
void check_cases(const Args& valid, const std::vector<EntryPoint<Args>>& entries,
                 const std::vector<Case<Args>>& cases) {
  for (const EntryPoint<Args>& e : entries) {
    const ssd_status s = e.run(&valid);
    INFO((std::string(e.name) + " on the valid arguments: " + ssd_status_string(s) + " " + ssd_last_error_detail()));
    CHECK(accepted(e.stage, s));
  }
  for (const Case<Args>& c : cases) {
    Args a = valid;
    c.mutate(a);
    for (const EntryPoint<Args>& e : entries) {
      const ssd_status s = e.run(&a);
      const std::string detail = ssd_last_error_detail();
      INFO((std::string(e.name) + ", " + c.what + ": " + ssd_status_string(s) + " \"" + detail + "\""));
      const bool refused = c.status != SSD_OK && (c.scope == Scope::All || e.stage != Stage::Prepare);
      if (refused) {
        CHECK(s == c.status);
        CHECK(contains(detail, c.detail));
      } else {
        CHECK(accepted(e.stage, s));
      }
    }
  }
}

// One tensor field of an argument struct and the contract docs/api.md gives it.
template <class Args>
struct Field {
  const char* name;
  ssd_tensor Args::*member;
  bool required;                         // in the valid arguments (optional ones are given there too)
  bool output;                           // must not overlap itself
  std::vector<int> reference_axes;       // sizes the other tensors are checked against
  std::vector<ssd_dtype> refused_dtypes;  // enumerators it must not take (given the valid arguments)
  const char* every_other_inner;  // detail refusing a stride-2 innermost axis; nullptr: accepted
  const char* padded_rows;        // detail refusing rows longer than the innermost extent; nullptr: accepted
};

constexpr const char* kAccepted = nullptr;
constexpr const char* kUnitInner = "innermost stride is 2, must be 1";
constexpr const char* kStateRows = "headdim stride 32 must equal dstate 16";

// The cases every tensor gets: NULL, misaligned, dtype, rank, extents, strides.
template <class Args>
std::vector<Case<Args>> tensor_cases(const Args& valid, const std::vector<Field<Args>>& fields) {
  std::vector<Case<Args>> cases;
  for (const Field<Args>& f : fields) {
    const std::string name = f.name;
    ssd_tensor Args::*member = f.member;
    auto add = [&](const std::string& what, std::function<void(ssd_tensor&)> change, ssd_status status,
                   const std::string& detail, Scope scope = Scope::All) {
      cases.push_back({name + ": " + what, [member, change](Args& a) { change(a.*member); }, status,
                       name + ": " + detail, scope});
    };
    if (f.required)
      add("data NULL", [](ssd_tensor& t) { t.data = nullptr; }, SSD_ERROR_NULL_POINTER, "", Scope::PointerReaders);
    add("pointer off by one byte", [](ssd_tensor& t) { t.data = static_cast<char*>(t.data) + 1; },
        SSD_ERROR_INVALID_ALIGNMENT, "pointer", Scope::PointerReaders);
    for (ssd_dtype d : f.refused_dtypes)
      add(std::string("dtype ") + dtype_text(d), [d](ssd_tensor& t) { t.dtype = d; }, SSD_ERROR_INVALID_DTYPE,
          std::string("dtype ") + dtype_text(d) + " (legal: ");
    for (int32_t raw : {0, 5, 99, -1})
      add("dtype " + std::to_string(raw), [raw](ssd_tensor& t) { set_raw_dtype(t, raw); }, SSD_ERROR_INVALID_DTYPE,
          "dtype " + std::to_string(raw) + " (not an ssd_dtype)");
    const int ndim = (valid.*member).ndim;
    for (int32_t n : {ndim + 1, 0, -1, SSD_MAX_DIMS + 1}) {
      add("ndim " + std::to_string(n), [n](ssd_tensor& t) {
            if (n > t.ndim && n <= SSD_MAX_DIMS) t.shape[t.ndim] = t.strides[t.ndim] = 1;  // a trailing axis of 1
            t.ndim = n;
          }, SSD_ERROR_INVALID_SHAPE, "");
    }
    for (int axis = 0; axis < ndim; ++axis) {
      const std::string at = " on axis " + std::to_string(axis);
      for (int64_t extent : {int64_t(0), int64_t(-3)})
        add("extent " + std::to_string(extent) + at, [axis, extent](ssd_tensor& t) { t.shape[axis] = extent; },
            SSD_ERROR_INVALID_SHAPE, "shape");
      bool reference = false;
      for (int r : f.reference_axes) reference |= r == axis;
      if (!reference)
        add("one more element" + at, [axis](ssd_tensor& t) { t.shape[axis] += 1; }, SSD_ERROR_INVALID_SHAPE, "shape");
      add("negative stride" + at, [axis](ssd_tensor& t) { t.strides[axis] = -1; }, SSD_ERROR_INVALID_STRIDE,
          "stride -1 of dimension " + std::to_string(axis) + " is negative");
    }
    add("offsets reaching 2^62", [](ssd_tensor& t) { t.strides[0] = int64_t(1) << 62; }, SSD_ERROR_INVALID_STRIDE,
        "element offsets exceed 2^62");
    // Stride 0 broadcasts an input; an output would write one element from several places.
    add("stride 0 on axis 0", [](ssd_tensor& t) { t.strides[0] = 0; }, f.output ? SSD_ERROR_INVALID_STRIDE : SSD_OK,
        "strides make elements overlap");
    add("stride 2 on the innermost axis", [](ssd_tensor& t) { set_row_major_strides(t, 2, 2); },
        f.every_other_inner ? SSD_ERROR_INVALID_STRIDE : SSD_OK, f.every_other_inner ? f.every_other_inner : "");
    if (ndim >= 2)
      add("padded rows", [](ssd_tensor& t) { set_row_major_strides(t, 2, 1); },
          f.padded_rows ? SSD_ERROR_INVALID_STRIDE : SSD_OK, f.padded_rows ? f.padded_rows : "");
  }
  return cases;
}

// Cases on the scalar fields every argument struct has.
template <class Args>
std::vector<Case<Args>> scalar_cases(std::initializer_list<int32_t> illegal_chunks, const std::string& legal_chunks) {
  std::vector<Case<Args>> cases;
  for (int32_t q : illegal_chunks)
    cases.push_back({"chunk_size " + std::to_string(q), [q](Args& a) { a.chunk_size = q; }, SSD_ERROR_INVALID_SHAPE,
                     "args.chunk_size: " + std::to_string(q) + " (legal: " + legal_chunks + ")"});
  struct Limits {
    const char* what;
    float lo, hi;
    bool ok;
  };
  const Limits limits[] = {{"lo > hi", 1.f, 0.5f, false},     {"lo NaN", NAN, 1.f, false},
                           {"hi NaN", 0.f, NAN, false},       {"both NaN", NAN, NAN, false},
                           {"lo == hi", 0.25f, 0.25f, true},  {"(-inf, +inf)", -INFINITY, INFINITY, true},
                           {"lo +inf, hi 0", INFINITY, 0.f, false}};
  for (const Limits& l : limits)
    cases.push_back({std::string("dt_limit ") + l.what, [l](Args& a) { a.dt_limit_lo = l.lo; a.dt_limit_hi = l.hi; },
                     l.ok ? SSD_OK : SSD_ERROR_INVALID_ARGUMENT, "args.dt_limit_lo/dt_limit_hi"});
  // struct_size: the library reads what the caller's size covers; a newer header's larger struct is
  // fine, a size smaller than this version's or an absurd one is refused.
  for (size_t size : {size_t(0), sizeof(Args) - 1, sizeof(Args) / 2, size_t(1) << 17})
    cases.push_back({"struct_size " + std::to_string(size), [size](Args& a) { a.struct_size = size; },
                     SSD_ERROR_INVALID_ARGUMENT, "args.struct_size: " + std::to_string(size)});
  cases.push_back({"struct_size of a newer header", [](Args& a) { a.struct_size = sizeof(Args) + 64; }, SSD_OK, ""});
  return cases;
}

template <class Args>
void check_null_args(const std::vector<EntryPoint<Args>>& entries) {
  for (const EntryPoint<Args>& e : entries) {
    INFO(e.name);
    CHECK(e.run(nullptr) == SSD_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(ssd_last_error_detail()) == "args: NULL pointer");
  }
}

// A refused value of an options struct (ssd_launch_options, ssd_prepare_options).
template <class Options>
struct OptionCase {
  std::string what;
  std::function<void(Options&)> mutate;
  std::string detail;  // part of ssd_last_error_detail()
};

// Each case applied to `make()`: every run refuses it with SSD_ERROR_INVALID_ARGUMENT naming it.
template <class Options>
void check_option_refusals(Options (*make)(), const std::vector<OptionCase<Options>>& cases,
                           const std::vector<std::function<ssd_status(const Options*)>>& runs) {
  for (const OptionCase<Options>& c : cases) {
    Options o = make();
    c.mutate(o);
    for (size_t i = 0; i < runs.size(); ++i) {
      const ssd_status s = runs[i](&o);
      const std::string detail = ssd_last_error_detail();
      INFO((c.what + ", entry point " + std::to_string(i) + ": " + ssd_status_string(s) + " " + detail));
      CHECK(s == SSD_ERROR_INVALID_ARGUMENT);
      CHECK(contains(detail, c.detail));
    }
  }
}

template <class Options>
std::vector<OptionCase<Options>> option_struct_size_cases() {
  std::vector<OptionCase<Options>> cases;
  for (size_t size : {size_t(0), size_t(4), size_t(1) << 17})
    cases.push_back({"struct_size " + std::to_string(size), [size](Options& o) { o.struct_size = size; },
                     "options.struct_size: " + std::to_string(size)});
  return cases;
}

template <class Options>
std::vector<OptionCase<Options>> option_mode_cases(std::initializer_list<int32_t> modes) {
  std::vector<OptionCase<Options>> cases;
  for (int32_t mode : modes)
    cases.push_back({"mode " + std::to_string(mode), [mode](Options& o) { o.mode = mode; },
                     "options.mode: " + std::to_string(mode)});
  return cases;
}

ssd_launch_options launch_options() {
  ssd_launch_options o;
  ssd_launch_options_init(&o);
  return o;
}

// The optional tensors (and the gradients that go with them) all absent: every entry point accepts it.
template <class Args>
Case<Args> without(const char* what, std::vector<ssd_tensor Args::*> optional) {
  return {what, [optional](Args& a) {
            for (ssd_tensor Args::*m : optional) (a.*m).data = nullptr;
          }, SSD_OK, ""};
}

// The workspace contract of a call: `run(workspace, bytes)` with `needed` bytes (what the size
// function reported) passes, fewer is SSD_ERROR_WORKSPACE_TOO_SMALL naming workspace_bytes, a
// pointer off `alignment` is SSD_ERROR_INVALID_ALIGNMENT, NULL lets the library allocate.
void check_workspace_rules(const std::function<ssd_status(void*, size_t)>& run, size_t needed, size_t alignment) {
  char* base = static_cast<char*>(fake_device_pointer());
  INFO(("needed " + std::to_string(needed) + ", alignment " + std::to_string(alignment)));
  CHECK(passed_validation(run(base, needed)));
  CHECK(passed_validation(run(base, needed + 4096)));
  CHECK(passed_validation(run(nullptr, 0)));
  if (needed > 0) {
    for (size_t bytes : {needed - 1, size_t(0)}) {
      CHECK(run(base, bytes) == SSD_ERROR_WORKSPACE_TOO_SMALL);
      CHECK(contains(ssd_last_error_detail(),
                     "workspace_bytes: " + std::to_string(bytes) + " given, " + std::to_string(needed) + " needed"));
    }
  }
  for (size_t off : {size_t(1), alignment / 2}) {
    CHECK(run(base + off, needed + alignment) == SSD_ERROR_INVALID_ALIGNMENT);
    CHECK(contains(ssd_last_error_detail(), "workspace: must be " + std::to_string(alignment) + "-byte aligned"));
  }
}

// ---- argument builders ---------------------------------------------------------------------------

struct Dims {
  int64_t b, L, h, p, g, n;
  int32_t Q;
};
// L is not a multiple of Q (a partial last chunk); every extent differs from the others, so that a
// tensor checked against the wrong axis is caught.
constexpr Dims kDims{2, 100, 4, 32, 2, 16, 64};

int64_t nchunks(const Dims& d) { return (d.L + d.Q - 1) / d.Q; }

// The axes of a tensor, named after docs/api.md's shapes.
enum class Axes { BLHP, BLH, BLGN, BHPN, BL, H, HP, BHCQ };

std::vector<int64_t> extents(Axes axes, const Dims& d) {
  switch (axes) {
    case Axes::BLHP: return {d.b, d.L, d.h, d.p};
    case Axes::BLH: return {d.b, d.L, d.h};
    case Axes::BLGN: return {d.b, d.L, d.g, d.n};
    case Axes::BHPN: return {d.b, d.h, d.p, d.n};
    case Axes::BL: return {d.b, d.L};
    case Axes::H: return {d.h};
    case Axes::HP: return {d.h, d.p};
    case Axes::BHCQ: return {d.b, d.h, nchunks(d), d.Q};
  }
  return {};
}

template <class Args>
struct TensorSlot {
  ssd_tensor Args::*member;
  ssd_dtype dtype;
  Axes axes;
};

// Arguments from `init` with every listed tensor given (contiguous, its own fake pointer).
template <class Args>
Args make_args(void (*init)(Args*), const Dims& d, const std::vector<TensorSlot<Args>>& slots) {
  Args a;
  init(&a);
  a.chunk_size = d.Q;
  a.dt_softplus = 1;
  for (const TensorSlot<Args>& s : slots) a.*s.member = device_tensor(s.dtype, extents(s.axes, d));
  return a;
}

// The forward's inputs, which ssd_backward_args repeats under the same names: x, B, C, z bf16, dt
// fp32, D as `D_axes`.
template <class Args>
std::vector<TensorSlot<Args>> forward_input_slots(Axes D_axes) {
  return {{&Args::x, SSD_DTYPE_BF16, Axes::BLHP},          {&Args::dt, SSD_DTYPE_FP32, Axes::BLH},
          {&Args::A, SSD_DTYPE_FP32, Axes::H},             {&Args::B, SSD_DTYPE_BF16, Axes::BLGN},
          {&Args::C, SSD_DTYPE_BF16, Axes::BLGN},          {&Args::D, SSD_DTYPE_FP32, D_axes},
          {&Args::z, SSD_DTYPE_BF16, Axes::BLHP},          {&Args::dt_bias, SSD_DTYPE_FP32, Axes::H},
          {&Args::initial_states, SSD_DTYPE_FP32, Axes::BHPN}, {&Args::seq_idx, SSD_DTYPE_INT32, Axes::BL},
          {&Args::out_x, SSD_DTYPE_BF16, Axes::BLHP}};
}

// Every tensor given, D as (h).
ssd_forward_args forward_args(const Dims& d) {
  using A = ssd_forward_args;
  return make_args<A>(ssd_forward_args_init, d,
                      joined(forward_input_slots<A>(Axes::H), {{&A::out, SSD_DTYPE_BF16, Axes::BLHP},
                                                               {&A::final_states, SSD_DTYPE_FP32, Axes::BHPN}}));
}

// Every tensor given, D and dD as (h, p).
ssd_backward_args backward_args(const Dims& d) {
  using A = ssd_backward_args;
  return make_args<A>(ssd_backward_args_init, d,
                      joined(forward_input_slots<A>(Axes::HP),
                             {{&A::dout, SSD_DTYPE_BF16, Axes::BLHP},
                              {&A::dfinal_states, SSD_DTYPE_FP32, Axes::BHPN},
                              {&A::dx, SSD_DTYPE_BF16, Axes::BLHP},
                              {&A::ddt, SSD_DTYPE_FP32, Axes::BLH},
                              {&A::dA, SSD_DTYPE_FP32, Axes::H},
                              {&A::dB, SSD_DTYPE_BF16, Axes::BLGN},
                              {&A::dC, SSD_DTYPE_BF16, Axes::BLGN},
                              {&A::dD, SSD_DTYPE_FP32, Axes::HP},
                              {&A::dz, SSD_DTYPE_BF16, Axes::BLHP},
                              {&A::ddt_bias, SSD_DTYPE_FP32, Axes::H},
                              {&A::dinitial_states, SSD_DTYPE_FP32, Axes::BHPN}}));
}

// dt, A, dt_bias: the inputs both cumsum directions share.
template <class Args>
std::vector<TensorSlot<Args>> dt_input_slots() {
  return {{&Args::dt, SSD_DTYPE_FP32, Axes::BLH}, {&Args::A, SSD_DTYPE_FP32, Axes::H},
          {&Args::dt_bias, SSD_DTYPE_FP32, Axes::H}};
}

ssd_chunk_cumsum_fwd_args cumsum_fwd_args(const Dims& d) {
  using A = ssd_chunk_cumsum_fwd_args;
  return make_args<A>(ssd_chunk_cumsum_fwd_args_init, d,
                      joined(dt_input_slots<A>(), {{&A::dt_out, SSD_DTYPE_FP32, Axes::BHCQ},
                                                   {&A::dA_cumsum, SSD_DTYPE_FP32, Axes::BHCQ}}));
}

ssd_chunk_cumsum_bwd_args cumsum_bwd_args(const Dims& d) {
  using A = ssd_chunk_cumsum_bwd_args;
  return make_args<A>(ssd_chunk_cumsum_bwd_args_init, d,
                      joined(dt_input_slots<A>(), {{&A::ddA_cumsum, SSD_DTYPE_FP32, Axes::BHCQ},
                                                   {&A::ddt_out, SSD_DTYPE_FP32, Axes::BHCQ},
                                                   {&A::ddt, SSD_DTYPE_FP32, Axes::BLH},
                                                   {&A::dA, SSD_DTYPE_FP32, Axes::H},
                                                   {&A::ddt_bias, SSD_DTYPE_FP32, Axes::H}}));
}

ssd_prepare_options prepare_options() {
  ssd_prepare_options o;
  ssd_prepare_options_init(&o);
  o.arch = SSD_ARCH_SM90A;
  o.jobs = 1;
  return o;
}

// The entry points that read tensor pointers: all but prepare.
template <class Args>
std::vector<EntryPoint<Args>> pointer_readers(const std::vector<EntryPoint<Args>>& entries) {
  std::vector<EntryPoint<Args>> out;
  for (const EntryPoint<Args>& e : entries)
    if (e.stage != Stage::Prepare) out.push_back(e);
  return out;
}

// prepare with options.arch set: no device needed.
template <class Args>
EntryPoint<Args> prepare_entry(const char* name, ssd_status (*prepare)(ssd_runtime*, const Args*,
                                                                        const ssd_prepare_options*,
                                                                        ssd_prepare_report*)) {
  return {name, Stage::Prepare, [prepare](const Args* a) {
            const ssd_prepare_options o = prepare_options();
            return prepare(test_runtime(), a, &o, nullptr);
          }};
}

template <class Args>
EntryPoint<Args> size_entry(const char* name, ssd_status (*size)(const Args*, size_t*)) {
  return {name, Stage::Size, [size](const Args* a) {
            size_t bytes = 0;
            return size(a, &bytes);
          }};
}

std::vector<EntryPoint<ssd_forward_args>> forward_entries() {
  return {
      {"ssd_forward_workspace_layout", Stage::Size,
       [](const ssd_forward_args* a) {
         ssd_forward_layout l{};
         l.struct_size = sizeof l;
         return ssd_forward_workspace_layout(a, &l);
       }},
      prepare_entry<ssd_forward_args>("ssd_forward_prepare", ssd_forward_prepare),
      {"ssd_forward", Stage::Call,
       [](const ssd_forward_args* a) { return ssd_forward(test_runtime(), a, nullptr, nullptr); }},
  };
}

std::vector<EntryPoint<ssd_backward_args>> backward_entries() {
  return {
      size_entry<ssd_backward_args>("ssd_backward_workspace_size", ssd_backward_workspace_size),
      prepare_entry<ssd_backward_args>("ssd_backward_prepare", ssd_backward_prepare),
      {"ssd_backward", Stage::Call,
       [](const ssd_backward_args* a) { return ssd_backward(test_runtime(), a, nullptr, 0, nullptr); }},
  };
}

std::vector<EntryPoint<ssd_chunk_cumsum_fwd_args>> cumsum_fwd_entries() {
  return {{"ssd_chunk_cumsum_fwd", Stage::Call, [](const ssd_chunk_cumsum_fwd_args* a) {
             return ssd_chunk_cumsum_fwd(test_runtime(), a, nullptr, nullptr);
           }}};
}

std::vector<EntryPoint<ssd_chunk_cumsum_bwd_args>> cumsum_bwd_entries() {
  return {
      size_entry<ssd_chunk_cumsum_bwd_args>("ssd_chunk_cumsum_bwd_workspace_size", ssd_chunk_cumsum_bwd_workspace_size),
      {"ssd_chunk_cumsum_bwd", Stage::Call,
       [](const ssd_chunk_cumsum_bwd_args* a) { return ssd_chunk_cumsum_bwd(test_runtime(), a, nullptr, nullptr); }},
  };
}

// ---- the documented contract of each tensor (docs/api.md) ----------------------------------------

using F = ssd_forward_args;
using Bw = ssd_backward_args;

// The forward's inputs (x, B, C, z, out_x follow x's dtype, bf16 here; dt may be any float type);
// out_x is an output of the forward and an input of the backward.
template <class Args>
std::vector<Field<Args>> forward_input_fields(bool out_x_is_output) {
  const std::vector<ssd_dtype> not_x = {SSD_DTYPE_FP16, SSD_DTYPE_FP32, SSD_DTYPE_INT32};
  const std::vector<ssd_dtype> not_fp32 = {SSD_DTYPE_BF16, SSD_DTYPE_FP16, SSD_DTYPE_INT32};
  return {
      {"x", &Args::x, true, false, {0, 1, 2, 3}, {SSD_DTYPE_FP32, SSD_DTYPE_INT32}, kAccepted, kAccepted},
      {"dt", &Args::dt, true, false, {}, {SSD_DTYPE_INT32}, kAccepted, kAccepted},
      {"A", &Args::A, true, false, {}, not_fp32, kAccepted, kAccepted},
      {"B", &Args::B, true, false, {2, 3}, not_x, kAccepted, kAccepted},
      {"C", &Args::C, true, false, {}, not_x, kAccepted, kAccepted},
      {"D", &Args::D, false, false, {}, not_fp32, kAccepted, kAccepted},
      {"z", &Args::z, false, false, {}, not_x, kAccepted, kAccepted},
      {"dt_bias", &Args::dt_bias, false, false, {}, not_fp32, kAccepted, kAccepted},
      {"initial_states", &Args::initial_states, false, false, {}, not_fp32, kUnitInner, kStateRows},
      {"seq_idx", &Args::seq_idx, false, false, {}, {SSD_DTYPE_FP32, SSD_DTYPE_BF16}, kAccepted, kAccepted},
      {"out_x", &Args::out_x, true, out_x_is_output, {}, not_x, kAccepted, kAccepted},
  };
}

const std::vector<ssd_tensor F::*> kForwardOptional = {&F::D, &F::z, &F::out_x, &F::dt_bias, &F::initial_states,
                                                       &F::seq_idx, &F::final_states};
const std::vector<ssd_tensor Bw::*> kBackwardOptional = {
    &Bw::D, &Bw::dD, &Bw::z, &Bw::out_x, &Bw::dz, &Bw::dt_bias, &Bw::ddt_bias, &Bw::initial_states,
    &Bw::dinitial_states, &Bw::seq_idx, &Bw::dfinal_states};

std::vector<Field<F>> forward_fields() {
  return joined(forward_input_fields<F>(true),
                {{"out", &F::out, true, true, {}, {SSD_DTYPE_FP16, SSD_DTYPE_FP32}, kAccepted, kAccepted},
                 {"final_states", &F::final_states, false, true, {}, {SSD_DTYPE_BF16}, kUnitInner, kStateRows}});
}

std::vector<Field<Bw>> backward_fields() {
  const std::vector<ssd_dtype> not_x = {SSD_DTYPE_FP16, SSD_DTYPE_FP32};
  const std::vector<ssd_dtype> not_fp32 = {SSD_DTYPE_BF16, SSD_DTYPE_INT32};
  return joined(forward_input_fields<Bw>(false),
                {
                    {"dout", &Bw::dout, true, false, {}, not_x, kAccepted, kAccepted},
                    {"dfinal_states", &Bw::dfinal_states, false, false, {}, not_fp32, kUnitInner, kStateRows},
                    {"dx", &Bw::dx, true, true, {}, not_x, kAccepted, kAccepted},
                    {"ddt", &Bw::ddt, true, true, {}, {SSD_DTYPE_BF16, SSD_DTYPE_FP16}, kAccepted, kAccepted},
                    {"dA", &Bw::dA, true, true, {}, not_fp32, kAccepted, kAccepted},
                    {"dB", &Bw::dB, true, true, {}, not_x, kAccepted, kAccepted},
                    {"dC", &Bw::dC, true, true, {}, not_x, kAccepted, kAccepted},
                    // docs/api.md: "(h, p) must be contiguous".
                    {"dD", &Bw::dD, true, true, {}, not_fp32, kUnitInner, "must be contiguous (h, p)"},
                    {"dz", &Bw::dz, true, true, {}, not_x, kAccepted, kAccepted},
                    {"ddt_bias", &Bw::ddt_bias, true, true, {}, not_fp32, kAccepted, kAccepted},
                    {"dinitial_states", &Bw::dinitial_states, true, true, {}, not_fp32, kUnitInner, kStateRows},
                });
}

using CF = ssd_chunk_cumsum_fwd_args;
using CB = ssd_chunk_cumsum_bwd_args;

// dt, A, dt_bias (fp32 here) and the (b, h, nchunks, Q) tensors with a unit innermost stride.
template <class Args>
std::vector<Field<Args>> dt_input_fields() {
  const std::vector<ssd_dtype> not_fp32 = {SSD_DTYPE_BF16, SSD_DTYPE_FP16, SSD_DTYPE_INT32};
  return {
      {"dt", &Args::dt, true, false, {0, 1, 2}, {SSD_DTYPE_INT32}, kAccepted, kAccepted},
      {"A", &Args::A, true, false, {}, not_fp32, kAccepted, kAccepted},
      {"dt_bias", &Args::dt_bias, false, false, {}, not_fp32, kAccepted, kAccepted},
  };
}

std::vector<Field<CF>> cumsum_fwd_fields() {
  const std::vector<ssd_dtype> not_fp32 = {SSD_DTYPE_BF16, SSD_DTYPE_INT32};
  return joined(dt_input_fields<CF>(),
                {{"dt_out", &CF::dt_out, true, true, {}, not_fp32, kUnitInner, kAccepted},
                 {"dA_cumsum", &CF::dA_cumsum, true, true, {}, not_fp32, kUnitInner, kAccepted}});
}

std::vector<Field<CB>> cumsum_bwd_fields() {
  const std::vector<ssd_dtype> not_fp32 = {SSD_DTYPE_FP16, SSD_DTYPE_INT32};
  return joined(dt_input_fields<CB>(),
                {{"ddA_cumsum", &CB::ddA_cumsum, true, false, {}, not_fp32, kUnitInner, kAccepted},
                 {"ddt_out", &CB::ddt_out, true, false, {}, not_fp32, kUnitInner, kAccepted},
                 {"ddt", &CB::ddt, true, true, {}, {SSD_DTYPE_BF16, SSD_DTYPE_FP16}, kAccepted, kAccepted},
                 {"dA", &CB::dA, true, true, {}, not_fp32, kAccepted, kAccepted},
                 {"ddt_bias", &CB::ddt_bias, true, true, {}, not_fp32, kAccepted, kAccepted}});
}

// Extents of the reference tensors outside the supported set: (what, mutation, detail).
template <class Args>
std::vector<Case<Args>> head_and_state_cases() {
  std::vector<Case<Args>> cases;
  for (int64_t p : {16, 48, 256})
    cases.push_back({"headdim " + std::to_string(p), [p](Args& a) { a.x.shape[3] = p; }, SSD_ERROR_INVALID_SHAPE,
                     "x: headdim " + std::to_string(p) + " (legal: 32, 64, 128)"});
  for (int64_t n : {8, 24, 512})
    cases.push_back({"dstate " + std::to_string(n), [n](Args& a) { a.B.shape[3] = n; }, SSD_ERROR_INVALID_SHAPE,
                     "B: dstate " + std::to_string(n) + " (legal: 16, 32, 64, 128, 256)"});
  for (int64_t g : {3, 8})
    cases.push_back({"ngroups " + std::to_string(g), [g](Args& a) { a.B.shape[2] = a.C.shape[2] = g; },
                     SSD_ERROR_INVALID_SHAPE, "B: ngroups " + std::to_string(g) + " does not divide nheads 4"});
  return cases;
}

template <class Args>
void check_every_tensor(Args (*make)(const Dims&), const std::vector<EntryPoint<Args>>& entries,
                        const std::vector<Field<Args>>& fields) {
  const Args valid = make(kDims);
  check_cases(valid, entries, tensor_cases(valid, fields));
}

// ddt and ddt_bias, of ssd_backward_args or ssd_chunk_cumsum_bwd_args (dt fp32, dt_bias given):
// ddt takes dt's dtype, ddt_bias is required exactly when dt_bias is given.
template <class Args>
std::vector<Case<Args>> dt_gradient_cases() {
  std::vector<Case<Args>> cases = {
      without<Args>("no dt_bias, no ddt_bias", {&Args::dt_bias, &Args::ddt_bias}),
      {"ddt_bias without dt_bias", [](Args& a) { a.dt_bias.data = nullptr; }, SSD_ERROR_INVALID_ARGUMENT,
       "ddt_bias: given without dt_bias"},
      {"ddt_bias absent with dt_bias", [](Args& a) { a.ddt_bias.data = nullptr; }, SSD_ERROR_NULL_POINTER,
       "ddt_bias: ", Scope::PointerReaders},
  };
  for (ssd_dtype d : {SSD_DTYPE_BF16, SSD_DTYPE_FP16}) {
    const std::string name = dtype_text(d);
    cases.push_back({"dt and ddt in " + name, [d](Args& a) { a.dt.dtype = a.ddt.dtype = d; }, SSD_OK, ""});
    cases.push_back({"ddt in fp32 with dt in " + name, [d](Args& a) { a.dt.dtype = d; }, SSD_ERROR_INVALID_DTYPE,
                     "ddt: dtype fp32 (legal: " + name + ")"});
  }
  return cases;
}

// chunk_size, dt_limit, struct_size, headdim, dstate, ngroups (and `extra`) of ssd_forward_args or
// ssd_backward_args; NULL args.
template <class Args>
void check_scalars_and_extents(Args (*make)(const Dims&), const std::vector<EntryPoint<Args>>& entries,
                               const std::vector<Case<Args>>& extra) {
  std::vector<Case<Args>> cases = scalar_cases<Args>({0, 16, 32, 96, 512, -64}, "64, 128, 256");
  check_cases(make(kDims), entries, joined(joined(cases, head_and_state_cases<Args>()), extra));
  check_null_args(entries);
}

// Shapes across the supported set, one axis at a time from kDims.
std::vector<Dims> supported_dims() {
  std::vector<Dims> all;
  for (int64_t p : {32, 64, 128}) all.push_back({kDims.b, kDims.L, kDims.h, p, kDims.g, kDims.n, kDims.Q});
  for (int64_t n : {16, 32, 64, 128, 256}) all.push_back({kDims.b, kDims.L, kDims.h, kDims.p, kDims.g, n, kDims.Q});
  for (int32_t q : {64, 128, 256}) all.push_back({kDims.b, kDims.L, kDims.h, kDims.p, kDims.g, kDims.n, q});
  for (int64_t g : {1, 2, 4}) all.push_back({kDims.b, kDims.L, kDims.h, kDims.p, g, kDims.n, kDims.Q});
  all.push_back({1, 1, 1, 64, 1, 128, 256});      // one position
  all.push_back({3, 4096, 8, 64, 1, 128, 256});   // whole chunks only
  return all;
}

std::string dims_text(const Dims& d) {
  return "b=" + std::to_string(d.b) + " L=" + std::to_string(d.L) + " h=" + std::to_string(d.h) +
         " p=" + std::to_string(d.p) + " g=" + std::to_string(d.g) + " n=" + std::to_string(d.n) +
         " Q=" + std::to_string(d.Q);
}

template <class Args>
void check_supported_dims(Args (*make)(const Dims&), const std::vector<EntryPoint<Args>>& entries) {
  for (const Dims& d : supported_dims()) {
    const Args a = make(d);
    for (const EntryPoint<Args>& e : entries) {
      const ssd_status s = e.run(&a);
      INFO((std::string(e.name) + " " + dims_text(d) + ": " + ssd_status_string(s) + " " + ssd_last_error_detail()));
      CHECK(accepted(e.stage, s));
    }
  }
}

}  // namespace

// ==== ssd_forward ================================================================================

TEST_CASE("ssd_forward: each tensor's NULL, misaligned, dtype, rank, extent and stride errors name it, in layout, "
          "prepare and call") {
  check_every_tensor(forward_args, forward_entries(), forward_fields());
}

TEST_CASE("ssd_forward: optional tensors may be absent, D may be (h) or (h, p), out_x goes with z") {
  const Dims d = kDims;
  const std::vector<Case<F>> cases = {
      without<F>("no optional tensor", kForwardOptional),
      {"D as (h, p)", [d](F& a) { a.D = device_tensor(SSD_DTYPE_FP32, {d.h, d.p}); }, SSD_OK, ""},
      {"D as (p, h)", [d](F& a) { a.D = device_tensor(SSD_DTYPE_FP32, {d.p, d.h}); }, SSD_ERROR_INVALID_SHAPE,
       "D: shape (32, 4) does not match (4, 32)"},
      {"D as (h, p, 1)", [d](F& a) { a.D = device_tensor(SSD_DTYPE_FP32, {d.h, d.p, 1}); }, SSD_ERROR_INVALID_SHAPE,
       "D: 3 dimensions"},
      {"out_x without z", [](F& a) { a.z.data = nullptr; }, SSD_ERROR_INVALID_ARGUMENT, "out_x: only written with z"},
      {"z and out_x absent", [](F& a) { a.z.data = a.out_x.data = nullptr; }, SSD_OK, ""},
      {"x, B, C, z, out in fp16", [](F& a) {
         for (ssd_tensor* t : {&a.x, &a.B, &a.C, &a.z, &a.out, &a.out_x}) t->dtype = SSD_DTYPE_FP16;
       }, SSD_OK, ""},
      {"dt in bf16", [](F& a) { a.dt.dtype = SSD_DTYPE_BF16; }, SSD_OK, ""},
      {"dt in fp16", [](F& a) { a.dt.dtype = SSD_DTYPE_FP16; }, SSD_OK, ""},
      // Inputs take any non-negative strides: stride 0 everywhere broadcasts one element.
      {"x, z, dt broadcast", [](F& a) {
         for (ssd_tensor* t : {&a.x, &a.z, &a.dt, &a.B, &a.C})
           for (int k = 0; k < t->ndim; ++k) t->strides[k] = 0;
       }, SSD_OK, ""},
  };
  check_cases(forward_args(kDims), forward_entries(), cases);
}

TEST_CASE("ssd_forward: chunk_size, dt_limit, struct_size, headdim, dstate and ngroups outside the supported set "
          "are refused") {
  check_scalars_and_extents<F>(forward_args, forward_entries(), {});
}

TEST_CASE("tensor checks run in the documented order: NULL, dtype, rank and sizes, strides (negative, 2^62, unit "
          "stride, self-overlap), alignment") {
  // docs/api.md, "Tensors": each pair of faults on one tensor reports the one checked first. The
  // tensor: the backward's dinitial_states, a required output with a unit innermost stride.
  struct Fault {
    const char* what;
    std::function<void(ssd_tensor&)> apply;
    ssd_status status;
    const char* detail;
  };
  const std::vector<Fault> in_order = {
      {"NULL", [](ssd_tensor& t) { t.data = nullptr; }, SSD_ERROR_NULL_POINTER, "required with"},
      {"dtype 99", [](ssd_tensor& t) { set_raw_dtype(t, 99); }, SSD_ERROR_INVALID_DTYPE, "dtype 99"},
      {"extent 0", [](ssd_tensor& t) { t.shape[2] = 0; }, SSD_ERROR_INVALID_SHAPE, "shape"},
      {"negative stride", [](ssd_tensor& t) { t.strides[2] = -1; }, SSD_ERROR_INVALID_STRIDE,
       "stride -1 of dimension 2 is negative"},
      {"offsets 2^62", [](ssd_tensor& t) { t.strides[0] = int64_t(1) << 62; }, SSD_ERROR_INVALID_STRIDE,
       "element offsets exceed 2^62"},
      {"innermost stride 2", [](ssd_tensor& t) { t.strides[3] = 2; }, SSD_ERROR_INVALID_STRIDE,
       "innermost stride is 2"},
      {"overlap", [](ssd_tensor& t) { t.strides[1] = 0; }, SSD_ERROR_INVALID_STRIDE, "strides make elements overlap"},
      {"misaligned", [](ssd_tensor& t) { t.data = static_cast<char*>(t.data) + 2; }, SSD_ERROR_INVALID_ALIGNMENT,
       "pointer"},
  };
  std::vector<Case<Bw>> cases;
  for (size_t i = 0; i < in_order.size(); ++i)
    for (size_t j = i + 1; j < in_order.size(); ++j) {
      const Fault first = in_order[i], second = in_order[j];
      // The misalignment is applied last: it moves the pointer that NULL would have cleared.
      cases.push_back({std::string(first.what) + " and " + second.what,
                       [first, second](Bw& a) {
                         second.apply(a.dinitial_states);
                         first.apply(a.dinitial_states);
                       },
                       first.status, std::string("dinitial_states: ") + first.detail});
    }
  // Without prepare, which would report the second fault of a pointer pair.
  check_cases(backward_args(kDims), pointer_readers(backward_entries()), cases);
}

TEST_CASE("ssd_forward_workspace_layout: sections fit in total_bytes, are 256-byte aligned and do not overlap") {
  for (const Dims& d : supported_dims()) {
    for (bool optional : {false, true}) {
      ssd_forward_args a = forward_args(d);
      if (!optional) without<F>("", kForwardOptional).mutate(a);
      ssd_forward_layout l{};
      l.struct_size = sizeof l;
      INFO((dims_text(d) + (optional ? " with" : " without") + " the optional tensors"));
      REQUIRE(ssd_forward_workspace_layout(&a, &l) == SSD_OK);
      CHECK(l.struct_size == sizeof l);
      // docs/api.md: each section contiguous, of these shapes: fp32, P in x's dtype (16-bit).
      const size_t nc = size_t(nchunks(d));
      const size_t chunked = size_t(d.b * d.h) * nc * size_t(d.Q) * 4;
      struct Section {
        const char* name;
        size_t offset, bytes;
      };
      const Section sections[] = {{"dt_out", l.dt_out_offset, chunked},
                                  {"dA_cumsum", l.dA_cumsum_offset, chunked},
                                  {"CB", l.CB_offset, size_t(d.b) * nc * size_t(d.g * d.Q * d.Q) * 4},
                                  {"states", l.states_offset, size_t(d.b) * nc * size_t(d.h * d.p * d.n) * 2}};
      size_t padded_sum = 0;
      for (const Section& s : sections) {
        INFO(s.name);
        CHECK(s.offset % 256 == 0);
        CHECK(s.offset + s.bytes <= l.total_bytes);
        padded_sum += (s.bytes + 255) / 256 * 256;
        for (const Section& o : sections)
          if (&o != &s) CHECK((s.offset + s.bytes <= o.offset || o.offset + o.bytes <= s.offset));
      }
      CHECK(l.total_bytes <= padded_sum);  // no more than alignment padding on top
      // The call accepts exactly that much.
      check_workspace_rules([&a](void* ws, size_t bytes) {
        ssd_forward_args w = a;
        w.workspace = ws;
        w.workspace_bytes = bytes;
        return ssd_forward(test_runtime(), &w, nullptr, nullptr);
      }, l.total_bytes, 256);
    }
  }
}

TEST_CASE("ssd_forward_workspace_layout: layout NULL or too small is refused, a larger struct_size is kept and the "
          "bytes past this header's struct are not written") {
  const ssd_forward_args a = forward_args(kDims);
  CHECK(ssd_forward_workspace_layout(&a, nullptr) == SSD_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(ssd_last_error_detail()) == "layout: NULL pointer");
  for (size_t size : {size_t(0), offsetof(ssd_forward_layout, states_offset)}) {
    ssd_forward_layout l{};
    l.struct_size = size;
    CHECK(ssd_forward_workspace_layout(&a, &l) == SSD_ERROR_INVALID_ARGUMENT);
    CHECK(contains(ssd_last_error_detail(), "layout.struct_size"));
  }
  struct Newer {
    ssd_forward_layout layout;
    unsigned char tail[32];
  } newer;
  std::memset(&newer, 0xab, sizeof newer);
  newer.layout.struct_size = sizeof newer;
  REQUIRE(ssd_forward_workspace_layout(&a, &newer.layout) == SSD_OK);
  CHECK(newer.layout.struct_size == sizeof newer);
  for (unsigned char byte : newer.tail) CHECK(byte == 0xab);
  ssd_forward_layout plain{};
  plain.struct_size = sizeof plain;
  REQUIRE(ssd_forward_workspace_layout(&a, &plain) == SSD_OK);
  CHECK(newer.layout.total_bytes == plain.total_bytes);
  CHECK(newer.layout.states_offset == plain.states_offset);
}

TEST_CASE("ssd_forward: a NULL runtime is refused naming runtime, before the arguments") {
  const ssd_forward_args a = forward_args(kDims);
  for (const ssd_forward_args* args : {&a, static_cast<const ssd_forward_args*>(nullptr)}) {
    CHECK(ssd_forward(nullptr, args, nullptr, nullptr) == SSD_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(ssd_last_error_detail()) == "runtime: NULL pointer");
  }
}

TEST_CASE("ssd_forward: launch options with a bad struct_size are refused") {
  const ssd_forward_args a = forward_args(kDims);
  check_option_refusals<ssd_launch_options>(launch_options, option_struct_size_cases<ssd_launch_options>(),
                                            {[&a](const ssd_launch_options* o) {
                                              return ssd_forward(test_runtime(), &a, o, nullptr);
                                            }});
}

// ==== ssd_backward ===============================================================================

TEST_CASE("ssd_backward: each tensor's NULL, misaligned, dtype, rank, extent and stride errors name it, in size, "
          "prepare and call") {
  check_every_tensor(backward_args, backward_entries(), backward_fields());
}

TEST_CASE("ssd_backward: chunk_size, dt_limit, struct_size, mode, headdim, dstate and ngroups outside the supported "
          "set are refused") {
  std::vector<Case<Bw>> cases;
  for (int32_t mode : {-2, 2, 901})
    cases.push_back({"mode " + std::to_string(mode), [mode](Bw& a) { a.mode = mode; }, SSD_ERROR_INVALID_ARGUMENT,
                     "args.mode: " + std::to_string(mode)});
  for (int32_t mode : {int32_t(SSD_MODE_DETERMINISTIC), int32_t(SSD_MODE_FAST)})
    cases.push_back({"mode " + std::to_string(mode), [mode](Bw& a) { a.mode = mode; }, SSD_OK, ""});
  check_scalars_and_extents<Bw>(backward_args, backward_entries(), cases);
}

TEST_CASE("ssd_forward, ssd_backward: every supported headdim, dstate, chunk_size and ngroups passes validation") {
  check_supported_dims<F>(forward_args, forward_entries());
  check_supported_dims<Bw>(backward_args, backward_entries());
}

TEST_CASE("ssd_backward: each gradient of an optional input is required exactly when that input is given") {
  const Dims d = kDims;
  const std::vector<Case<Bw>> cases = {
      without<Bw>("no optional tensor", kBackwardOptional),
      {"D and dD as (h)",
       [d](Bw& a) {
         a.D = device_tensor(SSD_DTYPE_FP32, {d.h});
         a.dD = device_tensor(SSD_DTYPE_FP32, {d.h});
       },
       SSD_OK, ""},
      {"dD (h) with D (h, p)", [d](Bw& a) { a.dD = device_tensor(SSD_DTYPE_FP32, {d.h}); }, SSD_ERROR_INVALID_SHAPE,
       "dD: 1 dimensions, expected 2"},
      {"out_x without z", [](Bw& a) { a.z.data = nullptr; }, SSD_ERROR_INVALID_ARGUMENT, "out_x: given without z"},
      {"dz without z", [](Bw& a) { a.z.data = a.out_x.data = nullptr; }, SSD_ERROR_INVALID_ARGUMENT,
       "dz: given without z"},
      {"dD without D", [](Bw& a) { a.D.data = nullptr; }, SSD_ERROR_INVALID_ARGUMENT, "dD: given without D"},
      {"dinitial_states without initial_states", [](Bw& a) { a.initial_states.data = nullptr; },
       SSD_ERROR_INVALID_ARGUMENT, "dinitial_states: given without initial_states"},
      {"out_x absent with z", [](Bw& a) { a.out_x.data = nullptr; }, SSD_ERROR_NULL_POINTER,
       "out_x: required with z", Scope::PointerReaders},
      {"dz absent with z", [](Bw& a) { a.dz.data = nullptr; }, SSD_ERROR_NULL_POINTER, "dz: required with z",
       Scope::PointerReaders},
      {"dD absent with D", [](Bw& a) { a.dD.data = nullptr; }, SSD_ERROR_NULL_POINTER, "dD: required with D",
       Scope::PointerReaders},
      {"dinitial_states absent with initial_states", [](Bw& a) { a.dinitial_states.data = nullptr; },
       SSD_ERROR_NULL_POINTER, "dinitial_states: required with initial_states", Scope::PointerReaders},
  };
  check_cases(backward_args(kDims), backward_entries(), joined(cases, dt_gradient_cases<Bw>()));
}

TEST_CASE("ssd_backward_workspace_size: mode -1 sizes deterministic mode, which needs at least fast mode's; the call "
          "accepts exactly that much") {
  for (const Dims& d : supported_dims()) {
    INFO(dims_text(d));
    ssd_backward_args a = backward_args(d);
    size_t by_mode[2] = {0, 0};
    for (int32_t mode : {int32_t(SSD_MODE_DETERMINISTIC), int32_t(SSD_MODE_FAST)}) {
      a.mode = mode;
      REQUIRE(ssd_backward_workspace_size(&a, &by_mode[mode]) == SSD_OK);
      CHECK(by_mode[mode] > 0);
      check_workspace_rules([&a](void* ws, size_t bytes) {
        return ssd_backward(test_runtime(), &a, ws, bytes, nullptr);
      }, by_mode[mode], 256);
    }
    CHECK(by_mode[SSD_MODE_DETERMINISTIC] >= by_mode[SSD_MODE_FAST]);
    a.mode = -1;
    size_t unset = 0;
    REQUIRE(ssd_backward_workspace_size(&a, &unset) == SSD_OK);
    CHECK(unset == by_mode[SSD_MODE_DETERMINISTIC]);
  }
  const ssd_backward_args a = backward_args(kDims);
  CHECK(ssd_backward_workspace_size(&a, nullptr) == SSD_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(ssd_last_error_detail()) == "bytes: NULL pointer");
}

TEST_CASE("ssd_backward: a NULL runtime is refused naming runtime, before the arguments") {
  const ssd_backward_args a = backward_args(kDims);
  for (const ssd_backward_args* args : {&a, static_cast<const ssd_backward_args*>(nullptr)}) {
    CHECK(ssd_backward(nullptr, args, nullptr, 0, nullptr) == SSD_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(ssd_last_error_detail()) == "runtime: NULL pointer");
  }
}

// ==== ssd_forward_prepare / ssd_backward_prepare =================================================

namespace {

// Prepare's own arguments, the same for both directions.
template <class Args>
void check_prepare_options(const Args& args, ssd_status (*prepare)(ssd_runtime*, const Args*,
                                                                     const ssd_prepare_options*, ssd_prepare_report*)) {
  using P = ssd_prepare_options;
  const std::vector<OptionCase<P>> cases = joined(
      joined(option_struct_size_cases<P>(), option_mode_cases<P>({-2, 2})),
      {{"arch 12345", [](P& o) { o.arch = 12345; }, "options.arch: 12345"},
       {"arch 75", [](P& o) { o.arch = 75; }, "options.arch: 75"},
       {"jobs -1", [](P& o) { o.jobs = -1; }, "options.jobs: -1"},
       {"jobs 1000000", [](P& o) { o.jobs = 1000000; }, "options.jobs: 1000000"}});
  check_option_refusals<P>(prepare_options, cases, {[&args, prepare](const P* o) {
                             return prepare(test_runtime(), &args, o, nullptr);
                           }});
  // NULL options: the runtime's arch; NULL report.
  CHECK(prepare(test_runtime(), &args, nullptr, nullptr) == SSD_ERROR_CACHE_MISS);
  for (size_t size : {size_t(0), sizeof(ssd_prepare_report) - 1, size_t(1) << 17}) {
    ssd_prepare_report r{};
    r.struct_size = size;
    const ssd_prepare_options o = prepare_options();
    INFO(("report.struct_size " + std::to_string(size)));
    CHECK(prepare(test_runtime(), &args, &o, &r) == SSD_ERROR_INVALID_ARGUMENT);
    CHECK(contains(ssd_last_error_detail(), "report.struct_size: " + std::to_string(size)));
  }
}

// Sets SSD_CACHE_DIR / SSD_CACHE_MODE for one scope, so that a runtime made from the environment
// (prepare's temporary one) could never compile into the user's cache.
class ScopedCacheEnv {
 public:
  explicit ScopedCacheEnv(const std::string& dir) {
    save("SSD_CACHE_DIR", dir_);
    save("SSD_CACHE_MODE", mode_);
    setenv("SSD_CACHE_DIR", dir.c_str(), 1);
    setenv("SSD_CACHE_MODE", "require-cached", 1);
  }
  ~ScopedCacheEnv() {
    restore("SSD_CACHE_DIR", dir_);
    restore("SSD_CACHE_MODE", mode_);
  }

 private:
  struct Saved {
    bool set = false;
    std::string value;
  };
  static void save(const char* name, Saved& s) {
    const char* v = getenv(name);
    s.set = v != nullptr;
    if (v) s.value = v;
  }
  static void restore(const char* name, const Saved& s) {
    if (s.set) setenv(name, s.value.c_str(), 1);
    else unsetenv(name);
  }
  Saved dir_, mode_;
};

}  // namespace

TEST_CASE("ssd_forward_prepare, ssd_backward_prepare: bad options and report sizes are refused naming the field") {
  check_prepare_options(forward_args(kDims), ssd_forward_prepare);
  check_prepare_options(backward_args(kDims), ssd_backward_prepare);
}

TEST_CASE("ssd_forward_prepare, ssd_backward_prepare: without a runtime, bad arguments are refused like the call's") {
  const ScopedCacheEnv env((std::filesystem::temp_directory_path() / "ssd_api_checks_no_cache").string());
  const ssd_prepare_options o = prepare_options();
  ssd_forward_args f = forward_args(kDims);
  f.B.shape[3] = 24;
  CHECK(ssd_forward_prepare(nullptr, &f, &o, nullptr) == SSD_ERROR_INVALID_SHAPE);
  CHECK(std::string(ssd_last_error_detail()) == "B: dstate 24 (legal: 16, 32, 64, 128, 256)");
  ssd_backward_args b = backward_args(kDims);
  b.dz.dtype = SSD_DTYPE_FP32;
  CHECK(ssd_backward_prepare(nullptr, &b, &o, nullptr) == SSD_ERROR_INVALID_DTYPE);
  CHECK(std::string(ssd_last_error_detail()) == "dz: dtype fp32 (legal: bf16)");
}

// ==== ssd_chunk_cumsum_fwd / _bwd ================================================================

TEST_CASE("ssd_chunk_cumsum_fwd, ssd_chunk_cumsum_bwd: each tensor's NULL, misaligned, dtype, rank, extent and "
          "stride errors name it, in size and call") {
  check_every_tensor(cumsum_fwd_args, cumsum_fwd_entries(), cumsum_fwd_fields());
  check_every_tensor(cumsum_bwd_args, cumsum_bwd_entries(), cumsum_bwd_fields());
}

TEST_CASE("ssd_chunk_cumsum_fwd/_bwd: chunk_size, dt_limit and struct_size outside the supported set are refused; "
          "every chunk size 16..256 passes") {
  const char* legal = "16, 32, 64, 128, 256";
  check_cases(cumsum_fwd_args(kDims), cumsum_fwd_entries(), scalar_cases<CF>({0, 8, 48, 512, -16}, legal));
  check_cases(cumsum_bwd_args(kDims), cumsum_bwd_entries(), scalar_cases<CB>({0, 8, 48, 512, -16}, legal));
  check_null_args(cumsum_fwd_entries());
  check_null_args(cumsum_bwd_entries());
  for (int32_t q : {16, 32, 64, 128, 256}) {
    const Dims d{kDims.b, kDims.L, kDims.h, kDims.p, kDims.g, kDims.n, q};
    INFO(("chunk_size " + std::to_string(q)));
    const ssd_chunk_cumsum_fwd_args f = cumsum_fwd_args(d);
    CHECK(passed_validation(ssd_chunk_cumsum_fwd(test_runtime(), &f, nullptr, nullptr)));
    const ssd_chunk_cumsum_bwd_args b = cumsum_bwd_args(d);
    CHECK(passed_validation(ssd_chunk_cumsum_bwd(test_runtime(), &b, nullptr, nullptr)));
  }
}

TEST_CASE("ssd_chunk_cumsum_bwd: ddt_bias goes with dt_bias, ddt takes dt's dtype") {
  check_cases(cumsum_bwd_args(kDims), cumsum_bwd_entries(), dt_gradient_cases<CB>());
}

TEST_CASE("ssd_chunk_cumsum_bwd: the workspace size serves deterministic mode, fast mode needs none, 16-byte "
          "alignment") {
  ssd_chunk_cumsum_bwd_args a = cumsum_bwd_args(kDims);
  size_t bytes = 0;
  REQUIRE(ssd_chunk_cumsum_bwd_workspace_size(&a, &bytes) == SSD_OK);
  CHECK(bytes > 0);
  for (int32_t mode : {int32_t(SSD_MODE_DETERMINISTIC), int32_t(SSD_MODE_FAST)}) {
    INFO(("mode " + std::to_string(mode)));
    check_workspace_rules([&a, mode](void* ws, size_t n) {
      ssd_chunk_cumsum_bwd_args w = a;
      w.workspace = ws;
      w.workspace_bytes = n;
      ssd_launch_options o;
      ssd_launch_options_init(&o);
      o.mode = mode;
      return ssd_chunk_cumsum_bwd(test_runtime(), &w, &o, nullptr);
    }, mode == SSD_MODE_DETERMINISTIC ? bytes : 0, 16);
  }
  CHECK(ssd_chunk_cumsum_bwd_workspace_size(&a, nullptr) == SSD_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(ssd_last_error_detail()) == "bytes: NULL pointer");
  a.dt.data = nullptr;
  bytes = 123;
  CHECK(ssd_chunk_cumsum_bwd_workspace_size(&a, &bytes) == SSD_ERROR_NULL_POINTER);
  CHECK(bytes == 0);
}

TEST_CASE("ssd_chunk_cumsum_fwd/_bwd: launch options are range-checked, a NULL runtime is named") {
  const ssd_chunk_cumsum_fwd_args f = cumsum_fwd_args(kDims);
  const ssd_chunk_cumsum_bwd_args b = cumsum_bwd_args(kDims);
  using L = ssd_launch_options;
  const std::vector<OptionCase<L>> cases =
      joined(joined(option_struct_size_cases<L>(), option_mode_cases<L>({-2, 2, 7})),
             {{"max_blocks -1", [](L& o) { o.max_blocks = -1; }, "options.max_blocks: -1"}});
  check_option_refusals<L>(launch_options, cases,
                           {[&f](const L* o) { return ssd_chunk_cumsum_fwd(test_runtime(), &f, o, nullptr); },
                            [&b](const L* o) { return ssd_chunk_cumsum_bwd(test_runtime(), &b, o, nullptr); }});
  CHECK(ssd_chunk_cumsum_fwd(nullptr, &f, nullptr, nullptr) == SSD_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(ssd_last_error_detail()) == "runtime: NULL pointer");
  CHECK(ssd_chunk_cumsum_bwd(nullptr, &b, nullptr, nullptr) == SSD_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(ssd_last_error_detail()) == "runtime: NULL pointer");
}

// ==== defects these tests found ================================================================
// Regression tests of three defects the cases above found (each failed before its fix in
// src/ops/ssd_backward.cpp, ssd_forward.cpp or prepare.cpp).

TEST_CASE("ssd_backward_prepare: a strided dD of shape (h) is refused, as size and call refuse it (the gate "
          "kernel writes dD contiguously)") {
  // check_backward (prepare's check) missed the unit stride that gate_bwd's own check requires.
  const Dims d = kDims;
  const std::vector<Case<Bw>> cases = {{"D and dD as (h), dD with stride 2",
                                        [d](Bw& a) {
                                          a.D = device_tensor(SSD_DTYPE_FP32, {d.h});
                                          a.dD = device_tensor(SSD_DTYPE_FP32, {d.h});
                                          a.dD.strides[0] = 2;
                                        },
                                        SSD_ERROR_INVALID_STRIDE, "dD: innermost stride is 2, must be 1"}};
  check_cases(backward_args(kDims), backward_entries(), cases);
}

TEST_CASE("ssd_forward: launch options.mode outside -1, 0, 1 is refused (as chunk_cumsum refuses it)") {
  const ssd_forward_args a = forward_args(kDims);
  check_option_refusals<ssd_launch_options>(launch_options, option_mode_cases<ssd_launch_options>({-2, 2, 7}),
                                            {[&a](const ssd_launch_options* o) {
                                              return ssd_forward(test_runtime(), &a, o, nullptr);
                                            }});
}

namespace {

// Inputs broadcast (stride 0), outputs dense: 2^34 positions of 2^20 heads pass every tensor check
// and the kernels' 32-bit work limits, while the workspace (2^28 chunks of 2^20 heads' 128 x 256
// bf16 states) needs more than 2^64 bytes.
constexpr Dims kHugeDims{1, int64_t(1) << 34, int64_t(1) << 20, 128, 1, 256, 64};

void broadcast_inputs(std::initializer_list<ssd_tensor*> inputs) {
  for (ssd_tensor* t : inputs)
    for (int k = 0; k < t->ndim; ++k) t->strides[k] = 0;
}

ssd_forward_args huge_forward_args() {
  ssd_forward_args a = forward_args(kHugeDims);
  without<F>("", kForwardOptional).mutate(a);
  broadcast_inputs({&a.x, &a.dt, &a.B, &a.C});
  return a;
}

ssd_backward_args huge_backward_args() {
  ssd_backward_args a = backward_args(kHugeDims);
  without<Bw>("", kBackwardOptional).mutate(a);
  broadcast_inputs({&a.x, &a.dt, &a.B, &a.C, &a.dout});
  return a;
}

}  // namespace

TEST_CASE("ssd_forward, ssd_backward: shapes whose workspace exceeds 2^64 bytes are refused by size and call") {
  check_cases(forward_args(kDims), pointer_readers(forward_entries()),
              {{"2^34 positions, 2^20 heads", [](F& a) { a = huge_forward_args(); }, SSD_ERROR_INVALID_SHAPE,
                "ssd_forward needs more than 2^64 bytes of workspace"}});
  check_cases(backward_args(kDims), pointer_readers(backward_entries()),
              {{"2^34 positions, 2^20 heads", [](Bw& a) { a = huge_backward_args(); }, SSD_ERROR_INVALID_SHAPE,
                "ssd_backward needs more than 2^64 bytes of workspace"}});
}

TEST_CASE("ssd_forward_prepare, ssd_backward_prepare: shapes whose workspace exceeds 2^64 bytes are refused, as "
          "the call refuses them") {
  const ssd_prepare_options o = prepare_options();
  const ssd_forward_args f = huge_forward_args();
  CHECK(ssd_forward_prepare(test_runtime(), &f, &o, nullptr) == SSD_ERROR_INVALID_SHAPE);
  const ssd_backward_args b = huge_backward_args();
  CHECK(ssd_backward_prepare(test_runtime(), &b, &o, nullptr) == SSD_ERROR_INVALID_SHAPE);
}
