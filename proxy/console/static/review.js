// mirrorgate blind review: keyboard-first scoring of the pair on the page, then the next pair,
// without reloading. Every answer and request text is untrusted: it is only ever set with
// textContent (never innerHTML). The page works without this script (its form posts).
//
// Keys (outside the reason field): 1-5 score — the first digit answer A, the second answer B
// (or the score field that has the focus); A / B / T prefer A, B or a tie; Up / Down move to
// the previous / next field; Left / Right change the choice within a field (the browser's own
// radio keys); Enter submits; S skips; R goes to the reason. In the reason, Enter submits and
// Shift+Enter starts a new line; Escape leaves it.
"use strict";

(() => {
  const app = document.getElementById("review-app");
  const form = document.getElementById("review-form");
  if (!app || !form) {
    return;
  }
  const csrf = app.dataset.csrf;
  const route = app.dataset.route;
  const version = app.dataset.version;
  const status = document.getElementById("review-status");
  const fields = Array.from(form.querySelectorAll("[data-field]"));
  const query = new URLSearchParams({ route, version }).toString();
  let busy = false;

  const say = (text) => {
    status.textContent = text;
  };

  const fieldOf = (node) => (node ? node.closest("[data-field]") : null);

  const focusField = (field) => {
    if (!field) {
      return;
    }
    const checked = field.querySelector("input:checked");
    const target = checked || field.querySelector("input, textarea, button");
    if (target) {
      target.focus();
    }
  };

  const choose = (name, value) => {
    const input = form.querySelector(`input[name="${name}"][value="${value}"]`);
    if (input) {
      input.checked = true;
    }
    return input;
  };

  const valueOf = (name) => {
    const input = form.querySelector(`input[name="${name}"]:checked`);
    return input ? input.value : null;
  };

  const move = (step) => {
    const index = fields.indexOf(fieldOf(document.activeElement));
    const next = index < 0 ? 0 : Math.min(fields.length - 1, Math.max(0, index + step));
    focusField(fields[next]);
  };

  const fieldNamed = (name) => form.querySelector(`[data-field="${name}"]`);

  const score = (digit) => {
    const here = fieldOf(document.activeElement);
    let name = here && here.dataset.field.startsWith("score_") ? here.dataset.field : null;
    if (!name) {
      name = valueOf("score_a") === null ? "score_a" : "score_b";
    }
    choose(name, digit);
    focusField(fieldNamed(name === "score_a" ? "score_b" : "preference"));
  };

  const setText = (id, text) => {
    document.getElementById(id).textContent = text;
  };

  const showItem = (item) => {
    const turns = document.getElementById("request-turns");
    turns.replaceChildren();
    for (const turn of item.request) {
      const li = document.createElement("li");
      li.className = "turn";
      const role = document.createElement("span");
      role.className = "role";
      role.textContent = turn.role;
      const text = document.createElement("pre");
      text.className = "text";
      text.textContent = turn.text;
      li.append(role, text);
      turns.append(li);
    }
    const leftOut = document.getElementById("turns-left-out");
    leftOut.hidden = !item.turns_left_out;
    leftOut.textContent = item.turns_left_out
      ? `${item.turns_left_out} earlier turns are not shown.`
      : "";
    setText("answer-a", item.answers.A);
    setText("answer-b", item.answers.B);
    document.getElementById("review-item-id").value = item.id;
    form.reset();
    document.getElementById("review-item-id").value = item.id;
    document.getElementById("review-item").hidden = false;
    document.getElementById("review-empty").hidden = true;
    form.hidden = false;
    focusField(fieldNamed("score_a"));
  };

  const showEmpty = (reason) => {
    document.getElementById("review-item").hidden = true;
    form.hidden = true;
    const empty = document.getElementById("review-empty");
    empty.textContent = reason;
    empty.hidden = false;
  };

  const pct = (value) => (value === null ? "—" : `${Math.round(value * 100)}%`);
  const num = (value) => (value === null ? "—" : value.toFixed(2));

  const showProgress = (p) => {
    setText("progress-yours", String(p.yours));
    setText("progress-reviews", String(p.reviews));
    setText("progress-open", String(p.open));
    const a = p.agreement;
    setText(
      "progress-agreement",
      a.items
        ? `Cohen's kappa ${num(a.kappa)} on the preference over ${a.items} pairs two ` +
            `reviewers scored (same preference ${pct(a.same_preference)}); scores differ by ` +
            `${num(a.mean_score_difference)} points on average.`
        : "Shown once two reviewers have scored the same pairs.",
    );
    const b = p.position;
    setText(
      "progress-position",
      b.a_share === null
        ? "No decided review yet."
        : `A was preferred in ${pct(b.a_share)} of ${b.a + b.b} decided reviews (${b.ties} ` +
            "ties); answers are placed by a fair coin, so about 50% means no position bias.",
    );
  };

  const call = async (method, path, body) => {
    const headers = { "x-csrf-token": csrf };
    if (body !== undefined) {
      headers["content-type"] = "application/json";
    }
    const response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "same-origin",
    });
    let data = null;
    try {
      data = await response.json();
    } catch (_) {
      data = null;
    }
    return { response, data };
  };

  const next = async () => {
    const [item, progress] = await Promise.all([
      call("GET", `/ui/api/review/next?${query}`),
      call("GET", `/ui/api/review/progress?${query}`),
    ]);
    if (progress.response.ok) {
      showProgress(progress.data);
    }
    if (!item.response.ok) {
      say(item.data && item.data.error ? item.data.error.message : "Could not load the next pair.");
      return;
    }
    if (item.data.item) {
      showItem(item.data.item);
    } else {
      showEmpty(item.data.empty);
    }
  };

  const itemId = () => document.getElementById("review-item-id").value;

  const submit = async () => {
    if (busy) {
      return;
    }
    const scoreA = valueOf("score_a");
    const scoreB = valueOf("score_b");
    const preference = valueOf("preference");
    if (scoreA === null || scoreB === null || preference === null) {
      say("Score both answers (1-5) and choose A, B or Tie before submitting.");
      focusField(fieldNamed(scoreA === null ? "score_a" : scoreB === null ? "score_b" : "preference"));
      return;
    }
    busy = true;
    try {
      const reason = document.getElementById("reason").value;
      const { response, data } = await call(
        "POST",
        `/ui/api/review/items/${encodeURIComponent(itemId())}`,
        { score_a: Number(scoreA), score_b: Number(scoreB), preference, reason },
      );
      if (response.status === 201 || response.status === 409) {
        say(response.status === 201 ? "Review stored." : "You had already reviewed that pair.");
        await next();
      } else {
        say(data && data.error ? data.error.message : `The review was not stored (${response.status}).`);
      }
    } finally {
      busy = false;
    }
  };

  const skip = async () => {
    if (busy) {
      return;
    }
    busy = true;
    try {
      const { response, data } = await call(
        "POST",
        `/ui/api/review/items/${encodeURIComponent(itemId())}/skip`,
      );
      if (response.ok || response.status === 409) {
        say("Skipped.");
        await next();
      } else {
        say(data && data.error ? data.error.message : `Could not skip (${response.status}).`);
      }
    } finally {
      busy = false;
    }
  };

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (event.submitter && event.submitter.id === "review-skip") {
      skip();
    } else {
      submit();
    }
  });

  document.addEventListener("keydown", (event) => {
    if (form.hidden || event.altKey || event.ctrlKey || event.metaKey) {
      return;
    }
    const inReason = document.activeElement && document.activeElement.id === "reason";
    if (inReason) {
      if (event.key === "Enter" && !event.shiftKey) {
        event.preventDefault();
        submit();
      } else if (event.key === "Escape") {
        event.preventDefault();
        focusField(fieldNamed("submit"));
      }
      return;
    }
    const key = event.key;
    if (key >= "1" && key <= "5") {
      event.preventDefault();
      score(key);
    } else if (key === "a" || key === "A" || key === "b" || key === "B") {
      event.preventDefault();
      choose("preference", key.toUpperCase());
      focusField(fieldNamed("preference"));
    } else if (key === "t" || key === "T") {
      event.preventDefault();
      choose("preference", "tie");
      focusField(fieldNamed("preference"));
    } else if (key === "ArrowDown" || key === "ArrowUp") {
      event.preventDefault();
      move(key === "ArrowDown" ? 1 : -1);
    } else if (key === "Enter") {
      event.preventDefault();
      const active = document.activeElement;
      if (active && active.id === "review-skip") {
        skip();
      } else {
        submit();
      }
    } else if (key === "s" || key === "S") {
      event.preventDefault();
      skip();
    } else if (key === "r" || key === "R") {
      event.preventDefault();
      document.getElementById("reason").focus();
    }
  });

  if (!form.hidden) {
    focusField(fieldNamed("score_a"));
  }
})();
