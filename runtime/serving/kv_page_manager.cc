#include "runtime/serving/kv_page_manager.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kiln {

namespace {

uint64_t Mix(uint64_t x) {  // splitmix64 finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

constexpr uint64_t kRootHash = 0x6b696c6e2d6b7631ULL;  // "kiln-kv1"

}  // namespace

uint64_t KvPageManager::DefaultHash(uint64_t prev_hash, std::span<const int32_t> page_tokens) {
  uint64_t h = Mix(prev_hash ^ 0x9e3779b97f4a7c15ULL);
  for (int32_t t : page_tokens) h = Mix(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(t)) + 0x9e3779b97f4a7c15ULL));
  return h;
}

KvPageManager::KvPageManager(int64_t num_pages, int64_t page_size)
    : page_size_(std::max<int64_t>(page_size, 1)),
      pages_(static_cast<size_t>(std::max<int64_t>(num_pages, 0))),
      tokens_(pages_.size() * static_cast<size_t>(page_size_)) {
  free_.reserve(pages_.size());
  // Popped from the back: page 0 first.
  for (int64_t p = num_pages - 1; p >= 0; --p) free_.push_back(static_cast<int32_t>(p));
  table_.reserve(pages_.size());
}

// ---- page states -----------------------------------------------------------

void KvPageManager::LruPushBack(int32_t page) {
  Page& pg = pages_[page];
  pg.lru_prev = lru_tail_;
  pg.lru_next = kNone;
  if (lru_tail_ != kNone) pages_[lru_tail_].lru_next = page;
  else lru_head_ = page;
  lru_tail_ = page;
  ++num_cached_;
}

void KvPageManager::LruRemove(int32_t page) {
  Page& pg = pages_[page];
  if (pg.lru_prev != kNone) pages_[pg.lru_prev].lru_next = pg.lru_next;
  else lru_head_ = pg.lru_next;
  if (pg.lru_next != kNone) pages_[pg.lru_next].lru_prev = pg.lru_prev;
  else lru_tail_ = pg.lru_prev;
  pg.lru_prev = pg.lru_next = kNone;
  --num_cached_;
}

void KvPageManager::Unregister(int32_t page) {
  Page& pg = pages_[page];
  if (!pg.registered) return;
  auto it = table_.find(pg.hash);
  if (it != table_.end() && it->second == page) table_.erase(it);
  pg.registered = false;
  ++pg.gen;
  if (pg.refcount == 0) {  // was cached: now holds nothing worth keeping
    LruRemove(page);
    free_.push_back(page);
  }
}

int32_t KvPageManager::TakePage() {
  int32_t page;
  if (!free_.empty()) {
    page = free_.back();
    free_.pop_back();
  } else {
    page = lru_head_;  // callers checked AvailablePages()
    Unregister(page);  // to the free list...
    free_.pop_back();  // ...and out again
    ++evictions_;
  }
  pages_[page].refcount = 1;
  ++num_used_;
  return page;
}

void KvPageManager::Acquire(int32_t page) {
  Page& pg = pages_[page];
  if (pg.refcount == 0) {  // a cached page comes back into use
    LruRemove(page);
    ++num_used_;
  }
  ++pg.refcount;
}

void KvPageManager::Release(int32_t page) {
  Page& pg = pages_[page];
  if (--pg.refcount > 0) return;
  --num_used_;
  if (pg.registered) LruPushBack(page);
  else free_.push_back(page);
}

// ---- sequences -------------------------------------------------------------

absl::Status KvPageManager::Allocate(SeqId seq, int64_t token_count) {
  if (token_count < 0) return absl::InvalidArgumentError("negative token count");
  if (seqs_.contains(seq)) return absl::AlreadyExistsError(absl::StrCat("sequence ", seq, " exists"));
  const int64_t need = PagesFor(token_count);
  if (need > AvailablePages()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV pages: need ", need, ", ", AvailablePages(), " available"));
  }
  Sequence& s = seqs_[seq];
  s.pages.reserve(need);
  for (int64_t i = 0; i < need; ++i) s.pages.push_back(TakePage());
  s.tokens = token_count;
  seq_pages_ += need;
  seq_tokens_ += token_count;
  return absl::OkStatus();
}

