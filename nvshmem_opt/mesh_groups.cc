#include "nvshmem_opt/mesh_groups.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

namespace nvshmem_opt {
namespace {

// Larger meshes are not real modules; refusing them bounds the work.
constexpr int64_t kMaxDevices = int64_t{1} << 20;

class Cursor {
 public:
  explicit Cursor(absl::string_view text) : text_(text) {}
  size_t pos() const { return pos_; }
  bool Peek(char c) const { return pos_ < text_.size() && text_[pos_] == c; }
  bool Eat(absl::string_view token) {
    if (text_.substr(pos_, token.size()) != token) return false;
    pos_ += token.size();
    return true;
  }
  void SkipSpaces() {
    while (Peek(' ')) ++pos_;
  }
  std::optional<int64_t> Int() {
    int64_t value = 0;
    size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      value = value * 10 + (text_[pos_++] - '0');
      if (value > kMaxDevices) return std::nullopt;
    }
    if (pos_ == start) return std::nullopt;
    return value;
  }
  // 'name': axis names are quoted with single quotes and never contain one.
  std::optional<std::string> Name() {
    if (!Eat("'")) return std::nullopt;
    size_t end = text_.find('\'', pos_);
    if (end == absl::string_view::npos) return std::nullopt;
    std::string name(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return name;
  }
  // Comma-separated integers up to `close` (consumed).
  std::optional<std::vector<int64_t>> Ints(char close) {
    std::vector<int64_t> values;
    while (true) {
      std::optional<int64_t> v = Int();
      if (!v) return std::nullopt;
      values.push_back(*v);
      if (Eat(",")) continue;
      if (Eat(absl::string_view(&close, 1))) return values;
      return std::nullopt;
    }
  }

 private:
  absl::string_view text_;
  size_t pos_ = 0;
};

struct AxisRef {
  int axis = 0;
  std::optional<std::pair<int64_t, int64_t>> sub;  // (pre_size, size)
};

struct MeshForm {
  std::vector<std::string> names;
  std::vector<int64_t> sizes;
  std::vector<int64_t> devices;  // Row-major over the axes.
  std::vector<AxisRef> refs;
};

// iota(N) reshaped to `dims`, transposed by `perm`, flattened.
std::optional<std::vector<int64_t>> IotaDevices(
    const std::vector<int64_t>& dims, std::vector<int64_t> perm) {
  if (perm.empty()) {
    perm.resize(dims.size());
    std::iota(perm.begin(), perm.end(), 0);
  }
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (size_t k = 0; k < sorted.size(); ++k) {
    if (sorted[k] != static_cast<int64_t>(k)) return std::nullopt;
  }
  if (perm.size() != dims.size()) return std::nullopt;
  int64_t total = 1;
  for (int64_t d : dims) {
    if (d < 1 || (total *= d) > kMaxDevices) return std::nullopt;
  }
  std::vector<int64_t> order(perm.begin(), perm.end());
  std::vector<int64_t> out;
  std::vector<int64_t> strides(dims.size(), 1);
  for (int k = static_cast<int>(dims.size()) - 2; k >= 0; --k) {
    strides[k] = strides[k + 1] * dims[k + 1];
  }
  std::vector<int64_t> index(dims.size(), 0);
  for (int64_t n = 0; n < total; ++n) {
    int64_t flat = 0;
    for (size_t k = 0; k < order.size(); ++k)
      flat += index[k] * strides[order[k]];
    out.push_back(flat);
    for (int k = static_cast<int>(order.size()) - 1; k >= 0; --k) {
      if (++index[k] < dims[order[k]]) break;
      index[k] = 0;
    }
  }
  return out;
}

std::optional<MeshForm> ParseMesh(Cursor& c) {
  MeshForm mesh;
  if (!c.Eat("mesh[")) return std::nullopt;
  int64_t total = 1;
  if (!c.Eat("]")) {
    while (true) {
      std::optional<std::string> name = c.Name();
      std::optional<int64_t> size;
      if (!name || !c.Eat("=") || !(size = c.Int()) || *size < 1) {
        return std::nullopt;
      }
      total *= *size;
      if (total > kMaxDevices) return std::nullopt;
      mesh.names.push_back(*name);
      mesh.sizes.push_back(*size);
      if (c.Eat(",")) continue;
      if (c.Eat("]")) break;
      return std::nullopt;
    }
  }
  mesh.devices.resize(total);
  std::iota(mesh.devices.begin(), mesh.devices.end(), 0);
  if (c.Eat(", device_ids=(")) {
    std::optional<std::vector<int64_t>> ids;
    if (c.Eat("[")) {  // An iota: "[4,16]T(1,0)" or "[64]".
      std::optional<std::vector<int64_t>> dims = c.Ints(']');
      std::optional<std::vector<int64_t>> perm = std::vector<int64_t>();
      if (dims && c.Eat("T(")) perm = c.Ints(')');
      if (dims && perm && c.Eat(")")) ids = IotaDevices(*dims, *perm);
    } else {
      ids = c.Ints(')');
    }
    if (!ids || static_cast<int64_t>(ids->size()) != total) return std::nullopt;
    mesh.devices = *std::move(ids);
  }
  c.SkipSpaces();
  if (!c.Eat("{")) return std::nullopt;
  if (c.Eat("}")) return mesh;
  std::map<std::string, int> axis_of;
  for (size_t a = 0; a < mesh.names.size(); ++a) axis_of[mesh.names[a]] = a;
  while (true) {
    std::optional<std::string> name = c.Name();
    if (!name || axis_of.count(*name) == 0) return std::nullopt;
    AxisRef ref;
    ref.axis = axis_of[*name];
    if (c.Eat(":(")) {
      std::optional<int64_t> pre = c.Int(), size;
      if (!pre || !c.Eat(")") || !(size = c.Int())) return std::nullopt;
      ref.sub = {{*pre, *size}};
    }
    mesh.refs.push_back(ref);
    if (c.Eat(",")) continue;
    if (c.Eat("}")) return mesh;
    return std::nullopt;
  }
}

// One mesh axis split for the refs that name it: the sizes of its parts and,
// per ref (in list order), which part it groups over.
bool SplitAxis(int64_t full, const std::vector<const AxisRef*>& refs,
               std::vector<int64_t>* parts, std::vector<int>* grouped) {
  if (refs.size() == 1 && !refs[0]->sub) {
    *parts = {full};
    *grouped = {0};
    return true;
  }
  std::vector<size_t> order(refs.size());
  std::iota(order.begin(), order.end(), 0);
  for (const AxisRef* ref : refs) {
    if (!ref->sub || ref->sub->first < 1 || ref->sub->second < 1) return false;
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return refs[a]->sub->first < refs[b]->sub->first;
  });
  grouped->assign(refs.size(), 0);
  int64_t covered = 1;
  for (size_t k : order) {
    auto [pre, size] = *refs[k]->sub;
    if (refs.size() == 1 || pre != covered) {
      if (pre % covered != 0) return false;
      parts->push_back(pre / covered);  // The devices before this sub-axis.
      covered = pre;
    }
    (*grouped)[k] = static_cast<int>(parts->size());
    parts->push_back(size);
    covered *= size;
  }
  if (full % covered != 0) return false;
  if (refs.size() == 1 || covered != full) parts->push_back(full / covered);
  return true;
}

}  // namespace

