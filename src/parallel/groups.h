// Communicator groups from the mesh (ARCHITECTURE.md; vLLM's parallel_state carves every group
// from one rank grid). Every group a rank uses is split once from Plan::mesh() / ffn_mesh() and
// handed to stages by name:
//   "tp"     the attention / projection TP group (TPA for Helix; the shift-ordered TP(sp*tp) group
//            of a shift config, Shift 3.3.1)
//   "sp"     the Ulysses SP group (ranks with this rank's tp index, ordered by sp)
//   "kvp"    the Helix KV-parallel group
//   "pp"     the pipeline (stages in order)
//   "dp"     the ranks with this rank's coordinates in the other DP replicas
//   "ffn-tp" the Wo / FFN tensor-parallel group, ordered by FFN shard index (plan.h ffn_mesh)
// A rank outside an axis gets a one-rank group. Rank r of a group is its r-th member in the
// mesh's order, so e.g. an all-reduce over "ffn-tp" sums partials in FFN shard order.
//
// GroupCache splits each distinct partition of the world once: plans of one set that share a
// group (the same members) share the Communicator. Splitting is collective: every rank must ask
// for the same plans in the same order (the cache's key, the whole partition, is the same value
// on every rank, so the sequence of splits is too).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"
#include "parallel/plan.h"

namespace loom {

class GroupCache {
 public:
  explicit GroupCache(Communicator& world) : world_(world) {}
  Communicator& world() { return world_; }
  // The group of this rank in `partition` (groups of global ranks covering the world, each ordered
  // by group rank). Collective over the world unless every group has one member.
  Communicator* group(const std::vector<std::vector<int>>& partition);
  int splits() const { return splits_; }  // world splits made (each distinct partition once)

 private:
  Communicator& world_;
  std::map<std::vector<std::vector<int>>, std::unique_ptr<Communicator>> cache_;
  int splits_ = 0;
};

// The named groups of one plan on this rank.
class PlanGroups {
 public:
  PlanGroups() = default;
  // Splits (through `cache`) every group `plan` uses; world.size() must equal plan.size().
  PlanGroups(const Plan& plan, GroupCache& cache);
  // The group called `name` (see above); throws loom::Error for an unknown name.
  Communicator& get(std::string_view name) const;
  Communicator& world() const { return *world_; }

 private:
  Communicator* world_ = nullptr;
  std::map<std::string, Communicator*, std::less<>> by_name_;
};

}  // namespace loom