absl::Status KvPageManager::Grow(SeqId seq, int64_t new_token_count) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  Sequence& s = it->second;
  if (new_token_count < s.tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("Grow to ", new_token_count, " tokens below the current ", s.tokens));
  }
  const int64_t need = PagesFor(new_token_count) - static_cast<int64_t>(s.pages.size());
  if (need > AvailablePages()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV pages: need ", need, ", ", AvailablePages(), " available"));
  }
  for (int64_t i = 0; i < need; ++i) s.pages.push_back(TakePage());
  seq_pages_ += std::max<int64_t>(need, 0);
  seq_tokens_ += new_token_count - s.tokens;
  s.tokens = new_token_count;
  return absl::OkStatus();
}

absl::Status KvPageManager::Truncate(SeqId seq, int64_t new_token_count) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  Sequence& s = it->second;
  if (new_token_count < 0 || new_token_count > s.tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("Truncate to ", new_token_count, " tokens, have ", s.tokens));
  }
  if (new_token_count % page_size_ != 0 && new_token_count / page_size_ < static_cast<int64_t>(s.chain.size())) {
    return absl::FailedPreconditionError(absl::StrCat("Truncate of sequence ", seq, " to ", new_token_count,
                                                      " tokens cuts into committed page ",
                                                      new_token_count / page_size_));
  }
  const int64_t keep = PagesFor(new_token_count);
  for (int64_t i = static_cast<int64_t>(s.pages.size()) - 1; i >= keep; --i) Release(s.pages[i]);
  seq_pages_ -= static_cast<int64_t>(s.pages.size()) - keep;
  s.pages.resize(keep);
  // Committed pages stay valid while whole: their KV is unchanged.
  s.chain.resize(std::min<size_t>(s.chain.size(), new_token_count / page_size_));
  seq_tokens_ -= s.tokens - new_token_count;
  s.tokens = new_token_count;
  return absl::OkStatus();
}

absl::Status KvPageManager::Free(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  Sequence& s = it->second;
  // Last page first, so the tail of a prefix is evicted before its head.
  for (auto p = s.pages.rbegin(); p != s.pages.rend(); ++p) Release(*p);
  seq_pages_ -= static_cast<int64_t>(s.pages.size());
  seq_tokens_ -= s.tokens;
  seqs_.erase(it);
  return absl::OkStatus();
}

// ---- prefix caching --------------------------------------------------------

void KvPageManager::Match(std::span<const int32_t> tokens, int64_t max_pages,
                          std::vector<int32_t>* pages, std::vector<ChainKey>* keys) const {
  uint64_t hash = kRootHash;
  int32_t parent = kNone;
  uint32_t parent_gen = 0;
  const int64_t n = std::min<int64_t>(static_cast<int64_t>(tokens.size()) / page_size_, max_pages);
  for (int64_t i = 0; i < n; ++i) {
    std::span<const int32_t> page_tokens = tokens.subspan(i * page_size_, page_size_);
    hash = hash_(hash, page_tokens);
    auto it = table_.find(hash);
    if (it == table_.end()) break;
    const int32_t p = it->second;
    const Page& pg = pages_[p];
    if (pg.parent != parent || pg.parent_gen != parent_gen) break;  // another prefix
    if (!std::equal(page_tokens.begin(), page_tokens.end(), PageTokens(p).begin())) break;
    pages->push_back(p);
    if (keys != nullptr) keys->push_back({hash, p, pg.gen});
    parent = p;
    parent_gen = pg.gen;
  }
}

PrefixMatch KvPageManager::MatchPrefix(std::span<const int32_t> tokens) const {
  PrefixMatch m;
  Match(tokens, INT64_MAX, &m.pages, nullptr);
  m.tokens = static_cast<int64_t>(m.pages.size()) * page_size_;
  return m;
}

