/* Copyright 2026 The NVSHMEM ring-attention pass authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
==============================================================================*/

#include "xla/backends/gpu/transforms/collectives/nvshmem_collective_permute_rewriter.h"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "xla/hlo/ir/hlo_casting_utils.h"
#include "xla/hlo/ir/hlo_computation.h"
#include "xla/hlo/ir/hlo_instruction.h"
#include "xla/hlo/ir/hlo_instructions.h"
#include "xla/hlo/ir/hlo_module.h"
#include "xla/hlo/ir/hlo_opcode.h"
#include "xla/hlo/utils/hlo_query.h"
#include "xla/literal_util.h"
#include "xla/backends/gpu/transforms/collectives/nvshmem_backend_selection.h"
#include "xla/shape.h"
#include "xla/shape_util.h"
#include "xla/tsl/platform/errors.h"
#include "xla/tsl/platform/statusor.h"
#include "xla/xla_data.pb.h"

namespace xla {
namespace gpu {
namespace {

namespace sel = nvshmem_selection;

// --- Order-preserving JSON, just enough to set one field ------------------
//
// The backend config of a collective may come from a newer XLA with fields
// this XLA's GpuBackendConfig does not know (jax 0.10 adds
// "collectives_mode"). Going through the proto would drop them, so we edit the
// JSON text itself and keep every other byte's meaning and the key order.

struct JsonValue {
  enum class Kind { kScalar, kArray, kObject } kind = Kind::kScalar;
  std::string scalar;  // Raw token: number, true/false/null or quoted string.
  std::vector<JsonValue> items;
  std::vector<std::pair<std::string, JsonValue>> members;  // Raw quoted keys.
};

class JsonReader {
 public:
  explicit JsonReader(absl::string_view text) : text_(text) {}

  std::optional<JsonValue> ReadDocument() {
    std::optional<JsonValue> value = ReadValue(0);
    SkipSpace();
    if (!value || pos_ != text_.size()) return std::nullopt;
    return value;
  }

 private:
  void SkipSpace() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\t' ||
            text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  std::optional<std::string> ReadString() {
    if (pos_ >= text_.size() || text_[pos_] != '"') return std::nullopt;
    size_t start = pos_++;
    while (pos_ < text_.size()) {
      char c = text_[pos_++];
      if (c == '\\') {
        if (pos_ >= text_.size()) return std::nullopt;
        ++pos_;
      } else if (c == '"') {
        return std::string(text_.substr(start, pos_ - start));
      }
    }
    return std::nullopt;
  }

