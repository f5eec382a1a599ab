// The console's only script: live updates without a reload. Every few seconds it
// fetches the page it is on and swaps each [data-live] section whose markup changed,
// except one holding the element being typed in. The new markup is the server's own,
// escaped there; nothing here builds HTML from data, and the CSP forbids inline code.
"use strict";
(function () {
  const PERIOD_MS = 2000;
  const indicator = () => document.getElementById("live");
  // Every drawing of a form carries a fresh action id: not a change worth a swap.
  const comparable = (html) => html.replace(/name="action_id" value="[^"]*"/g, "");
  // A section where someone typed or chose something is left as it is.
  const touched = (section) => section.querySelector("form[data-touched]") !== null;
  async function refresh() {
    try {
      const response = await fetch(window.location.href, {
        credentials: "same-origin",
        headers: { "X-Console-Live": "1" },
        cache: "no-store",
      });
      if (!response.ok) throw new Error(String(response.status));
      const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
      let changed = 0;
      for (const section of fresh.querySelectorAll("[data-live][id]")) {
        const current = document.getElementById(section.id);
        if (!current || comparable(current.innerHTML) === comparable(section.innerHTML)) continue;
        if (current.contains(document.activeElement) || touched(current)) continue;
        current.replaceWith(document.importNode(section, true));
        changed += 1;
      }
      for (const counter of fresh.querySelectorAll("nav .count")) {
        const index = [...fresh.querySelectorAll("nav .count")].indexOf(counter);
        const mine = document.querySelectorAll("nav .count")[index];
        if (mine && mine.textContent !== counter.textContent) mine.textContent = counter.textContent;
      }
      const live = indicator();
      if (live) {
        live.className = "live on";
        live.textContent = "live " + new Date().toLocaleTimeString();
        if (changed) live.dataset.updates = String(Number(live.dataset.updates || 0) + changed);
      }
    } catch (error) {
      const live = indicator();
      if (live) {
        live.className = "live off";
        live.textContent = "not updating (" + error.message + ")";
      }
    }
    window.setTimeout(refresh, PERIOD_MS);
  }
  // A form is sent once: a second click while the first POST runs does nothing
  // (the server also keeps each action id to one write).
  for (const kind of ["input", "change"]) {
    document.addEventListener(kind, (event) => {
      const form = event.target.closest && event.target.closest("form");
      if (form) form.dataset.touched = "1";
    });
  }
  document.addEventListener("submit", (event) => {
    const form = event.target;
    if (form.dataset.sent) {
      event.preventDefault();
      return;
    }
    if (form.method.toLowerCase() === "post") form.dataset.sent = "1";
  });
  window.setTimeout(refresh, PERIOD_MS);
})();
