// One case of the differential test: the plain facts of one collective-permute
// on one cluster, which both the pinned series' decision and the tools' core
// decide from, and what each answered.

#ifndef NVSHMEM_SERIES_DIFF_DIFF_CASE_H_
#define NVSHMEM_SERIES_DIFF_DIFF_CASE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tool_layer/decide.h"

namespace series_diff {

struct Case {
  std::string source;  // The sub-grid or corpus file it comes from.
  // The cluster in the tools' spec grammar, process layout stated, and that
  // spec as the tools parse it (offered backends nccl,nvshmem).
  std::string spec;
  std::shared_ptr<const xla::gpu::backend_selection::Topology> topology;
  // Processes dealt round-robin over the hosts (the spec's one GPU each), as
  // the job's ranks may be: then global device d = h * G + j, the j-th device
  // of host h of H, runs in process h + j * H, where XLA numbers devices after
  // sorting processes by host. Else process d / gpus_per_process, as the
  // tools take it.
  bool round_robin = false;
  // The program: partitions x replicas; with a channel id the pairs are
  // partition ids applied to every replica, else replica ids.
  int partitions = 1;
  int replicas = 1;
  bool channel = true;
  std::string pairs_name;
  std::vector<std::pair<int64_t, int64_t>> pairs;
  std::vector<std::string> types;  // Of each array, HLO names: "bf16".
  int buffers = 0;                 // Operands; 0: one per type.
  // An in-place permute (into slices of an output operand), of one type.
  bool in_place = false;
  int64_t bytes = 0;  // All buffers together, from each source.
  bool memcpy_local_p2p = false;
  std::optional<int64_t> heap_bytes;  // NVSHMEM heap bound; none: default.
  int64_t crossover_bytes = 0;        // The series' override flag; 0: built in.
  // What the series' pass is told of the cluster: GPUs per host from its flag
  // (0: the flag unset, so the pass takes the compiler's slice as a host; -1:
  // the cluster's, the flag given), the compiler's slice (-1: the NVLink
  // domain; 0: not given), and the job's devices ahead of time (0: a JIT
  // compile, which knows only the slice).
  int series_devices_per_host = -1;
  int series_slice_size = -1;
  int64_t job_devices = 0;
  // Where the permute sits, as the tools' pass tells their core.
  xla::gpu::backend_selection::Place place =
      xla::gpu::backend_selection::Place::kAnywhere;
  // The compiler's slice as the series' pass is given it.
  int slice_size() const {
    return series_slice_size >= 0 ? series_slice_size
                                  : topology->nvlink_domain_size();
  }
  // A permute of a seed module: the module's text and the permute's name.
  std::shared_ptr<const std::string> module_text;
  std::string permute_name;

  int program_devices() const { return partitions * replicas; }
  // The process that runs device `device` of the cluster.
  int ProcessOf(int device) const;
  int groups() const { return channel ? replicas : partitions; }
  int buffer_count() const {
    return buffers > 0 ? buffers : static_cast<int>(types.size());
  }
  // Every fact on one line, for a failure message.
  std::string Describe() const;
};

struct Answer {
  bool nvshmem = false;
  std::string reason;  // One line, from the side that answered.
  // The tools' side only: the core's rule that refused NVSHMEM, and whether
  // NVSHMEM ran but did not beat NCCL by the margin.
  std::optional<xla::gpu::backend_selection::RefusalKind> refusal;
  std::optional<xla::gpu::backend_selection::ToolRule> tool_rule;
  bool within_margin = false;
};

// The tools' core as the tools call it: xla::gpu::backend_selection::Decide
// over the default cost table (heap bound applied), backend set nccl,nvshmem.
Answer ToolsDecide(const Case& c);

// The pinned series' in-tree decision, from the same facts.
Answer SeriesDecide(const Case& c);

// The series' pass itself (NvshmemCollectivePermuteRewriter) on `c` as an HLO
// module, or on the seed's module; `bytes` gets the bytes of the permute the
// pass saw (the case's bytes rounded down to whole elements of each buffer).
Answer SeriesPassDecide(const Case& c, int64_t* bytes);
// Whether XLA_FLAGS turns NVSHMEM on; the pass must read the module's own
// options instead.
bool SeriesPassSeesNvshmemFlag();
// The series' pass, then where it says NVSHMEM the checks the series' thunk
// makes when every process of the program initializes it (ids to PEs, pairs
// inside each PE's NVSHMEM_TEAM_SHARED, the job), on the case's own processes
// and hosts: NVSHMEM only where the pass says so and no process refuses.
Answer SeriesRunDecide(const Case& c, int64_t* bytes);

// The grid of topologies, layouts, programs, pair sets, sizes, element types
// and flags. Cases the tools' core refuses as bad input (ids outside the
// program) are not made.
std::vector<Case> GridCases();

// The selection fuzzer's seeds in `dir` (tests/fuzz/make_corpus.py's
// selection/) whose table is the default one, or it with another heap bound:
// the facts both sides take. `skipped` counts the seeds that do not map, by
// why they do not.
std::vector<Case> CorpusCases(const std::string& dir,
                              std::map<std::string, int>* skipped);

// The driver fuzzer's module seeds in `dir` (make_corpus.py's nvshmem_opt/):
// each collective-permute of each module on the seed's topology, placed as XLA
// places devices by default where the topology states no map.
std::vector<Case> HloCorpusCases(const std::string& dir,
                                 std::map<std::string, int>* skipped);

// A topology spec as the tools parse it, cached.
std::shared_ptr<const xla::gpu::backend_selection::Topology> ParsedSpec(
    const std::string& spec);

}  // namespace series_diff

#endif  // NVSHMEM_SERIES_DIFF_DIFF_CASE_H_
