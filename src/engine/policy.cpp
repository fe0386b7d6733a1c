#include "engine/policy.h"

#include "core/error.h"
#include "engine/seesaw.h"
#include "engine/step.h"
#include "kv/kv_tier.h"

namespace loom {

namespace {

bool parse_u64(const std::string& v, uint64_t* out) {
  size_t used = 0;
  try {
    *out = std::stoull(v, &used);
  } catch (const std::exception&) {
    return false;
  }
  return used == v.size() && !v.empty() && v[0] != '-';
}

class FixedPolicy final : public LayoutPolicy {
 public:
  int choose(const StepBatch&) override { return 0; }
  std::string describe() const override { return "fixed"; }
};

class ShiftPolicy final : public LayoutPolicy {
 public:
  ShiftPolicy(int base, int shift, int64_t threshold) : base_(base), shift_(shift), threshold_(threshold) {
    if (threshold < 0) fail("shift threshold must be >= 0 tokens, got ", threshold);
  }
  int choose(const StepBatch& b) override { return shift_runs_base(b.num_tokens, threshold_) ? base_ : shift_; }
  std::string describe() const override { return cat("shift(threshold=", threshold_, ")"); }

 private:
  int base_, shift_;
  int64_t threshold_;
};

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

// SiDP §4.3 (S11; PAPERS-NOTES 1.4.4): the orchestrator switches every replica between WaS and
// CaS at a step boundary, on the group's state: effective batch = the sequences active over the
// group / D ("how many sequences remain active per engine"). CaS once it has stayed below the
// threshold for a window, back to WaS once it has stayed above (1 + h) * threshold as long, so the
// mode does not flap; steps with prompt chunks do not count. The window is `window_s` seconds of
// the loop's clock (advance()) when > 0 ("minute-level at the tail of a job"): every counted
// observation since the streak began on the same side, the streak at least window_s old; else
// `window` consecutive observations.
class SidpPolicy final : public LayoutPolicy {
 public:
  SidpPolicy(int was, int cas, int dp, int64_t threshold, int window, double h, double window_s)
      : was_(was), cas_(cas), dp_(dp), th_(threshold), window_(window), h_(h), window_s_(window_s) {
    if (threshold < 0) fail("SiDP threshold must be >= 0 sequences per replica, got ", threshold);
    if (!(window_s >= 0)) fail("SiDP window must be >= 0 seconds, got ", window_s);
  }
  void advance(double now_s) override { now_ = now_s; }
  int choose(const StepBatch& b) override {
    // A step that carries prompt chunks is bounded by the token budget, not by the sequences
    // active per engine (the start of an offline job: every replica full, a few prompts a step).
    // §4.3 (S11) decides on "how many sequences remain active per engine" in "a tail regime":
    // such a step is evidence of neither, the counts stand.
    return choose_effective(double(b.seqs.size()) / double(dp_), b.num_prefill_tokens > 0);
  }
  int choose_effective(double eff, bool prompt_chunks) override {
    if (prompt_chunks) return cas_mode_ ? cas_ : was_;
    const int side = eff < double(th_) ? -1 : eff > (1.0 + h_) * double(th_) ? 1 : 0;
    if (window_s_ > 0) {
      if (side != side_ || side == 0) side_ = side, since_ = now_;
      const bool held = side != 0 && now_ - since_ >= window_s_;
      if (!cas_mode_ && side < 0 && held) cas_mode_ = true, side_ = 0;
      if (cas_mode_ && side > 0 && held) cas_mode_ = false, side_ = 0;
      return cas_mode_ ? cas_ : was_;
    }
    if (side < 0) {
      ++below_, above_ = 0;
    } else if (side > 0) {
      ++above_, below_ = 0;
    } else {
      below_ = above_ = 0;
    }
    if (!cas_mode_ && below_ >= window_) cas_mode_ = true, below_ = 0;
    if (cas_mode_ && above_ >= window_) cas_mode_ = false, above_ = 0;
    return cas_mode_ ? cas_ : was_;
  }
  std::string describe() const override {
    if (window_s_ > 0) return cat("sidp(threshold=", th_, " seqs/replica, window=", window_s_, " s, h=", h_, ")");
    return cat("sidp(threshold=", th_, " seqs/replica, window=", window_, ", h=", h_, ")");
  }

 private:
  int was_, cas_, dp_;
  int64_t th_;
  int window_;
  double h_;
  double window_s_;
  double now_ = 0;
  bool cas_mode_ = false;
  int below_ = 0, above_ = 0;
  int side_ = 0;       // window_s > 0: the side of the current streak (-1 below, 1 above, 0 none)
  double since_ = 0;   // and when it began
};

class NamedFixedPolicy final : public LayoutPolicy {
 public:
  explicit NamedFixedPolicy(std::string name) : name_(std::move(name)) {}
  int choose(const StepBatch&) override { return 0; }
  std::string describe() const override { return name_; }

