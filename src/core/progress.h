// Progress lines for runs that take more than a few seconds (`loom sim validate`, `sim
// experiment`, `bench offline`): one line on stderr every few seconds, as tqdm prints for vLLM's
// offline runs, but a line each time instead of a redrawn bar so that logs keep them:
//
//   loom bench offline: 120/512 requests (23%), 14 s
//   loom sim experiment sidp-mechanism: 37 simulations, 40 s
//
// On when stderr is a terminal, or LOOM_PROGRESS=1; LOOM_PROGRESS=0 turns it off. A run that ends
// within the first period prints nothing. The period is wall time but only paces output: nothing
// computed depends on it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace loom {

// Whether progress lines are printed (see above).
bool progress_enabled();

// "LABEL: DONE/TOTAL UNIT (P%), S s"; with total <= 0: "LABEL: DONE UNIT, S s".
std::string progress_line(const std::string& label, int64_t done, int64_t total, const std::string& unit,
                          double elapsed_s);

// What a long run counts: units done and in all (0: not known). Written by the run, read by the
// reporter's thread.
struct ProgressCount {
  std::atomic<int64_t> done{0}, total{0};
};

// While alive, prints progress_line(label, count.done, count.total, unit, elapsed) every period_s
// seconds (when progress_enabled()), and a last line when it is destroyed if it printed any.
// `count` must outlive the reporter.
class ProgressReporter {
 public:
  ProgressReporter(std::string label, std::string unit, const ProgressCount& count, double period_s = 5);
  ~ProgressReporter();
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

 private:
  void print(double elapsed_s);
  std::string label_, unit_;
  const ProgressCount& count_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool printed_ = false;
  std::thread thread_;
};

// Simulations finished in this process (sim::Simulator::run counts them): what an experiment's
// progress line reports.
ProgressCount& simulations_finished();

}  // namespace loom
