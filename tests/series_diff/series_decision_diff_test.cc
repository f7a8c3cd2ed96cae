// The pinned series' in-tree NVSHMEM decision, its pass, and its pass with the
// thunk's run-time checks, against the tools' core: over a grid of clusters,
// process layouts (round-robin ranks included), programs and device maps, pair
// sets, sizes, element types and flags, and the fuzzers' seeds, both must give
// the same backend. Every intended difference is listed below with its reason
// and, from the case's own facts, where it applies and what the series must
// answer there; the series giving another answer fails (a missed refusal as
// well as an extra one), and so does a listed difference that no case shows.
//
//   series_decision_diff_test --corpus=DIR   (DIR: make_corpus.py's OUT_DIR)

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/series_diff/diff_case.h"
#include "tool_layer/decide.h"
#include "tool_layer/table_text.h"
#include "xla/backends/gpu/transforms/collectives/nvshmem_permute_decision.h"

namespace series_diff {
namespace {

namespace core = ::xla::gpu::backend_selection;

std::string* corpus_dir = new std::string();

// Where the tools' default table puts a ring of B buffers on NVSHMEM (index
// B - 1): the smallest size its measured curve prices at least 5% below
// NCCL's. The series builds in all eight. CrossoverBounds checks both.
constexpr int64_t kToolsCrossover[] = {15928625, 23174132, 19310441, 16513046,
                                       25085878, 33752579, 42388160, 51064529};
// Buffer counts with their own crossover in the series (more keep NCCL).
constexpr int kSeriesCounts =
    static_cast<int>(std::size(xla::gpu::kNvshmemPermuteCrossoverBytes));
static_assert(kSeriesCounts == std::size(kToolsCrossover));

// NVSHMEM_SYMMETRIC_SIZE's default, the heap the series' pass assumes.
constexpr int64_t kDefaultHeapBytes = int64_t{1} << 30;

int64_t SeriesCrossover(int buffers) {
  return xla::gpu::kNvshmemPermuteCrossoverBytes[std::clamp(buffers, 1,
                                                            kSeriesCounts) -
                                                 1];
}

// Whether the program's logical device i runs on device i.
bool IdentityPlacement(const Case& c) {
  const std::vector<int>& map = c.topology->partition_to_device();
  for (int i = 0; i < static_cast<int>(map.size()); ++i) {
    if (map[i] != i) return false;
  }
  return true;
}

// `c` with logical device i on device i: its spec's map replaced.
Case IdentityPlaced(const Case& c) {
  Case placed = c;
  placed.spec = c.spec.substr(0, c.spec.find(":map="));
  if (!c.topology->partition_to_device().empty()) {
    std::vector<int> ids(c.topology->partition_to_device().size());
    for (int i = 0; i < static_cast<int>(ids.size()); ++i) ids[i] = i;
    absl::StrAppend(&placed.spec, ":map=", absl::StrJoin(ids, ","));
  }
  placed.topology = ParsedSpec(placed.spec);
  return placed;
}

// `c` on hosts of `per_host` GPUs (one NVLink domain each): the cluster the
// series' pass is told of.
Case OnHostsOf(const Case& c, int per_host) {
  const core::Topology& t = *c.topology;
  Case told = c;
  const std::string options = c.spec.substr(c.spec.find(':'));
  told.spec =
      absl::StrCat(t.slices(), "x", t.num_devices() / t.slices() / per_host,
                   "x", per_host, options);
  told.topology = ParsedSpec(told.spec);
  told.series_slice_size = c.slice_size();  // The compiler's, unchanged.
  return told;
}

// The levels compared: the decision on the facts, the pass on a module, and
// the pass with the checks of the series' thunk as the program's processes
// initialize it.
constexpr int kDecision = 1, kPass = 2, kRun = 4;

// A listed difference: a fact the series does not take at a level, or a rule
// only the series has. Each says, from the case's own facts, where it applies
// and what the series must answer there; the tools' core is the oracle for
// the rest. Nothing here calls the series' code.
struct Listed {
  const char* name;
  const char* reason;
  int levels;  // Where it applies: kDecision, kPass, kRun.
  // A fact the series does not take: the case with that fact as the series
  // takes it, or nullopt where it already is. The tools' answer on the case
  // with every such fact so replaced is the answer expected.
  std::optional<Case> (*as_seen)(const Case& c) = nullptr;
  // A rule: the series' answer where it applies, given that case, the tools'
  // answer on it and the answer expected so far; nullopt where it does not.
  std::optional<bool> (*answer)(const Case& c, const Answer& tools,
                                bool expected) = nullptr;
};

// `c` as the series' pass sees it: every listed fact of the pass level.
Case PassView(const Case& c);

const Listed kListed[] = {
    {"placement-at-run-time",
     "the series' compile-time rules take id i as PE i and leave the device "
     "assignment to the thunk, which refuses a run where an id's device is "
     "not in the process of that number (the PE a put goes to); the tools' "
     "core refuses NVSHMEM for a logical device off its PE when deciding. "
     "Under a map other than the identity the decision and the pass answer "
     "what the tools answer for the same permute placed by the identity",
     kDecision | kPass,
     [](const Case& c) -> std::optional<Case> {
       if (IdentityPlacement(c)) return std::nullopt;
       return IdentityPlaced(c);
     }},
    {"ids-translated-at-run-time",
     "the series' thunk puts to the PE of each id's device, the process that "
     "runs it in the job (device_to_process), and refuses a run where a pair's "
     "devices are on two hosts (NVSHMEM_TEAM_SHARED); the tools' core refuses "
     "NVSHMEM for a logical device off its PE. Under a map other than the "
     "identity the series runs NVSHMEM where its pass chose it (the tools' "
     "answer on the case as the pass sees it, placed by the identity) and "
     "every pair's devices share a host",
     kRun, nullptr,
     [](const Case& c, const Answer&, bool) -> std::optional<bool> {
       if (IdentityPlacement(c)) return std::nullopt;
       const std::vector<int>& map = c.topology->partition_to_device();
       for (const auto& [source, target] : c.pairs) {
         if (c.topology->HostOf(map[source]) !=
             c.topology->HostOf(map[target])) {
           return false;
         }
       }
       return ToolsDecide(PassView(c)).nvshmem;
     }},
    {"branch-or-group",
     "the series' decision leaves where the permute sits (a conditional's "
     "branch, a collectives group) to the runtime's rules, which its pass "
     "applies first and the thunk emitter again; the tools' core refuses "
     "NVSHMEM there when deciding. There the decision answers what the tools "
     "answer for the same permute anywhere. The series' pass agrees with the "
     "tools",
     kDecision,
     [](const Case& c) -> std::optional<Case> {
       if (c.place == core::Place::kAnywhere) return std::nullopt;
       Case seen = c;
       seen.place = core::Place::kAnywhere;
       return seen;
     }},
    {"in-place-at-pass",
     "the series' decision does not see an in-place permute (into slices of "
     "an output), which the runtime's rules in its pass refuse and the tools' "
     "pass does not rewrite; the decision answers what the tools answer for "
     "the same permute out of place",
     kDecision,
     [](const Case& c) -> std::optional<Case> {
       if (!c.in_place) return std::nullopt;
       Case seen = c;
       seen.in_place = false;
       return seen;
     }},
    {"heap-bound",
     "the series' pass has no option for NVSHMEM's heap: it decides with "
     "NVSHMEM's default symmetric heap, 1 GiB; the tools take the cost "
     "table's bound (nvshmem_max_bytes). Under another bound the pass answers "
     "what the tools answer under the default one; the series' decision, "
     "given the bound, agrees at any",
     kPass | kRun,
     [](const Case& c) -> std::optional<Case> {
       if (!c.heap_bytes || *c.heap_bytes == kDefaultHeapBytes) {
         return std::nullopt;
       }
       Case seen = c;
       seen.heap_bytes.reset();
       return seen;
     }},
    {"host-flag-overstated",
     "the series' pass takes hosts from its devices-per-host flag; told "
     "hosts larger than the cluster's, it answers what the tools answer on "
     "hosts of the flag's size, pairs between the real hosts included. The "
     "thunk's check that each pair stays inside NVSHMEM_TEAM_SHARED then "
     "refuses those at run time, where the tools keep NCCL",
     kDecision | kPass,
     [](const Case& c) -> std::optional<Case> {
       if (c.series_devices_per_host <= c.topology->gpus_per_host()) {
         return std::nullopt;
       }
       return OnHostsOf(c, c.series_devices_per_host);
     }},
    {"part-of-job",
     "the series refuses a program that may run on part of the job: ahead of "
     "time one on fewer devices than the job's, in a JIT compile one whose "
     "device count is not a whole number of the compiler's slices (the "
     "NVLink domain); NVSHMEM's set-up and heap allocations need every "
     "process of the job, and at run time the thunk refuses a program on "
     "fewer devices than the job's processes (whole slices in a JIT compile "
     "pass the compile). The tools' core decides over the program's own "
     "devices and does not model the job",
     kDecision | kPass | kRun, nullptr,
     [](const Case& c, const Answer&, bool) -> std::optional<bool> {
       const int64_t n = c.program_devices(), slice = c.slice_size();
       const bool aot_part = c.job_devices > 0 && n != c.job_devices;
       const bool jit_part = slice > 0 && n % slice != 0;
       return aot_part || jit_part ? std::optional<bool>(false) : std::nullopt;
     }},
    {"part-of-job-at-run-time",
     "at run time the series' thunk refuses a program on fewer devices than "
     "the job's processes, which a JIT compile of whole slices cannot see: "
     "NVSHMEM's heap allocations need every process of the job",
     kRun, nullptr,
     [](const Case& c, const Answer&, bool) -> std::optional<bool> {
       return c.program_devices() != c.topology->num_devices()
                  ? std::optional<bool>(false)
                  : std::nullopt;
     }},
    {"no-host-flag",
     "without its devices-per-host flag the series keeps NCCL: the compiler "
     "cannot tell hosts from an NVLink domain (its GpuTopology's hosts are "
     "processes, and a slice may span hosts), and NVSHMEM's receive barrier "
     "over NVSHMEM_TEAM_SHARED waits for one host's GPUs only. The tools "
     "know the hosts from the spec and may give NVSHMEM to pairs inside a "
     "host. The flag given, they agree",
     kDecision | kPass | kRun, nullptr,
     [](const Case& c, const Answer&, bool) -> std::optional<bool> {
       return c.series_devices_per_host == 0 ? std::optional<bool>(false)
                                             : std::nullopt;
     }},
    {"host-gpus-idle",
     "the tools' core refuses NVSHMEM where a host the pairs touch has GPUs "
     "outside the program (their PEs are in NVSHMEM_TEAM_SHARED and never "
     "enter the barrier); the series leaves that to the executable's guard, "
     "which refuses at run time a program on part of the NVSHMEM job, and at "
     "compile time sees hosts only through its devices-per-host flag. Where "
     "the program is smaller than a host it is told of, the decision and the "
     "pass answer what the tools answer on hosts of the program's size",
     kDecision | kPass,
     [](const Case& c) -> std::optional<Case> {
       const int n = c.program_devices(),
                 per_host = c.topology->gpus_per_host();
       if (n >= per_host || c.topology->num_devices() % n != 0 ||
           n % c.topology->gpus_per_process() != 0) {
         return std::nullopt;
       }
       return OnHostsOf(c, n);
     }},
};

Case PassView(const Case& c) {
  Case seen = c;
  for (const Listed& listed : kListed) {
    if (!(listed.levels & kPass) || listed.as_seen == nullptr) continue;
    if (std::optional<Case> next = listed.as_seen(seen)) seen = *next;
  }
  return seen;
}

// The smallest size from which the tools put a ring of `buffers` bf16 buffers
// on one host's NVLink on NVSHMEM (bisection; the answer is monotone there).
int64_t ToolsCrossover(int buffers) {
  Case c;
  c.spec = "1x1x2:gpus_per_process=1:map=0,1";
  c.topology = ParsedSpec(c.spec);
  c.partitions = 2;
  c.pairs = {{0, 1}, {1, 0}};
  c.types.assign(buffers, "bf16");
  int64_t low = 1, high = int64_t{1} << 29;  // NCCL at low, NVSHMEM at high.
  while (high - low > 1) {
    c.bytes = low + (high - low) / 2;
    (ToolsDecide(c).nvshmem ? high : low) = c.bytes;
  }
  return high;
}

TEST(SeriesDecisionDiff, CrossoverBounds) {
  for (int buffers = 1; buffers <= kSeriesCounts; ++buffers) {
    EXPECT_EQ(SeriesCrossover(buffers), kToolsCrossover[buffers - 1])
        << buffers << " buffers";
  }
  for (int buffers = 1; buffers <= 8; ++buffers) {
    EXPECT_EQ(ToolsCrossover(buffers), kToolsCrossover[buffers - 1])
        << buffers << " buffers";
  }
}

// The series' default heap is NVSHMEM's, and the tools' default table's bound.
TEST(SeriesDecisionDiff, DefaultHeap) {
  EXPECT_EQ(xla::gpu::kNvshmemDefaultHeapBytes, kDefaultHeapBytes);
  EXPECT_EQ(core::DefaultToolCostTable().core.nvshmem_max_bytes,
            kDefaultHeapBytes);
}

// The crossover sweep on one host again, the series given the crossover of
// each buffer count as its override flag (what a tool would print for the
// default table at that count): then no listed difference applies.
std::vector<Case> OverrideCases(const std::vector<Case>& grid) {
  std::vector<Case> cases;
  for (const Case& c : grid) {
    if (c.source != "crossover" || !absl::StartsWith(c.spec, "1x1x8:")) {
      continue;
    }
    Case with = c;
    with.source = "override";
    with.crossover_bytes = kToolsCrossover[c.buffer_count() - 1];
    cases.push_back(std::move(with));
  }
  return cases;
}

struct Tally {
  std::map<std::string, int> compared;  // By source.
  std::map<std::string, int> nvshmem;   // Of those, NVSHMEM on both sides.
  std::map<std::string, int> listed;    // By listed difference.
  std::vector<std::string> unlisted;
};

// The series' decision from the case's facts, or its pass on the case as a
// module (then both sides take the bytes the module holds). The series must
// give the tools' answer, moved by each listed difference that applies; a
// difference is counted under the last entry that moved the answer.
void Compare(const Case& c, int level, Tally& tally) {
  const std::string source = c.source.substr(0, c.source.find(' '));
  ++tally.compared[source];
  Case seen = c;
  const Answer series = level == kDecision ? SeriesDecide(c)
                        : level == kPass   ? SeriesPassDecide(c, &seen.bytes)
                                           : SeriesRunDecide(c, &seen.bytes);
  const Answer tools = ToolsDecide(seen);
  // The case as this level of the series takes it, the tools' answer there,
  // then the series' own rules.
  Case as_seen = seen;
  const Listed* moved_by = nullptr;
  std::string applied;
  for (const Listed& listed : kListed) {
    if (!(listed.levels & level) || listed.as_seen == nullptr) continue;
    std::optional<Case> next = listed.as_seen(as_seen);
    if (!next) continue;
    absl::StrAppend(&applied, applied.empty() ? "" : ", ", listed.name);
    as_seen = *std::move(next);
    moved_by = &listed;
  }
  const Answer reference = moved_by ? ToolsDecide(as_seen) : tools;
  if (reference.nvshmem == tools.nvshmem) moved_by = nullptr;
  bool expected = reference.nvshmem;
  for (const Listed& listed : kListed) {
    if (!(listed.levels & level) || listed.answer == nullptr) continue;
    const std::optional<bool> answer =
        listed.answer(as_seen, reference, expected);
    if (!answer) continue;
    absl::StrAppend(&applied, applied.empty() ? "" : ", ", listed.name);
    if (*answer != expected) moved_by = &listed;
    expected = *answer;
  }
  if (series.nvshmem == expected) {
    if (series.nvshmem == tools.nvshmem) {
      tally.nvshmem[source] += tools.nvshmem;
    } else {
      ++tally.listed[moved_by->name];
    }
    return;
  }
  tally.unlisted.push_back(absl::StrCat(
      seen.Describe(), "\n    tools: ", tools.reason,
      "\n    listed differences that apply: ",
      applied.empty() ? "none" : applied,
      "; expected from the series: ", expected ? "NVSHMEM" : "NCCL",
      "\n    series: ", series.nvshmem ? "NVSHMEM" : "NCCL", ": ",
      series.reason));
}

// The fuzzers' seeds, the grid, and the crossover flag's cases; `skipped`
// counts the seeds that do not map onto the facts.
const std::vector<Case>& AllCases(std::map<std::string, int>& skipped) {
  static auto* skips = new std::map<std::string, int>();
  static auto* cases = new std::vector<Case>();
  if (cases->empty()) {
    *cases = CorpusCases(*corpus_dir + "/selection", skips);
    const std::vector<Case> hlo =
        HloCorpusCases(*corpus_dir + "/driver", skips);
    const std::vector<Case> grid = GridCases();
    const std::vector<Case> overrides = OverrideCases(grid);
    for (const auto* more : {&hlo, &grid, &overrides}) {
      cases->insert(cases->end(), more->begin(), more->end());
    }
  }
  skipped = *skips;
  return *cases;
}

// Every case through the series' pass or its decision; prints the counts, and
// fails where the series does not give the expected answer or a listed
// difference shows in no case.
void CompareAll(int level) {
  std::map<std::string, int> skipped;
  const std::vector<Case>& cases = AllCases(skipped);
  Tally tally;
  for (const Case& c : cases) Compare(c, level, tally);
  const char* side = level == kDecision ? "the series' decision"
                     : level == kPass   ? "the series' pass"
                                        : "the series' pass and thunk";
  int total = 0;
  for (const auto& [source, n] : tally.compared) {
    std::cout << side << ": compared " << n << " cases from " << source << " ("
              << tally.nvshmem[source] << " NVSHMEM on both sides)\n";
    total += n;
  }
  std::cout << side << ": compared " << total << " cases in all\n";
  for (const auto& [why, n] : skipped) {
    std::cout << "not compared: " << n << " fuzzer seeds: " << why << "\n";
  }
  EXPECT_GT(tally.compared["selection-seed"], 0) << "no selection seed maps";
  EXPECT_GT(tally.compared["module-seed"], 0) << "no module seed maps";
  for (const Listed& listed : kListed) {
    if (!(listed.levels & level)) continue;
    const int n = tally.listed[listed.name];
    std::cout << side << ": listed difference '" << listed.name << "': " << n
              << " cases: " << listed.reason << "\n";
    EXPECT_GT(n, 0) << "listed difference '" << listed.name
                    << "' is shown by no case: drop it or fix the grid";
  }
  const size_t shown = std::min<size_t>(tally.unlisted.size(), 25);
  for (size_t i = 0; i < shown; ++i) {
    ADD_FAILURE() << side << ": unlisted difference: " << tally.unlisted[i];
  }
  EXPECT_EQ(tally.unlisted.size(), 0u)
      << "unlisted differences (the series not giving the expected answer) "
         "in all";
}

TEST(SeriesDecisionDiff, DecisionGivesTheToolsBackend) {
  CompareAll(kDecision);
}

// The pass adds the runtime's rules (the group, where the permute sits) and
// reads the facts from HLO itself.
TEST(SeriesDecisionDiff, PassGivesTheToolsBackend) {
  ASSERT_FALSE(SeriesPassSeesNvshmemFlag())
      << "the process's flags must turn NVSHMEM off here";
  CompareAll(kPass);
}

// Where the pass says NVSHMEM, the thunk's checks as every process of the
// program initializes it, on the case's processes and hosts: the ids
// translated to PEs (round-robin ranks, device maps), pairs inside
// NVSHMEM_TEAM_SHARED (an overstated devices-per-host flag) and the job.
TEST(SeriesDecisionDiff, RunGivesTheToolsBackend) { CompareAll(kRun); }

}  // namespace
}  // namespace series_diff

