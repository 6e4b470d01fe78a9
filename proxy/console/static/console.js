// mirrorgate console: a little progressive behaviour. Every page works without it.
// - Times (<time datetime="...">) are shown in the reader's own time zone.
// - A confirmation form's reason field gets the focus, so the keyboard path is short.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  for (const node of document.querySelectorAll("time[datetime]")) {
    const when = new Date(node.getAttribute("datetime"));
    if (!Number.isNaN(when.getTime())) {
      node.title = node.getAttribute("datetime");
      node.textContent = when.toLocaleString();
    }
  }
  const reason = document.querySelector("form.confirm [name=reason]");
  if (reason) {
    reason.focus();
  }
});
