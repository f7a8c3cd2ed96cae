// The project's cost table in text format (CostTableProto): the core's
// entries go to the core's ApplyCostTableProto; peer and symmetric entries go
// to the same function on that backend's own core table, in its NCCL slot;
// `backends` and `symmetric_signals` are this layer's. Errors name the line of
// the entry they are about.

#include "tool_layer/table_text.h"

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "tool_layer/backends.h"
#include "tool_layer/cost_table.pb.h"
#include "tool_layer/topology_spec.h"
#include "xla/backends/gpu/transforms/collectives/backend_cost_table.pb.h"
#include "tsl/platform/protobuf.h"

namespace xla::gpu::backend_selection {
namespace {

using ToolProto = CostTableProto;
using CoreProto = ::xla::gpu::BackendCostTableProto;

// The shortest text that reads back as the same double (5.6, not
// 5.5999999999999996), so printed tables stay readable and round-trip.
std::string Shortest(double value) {
  char buffer[64];
  std::to_chars_result result =
      std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

// Backends are numbered as in the proto, less one; UNSPECIFIED and numbers
// the enum lacks have none.
std::optional<Backend> BackendOfNumber(int value) {
  if (value < 1 || value > kNumBackends) return std::nullopt;
  return static_cast<Backend>(value - 1);
}
CoreProto::Backend ProtoBackend(Backend backend) {
  return static_cast<CoreProto::Backend>(static_cast<int>(backend) + 1);
}
// Link classes likewise (SAME_DEVICE = 1 ... NETWORK = 4).
CoreProto::LinkClass ProtoLinkClass(LinkClass link_class) {
  return static_cast<CoreProto::LinkClass>(static_cast<int>(link_class) + 1);
}

absl::Status NoBackend() {
  std::vector<std::string> names;
  for (int b = 0; b < kNumBackends; ++b) {
    names.push_back(
        absl::AsciiStrToUpper(BackendName(static_cast<Backend>(b))));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "backend must be ", absl::StrJoin(names.begin(), names.end() - 1, ", "),
      " or ", names.back()));
}

// `backends` and `symmetric_signals`, and that every entry names a backend.
absl::Status ApplyOwnEntries(const ToolProto& proto, ToolCostTable* table,
                             CostTableEntry* bad) {
  for (int i = 0; i < proto.links_size(); ++i) {
    *bad = {ToolProto::kLinksFieldNumber, i};
    if (!BackendOfNumber(proto.links(i).backend())) return NoBackend();
  }
  for (int i = 0; i < proto.sm_interference_size(); ++i) {
    *bad = {ToolProto::kSmInterferenceFieldNumber, i};
    if (!BackendOfNumber(proto.sm_interference(i).backend()))
      return NoBackend();
  }
  if (proto.backends_size() > 0) {
    *bad = {ToolProto::kBackendsFieldNumber, 0};
    std::vector<std::string> names;
    for (int backend : proto.backends()) {
      if (!BackendOfNumber(backend)) return NoBackend();
      names.push_back(BackendName(*BackendOfNumber(backend)));
    }
    absl::StatusOr<std::vector<Backend>> set =
        ParseBackendSet(absl::StrJoin(names, ","));
    if (!set.ok()) return set.status();
    table->backends = *std::move(set);
  }
  if (proto.has_symmetric_signals()) {
    table->symmetric_signals = proto.symmetric_signals();
  }
  return absl::OkStatus();
}

absl::Status Apply(const ToolProto& proto, ToolCostTable* table,
                   CostTableEntry* bad) {
  ToolCostTable result = *table;
  absl::Status status = ApplyOwnEntries(proto, &result, bad);
  if (!status.ok()) return status;
  // The two messages share field numbers and backend values: less this
  // layer's fields, the table reads as the core's.
  ToolProto part = proto;
  part.clear_backends();
  part.clear_symmetric_signals();
  CoreProto core_proto;
  if (!core_proto.ParseFromString(part.SerializeAsString())) {
    return absl::InternalError("a cost table did not read back");
  }
  status = ApplyCostTableProto(core_proto, &result.core, bad);
  if (status.ok()) *table = std::move(result);
  return status;
}

using tsl::protobuf::TextFormat;

// Keeps the first syntax error and where it was (0-based).
class FirstSyntaxError : public tsl::protobuf::io::ErrorCollector {
 public:
  void RecordError(int line, tsl::protobuf::io::ColumnNumber column,
                   absl::string_view message) override {
    if (!message_.empty()) return;
    line_ = line;
    column_ = column;
    message_ = std::string(message);
  }
  int line() const { return line_; }
  int column() const { return column_; }
  const std::string& message() const { return message_; }

