// Named experiments: each reproduces one figure or table of a paper with the simulator and
// prints the simulated values next to the paper's. `loom sim experiment --list` lists them;
// every later paper adds its own entry to experiment_registry().
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "parallel/plan.h"

namespace loom::sim {

struct ExperimentRow {
  std::string metric;  // "ttft_ms" | "tpot_ms" | "throughput_tok_s" | ...
  std::string config;  // "dp" | "tp" | "sp" | "shift" | ...
  double simulated = 0;
  std::optional<double> paper;  // nullopt: the paper gives no number for it
  std::string basis;            // where the paper value comes from
};

struct ExperimentResult {
  std::string name;
  std::string title;
  std::vector<ExperimentRow> rows;
  std::vector<std::string> notes;
  std::map<std::string, std::string> files;  // file name -> content (SVG plots): `--out DIR` writes them
};

struct Experiment {
  std::string name;
  std::string description;
  std::function<ExperimentResult()> run;
};

const std::vector<Experiment>& experiment_registry();
// Each paper's experiments, in its own exp_*.cpp, joined by experiment_registry().
std::vector<Experiment> helix_experiments();  // exp_helix.cpp
// SiDP's experiments (exp_sidp.cpp): sidp-fig5, sidp-fig11, sidp-fig14, sidp-headline.
std::vector<Experiment> sidp_experiments();
// Throws loom::Error listing the names when `name` is unknown.
const Experiment& find_experiment(const std::string& name);

// {"experiment": NAME, "rows": [{"metric", "config", "simulated", "paper" (null when none),
// "basis"}], "notes": [...]}
nlohmann::json to_json(const ExperimentResult& r);
std::string to_text(const ExperimentResult& r);
// For an experiment without a figure of its own: simulated / paper per row that has a paper
// number, as bars on a log axis around 1 (`sim experiment NAME --out DIR` writes it as
// NAME-vs-paper.svg). "" when no row has a paper number.
std::string vs_paper_svg(const ExperimentResult& r);

// Shift 4.3.1 / Figure 12 pieces, reusable by tests and the planner.
struct LatencyThroughput {
  double ttft_ms = 0, tpot_ms = 0, throughput_tok_s = 0;
};
// Single-request TTFT/TPOT and saturated throughput of `plan` under layout `policy` (fixed,
// shift, ...; engine/policy.h) for uniform requests.
LatencyThroughput measure_plan(const std::string& model, const std::string& hardware, const std::string& dtype,
                               const std::string& plan, const std::string& policy, int input_tokens,
                               int output_tokens, int num_requests);

// Decode at a long context (Helix 3.1's setting, `loom plan --context N`): `plan`'s TTL for one
// sequence at `context` tokens, the most sequences its KV memory holds at that context (all
// replicas), and the TTL and tokens/s of a decode step of that many. Throws loom::Error naming the
// sizes when the plan does not divide the model, its weights do not fit, or not even one sequence
// of `context` tokens fits.
struct DecodeAtContext {
  int gpus = 0;
  int64_t max_batch = 0;
  double ttl_b1_ms = 0, ttl_max_ms = 0, tok_s_max = 0;
};
DecodeAtContext measure_decode(const std::string& model, const std::string& hardware, const std::string& dtype,
                               const std::string& plan, int64_t context);
// Seesaw (../shared/papers/004, exp_seesaw.cpp): seesaw-fig10, seesaw-fig13, seesaw-fig14.
std::vector<Experiment> seesaw_experiments();

// `loom plan --seesaw`: the best (c_p, c_d) pairs of equal DP for an offline trace on `gpus` GPUs
// of the cost model's node, by simulated throughput, with the best fixed plan beside them.
struct SeesawPair {
  Plan prefill, decode;
  double tok_s = 0;
  double best_fixed_tok_s = 0;
  std::string best_fixed;
  int64_t switches = 0;
};
}  // namespace loom::sim

#include "engine/trace.h"
#include "sim/cost_model.h"

namespace loom::sim {
std::vector<SeesawPair> propose_seesaw_pairs(const CostModel& cm, int gpus, const std::vector<TraceRequest>& trace,
                                             int max_model_len, int top = 5);

}  // namespace loom::sim