 private:
  std::string name_;
};

const char* kChoices = "fixed, shift, cycle:N, alternate, random:SEED, sidp, sidp:was, sidp:cas, seesaw, prefill-first, decode-first";

}  // namespace

void check_policy_name(const std::string& name) {
  if (name == "fixed" || name == "shift" || name == "alternate" || name == "sidp" || name == "sidp:was" ||
      name == "sidp:cas" || is_seesaw_policy(name))
    return;
  uint64_t v = 0;
  if (name.rfind("cycle:", 0) == 0) {
    if (!parse_u64(name.substr(6), &v) || v < 1)
      fail("--policy ", name, ": the cycle length must be a whole number of steps >= 1 (e.g. cycle:4)");
    return;
  }
  if (name.rfind("random:", 0) == 0) {
    if (!parse_u64(name.substr(7), &v)) fail("--policy ", name, ": '", name.substr(7), "' is not a non-negative integer seed");
    return;
  }
  fail("unknown --policy '", name, "' (", kChoices, ")");
}

std::vector<Plan> policy_plans(const std::string& name, std::vector<Plan> plans) {
  check_policy_name(name);
  if (name.rfind("sidp", 0) == 0) {
    if (plans.size() != 1 || plans[0].weights != WeightSource::FetchFromOwner)
      fail("--policy ", name, " needs one SiDP plan, e.g. --plan dp=4,weights=owner; got ",
           plans.empty() ? std::string("no plan") : plans[0].to_string(), plans.size() > 1 ? " and more plans" : "");
    Plan was = plans[0], cas = plans[0];
    was.sidp_cas = false;
    cas.sidp_cas = true;
    if (name == "sidp:was") return {was};
    if (name == "sidp:cas") return {cas};
    return {was, cas};
  }
  const bool pairs = name == "shift" || name == "alternate" || name.rfind("random:", 0) == 0;
  if (pairs && plans.size() == 1 && plans[0].sp > 1 && !plans[0].shift) plans.push_back(plans[0].shift_config());
  if (name == "shift") {
    if (plans.size() != 2 || plans[0].sp <= 1 || plans[0].shift || !(plans[1] == plans[0].shift_config()))
      fail("the shift policy needs an sp x tp base plan (sp > 1), e.g. --plan sp=2,tp=2 (its shift config is added); got ",
           plans.empty() ? std::string("no plan") : plans[0].to_string(), plans.size() > 1 ? " and more plans" : "");
  }
  if (is_seesaw_policy(name)) check_seesaw_plans(name, plans);
  return plans;
}

std::pair<int, int> shift_pair(const PlanSet& set) {
  for (int b = 0; b < set.size(); ++b) {
    const Plan& p = set.plan(b);
    if (p.sp <= 1 || p.shift) continue;
    const int s = set.id_of(p.shift_config());
    if (s >= 0) return {b, s};
  }
  fail("the shift policy needs an sp x tp base and its shift config in the plan set; got ", set.to_string());
}

void check_policy_setup(const std::string& name, const PlanSet& set, const PolicyEnv& env) {
  check_policy_name(name);
  (void)set;
  if (is_seesaw_policy(name)) {
    LOOM_CHECK(env.model != nullptr, "check_policy_setup: no model");
    seesaw_tier_tokens(name, env.cpu_kv_bytes,
                       tier_bytes_per_token(env.model->n_layers, env.model->n_kv_heads, env.model->head_dim),
                       env.max_model_len);
  }
}

PolicyParams resolve_policy_params(const std::string& name, const PlanSet& set, const PolicyInputs& in) {
  check_policy_name(name);
  PolicyParams p;
  if (name == "shift") {
    p.threshold_unit = "tokens";
    p.threshold = in.shift_threshold;
    if (p.threshold < 0) {
      if (!in.default_shift_threshold) fail("--policy shift needs --shift-threshold (no default threshold given)");
      p.threshold = in.default_shift_threshold(set.plan(shift_pair(set).first));
    }
  } else if (name == "sidp") {
    p.threshold_unit = "sequences per replica";
    p.window_s = in.sidp_window_s;
    p.threshold = in.sidp_threshold;
    if (p.threshold < 0) {
      if (!in.default_sidp_threshold) fail("--policy sidp needs --sidp-threshold (no default threshold given)");
      p.threshold = in.default_sidp_threshold(set.plan(0));
    }
  }
  return p;
}

std::unique_ptr<LayoutPolicy> make_layout_policy(const std::string& name, const PlanSet& set, int64_t threshold) {
  PolicyParams p;
  p.threshold = threshold;
  return make_layout_policy(name, set, p);
}

std::unique_ptr<LayoutPolicy> make_layout_policy(const std::string& name, const PlanSet& set, const PolicyParams& params) {
  const int64_t threshold = params.threshold;
  check_policy_name(name);
  if (name == "fixed") return std::make_unique<FixedPolicy>();
  if (name == "shift") {
    const auto [base, shift] = shift_pair(set);
    return std::make_unique<ShiftPolicy>(base, shift, threshold);
  }
  if (name == "alternate") return std::make_unique<CyclePolicy>(set.size(), 1, "alternate");
  if (name == "sidp:was" || name == "sidp:cas") return std::make_unique<NamedFixedPolicy>(name);
  if (name == "sidp") {
    int was = -1, cas = -1;
    for (int i = 0; i < set.size(); ++i)
      if (set.plan(i).weights == WeightSource::FetchFromOwner) (set.plan(i).sidp_cas ? cas : was) = i;
    if (was < 0 || cas < 0) fail("the sidp policy needs a WaS and a CaS plan in the set; got ", set.to_string());
    return std::make_unique<SidpPolicy>(was, cas, set.plan(was).dp, threshold, kSidpWindow, kSidpHysteresis,
                                        params.window_s);
  }
  if (is_seesaw_policy(name)) return std::make_unique<SeesawPolicy>(name);
  uint64_t v = 0;
  if (name.rfind("cycle:", 0) == 0) {
    parse_u64(name.substr(6), &v);
    return std::make_unique<CyclePolicy>(set.size(), int64_t(v), name);
  }
  parse_u64(name.substr(7), &v);
  return std::make_unique<RandomPolicy>(set.size(), v);
}

bool policy_lazy_weights(const std::string& name) { return is_seesaw_policy(name); }

}  // namespace loom