absl::StatusOr<int64_t> KvPageManager::AllocateWithPrefix(SeqId seq, std::span<const int32_t> tokens) {
  if (seqs_.contains(seq)) return absl::AlreadyExistsError(absl::StrCat("sequence ", seq, " exists"));
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::vector<int32_t> hit;
  std::vector<ChainKey> keys;
  if (n > 0) Match(tokens, (n - 1) / page_size_, &hit, &keys);
  const int64_t need = PagesFor(n) - static_cast<int64_t>(hit.size());
  int64_t reviving = 0;  // cached hit pages leave the evictable set
  for (int32_t p : hit) reviving += pages_[p].refcount == 0;
  if (need > AvailablePages() - reviving) {
    return absl::ResourceExhaustedError(absl::StrCat("KV pages: need ", need, ", ",
                                                     AvailablePages() - reviving, " available"));
  }
  for (int32_t p : hit) Acquire(p);  // first, so TakePage cannot evict them
  Sequence& s = seqs_[seq];
  s.pages = std::move(hit);
  s.pages.reserve(PagesFor(n));
  for (int64_t i = 0; i < need; ++i) s.pages.push_back(TakePage());
  s.tokens = n;
  s.chain = std::move(keys);
  seq_pages_ += static_cast<int64_t>(s.pages.size());
  seq_tokens_ += n;
  const int64_t cached = static_cast<int64_t>(s.chain.size()) * page_size_;
  lookup_tokens_ += n;
  hit_tokens_ += cached;
  return cached;
}

absl::Status KvPageManager::CommitFullPages(SeqId seq, std::span<const int32_t> tokens) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  Sequence& s = it->second;
  const int64_t full = std::min<int64_t>(static_cast<int64_t>(tokens.size()), s.tokens) / page_size_;
  for (int64_t i = static_cast<int64_t>(s.chain.size()); i < full; ++i) {
    const ChainKey prev = i == 0 ? ChainKey{kRootHash, kNone, 0} : s.chain[i - 1];
    std::span<const int32_t> page_tokens = tokens.subspan(i * page_size_, page_size_);
    const uint64_t hash = hash_(prev.hash, page_tokens);
    if (!KeyAlive(prev.page, prev.gen)) {  // no verified prefix to hang it on
      s.chain.push_back({hash, kBroken, 0});
      continue;
    }
    auto hit = table_.find(hash);
    if (hit != table_.end()) {
      const int32_t q = hit->second;
      const Page& pq = pages_[q];
      if (pq.parent == prev.page && pq.parent_gen == prev.gen &&
          std::equal(page_tokens.begin(), page_tokens.end(), PageTokens(q).begin())) {
        s.chain.push_back({hash, q, pq.gen});  // already cached (maybe this very page)
        continue;
      }
      if (KeyAlive(pq.parent, pq.parent_gen)) {  // a live different prefix: a collision
        s.chain.push_back({hash, kBroken, 0});
        continue;
      }
      Unregister(q);  // its prefix is gone: nothing can reach it, replace it
    }
    const int32_t own = s.pages[i];
    Page& po = pages_[own];
    if (po.registered) {  // shared and registered as some other prefix
      s.chain.push_back({hash, kBroken, 0});
      continue;
    }
    po.registered = true;
    po.hash = hash;
    po.parent = prev.page;
    po.parent_gen = prev.gen;
    std::copy(page_tokens.begin(), page_tokens.end(), tokens_.begin() + static_cast<size_t>(own) * page_size_);
    table_[hash] = own;
    s.chain.push_back({hash, own, po.gen});
  }
  return absl::OkStatus();
}

// ---- queries ---------------------------------------------------------------

std::span<const int32_t> KvPageManager::BlockTable(SeqId seq) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return {};
  return it->second.pages;
}

int64_t KvPageManager::NumTokens(SeqId seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? -1 : it->second.tokens;
}

int64_t KvPageManager::PagesNeeded(SeqId seq, int64_t new_token_count) const {
  auto it = seqs_.find(seq);
  const int64_t have = it == seqs_.end() ? 0 : static_cast<int64_t>(it->second.pages.size());
  return std::max<int64_t>(PagesFor(new_token_count) - have, 0);
}

