#include "runtime/serving/http_request.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kiln {
namespace {

// Everything one parser yields for `input` fed in pieces cut at `cuts`:
// the complete requests, then the final state.
struct Outcome {
  std::vector<HttpRequest> requests;
  HttpParseResult::Kind last = HttpParseResult::kNeedMore;
  int status = 0;
};

Outcome Feed(const std::string& input, const std::vector<size_t>& cuts,
             HttpParseLimits limits = {}) {
  HttpRequestParser parser(limits);
  Outcome out;
  size_t start = 0;
  auto drain = [&](HttpParseResult r) {
    while (true) {
      out.last = r.kind;
      if (r.kind == HttpParseResult::kError) {
        out.status = r.status;
        return;
      }
      if (r.kind == HttpParseResult::kNeedMore) return;
      out.requests.push_back(std::move(r.request));
      r = parser.Parse("");
    }
  };
  std::vector<size_t> all = cuts;
  all.push_back(input.size());
  for (size_t cut : all) {
    drain(parser.Parse(std::string_view(input).substr(start, cut - start)));
    start = cut;
    if (out.last == HttpParseResult::kError) break;
  }
  return out;
}

void ExpectSameRequest(const HttpRequest& a, const HttpRequest& b) {
  EXPECT_EQ(a.method, b.method);
  EXPECT_EQ(a.target, b.target);
  EXPECT_EQ(a.path, b.path);
  EXPECT_EQ(a.query, b.query);
  EXPECT_EQ(a.version_minor, b.version_minor);
  EXPECT_EQ(a.headers, b.headers);
  EXPECT_EQ(a.body, b.body);
  EXPECT_EQ(a.keep_alive, b.keep_alive);
}

// The whole input at once, split at every byte boundary, and byte by byte
// all give the same outcome.
Outcome FeedEverySplit(const std::string& input, HttpParseLimits limits = {}) {
  Outcome whole = Feed(input, {}, limits);
  for (size_t cut = 0; cut <= input.size(); ++cut) {
    Outcome split = Feed(input, {cut}, limits);
    EXPECT_EQ(split.last, whole.last) << "cut at " << cut;
    EXPECT_EQ(split.status, whole.status) << "cut at " << cut;
    EXPECT_EQ(split.requests.size(), whole.requests.size()) << "cut at " << cut;
    for (size_t i = 0; i < split.requests.size() && i < whole.requests.size(); ++i)
      ExpectSameRequest(split.requests[i], whole.requests[i]);
  }
  std::vector<size_t> bytes;
  for (size_t i = 1; i < input.size(); ++i) bytes.push_back(i);
  Outcome single = Feed(input, bytes, limits);
  EXPECT_EQ(single.last, whole.last);
  EXPECT_EQ(single.status, whole.status);
  EXPECT_EQ(single.requests.size(), whole.requests.size());
  return whole;
}

TEST(HttpRequestParser, GetWithHeadersAtEverySplit) {
  const std::string input =
      "GET /v1/models?limit=2 HTTP/1.1\r\n"
      "Host: localhost:8080\r\n"
      "User-Agent:  test/1.0 \r\n"
      "X-Empty:\r\n"
      "ACCEPT: */*\r\n"
      "\r\n";
  Outcome out = FeedEverySplit(input);
  ASSERT_EQ(out.last, HttpParseResult::kNeedMore);  // drained: waiting for the next
  ASSERT_EQ(out.requests.size(), 1u);
  const HttpRequest& r = out.requests[0];
  EXPECT_EQ(r.method, "GET");
  EXPECT_EQ(r.target, "/v1/models?limit=2");
  EXPECT_EQ(r.path, "/v1/models");
  EXPECT_EQ(r.query, "limit=2");
  EXPECT_EQ(r.version_minor, 1);
  EXPECT_TRUE(r.keep_alive);
  EXPECT_EQ(r.body, "");
  EXPECT_EQ(r.Header("user-agent").value_or("?"), "test/1.0");
  EXPECT_EQ(r.Header("User-Agent").value_or("?"), "test/1.0");
  EXPECT_EQ(r.Header("accept").value_or("?"), "*/*");
  EXPECT_EQ(r.Header("x-empty").value_or("?"), "");
  EXPECT_FALSE(r.Header("content-length").has_value());
  EXPECT_EQ(r.headers[3].first, "accept");  // names stored lower-cased
}

TEST(HttpRequestParser, PostBodyAndPipeliningAtEverySplit) {
  const std::string input =
      "\r\n"  // a stray empty line before a request is ignored
      "POST /v1/completions HTTP/1.1\r\n"
      "Host: x\r\n"
      "Content-Type: application/json\r\n"
      "content-length: 17\r\n"
      "\r\n"
      "{\"prompt\": \"hi\"}\n"
      "GET /health HTTP/1.0\r\n"
      "\r\n"
      "DELETE /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
  Outcome out = FeedEverySplit(input);
  ASSERT_EQ(out.requests.size(), 3u);
  EXPECT_EQ(out.requests[0].method, "POST");
  EXPECT_EQ(out.requests[0].body, "{\"prompt\": \"hi\"}\n");
  EXPECT_TRUE(out.requests[0].keep_alive);
  EXPECT_EQ(out.requests[1].path, "/health");
  EXPECT_EQ(out.requests[1].version_minor, 0);
  EXPECT_FALSE(out.requests[1].keep_alive);  // HTTP/1.0 without keep-alive
  EXPECT_EQ(out.requests[2].method, "DELETE");
  EXPECT_FALSE(out.requests[2].keep_alive);
}

TEST(HttpRequestParser, KeepAliveRules) {
  auto first = [](const std::string& s) { return Feed(s, {}).requests.at(0); };
  EXPECT_TRUE(first("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").keep_alive);
  EXPECT_FALSE(first("GET / HTTP/1.1\r\nHost: a\r\nConnection: foo, CLOSE\r\n\r\n").keep_alive);
  EXPECT_TRUE(first("GET / HTTP/1.2\r\nHost: a\r\n\r\n").keep_alive);  // 1.x read as 1.1
}

TEST(HttpRequestParser, ExpectContinueAskedOnce) {
  HttpRequestParser parser;
  HttpParseResult r =
      parser.Parse("POST /x HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n");
  EXPECT_EQ(r.kind, HttpParseResult::kNeedMore);
  EXPECT_TRUE(r.send_continue);
  r = parser.Parse("ab");
  EXPECT_EQ(r.kind, HttpParseResult::kNeedMore);
  EXPECT_FALSE(r.send_continue);
  r = parser.Parse("cd");
  ASSERT_EQ(r.kind, HttpParseResult::kComplete);
  EXPECT_EQ(r.request.body, "abcd");
  EXPECT_TRUE(r.request.expect_continue);
}

TEST(HttpRequestParser, EmptyInputNeedsMore) {
  HttpRequestParser parser;
  EXPECT_EQ(parser.Parse("").kind, HttpParseResult::kNeedMore);
  EXPECT_EQ(parser.Parse("GET / HTTP/1.1\r\nHost: a\r\n").kind, HttpParseResult::kNeedMore);
}

struct ErrorCase {
  const char* name;
  std::string input;
  int status;
};

TEST(HttpRequestParser, ErrorsWithTheirStatusAtEverySplit) {
  const HttpParseLimits limits{.max_header_bytes = 256, .max_body_bytes = 100};
  using namespace std::string_literals;
  std::string empty_lines;
  for (int i = 0; i < 200; ++i) empty_lines += "\r\n";
  const std::string big_header = "X-Big: " + std::string(300, 'a') + "\r\n";
  const std::vector<ErrorCase> cases = {
      {"bad method char", "GE(T / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
      {"empty method", " / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
      {"no version", "GET /\r\nHost: a\r\n\r\n", 400},
      {"two spaces", "GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
      {"lowercase version", "GET / http/1.1\r\nHost: a\r\n\r\n", 400},
      {"version garbage", "GET / HTTP/1.1x\r\nHost: a\r\n\r\n", 400},
      {"absolute-form target", "GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n", 400},
      {"control char in target", "GET /a\x01 HTTP/1.1\r\nHost: a\r\n\r\n", 400},
      {"HTTP/2.0", "GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505},
      {"HTTP/0.9", "GET / HTTP/0.9\r\n\r\n", 505},
      {"bare LF in request line", "GET / HTTP/1.1\nHost: a\r\n\r\n", 400},
      {"bare LF in headers", "GET / HTTP/1.1\r\nHost: a\n\r\n", 400},
      {"bare CR", "GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n", 400},
      {"space before colon", "GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400},
      {"no colon", "GET / HTTP/1.1\r\nHost a\r\n\r\n", 400},
      {"empty header name", "GET / HTTP/1.1\r\n: a\r\nHost: a\r\n\r\n", 400},
      {"obs-fold", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n", 400},
      {"control char in value", "GET / HTTP/1.1\r\nHost: a\r\nX: a\0b\r\n\r\n"s, 400},
      {"missing Host", "GET / HTTP/1.1\r\nX: y\r\n\r\n", 400},
      {"two Hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
      {"Content-Length not a number", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1x\r\n\r\n", 400},
      {"Content-Length negative", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400},
      {"Content-Length list", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 3\r\n\r\n", 400},
      {"Content-Length conflicting",
       "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400},
      {"chunked body", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n", 501},
      {"chunked and length",
       "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc", 400},
      {"body too large", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 101\r\n\r\n", 413},
      {"body length overflows",
       "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999999\r\n\r\n", 413},
      {"headers too large", "GET / HTTP/1.1\r\nHost: a\r\n" + big_header + "\r\n", 431},
      {"request line too large", "GET /" + std::string(300, 'a') + " HTTP/1.1\r\n\r\n", 431},
      {"too many empty lines", empty_lines, 431},
      // A malformed line end the parser only reaches past the limit: 431
      // whether the bytes come at once or one by one (found by the fuzzer).
      {"bare LF past the limit", "GET / HTTP/1.1\r\nX: " + std::string(300, 'a') + "\nHost: a\r\n\r\n", 431},
      {"bare CR past the limit", "GET / HTTP/1.1\r\nX: " + std::string(300, 'a') + "\rb\r\n\r\n", 431},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    Outcome out = FeedEverySplit(c.input, limits);
    EXPECT_EQ(out.last, HttpParseResult::kError);
    EXPECT_EQ(out.status, c.status);
    EXPECT_TRUE(out.requests.empty());
  }
}

TEST(HttpRequestParser, LimitsAreConfigurableAndExact) {
  const std::string head = "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n";
  const std::string input = head + "0123456789";
  // Exactly at the limits: accepted.
  Outcome ok = Feed(input, {}, {.max_header_bytes = head.size(), .max_body_bytes = 10});
  ASSERT_EQ(ok.requests.size(), 1u);
  EXPECT_EQ(ok.requests[0].body, "0123456789");
  // One byte under either: refused.
  EXPECT_EQ(Feed(input, {}, {.max_header_bytes = head.size() - 1, .max_body_bytes = 10}).status, 431);
  EXPECT_EQ(Feed(input, {}, {.max_header_bytes = head.size(), .max_body_bytes = 9}).status, 413);
}

TEST(HttpRequestParser, ErrorIsSticky) {
  HttpRequestParser parser;
  HttpParseResult r = parser.Parse("BAD\r\n");
  EXPECT_EQ(r.kind, HttpParseResult::kError);
  EXPECT_EQ(r.status, 400);
  EXPECT_FALSE(r.message.empty());
  EXPECT_TRUE(parser.failed());
  r = parser.Parse("GET / HTTP/1.1\r\nHost: a\r\n\r\n");
  EXPECT_EQ(r.kind, HttpParseResult::kError);
  EXPECT_EQ(r.status, 400);
}

TEST(HttpRequestParser, ReasonPhrases) {
  EXPECT_EQ(HttpReasonPhrase(200), "OK");
  EXPECT_EQ(HttpReasonPhrase(431), "Request Header Fields Too Large");
  EXPECT_EQ(HttpReasonPhrase(799), "Unknown");
}

}  // namespace
}  // namespace kiln
