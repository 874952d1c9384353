// The KV page manager: exact page counts, refusal without side effects,
// truncation that never cuts into a committed page, prefix caching (with
// collisions forced), LRU eviction, the waste metric, and a randomized run
// against a reference that simulates the pool's contents.
#include "runtime/serving/kv_page_manager.h"

#include "runtime/executor/executor.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

using Pages = std::vector<int32_t>;

Pages Table(const KvPageManager& m, int64_t seq) {
  auto t = m.BlockTable(seq);
  return Pages(t.begin(), t.end());
}

std::vector<int32_t> Iota(int64_t n, int32_t from) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

void ExpectOk(const KvPageManager& m) {
  absl::Status st = m.CheckInvariants();
  EXPECT_TRUE(st.ok()) << st;
}

TEST(KvPageManagerTest, AllocateGrowFreeExactPageCounts) {
  KvPageManager m(10, 4);
  ASSERT_TRUE(m.Allocate(1, 0).ok());
  EXPECT_EQ(Table(m, 1).size(), 0u);
  ASSERT_TRUE(m.Grow(1, 1).ok());
  EXPECT_EQ(Table(m, 1).size(), 1u);
  ASSERT_TRUE(m.Grow(1, 4).ok());
  EXPECT_EQ(Table(m, 1).size(), 1u);
  ASSERT_TRUE(m.Grow(1, 5).ok());
  EXPECT_EQ(Table(m, 1).size(), 2u);
  EXPECT_EQ(m.PagesNeeded(1, 13), 2);
  ASSERT_TRUE(m.Grow(1, 13).ok());
  EXPECT_EQ(Table(m, 1).size(), 4u);
  EXPECT_EQ(m.NumTokens(1), 13);
  ASSERT_TRUE(m.Allocate(2, 9).ok());
  EXPECT_EQ(Table(m, 2).size(), 3u);
  KvPageStats st = m.Stats();
  EXPECT_EQ(st.used_pages, 7);
  EXPECT_EQ(st.free_pages, 3);
  EXPECT_EQ(st.cached_pages, 0);
  // Distinct pages.
  Pages all = Table(m, 1);
  for (int32_t p : Table(m, 2)) all.push_back(p);
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::unique(all.begin(), all.end()), all.end());
  ASSERT_TRUE(m.Truncate(1, 5).ok());
  EXPECT_EQ(Table(m, 1).size(), 2u);
  EXPECT_EQ(m.Stats().free_pages, 5);
  ASSERT_TRUE(m.Free(1).ok());
  EXPECT_FALSE(m.Contains(1));
  EXPECT_EQ(m.Stats().free_pages, 7);
  ASSERT_TRUE(m.Free(2).ok());
  EXPECT_EQ(m.Stats().free_pages, 10);
  EXPECT_EQ(m.Stats().used_pages, 0);
  ExpectOk(m);
  // Misuse.
  EXPECT_TRUE(absl::IsNotFound(m.Free(2)));
  EXPECT_TRUE(absl::IsNotFound(m.Grow(7, 3)));
  ASSERT_TRUE(m.Allocate(3, 2).ok());
  EXPECT_TRUE(absl::IsAlreadyExists(m.Allocate(3, 2)));
  EXPECT_TRUE(absl::IsInvalidArgument(m.Grow(3, 1)));
}

TEST(KvPageManagerTest, OutOfPagesLeavesStateUnchanged) {
  KvPageManager m(5, 4);
  ASSERT_TRUE(m.Allocate(1, 12).ok());  // 3 pages
  ASSERT_TRUE(m.Allocate(2, 4).ok());   // 1 page
  const Pages t1 = Table(m, 1), t2 = Table(m, 2);
  const KvPageStats before = m.Stats();
  EXPECT_TRUE(absl::IsResourceExhausted(m.Allocate(3, 5)));  // needs 2, 1 free
  EXPECT_FALSE(m.Contains(3));
  EXPECT_TRUE(absl::IsResourceExhausted(m.Grow(1, 20)));     // needs 2
  EXPECT_EQ(m.NumTokens(1), 12);
  EXPECT_TRUE(absl::IsResourceExhausted(m.AllocateWithPrefix(4, Iota(9, 0)).status()));
  EXPECT_FALSE(m.Contains(4));
  EXPECT_EQ(Table(m, 1), t1);
  EXPECT_EQ(Table(m, 2), t2);
  const KvPageStats after = m.Stats();
  EXPECT_EQ(after.used_pages, before.used_pages);
  EXPECT_EQ(after.free_pages, before.free_pages);
  EXPECT_EQ(after.lookup_tokens, 0);
  ExpectOk(m);
  // Exactly enough works.
  ASSERT_TRUE(m.Grow(1, 16).ok());
  EXPECT_EQ(m.AvailablePages(), 0);
}

