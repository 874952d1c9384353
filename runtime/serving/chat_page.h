// The web chat page `kiln serve` answers at /: static HTML and JavaScript
// that talk to /v1/chat/completions with streaming. No build step. While a
// reply streams the Send button is disabled; when it ends, its line gets the
// class "done" (and "error" if the request failed), which is also what the
// headless-browser test (tests/serving/chat_page_test.py) waits for.
#pragma once

namespace kiln {

inline constexpr char kChatPageHtml[] = R"html(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kiln chat</title>
<style>
body{font-family:system-ui,sans-serif;max-width:46rem;margin:2rem auto;padding:0 1rem}
#log div{margin:.5rem 0;white-space:pre-wrap}.user{color:#225}.assistant{color:#252}
form{display:flex;gap:.5rem}#msg{flex:1;padding:.5rem}#temp{width:4rem}.error{color:#a22}
</style></head><body>
<h1>kiln chat</h1>
<div id="log"></div>
<form id="f"><input id="msg" autocomplete="off" placeholder="Say something">
<label>temperature <input id="temp" type="number" min="0" max="2" step="0.1" value="0.7"></label>
<button id="send">Send</button></form>
<script>
const log = document.getElementById('log'), form = document.getElementById('f'), box = document.getElementById('msg');
const temp = document.getElementById('temp'), send = document.getElementById('send');
const history = [];
function line(role, text) { const d = document.createElement('div'); d.className = role; d.textContent = text; log.appendChild(d); return d; }
form.onsubmit = async (e) => {
  e.preventDefault();
  const text = box.value.trim(); if (!text || send.disabled) return;
  box.value = ''; history.push({role: 'user', content: text}); line('user', 'you: ' + text);
  const out = line('assistant', ''); let reply = '';
  const t = parseFloat(temp.value);
  send.disabled = true;
  try {
    const res = await fetch('/v1/chat/completions', {method: 'POST', headers: {'Content-Type': 'application/json'},
      body: JSON.stringify({messages: history, stream: true, max_tokens: 256, temperature: isNaN(t) ? 0.7 : t})});
    if (!res.ok) throw new Error(await res.text());
    const reader = res.body.getReader(), dec = new TextDecoder(); let buf = '';
    for (;;) {
      const {done, value} = await reader.read(); if (done) break;
      buf += dec.decode(value, {stream: true});
      let i; while ((i = buf.indexOf('\n\n')) >= 0) {
        const ev = buf.slice(0, i); buf = buf.slice(i + 2);
        if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
        const delta = JSON.parse(ev.slice(6)).choices[0].delta;
        if (delta && delta.content) { reply += delta.content; out.textContent = 'kiln: ' + reply; }
      }
    }
    history.push({role: 'assistant', content: reply});
  } catch (err) {
    history.pop();
    out.textContent = 'error: ' + err.message; out.classList.add('error');
  } finally {
    out.classList.add('done'); send.disabled = false; box.focus();
  }
};
</script></body></html>
)html";

}  // namespace kiln
