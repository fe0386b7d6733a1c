// SiDP (../shared/papers/001 §4.2-§4.3) over one plan dp=D,weights=owner:
//   sidp      WaS (weights as a service) while the batch per replica is large, CaS (compute as a
//             service) below the threshold B_th, with hysteresis (SidpPolicy below); the plan
//             set is the WaS plan and its sidp=cas twin, which share one KV placement, so a switch
//             moves nothing. B_th's default comes from the cost model (sim/sidp_cost.h, wired in
//             by the caller: PolicyInputs). The mode of every step is its plan's.
//   sidp:was, sidp:cas   the one mode, forced.
// Under WaS the replicas step on their own (sidp_replicas.h): sidp and sidp:was; sidp:cas keeps
// the lockstep engine.
#include "core/error.h"
#include "engine/policies/policies.h"
#include "engine/step.h"

namespace loom::policies {

namespace {

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

// sidp:was, sidp:cas: the set's one plan every step, named after the mode.
class ForcedModePolicy final : public LayoutPolicy {
 public:
  explicit ForcedModePolicy(std::string name) : name_(std::move(name)) {}
  int choose(const StepBatch&) override { return 0; }
  std::string describe() const override { return name_; }

 private:
  std::string name_;
};

enum class Mode { Switch, Was, Cas };

class SidpSpec final : public PolicySpec {
 public:
  explicit SidpSpec(Mode mode) : mode_(mode) {}
  std::string syntax() const override {
    return mode_ == Mode::Switch ? "sidp" : mode_ == Mode::Was ? "sidp:was" : "sidp:cas";
  }
  std::string family() const override { return "sidp"; }
  std::string help() const override {
    if (mode_ != Mode::Switch) return syntax();
    return "sidp (SiDP over dp=D,weights=owner: weights as a service while the batch per replica is at least "
           "--sidp-threshold, compute as a service below)";
  }
  bool matches(const std::string& name) const override { return name == syntax(); }
  PolicyTraits traits() const override {
    PolicyTraits t;
    if (mode_ == Mode::Switch) t.threshold = PolicyThreshold::SequencesPerReplica;
    return t;
  }
  std::vector<Plan> plans(const std::string& name, std::vector<Plan> plans) const override {
    if (plans.size() != 1 || plans[0].weights != WeightSource::FetchFromOwner)
      fail("--policy ", name, " needs one SiDP plan, e.g. --plan dp=4,weights=owner; got ", plans_text(plans));
    Plan was = plans[0], cas = plans[0];
    was.sidp_cas = false;
    cas.sidp_cas = true;
    if (mode_ == Mode::Was) return {was};
    if (mode_ == Mode::Cas) return {cas};
    return {was, cas};
  }
  PolicyParams params(const std::string&, const PlanSet& set, const PolicyInputs& in) const override {
    PolicyParams p;
    if (mode_ != Mode::Switch) return p;
    p.window_s = in.sidp_window_s;
    p.threshold = in.sidp_threshold;
    if (p.threshold < 0) {
      if (!in.default_sidp_threshold) fail("--policy sidp needs --sidp-threshold (no default threshold given)");
      p.threshold = in.default_sidp_threshold(set.plan(0));
    }
    return p;
  }
  std::unique_ptr<LayoutPolicy> make(const std::string& name, const PlanSet& set, const PolicyParams& params) const override {
    if (mode_ != Mode::Switch) return std::make_unique<ForcedModePolicy>(name);
    int was = -1, cas = -1;
    for (int i = 0; i < set.size(); ++i)
      if (set.plan(i).weights == WeightSource::FetchFromOwner) (set.plan(i).sidp_cas ? cas : was) = i;
    if (was < 0 || cas < 0) fail("the sidp policy needs a WaS and a CaS plan in the set; got ", set.to_string());
    return std::make_unique<SidpPolicy>(was, cas, set.plan(was).dp, params.threshold, kSidpWindow, kSidpHysteresis,
                                        params.window_s);
  }
  // WaS replicas step on their own; a CaS-only set (sidp:cas) keeps the lockstep engine.
  bool replicas_on_their_own(const PlanSet& set) const override {
    if (mode_ == Mode::Cas || !sidp_set(set)) return false;
    bool was = false;
    for (const Plan& p : set.plans()) was = was || !p.sidp_cas;
    return was && set.plan(0).dp > 1;
  }

 private:
  Mode mode_;
};

}  // namespace

void add_sidp(Specs& out) {
  out.push_back(std::make_unique<SidpSpec>(Mode::Switch));
  out.push_back(std::make_unique<SidpSpec>(Mode::Was));
  out.push_back(std::make_unique<SidpSpec>(Mode::Cas));
}

}  // namespace loom::policies