  std::optional<JsonValue> ReadValue(int depth) {
    if (depth > 64) return std::nullopt;  // Refuse absurd nesting.
    SkipSpace();
    if (pos_ >= text_.size()) return std::nullopt;
    JsonValue value;
    char c = text_[pos_];
    if (c == '{') {
      value.kind = JsonValue::Kind::kObject;
      ++pos_;
      SkipSpace();
      if (pos_ < text_.size() && text_[pos_] == '}') {
        ++pos_;
        return value;
      }
      while (true) {
        SkipSpace();
        std::optional<std::string> key = ReadString();
        if (!key) return std::nullopt;
        SkipSpace();
        if (pos_ >= text_.size() || text_[pos_] != ':') return std::nullopt;
        ++pos_;
        std::optional<JsonValue> member = ReadValue(depth + 1);
        if (!member) return std::nullopt;
        value.members.emplace_back(*std::move(key), *std::move(member));
        SkipSpace();
        if (pos_ < text_.size() && text_[pos_] == ',') {
          ++pos_;
          continue;
        }
        if (pos_ < text_.size() && text_[pos_] == '}') {
          ++pos_;
          return value;
        }
        return std::nullopt;
      }
    }
    if (c == '[') {
      value.kind = JsonValue::Kind::kArray;
      ++pos_;
      SkipSpace();
      if (pos_ < text_.size() && text_[pos_] == ']') {
        ++pos_;
        return value;
      }
      while (true) {
        std::optional<JsonValue> item = ReadValue(depth + 1);
        if (!item) return std::nullopt;
        value.items.push_back(*std::move(item));
        SkipSpace();
        if (pos_ < text_.size() && text_[pos_] == ',') {
          ++pos_;
          continue;
        }
        if (pos_ < text_.size() && text_[pos_] == ']') {
          ++pos_;
          return value;
        }
        return std::nullopt;
      }
    }
    if (c == '"') {
      std::optional<std::string> s = ReadString();
      if (!s) return std::nullopt;
      value.scalar = *std::move(s);
      return value;
    }
    size_t start = pos_;
    while (pos_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[pos_])) ||
            text_[pos_] == '-' || text_[pos_] == '+' || text_[pos_] == '.')) {
      ++pos_;
    }
    if (pos_ == start) return std::nullopt;
    value.scalar = std::string(text_.substr(start, pos_ - start));
    return value;
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

void WriteJson(const JsonValue& value, std::string* out) {
  switch (value.kind) {
    case JsonValue::Kind::kScalar:
      *out += value.scalar;
      return;
    case JsonValue::Kind::kArray:
      *out += '[';
      for (size_t i = 0; i < value.items.size(); ++i) {
        if (i > 0) *out += ',';
        WriteJson(value.items[i], out);
      }
      *out += ']';
      return;
    case JsonValue::Kind::kObject:
      *out += '{';
      for (size_t i = 0; i < value.members.size(); ++i) {
        if (i > 0) *out += ',';
        *out += value.members[i].first;
        *out += ':';
        WriteJson(value.members[i].second, out);
      }
      *out += '}';
      return;
  }
}

JsonValue* FindMember(JsonValue& object, absl::string_view key) {
  std::string quoted = absl::StrCat("\"", key, "\"");
  for (auto& [name, member] : object.members) {
    if (name == quoted) return &member;
  }
  return nullptr;
}

JsonValue& GetOrAddObject(JsonValue& object, absl::string_view key) {
  if (JsonValue* member = FindMember(object, key)) return *member;
  JsonValue empty;
  empty.kind = JsonValue::Kind::kObject;
  object.members.emplace_back(absl::StrCat("\"", key, "\""), std::move(empty));
  return object.members.back().second;
}

absl::StatusOr<JsonValue> ParseBackendConfig(const HloInstruction* instr) {
  const std::string& raw = instr->raw_backend_config_string();
  if (raw.empty()) {
    JsonValue empty;
    empty.kind = JsonValue::Kind::kObject;
    return empty;
  }
  std::optional<JsonValue> value = JsonReader(raw).ReadDocument();
  if (!value || value->kind != JsonValue::Kind::kObject) {
    return absl::InvalidArgumentError(absl::StrCat(
        instr->name(), ": backend_config is not a JSON object: ", raw));
  }
  return *std::move(value);
}

// Returns true when the config changed.
absl::StatusOr<bool> SetBackend(HloInstruction* instr,
                                absl::string_view backend) {
  TF_ASSIGN_OR_RETURN(JsonValue config, ParseBackendConfig(instr));
  JsonValue& collective = GetOrAddObject(config, "collective_backend_config");
  if (collective.kind != JsonValue::Kind::kObject) {
    return absl::InvalidArgumentError(absl::StrCat(
        instr->name(), ": collective_backend_config is not an object"));
  }
  std::string quoted = absl::StrCat("\"", backend, "\"");
  if (JsonValue* existing = FindMember(collective, "backend")) {
    if (existing->scalar == quoted) return false;
    existing->kind = JsonValue::Kind::kScalar;
    existing->scalar = quoted;
  } else {
    JsonValue value;
    value.scalar = quoted;
    collective.members.insert(collective.members.begin(),
                              {"\"backend\"", std::move(value)});
  }
  std::string out;
  WriteJson(config, &out);
  instr->set_raw_backend_config_string(out);
  return true;
}

// --- Helpers on instructions ----------------------------------------------

const char* XlaBackendName(sel::Backend backend) {
  return backend == sel::Backend::kNvshmem ? "NVSHMEM" : "DEFAULT";
}

int64_t MessageBytes(const HloInstruction* instr) {
  int64_t bytes = 0;
  for (const HloInstruction* operand : instr->operands()) {
    ShapeUtil::ForEachSubshape(
        operand->shape(), [&](const Shape& subshape, const ShapeIndex&) {
          if (subshape.IsArray()) {
            bytes += ShapeUtil::ByteSizeOfElements(subshape);
          }
        });
  }
  return bytes;
}

std::string ModeledAttr(const sel::Decision& d) {
  auto us = [](double v) {
    if (v < 0) return std::string("-");
    char buffer[32];
    std::snprintf(buffer, sizeof(buffer), "%.3f", v);
    return std::string(buffer);
  };
  return absl::StrCat("nccl=", us(d.nccl_us), ",nvshmem=", us(d.nvshmem_us),
                      ",split=", us(d.split_us));
}

// Merges `extra` into the instruction's frontend attributes; true if changed.
bool MergeFrontendAttributes(
    HloInstruction* instr,
    const std::vector<std::pair<std::string, std::string>>& extra) {
  FrontendAttributes attributes = instr->frontend_attributes();
  bool changed = false;
  auto* map = attributes.mutable_map();
  for (const auto& [key, value] : extra) {
    auto it = map->find(key);
    if (it == map->end() || it->second != value) {
      (*map)[key] = value;
      changed = true;
    }
  }
  if (changed) instr->set_frontend_attributes(attributes);
  return changed;
}

bool HasFrontendAttribute(const HloInstruction* instr, absl::string_view key) {
  return instr->frontend_attributes().map().contains(std::string(key));
}

// Gives `instr` the original's metadata; a scheduling name, which the
// latency-hiding scheduler matches profiles on, names `instr` itself.
void CopyMetadata(const HloInstruction* original, HloInstruction* instr) {
  OpMetadata metadata = original->metadata();
  if (!metadata.scheduling_name().empty()) {
    metadata.set_scheduling_name(std::string(instr->name()));
  }
  instr->set_metadata(metadata);
}

// The original's frontend attributes without this pass's own records, which
// describe the original's decision, not the new instruction's.
FrontendAttributes InheritedAttributes(const HloInstruction* original) {
  FrontendAttributes attributes = original->frontend_attributes();
  for (absl::string_view key : {kNvshmemPlanAttr, kNvshmemReasonAttr,
                                kNvshmemModeledAttr, kNvshmemSplitPartAttr}) {
    attributes.mutable_map()->erase(std::string(key));
  }
  return attributes;
}

Shape StartShape(absl::Span<HloInstruction* const> operands,
                 const Shape& result_shape) {
  if (operands.size() == 1) {
    return ShapeUtil::MakeTupleShape({operands[0]->shape(), result_shape});
  }
  std::vector<Shape> operand_shapes;
  for (const HloInstruction* operand : operands) {
    operand_shapes.push_back(operand->shape());
  }
  return ShapeUtil::MakeTupleShape(
      {ShapeUtil::MakeTupleShape(operand_shapes), result_shape});
}

struct StartDone {
  HloInstruction* start;
  HloInstruction* done;
};

// Emits one async collective-permute with the given backend. The config and
// attributes of `original` carry over so nothing it said is lost.
absl::StatusOr<StartDone> EmitStartDone(
    HloComputation* computation, const HloInstruction* original,
    absl::Span<HloInstruction* const> operands, const Shape& result_shape,
    const std::vector<std::pair<int64_t, int64_t>>& pairs,
    std::optional<int64_t> channel_id, sel::Backend backend,
    const std::vector<std::pair<std::string, std::string>>& attributes,
    absl::string_view base_name) {
  HloInstruction* start = computation->AddInstruction(
      HloInstruction::CreateCollectivePermuteStart(
          StartShape(operands, result_shape), operands, pairs, channel_id),
      absl::StrCat(base_name, "-start"));
  HloInstruction* done = computation->AddInstruction(
      HloInstruction::CreateUnary(result_shape, HloOpcode::kCollectivePermuteDone,
                                  start),
      absl::StrCat(base_name, "-done"));
  for (HloInstruction* instr : {start, done}) {
    CopyMetadata(original, instr);
    instr->set_frontend_attributes(InheritedAttributes(original));
  }
  // A sync permute may carry a backend config (is_sync, queue ids); start
  // from it rather than from nothing.
  if (original->opcode() == HloOpcode::kCollectivePermute ||
      original->opcode() == HloOpcode::kCollectivePermuteStart) {
    start->set_raw_backend_config_string(
        original->raw_backend_config_string());
  }
  TF_RETURN_IF_ERROR(SetBackend(start, XlaBackendName(backend)).status());
  MergeFrontendAttributes(start, attributes);
  return StartDone{start, done};
}

struct Replacement {
  StartDone nvshmem;
  StartDone nccl;
  HloInstruction* result;  // Combines the two dones.
};

// Splits one permute into an NVSHMEM part and an NCCL part and selects, on
// every device, the part it is a target of.
absl::StatusOr<Replacement> EmitSplit(
    HloComputation* computation, HloModule* module,
    const HloInstruction* original, absl::Span<HloInstruction* const> operands,
    const Shape& result_shape,
    const std::vector<std::pair<int64_t, int64_t>>& nvshmem_pairs,
    const std::vector<std::pair<int64_t, int64_t>>& nccl_pairs,
    std::optional<int64_t> channel_id, int64_t num_ids,
    const std::vector<std::pair<std::string, std::string>>& attributes,
    std::vector<std::string>* new_names) {
  auto with_part = [&](const char* part) {
    auto result = attributes;
    result.emplace_back(std::string(kNvshmemSplitPartAttr), part);
    return result;
  };
  std::optional<int64_t> second_channel;
  if (channel_id.has_value()) second_channel = hlo_query::NextChannelId(*module);
  TF_ASSIGN_OR_RETURN(
      StartDone nvshmem,
      EmitStartDone(computation, original, operands, result_shape,
                    nvshmem_pairs, channel_id, sel::Backend::kNvshmem,
                    with_part("nvshmem"),
                    absl::StrCat(original->name(), ".nvshmem")));
  TF_ASSIGN_OR_RETURN(
      StartDone nccl,
      EmitStartDone(computation, original, operands, result_shape, nccl_pairs,
                    second_channel, sel::Backend::kNccl, with_part("nccl"),
                    absl::StrCat(original->name(), ".nccl")));

  // mask[id] is true where the device with that id receives from NVSHMEM.
  std::vector<bool> mask(num_ids, false);
  for (const auto& [src, dst] : nvshmem_pairs) mask[dst] = true;
  Literal mask_literal(ShapeUtil::MakeShape(PRED, {num_ids}));
  for (int64_t i = 0; i < num_ids; ++i) {
    mask_literal.Set<bool>({i}, mask[i]);
  }
  auto add = [&](std::unique_ptr<HloInstruction> instr, absl::string_view suffix) {
    HloInstruction* added = computation->AddInstruction(
        std::move(instr), absl::StrCat(original->name(), ".", suffix));
    CopyMetadata(original, added);
    new_names->push_back(std::string(added->name()));
    return added;
  };
  HloInstruction* table = add(
      HloInstruction::CreateConstant(std::move(mask_literal)), "nvshmem_targets");
  HloInstruction* id =
      add(channel_id.has_value() ? HloInstruction::CreatePartitionId()
                                 : HloInstruction::CreateReplicaId(),
          "device_id");
  HloInstruction* slot = add(
      HloInstruction::CreateDynamicSlice(ShapeUtil::MakeShape(PRED, {1}), table,
                                         {id}, {1}),
      "is_nvshmem_target_r1");
  HloInstruction* is_target = add(
      HloInstruction::CreateReshape(ShapeUtil::MakeShape(PRED, {}), slot),
      "is_nvshmem_target");

  auto select_leaf = [&](HloInstruction* from_nvshmem, HloInstruction* from_nccl,
                         const Shape& shape, absl::string_view suffix) {
    HloInstruction* predicate = add(
        HloInstruction::CreateBroadcast(
            ShapeUtil::ChangeElementType(shape, PRED), is_target, {}),
        absl::StrCat(suffix, "pred"));
    return add(HloInstruction::CreateTernary(shape, HloOpcode::kSelect,
                                             predicate, from_nvshmem, from_nccl),
               absl::StrCat(suffix, "combined"));
  };

  HloInstruction* result;
  if (result_shape.IsArray()) {
    result = select_leaf(nvshmem.done, nccl.done, result_shape, "");
  } else {
    std::vector<HloInstruction*> elements;
    for (int64_t i = 0; i < result_shape.tuple_shapes_size(); ++i) {
      const Shape& leaf = result_shape.tuple_shapes(i);
      std::string suffix = absl::StrCat(i, ".");
      HloInstruction* a = add(
          HloInstruction::CreateGetTupleElement(leaf, nvshmem.done, i),
          absl::StrCat(suffix, "nvshmem_part"));
      HloInstruction* b = add(
          HloInstruction::CreateGetTupleElement(leaf, nccl.done, i),
          absl::StrCat(suffix, "nccl_part"));
      elements.push_back(select_leaf(a, b, leaf, suffix));
    }
    result = add(HloInstruction::CreateTuple(elements), "combined");
  }
  for (HloInstruction* instr :
       {nvshmem.start, nvshmem.done, nccl.start, nccl.done}) {
    new_names->push_back(std::string(instr->name()));
  }
  return Replacement{nvshmem, nccl, result};
}

// Moves every use of `old` (and the root, if it is one) to `replacement`,
// then removes `old` and, if given, the start it was done of.
absl::Status ReplaceAndRemove(HloComputation* computation, HloInstruction* old,
                              HloInstruction* replacement,
                              HloInstruction* old_start) {
  TF_RETURN_IF_ERROR(old->DropAllControlDeps());
  TF_RETURN_IF_ERROR(old->ReplaceAllUsesWith(replacement));
  if (computation->root_instruction() == old) {
    computation->set_root_instruction(replacement,
                                      /*accept_different_shape=*/false);
  }
  TF_RETURN_IF_ERROR(computation->RemoveInstruction(old));
  if (old_start != nullptr) {
    TF_RETURN_IF_ERROR(old_start->DropAllControlDeps());
    TF_RETURN_IF_ERROR(computation->RemoveInstruction(old_start));
  }
  return absl::OkStatus();
}

bool IsSupportedResultShape(const Shape& shape) {
  if (shape.IsArray()) return true;
  if (!shape.IsTuple()) return false;
  for (const Shape& element : shape.tuple_shapes()) {
    if (!element.IsArray()) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<bool> NvshmemCollectivePermuteRewriter::RunImpl(
    HloModule* module,
    const absl::flat_hash_set<absl::string_view>& execution_threads) {
  records_.clear();
  const int num_partitions = module->config().num_partitions();
  const int num_replicas = module->config().replica_count();

  std::vector<HloInstruction*> candidates;
  for (HloComputation* computation :
       module->MakeNonfusionComputations(execution_threads)) {
    for (HloInstruction* instr : computation->MakeInstructionPostOrder()) {
      if ((instr->opcode() == HloOpcode::kCollectivePermute ||
           instr->opcode() == HloOpcode::kCollectivePermuteStart) &&
          !HasFrontendAttribute(instr, kNvshmemSplitPartAttr)) {
        candidates.push_back(instr);
      }
    }
  }

  bool changed = false;
  for (HloInstruction* instr : candidates) {
    auto* cp = Cast<HloCollectivePermuteInstruction>(instr);
    HloComputation* computation = cp->parent();
    OpRecord record;
    record.computation = computation->name();
    record.instruction = cp->name();
    record.form = cp->opcode() == HloOpcode::kCollectivePermute ? "sync" : "async";
    record.bytes = MessageBytes(cp);
    record.pairs = cp->source_target_pairs();

    std::string error;
    std::optional<std::vector<std::pair<int, int>>> edges =
        sel::EdgeIdsToDevices(options_.topology, record.pairs,
                              cp->channel_id().has_value(), num_partitions,
                              num_replicas, &error);
    if (!edges) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": ", cp->name(), ": ", error));
    }
    sel::PermuteRequest request;
    request.bytes = record.bytes;
    request.device_edges = *std::move(edges);
    request.pairs_per_group = static_cast<int>(record.pairs.size());
    // NVSHMEM's barrier spans every device of the program.
    request.team_size = num_partitions * num_replicas;
    request.buffers = static_cast<int>(cp->operand_count());
    record.decision =
        sel::Decide(options_.topology, options_.cost_table, request);
    if (record.decision.plan == sel::Plan::kSplit && module->has_schedule()) {
      // The schedule already overlaps this permute with compute; new
      // instructions would be placed without that overlap.
      sel::Decision& d = record.decision;
      d.reason = absl::StrCat("NCCL: the model prefers a split (", d.split_us,
                              " us vs NCCL ", d.nccl_us,
                              " us) but the module is already scheduled, and "
                              "splitting would lose the start/done overlap");
      d.plan = sel::Plan::kNccl;
      d.chosen_us = d.nccl_us;
      d.nvshmem_edge.clear();
    }
    const sel::Decision& decision = record.decision;
    std::vector<std::pair<std::string, std::string>> attributes = {
        {std::string(kNvshmemPlanAttr), sel::PlanName(decision.plan)},
        {std::string(kNvshmemReasonAttr), decision.reason},
        {std::string(kNvshmemModeledAttr), ModeledAttr(decision)},
    };

    auto skip = [&](absl::string_view why) {
      record.skipped = true;
      record.decision.reason = absl::StrCat("not rewritten: ", why, "; model: ",
                                            decision.reason);
    };
    HloInstruction* done = nullptr;
    if (cp->inplace()) {
      skip("in-place (dynamic-slice) collective-permute");
    } else if (computation->IsAsyncComputation()) {
      skip("wrapped in an async computation (newer XLA's async-start)");
    } else if (!IsSupportedResultShape(
                   cp->opcode() == HloOpcode::kCollectivePermute
                       ? cp->shape()
                       : cp->shape().tuple_shapes(1))) {
      skip("nested tuple result");
    } else if (cp->opcode() == HloOpcode::kCollectivePermuteStart) {
      if (cp->user_count() == 1 &&
          cp->users()[0]->opcode() == HloOpcode::kCollectivePermuteDone) {
        done = cp->users()[0];
      } else {
        skip("start is not used by exactly one collective-permute-done");
      }
    }

    if (record.skipped || options_.mode == Mode::kAnnotateOnly) {
      std::vector<std::pair<std::string, std::string>> recorded = attributes;
      recorded[1].second = record.decision.reason;
      changed |= MergeFrontendAttributes(cp, recorded);
      records_.push_back(std::move(record));
      continue;
    }

    const std::vector<HloInstruction*> operands(cp->operands().begin(),
                                                cp->operands().end());
    const Shape result_shape =
        done != nullptr ? done->shape() : cp->shape();
    if (decision.plan != sel::Plan::kSplit) {
      const sel::Backend backend = decision.plan == sel::Plan::kNvshmem
                                       ? sel::Backend::kNvshmem
                                       : sel::Backend::kNccl;
      if (done != nullptr) {
        // Already async: set the backend in place.
        TF_ASSIGN_OR_RETURN(bool config_changed,
                            SetBackend(cp, XlaBackendName(backend)));
        changed |= config_changed;
        changed |= MergeFrontendAttributes(cp, attributes);
      } else {
        TF_ASSIGN_OR_RETURN(
            StartDone replacement,
            EmitStartDone(computation, cp, operands, result_shape,
                          record.pairs, cp->channel_id(), backend, attributes,
                          cp->name()));
        TF_RETURN_IF_ERROR(
            cp->CopyAllControlDepsTo(replacement.start, replacement.done));
        TF_RETURN_IF_ERROR(
            ReplaceAndRemove(computation, cp, replacement.done, nullptr));
        record.new_instructions = {std::string(replacement.start->name()),
                                   std::string(replacement.done->name())};
        changed = true;
      }
      records_.push_back(std::move(record));
      continue;
    }

    // Split: pairs whose every device edge is NVLink go to NVSHMEM.
    std::vector<std::pair<int64_t, int64_t>> nvshmem_pairs, nccl_pairs;
    const size_t num_pairs = record.pairs.size();
    for (size_t i = 0; i < num_pairs; ++i) {
      bool all_nvlink = true;
      for (size_t e = i; e < decision.nvshmem_edge.size(); e += num_pairs) {
        all_nvlink &= static_cast<bool>(decision.nvshmem_edge[e]);
      }
      (all_nvlink ? nvshmem_pairs : nccl_pairs).push_back(record.pairs[i]);
    }
    const int64_t num_ids =
        cp->channel_id().has_value() ? num_partitions : num_replicas;
    TF_ASSIGN_OR_RETURN(
        Replacement replacement,
        EmitSplit(computation, module, cp, operands, result_shape,
                  nvshmem_pairs, nccl_pairs, cp->channel_id(), num_ids,
                  attributes, &record.new_instructions));
    for (const StartDone& part : {replacement.nvshmem, replacement.nccl}) {
      if (done == nullptr) {
        // Sync: what had to precede the permute precedes both starts; what
        // had to follow it follows the combined result.
        TF_RETURN_IF_ERROR(cp->CopyAllControlDepsTo(part.start, replacement.result));
      } else {
        // Async: the start's edges stay with the starts and the done's with
        // the dones (its successors wait for the combined result), so work
        // pinned between start and done stays between them.
        TF_RETURN_IF_ERROR(cp->CopyAllControlDepsTo(part.start, part.start));
        TF_RETURN_IF_ERROR(done->CopyAllControlDepsTo(part.done, replacement.result));
      }
    }
    if (done != nullptr) {
      TF_RETURN_IF_ERROR(
          ReplaceAndRemove(computation, done, replacement.result, cp));
    } else {
      TF_RETURN_IF_ERROR(
          ReplaceAndRemove(computation, cp, replacement.result, nullptr));
    }
    changed = true;
    records_.push_back(std::move(record));
  }

  if (changed && module->has_schedule()) {
    TF_RETURN_IF_ERROR(module->schedule().Update());
  }
  return changed;
}

}  // namespace gpu
}  // namespace xla
