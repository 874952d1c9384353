// Owns the KV pages of the page pool (runtime/cpu/attention.h) for many
// sequences: one block table per sequence, reference counts, and prefix
// caching of full pages.
//
// The manager never touches KV memory; it hands out page ids. A sequence
// writes only past its committed pages (CommitFullPages), into pages it owns
// alone: shared pages are whole prefix pages, and Truncate refuses to cut
// into a committed page, so no page is ever copied.
//
// Every page is in exactly one of three states:
//   used:   refcount > 0 (in some block table, maybe several),
//   cached: refcount 0 but registered as a full prefix page; reusable by a
//           later request with the same prefix, evicted LRU when needed,
//   free:   refcount 0 and holding nothing worth keeping.
// used + cached + free == num_pages, always.
//
// Prefix caching: each full page of a sequence has a hash chained with the
// previous page's (hash(prev_hash, page tokens)), so it names the whole
// prefix. A hit is trusted only after checking the page's tokens and that the
// page was registered under the very page that matched before it (a page id
// and the generation it had then), so by induction the whole prefix is equal
// token for token: a hash collision costs a miss, never wrong KV.
//
// Costs are O(pages touched) per call, plus a hash probe per full page.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln {

struct PrefixMatch {
  int64_t tokens = 0;           // leading tokens cached (whole pages)
  std::vector<int32_t> pages;   // the pages holding them, in order
};

struct KvPageStats {
  int64_t total_pages = 0;
  int64_t used_pages = 0;    // refcount > 0
  int64_t free_pages = 0;    // holding nothing
  int64_t cached_pages = 0;  // refcount 0, kept for prefix reuse
  int64_t evictions = 0;     // cached pages taken for new allocations
  // Prefix caching, over every AllocateWithPrefix call.
  int64_t lookup_tokens = 0;
  int64_t hit_tokens = 0;
  double prefix_hit_rate = 0.0;  // hit_tokens / lookup_tokens (0 when none)
  // Token slots of the block tables, counted per sequence (a page shared by
  // two sequences counts twice) and the ones not holding a token.
  int64_t allocated_slots = 0;
  int64_t unused_slots = 0;
  double kv_waste = 0.0;  // unused_slots / allocated_slots (0 when none)
};

class KvPageManager {
 public:
  using SeqId = int64_t;  // the caller's request id
  // Chained page hash: hash of the prefix ending with `page_tokens`, given
  // the hash of the prefix before it.
  using HashFn = uint64_t (*)(uint64_t prev_hash, std::span<const int32_t> page_tokens);

  KvPageManager(int64_t num_pages, int64_t page_size);

  int64_t num_pages() const { return static_cast<int64_t>(pages_.size()); }
  int64_t page_size() const { return page_size_; }

  // Failures: ResourceExhausted when the pages run out (nothing changed: the
  // scheduler can preempt and retry), NotFound / AlreadyExists /
  // InvalidArgument on misuse (nothing changed either).

  // A new sequence with room for `token_count` tokens.
  absl::Status Allocate(SeqId seq, int64_t token_count);
  // Room for `new_token_count` >= the current count: appends pages.
  absl::Status Grow(SeqId seq, int64_t new_token_count);
  // Drops tokens from the end (rejected speculative tokens): releases the
  // pages past the new count. FailedPrecondition where the new count ends
  // inside a committed page (its next writes would change a cached prefix).
  absl::Status Truncate(SeqId seq, int64_t new_token_count);
  // Releases the sequence's pages (refcount--); full prefix pages stay cached.
  absl::Status Free(SeqId seq);

  // The leading whole pages of `tokens` already cached. Does not change
  // anything (nor the statistics).
  PrefixMatch MatchPrefix(std::span<const int32_t> tokens) const;
  // Allocate for `tokens.size()` tokens, reusing the cached pages of the
  // longest cached prefix. Returns how many leading tokens are cached (their
  // prefill can be skipped); it is below tokens.size() (at least one token is
  // left to compute, for its logits), so a fully cached prompt of whole pages
  // reuses one page fewer.
  absl::StatusOr<int64_t> AllocateWithPrefix(SeqId seq, std::span<const int32_t> tokens);
  // Registers the sequence's full pages not registered yet; `tokens` are its
  // tokens from position 0 (those of pages already committed are not read).
  // Call once their KV is written.
  absl::Status CommitFullPages(SeqId seq, std::span<const int32_t> tokens);

