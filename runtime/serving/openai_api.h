// The OpenAI-compatible HTTP API of `kiln serve`: /v1/completions and
// /v1/chat/completions (with SSE streaming, n, stop, max_tokens,
// temperature, top_p, seed, logprobs, usage (streamed too with
// stream_options.include_usage); with a drafter, a per-request
// "speculative" switch and usage.speculative), /v1/models, /health, the
// Prometheus /metrics and a small chat page at /.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/serving/engine.h"
#include "runtime/serving/http_server.h"
#include "runtime/tokenizer/tokenizer.h"

namespace kiln {

struct ApiLimits {
  int64_t max_tokens = 4096;  // largest max_tokens a request may ask for
  int max_n = 8;              // largest n
};

class OpenAiApi {
 public:
  // `chat_template`: a template name (chatml, llama3) used instead of the
  // model's own, or for a model that has none; empty: the model's.
  OpenAiApi(Engine& engine, const Tokenizer& tokenizer, std::string model_name, int64_t context, ApiLimits limits,
            std::string chat_template = "");
  // Routes every endpoint on `server` (before it starts).
  void Register(HttpServer& server);

 private:
  struct Latency;  // histogram
  void Completions(const HttpRequest& request, ResponseWriter& writer, bool chat);
  void Metrics(ResponseWriter& writer);

  Engine& engine_;
  const Tokenizer& tokenizer_;
  std::string model_;
  std::string chat_template_;
  int64_t context_;
  ApiLimits limits_;
  std::atomic<int64_t> requests_total_{0}, requests_failed_{0}, completion_tokens_total_{0},
      prompt_tokens_total_{0};
  std::mutex metrics_mu_;
  std::vector<double> ttft_seconds_, itl_seconds_;  // bucket counts, see kLatencyBuckets
  double ttft_sum_ = 0, itl_sum_ = 0;
  int64_t ttft_count_ = 0, itl_count_ = 0;
};

}  // namespace kiln
