// The project's cost table: the core's text format plus the rows of peer and
// symmetric memory and the entries `backends` and `symmetric_signals`. Each
// line goes to one parser: this layer's entries here, peer/symmetric rows to
// the core's parser on that backend's table (named "nccl" there), the rest to
// the core's parser; lines keep their numbers in every part.

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "extensions/backends.h"

namespace nvshmem_ext {
namespace {

using core::text_internal::Printable;

// The measured 2x H200 NVLink curve of peer memory with one process driving
// both GPUs (XLA of jax 0.11.2). Copied from
// gpu/results/h200x2_nvlink_cost_table_jax0112.txt (machine, software and
// CSV checksum there); a test checks the two agree.
constexpr char kMeasuredPeerTable[] = R"table(
link peer nvlink 29.2774 423.992 5.22982
point peer nvlink 1 1024 28.7564
point peer nvlink 1 4096 31.6171
point peer nvlink 1 16384 33.3478
point peer nvlink 1 65536 35.5272
point peer nvlink 1 262144 34.8791
point peer nvlink 1 1048576 35.0594
point peer nvlink 1 4194304 34.7271
point peer nvlink 1 16777216 66.4153
point peer nvlink 1 67108864 196.021
point peer nvlink 1 268435456 702.793
point peer nvlink 2 1024 38.5729
point peer nvlink 2 4096 36.3928
point peer nvlink 2 16384 30.2589
point peer nvlink 2 65536 37.1159
point peer nvlink 2 262144 34.4449
point peer nvlink 2 1048576 30.2898
point peer nvlink 2 4194304 32.199
point peer nvlink 2 16777216 68.9396
point peer nvlink 2 67108864 191.826
point peer nvlink 2 268435456 659.7
point peer nvlink 4 1024 57.0906
point peer nvlink 4 4096 50.0959
point peer nvlink 4 16384 54.882
point peer nvlink 4 65536 47.5541
point peer nvlink 4 262144 53.1087
point peer nvlink 4 1048576 45.6091
point peer nvlink 4 4194304 47.0729
point peer nvlink 4 16777216 74.8927
point peer nvlink 4 67108864 199.45
point peer nvlink 4 268435456 649.31
sm_interference peer 0
)table";

// The shortest text that reads back as the same double (5.6, not
// 5.5999999999999996), so printed tables stay readable and round-trip.
std::string Shortest(double value) {
  char buffer[64];
  std::to_chars_result result =
      std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

struct LineError {
  int line = 0;
  std::string message;  // Without "<source>:<line>: ".
};

// This layer's own entries; nullopt when `words` is not one.
std::optional<absl::Status> ApplyOwnEntry(
    const std::vector<absl::string_view>& words, CostTable* table) {
  const absl::string_view key = words[0];
  if (key == "backends") {
    if (words.size() != 2) {
      return absl::InvalidArgumentError("expected 'backends NAME,NAME,...'");
    }
    absl::StatusOr<std::vector<Backend>> set = ParseBackendSet(words[1]);
    if (!set.ok()) return set.status();
    table->backends = *std::move(set);
    return absl::OkStatus();
  }
  if (key == "symmetric_signals") {
    if (words.size() != 2) {
      return absl::InvalidArgumentError("expected 'symmetric_signals 0|1'");
    }
    if (words[1] != "0" && words[1] != "1") {
      return absl::InvalidArgumentError(absl::StrCat(
          "symmetric_signals must be 0 or 1, not '", Printable(words[1]), "'"));
    }
    table->symmetric_signals = words[1] == "1";
    return absl::OkStatus();
  }
  // Entries of older tables: ignoring them would hide that the table was
  // written for another model.
  if (key == "split_overhead_us" || key == "combine_bandwidth_GBps") {
    return absl::InvalidArgumentError(
        absl::StrCat(key,
                     " is no longer used (the split plan was removed); "
                     "delete the line"));
  }
  return std::nullopt;
}

// The core's parse of one part, its error split into line and message.
std::optional<LineError> ParsePart(core::CostTable* table,
                                   absl::string_view text,
                                   absl::string_view source) {
  absl::StatusOr<core::CostTable> parsed =
      core::ParseCostTableOnto(*table, text, source);
  if (parsed.ok()) {
    *table = *std::move(parsed);
    return std::nullopt;
  }
  absl::string_view message = parsed.status().message();
  message.remove_prefix(source.size() + 1);
  const size_t colon = message.find(": ");
  LineError error;
  if (!absl::SimpleAtoi(message.substr(0, colon), &error.line)) error.line = 0;
  error.message = std::string(message.substr(colon + 2));
  return error;
}

absl::StatusOr<CostTable> ParseOnto(CostTable table, absl::string_view text,
                                    absl::string_view source) {
  std::string core_text;
  std::string extra_text[2];
  std::optional<LineError> error;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    std::vector<absl::string_view> words =
        absl::StrSplit(line.substr(0, line.find('#')), absl::ByAnyChar(" \t\r"),
                       absl::SkipEmpty());
    std::string* part = &core_text;
    std::string routed(line);
    if (!words.empty() && !error) {
      std::optional<absl::Status> own = ApplyOwnEntry(words, &table);
      if (own.has_value()) {
        if (!own->ok())
          error = LineError{line_number, std::string(own->message())};
        routed.clear();
      } else if (words.size() >= 2 &&
                 (words[0] == "link" || words[0] == "point" ||
                  words[0] == "sm_interference")) {
        std::optional<Backend> backend = BackendFromName(words[1]);
        if (backend &&
            !(*backend == Backend::kNccl || *backend == Backend::kNvshmem)) {
          part = &extra_text[static_cast<int>(*backend) - 2];
          words[1] = "nccl";
          routed = absl::StrJoin(words, " ");
        }
      }
    }
    for (std::string* each : {&core_text, &extra_text[0], &extra_text[1]}) {
      if (each == part) *each += routed;
      *each += '\n';
    }
  }
  std::vector<LineError> errors;
  if (error) errors.push_back(*error);
  if (auto e = ParsePart(&table.core, core_text, source)) {
    e->message = absl::StrReplaceAll(
        e->message,
        {{"(nccl, nvshmem)", "(nccl, nvshmem, peer, symmetric)"},
         {"(link, point, sm_interference, ",
          "(link, point, sm_interference, backends, symmetric_signals, "}});
    errors.push_back(*e);
  }
  for (int i = 0; i < 2; ++i) {
    if (auto e = ParsePart(&table.extra[i], extra_text[i], source)) {
      e->message = absl::StrReplaceAll(
          e->message, {{"nccl", BackendName(static_cast<Backend>(i + 2))}});
      errors.push_back(*e);
    }
  }
  if (!errors.empty()) {
    const LineError& first = *absl::c_min_element(
        errors,
        [](const LineError& a, const LineError& b) { return a.line < b.line; });
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", first.line, ": ", first.message));
  }
  return table;
}

CostTable BuildDefault() {
  CostTable table;
  table.core = core::DefaultCostTable();
  // Peer and symmetric start from NCCL's numbers; symmetric was never
  // measured working (put + signal failed without NCCL signals).
  table.extra = {table.core, table.core};
  absl::StatusOr<CostTable> with_peer =
      ParseOnto(table, kMeasuredPeerTable, "default peer table");
  if (with_peer.ok()) table = *std::move(with_peer);
  return table;
}

}  // namespace

