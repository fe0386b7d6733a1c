#include "parallel/groups.h"

#include "comm/single.h"
#include "core/error.h"

namespace loom {

Communicator* GroupCache::group(const std::vector<std::vector<int>>& partition) {
  auto it = cache_.find(partition);
  if (it != cache_.end()) return it->second.get();
  const int me = world_.rank();
  int color = -1, key = -1;
  bool all_single = true;
  for (size_t g = 0; g < partition.size(); ++g) {
    all_single = all_single && partition[g].size() == 1;
    for (size_t k = 0; k < partition[g].size(); ++k)
      if (partition[g][k] == me) color = int(g), key = int(k);
  }
  LOOM_CHECK(color >= 0, "rank ", me, " is in no group of the partition");
  std::unique_ptr<Communicator> c;
  if (all_single) {
    c = std::make_unique<SingleCommunicator>();
  } else {
    c = world_.split(color, key);
    ++splits_;
  }
  LOOM_CHECK(c && c->rank() == key && c->size() == int(partition[size_t(color)].size()), "group split of rank ", me);
  Communicator* out = c.get();
  cache_.emplace(partition, std::move(c));
  return out;
}

PlanGroups::PlanGroups(const Plan& plan, GroupCache& cache) : world_(&cache.world()) {
  LOOM_CHECK(plan.size() == cache.world().size(), "plan ", plan.to_string(), " of ", plan.size(), " ranks on a world of ",
             cache.world().size());
  const Mesh mesh = plan.mesh(), ffn = plan.ffn_mesh();
  for (Axis a : {Axis::Dp, Axis::Pp, Axis::Sp, Axis::Kvp, Axis::Tp})
    by_name_[std::string(axis_name(a))] = cache.group(mesh.groups(a));
  by_name_["ffn-tp"] = cache.group(ffn.groups(Axis::Tp));
}

Communicator& PlanGroups::get(std::string_view name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) fail("no communicator group named '", name, "' (tp, sp, kvp, pp, dp, ffn-tp)");
  return *it->second;
}

}  // namespace loom