  // Queries.
  bool Contains(SeqId seq) const { return seqs_.contains(seq); }
  // Empty for an unknown sequence.
  std::span<const int32_t> BlockTable(SeqId seq) const;
  int64_t NumTokens(SeqId seq) const;  // -1 for an unknown sequence
  // New pages Grow(seq, new_token_count) would take (0 when it fits).
  int64_t PagesNeeded(SeqId seq, int64_t new_token_count) const;
  // Pages an allocation can take now: free + cached.
  int64_t AvailablePages() const { return static_cast<int64_t>(free_.size()) + num_cached_; }
  int32_t RefCount(int32_t page) const { return pages_[page].refcount; }
  bool IsCached(int32_t page) const { return pages_[page].refcount == 0 && pages_[page].registered; }
  KvPageStats Stats() const;

  // Checks every internal invariant (O(num_pages + block tables)): for tests.
  absl::Status CheckInvariants() const;
  // Replaces the page hash (tests force collisions with it).
  void SetHashForTesting(HashFn hash) { hash_ = hash; }

  static uint64_t DefaultHash(uint64_t prev_hash, std::span<const int32_t> page_tokens);

 private:
  static constexpr int32_t kNone = -1;    // no page: the root of every prefix
  static constexpr int32_t kBroken = -2;  // a prefix that could not be registered

  struct Page {
    int32_t refcount = 0;
    bool registered = false;  // in table_, tokens_ holds its tokens
    uint32_t gen = 0;         // bumped on unregistering: stale links die
    uint64_t hash = 0;
    int32_t parent = kNone;   // page of the previous prefix page, and its gen
    uint32_t parent_gen = 0;
    int32_t lru_prev = kNone, lru_next = kNone;  // while cached
  };
  // The registered page standing for a sequence's prefix up to one page.
  struct ChainKey {
    uint64_t hash = 0;
    int32_t page = kBroken;
    uint32_t gen = 0;
  };
  struct Sequence {
    std::vector<int32_t> pages;
    int64_t tokens = 0;
    std::vector<ChainKey> chain;  // one per committed full page
  };

  int64_t PagesFor(int64_t tokens) const { return (tokens + page_size_ - 1) / page_size_; }
  std::span<const int32_t> PageTokens(int32_t page) const {
    return {tokens_.data() + static_cast<size_t>(page) * page_size_, static_cast<size_t>(page_size_)};
  }
  bool KeyAlive(int32_t page, uint32_t gen) const {
    return page == kNone || (page >= 0 && pages_[page].registered && pages_[page].gen == gen);
  }
  // Longest verified cached prefix of whole pages of `tokens`, at most
  // `max_pages`; appends its pages and keys.
  void Match(std::span<const int32_t> tokens, int64_t max_pages, std::vector<int32_t>* pages,
             std::vector<ChainKey>* keys) const;
  int32_t TakePage();            // a free page, else evicts the LRU cached one
  void Acquire(int32_t page);    // refcount++ (leaving the LRU list if cached)
  void Release(int32_t page);    // refcount--; to the LRU list or free list at 0
  void Unregister(int32_t page);
  void LruPushBack(int32_t page);
  void LruRemove(int32_t page);

  int64_t page_size_;
  std::vector<Page> pages_;
  std::vector<int32_t> tokens_;  // [num_pages, page_size]: tokens of registered pages
  std::vector<int32_t> free_;    // stack of free pages
  int32_t lru_head_ = kNone, lru_tail_ = kNone;  // cached pages, least recent first
  int64_t num_cached_ = 0;
  int64_t num_used_ = 0;
  absl::flat_hash_map<uint64_t, int32_t> table_;  // prefix hash -> registered page
  absl::flat_hash_map<SeqId, Sequence> seqs_;
  HashFn hash_ = &DefaultHash;
  int64_t evictions_ = 0;
  int64_t lookup_tokens_ = 0, hit_tokens_ = 0;
  int64_t seq_pages_ = 0, seq_tokens_ = 0;  // sums over sequences
};

}  // namespace kiln
