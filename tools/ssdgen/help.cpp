// Help texts and the version line. docs/cli.md is the long form; keep the exit codes in step.
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

#include "cli.h"
#include "compile/kernel_key.h"
#include "compile/nvrtc_compiler.h"

#ifndef SSD_VERSION_STRING
#define SSD_VERSION_STRING "unknown"
#endif

namespace ssdgen {
namespace {

constexpr const char* kOverview = R"(ssdgen - JIT kernel compiler for the Mamba2 SSD chunked scan

Usage: ssdgen [--json] COMMAND [ARGS...]

Commands:
  compile   build kernels into the disk cache (--preset, --shape, --configs, --config)
  emit      print the generated CUDA translation unit of a CONFIG
  key       print the cache key of a CONFIG (--explain: the canonical record)
  ptx       print the PTX that NVRTC generates for a CONFIG
  cache     disk cache maintenance: path, ls, verify, prune, clear, index --rebuild
  presets   list the model presets and how many kernels each expands to
  bench     (GPU) time the SSD forward or backward: bench fwd|bwd [--preset P --batch B --seqlen L --iters N]
  check     (GPU) the SSD forward against the float64 oracle: check [--preset P --batch B --seqlen L]
  help      'ssdgen help COMMAND' describes one command

Options (every command):
  --json        machine-readable output on stdout (errors: {"error": {...}})
  -h, --help    help ('ssdgen COMMAND --help' for one command)
  --version     print the version

CONFIG (emit, key, ptx, compile --config) is one of:
  - a path to a JSON file holding one config
  - inline JSON starting with '{'
  - comma-separated key=value pairs, e.g.
      kernel=chunk_cumsum_bwd,dtype=fp16,chunk_size=128,flags=dt_bias+dt_softplus,mode=fast,arch=sm_80,tile=64x16
    fields: kernel, headdim, dstate, chunk_size, heads_per_group, dtype, flags (a+b), tile (MxN),
    mode (deterministic|fast), arch (sm_80|sm_90|sm_90a), partials; missing fields take defaults.

Environment:
  SSD_CACHE_DIR    cache root (default: $XDG_CACHE_HOME/ssdgen, else $HOME/.cache/ssdgen)
  SSD_CACHE_MODE   readwrite (default), readonly, require-cached, off
  SSD_LOG          quiet: no warnings; info: informational messages too

Exit codes:
  0   success
  1   usage error (unknown command or option, missing argument)
  2   invalid config or argument value (INVALID_* statuses, UNSUPPORTED)
  3   compile failure (NVRTC)
  4   cache miss under SSD_CACHE_MODE=require-cached
  5   cache verification found bad entries, or cache maintenance failed
  6   no CUDA driver or device (bench, check)
  7   check: the GPU result is outside the tolerance
  70  internal error

See docs/cli.md for details.
)";

constexpr const char* kCompile = R"(Usage: ssdgen compile (--preset NAME | --shape SHAPE | --configs FILE | --config CONFIG)...
                      [--arch ARCH[,ARCH...]] [--mode deterministic|fast|both] [-j N] [--json]

Builds kernels into the disk cache (SSD_CACHE_DIR): memory, then disk, then NVRTC.

  --preset NAME     every kernel a training step of the model needs ('ssdgen presets');
                    for --arch (default sm_90a) x --mode (default both)
  --shape SHAPE     every kernel ssd_forward/ssd_backward use for that shape (what
                    ssd_*_prepare builds); for --arch x --mode as presets. SHAPE: key=value pairs
                    nheads=,headdim=,dstate= (required), ngroups=1, chunk_size=256, dtype=bf16,
                    dt_dtype=(dtype), D=none|h|hp, z=, dt_bias=, dt_softplus=, initial_states=,
                    seq_idx= (0/1), pass=both|forward|backward; or inline JSON; or a JSON file
                    with one shape, an array of them, or {"shapes": [...]}
  --configs FILE    a JSON file: one config, an array of them, or {"configs": [...]} ("-": stdin)
  --config CONFIG   one config (see 'ssdgen --help' for the CONFIG syntax)
  --arch ARCH       sm_80, sm_90, sm_90a; repeatable or comma-separated. Overrides the arch of
                    --configs/--config configs only when given
  --mode MODE       deterministic, fast or both. Overrides the mode of --configs/--config
                    configs only when given
  -j, --jobs N      parallel compiles (default: number of CPUs)

Prints one line per kernel (compiled | disk | memory | failed, label, short key, registers,
milliseconds) and "N kernels: C compiled, D from cache, F failed". Progress ([k/N]) goes to
stderr. A second run over the same cache compiles nothing.
Exit: 0; 2 invalid config; 3 a compile failed; 4 a kernel was missing under
SSD_CACHE_MODE=require-cached.
)";

