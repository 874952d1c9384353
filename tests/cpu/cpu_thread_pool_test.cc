// Tests of runtime/cpu/thread_pool.h: coverage of [0, n) exactly once for
// every grain and thread count, inline nesting, concurrent callers, reuse.

#include <atomic>
#include <cstdint>
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

}  // namespace
}  // namespace kiln::cpu
