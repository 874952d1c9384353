#include "runtime/serving/openai_api.h"

#include <chrono>
#include <condition_variable>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/serving/chat_page.h"
#include "runtime/tokenizer/chat_template.h"
#include "runtime/tokenizer/streaming_decoder.h"
#include "runtime/util/json.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;

// Upper bounds (seconds) of the latency histogram buckets.
constexpr double kLatencyBuckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
constexpr int kBucketCount = sizeof(kLatencyBuckets) / sizeof(kLatencyBuckets[0]);

// One choice of a request: the engine thread fills it, the handler drains it.
struct Choice {
  int64_t id = -1;  // scheduler id
  std::string pending;  // text not sent yet (streaming)
  std::string text;     // all text
  std::vector<int32_t> tokens;
  std::vector<SampledToken> sampled;
  std::string finish_reason;  // set once finished
  bool done = false;
  std::unique_ptr<StreamingDecoder> decoder;
  Clock::time_point last_token;
  bool first = true;
  SpeculativeStats speculation;
};

struct Shared {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Choice> choices;
};

// Applies OpenAI's stop strings to a choice's text: true when one matched
// (the text is cut before it).
bool CutAtStop(Choice& c, const std::vector<std::string>& stops, size_t sent) {
  for (const std::string& s : stops) {
    const size_t at = c.text.find(s, sent > s.size() ? sent - s.size() : 0);
    if (at == std::string::npos) continue;
    c.text.resize(at);
    c.pending = at > sent ? c.text.substr(sent) : "";
    return true;
  }
  return false;
}

std::string FinishReason(const std::string& scheduler_reason) {
  if (scheduler_reason == "eog" || scheduler_reason == "stop") return "stop";
  if (scheduler_reason == "length") return "length";
  return scheduler_reason;
}

JsonValue LogprobsJson(const Tokenizer& tok, const Choice& c, bool chat) {
  auto text = [&](int32_t id) { return JsonValue::String(std::string(tok.TokenBytes(id, true))); };
  if (chat) {
    JsonValue content = JsonValue::MakeArray();
    for (const SampledToken& s : c.sampled) {
      JsonValue e = JsonValue::MakeObject();
      e.Set("token", text(s.token));
      e.Set("logprob", JsonValue::Number(s.logprob.value_or(0)));
      JsonValue top = JsonValue::MakeArray();
      for (const TokenLogprob& t : s.top_logprobs) {
        JsonValue o = JsonValue::MakeObject();
        o.Set("token", text(t.token));
        o.Set("logprob", JsonValue::Number(t.logprob));
        top.array().push_back(std::move(o));
      }
      e.Set("top_logprobs", std::move(top));
      content.array().push_back(std::move(e));
    }
    JsonValue out = JsonValue::MakeObject();
    out.Set("content", std::move(content));
    return out;
  }
  JsonValue tokens = JsonValue::MakeArray(), lps = JsonValue::MakeArray(), tops = JsonValue::MakeArray();
  for (const SampledToken& s : c.sampled) {
    tokens.array().push_back(text(s.token));
    lps.array().push_back(JsonValue::Number(s.logprob.value_or(0)));
    JsonValue top = JsonValue::MakeObject();
    for (const TokenLogprob& t : s.top_logprobs) top.Set(std::string(tok.TokenBytes(t.token, true)), JsonValue::Number(t.logprob));
    tops.array().push_back(std::move(top));
  }
  JsonValue out = JsonValue::MakeObject();
  out.Set("tokens", std::move(tokens));
  out.Set("token_logprobs", std::move(lps));
  out.Set("top_logprobs", std::move(tops));
  return out;
}

}  // namespace

OpenAiApi::OpenAiApi(Engine& engine, const Tokenizer& tokenizer, std::string model_name, int64_t context,
                     ApiLimits limits, std::string chat_template)
    : engine_(engine),
      tokenizer_(tokenizer),
      model_(std::move(model_name)),
      chat_template_(std::move(chat_template)),
      context_(context),
      limits_(limits),
      ttft_seconds_(kBucketCount, 0),
      itl_seconds_(kBucketCount, 0) {}