KvPageStats KvPageManager::Stats() const {
  KvPageStats st;
  st.total_pages = num_pages();
  st.used_pages = num_used_;
  st.free_pages = static_cast<int64_t>(free_.size());
  st.cached_pages = num_cached_;
  st.evictions = evictions_;
  st.lookup_tokens = lookup_tokens_;
  st.hit_tokens = hit_tokens_;
  st.prefix_hit_rate = lookup_tokens_ > 0 ? static_cast<double>(hit_tokens_) / lookup_tokens_ : 0.0;
  st.allocated_slots = seq_pages_ * page_size_;
  st.unused_slots = st.allocated_slots - seq_tokens_;
  st.kv_waste = st.allocated_slots > 0 ? static_cast<double>(st.unused_slots) / st.allocated_slots : 0.0;
  return st;
}

absl::Status KvPageManager::CheckInvariants() const {
  const int64_t n = num_pages();
  std::vector<int32_t> owners(n, 0);
  int64_t sum_pages = 0, sum_tokens = 0;
  for (const auto& [id, s] : seqs_) {
    if (static_cast<int64_t>(s.pages.size()) != PagesFor(s.tokens)) {
      return absl::InternalError(absl::StrCat("sequence ", id, ": ", s.pages.size(), " pages for ", s.tokens, " tokens"));
    }
    if (static_cast<int64_t>(s.chain.size()) > s.tokens / page_size_) {
      return absl::InternalError(absl::StrCat("sequence ", id, ": chain past its full pages"));
    }
    for (int32_t p : s.pages) {
      if (p < 0 || p >= n) return absl::InternalError(absl::StrCat("sequence ", id, ": bad page ", p));
      ++owners[p];
    }
    sum_pages += static_cast<int64_t>(s.pages.size());
    sum_tokens += s.tokens;
  }
  if (sum_pages != seq_pages_ || sum_tokens != seq_tokens_) return absl::InternalError("slot sums drifted");
  std::vector<char> in_free(n, 0), in_lru(n, 0);
  for (int32_t p : free_) {
    if (p < 0 || p >= n || in_free[p]) return absl::InternalError(absl::StrCat("free list: page ", p));
    in_free[p] = 1;
  }
  int64_t lru = 0;
  for (int32_t p = lru_head_, prev = kNone; p != kNone; prev = p, p = pages_[p].lru_next) {
    if (in_lru[p] || pages_[p].lru_prev != prev) return absl::InternalError(absl::StrCat("LRU list: page ", p));
    in_lru[p] = 1;
    ++lru;
    if (pages_[p].lru_next == kNone && p != lru_tail_) return absl::InternalError("LRU tail");
  }
  if (lru != num_cached_) return absl::InternalError("cached count drifted");
  int64_t used = 0;
  for (int32_t p = 0; p < n; ++p) {
    const Page& pg = pages_[p];
    if (pg.refcount != owners[p]) {
      return absl::InternalError(absl::StrCat("page ", p, ": refcount ", pg.refcount, ", owners ", owners[p]));
    }
    const int states = (pg.refcount > 0) + in_free[p] + in_lru[p];
    if (states != 1) return absl::InternalError(absl::StrCat("page ", p, " in ", states, " states"));
    if (in_lru[p] && !pg.registered) return absl::InternalError(absl::StrCat("page ", p, ": cached unregistered"));
    if (in_free[p] && pg.registered) return absl::InternalError(absl::StrCat("page ", p, ": free registered"));
    if (pg.registered) {
      auto it = table_.find(pg.hash);
      if (it == table_.end() || it->second != p) return absl::InternalError(absl::StrCat("page ", p, ": not in the table"));
    }
    used += pg.refcount > 0;
  }
  if (used != num_used_) return absl::InternalError("used count drifted");
  for (const auto& [hash, p] : table_) {
    if (!pages_[p].registered || pages_[p].hash != hash) return absl::InternalError("table entry to an unregistered page");
  }
  if (used + static_cast<int64_t>(free_.size()) + num_cached_ != n) return absl::InternalError("states do not add up");
  return absl::OkStatus();
}

}  // namespace kiln