TEST(KvPageManagerTest, PrefixSharedAcrossRequestsWithTheSamePrompt) {
  KvPageManager m(16, 4);
  const std::vector<int32_t> prompt = Iota(14, 100);  // 3.5 pages
  auto first = m.AllocateWithPrefix(1, prompt);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, 0);
  EXPECT_EQ(m.MatchPrefix(prompt).tokens, 0);
  ASSERT_TRUE(m.CommitFullPages(1, prompt).ok());  // after its prefill
  const Pages t1 = Table(m, 1);
  PrefixMatch match = m.MatchPrefix(prompt);
  EXPECT_EQ(match.tokens, 12);
  EXPECT_EQ(match.pages, Pages(t1.begin(), t1.begin() + 3));

  auto second = m.AllocateWithPrefix(2, prompt);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*second, 12);
  const Pages t2 = Table(m, 2);
  ASSERT_EQ(t2.size(), 4u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(t2[i], t1[i]);
    EXPECT_EQ(m.RefCount(t1[i]), 2);
  }
  EXPECT_NE(t2[3], t1[3]);  // the partial page is not shared
  EXPECT_EQ(m.RefCount(t1[3]), 1);
  KvPageStats st = m.Stats();
  EXPECT_EQ(st.used_pages, 5);
  EXPECT_EQ(st.lookup_tokens, 28);
  EXPECT_EQ(st.hit_tokens, 12);
  EXPECT_DOUBLE_EQ(st.prefix_hit_rate, 12.0 / 28.0);

  // A prompt diverging inside page 2 shares pages 0 and 1 only.
  std::vector<int32_t> other = prompt;
  other[9] = 7;
  EXPECT_EQ(m.MatchPrefix(other).tokens, 8);
  // A prompt diverging in page 0 shares nothing, though pages 1.. are equal
  // (the hash is chained).
  other = prompt;
  other[0] = 7;
  EXPECT_EQ(m.MatchPrefix(other).tokens, 0);

  // Freed, the full pages stay cached and are found again.
  ASSERT_TRUE(m.Free(1).ok());
  ASSERT_TRUE(m.Free(2).ok());
  st = m.Stats();
  EXPECT_EQ(st.cached_pages, 3);
  EXPECT_EQ(st.used_pages, 0);
  EXPECT_EQ(st.free_pages, 13);
  auto third = m.AllocateWithPrefix(3, prompt);
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(*third, 12);
  EXPECT_EQ(m.Stats().cached_pages, 0);
  // A prompt of exactly 3 cached pages reuses 2: one token is left to compute.
  auto whole = m.AllocateWithPrefix(4, Iota(12, 100));
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(*whole, 8);
  ExpectOk(m);
}

TEST(KvPageManagerTest, CommitIsIncrementalDuringDecode) {
  KvPageManager m(8, 4);
  std::vector<int32_t> tokens = Iota(3, 0);
  ASSERT_TRUE(m.AllocateWithPrefix(1, tokens).ok());
  ASSERT_TRUE(m.CommitFullPages(1, tokens).ok());
  EXPECT_EQ(m.MatchPrefix(Iota(8, 0)).tokens, 0);
  for (int32_t t = 3; t < 9; ++t) {
    tokens.push_back(t);
    ASSERT_TRUE(m.Grow(1, t + 1).ok());
    ASSERT_TRUE(m.CommitFullPages(1, tokens).ok());
  }
  EXPECT_EQ(m.MatchPrefix(Iota(12, 0)).tokens, 8);
  ExpectOk(m);
}

