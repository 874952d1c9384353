#!/usr/bin/env python3
"""Load generator for `kiln serve` (or any OpenAI-compatible /v1/completions server).

Standard library only. Sends --requests completions either closed loop (--concurrency C
workers, each sending its next request when the previous one ends) or open loop (--rate R
requests/s with Poisson arrivals; --concurrency then caps the requests in flight).

  python3 scripts/bench_serve.py --url http://127.0.0.1:8080 --requests 200 \
      --concurrency 32 --mix sharegpt --max-tokens 64 --disconnect-fraction 0.1 --check

Request mix (all drawn from --seed, so a run is reproducible):
  fixed     every prompt has --prompt-len words, every request asks for --max-tokens.
  sharegpt  prompt words ~ log-normal around --prompt-len (sigma 1.0, heavy tail), output
            tokens ~ log-normal around --max-tokens/3 (sigma 0.8), clipped to
            [1, --max-tokens]; prompt + output are clipped to the server's context
            (GET /v1/models data[0].context_length), using a tokens-per-word ratio measured
            with one probe request.

Streaming (default; --no-stream to turn off): TTFT is the time from sending the request to
the first non-empty text delta, ITL the time between consecutive non-empty deltas. Output
tokens come from usage.completion_tokens: streamed requests ask for it with
stream_options.include_usage (--no-stream-usage: don't; for servers without it), and where a
stream carries no usage its non-empty deltas are counted instead (fewer than the tokens
when some tokens stream as empty deltas, e.g. the halves of a UTF-8 character); the
server's own kiln_generation_tokens_total delta is reported alongside.

A request fails when: the connection errors or times out, the status is not 200, a body or
SSE event is not valid JSON, text is not valid UTF-8 ("garbled"), the stream ends without
`data: [DONE]` (unless we disconnected on purpose), or finish_reason is missing / not
"stop"/"length". --disconnect-fraction F makes that share of streamed requests close the
socket after the first 1-3 SSE events; they count as "disconnected", not failed (if the
stream ended before that point, the request counts as completed).

--prompt-file FILE takes the prompts from FILE (one per line, used in turn) instead of
random words: speculative decoding needs text the model would write to accept drafts.
When the server speculates (kiln serve --draft / --lookup), the deltas of its kiln_spec_*
counters give the run's acceptance rate and mean accepted length.

--check: exit 1 if any request failed, or if after the run (polling /metrics up to 5 s)
kiln_kv_pages_used or kiln_requests_running is not 0 (leaked pages/sequences).
"""

import argparse
import concurrent.futures
import http.client
import json
import math
import random
import statistics
import sys
import threading
import time
import urllib.parse

# Simple words (TinyStories-like vocabulary, so small story models tokenize them sanely).
WORDS = (
    "once upon a time there was little girl named lily she liked to play with her ball in the park "
    "one day saw big red dog it ran fast and happy boy tom had toy car they were friends went home "
    "mom said you can have cake sun is warm bird sang song tree tall green flower pretty blue sky "
    "cat sat on mat ate fish jumped over box found shiny rock under bed wanted share smiled laughed "
    "because after that every day all together very good kind sad help asked why what where when "
    "look at this said yes no thank my friend let us go see sea water boat sail far away night moon"
).split()

FINISH_OK = ("stop", "length")


def pct(values, p):
    """Nearest-rank percentile (p in [0, 100]) of a list; None when empty."""
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(math.ceil(p / 100.0 * len(s))) - 1))
    return s[k]