constexpr const char* kEmit = R"(Usage: ssdgen emit [--headers] [--json] CONFIG

Prints the CUDA translation unit generated for CONFIG (normalized: default tile filled in).
  --headers   also print every template header it includes, each after a "// ---- <path>" line
)";

constexpr const char* kKey = R"(Usage: ssdgen key [--explain] [--json] CONFIG

Prints the cache key (64 hex characters: SHA-256 of the canonical key record) of CONFIG.
  --explain   print the full canonical record (schema, generator revision, unit hash, NVRTC
              version, options, arch, specialization fields), then "key=<hex>"
)";

constexpr const char* kPtx = R"(Usage: ssdgen ptx [--json] CONFIG

Prints the PTX that NVRTC generates for CONFIG, for the config's arch (no GPU needed).
)";

constexpr const char* kCache = R"(Usage: ssdgen cache ACTION [--json]

Actions:
  path                   print the cache root, the mode (SSD_CACHE_MODE) and whether the disk is used
  ls                     list entries (key, size, last use, specialization)
  verify                 check every entry; bad ones are moved to <root>/quarantine/. Exit 5 if any
  prune [--max-bytes N]  evict least recently used entries down to N bytes (suffix K, M, G, T;
                         default SSD_CACHE_MAX_BYTES, else 4G)
  clear                  remove every entry, lock, quarantined file and the index; keep the root
  index --rebuild        rescan the entries and rewrite index.json

The actions follow SSD_CACHE_MODE: under readonly, verify does not move bad entries and prune
only reports; clear and index --rebuild need readwrite; off refuses them all.
Exit: 0; 2 a malformed SSD_CACHE_* variable or --max-bytes; 5 bad entries found, or the
maintenance failed (also when the cache root is refused).
)";

constexpr const char* kPresets = R"(Usage: ssdgen presets [--arch ARCH[,ARCH...]] [--mode deterministic|fast|both] [--json]

Lists the model presets of 'ssdgen compile --preset' and how many kernels each expands to for the
given arch (default sm_90a) and mode (default both). --json also lists the configs.
)";

constexpr const char* kBench = R"(Usage: ssdgen bench fwd|bwd [--preset NAME] [--batch B] [--seqlen L] [--iters N] [--warmup N]
                        [--arch sm_80|sm_90|sm_90a] [--max-blocks N]
                        [--tiles scan=MxNxK,state_pass=MxNxK,bmm=MxN,state=MxNxK,passing=M] [--staged] [--cp-async] [--z]   (fwd)
                        [--tiles dx=MxNxK,dcb=..,intra=..,dcb_intra=..,db=..,dc=..,dstates=..,passing=M,state_pass=..,
                                 dda=M,cumsum=MxN,recompute_state_pass=MxNxK,recompute_bmm=MxN] [--staged] [--fused-intra] [--cp-async] [--z]
                                 [--slices N] [--slice-buffers K] [--p-per-buffer]   (bwd)

