// Mesh: a group of ranks arranged as a grid of named axes (dp, pp, sp, kvp, tp), with an
// explicit rank order. A pure value: no communicator, no threads.
//
// A mesh has dims listed outer -> inner and an order: mesh position i (the mixed-radix number of
// the coordinates, innermost fastest) is global rank order[i]. The identity order gives the usual
// "rank = ((dp*PP + pp)*SP + sp)*TP + tp" layouts of PLANS.md; a permuted order expresses a group
// whose members are ranked differently from their global ids (Shift 3.3.1: the shift config of
// SP=3, TP=2 is TP(6) over global ranks 0,2,4,1,3,5).
//
// Invariants: every dim size >= 1, no axis twice, order is a permutation of [0, size()).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace loom {

enum class Axis { Dp, Pp, Sp, Kvp, Tp };

std::string_view axis_name(Axis a);  // "dp", "pp", "sp", "kvp", "tp"

struct MeshDim {
  Axis axis;
  int size;
  bool operator==(const MeshDim&) const = default;
};

class Mesh {
 public:
  Mesh() : Mesh(std::vector<MeshDim>{}) {}  // one rank, no axes
  // dims outer -> inner; order[i] = global rank at mesh position i (empty = identity).
  // Throws loom::Error on a size < 1, a repeated axis or an order that is not a permutation.
  explicit Mesh(std::vector<MeshDim> dims, std::vector<int> order = {});

  int size() const { return int(order_.size()); }
  const std::vector<MeshDim>& dims() const { return dims_; }
  const std::vector<int>& order() const { return order_; }  // position -> global rank

  bool has(Axis a) const;
  int degree(Axis a) const;  // size of the axis, 1 when absent

  // Coordinates of a global rank, one per dim (outer -> inner).
  std::vector<int> coord(int global_rank) const;
  // Coordinate of a global rank along one axis (0 when the axis is absent).
  int coord(int global_rank, Axis a) const;
  // Global rank at the given coordinates (one per dim).
  int rank_at(const std::vector<int>& coords) const;
  // Position of a global rank in the mesh order (its rank inside the whole group).
  int position(int global_rank) const { return position_.at(check_rank(global_rank)); }

  // The members of global_rank's group along `a` (ranks that differ from it only in that
  // coordinate), as global ranks ordered by their coordinate along `a`. Absent axis: {rank}.
  std::vector<int> group(int global_rank, Axis a) const;
  // All groups along `a`, ordered by their first member's mesh position.
  std::vector<std::vector<int>> groups(Axis a) const;

  // "dp=2,tp=4" or "tp=6[0,2,4,1,3,5]" when the order is not the identity.
  std::string to_string() const;
  bool operator==(const Mesh&) const = default;

 private:
  int check_rank(int global_rank) const;
  int dim_index(Axis a) const;  // -1 when absent

  std::vector<MeshDim> dims_;
  std::vector<int> order_;     // position -> global rank
  std::vector<int> position_;  // global rank -> position
};

}  // namespace loom
