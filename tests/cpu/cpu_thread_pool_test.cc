// Tests of runtime/cpu/thread_pool.h: coverage of [0, n) exactly once for
// every grain and thread count, inline nesting, concurrent callers, reuse,
// and a call that does not wait for a worker the OS does not run.

#include <dirent.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <future>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln::cpu {
namespace {

TEST(ThreadPoolTest, CoversEveryIndexOnceInChunksOfAtMostGrain) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {0, 1, 5, 64, 1001}) {
      for (int64_t grain : {0, 1, 3, 16, 5000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<bool> oversized{false};
        pool.ParallelFor(n, grain, [&](int64_t begin, int64_t end) {
          if (end - begin > std::max<int64_t>(grain, 1) || begin >= end) oversized = true;
          for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
        });
        EXPECT_FALSE(oversized) << threads << " threads, n " << n << ", grain " << grain;
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(hits[i].load(), 1)
              << threads << " threads, n " << n << ", grain " << grain << ", i " << i;
        }
      }
    }
  }
}

TEST(ThreadPoolTest, DefaultSizeIsTheHardware) {
  ThreadPool pool;
  EXPECT_EQ(pool.num_threads(),
            static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

TEST(ThreadPoolTest, UsesSeveralThreadsWhenThereIsWork) {
  ThreadPool pool(4);
  std::atomic<int> running{0}, peak{0};
  pool.ParallelFor(64, 1, [&](int64_t, int64_t) {
    const int now = ++running;
    int p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    --running;
  });
  EXPECT_GT(peak.load(), 1);
}

TEST(ThreadPoolTest, NestedCallsRunInline) {
  ThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  pool.ParallelFor(10, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      pool.ParallelFor(10, 2, [&](int64_t b2, int64_t e2) {
        for (int64_t j = b2; j < e2; ++j) sum += i * 10 + j;
      });
    }
  });
  EXPECT_EQ(sum.load(), 99 * 100 / 2);
}

TEST(ThreadPoolTest, ConcurrentCallersAreSerialised) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int round = 0; round < 50; ++round) {
        pool.ParallelFor(100, 7, [&](int64_t b, int64_t e) { total += e - b; });
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(total.load(), 4 * 50 * 100);
}

TEST(ThreadPoolTest, ManySmallJobsInARow) {
  ThreadPool pool(4);
  int64_t sum = 0;
  std::vector<int64_t> part(8);
  for (int round = 0; round < 2000; ++round) {
    pool.ParallelFor(8, 1, [&](int64_t b, int64_t) { part[b] = b + round; });
    for (int64_t v : part) sum += v;
  }
  EXPECT_EQ(sum, 2000 * 28 + 8 * (1999 * 2000 / 2));
}

// A worker parked in a signal handler stands for one the OS has not
// scheduled (a loaded host): a call must finish on the threads that run,
// not wait for it. (The pool's first version waited for every worker, and
// every kernel call of a loaded server waited a scheduler slice.)
std::atomic<bool> parked{false}, hold{false};
void Park(int) {
  parked.store(true);
  while (hold.load()) {
  }
}

TEST(ThreadPoolTest, ACallDoesNotWaitForAWorkerThatDoesNotRun) {
  ThreadPool pool(2);  // the caller and one worker
  pool.ParallelFor(64, 1, [](int64_t, int64_t) {});  // the worker is in its loop
  struct sigaction action {};
  action.sa_handler = Park;
  struct sigaction previous {};
  ASSERT_EQ(sigaction(SIGUSR1, &action, &previous), 0);
  hold.store(true);
  // The process's threads are this one and the worker.
  const pid_t self = static_cast<pid_t>(syscall(SYS_gettid));
  int signalled = 0;
  if (DIR* tasks = opendir("/proc/self/task")) {
    while (dirent* e = readdir(tasks)) {
      const pid_t tid = static_cast<pid_t>(std::atoi(e->d_name));
      if (tid > 0 && tid != self) signalled += syscall(SYS_tgkill, getpid(), tid, SIGUSR1) == 0;
    }
    closedir(tasks);
  }
  ASSERT_EQ(signalled, 1);
  while (!parked.load()) std::this_thread::yield();

  std::atomic<int64_t> covered{0};
  std::future<void> call = std::async(std::launch::async, [&] {
    pool.ParallelFor(1000, 1, [&](int64_t b, int64_t e) { covered += e - b; });
  });
  const bool returned = call.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  hold.store(false);  // let the worker go either way, so that the test ends
  call.wait();
  EXPECT_TRUE(returned) << "ParallelFor waited for a worker that was not running";
  EXPECT_EQ(covered.load(), 1000);
  // The worker comes back and takes part again.
  std::atomic<int64_t> again{0};
  pool.ParallelFor(1000, 1, [&](int64_t b, int64_t e) { again += e - b; });
  EXPECT_EQ(again.load(), 1000);
  sigaction(SIGUSR1, &previous, nullptr);
}

}  // namespace
}  // namespace kiln::cpu