void OpenAiApi::Register(HttpServer& server) {
  server.Handle("GET", "/health", [](const HttpRequest&, ResponseWriter& w) {
    w.Send(200, "application/json", "{\"status\":\"ok\"}");
  });
  server.Handle("GET", "/v1/models", [this](const HttpRequest&, ResponseWriter& w) {
    JsonValue model = JsonValue::MakeObject();
    model.Set("id", JsonValue::String(model_));
    model.Set("object", JsonValue::String("model"));
    model.Set("owned_by", JsonValue::String("kiln"));
    model.Set("context_length", JsonValue::Int(context_));
    JsonValue list = JsonValue::MakeObject();
    list.Set("object", JsonValue::String("list"));
    list.Set("data", JsonValue::MakeArray({std::move(model)}));
    w.Send(200, "application/json", ToJson(list));
  });
  server.Handle("POST", "/v1/completions",
                [this](const HttpRequest& r, ResponseWriter& w) { Completions(r, w, /*chat=*/false); });
  server.Handle("POST", "/v1/chat/completions",
                [this](const HttpRequest& r, ResponseWriter& w) { Completions(r, w, /*chat=*/true); });
  server.Handle("GET", "/metrics", [this](const HttpRequest&, ResponseWriter& w) { Metrics(w); });
  server.Handle("GET", "/", [](const HttpRequest&, ResponseWriter& w) {
    w.Send(200, "text/html; charset=utf-8", kChatPageHtml);
  });
}

