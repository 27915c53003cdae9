"""The lab app's login page, which a logged-out browser gets at `/` (dragonfarm_core.auth.login_guard).

Its own page, not Gradio's: Gradio's login page carries the whole API description (every
endpoint, its parameters and defaults) to whoever opens it. This one carries nothing but a
form; it posts to Gradio's /login (which sets the session cookie) and reloads into the app.
Relative URLs, so it works under a reverse proxy's path prefix too.
"""

from __future__ import annotations

LOGIN_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>dragonfarm: log in</title>
<style>
body { font-family: system-ui, sans-serif; background: #f8fafc; display: flex;
  justify-content: center; margin-top: 12vh; color: #0f172a; }
form { background: white; border: 1px solid #cbd5e1; border-radius: 8px; padding: 24px 28px;
  width: 300px; }
label { display: block; margin: 12px 0 4px; }
input { width: 100%; box-sizing: border-box; padding: 6px 8px; font-size: 1em; }
button { margin-top: 18px; width: 100%; padding: 8px; background: #059669; color: white;
  border: 0; border-radius: 6px; font-size: 1em; cursor: pointer; }
#message { color: #b91c1c; min-height: 1.2em; margin-top: 12px; }
</style></head>
<body><form id="login">
<h2>dragonfarm</h2><p>This workstation's app needs a login.</p>
<label for="username">User name</label>
<input id="username" name="username" autocomplete="username" required autofocus>
<label for="password">Password</label>
<input id="password" name="password" type="password" autocomplete="current-password" required>
<button type="submit">Log in</button>
<div id="message" role="alert"></div>
</form>
<script>
document.getElementById("login").addEventListener("submit", async (event) => {
  event.preventDefault();
  const message = document.getElementById("message");
  message.textContent = "";
  const response = await fetch("login", {method: "POST", body: new FormData(event.target)});
  if (response.ok) { window.location.reload(); return; }
  let text = "Wrong user name or password.";
  try {
    const body = await response.json();
    text = (body.error && body.error.message) || body.detail || text;
  } catch (e) {}
  message.textContent = text;
});
</script></body></html>
"""
