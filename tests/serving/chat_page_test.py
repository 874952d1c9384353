#!/usr/bin/env python3
"""The chat page of `kiln serve` in headless Chromium.

Starts `kiln serve MODEL --chat-template chatml` on a free loopback port,
opens / in headless Chromium driven over the DevTools protocol (through
--remote-debugging-pipe: NUL-separated JSON on file descriptors 3 and 4, so
only the standard library is needed), sets the page's temperature to 0, types
a message and clicks Send: the page's own JavaScript posts the chat, reads
the SSE stream and writes the reply into the DOM. The test waits for the
reply line to be marked done and checks that its text is exactly the server's
greedy (non-streamed) chat completion of the same message.

    tests/serving/chat_page_test.py KILN_BINARY MODEL

Exit status: 0 pass, 1 fail, 77 skipped (no Chromium installed).
"""
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

SKIP = 77
MESSAGE = "Tell me about the cat and the big red ball."
DEADLINE_S = 45


def fail(why):
    print(f"chat_page_test: FAIL: {why}", file=sys.stderr)
    sys.exit(1)


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


class DevTools:
    """A DevTools protocol client over Chromium's --remote-debugging-pipe."""

    def __init__(self, to_browser, from_browser):
        self.to_browser = to_browser
        self.from_browser = from_browser
        self.next_id = 0
        self.buffer = b""
        self.events = []

    def _read_message(self, deadline):
        while b"\0" not in self.buffer:
            if time.monotonic() > deadline:
                fail("no answer from Chromium in time")
            chunk = os.read(self.from_browser, 65536)
            if not chunk:
                fail("Chromium closed the DevTools pipe")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method, params=None, session=None, timeout=10):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    fail(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method, session, timeout=10):
        deadline = time.monotonic() + timeout
        while True:
            for i, event in enumerate(self.events):
                if event.get("method") == method and event.get("sessionId") == session:
                    return self.events.pop(i)
            self.events.append(self._read_message(deadline))

    def evaluate(self, session, expression):
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True}, session)
        if "exceptionDetails" in result:
            fail(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")


def start_server(kiln, model):
    server = subprocess.Popen([kiln, "serve", model, "--port", "0", "--kv-memory", "16", "--chat-template", "chatml"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 20
    seen = []
    while time.monotonic() < deadline:
        line = server.stdout.readline()
        if not line:
            break
        seen.append(line)
        match = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        if match:
            return server, match.group(1)
    server.kill()
    fail("kiln serve did not start:\n" + "".join(seen))


def greedy_reply(url):
    body = json.dumps({"messages": [{"role": "user", "content": MESSAGE}], "max_tokens": 256,
                       "temperature": 0}).encode()
    request = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=20) as response:
        return json.load(response)["choices"][0]["message"]["content"]


def start_chromium(chromium, profile):
    # Our end writes to fd 3 of Chromium and reads its fd 4.
    to_chrome_r, to_chrome_w = os.pipe()
    from_chrome_r, from_chrome_w = os.pipe()

    def wire_fds():
        # Move both ends above 3 and 4 first: either may already be 3 or 4.
        high_r = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD, 10)
        high_w = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD, 10)
        os.dup2(high_r, 3)
        os.dup2(high_w, 4)

    args = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--remote-debugging-pipe",
            f"--user-data-dir={profile}", "about:blank"]
    # close_fds=False keeps 3 and 4 open across exec; every other descriptor
    # of ours is close-on-exec already.
    browser = subprocess.Popen(args, close_fds=False, preexec_fn=wire_fds,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(to_chrome_r)
    os.close(from_chrome_w)
    return browser, DevTools(to_chrome_w, from_chrome_r)


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    kiln, model = sys.argv[1], sys.argv[2]
    chromium = find_chromium()
    if chromium is None:
        print("chat_page_test: SKIP: no Chromium found (chromium, chromium-browser, google-chrome); "
              "scripts/setup.sh installs Debian's chromium package")
        return SKIP
    start = time.monotonic()
    server, url = start_server(kiln, model)
    profile = tempfile.mkdtemp(prefix="kiln_chat_page_")
    browser = None
    try:
        want = greedy_reply(url)
        if not want:
            fail("the server's greedy reply is empty: nothing to compare")
        browser, devtools = start_chromium(chromium, profile)
        targets = devtools.call("Target.getTargets")["targetInfos"]
        page = next((t for t in targets if t["type"] == "page"), None)
        if page is None:
            page = {"targetId": devtools.call("Target.createTarget", {"url": "about:blank"})["targetId"]}
        session = devtools.call("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True})["sessionId"]
        devtools.call("Page.enable", session=session)
        devtools.call("Runtime.enable", session=session)
        devtools.call("Page.navigate", {"url": url + "/"}, session=session)
        devtools.wait_event("Page.loadEventFired", session)
        title = devtools.evaluate(session, "document.title")
        if title != "kiln chat":
            fail(f"the page at / has title {title!r}, not 'kiln chat'")

        # Type into the page's own controls, then press its Send button.
        devtools.evaluate(session, "document.getElementById('temp').value = '0'; "
                                   "document.getElementById('msg').focus(); true")
        devtools.call("Input.insertText", {"text": MESSAGE}, session=session)
        devtools.evaluate(session, "document.getElementById('send').click(); true")

        state = None
        while time.monotonic() - start < DEADLINE_S:
            state = devtools.evaluate(session, """(() => {
              const user = document.querySelector('#log .user');
              const reply = document.querySelector('#log .assistant');
              return {user: user && user.textContent, reply: reply && reply.textContent,
                      done: !!(reply && reply.classList.contains('done')),
                      error: !!(reply && reply.classList.contains('error')),
                      sendDisabled: document.getElementById('send').disabled};
            })()""")
            if state["done"]:
                break
            time.sleep(0.1)
        else:
            fail(f"no finished reply in the page after {DEADLINE_S} s (last state: {state})")
        if state["error"]:
            fail(f"the page shows an error: {state['reply']}")
        if state["user"] != "you: " + MESSAGE:
            fail(f"the page shows the message as {state['user']!r}")
        if state["sendDisabled"]:
            fail("Send is still disabled after the reply finished")
        got = state["reply"]
        if got != "kiln: " + want:
            fail(f"the page's reply differs from the server's greedy completion:\n page:   {got!r}\n server: "
                 f"{'kiln: ' + want!r}")
        print(f"chat_page_test: PASS in {time.monotonic() - start:.1f} s: the page streamed {len(want)} characters "
              f"equal to the greedy completion ({chromium})")
        return 0
    finally:
        if browser is not None:
            browser.kill()
            browser.wait()
        server.terminate()
        try:
            server.wait(timeout=5)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