 private:
  int line_ = 0;
  int column_ = 0;
  std::string message_;
};

// The parser reports a bad value once it has read it, at the token after it,
// which may be on a later line: the line of the token before (line, column).
int LineOfTokenBefore(absl::string_view text, int line, int column) {
  tsl::protobuf::io::ArrayInputStream input(text.data(),
                                            static_cast<int>(text.size()));
  FirstSyntaxError ignored;
  tsl::protobuf::io::Tokenizer tokenizer(&input, &ignored);
  int before = line;
  while (tokenizer.Next()) {
    const tsl::protobuf::io::Tokenizer::Token& token = tokenizer.current();
    if (std::make_pair(token.line, token.column) >=
        std::make_pair(line, column))
      break;
    before = token.line;
  }
  return before;
}

bool IsAboutTheValueRead(absl::string_view message) {
  return absl::StartsWith(message, "Unknown enumeration value") ||
         absl::StartsWith(message, "Invalid value for boolean") ||
         absl::StrContains(message, "out of range");
}

// Parses `text` into `message`, recording where each field was in
// `locations`. A syntax error is InvalidArgument "<source>:<line>: ...".
absl::Status ParseTextProto(absl::string_view text,
                            absl::string_view source_name,
                            tsl::protobuf::Message* message,
                            TextFormat::ParseInfoTree* locations) {
  FirstSyntaxError errors;
  TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  parser.WriteLocationsTo(locations);
  if (!parser.ParseFromString(std::string(text), message)) {
    int line = errors.line();
    if (IsAboutTheValueRead(errors.message())) {
      line = LineOfTokenBefore(text, line, errors.column());
    }
    // The parser quotes the offending token, which may hold any byte.
    return absl::InvalidArgumentError(absl::StrCat(
        source_name, ":", line + 1, ": ", Printable(errors.message())));
  }
  return absl::OkStatus();
}

// The 1-based line of `entry` in a message of type `descriptor` parsed with
// `locations`, of its field that `error` starts with when it names one; 0
// where unknown.
int EntryLine(const TextFormat::ParseInfoTree& locations,
              const tsl::protobuf::Descriptor& descriptor,
              const CostTableEntry& entry, absl::string_view error) {
  const tsl::protobuf::FieldDescriptor* field =
      descriptor.FindFieldByNumber(entry.field_number);
  if (field == nullptr) return 0;
  const int index = field->is_repeated() ? std::max(entry.index, 0) : -1;
  // The most precise place known: a point, else a field of the entry.
  const tsl::protobuf::Descriptor* message = field->message_type();
  const tsl::protobuf::FieldDescriptor* inner =
      message == nullptr ? nullptr
      : entry.point >= 0 ? message->FindFieldByName("points")
                         : message->FindFieldByName(
                               std::string(error.substr(0, error.find(' '))));
  const TextFormat::ParseInfoTree* nested =
      inner == nullptr ? nullptr : locations.GetTreeForNested(field, index);
  if (nested != nullptr) {
    const int line =
        nested->GetLocation(inner, entry.point >= 0 ? entry.point : -1).line;
    if (line >= 0) return line + 1;
  }
  const int line = locations.GetLocation(field, index).line;
  return line >= 0 ? line + 1 : 0;
}

// The line of the first entry when it is in the line format that tables had
// before they were text protos ("link nccl nvlink 6 450"); else nullopt.
std::optional<int> LineFormatEntry(absl::string_view text) {
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    std::vector<absl::string_view> words =
        absl::StrSplit(line.substr(0, line.find('#')), absl::ByAnyChar(" \t\r"),
                       absl::SkipEmpty());
    if (words.empty()) continue;
    constexpr absl::string_view kKeys[] = {"link",
                                           "point",
                                           "sm_interference",
                                           "margin",
                                           "nvshmem_max_bytes",
                                           "backends",
                                           "symmetric_signals"};
    if (words.size() >= 2 && absl::c_linear_search(kKeys, words[0]) &&
        !absl::StrContains(line, ':') && !absl::StrContains(line, '{')) {
      return number;
    }
    return std::nullopt;
  }
  return std::nullopt;
}

absl::StatusOr<ToolCostTable> ParseOnto(ToolCostTable table,
                                        absl::string_view text,
                                        absl::string_view source) {
  ToolProto proto;
  tsl::protobuf::TextFormat::ParseInfoTree locations;
  absl::Status status = ParseTextProto(text, source, &proto, &locations);
  if (!status.ok()) {
    std::optional<int> line = LineFormatEntry(text);
    if (!line) return status;
    return absl::InvalidArgumentError(absl::StrCat(
        source, ":", *line,
        ": the cost table is in text format now (CostTableProto); this line "
        "is in the line format of earlier releases"));
  }
  CostTableEntry bad;
  status = Apply(proto, &table, &bad);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ":",
        EntryLine(locations, *ToolProto::descriptor(), bad, status.message()),
        ": ", status.message()));
  }
  return table;
}

