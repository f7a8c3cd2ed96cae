#include "nvshmem_opt/mesh_groups.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "xla/hlo/parser/hlo_parser.h"

namespace nvshmem_opt {
namespace mesh_groups_test {
namespace {

using Groups = std::vector<std::vector<int64_t>>;

// The groups of `form`, checking that the whole form was read.
std::optional<Groups> Expand(const std::string& form) {
  size_t length = 0;
  std::optional<Groups> groups = ExpandMeshGroups(form, &length);
  if (groups) EXPECT_EQ(length, form.size()) << form;
  return groups;
}

// Devices are numbered row-major over the axes: on mesh['cp'=4,'tp'=2]
// device d has cp = d / 2 and tp = d % 2.
TEST(ExpandMeshGroupsTest, GroupsAlongOneAxis) {
  EXPECT_EQ(Expand("mesh['cp'=4,'tp'=2] {'cp'}"),
            (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(Expand("mesh['cp'=4,'tp'=2] {'tp'}"),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
}

// Several axes: one group, its devices enumerated in the order the axes are
// listed (the first listed varies slowest).
TEST(ExpandMeshGroupsTest, AxisOrderIsTheListedOrder) {
  EXPECT_EQ(Expand("mesh['cp'=4,'tp'=2] {'cp','tp'}"),
            (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  EXPECT_EQ(Expand("mesh['cp'=4,'tp'=2] {'tp','cp'}"),
            (Groups{{0, 2, 4, 6, 1, 3, 5, 7}}));
}

// No axis: every device is a group of its own.
TEST(ExpandMeshGroupsTest, NoAxesIsOneGroupPerDevice) {
  EXPECT_EQ(Expand("mesh['a'=2,'b'=2] {}"), (Groups{{0}, {1}, {2}, {3}}));
}

// device_ids as a list: the mesh's positions hold these devices.
TEST(ExpandMeshGroupsTest, ExplicitDeviceIds) {
  // Positions (a, b) hold 3, 2 / 1, 0; grouping over 'a' pairs position
  // (0, b) with (1, b).
  EXPECT_EQ(Expand("mesh['a'=2,'b'=2], device_ids=(3,2,1,0) {'a'}"),
            (Groups{{3, 1}, {2, 0}}));
}

// device_ids as an iota: [2,4]T(1,0) is iota(8) as 2x4, transposed:
// 0,4,1,5,2,6,3,7.
TEST(ExpandMeshGroupsTest, IotaDeviceIds) {
  EXPECT_EQ(Expand("mesh['x'=8], device_ids=([2,4]T(1,0)) {'x'}"),
            (Groups{{0, 4, 1, 5, 2, 6, 3, 7}}));
  // Without a transpose the iota is the identity.
  EXPECT_EQ(Expand("mesh['x'=4], device_ids=([4]) {'x'}"),
            (Groups{{0, 1, 2, 3}}));
}

// A sub-axis 'a':(2)4 splits 'a'=16 into [2 (before), 4 (the sub-axis),
// 2 (after)]: groups of 4 devices with stride 2.
TEST(ExpandMeshGroupsTest, SubAxis) {
  EXPECT_EQ(
      Expand("mesh['a'=16] {'a':(2)4}"),
      (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
}

// Two sub-axes of one axis: 'a'=8 split [2, 4] (pre-sizes 1 and 2), so
// device = i * 4 + j; the group enumerates them in the order listed.
TEST(ExpandMeshGroupsTest, TwoSubAxesOfOneAxis) {
  // Listed (1)2 then (2)4: i varies slowest.
  EXPECT_EQ(Expand("mesh['a'=8] {'a':(1)2,'a':(2)4}"),
            (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  // Listed (2)4 then (1)2: j varies slowest.
  EXPECT_EQ(Expand("mesh['a'=8] {'a':(2)4,'a':(1)2}"),
            (Groups{{0, 4, 1, 5, 2, 6, 3, 7}}));
}

// Only the form itself is read: `length` stops after its closing brace.
TEST(ExpandMeshGroupsTest, LengthStopsAtTheAxisList) {
  const std::string form = "mesh['a'=2] {'a'}";
  size_t length = 0;
  ASSERT_TRUE(ExpandMeshGroups(form + ", use_global_device_ids=true", &length));
  EXPECT_EQ(length, form.size());
}

// Forms that are not well formed give nullopt, never a guess.
TEST(ExpandMeshGroupsTest, MalformedFormsAreRefused) {
  for (const char* form : {
           "mesh['a'=2] {'a'",                           // Not closed.
           "mesh['a'=2] {'b'}",                          // No such axis.
           "mesh['a'=0] {'a'}",                          // An empty axis.
           "mesh['a'=2,'a'=2] {'a','a'}",                // Grouped twice.
           "mesh['a'=4], device_ids=(0,1) {'a'}",        // 2 ids for 4 devices.
           "mesh['a'=4], device_ids=([4]T(0,0)) {'a'}",  // Not a permutation.
           "mesh['a'=8] {'a':(3)2}",                     // 3 does not divide 8.
           "mesh['a'=2000000] {'a'}",                    // Over 2^20 devices.
           "mesh[a=2] {'a'}",                            // Unquoted axis name.
           "iota[2] {'a'}",                              // Not a mesh.
       }) {
    size_t length = 0;
    EXPECT_FALSE(ExpandMeshGroups(form, &length).has_value()) << form;
  }
}

// A statement as jaxlib 0.10 prints it, rewritten as explicit lists; the
// rest of the text is kept byte for byte.
TEST(ExplicitReplicaGroupsTest, RewritesTheMeshFormOnly) {
  const std::string text =
      "  %ar = f32[] all-reduce(%x), channel_id=2, "
      "replica_groups=mesh['cp'=4,'tp'=2] {'cp'}, use_global_device_ids=true,"
      " to_apply=%add\n";
  int rewritten = -1;
  EXPECT_EQ(ExplicitReplicaGroups(text, &rewritten),
            "  %ar = f32[] all-reduce(%x), channel_id=2, "
            "replica_groups={{0,2,4,6},{1,3,5,7}}, use_global_device_ids=true,"
            " to_apply=%add\n");
  EXPECT_EQ(rewritten, 1);
}

// Inside a quoted string (metadata) the same text is data, not a form; and a
// form this code cannot expand is left for XLA's parser to reject.
TEST(ExplicitReplicaGroupsTest, LeavesStringsAndUnknownFormsAlone) {
  const std::string quoted =
      "metadata={op_name=\"replica_groups=mesh['a'=2] {'a'}\"}\n";
  int rewritten = -1;
  EXPECT_EQ(ExplicitReplicaGroups(quoted, &rewritten), quoted);
  EXPECT_EQ(rewritten, 0);
  const std::string unknown = "replica_groups=mesh['a'=2] {'zz'}\n";
  EXPECT_EQ(ExplicitReplicaGroups(unknown, &rewritten), unknown);
  EXPECT_EQ(rewritten, 0);
}

TEST(ExplicitReplicaGroupsTest, CountsEachForm) {
  int rewritten = 0;
  EXPECT_EQ(ExplicitReplicaGroups("replica_groups=mesh['a'=2] {'a'}\n"
                                  "replica_groups=mesh['a'=2] {}\n",
                                  &rewritten),
            "replica_groups={{0,1}}\nreplica_groups={{0},{1}}\n");
  EXPECT_EQ(rewritten, 2);
}

// Real HLO from jaxlib 0.10 (a GSPMD all-reduce in the mesh form): the wheel's
// parser refuses it as dumped and reads it once rewritten, on the same lines.
TEST(ExplicitReplicaGroupsTest, MakesJaxlibHloReadableByTheWheelsParser) {
  std::ifstream file(absl::StrCat(
      NVSHMEM_FIXTURES_DIR, "/driver_tp_cp_1x1x8.after_optimizations.hlo"));
  std::stringstream buffer;
  buffer << file.rdbuf();
  const std::string text = buffer.str();
  ASSERT_TRUE(absl::StrContains(text, "replica_groups=mesh["));
  EXPECT_FALSE(xla::ParseAndReturnUnverifiedModule(text).ok());

  int rewritten = 0;
  const std::string readable = ExplicitReplicaGroups(text, &rewritten);
  EXPECT_GE(rewritten, 1);
  EXPECT_FALSE(absl::StrContains(readable, "replica_groups=mesh["));
  EXPECT_EQ(absl::c_count(readable, '\n'), absl::c_count(text, '\n'));
  // mesh['axis_0'=4,'axis_1'=1,'axis_2'=2] {'axis_0'}: devices 2 apart.
  EXPECT_TRUE(
      absl::StrContains(readable, "replica_groups={{0,2,4,6},{1,3,5,7}}"));
  auto module = xla::ParseAndReturnUnverifiedModule(readable);
  EXPECT_TRUE(module.ok()) << module.status();
}

}  // namespace
}  // namespace mesh_groups_test
}  // namespace nvshmem_opt