// Its next writes would change a cached prefix: a truncation may end on a
// committed page's boundary or past the committed pages, not inside one.
TEST(KvPageManagerTest, TruncateRefusesToCutIntoACommittedPage) {
  KvPageManager m(8, 4);
  const std::vector<int32_t> tokens = Iota(10, 0);  // pages 0, 1 full, 2 of 4 in page 2
  ASSERT_TRUE(m.AllocateWithPrefix(1, tokens).ok());
  ASSERT_TRUE(m.CommitFullPages(1, tokens).ok());
  const Pages before = Table(m, 1);
  const absl::Status inside = m.Truncate(1, 6);
  EXPECT_TRUE(absl::IsFailedPrecondition(inside)) << inside;
  EXPECT_EQ(m.NumTokens(1), 10);
  EXPECT_EQ(Table(m, 1), before);
  EXPECT_EQ(m.MatchPrefix(Iota(12, 0)).tokens, 8);
  ASSERT_TRUE(m.Truncate(1, 9).ok());  // inside the uncommitted page
  ASSERT_TRUE(m.Truncate(1, 4).ok());  // a committed page's boundary
  EXPECT_EQ(m.NumTokens(1), 4);
  EXPECT_EQ(m.MatchPrefix(Iota(12, 0)).tokens, 8);  // page 1 stays cached, whole
  ExpectOk(m);
}

uint64_t ConstantHash(uint64_t, std::span<const int32_t>) { return 42; }

TEST(KvPageManagerTest, HashCollisionsNeverShareWrongKv) {
  KvPageManager m(16, 4);
  m.SetHashForTesting(&ConstantHash);  // every page of every prefix collides
  const std::vector<int32_t> a = Iota(9, 0);
  const std::vector<int32_t> b = Iota(9, 50);
  ASSERT_TRUE(m.AllocateWithPrefix(1, a).ok());
  ASSERT_TRUE(m.CommitFullPages(1, a).ok());
  // b hashes like a but its tokens differ: no hit.
  EXPECT_EQ(m.MatchPrefix(b).tokens, 0);
  auto rb = m.AllocateWithPrefix(2, b);
  ASSERT_TRUE(rb.ok());
  EXPECT_EQ(*rb, 0);
  ASSERT_TRUE(m.CommitFullPages(2, b).ok());  // cannot register: collision
  EXPECT_EQ(m.MatchPrefix(b).tokens, 0);
  // a's own first page still matches; its second page shares the hash of
  // the first, so only one page can be registered under it.
  EXPECT_EQ(m.MatchPrefix(a).tokens, 4);
  // Same page tokens under a different previous page: still no hit.
  std::vector<int32_t> c = {9, 9, 9, 9, 4, 5, 6, 7};
  EXPECT_EQ(m.MatchPrefix(c).tokens, 0);
  ExpectOk(m);
}

TEST(KvPageManagerTest, EvictsLeastRecentlyUsedCachedPages) {
  KvPageManager m(6, 2);
  const std::vector<int32_t> pa = {1, 1, 0}, pb = {2, 2, 0}, pc = {3, 3, 0};
  for (auto [seq, p] : {std::pair{1, &pa}, std::pair{2, &pb}, std::pair{3, &pc}}) {
    ASSERT_TRUE(m.AllocateWithPrefix(seq, *p).ok());
    ASSERT_TRUE(m.CommitFullPages(seq, *p).ok());
  }
  EXPECT_EQ(m.AvailablePages(), 0);
  const int32_t page_a = Table(m, 1)[0], page_b = Table(m, 2)[0], page_c = Table(m, 3)[0];
  // Freed in order a, b, c: the full pages stay cached, the partial ones not.
  ASSERT_TRUE(m.Free(1).ok());
  ASSERT_TRUE(m.Free(2).ok());
  ASSERT_TRUE(m.Free(3).ok());
  EXPECT_EQ(m.Stats().cached_pages, 3);
  EXPECT_EQ(m.Stats().free_pages, 3);
  // b is used again: the LRU order becomes a, c, b.
  auto again = m.AllocateWithPrefix(4, pb);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 2);
  ASSERT_TRUE(m.Free(4).ok());
  // Free pages go first: no eviction for them.
  ASSERT_TRUE(m.Allocate(5, 6).ok());
  EXPECT_EQ(m.Stats().evictions, 0);
  EXPECT_EQ(m.MatchPrefix(pa).tokens, 2);
  ASSERT_TRUE(m.Allocate(6, 2).ok());  // evicts a
  EXPECT_EQ(Table(m, 6)[0], page_a);
  EXPECT_EQ(m.MatchPrefix(pa).tokens, 0);
  EXPECT_EQ(m.MatchPrefix(pb).tokens, 2);
  EXPECT_EQ(m.MatchPrefix(pc).tokens, 2);
  ASSERT_TRUE(m.Allocate(7, 2).ok());  // evicts c
  EXPECT_EQ(Table(m, 7)[0], page_c);
  EXPECT_EQ(m.MatchPrefix(pc).tokens, 0);
  EXPECT_EQ(m.MatchPrefix(pb).tokens, 2);
  ASSERT_TRUE(m.Allocate(8, 2).ok());  // evicts b
  EXPECT_EQ(Table(m, 8)[0], page_b);
  EXPECT_EQ(m.Stats().evictions, 3);
  EXPECT_EQ(m.Stats().cached_pages, 0);
  EXPECT_TRUE(absl::IsResourceExhausted(m.Allocate(9, 1)));
  ExpectOk(m);
}

