#include "engine/step.h"

#include <chrono>
#include <thread>

#include "core/clock.h"

namespace loom {

WallClock::WallClock() : origin_s_(now_seconds()) {}

double WallClock::now() { return now_seconds() - origin_s_; }

void WallClock::wait_until(double t) {
  const double dt = t - now();
  if (dt > 0) std::this_thread::sleep_for(std::chrono::duration<double>(dt));
}

}  // namespace loom
