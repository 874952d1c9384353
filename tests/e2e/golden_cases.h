// llama.cpp's goldens (testdata/golden/<tag>/*.json) as prompt and generated
// ids, and the speculative-decoding check every backend runs against them.
#pragma once

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/executor/executor.h"
#include "runtime/executor/speculative.h"
#include "runtime/util/json.h"
#include "tests/test_support.h"

namespace kiln::testing {

struct GoldenCase {
  std::string name;
  std::vector<int32_t> prompt;
  std::vector<int32_t> generated;
  bool same_with_f16_kv_cache = false;  // SameTokensWithF16KvCache
};

inline std::vector<int32_t> GoldenIds(const JsonValue* a) {
  std::vector<int32_t> out;
  if (a == nullptr) return out;
  for (const JsonValue& v : a->array()) out.push_back(static_cast<int32_t>(*v.int_value()));
  return out;
}

// Whether llama.cpp recorded that its f16 KV cache gives a golden's ids too
// (checks.same_tokens_with_default_f16_kv_cache; the goldens used f32).
inline bool SameTokensWithF16KvCache(const JsonValue& golden) {
  const JsonValue* checks = golden.Find("checks");
  const JsonValue* same = checks ? checks->Find("same_tokens_with_default_f16_kv_cache") : nullptr;
  return same != nullptr && same->is_bool() && same->bool_value();
}

// Every golden of `tag` (not the activation dumps), by file name; empty when
// the testdata is absent.
inline std::vector<GoldenCase> GoldenCases(const std::string& tag) {
  std::vector<GoldenCase> out;
  const std::filesystem::path dir = TestDataDir() / "golden" / tag;
  if (!std::filesystem::exists(dir)) return out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() != ".json" || name.find("activations") != std::string::npos) continue;
    absl::StatusOr<JsonValue> j = ParseJson(ReadFileOrDie(e.path()));
    EXPECT_TRUE(j.ok()) << e.path() << ": " << j.status();
    if (!j.ok()) continue;
    out.push_back({name, GoldenIds(j->Find("prompt_token_ids")), GoldenIds(j->Find("generated_token_ids")),
                   SameTokensWithF16KvCache(*j)});
  }
  std::sort(out.begin(), out.end(), [](const GoldenCase& a, const GoldenCase& b) { return a.name < b.name; });
  return out;
}

// Greedy speculative decoding on `target`, with `draft` as the draft model
// and then with n-gram lookup, gives each golden's ids exactly.
inline void ExpectSpeculativeGreedyIsTheGoldens(Executor& target, Executor& draft,
                                                const std::vector<GoldenCase>& cases, const std::string& backend) {
  for (const GoldenCase& c : cases) {
    SpeculativeOptions options;
    options.generate.max_new_tokens = static_cast<int64_t>(c.generated.size());
    options.generate.sampling.temperature = 0;
    options.draft_max = 6;
    DraftModel drafter(draft, options.generate.sampling);
    absl::StatusOr<SpeculativeResult> with_draft = GenerateSpeculative(target, drafter, c.prompt, options);
    ASSERT_TRUE(with_draft.ok()) << with_draft.status();
    EXPECT_EQ(with_draft->result.ids, c.generated) << c.name << " (draft model)";
    EXPECT_GT(with_draft->stats.drafted, 0) << c.name;
    NgramLookupDraft lookup;
    absl::StatusOr<SpeculativeResult> with_lookup = GenerateSpeculative(target, lookup, c.prompt, options);
    ASSERT_TRUE(with_lookup.ok()) << with_lookup.status();
    EXPECT_EQ(with_lookup->result.ids, c.generated) << c.name << " (n-gram lookup)";
    std::printf("%s on %s: draft model %lld/%lld accepted, lookup %lld/%lld accepted; ids equal the golden: %s\n",
                c.name.c_str(), backend.c_str(), (long long)with_draft->stats.accepted,
                (long long)with_draft->stats.drafted, (long long)with_lookup->stats.accepted,
                (long long)with_lookup->stats.drafted,
                with_draft->result.ids == c.generated && with_lookup->result.ids == c.generated ? "yes" : "no");
  }
}

}  // namespace kiln::testing