TEST(KvPageManagerTest, TailPagesOfAPrefixAreEvictedFirst) {
  KvPageManager m(3, 2);
  const std::vector<int32_t> p = {1, 2, 3, 4, 5};
  ASSERT_TRUE(m.AllocateWithPrefix(1, p).ok());
  ASSERT_TRUE(m.CommitFullPages(1, p).ok());
  ASSERT_TRUE(m.Free(1).ok());
  ASSERT_TRUE(m.Allocate(2, 2).ok());  // the free page
  ASSERT_TRUE(m.Allocate(3, 2).ok());  // evicts page 1 of the prefix, not page 0
  EXPECT_EQ(m.MatchPrefix(p).tokens, 2);
  ExpectOk(m);
}

TEST(KvPageManagerTest, WasteMetric) {
  KvPageManager m(16, 4);
  EXPECT_EQ(m.Stats().kv_waste, 0.0);
  ASSERT_TRUE(m.Allocate(1, 5).ok());  // 2 pages, 8 slots, 3 unused
  KvPageStats st = m.Stats();
  EXPECT_EQ(st.allocated_slots, 8);
  EXPECT_EQ(st.unused_slots, 3);
  EXPECT_DOUBLE_EQ(st.kv_waste, 3.0 / 8.0);
  ASSERT_TRUE(m.Allocate(2, 8).ok());  // 2 pages, full
  EXPECT_DOUBLE_EQ(m.Stats().kv_waste, 3.0 / 16.0);
  ASSERT_TRUE(m.Grow(1, 9).ok());  // 3 pages, 12 slots, 3 unused
  EXPECT_DOUBLE_EQ(m.Stats().kv_waste, 3.0 / 20.0);
  ASSERT_TRUE(m.Allocate(3, 9).ok());  // 3 pages more, 3 unused
  EXPECT_DOUBLE_EQ(m.Stats().kv_waste, 6.0 / 32.0);
  ASSERT_TRUE(m.Truncate(3, 4).ok());  // 1 page, full
  EXPECT_DOUBLE_EQ(m.Stats().kv_waste, 3.0 / 24.0);
  ASSERT_TRUE(m.Free(1).ok());
  ASSERT_TRUE(m.Free(2).ok());
  ASSERT_TRUE(m.Free(3).ok());
  EXPECT_EQ(m.Stats().allocated_slots, 0);
  EXPECT_EQ(m.Stats().kv_waste, 0.0);
}

// ---- randomized ------------------------------------------------------------

uint64_t WeakHash(uint64_t prev, std::span<const int32_t> page) {
  return KvPageManager::DefaultHash(prev, page) % 7;  // collisions galore
}

// Simulates the pool (one token id per slot) and, per sequence, the tokens it
// wrote; whatever a block table reads back must be the sequence's tokens.
class Reference {
 public:
  Reference(int64_t num_pages, int64_t page_size)
      : page_size_(page_size), pool_(num_pages * page_size, -1) {}