Times ssd_forward on the current GPU (defaults: nemotronh-56b, b=4, L=2048, 100 runs after 10
warm-up) with CUDA events: median per stage and in total. bf16 inputs, D per head, dt_bias,
softplus (the Mamba2 layer's options), deterministic mode. --tiles overrides stage tiles (for
measuring candidates; the library's defaults do not change). --staged runs the states as two
kernels (chunk_state_fwd, state_passing_fwd: the same bits) instead of the fused
chunk_state_passing_fwd. --cp-async runs the sm_90a state pass and chunk_scan_fwd with their cp.async loaders where their
TMA path would run (the same bits; bwd: the recompute's state pass, the fused backward state pass and dx). --z adds the z gate (out = y · silu(z), out_x = y; random bf16 z): the
chunk_scan_fwd specialization with z. --arch builds every kernel for that target instead of the
device's (an sm_90 build runs on an sm_90a device; sm_80 cubins do not load on Hopper): e.g.
`--arch sm_90` times the mma.sync chunk_scan_fwd and state pass next to sm_90a's wgmma ones. --max-blocks caps every
grid axis of the timed calls at N blocks (every kernel walks its work grid-stride: the same bits,
docs/determinism.md D4) to measure persistent grids. The output ends with the host path: the CPU
time of one C-API call, kernels loaded (bwd: once, after the deterministic section — a C-API call
runs the deterministic kernels in either mode — and also that of one replay of the call captured
into a CUDA graph).
`bench bwd` times ssd_backward the same way (random dout; no initial states; with --z also random
z and out_x, and dz written: gate_bwd's z path and the dy_lo passes), each stage and
the total, in deterministic mode and then with the fast (atomic) kernels, with the workspace each
needs (a fast-mode ssd_backward call runs the deterministic kernels: docs/api.md). Deterministic
mode fuses dstates and state_passing_bwd (chunk_state_passing_bwd; its time is the state_passing_bwd
row); --staged runs the pair (and the recompute's staged states), state_pass= sets the fused tile,
recompute_state_pass= / recompute_bmm= the recompute's state pass / bmm_chunk_fwd (bmm=64x64x64 and
recompute_bmm=64x64x64: bmm_chunk_fwd's wgmma kernel on sm_90a; MxN: the mma.sync kernel's tiles).
--fused-intra runs dcb and ddA_intra as one kernel (chunk_scan_bwd_dcb_ddA_intra, each head's dy·xᵀ
once, the same bits; its time is the ddA_intra row and the dcb row reads ~0), dcb_intra= sets its tile.
--slices N / --slice-buffers K run the backward as N group slices through K workspace buffers (the
same bits; default: docs/api.md "Group slices"); a stage's row sums its slices, and "total, one
launch graph" times the call without stage events (slices of different buffers side by side).
--p-per-buffer gives each buffer its own P (the recompute's entering states) instead of one shared
copy, so the slices' state passes need not wait for each other (the same bits, more workspace).
Exit 6 without a driver or device.
)";

constexpr const char* kCheck = R"(Usage: ssdgen check [--preset NAME] [--batch B] [--seqlen L]

Runs ssd_forward on random bf16 inputs (outputs poisoned first) and compares out and
final_states with the float64 oracle (defaults: nemotronh-56b, b=1, L=512). Exit 0 when both
relative L2 errors are below 3e-3, 7 otherwise, 6 without a driver or device.
)";

constexpr const char* kHelp = R"(Usage: ssdgen help [COMMAND]

Prints the overview, or the help of COMMAND (compile, emit, key, ptx, cache, presets).
)";

}  // namespace

bool print_help(const std::string& command) {
  const char* text = nullptr;
  if (command.empty()) text = kOverview;
  else if (command == "compile") text = kCompile;
  else if (command == "emit") text = kEmit;
  else if (command == "key") text = kKey;
  else if (command == "ptx") text = kPtx;
  else if (command == "cache") text = kCache;
  else if (command == "presets") text = kPresets;
  else if (command == "bench") text = kBench;
  else if (command == "check") text = kCheck;
  else if (command == "help") text = kHelp;
  if (!text) return false;
  std::fwrite(text, 1, std::strlen(text), stdout);
  std::fflush(stdout);
  return true;
}

std::string version_line() {
  return fmt::format("ssdgen {} (API {}, key schema {}, generator {}, nvrtc {})", SSD_VERSION_STRING,
                     SSD_API_VERSION, ssd::kKeySchemaVersion, ssd::kGeneratorRevision, ssd::nvrtc_version());
}

}  // namespace ssdgen
