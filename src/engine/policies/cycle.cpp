// Policies that switch without looking at the batch, for tests and demonstrations:
//   cycle:N      the next plan of the set every N steps
//   alternate    cycle:1 (test hook: not in --policy's help)
//   random:SEED  a plan drawn per step from Rng(SEED), reproducible (test hook: not in the help)
// alternate and random given a single sp x tp plan run it with its shift config, as shift does.
#include "core/error.h"
#include "core/rng.h"
#include "engine/policies/policies.h"

namespace loom::policies {

namespace {

class CyclePolicy final : public LayoutPolicy {
 public:
  CyclePolicy(int n_plans, int64_t every, std::string name) : n_(n_plans), every_(every), name_(std::move(name)) {}
  int choose(const StepBatch&) override { return int((steps_++ / every_) % n_); }
  std::string describe() const override { return name_; }

 private:
  int n_;
  int64_t every_;
  std::string name_;
  int64_t steps_ = 0;
};

class RandomPolicy final : public LayoutPolicy {
 public:
  RandomPolicy(int n_plans, uint64_t seed) : n_(n_plans), seed_(seed), rng_(seed) {}
  int choose(const StepBatch&) override { return int(rng_.below(uint64_t(n_))); }
  std::string describe() const override { return cat("random:", seed_); }

 private:
  int n_;
  uint64_t seed_;
  Rng rng_;
};

constexpr const char* kCycle = "cycle:";
constexpr const char* kRandom = "random:";

bool has_prefix(const std::string& name, const char* prefix) { return name.rfind(prefix, 0) == 0; }

class CycleSpec final : public PolicySpec {
 public:
  std::string syntax() const override { return "cycle:N"; }
  std::string help() const override { return "cycle:N (the next plan every N steps)"; }
  bool matches(const std::string& name) const override {
    if (!has_prefix(name, kCycle)) return false;
    every(name);
    return true;
  }
  std::unique_ptr<LayoutPolicy> make(const std::string& name, const PlanSet& set, const PolicyParams&) const override {
    return std::make_unique<CyclePolicy>(set.size(), every(name), name);
  }

 private:
  static int64_t every(const std::string& name) {
    uint64_t v = 0;
    if (!parse_u64(name.substr(std::string(kCycle).size()), &v) || v < 1)
      fail("--policy ", name, ": the cycle length must be a whole number of steps >= 1 (e.g. cycle:4)");
    return int64_t(v);
  }
};

class AlternateSpec final : public PolicySpec {
 public:
  std::string syntax() const override { return "alternate"; }
  std::string help() const override { return ""; }
  bool matches(const std::string& name) const override { return name == "alternate"; }
  std::vector<Plan> plans(const std::string&, std::vector<Plan> plans) const override {
    return with_shift_config(std::move(plans));
  }
  std::unique_ptr<LayoutPolicy> make(const std::string& name, const PlanSet& set, const PolicyParams&) const override {
    return std::make_unique<CyclePolicy>(set.size(), 1, name);
  }
};

class RandomSpec final : public PolicySpec {
 public:
  std::string syntax() const override { return "random:SEED"; }
  std::string help() const override { return ""; }
  bool matches(const std::string& name) const override {
    if (!has_prefix(name, kRandom)) return false;
    seed(name);
    return true;
  }
  std::vector<Plan> plans(const std::string&, std::vector<Plan> plans) const override {
    return with_shift_config(std::move(plans));
  }
  std::unique_ptr<LayoutPolicy> make(const std::string& name, const PlanSet& set, const PolicyParams&) const override {
    return std::make_unique<RandomPolicy>(set.size(), seed(name));
  }

 private:
  static uint64_t seed(const std::string& name) {
    uint64_t v = 0;
    const std::string arg = name.substr(std::string(kRandom).size());
    if (!parse_u64(arg, &v)) fail("--policy ", name, ": '", arg, "' is not a non-negative integer seed");
    return v;
  }
};

}  // namespace

void add_cycle(Specs& out) {
  out.push_back(std::make_unique<CycleSpec>());
  out.push_back(std::make_unique<AlternateSpec>());
  out.push_back(std::make_unique<RandomSpec>());
}

}  // namespace loom::policies