  // The sequence's tokens from `from` on go into its pages.
  void Write(const KvPageManager& m, int64_t seq, int64_t from) {
    const std::vector<int32_t>& t = tokens[seq];
    auto table = m.BlockTable(seq);
    for (int64_t p = from; p < static_cast<int64_t>(t.size()); ++p) {
      pool_[table[p / page_size_] * page_size_ + p % page_size_] = t[p];
    }
  }
  void CheckReads(const KvPageManager& m) {
    for (const auto& [seq, t] : tokens) {
      auto table = m.BlockTable(seq);
      ASSERT_EQ(m.NumTokens(seq), static_cast<int64_t>(t.size()));
      for (size_t p = 0; p < t.size(); ++p) {
        ASSERT_EQ(pool_[table[p / page_size_] * page_size_ + p % page_size_], t[p])
            << "sequence " << seq << " position " << p;
      }
    }
  }
  void CheckPrefix(std::span<const int32_t> table, const std::vector<int32_t>& t, int64_t n) {
    for (int64_t p = 0; p < n; ++p) {
      ASSERT_EQ(pool_[table[p / page_size_] * page_size_ + p % page_size_], t[p]) << "position " << p;
    }
  }
  void CheckOwners(const KvPageManager& m) {
    std::vector<int32_t> owners(m.num_pages(), 0);
    for (const auto& [seq, t] : tokens) {
      auto table = m.BlockTable(seq);
      ASSERT_EQ(static_cast<int64_t>(table.size()), (static_cast<int64_t>(t.size()) + page_size_ - 1) / page_size_);
      for (int32_t p : table) ++owners[p];
    }
    int64_t used = 0;
    for (int32_t p = 0; p < m.num_pages(); ++p) {
      ASSERT_EQ(m.RefCount(p), owners[p]) << "page " << p;
      used += owners[p] > 0;
    }
    KvPageStats st = m.Stats();
    ASSERT_EQ(st.used_pages, used);
    ASSERT_EQ(st.used_pages + st.free_pages + st.cached_pages, m.num_pages());
  }

  std::map<int64_t, std::vector<int32_t>> tokens;

 private:
  int64_t page_size_;
  std::vector<int32_t> pool_;
};

struct Snapshot {
  std::map<int64_t, Pages> tables;
  int64_t used, free, cached;
  bool operator==(const Snapshot&) const = default;
};

Snapshot Take(const KvPageManager& m, const Reference& ref) {
  Snapshot s;
  for (const auto& [seq, t] : ref.tokens) s.tables[seq] = Table(m, seq);
  KvPageStats st = m.Stats();
  s.used = st.used_pages;
  s.free = st.free_pages;
  s.cached = st.cached_pages;
  return s;
}

void RunStress(uint32_t seed, bool weak_hash) {
  constexpr int64_t kPages = 48, kPageSize = 4;
  KvPageManager m(kPages, kPageSize);
  if (weak_hash) m.SetHashForTesting(&WeakHash);
  Reference ref(kPages, kPageSize);
  std::mt19937 rng(seed);
  auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  // A few shared system prompts so prefixes repeat.
  std::vector<std::vector<int32_t>> bases;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> b(uniform(2, 14));
    for (int32_t& t : b) t = static_cast<int32_t>(uniform(0, 3));
    bases.push_back(b);
  }
  int64_t next_id = 0, refusals = 0, hits = 0;
  auto any_seq = [&]() {
    auto it = ref.tokens.begin();
    std::advance(it, uniform(0, static_cast<int64_t>(ref.tokens.size()) - 1));
    return it->first;
  };
  for (int op = 0; op < 4000; ++op) {
    const Snapshot before = Take(m, ref);
    const int kind = ref.tokens.empty() ? 0 : static_cast<int>(uniform(0, 9));
    absl::Status status;
    if (kind <= 2) {  // a new request
      const int64_t seq = next_id++;
      std::vector<int32_t> prompt = bases[uniform(0, 3)];
      for (int64_t i = uniform(0, 6); i > 0; --i) prompt.push_back(static_cast<int32_t>(uniform(0, 3)));
      absl::StatusOr<int64_t> cached = m.AllocateWithPrefix(seq, prompt);
      status = cached.status();
      if (cached.ok()) {
        ASSERT_LT(*cached, static_cast<int64_t>(prompt.size()));
        hits += *cached > 0;
        ref.CheckPrefix(m.BlockTable(seq), prompt, *cached);  // the hit holds these tokens
        if (::testing::Test::HasFatalFailure()) return;
        ref.tokens[seq] = prompt;
        ref.Write(m, seq, *cached);
        ASSERT_TRUE(m.CommitFullPages(seq, prompt).ok());
      }
    } else if (kind <= 5) {  // decode: append 1..3 tokens
      const int64_t seq = any_seq();
      std::vector<int32_t>& t = ref.tokens[seq];
      const int64_t old = static_cast<int64_t>(t.size()), add = uniform(1, 3);
      status = m.Grow(seq, old + add);
      if (status.ok()) {
        for (int64_t i = 0; i < add; ++i) t.push_back(static_cast<int32_t>(uniform(0, 3)));
        ref.Write(m, seq, old);
        ASSERT_TRUE(m.CommitFullPages(seq, t).ok());
      }
    } else if (kind <= 7) {  // rejected speculative tokens
      const int64_t seq = any_seq();
      std::vector<int32_t>& t = ref.tokens[seq];
      const int64_t to = uniform(0, static_cast<int64_t>(t.size()));
      // Every write here is committed at once: the full pages are committed.
      const int64_t committed = static_cast<int64_t>(t.size()) / kPageSize;
      const absl::Status cut = m.Truncate(seq, to);
      if (to % kPageSize != 0 && to / kPageSize < committed) {
        ASSERT_TRUE(absl::IsFailedPrecondition(cut)) << cut;
        ASSERT_TRUE(Take(m, ref) == before) << "a refused truncation changed the state, op " << op;
      } else {
        ASSERT_TRUE(cut.ok()) << cut;
        t.resize(to);
      }
    } else {  // finish
      const int64_t seq = any_seq();
      ASSERT_TRUE(m.Free(seq).ok());
      ref.tokens.erase(seq);
    }
    if (!status.ok()) {
      ASSERT_TRUE(absl::IsResourceExhausted(status)) << status;
      ++refusals;
      ASSERT_TRUE(Take(m, ref) == before) << "a refused op changed the state, op " << op;
      // Preempt, as a scheduler would.
      if (!ref.tokens.empty()) {
        const int64_t victim = any_seq();
        ASSERT_TRUE(m.Free(victim).ok());
        ref.tokens.erase(victim);
      }
    }
    ref.CheckOwners(m);
    ref.CheckReads(m);
    if (::testing::Test::HasFatalFailure()) return;
    absl::Status inv = m.CheckInvariants();
    ASSERT_TRUE(inv.ok()) << inv << " after op " << op;
  }
  EXPECT_GT(refusals, 0);  // the pool was exercised to its limit
  EXPECT_GT(hits, 0);      // and prefixes were shared
  EXPECT_GT(m.Stats().evictions, 0);
}

