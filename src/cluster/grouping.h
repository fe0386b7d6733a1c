// Instances of one model over a pool of ranks (Nitsum 3.2.1, 3.3.1; paper file 002): each
// instance is an aligned ("buddy") group of `tp` ranks [first_rank, first_rank + tp) running
// TP(tp), with a role (prefill, decode, or both) and the SLO tier it serves. Aligned groups make
// every TP(t) group the union of two TP(t/2) groups, as in the paper's Fig. 6 (TP2 on GPUs 1-2
// and 3-4, TP4 on 1-4), so the executors of every candidate group can be built at start-up
// (all_candidate_groups) and a reconfiguration only picks among them.
#pragma once

#include <string>
#include <vector>

namespace loom::cluster {

enum class Role { Prefill, Decode, Both };
const char* role_name(Role r);

struct InstanceSpec {
  int tier = -1;  // SLO tier served; -1: spare (best-effort spills and background only)
  Role role = Role::Both;
  int tp = 1;
  int first_rank = -1;  // set by place_instances; a multiple of tp
  bool operator==(const InstanceSpec&) const = default;
  std::string to_string() const;  // "t0:prefill:tp2@4"
};

// The candidate TP degrees: powers of two in [min_tp, max_tp] that are <= num_ranks. Throws
// loom::Error in one line when the pool cannot be covered by groups of them: num_ranks < 1,
// min_tp not a power of two, or num_ranks not a multiple of the smallest degree.
std::vector<int> candidate_tp_degrees(int num_ranks, int min_tp, int max_tp);

// Every aligned group (first_rank, tp) over num_ranks for the given degrees: what a pool builds
// warm at start-up (weights as views of each rank's full copy, communicator groups pre-split).
struct RankGroup {
  int first_rank = 0, tp = 1;
  bool operator==(const RankGroup&) const = default;
};
std::vector<RankGroup> all_candidate_groups(int num_ranks, const std::vector<int>& tp_degrees);

// Places instances on aligned groups (buddy allocation, largest TP first). An instance whose
// (tier, role, tp) matches one of `previous` keeps that group when it is free, so a window that
// changes little moves little. Returns false (instances unchanged) when they do not fit.
bool place_instances(std::vector<InstanceSpec>* instances, int num_ranks,
                     const std::vector<InstanceSpec>& previous = {});

// Ranks whose group changed between two placements (rank r is in a group of different
// first_rank/tp, or was idle and is not, or the reverse): the ranks a reconfiguration stops to
// migrate. Role or tier changes alone move no KV; they are not counted.
std::vector<int> ranks_regrouped(const std::vector<InstanceSpec>& before, const std::vector<InstanceSpec>& after,
                                 int num_ranks);

}  // namespace loom::cluster