std::optional<std::vector<std::vector<int64_t>>> ExpandMeshGroups(
    absl::string_view text, size_t* length) {
  Cursor c(text);
  std::optional<MeshForm> mesh = ParseMesh(c);
  if (!mesh) return std::nullopt;
  *length = c.pos();
  // The axes split into parts; the grouped parts, in the order listed.
  std::vector<int64_t> dims;
  std::vector<int64_t> grouped(mesh->refs.size(), -1);
  for (size_t a = 0; a < mesh->sizes.size(); ++a) {
    std::vector<const AxisRef*> refs;
    std::vector<size_t> positions;
    for (size_t r = 0; r < mesh->refs.size(); ++r) {
      if (mesh->refs[r].axis == static_cast<int>(a)) {
        refs.push_back(&mesh->refs[r]);
        positions.push_back(r);
      }
    }
    if (refs.empty()) {
      dims.push_back(mesh->sizes[a]);
      continue;
    }
    std::vector<int64_t> parts;
    std::vector<int> which;
    if (!SplitAxis(mesh->sizes[a], refs, &parts, &which)) return std::nullopt;
    for (size_t k = 0; k < refs.size(); ++k) {
      grouped[positions[k]] = static_cast<int64_t>(dims.size()) + which[k];
    }
    dims.insert(dims.end(), parts.begin(), parts.end());
  }
  // Ungrouped parts first (in order), then the grouped ones as listed.
  std::vector<int64_t> perm;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (std::find(grouped.begin(), grouped.end(), d) == grouped.end()) {
      perm.push_back(d);
    }
  }
  int64_t group_size = 1;
  for (int64_t g : grouped) {
    if (std::count(grouped.begin(), grouped.end(), g) != 1) return std::nullopt;
    perm.push_back(g);
    group_size *= dims[g];
  }
  std::optional<std::vector<int64_t>> order = IotaDevices(dims, perm);
  if (!order || order->size() != mesh->devices.size() || group_size < 1) {
    return std::nullopt;
  }
  std::vector<std::vector<int64_t>> groups;
  for (size_t i = 0; i < order->size(); ++i) {
    if (i % group_size == 0) groups.emplace_back();
    groups.back().push_back(mesh->devices[(*order)[i]]);
  }
  return groups;
}

std::string ExplicitReplicaGroups(const std::string& text, int* rewritten) {
  static constexpr absl::string_view kKey = "replica_groups=mesh[";
  *rewritten = 0;
  std::string out;
  size_t copied = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '"') {  // Skip a quoted string.
      for (++i; i < text.size() && text[i] != '"'; ++i) {
        if (text[i] == '\\') ++i;
      }
      continue;
    }
    if (text[i] != 'r' || text.compare(i, kKey.size(), kKey) != 0) continue;
    const size_t value = i + kKey.size() - 5;  // At "mesh[".
    size_t length = 0;
    auto groups =
        ExpandMeshGroups(absl::string_view(text).substr(value), &length);
    if (!groups) continue;
    std::vector<std::string> lists;
    for (const auto& group : *groups) {
      lists.push_back(absl::StrCat("{", absl::StrJoin(group, ","), "}"));
    }
    absl::StrAppend(&out,
                    absl::string_view(text).substr(copied, value - copied), "{",
                    absl::StrJoin(lists, ","), "}");
    copied = value + length;
    i = copied - 1;
    ++*rewritten;
  }
  if (*rewritten == 0) return text;
  out.append(text, copied, std::string::npos);
  return out;
}

}  // namespace nvshmem_opt