TEST(KvPageManagerTest, RandomizedAgainstReference) {
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    SCOPED_TRACE(seed);
    RunStress(seed, /*weak_hash=*/false);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(KvPageManagerTest, RandomizedWithCollidingHashes) {
  for (uint32_t seed = 11; seed <= 15; ++seed) {
    SCOPED_TRACE(seed);
    RunStress(seed, /*weak_hash=*/true);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// kiln serve's default pool: a fraction of free memory, whole pages only,
// capped, and a clear error where not one page fits.
TEST(KvPagesForFreeMemory, TakesTheFractionInWholePagesUpToTheCap) {
  const uint64_t mib = 1 << 20;
  EXPECT_EQ(*KvPagesForFreeMemory(1000 * mib, 0.9, 2 * mib, 0, "device memory"), 450);
  EXPECT_EQ(*KvPagesForFreeMemory(1000 * mib + 3, 0.25, 3 * mib, 0, "RAM"), 83);  // 250 MiB / 3, rounded down
  EXPECT_EQ(*KvPagesForFreeMemory(1000 * mib, 0.9, 2 * mib, 100, "device memory"), 100);
  EXPECT_EQ(*KvPagesForFreeMemory(1000 * mib, 1.0, 2 * mib, 100000, "device memory"), 500);
  absl::StatusOr<int64_t> none = KvPagesForFreeMemory(3 * mib, 0.5, 2 * mib, 0, "device memory free after the weights");
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(none.status()));
  EXPECT_THAT(std::string(none.status().message()),
              ::testing::HasSubstr("50% of the 3.0 MiB of device memory free after the weights is less than one page "
                                   "(2.00 MiB)"));
  EXPECT_FALSE(KvPagesForFreeMemory(1000 * mib, 0, 2 * mib, 0, "RAM").ok());
  EXPECT_FALSE(KvPagesForFreeMemory(1000 * mib, 1.5, 2 * mib, 0, "RAM").ok());
  EXPECT_FALSE(KvPagesForFreeMemory(1000 * mib, 0.5, 0, 0, "RAM").ok());
}

}  // namespace
}  // namespace kiln
