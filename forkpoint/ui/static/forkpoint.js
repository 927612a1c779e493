// forkpoint's web view: the little the server cannot do. A step's detail is fetched when it
// is opened; a run being recorded gets its new steps from the server's event stream; a
// command is copied on a click. Every piece of HTML inserted here was escaped by the server.
"use strict";

function loadDetail(details) {
  if (!details.open || details.dataset.loaded) return;
  details.dataset.loaded = "1";
  const target = details.querySelector(".detail");
  fetch(details.dataset.src, { credentials: "same-origin" })
    .then((response) => response.text().then((text) => ({ ok: response.ok, text })))
    .then(({ ok, text }) => {
      if (ok) {
        target.innerHTML = text;
      } else {
        target.textContent = "Could not load this step (" + text.replace(/<[^>]*>/g, " ").trim().slice(0, 200) + ")";
        delete details.dataset.loaded;
      }
    })
    .catch((error) => {
      target.textContent = "Could not load this step: " + error;
      delete details.dataset.loaded;
    });
}

function openStep(hash) {
  const item = hash && document.getElementById(hash.slice(1));
  const details = item && item.querySelector("details[data-src]");
  if (details) {
    details.open = true;
    loadDetail(details);
  }
}

// The waterfall again from each lane's start and duration (ms), as new steps widen it.
function layout() {
  const lanes = Array.from(document.querySelectorAll("#lanes .lane"));
  let span = 1;
  for (const lane of lanes) {
    span = Math.max(span, Number(lane.dataset.start) + Number(lane.dataset.duration));
  }
  for (const lane of lanes) {
    const bar = lane.querySelector(".bar");
    bar.style.left = (Number(lane.dataset.start) / span) * 100 + "%";
    bar.style.width = Math.max((Number(lane.dataset.duration) / span) * 100, 0.2) + "%";
  }
  const marks = document.querySelectorAll("#timeline .axis-mark");
  marks.forEach((mark, index) => {
    const value = (span * index) / (marks.length - 1);
    mark.textContent = value >= 999.5 ? (value / 1000).toFixed(2) + " s" : value.toFixed(0) + " ms";
  });
}

// Put a server-rendered item into a list in step order.
function placeByStep(list, html) {
  const holder = document.createElement("template");
  holder.innerHTML = html.trim();
  const item = holder.content.firstElementChild;
  const step = Number(item.dataset.step);
  const existing = list.querySelector(':scope > [data-step="' + step + '"]');
  if (existing) return;
  const after = Array.from(list.children).find((child) => Number(child.dataset.step) > step);
  list.insertBefore(item, after || null);
}

function follow(run) {
  const source = new EventSource(run.dataset.live);
  source.addEventListener("steps", (message) => {
    const data = JSON.parse(message.data);
    const steps = document.getElementById("steps");
    const lanes = document.getElementById("lanes");
    for (const item of data.steps) {
      placeByStep(steps, item.row);
      placeByStep(lanes, item.bar);
    }
    const empty = document.getElementById("no-steps");
    if (empty) empty.remove();
    if (data.totals) document.getElementById("totals").textContent = data.totals;
    layout();
    document.dispatchEvent(new CustomEvent("forkpoint:steps", { detail: data }));
  });
  source.addEventListener("end", (message) => {
    source.close();
    const status = document.querySelector("#run-status .badge");
    status.textContent = message.data;
    status.className = "badge s-" + message.data;
    document.querySelectorAll(".live-dot").forEach((dot) => dot.remove());
  });
}

// Listening from the start (the script is deferred: the page is parsed), so a step opened
// before the page finished loading still gets its detail.
document.addEventListener(
  "toggle",
  (event) => {
    if (event.target.matches && event.target.matches("details[data-src]")) loadDetail(event.target);
  },
  true,
);
document.addEventListener("click", (event) => {
  const button = event.target.closest && event.target.closest("button[data-copy]");
  if (!button || !navigator.clipboard) return;
  navigator.clipboard.writeText(button.dataset.copy).then(
    () => {
      button.textContent = "copied";
      setTimeout(() => (button.textContent = "copy"), 1500);
    },
    () => (button.textContent = "select and copy"),
  );
});
window.addEventListener("hashchange", () => openStep(location.hash));

function start() {
  document.querySelectorAll("details[data-src][open]").forEach(loadDetail);
  openStep(location.hash);
  const run = document.getElementById("run");
  if (run && run.dataset.live) follow(run);
}

if (document.readyState === "loading") {
  document.addEventListener("DOMContentLoaded", start);
} else {
  start();
}
