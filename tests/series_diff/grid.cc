// The differential test's cases: a grid over the facts a permute's backend
// rests on, and the selection fuzzer's seeds where they map onto those facts.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/series_diff/diff_case.h"
#include "tool_layer/backends.h"

namespace series_diff {
namespace {

using Pairs = std::vector<std::pair<int64_t, int64_t>>;
constexpr int64_t kMiB = int64_t{1} << 20;

struct PairSet {
  std::string name;
  Pairs pairs;
};

// Pair sets over `n` ids, where `g` consecutive ids share a host when the
// program's ids are its devices.
std::vector<PairSet> PairSets(int n, int g) {
  std::vector<PairSet> sets;
  auto add = [&](std::string name, auto target, int first = 0, int end = -1) {
    PairSet set{std::move(name), {}};
    for (int i = first; i < (end < 0 ? n : end); ++i) {
      const int t = target(i);
      if (t >= 0) set.pairs.emplace_back(i, t);
    }
    sets.push_back(std::move(set));
  };
  sets.push_back({"empty", {}});
  add("self", [](int i) { return i; });
  if (n < 2) return sets;
  add("ring+1", [n](int i) { return (i + 1) % n; });
  add("ring-1", [n](int i) { return (i + n - 1) % n; });
  add("shift+1", [n](int i) { return i + 1 < n ? i + 1 : -1; });
  add("shift-1", [](int i) { return i - 1; });
  add("one-pair", [](int i) { return i == 0 ? 1 : -1; });
  if (n % 2 == 0) add("swap", [](int i) { return i ^ 1; });
  // Device 0 to itself, a ring over the others: every device has a source.
  add("self0+ring", [n](int i) { return i == 0 ? 0 : i % (n - 1) + 1; });
  if (n >= 4) {
    add(
        "half-ring", [n](int i) { return (i + 1) % (n / 2); }, 0, n / 2);
  }
  if (g < n && n % g == 0) {
    add("host-rings", [g](int i) { return i / g * g + (i % g + 1) % g; });
    add("cross-host-ring", [n, g](int i) { return (i + g) % n; });
  }
  return sets;
}

// The pair set `name` of PairSets(n, g).
PairSet Named(int n, int g, const std::string& name) {
  for (PairSet& set : PairSets(n, g)) {
    if (set.name == name) return std::move(set);
  }
  return {name, {}};
}

struct Program {
  std::string name;
  int partitions, replicas;
  bool channel;
  std::vector<int> map;  // Device of logical device r + p * replicas.
};

std::string MapText(const std::vector<int>& map) {
  return map.empty() ? "" : absl::StrCat(":map=", absl::StrJoin(map, ","));
}

std::vector<int> Iota(int first, int end) {
  std::vector<int> ids;
  for (int i = first; i < end; ++i) ids.push_back(i);
  return ids;
}

// Programs on an `n`-device cluster of hosts of `g`: over every device, in
// groups, on part of it, and placed by permuted device maps. Each states its
// map, as a compiled module's device assignment does; the series' pass reads
// that assignment, and the tools refuse NVSHMEM without one.
std::vector<Program> Programs(int n, int g) {
  std::vector<Program> programs = {{"whole", n, 1, true, Iota(0, n)},
                                   {"replica-ids", 1, n, false, Iota(0, n)}};
  if (n % 2 == 0) {
    programs.push_back({"2-groups", n / 2, 2, true, Iota(0, n)});
    programs.push_back({"2-groups-no-channel", 2, n / 2, false, Iota(0, n)});
    programs.push_back({"first-half", n / 2, 1, true, Iota(0, n / 2)});
    programs.push_back({"second-half", n / 2, 1, true, Iota(n / 2, n)});
  }
  if (n > 16) return programs;
  std::vector<int> reversed(n), host_rotated(n), swapped(n), in_host(n),
      interleaved(n);
  for (int i = 0; i < n; ++i) {
    reversed[i] = n - 1 - i;
    interleaved[i] = i % (n / g) * g + i / (n / g);
    host_rotated[i] = (i + g) % n;
    swapped[i] = n % 2 == 0 ? i ^ 1 : i;
    in_host[i] = i / g * g + (i % g + 1) % g;
  }
  programs.push_back({"map-reversed", n, 1, true, reversed});
  programs.push_back({"map-neighbours-swapped", n, 1, true, swapped});
  programs.push_back({"map-in-host-rotated", n, 1, true, in_host});
  if (g < n) {
    programs.push_back({"map-host-rotated", n, 1, true, host_rotated});
    // Consecutive ids on different hosts: id rings inside a "host" of ids
    // leave their devices' hosts.
    programs.push_back({"map-interleaved", n, 1, true, interleaved});
  }
  return programs;
}

// Cluster shapes: one host, several, slices, NVLink domains over hosts.
constexpr const char* kClusters[] = {
    "1x1x2",      "1x1x4",       "1x1x8",      "1x2x2",      "1x2x4",
    "1x2x8",      "1x4x4",       "2x2x4",      "2x1x8",      "1x2x4:nvl8",
    "1x4x4:nvl8", "1x4x4:nvl16", "2x2x2:nvl4", "1x9x8:nvl72"};

// Process layouts of a host of `g`: one GPU each, two, the whole host; and
// on several hosts one GPU each with the ranks dealt round-robin over the
// hosts, so that device i is not in process i.
struct Layout {
  int per_process;
  bool round_robin;
};

std::vector<Layout> Layouts(int g, int n) {
  std::vector<Layout> layouts = {{1, false}};
  if (g % 2 == 0 && g > 2) layouts.push_back({2, false});
  if (g > 1) layouts.push_back({g, false});
  if (n > g) layouts.push_back({1, true});
  return layouts;
}

Case MakeCase(std::string source, const std::string& spec, const Program& p,
              const PairSet& pairs, std::vector<std::string> types,
              int64_t bytes) {
  Case c;
  c.source = std::move(source);
  c.spec = spec + MapText(p.map);
  c.topology = ParsedSpec(c.spec);
  c.partitions = p.partitions;
  c.replicas = p.replicas;
  c.channel = p.channel;
  c.pairs_name = absl::StrCat(p.name, "/", pairs.name);
  c.pairs = pairs.pairs;
  c.types = std::move(types);
  c.bytes = bytes;
  return c;
}

// `c` as a JIT compile and ahead of time (the job's size known), with the
// pass's devices-per-host flag given; where a slice holds several hosts,
// without it; and on several hosts, with neither the flag nor a slice size.
void AddCompiles(Case c, std::vector<Case>& cases) {
  cases.push_back(c);
  Case aot = c;
  aot.source = "topologies-aot";
  aot.job_devices = c.topology->num_devices();
  cases.push_back(std::move(aot));
  if (c.topology->nvlink_domain_size() > c.topology->gpus_per_host()) {
    Case no_flag = c;
    no_flag.source = "topologies-no-host-flag";
    no_flag.series_devices_per_host = 0;
    cases.push_back(std::move(no_flag));
  }
  // Neither the flag nor a slice size (a compile that states none): the
  // series' pass keeps NCCL, as without the flag alone.
  if (c.topology->num_devices() > c.topology->gpus_per_host()) {
    c.source = "topologies-no-slice-no-host-flag";
    c.series_devices_per_host = 0;
    c.series_slice_size = 0;
    cases.push_back(std::move(c));
  }
}

// The series' pass told hosts larger than the cluster's (the flag overstated:
// twice the host, or every device): pairs that leave a host pass the
// compile-time rules, and only the runtime's team check can refuse them.
void AddOverstatedHostFlag(const Case& c, std::vector<Case>& cases) {
  const xla::gpu::backend_selection::Topology& t = *c.topology;
  const int g = t.gpus_per_host(), n = t.num_devices();
  if (c.round_robin || t.gpus_per_process() != 1 || n == g ||
      t.nvlink_domain_size() != g) {
    return;
  }
  for (int flag : {2 * g, n / t.slices()}) {
    if (flag <= g || (n / t.slices()) % flag != 0) continue;
    Case over = c;
    over.source = "topologies-host-flag-overstated";
    over.series_devices_per_host = flag;
    cases.push_back(std::move(over));
    if (flag == n / t.slices()) break;
  }
}

void TopologyGrid(std::vector<Case>& cases) {
  const int64_t sizes[] = {0,         4096,      kMiB,       8 * kMiB,
                           16 * kMiB, 32 * kMiB, 256 * kMiB, 600 * kMiB};
  const std::vector<std::vector<std::string>> type_sets = {{"bf16"},
                                                           {"bf16", "bf16"}};
  for (const char* cluster : kClusters) {
    const xla::gpu::backend_selection::Topology& t = *ParsedSpec(cluster);
    const int n = t.num_devices(), g = t.gpus_per_host();
    for (const Layout& layout : Layouts(g, n)) {
      const std::string spec =
          absl::StrCat(cluster, ":gpus_per_process=", layout.per_process);
      for (const Program& program : Programs(n, g)) {
        const int ids = program.channel ? program.partitions : program.replicas;
        for (const PairSet& pairs : PairSets(ids, g)) {
          for (const auto& types : type_sets) {
            for (int64_t bytes : sizes) {
              Case c =
                  MakeCase("topologies", spec, program, pairs, types, bytes);
              c.round_robin = layout.round_robin;
              AddOverstatedHostFlag(c, cases);
              AddCompiles(std::move(c), cases);
            }
          }
        }
      }
    }
  }
}

// Every element type NVSHMEM puts, others, and tuples of several buffers.
std::vector<std::vector<std::string>> TypeSets() {
  std::vector<std::vector<std::string>> sets;
  for (const char* type :
       {"f64", "f32", "f16", "bf16", "s32", "s64", "u32", "u64", "pred", "s4",
        "s8", "s16", "u4", "u8", "u16", "f8e4m3fn", "f8e5m2", "c64", "c128"}) {
    sets.push_back({type});
  }
  const std::vector<std::vector<std::string>> tuples = {
      {"bf16", "bf16"},
      {"bf16", "bf16", "bf16"},
      {"f32", "f32", "f32", "f32"},
      {"bf16", "bf16", "bf16", "bf16", "bf16", "bf16", "bf16", "bf16"},
      {"f64", "u64", "s32"},
      {"f32", "s8"},
      {"s8", "f32"},
      {"pred", "bf16"},
      {"c64", "f32"},
      {"f8e4m3fn", "f8e4m3fn"}};
  sets.insert(sets.end(), tuples.begin(), tuples.end());
  return sets;
}

void TypeGrid(std::vector<Case>& cases) {
  std::vector<int64_t> sizes;
  for (int64_t s = 1024; s <= 512 * kMiB; s *= 2) sizes.push_back(s);
  for (const char* cluster : {"1x1x8", "1x2x4", "1x1x2"}) {
    const int n = ParsedSpec(cluster)->num_devices();
    const int g = ParsedSpec(cluster)->gpus_per_host();
    const std::string spec = absl::StrCat(cluster, ":gpus_per_process=1");
    const Program whole = {"whole", n, 1, true, Iota(0, n)};
    for (const PairSet& pairs : PairSets(n, g)) {
      if (pairs.name != "ring+1" && pairs.name != "shift+1" &&
          pairs.name != "self" && pairs.name != "host-rings") {
        continue;
      }
      for (const auto& types : TypeSets()) {
        for (int64_t bytes : sizes) {
          for (bool memcpy : {false, true}) {
            Case c = MakeCase("types", spec, whole, pairs, types, bytes);
            c.memcpy_local_p2p = memcpy;
            cases.push_back(std::move(c));
          }
        }
      }
    }
  }
}

// Fine steps of size across and around the crossover, per buffer count.
void CrossoverGrid(std::vector<Case>& cases) {
  std::vector<int64_t> sizes;
  for (int k = 0; k <= 320; ++k) {
    sizes.push_back(
        static_cast<int64_t>(std::llround(std::pow(2.0, 18 + 12.0 * k / 320))));
  }
  for (int p = 18; p <= 30; ++p) {
    for (int64_t d : {-1, 0, 1}) sizes.push_back((int64_t{1} << p) + d);
  }
  for (const char* cluster : {"1x1x8", "1x1x2", "1x2x4"}) {
    const int n = ParsedSpec(cluster)->num_devices();
    const std::string spec = absl::StrCat(cluster, ":gpus_per_process=1");
    const int g = ParsedSpec(cluster)->gpus_per_host();
    const Program whole = {"whole", n, 1, true, Iota(0, n)};
    // Rings inside each host: where NVSHMEM may run.
    const PairSet ring = Named(n, g, n > g ? "host-rings" : "ring+1");
    for (int buffers = 1; buffers <= 8; ++buffers) {
      for (int64_t bytes : sizes) {
        cases.push_back(MakeCase("crossover", spec, whole, ring,
                                 std::vector<std::string>(buffers, "bf16"),
                                 bytes));
      }
    }
  }
}

// Heap bounds: sizes at half the bound (operand and result both on the heap).
void HeapGrid(std::vector<Case>& cases) {
  const std::string spec = "1x1x8:gpus_per_process=1";
  const Program whole = {"whole", 8, 1, true, Iota(0, 8)};
  const PairSet ring = Named(8, 8, "ring+1");
  for (int64_t heap :
       {int64_t{1024}, 64 * kMiB, 1024 * kMiB, 4096 * kMiB, 48 * kMiB + 2}) {
    for (int64_t bytes : {heap / 4, heap / 2 - 1, heap / 2, heap / 2 + 1, heap,
                          2 * heap, 24 * kMiB, 512 * kMiB}) {
      for (int buffers : {1, 2}) {
        Case c = MakeCase("heap", spec, whole, ring,
                          std::vector<std::string>(buffers, "f32"), bytes);
        c.heap_bytes = heap;
        cases.push_back(std::move(c));
      }
    }
  }
}

// In-place permutes (into slices of an output), where NVSHMEM would otherwise
// run: the series' runtime rules refuse them, and the tools' pass skips them.
void InPlaceGrid(std::vector<Case>& cases) {
  for (const char* cluster : {"1x1x8", "1x2x4"}) {
    const int n = ParsedSpec(cluster)->num_devices();
    const int g = ParsedSpec(cluster)->gpus_per_host();
    const std::string spec = absl::StrCat(cluster, ":gpus_per_process=1");
    const Program whole = {"whole", n, 1, true, Iota(0, n)};
    const PairSet ring = Named(n, g, n > g ? "host-rings" : "ring+1");
    for (const char* type : {"bf16", "f32"}) {
      for (int64_t bytes : {32 * kMiB, 256 * kMiB}) {
        Case c = MakeCase("in-place", spec, whole, ring, {type}, bytes);
        c.in_place = true;
        cases.push_back(std::move(c));
      }
    }
  }
}

}  // namespace

std::vector<Case> GridCases() {
  std::vector<Case> cases;
  TopologyGrid(cases);
  TypeGrid(cases);
  CrossoverGrid(cases);
  HeapGrid(cases);
  InPlaceGrid(cases);
  return cases;
}

}  // namespace series_diff
