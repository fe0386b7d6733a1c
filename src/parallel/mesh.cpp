#include "parallel/mesh.h"

#include "core/error.h"

namespace loom {

std::string_view axis_name(Axis a) {
  switch (a) {
    case Axis::Dp: return "dp";
    case Axis::Pp: return "pp";
    case Axis::Sp: return "sp";
    case Axis::Kvp: return "kvp";
    case Axis::Tp: return "tp";
  }
  return "?";
}

Mesh::Mesh(std::vector<MeshDim> dims, std::vector<int> order) : dims_(std::move(dims)) {
  int n = 1;
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (dims_[i].size < 1) fail("mesh axis ", axis_name(dims_[i].axis), "=", dims_[i].size, " must be >= 1");
    for (size_t j = 0; j < i; ++j)
      if (dims_[j].axis == dims_[i].axis) fail("mesh axis ", axis_name(dims_[i].axis), " appears twice");
    n *= dims_[i].size;
  }
  if (order.empty()) {
    order.resize(n);
    for (int i = 0; i < n; ++i) order[i] = i;
  }
  if (int(order.size()) != n) fail("mesh order has ", order.size(), " ranks, the axes make ", n);
  position_.assign(n, -1);
  for (int i = 0; i < n; ++i) {
    int r = order[i];
    if (r < 0 || r >= n || position_[r] != -1)
      fail("mesh order is not a permutation of [0, ", n, "): rank ", r, " at position ", i);
    position_[r] = i;
  }
  order_ = std::move(order);
}

int Mesh::check_rank(int global_rank) const {
  if (global_rank < 0 || global_rank >= size())
    fail("rank ", global_rank, " is outside the mesh of ", size(), " ranks");
  return global_rank;
}

int Mesh::dim_index(Axis a) const {
  for (size_t i = 0; i < dims_.size(); ++i)
    if (dims_[i].axis == a) return int(i);
  return -1;
}

bool Mesh::has(Axis a) const { return dim_index(a) >= 0; }

int Mesh::degree(Axis a) const {
  int i = dim_index(a);
  return i < 0 ? 1 : dims_[i].size;
}

std::vector<int> Mesh::coord(int global_rank) const {
  int pos = position_[check_rank(global_rank)];
  std::vector<int> c(dims_.size());
  for (int i = int(dims_.size()) - 1; i >= 0; --i) {
    c[i] = pos % dims_[i].size;
    pos /= dims_[i].size;
  }
  return c;
}

int Mesh::coord(int global_rank, Axis a) const {
  int i = dim_index(a);
  if (i < 0) {
    check_rank(global_rank);
    return 0;
  }
  return coord(global_rank)[i];
}

int Mesh::rank_at(const std::vector<int>& coords) const {
  LOOM_CHECK(coords.size() == dims_.size(), "coordinates ", coords.size(), " vs dims ", dims_.size());
  int pos = 0;
  for (size_t i = 0; i < dims_.size(); ++i) {
    LOOM_CHECK(coords[i] >= 0 && coords[i] < dims_[i].size, "coordinate ", coords[i], " of ",
               axis_name(dims_[i].axis), "=", dims_[i].size);
    pos = pos * dims_[i].size + coords[i];
  }
  return order_[pos];
}

std::vector<int> Mesh::group(int global_rank, Axis a) const {
  int i = dim_index(a);
  if (i < 0) return {check_rank(global_rank)};
  std::vector<int> c = coord(global_rank);
  std::vector<int> members(dims_[i].size);
  for (int k = 0; k < dims_[i].size; ++k) {
    c[i] = k;
    members[k] = rank_at(c);
  }
  return members;
}

std::vector<std::vector<int>> Mesh::groups(Axis a) const {
  std::vector<std::vector<int>> out;
  std::vector<bool> seen(size(), false);
  for (int pos = 0; pos < size(); ++pos) {
    int r = order_[pos];
    if (seen[r]) continue;
    std::vector<int> g = group(r, a);
    for (int m : g) seen[m] = true;
    out.push_back(std::move(g));
  }
  return out;
}

std::string Mesh::to_string() const {
  std::string s;
  for (const MeshDim& d : dims_) s += cat(s.empty() ? "" : ",", axis_name(d.axis), "=", d.size);
  if (s.empty()) s = "tp=1";
  bool identity = true;
  for (int i = 0; i < size(); ++i) identity = identity && order_[i] == i;
  if (!identity) {
    s += "[";
    for (int i = 0; i < size(); ++i) s += cat(i ? "," : "", order_[i]);
    s += "]";
  }
  return s;
}

}  // namespace loom