int main(int argc, char** argv) {
  // NVSHMEM off in the process's flags, on in each module's options: the
  // series' compile-time rules must read the module's alone.
  const char* given = std::getenv("XLA_FLAGS");
  const std::string flags = std::string(given ? given : "") +
                            " --xla_gpu_experimental_enable_nvshmem=false";
  setenv("XLA_FLAGS", flags.c_str(), 1);
  testing::InitGoogleTest(&argc, argv);
  // What googletest leaves: --corpus=DIR, a folder with selection/ and
  // nvshmem_opt/.
  const std::string usage = "usage: series_decision_diff_test --corpus=DIR";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (!absl::StartsWith(arg, "--corpus=")) {
      std::cerr << "series_decision_diff_test: unknown argument '" << arg
                << "'; " << usage << "\n";
      return 2;
    }
    *series_diff::corpus_dir = arg.substr(9);
  }
  if (series_diff::corpus_dir->empty()) {
    std::cerr << "series_decision_diff_test: no corpus; " << usage << "\n";
    return 2;
  }
  for (const char* sub : {"/selection", "/driver"}) {
    const std::string dir = *series_diff::corpus_dir + sub;
    if (series_diff::corpus_dir->empty() ||
        !std::filesystem::is_directory(dir)) {
      std::cerr
          << "series_decision_diff_test: " << dir
          << ": no such folder (tests/fuzz/make_corpus.py DIR writes it); "
          << usage << "\n";
      return 2;
    }
  }
  return RUN_ALL_TESTS();
}