void OpenAiApi::Completions(const HttpRequest& request, ResponseWriter& writer, bool chat) {
  const auto start = Clock::now();
  ++requests_total_;
  auto bad = [&](const std::string& message, const std::string& param = "") {
    ++requests_failed_;
    writer.SendError(400, message, "invalid_request_error", param.empty() ? "invalid_request" : param);
  };
  absl::StatusOr<JsonValue> body = ParseJson(request.body);
  if (!body.ok()) return bad(absl::StrCat("the body is not valid JSON: ", body.status().message()));
  if (!body->is_object()) return bad("the body must be a JSON object");
  auto number = [&](const char* key, double fallback, double lo, double hi, double* out) -> bool {
    const JsonValue* v = body->Find(key);
    if (v == nullptr || v->is_null()) {
      *out = fallback;
      return true;
    }
    if (!v->is_number() || v->number() < lo || v->number() > hi) {
      bad(absl::StrFormat("'%s' must be a number in [%g, %g]", key, lo, hi), key);
      return false;
    }
    *out = v->number();
    return true;
  };
  double max_tokens, temperature, top_p, n, seed, logprobs = -1;
  const char* max_key = body->Find("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (!number(max_key, chat ? 256 : 16, 1, static_cast<double>(limits_.max_tokens), &max_tokens) ||
      !number("temperature", 1.0, 0, 2, &temperature) || !number("top_p", 1.0, 1e-9, 1, &top_p) ||
      !number("n", 1, 1, limits_.max_n, &n) || !number("seed", 0, 0, 9.007199254740992e15, &seed)) {
    return;
  }
  if (chat) {
    const JsonValue* lp = body->Find("logprobs");
    if (lp != nullptr && lp->is_bool() && lp->bool_value()) {
      if (!number("top_logprobs", 0, 0, 20, &logprobs)) return;
    }
  } else if (body->Find("logprobs") && !body->Find("logprobs")->is_null()) {
    if (!number("logprobs", 0, 0, 20, &logprobs)) return;
  }
  std::vector<std::string> stops;
  if (const JsonValue* s = body->Find("stop"); s != nullptr && !s->is_null()) {
    if (s->is_string()) {
      stops.push_back(s->string_value());
    } else if (s->is_array() && s->array().size() <= 4) {
      for (const JsonValue& e : s->array()) {
        if (!e.is_string() || e.string_value().empty()) return bad("'stop' entries must be non-empty strings", "stop");
        stops.push_back(e.string_value());
      }
    } else {
      return bad("'stop' must be a string or an array of up to 4 strings", "stop");
    }
  }
  if (const JsonValue* m = body->Find("model"); m != nullptr && !m->is_null()) {
    if (!m->is_string()) return bad("'model' must be a string", "model");
    if (m->string_value() != model_) {
      ++requests_failed_;
      writer.SendError(404, absl::StrCat("model '", m->string_value(), "' is not served here (this server serves '",
                                         model_, "')"),
                       "invalid_request_error", "model_not_found");
      return;
    }
  }
  if (const JsonValue* st = body->Find("stream"); st != nullptr && !st->is_null() && !st->is_bool()) {
    return bad("'stream' must be a boolean", "stream");
  }
  bool speculative = true;
  if (const JsonValue* sp = body->Find("speculative"); sp != nullptr && !sp->is_null()) {
    if (!sp->is_bool()) return bad("'speculative' must be a boolean", "speculative");
    speculative = sp->bool_value();
  }
  const JsonValue* stream_v = body->Find("stream");
  const bool stream = stream_v != nullptr && stream_v->is_bool() && stream_v->bool_value();
  bool include_usage = false;
  if (const JsonValue* so = body->Find("stream_options"); so != nullptr && !so->is_null()) {
    const JsonValue* iu = so->is_object() ? so->Find("include_usage") : nullptr;
    if (!so->is_object() || (iu != nullptr && !iu->is_null() && !iu->is_bool())) {
      return bad("'stream_options' must be an object with a boolean 'include_usage'", "stream_options");
    }
    include_usage = iu != nullptr && iu->is_bool() && iu->bool_value();
  }

  std::vector<int32_t> prompt;
  if (chat) {
    const JsonValue* messages = body->Find("messages");
    if (messages == nullptr || !messages->is_array() || messages->array().empty()) {
      return bad("'messages' must be a non-empty array", "messages");
    }
    std::vector<ChatMessage> chat_messages;
    for (const JsonValue& m : messages->array()) {
      const JsonValue* role = m.Find("role");
      const JsonValue* content = m.Find("content");
      if (role == nullptr || !role->is_string() || content == nullptr || !content->is_string()) {
        return bad("each message needs a string 'role' and a string 'content'", "messages");
      }
      chat_messages.push_back({role->string_value(), content->string_value()});
    }
    absl::StatusOr<ChatTemplate> tmpl = SelectChatTemplate(tokenizer_.chat_template(), chat_template_);
    if (!tmpl.ok()) return bad(absl::StrCat("this model has no usable chat template: ", tmpl.status().message()));
    prompt = tokenizer_.Encode(RenderChat(*tmpl, chat_messages), {.add_special = true, .parse_special = true});
  } else {
    const JsonValue* p = body->Find("prompt");
    if (p == nullptr || !p->is_string()) return bad("'prompt' must be a string", "prompt");
    prompt = tokenizer_.Encode(p->string_value(), {.add_special = true});
  }
  if (prompt.empty()) return bad("the prompt encodes to no tokens", "prompt");
  if (static_cast<int64_t>(prompt.size()) + static_cast<int64_t>(max_tokens) > context_) {
    return bad(absl::StrFormat("the prompt (%d tokens) plus max_tokens %d exceeds the context of %d tokens",
                               prompt.size(), static_cast<int64_t>(max_tokens), context_),
               "max_tokens");
  }

  auto shared = std::make_shared<Shared>();
  shared->choices.resize(static_cast<size_t>(n));
  for (size_t k = 0; k < shared->choices.size(); ++k) {
    Choice& c = shared->choices[k];
    c.decoder = std::make_unique<StreamingDecoder>(tokenizer_);
    ScheduledRequest req;
    req.prompt = prompt;
    req.max_tokens = static_cast<int64_t>(max_tokens);
    req.sampling.temperature = static_cast<float>(temperature);
    req.sampling.top_p = static_cast<float>(top_p);
    req.sampling.top_k = 0;
    req.sampling.min_p = 0;
    req.sampling.seed = static_cast<uint64_t>(seed) + k;
    req.logprobs = logprobs >= 0 ? static_cast<int>(logprobs) : Sampler::kNoLogprobs;
    req.is_end_of_generation = [this](int32_t id) { return tokenizer_.IsEndOfGeneration(id); };
    req.on_token = [this, shared, k, stops, start](int32_t token, const SampledToken& sampled) {
      std::lock_guard<std::mutex> lock(shared->mu);
      Choice& c = shared->choices[k];
      const auto now = Clock::now();
      {
        std::lock_guard<std::mutex> m(metrics_mu_);
        const double dt = std::chrono::duration<double>(now - (c.first ? start : c.last_token)).count();
        std::vector<double>& hist = c.first ? ttft_seconds_ : itl_seconds_;
        for (int b = 0; b < kBucketCount; ++b) {
          if (dt <= kLatencyBuckets[b]) hist[b]++;
        }
        (c.first ? ttft_sum_ : itl_sum_) += dt;
        ++(c.first ? ttft_count_ : itl_count_);
      }
      c.first = false;
      c.last_token = now;
      c.tokens.push_back(token);
      c.sampled.push_back(sampled);
      ++completion_tokens_total_;
      if (tokenizer_.IsEndOfGeneration(token)) return true;  // no text for the end token
      const size_t sent = c.text.size() - c.pending.size();
      const std::string piece = c.decoder->Push(token);
      c.text += piece;
      c.pending += piece;
      const bool stopped = !stops.empty() && CutAtStop(c, stops, sent);
      if (stopped) c.finish_reason = "stop";
      shared->cv.notify_all();
      return !stopped;
    };
    req.speculative = speculative;
    // The other choices find the first one's prompt pages in the prefix cache.
    if (k > 0) req.prompt_shared_with = shared->choices[0].id;
    req.on_finish = [shared, k](const std::string& reason, const SpeculativeStats& speculation) {
      std::lock_guard<std::mutex> lock(shared->mu);
      Choice& c = shared->choices[k];
      c.speculation = speculation;
      if (c.finish_reason.empty()) c.finish_reason = reason == "cancelled" ? "cancelled" : FinishReason(reason);
      c.done = true;
      shared->cv.notify_all();
    };
    absl::StatusOr<int64_t> id = engine_.Submit(std::move(req));
    if (!id.ok()) {
      for (size_t j = 0; j < k; ++j) engine_.Cancel(shared->choices[j].id);
      ++requests_failed_;
      writer.SendError(absl::IsResourceExhausted(id.status()) ? 503 : 400, std::string(id.status().message()),
                       "invalid_request_error", "request_rejected");
      return;
    }
    std::lock_guard<std::mutex> lock(shared->mu);
    c.id = *id;
  }
  prompt_tokens_total_ += static_cast<int64_t>(prompt.size());
  auto cancel_all = [&] {
    for (const Choice& c : shared->choices) engine_.Cancel(c.id);
  };
  static std::atomic<int64_t> serial{0};
  const std::string id = absl::StrCat(chat ? "chatcmpl-" : "cmpl-", ++serial);
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  const char* object = chat ? (stream ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  auto envelope = [&]() {
    JsonValue o = JsonValue::MakeObject();
    o.Set("id", JsonValue::String(id));
    o.Set("object", JsonValue::String(object));
    o.Set("created", JsonValue::Int(created));
    o.Set("model", JsonValue::String(model_));
    return o;
  };

  // The usage block (under shared->mu, once every choice is done).
  auto usage_json = [&] {
    int64_t completion_tokens = 0;
    SpeculativeStats sum;  // over the choices
    for (const Choice& c : shared->choices) {
      completion_tokens += static_cast<int64_t>(c.tokens.size());
      sum.steps += c.speculation.steps;
      sum.drafted += c.speculation.drafted;
      sum.accepted += c.speculation.accepted;
    }
    JsonValue usage = JsonValue::MakeObject();
    usage.Set("prompt_tokens", JsonValue::Int(static_cast<int64_t>(prompt.size())));
    usage.Set("completion_tokens", JsonValue::Int(completion_tokens));
    usage.Set("total_tokens", JsonValue::Int(static_cast<int64_t>(prompt.size()) + completion_tokens));
    if (engine_.speculative()) {
      // The mean is accepted tokens per verification that carried a draft.
      JsonValue spec = JsonValue::MakeObject();
      spec.Set("drafted", JsonValue::Int(sum.drafted));
      spec.Set("accepted", JsonValue::Int(sum.accepted));
      spec.Set("verifications", JsonValue::Int(sum.steps));
      spec.Set("mean_accepted_length", JsonValue::Number(sum.mean_accepted_length()));
      usage.Set("speculative", std::move(spec));
    }
    return usage;
  };

  std::unique_lock<std::mutex> lock(shared->mu);
  auto all_done = [&] {
    for (const Choice& c : shared->choices) {
      if (!c.done) return false;
    }
    return true;
  };
  if (!stream) {
    while (!all_done()) {
      shared->cv.wait_for(lock, std::chrono::milliseconds(100));
      if (!all_done() && writer.CheckClientGone()) {
        lock.unlock();  // the engine's callbacks take this lock under the engine's
        cancel_all();
        return;
      }
    }
    JsonValue out = envelope();
    JsonValue choices = JsonValue::MakeArray();
    for (size_t k = 0; k < shared->choices.size(); ++k) {
      Choice& c = shared->choices[k];
      if (c.finish_reason != "stop") c.text += c.decoder->Finish();
      JsonValue ch = JsonValue::MakeObject();
      ch.Set("index", JsonValue::Int(static_cast<int64_t>(k)));
      if (chat) {
        JsonValue msg = JsonValue::MakeObject();
        msg.Set("role", JsonValue::String("assistant"));
        msg.Set("content", JsonValue::String(c.text));
        ch.Set("message", std::move(msg));
      } else {
        ch.Set("text", JsonValue::String(c.text));
      }
      ch.Set("logprobs", logprobs >= 0 ? LogprobsJson(tokenizer_, c, chat) : JsonValue::Null());
      ch.Set("finish_reason", JsonValue::String(c.finish_reason));
      choices.array().push_back(std::move(ch));
    }
    out.Set("choices", std::move(choices));
    JsonValue usage = usage_json();
    out.Set("usage", std::move(usage));
    lock.unlock();
    writer.Send(200, "application/json", ToJson(out));
    return;
  }

  lock.unlock();
  if (!writer.StartStream(200, "text/event-stream")) {
    cancel_all();
    return;
  }
  lock.lock();
  std::vector<bool> announced(shared->choices.size(), false);
  std::vector<bool> closed(shared->choices.size(), false);
  while (true) {
    std::vector<std::string> events;
    bool finished = true;
    for (size_t k = 0; k < shared->choices.size(); ++k) {
      Choice& c = shared->choices[k];
      if (closed[k]) continue;
      if (c.done && c.finish_reason != "stop") {
        const std::string rest = c.decoder->Finish();
        c.text += rest;
        c.pending += rest;
      }
      const bool closing = c.done;
      if (c.pending.empty() && !closing && announced[k]) {
        finished = false;
        continue;
      }
      JsonValue ev = envelope();
      JsonValue ch = JsonValue::MakeObject();
      ch.Set("index", JsonValue::Int(static_cast<int64_t>(k)));
      if (chat) {
        JsonValue delta = JsonValue::MakeObject();
        if (!announced[k]) delta.Set("role", JsonValue::String("assistant"));
        delta.Set("content", JsonValue::String(c.pending));
        ch.Set("delta", std::move(delta));
      } else {
        ch.Set("text", JsonValue::String(c.pending));
      }
      ch.Set("finish_reason", closing ? JsonValue::String(c.finish_reason) : JsonValue::Null());
      ev.Set("choices", JsonValue::MakeArray({std::move(ch)}));
      events.push_back(absl::StrCat("data: ", ToJson(ev), "\n\n"));
      c.pending.clear();
      announced[k] = true;
      if (closing) closed[k] = true;
      else finished = false;
    }
    if (!events.empty()) {
      lock.unlock();
      for (const std::string& e : events) {
        if (!writer.Write(e)) {
          cancel_all();  // the client went away: free its pages now
          return;
        }
      }
      lock.lock();
    }
    if (finished) break;
    shared->cv.wait_for(lock, std::chrono::milliseconds(100));
    if (writer.CheckClientGone()) {
      lock.unlock();
      cancel_all();
      return;
    }
  }
  if (include_usage) {
    // OpenAI's stream_options.include_usage: one last chunk with no choices.
    JsonValue ev = envelope();
    ev.Set("choices", JsonValue::MakeArray());
    ev.Set("usage", usage_json());
    const std::string event = absl::StrCat("data: ", ToJson(ev), "\n\n");
    lock.unlock();
    if (!writer.Write(event)) return;
  } else {
    lock.unlock();
  }
  writer.Write("data: [DONE]\n\n");
  writer.End();
}

void OpenAiApi::Metrics(ResponseWriter& writer) {
  const SchedulerStats s = engine_.stats();
  const KvPageStats p = engine_.page_stats();
  std::string out;
  auto gauge = [&](const char* name, const char* help, double v, const char* type = "gauge") {
    absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n", name, " ",
                    absl::StrFormat("%.17g", v), "\n");
  };
  gauge("kiln_requests_running", "Sequences being generated.", s.running);
  gauge("kiln_requests_waiting", "Sequences queued for admission.", s.waiting);
  gauge("kiln_requests_total", "HTTP generation requests received.", requests_total_.load(), "counter");
  gauge("kiln_requests_failed_total", "Requests rejected with an error.", requests_failed_.load(), "counter");
  gauge("kiln_kv_pages_used", "KV pages held by sequences.", p.used_pages);
  gauge("kiln_kv_pages_cached", "Unreferenced KV pages kept for prefix reuse.", p.cached_pages);
  gauge("kiln_kv_pages_total", "KV pages in the pool.", p.total_pages);
  gauge("kiln_kv_waste_ratio", "Allocated but unused KV token slots / allocated.", p.kv_waste);
  gauge("kiln_prefix_hit_rate", "Prompt tokens found in the prefix cache / looked up.", p.prefix_hit_rate);
  gauge("kiln_prompt_tokens_total", "Prompt tokens received.", prompt_tokens_total_.load(), "counter");
  gauge("kiln_prefill_tokens_total",
        "Prompt tokens the steps computed (the prefix cache supplies the rest, the shared prompt of an n > 1 "
        "request included; recomputation after preemption counts).",
        s.prefill_tokens, "counter");
  gauge("kiln_generation_tokens_total", "Tokens generated.", completion_tokens_total_.load(), "counter");
  gauge("kiln_preemptions_total", "Sequences preempted for lack of KV pages.", s.preemptions, "counter");
  gauge("kiln_steps_total", "Scheduler steps run.", s.steps, "counter");
  gauge("kiln_step_seconds_total", "Wall time of the scheduler steps.", s.step_seconds, "counter");
  gauge("kiln_step_executor_seconds_total", "Of it, time in the backend's step (the rest is host work).",
        s.executor_seconds, "counter");
  gauge("kiln_spec_drafted_tokens_total", "Draft tokens proposed for verification.", s.spec_drafted, "counter");
  gauge("kiln_spec_accepted_tokens_total", "Draft tokens the target accepted.", s.spec_accepted, "counter");
  gauge("kiln_spec_verifications_total", "Sequence verifications that carried a draft.", s.spec_verifications,
        "counter");
  gauge("kiln_spec_acceptance_rate", "Accepted / drafted tokens (0 before any draft).",
        s.spec_drafted > 0 ? static_cast<double>(s.spec_accepted) / s.spec_drafted : 0.0);
  gauge("kiln_spec_mean_accepted_length", "Accepted tokens per verification with a draft (0 before any).",
        s.spec_verifications > 0 ? static_cast<double>(s.spec_accepted) / s.spec_verifications : 0.0);
  std::lock_guard<std::mutex> lock(metrics_mu_);
  auto histogram = [&](const char* name, const char* help, const std::vector<double>& counts, double sum,
                       int64_t count) {
    absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " histogram\n");
    for (int b = 0; b < kBucketCount; ++b) {
      absl::StrAppend(&out, name, "_bucket{le=\"", absl::StrFormat("%g", kLatencyBuckets[b]), "\"} ",
                      static_cast<int64_t>(counts[b]), "\n");
    }
    absl::StrAppend(&out, name, "_bucket{le=\"+Inf\"} ", count, "\n", name, "_sum ", absl::StrFormat("%.9g", sum),
                    "\n", name, "_count ", count, "\n");
  };
  histogram("kiln_time_to_first_token_seconds", "Time from request to first token.", ttft_seconds_, ttft_sum_,
            ttft_count_);
  histogram("kiln_inter_token_latency_seconds", "Time between consecutive tokens of a sequence.", itl_seconds_,
            itl_sum_, itl_count_);
  writer.Send(200, "text/plain; version=0.0.4", out);
}

}  // namespace kiln