class Server:
    def __init__(self, url, timeout):
        u = urllib.parse.urlsplit(url if "://" in url else "http://" + url)
        if u.scheme != "http":
            raise SystemExit("bench_serve: only http:// URLs are supported")
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or 80
        self.base = u.path.rstrip("/")
        self.timeout = timeout

    def conn(self):
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    def get(self, path):
        c = self.conn()
        try:
            c.request("GET", self.base + path)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def post_json(self, path, obj):
        c = self.conn()
        try:
            c.request("POST", self.base + path, body=json.dumps(obj),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def metrics(self):
        """Unlabelled Prometheus samples as {name: float}; {} when unavailable."""
        try:
            status, body = self.get("/metrics")
        except OSError:
            return {}
        if status != 200:
            return {}
        out = {}
        for line in body.decode("utf-8", "replace").splitlines():
            if not line or line.startswith("#") or "{" in line:
                continue
            parts = line.split()
            if len(parts) >= 2:
                try:
                    out[parts[0]] = float(parts[1])
                except ValueError:
                    pass
        return out


class Result:
    __slots__ = ("ok", "disconnected", "error", "status", "ttft", "itls", "tokens", "finish",
                 "latency", "text_len", "usage_tokens")

    def __init__(self):
        self.ok = False
        self.disconnected = False
        self.error = None
        self.status = None
        self.ttft = None
        self.itls = []
        self.tokens = 0
        self.finish = None
        self.latency = None
        self.text_len = 0
        self.usage_tokens = None  # usage.completion_tokens of the stream's last chunk, if sent


def check_text(text, res):
    """Garbled output: not encodable as UTF-8 (lone surrogates from bad \\u escapes)."""
    if not isinstance(text, str):
        res.error = "text is not a string"
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        res.error = "garbled text (not valid UTF-8)"
        return False
    return True


def run_stream(server, payload, disconnect_after, res):
    c = server.conn()
    t0 = time.perf_counter()
    try:
        c.request("POST", server.base + "/v1/completions", body=json.dumps(payload),
                  headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
        r = c.getresponse()
        res.status = r.status
        if r.status != 200:
            body = r.read()
            res.error = "HTTP %d: %s" % (r.status, body[:200].decode("utf-8", "replace"))
            return
        events = 0
        last = None
        done = False
        while True:
            raw = r.readline()
            if not raw:
                break  # EOF
            try:
                line = raw.decode("utf-8")  # strict: invalid bytes are garbled output
            except UnicodeDecodeError:
                res.error = "garbled stream (invalid UTF-8 bytes)"
                return
            line = line.rstrip("\r\n")
            if not line or line.startswith(":"):
                continue
            if not line.startswith("data:"):
                continue  # other SSE fields (event:, id:) are allowed and ignored
            data = line[5:].lstrip(" ")
            if data == "[DONE]":
                done = True
                break
            try:
                ev = json.loads(data)
                if ev.get("choices") == [] and isinstance(ev.get("usage"), dict):
                    # stream_options.include_usage: the last chunk, after finish_reason.
                    res.usage_tokens = int(ev["usage"].get("completion_tokens", 0) or 0)
                    continue
                if res.finish is not None:
                    res.error = "event after finish_reason"
                    return
                choice = ev["choices"][0]
                text = choice.get("text", "")
            except (ValueError, KeyError, IndexError, TypeError, AttributeError):
                res.error = "malformed SSE event: %r" % data[:120]
                return
            if text is None:
                text = ""
            if not check_text(text, res):
                return
            events += 1
            if text:
                now = time.perf_counter()
                if last is None:
                    res.ttft = now - t0
                else:
                    res.itls.append(now - last)
                last = now
                res.tokens += 1
                res.text_len += len(text)
            fr = choice.get("finish_reason")
            if fr is not None:
                res.finish = fr
            if disconnect_after and events >= disconnect_after and res.finish is None:
                # Mid-stream disconnect: drop the socket without reading the rest.
                res.disconnected = True
                try:
                    r.close()
                finally:
                    c.close()
                res.latency = time.perf_counter() - t0
                return
        res.latency = time.perf_counter() - t0
        if not done:
            res.error = "stream ended without [DONE]"
        elif res.finish is None:
            res.error = "no finish_reason in the stream"
        elif res.finish not in FINISH_OK:
            res.error = "finish_reason %r" % res.finish
        else:
            res.ok = True
    except (OSError, http.client.HTTPException) as e:
        res.error = "%s: %s" % (type(e).__name__, e)
    finally:
        c.close()


def run_plain(server, payload, res):
    c = server.conn()
    t0 = time.perf_counter()
    try:
        c.request("POST", server.base + "/v1/completions", body=json.dumps(payload),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        res.status = r.status
        body = r.read()
        res.latency = time.perf_counter() - t0
        if r.status != 200:
            res.error = "HTTP %d: %s" % (r.status, body[:200].decode("utf-8", "replace"))
            return
        try:
            obj = json.loads(body.decode("utf-8"))
        except UnicodeDecodeError:
            res.error = "garbled body (invalid UTF-8 bytes)"
            return
        except ValueError:
            res.error = "malformed JSON body"
            return
        try:
            choice = obj["choices"][0]
            text = choice["text"]
            res.finish = choice.get("finish_reason")
        except (KeyError, IndexError, TypeError):
            res.error = "malformed response (no choices[0].text)"
            return
        if not check_text(text, res):
            return
        res.text_len = len(text)
        usage = obj.get("usage") or {}
        res.tokens = int(usage.get("completion_tokens", 0) or 0)
        if res.finish is None:
            res.error = "no finish_reason"
        elif res.finish not in FINISH_OK:
            res.error = "finish_reason %r" % res.finish
        else:
            res.ok = True
    except (OSError, http.client.HTTPException) as e:
        res.error = "%s: %s" % (type(e).__name__, e)
    finally:
        c.close()


def calibrate(server, rng, n_words=64):
    """Prompt tokens per word for our vocabulary, from one max_tokens=1 request."""
    prompt = " ".join(rng.choice(WORDS) for _ in range(n_words))
    try:
        status, body = server.post_json("/v1/completions",
                                        {"prompt": prompt, "max_tokens": 1, "temperature": 0})
        if status == 200:
            pt = json.loads(body)["usage"]["prompt_tokens"]
            return max(0.5, (pt - 1) / float(n_words)), 2  # 2: room for BOS and the like
    except (OSError, ValueError, KeyError, TypeError, http.client.HTTPException):
        pass
    return 4.0, 2  # no usage: assume the worst


def build_requests(args, context, tpw, specials):
    rng = random.Random(args.seed)
    margin = 1.3  # tokens/word varies from prompt to prompt
    reqs = []
    clipped = 0
    for i in range(args.requests):
        if args.mix == "fixed":
            words = args.prompt_len
            out = args.max_tokens
        else:
            words = int(round(rng.lognormvariate(math.log(max(1, args.prompt_len)), 1.0)))
            words = max(4, min(words, 8 * args.prompt_len))
            out = int(round(rng.lognormvariate(math.log(max(1.0, args.max_tokens / 3.0)), 0.8)))
            out = max(1, min(out, args.max_tokens))
        if context:
            out = min(out, max(1, context - 16))
            max_words = int((context - out - specials - 8) / (tpw * margin))
            if words > max_words:
                words = max(1, max_words)
                clipped += 1
        if args.prompt_lines:
            prompt = args.prompt_lines[i % len(args.prompt_lines)]
        else:
            prompt = " ".join(rng.choice(WORDS) for _ in range(words))
        disconnect = 0
        if args.stream and args.disconnect_fraction > 0 and rng.random() < args.disconnect_fraction:
            disconnect = rng.randint(1, 3)
        payload = {"prompt": prompt, "max_tokens": out, "temperature": args.temperature,
                   "seed": rng.randrange(1 << 31), "stream": bool(args.stream)}
        if args.stream and args.stream_usage:
            payload["stream_options"] = {"include_usage": True}
        reqs.append((payload, disconnect))
    return reqs, clipped


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080", help="server base URL")
    ap.add_argument("--requests", type=int, default=100, help="requests to send (default 100)")
    ap.add_argument("--concurrency", type=int, default=None,
                    help="closed loop: requests in flight (default 8); with --rate: cap on in-flight")
    ap.add_argument("--rate", type=float, default=None,
                    help="open loop: mean arrivals per second (Poisson)")
    ap.add_argument("--mix", choices=("fixed", "sharegpt"), default="fixed")
    ap.add_argument("--prompt-len", type=int, default=32,
                    help="prompt words (fixed) or median prompt words (sharegpt); default 32")
    ap.add_argument("--max-tokens", type=int, default=64,
                    help="max_tokens (fixed) or upper clip of output lengths (sharegpt); default 64")
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=0, help="seed for the request mix (default 0)")
    ap.add_argument("--stream", action=argparse.BooleanOptionalAction, default=True,
                    help="stream with SSE (default on) to measure TTFT and ITL")
    ap.add_argument("--stream-usage", action=argparse.BooleanOptionalAction, default=True,
                    help="ask streams for usage (stream_options.include_usage) to count output "
                         "tokens exactly (default on)")
    ap.add_argument("--disconnect-fraction", type=float, default=0.0,
                    help="share of streamed requests that drop the socket mid-stream")
    ap.add_argument("--prompt-file", help="prompts, one per line, used in turn (instead of random words)")
    ap.add_argument("--timeout", type=float, default=120.0, help="per-request socket timeout (s)")
    ap.add_argument("--metrics-interval", type=float, default=0.5,
                    help="seconds between /metrics samples during the run (0: off)")
    ap.add_argument("--json", action="store_true", help="print one JSON object with the results")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 on any failed request or leaked KV pages / running sequences")
    args = ap.parse_args()
    if args.requests < 1 or args.prompt_len < 1 or args.max_tokens < 1:
        ap.error("--requests, --prompt-len and --max-tokens must be positive")
    if not 0.0 <= args.disconnect_fraction <= 1.0:
        ap.error("--disconnect-fraction must be in [0, 1]")
    if args.rate is not None and args.rate <= 0:
        ap.error("--rate must be positive")
    args.prompt_lines = []
    if args.prompt_file:
        try:
            with open(args.prompt_file, encoding="utf-8") as f:
                args.prompt_lines = [line.rstrip("\n") for line in f if line.strip()]
        except OSError as e:
            ap.error("--prompt-file: %s" % e)
        if not args.prompt_lines:
            ap.error("--prompt-file %s has no prompts" % args.prompt_file)
    concurrency = args.concurrency if args.concurrency is not None else (256 if args.rate else 8)
    if concurrency < 1:
        ap.error("--concurrency must be positive")

    server = Server(args.url, args.timeout)
    context = None
    model = None
    try:
        status, body = server.get("/v1/models")
        if status == 200:
            m = json.loads(body)["data"][0]
            model = m.get("id")
            context = int(m.get("context_length") or 0) or None
    except (OSError, ValueError, KeyError, IndexError, TypeError, http.client.HTTPException) as e:
        print("bench_serve: cannot reach %s/v1/models: %s" % (args.url, e), file=sys.stderr)
        return 2
    tpw, specials = calibrate(server, random.Random(args.seed ^ 0x5EED))
    reqs, clipped = build_requests(args, context, tpw, specials)

    before = server.metrics()
    results = [None] * len(reqs)

    def one(i):
        payload, disconnect = reqs[i]
        res = Result()
        if args.stream:
            run_stream(server, payload, disconnect, res)
        else:
            run_plain(server, payload, res)
        results[i] = res

    # Sample /metrics during the run: the end state is idle, so peaks and KV waste under load
    # only show here.
    samples = []
    stop_sampling = threading.Event()

    def sampler():
        while not stop_sampling.wait(args.metrics_interval):
            m = server.metrics()
            if m:
                samples.append(m)

    sampler_thread = None
    if args.metrics_interval > 0:
        sampler_thread = threading.Thread(target=sampler, daemon=True)
        sampler_thread.start()

    t_start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        if args.rate is None:
            futs = [pool.submit(one, i) for i in range(len(reqs))]
        else:
            arr = random.Random(args.seed + 1)
            futs = []
            next_t = t_start
            for i in range(len(reqs)):
                next_t += arr.expovariate(args.rate)
                delay = next_t - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                futs.append(pool.submit(one, i))
        for f in futs:
            f.result()
    wall = time.perf_counter() - t_start
    stop_sampling.set()
    if sampler_thread is not None:
        sampler_thread.join()

    after = server.metrics()
    leak = None
    if args.check:
        deadline = time.monotonic() + 5.0
        while True:
            used = after.get("kiln_kv_pages_used")
            running = after.get("kiln_requests_running")
            if used == 0 and running == 0:
                break
            if time.monotonic() >= deadline:
                leak = "after the run: kiln_kv_pages_used=%s kiln_requests_running=%s (want 0, 0)" % (
                    used, running)
                break
            time.sleep(0.1)
            after = server.metrics()

    done = [r for r in results if r.ok]
    disc = [r for r in results if r.disconnected]
    failed = [r for r in results if not r.ok and not r.disconnected]
    errors = {}
    for r in failed:
        errors[r.error] = errors.get(r.error, 0) + 1
    # Completed streams that carried usage count it; the others (disconnected ones, servers
    # without include_usage) count their non-empty deltas.
    counted = [r for r in results if r.ok or r.disconnected]
    out_tokens = sum(r.usage_tokens if r.usage_tokens is not None else r.tokens for r in counted)
    with_usage = sum(1 for r in counted if r.usage_tokens is not None)
    if not args.stream:
        tokens_source = "usage.completion_tokens"
    elif with_usage == len(counted):
        tokens_source = "usage (stream_options.include_usage)"
    elif with_usage == 0:
        tokens_source = "counted deltas"
    else:
        tokens_source = "usage where the stream sent it (%d of %d), else counted deltas" % (with_usage, len(counted))
    ttfts = [r.ttft * 1e3 for r in results if r.ttft is not None]
    itls = [x * 1e3 for r in results for x in r.itls]
    lat = [r.latency * 1e3 for r in done if r.latency is not None]
    finishes = {}
    for r in done:
        finishes[r.finish] = finishes.get(r.finish, 0) + 1

    def delta(name):
        if name in before and name in after:
            return after[name] - before[name]
        return None

    server_tokens = delta("kiln_generation_tokens_total")

    def summary(xs):
        if not xs:
            return None
        return {"p50": pct(xs, 50), "p90": pct(xs, 90), "p99": pct(xs, 99), "mean": statistics.fmean(xs)}

    report = {
        "url": args.url, "model": model, "context_length": context,
        "mode": ("open loop %.3g req/s (cap %d in flight)" % (args.rate, concurrency)) if args.rate
                else ("closed loop, concurrency %d" % concurrency),
        "mix": args.mix, "stream": args.stream, "seed": args.seed,
        "prompt_tokens_per_word": round(tpw, 3), "prompts_clipped_to_context": clipped,
        "requests": len(reqs), "completed": len(done), "failed": len(failed),
        "disconnected": len(disc), "errors": errors, "finish_reasons": finishes,
        "wall_s": wall,
        "output_tokens": out_tokens,
        "output_tokens_source": tokens_source,
        "throughput_tok_s": out_tokens / wall if wall > 0 else 0.0,
        "server_generated_tokens": server_tokens,
        "server_throughput_tok_s": (server_tokens / wall) if server_tokens is not None and wall > 0 else None,
        # Where the server's time went: its steps, and of them the backend's part
        # (the rest is host work between GPU steps: planning, sampling, callbacks).
        "server_steps": delta("kiln_steps_total"),
        "server_step_s": delta("kiln_step_seconds_total"),
        "server_executor_s": delta("kiln_step_executor_seconds_total"),
        "requests_per_s": len(done) / wall if wall > 0 else 0.0,
        "ttft_ms": summary(ttfts), "itl_ms": summary(itls), "latency_ms": summary(lat),
        "server_before": {k: before.get(k) for k in (
            "kiln_kv_pages_used", "kiln_kv_pages_cached", "kiln_kv_waste_ratio",
            "kiln_preemptions_total", "kiln_prefix_hit_rate", "kiln_requests_running",
            "kiln_requests_waiting")},
        "server_after": {k: after.get(k) for k in (
            "kiln_kv_pages_used", "kiln_kv_pages_cached", "kiln_kv_pages_total",
            "kiln_kv_waste_ratio", "kiln_preemptions_total", "kiln_prefix_hit_rate",
            "kiln_requests_running", "kiln_requests_waiting", "kiln_requests_failed_total")},
        "preemptions_during_run": delta("kiln_preemptions_total"),
        "speculative": speculative_summary(delta),
        "during_run": during(samples),
        "check": None,
    }

    problems = []
    if args.check:
        if failed:
            problems.append("%d request(s) failed" % len(failed))
        if not after:
            problems.append("could not scrape /metrics after the run")
        if leak:
            problems.append(leak)
        report["check"] = {"ok": not problems, "problems": problems}

    if args.json:
        print(json.dumps(report, indent=None, sort_keys=False))
    else:
        print_report(report)
    if args.check and problems:
        for p in problems:
            print("bench_serve --check: FAIL: %s" % p, file=sys.stderr)
        return 1
    return 0


def speculative_summary(delta):
    """The run's speculation from the kiln_spec_* counters; None where the server has none."""
    drafted = delta("kiln_spec_drafted_tokens_total")
    accepted = delta("kiln_spec_accepted_tokens_total")
    verifications = delta("kiln_spec_verifications_total")
    if drafted is None or accepted is None or verifications is None:
        return None
    return {"drafted": int(drafted), "accepted": int(accepted), "verifications": int(verifications),
            "acceptance_rate": accepted / drafted if drafted else 0.0,
            "mean_accepted_length": accepted / verifications if verifications else 0.0}


def during(samples):
    """Peaks / means of the /metrics samples taken while the run was going."""
    if not samples:
        return None

    def col(name):
        return [m[name] for m in samples if name in m]

    out = {"samples": len(samples)}
    for name, key in (("kiln_kv_pages_used", "pages_used_max"), ("kiln_requests_running", "running_max"),
                      ("kiln_requests_waiting", "waiting_max")):
        v = col(name)
        out[key] = max(v) if v else None
    loaded = [m["kiln_kv_waste_ratio"] for m in samples
              if m.get("kiln_kv_pages_used", 0) > 0 and "kiln_kv_waste_ratio" in m]
    out["kv_waste_mean"] = statistics.fmean(loaded) if loaded else None
    out["kv_waste_max"] = max(loaded) if loaded else None
    return out


def fmt_ms(s):
    if not s:
        return "n/a"
    return "p50 %.2f  p90 %.2f  p99 %.2f  (mean %.2f) ms" % (s["p50"], s["p90"], s["p99"], s["mean"])


def fmt(v, spec="%g"):
    return "n/a" if v is None else spec % v


def print_report(r):
    print("bench_serve: %s  model %s  context %s" % (r["url"], r["model"], r["context_length"]))
    print("  mode        %s, mix %s, stream %s, seed %d" % (r["mode"], r["mix"], r["stream"], r["seed"]))
    print("  requests    %d: completed %d, failed %d, disconnected %d  (finish %s)" % (
        r["requests"], r["completed"], r["failed"], r["disconnected"],
        ", ".join("%s=%d" % kv for kv in sorted(r["finish_reasons"].items(), key=str)) or "-"))
    for err, n in sorted(r["errors"].items(), key=lambda kv: -kv[1])[:8]:
        print("    failed x%d: %s" % (n, err))
    print("  wall        %.2f s, %.1f req/s" % (r["wall_s"], r["requests_per_s"]))
    print("  output      %d tokens (%s), %.1f tok/s; server generated %s tokens, %s tok/s" % (
        r["output_tokens"], r["output_tokens_source"], r["throughput_tok_s"],
        fmt(r["server_generated_tokens"], "%d"), fmt(r["server_throughput_tok_s"], "%.1f")))
    print("  TTFT        %s" % fmt_ms(r["ttft_ms"]))
    print("  ITL         %s" % fmt_ms(r["itl_ms"]))
    print("  latency     %s" % fmt_ms(r["latency_ms"]))
    b, a = r["server_before"], r["server_after"]
    print("  server      KV waste %s -> %s (before -> after), preemptions %s -> %s, prefix hit rate %s" % (
        fmt(b.get("kiln_kv_waste_ratio"), "%.3f"), fmt(a.get("kiln_kv_waste_ratio"), "%.3f"),
        fmt(b.get("kiln_preemptions_total"), "%d"), fmt(a.get("kiln_preemptions_total"), "%d"),
        fmt(a.get("kiln_prefix_hit_rate"), "%.3f")))
    d = r.get("during_run")
    if d:
        print("  under load  pages used max %s, running max %s, waiting max %s, KV waste mean %s max %s "
              "(%d samples)" % (fmt(d["pages_used_max"], "%d"), fmt(d["running_max"], "%d"),
                                fmt(d["waiting_max"], "%d"), fmt(d["kv_waste_mean"], "%.3f"),
                                fmt(d["kv_waste_max"], "%.3f"), d["samples"]))
    print("  at end      pages used %s, cached %s of %s; running %s, waiting %s" % (
        fmt(a.get("kiln_kv_pages_used"), "%d"), fmt(a.get("kiln_kv_pages_cached"), "%d"),
        fmt(a.get("kiln_kv_pages_total"), "%d"), fmt(a.get("kiln_requests_running"), "%d"),
        fmt(a.get("kiln_requests_waiting"), "%d")))
    sp = r.get("speculative")
    if sp and sp["drafted"]:
        print("  speculative %d drafted, %d accepted (%.1f%%), %.2f accepted per verification (%d verifications)" % (
            sp["drafted"], sp["accepted"], 100.0 * sp["acceptance_rate"], sp["mean_accepted_length"],
            sp["verifications"]))
    if r["prompts_clipped_to_context"]:
        print("  note        %d prompt(s) clipped to the context (%.2f prompt tokens/word)" % (
            r["prompts_clipped_to_context"], r["prompt_tokens_per_word"]))
    if r["check"] is not None:
        print("  check       %s" % ("OK" if r["check"]["ok"] else "FAIL: " + "; ".join(r["check"]["problems"])))


if __name__ == "__main__":
    sys.exit(main())
