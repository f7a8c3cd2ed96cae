/* Copyright 2026 The OpenXLA Authors.

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

#include "xla/backends/gpu/runtime/nvshmem_run_checks.h"

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/status_matchers.h"
#include "absl/status/statusor.h"
#include "xla/runtime/device_id.h"
#include "xla/runtime/process_id.h"
#include "xla/service/buffer_assignment.h"
#include "xla/service/computation_placer.h"

namespace xla::gpu {
namespace {

using ::absl_testing::IsOk;
using ::absl_testing::IsOkAndHolds;
using ::absl_testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Optional;

constexpr int64_t kCollective = 1;

TEST(RunAllocatesHeapTest, OnlyWhatTheRunAllocatesInCollectiveMemory) {
  BufferAllocation temp(0, 256, kCollective), other(1, 256, 0);
  BufferAllocation parameter(2, 256, kCollective),
      constant(3, 256, kCollective);
  BufferAllocation local(4, 256, kCollective), empty(5, 0, kCollective);
  BufferAllocation output(6, 256, kCollective);
  parameter.set_entry_computation_parameter(0, {}, false);
  constant.set_constant(true);
  local.set_is_thread_local(true);
  output.set_maybe_live_out(true);
  const std::vector<const BufferAllocation*> none = {&other, &parameter,
                                                     &constant, &local, &empty};
  EXPECT_FALSE(RunAllocatesHeap(none, kCollective));
  for (const BufferAllocation* last : {&temp, &output}) {
    std::vector<const BufferAllocation*> some = none;
    some.push_back(last);
    EXPECT_TRUE(RunAllocatesHeap(some, kCollective)) << last->index();
  }
}

// A job of two hosts of four single-GPU processes whose global ids PjRt gave
// by network proximity: the second host's processes 4..7 hold devices 0..3.
absl::flat_hash_map<GlobalDeviceId, ProcessId> ReorderedJob() {
  absl::flat_hash_map<GlobalDeviceId, ProcessId> job;
  for (int d = 0; d < 8; ++d) job[GlobalDeviceId(d)] = ProcessId((d + 4) % 8);
  return job;
}

DeviceAssignment Assignment(int replicas, std::vector<int64_t> devices) {
  DeviceAssignment assignment(replicas, devices.size() / replicas);
  for (int i = 0; i < devices.size(); ++i) {
    assignment(i % replicas, i / replicas) = devices[i];
  }
  return assignment;
}

// Every row and column of the assignment counts; none is one device.
TEST(CheckNvshmemJobTest, OneGpuPerProcessAndTheWholeJob) {
  const DeviceAssignment eight = Assignment(2, {0, 1, 2, 3, 4, 5, 6, 7});
  const DeviceAssignment four = Assignment(1, {0, 1, 2, 3});
  EXPECT_THAT(
      CheckNvshmemJob(/*processes=*/8, /*devices_per_process=*/1, &eight),
      IsOk());
  EXPECT_THAT(
      CheckNvshmemJob(8, 1, &four),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               HasSubstr("4 devices of the NVSHMEM job's 8 processes")));
  EXPECT_THAT(CheckNvshmemJob(16, 1, &eight),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("8 devices of the NVSHMEM job's 16")));
  EXPECT_THAT(CheckNvshmemJob(4, 2, &four),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("this process drives 2 GPUs")));
  EXPECT_THAT(CheckNvshmemJob(1, 1, nullptr), IsOk());
  EXPECT_THAT(CheckNvshmemJob(2, 1, nullptr),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("1 devices of the NVSHMEM job's 2")));
}

// The PEs recorded for `devices` of `job` with no pairs, or the error.
absl::StatusOr<std::vector<int64_t>> Pes(
    const DeviceAssignment& devices,
    const absl::flat_hash_map<GlobalDeviceId, ProcessId>& job) {
  NvshmemPeRecord record;
  auto never = [](int64_t) -> absl::StatusOr<bool> { return false; };
  absl::Status status =
      CheckAndRecordNvshmemPes(devices, &job, {}, never, record);
  if (!status.ok()) return status;
  return record.pes;
}

TEST(CheckAndRecordNvshmemPesTest, EveryRowAndColumnTranslated) {
  const auto job = ReorderedJob();
  EXPECT_THAT(Pes(Assignment(1, {0, 1, 2, 3, 4, 5, 6, 7}), job),
              IsOkAndHolds(ElementsAre(4, 5, 6, 7, 0, 1, 2, 3)));
  // Ids count replicas first: id r + p * replicas.
  EXPECT_THAT(Pes(Assignment(2, {7, 0, 1, 6, 2, 5, 3, 4}), job),
              IsOkAndHolds(ElementsAre(3, 4, 5, 2, 6, 1, 7, 0)));
  EXPECT_THAT(Pes(Assignment(4, {7, 0, 1, 6, 2, 5, 3, 4}), job),
              IsOkAndHolds(ElementsAre(3, 4, 5, 2, 6, 1, 7, 0)));
  EXPECT_THAT(Pes(Assignment(1, {0, 1, 2, 8}), job),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("id 3 runs on device 8")));
  auto two_gpus = job;
  two_gpus[GlobalDeviceId(3)] = ProcessId(4);
  EXPECT_THAT(Pes(Assignment(1, {0, 1, 2, 3}), two_gpus),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("id 3 runs on device 3")));
}

