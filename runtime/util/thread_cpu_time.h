// CPU time of the calling thread, for telling the host's own work apart from
// the wall time it spends waiting on a device.
#pragma once

#include <time.h>

namespace kiln {

inline double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace kiln