CostTable DefaultCostTable() {
  static const CostTable* const table = new CostTable(BuildDefault());
  return *table;
}

absl::StatusOr<CostTable> ParseCostTable(absl::string_view text,
                                         absl::string_view source_name) {
  return ParseOnto(DefaultCostTable(), text, source_name);
}

std::string CostTableToString(const CostTable& table) {
  std::string out = absl::StrCat(
      "backends ", BackendSetToString(table.backends), "\n",
      "symmetric_signals ", table.symmetric_signals ? 1 : 0, "\n",
      // Before the link rows: the network row printed below
      // overrides the transport's default on reading back.
      "nvshmem_transport ", NvshmemTransportName(table.core.nvshmem_transport),
      "\n", "# backend link_class latency_us bandwidth_GBps [per_buffer_us]\n");
  for (int b = 0; b < kNumBackends; ++b) {
    for (int c = 0; c < kNumLinkClasses; ++c) {
      const LinkCost& cost =
          table.link(static_cast<Backend>(b), static_cast<LinkClass>(c));
      absl::StrAppend(&out, "link ", BackendName(static_cast<Backend>(b)), " ",
                      LinkClassName(static_cast<LinkClass>(c)), " ",
                      Shortest(cost.latency_us), " ",
                      Shortest(cost.bandwidth_gbps));
      if (cost.per_buffer_us != 0) {
        absl::StrAppend(&out, " ", Shortest(cost.per_buffer_us));
      }
      out += "\n";
    }
  }
  bool any_points = false;
  for (int b = 0; b < kNumBackends; ++b) {
    for (int c = 0; c < kNumLinkClasses; ++c) {
      for (const CurvePoint& point :
           table.curve(static_cast<Backend>(b), static_cast<LinkClass>(c))) {
        if (!any_points) {
          out += "# point backend link_class buffers bytes us (measured)\n";
          any_points = true;
        }
        absl::StrAppend(&out, "point ", BackendName(static_cast<Backend>(b)),
                        " ", LinkClassName(static_cast<LinkClass>(c)), " ",
                        point.buffers, " ", point.bytes, " ",
                        Shortest(point.us), "\n");
      }
    }
  }
  for (int b = 0; b < kNumBackends; ++b) {
    absl::StrAppend(
        &out, "sm_interference ", BackendName(static_cast<Backend>(b)), " ",
        Shortest(table.sm_interference(static_cast<Backend>(b))), "\n");
  }
  absl::StrAppend(&out, "margin ", Shortest(table.core.margin), "\n",
                  "nvshmem_max_bytes ", table.core.nvshmem_max_bytes, "\n");
  return out;
}

}  // namespace nvshmem_ext