// Whether `pairs` of ids on `pes` (a job where device i is in process
// pes[i]) pass from a PE whose team is PEs 0..3, of two hosts of four.
absl::Status Team(std::vector<std::pair<int64_t, int64_t>> pairs,
                  std::vector<int64_t> pes) {
  absl::flat_hash_map<GlobalDeviceId, ProcessId> job;
  std::vector<int64_t> devices;
  for (int d = 0; d < pes.size(); ++d) {
    job[GlobalDeviceId(d)] = ProcessId(pes[d]);
    devices.push_back(d);
  }
  NvshmemPeRecord record;
  auto in_team = [](int64_t pe) -> absl::StatusOr<bool> { return pe < 4; };
  return CheckAndRecordNvshmemPes(Assignment(1, devices), &job, pairs, in_team,
                                  record);
}

TEST(CheckAndRecordNvshmemPesTest, NoPairCrossesTheTeam) {
  const std::vector<int64_t> identity = {0, 1, 2, 3, 4, 5, 6, 7};
  const std::vector<std::pair<int64_t, int64_t>> rings = {
      {0, 1}, {1, 2}, {2, 3}, {3, 0}, {4, 5}, {5, 6}, {6, 7}, {7, 4}};
  EXPECT_THAT(Team(rings, identity), IsOk());
  // Ids 0..3 on the PEs 4, 6, 5, 7 of the other host: the rings stay inside.
  EXPECT_THAT(Team(rings, {4, 6, 5, 7, 0, 1, 2, 3}), IsOk());
  // Pairs of another team only: that team's PEs see the crossing.
  EXPECT_THAT(Team({{5, 4}, {4, 5}}, identity), IsOk());
  for (const auto& pair :
       std::vector<std::pair<int64_t, int64_t>>{{3, 4}, {7, 0}}) {
    EXPECT_THAT(Team({pair}, identity),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         HasSubstr("leaves NVSHMEM_TEAM_SHARED")));
  }
  // Ids 1 and 2 on PEs of two hosts; the last pair alone crossing.
  EXPECT_THAT(Team({{1, 2}}, {0, 4, 1, 2}),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(Team({{0, 1}, {2, 1}}, {0, 1, 4, 5}),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(
      Team({{3, 4}}, {0, 1, 2, 3}),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no PE")));
  EXPECT_THAT(
      Team({{-1, 0}}, {0, 1, 2, 3}),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no PE")));
  NvshmemPeRecord record;
  // A failed query fails the check: here the source's (PE 4), not the
  // target's (PE 5).
  auto failing = [](int64_t pe) -> absl::StatusOr<bool> {
    if (pe % 2 == 1) return pe < 4;
    return absl::FailedPreconditionError("not initialized");
  };
  const auto job = ReorderedJob();
  EXPECT_THAT(CheckAndRecordNvshmemPes(Assignment(1, identity), &job, {{0, 1}},
                                       failing, record),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("not initialized")));
}

// The thunk's Initialize: a reordered multi-host job passes with translated
// PEs, checked once per device assignment, recorded only when it passes.
TEST(CheckAndRecordNvshmemPesTest, ReorderedMultiHostJobPassesTranslated) {
  const auto job = ReorderedJob();
  const std::vector<std::pair<int64_t, int64_t>> rings = {
      {0, 1}, {1, 2}, {2, 3}, {3, 0}, {4, 5}, {5, 6}, {6, 7}, {7, 4}};
  std::vector<int64_t> asked;
  auto in_team = [&](int64_t pe) -> absl::StatusOr<bool> {
    asked.push_back(pe);
    return pe < 4;
  };
  const DeviceAssignment all = Assignment(1, {0, 1, 2, 3, 4, 5, 6, 7});
  NvshmemPeRecord record;
  EXPECT_THAT(CheckAndRecordNvshmemPes(all, &job, rings, in_team, record),
              IsOk());
  EXPECT_THAT(record.pes, ElementsAre(4, 5, 6, 7, 0, 1, 2, 3));
  EXPECT_EQ(asked.size(), 2 * rings.size());
  EXPECT_THAT(NvshmemTargetPe(record, all, 1), IsOkAndHolds(Optional(5)));
  EXPECT_THAT(NvshmemTargetPe(record, all, 7), IsOkAndHolds(Optional(3)));
  EXPECT_THAT(NvshmemTargetPe(record, all, std::nullopt),
              IsOkAndHolds(std::nullopt));
  EXPECT_THAT(NvshmemTargetPe(record, all, 8), Not(IsOk()));
  // Checked: the same assignment again asks nothing.
  asked.clear();
  EXPECT_THAT(CheckAndRecordNvshmemPes(all, &job, rings, in_team, record),
              IsOk());
  EXPECT_TRUE(asked.empty());
  // Another assignment whose rings cross the hosts fails and records nothing.
  const DeviceAssignment crossing = Assignment(1, {0, 1, 4, 5, 2, 3, 6, 7});
  EXPECT_THAT(CheckAndRecordNvshmemPes(crossing, &job, rings, in_team, record),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("leaves NVSHMEM_TEAM_SHARED")));
  EXPECT_FALSE(asked.empty());
  EXPECT_THAT(NvshmemTargetPe(record, crossing, 1),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(NvshmemTargetPe(record, crossing, std::nullopt),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(NvshmemTargetPe(record, all, 1), IsOkAndHolds(Optional(5)));
  EXPECT_THAT(
      CheckAndRecordNvshmemPes(crossing, nullptr, rings, in_team, record),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not set up")));
  NvshmemPeRecord none;
  EXPECT_THAT(CheckAndRecordNvshmemPes(all, nullptr, rings, in_team, none),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(NvshmemTargetPe(none, all, 1), Not(IsOk()));
}

}  // namespace
}  // namespace xla::gpu