// One `links` entry: its numbers, then its measured points, one a line.
void PrintLink(const ToolCostTable& table, Backend backend,
               LinkClass link_class, std::string* out) {
  const LinkCost& cost = table.link(backend, link_class);
  absl::StrAppend(
      out,
      "links {\n  backend: ", CoreProto::Backend_Name(ProtoBackend(backend)),
      "\n  link_class: ", CoreProto::LinkClass_Name(ProtoLinkClass(link_class)),
      "\n  latency_us: ", Shortest(cost.latency_us),
      "\n  bandwidth_gbps: ", Shortest(cost.bandwidth_gbps),
      "\n  per_buffer_us: ", Shortest(cost.per_buffer_us), "\n");
  for (const CurvePoint& point : table.curve(backend, link_class)) {
    absl::StrAppend(out, "  points { buffers: ", point.buffers,
                    " bytes: ", point.bytes, " us: ", Shortest(point.us),
                    " }\n");
  }
  out->append("}\n");
}

}  // namespace

ToolCostTable DefaultToolCostTable() {
  static const ToolCostTable* const table =
      new ToolCostTable{DefaultCostTable()};
  return *table;
}

absl::StatusOr<ToolCostTable> ParseToolCostTable(
    absl::string_view text, absl::string_view source_name) {
  return ParseOnto(DefaultToolCostTable(), text, source_name);
}

absl::Status SetLink(ToolCostTable* table, Backend backend,
                     LinkClass link_class, const LinkCost& cost,
                     const std::vector<CurvePoint>& points) {
  ToolProto proto;
  CoreProto::Link* link = proto.add_links();
  link->set_backend(ProtoBackend(backend));
  link->set_link_class(ProtoLinkClass(link_class));
  link->set_latency_us(cost.latency_us);
  link->set_bandwidth_gbps(cost.bandwidth_gbps);
  link->set_per_buffer_us(cost.per_buffer_us);
  for (const CurvePoint& p : points) {
    CoreProto::Point* point = link->add_points();
    point->set_buffers(p.buffers);
    point->set_bytes(p.bytes);
    point->set_us(p.us);
  }
  CostTableEntry bad;
  return Apply(proto, table, &bad);
}

absl::Status SetSmInterference(ToolCostTable* table, Backend backend,
                               double fraction) {
  ToolProto proto;
  CoreProto::SmInterference* sm = proto.add_sm_interference();
  sm->set_backend(ProtoBackend(backend));
  sm->set_fraction(fraction);
  CostTableEntry bad;
  return Apply(proto, table, &bad);
}

std::string CostTableToString(const ToolCostTable& table) {
  std::string out = absl::StrCat(
      "backends: [",
      absl::StrJoin(table.backends, ", ",
                    [](std::string* s, Backend backend) {
                      s->append(CoreProto::Backend_Name(ProtoBackend(backend)));
                    }),
      "]\nsymmetric_signals: ", table.symmetric_signals ? "true" : "false",
      "\n");
  for (int b = 0; b < kNumBackends; ++b) {
    for (int c = 0; c < kNumLinkClasses; ++c) {
      // NVSHMEM has no network row: it runs only inside one host.
      if (b == static_cast<int>(Backend::kNvshmem) &&
          c == static_cast<int>(LinkClass::kNetwork)) {
        continue;
      }
      PrintLink(table, static_cast<Backend>(b), static_cast<LinkClass>(c),
                &out);
    }
  }
  for (int b = 0; b < kNumBackends; ++b) {
    const Backend backend = static_cast<Backend>(b);
    absl::StrAppend(&out, "sm_interference { backend: ",
                    CoreProto::Backend_Name(ProtoBackend(backend)),
                    " fraction: ", Shortest(table.sm_interference(backend)),
                    " }\n");
  }
  absl::StrAppend(&out, "margin: ", Shortest(table.core.margin),
                  "\nnvshmem_max_bytes: ", table.core.nvshmem_max_bytes, "\n");
  return out;
}

}  // namespace xla::gpu::backend_selection
