// acrb_nb labelling page: one item at a time, a key per label, work kept in the browser (localStorage) across reloads,
// and a labels.csv download with the exported header and rows, human_label filled in (import_labels reads it as it is).
"use strict";
const D = JSON.parse(document.getElementById("acrb-data").textContent);
const STORE = "acrb_nb.labels:" + D.sample_id;
const esc = s => String(s).replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;", "'": "&#39;"}[c]));
const saved = JSON.parse(localStorage.getItem(STORE) || "null") || {};
const S = {labels: {}, pos: 0, labeller: "", ...saved};
for (const r of D.rows) if (r.human_label && !(r.key in S.labels)) S.labels[r.key] = r.human_label;
S.pos = Math.min(Math.max(0, S.pos | 0), D.rows.length - 1);

function save() { localStorage.setItem(STORE, JSON.stringify(S)); }

// A CSV field as pandas writes it (QUOTE_MINIMAL): quoted when it holds a comma, a quote or a line break.
const field = v => /[",\r\n]/.test(v) ? "\"" + v.replace(/"/g, "\"\"") + "\"" : v;

function buildCsv() {
  const cols = D.columns.slice();
  const who = S.labeller.trim();
  if (who && !cols.includes("labeller")) cols.push("labeller");
  const lines = [cols.map(field).join(",")];
  for (const r of D.rows) {
    const row = {...r, human_label: S.labels[r.key] || "", ...(who ? {labeller: who} : {})};
    lines.push(cols.map(c => field(String(row[c] ?? ""))).join(","));
  }
  return lines.join("\n") + "\n";
}

function download() {
  const url = URL.createObjectURL(new Blob([buildCsv()], {type: "text/csv"}));
  const a = Object.assign(document.createElement("a"), {href: url, download: "labels.csv"});
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

function show() {
  const r = D.rows[S.pos];
  const done = D.rows.filter(x => S.labels[x.key]).length;
  document.getElementById("status").textContent = `item ${S.pos + 1} of ${D.rows.length} · ${done} labelled`;
  document.getElementById("bar").style.width = (100 * done / D.rows.length) + "%";
  const imgs = (r.image || "").split(";").filter(Boolean).map((p, i, a) =>
    `<figure><img src="${esc(p)}" alt="image ${i + 1}">${a.length > 1 ? `<figcaption>image ${i + 1}</figcaption>` : ""}</figure>`);
  const verdict = D.show_verdict && r.judge_verdict ? `<p>judge's verdict: <b>${esc(r.judge_verdict)}</b></p>` : "";
  document.getElementById("item").innerHTML = `<div class="imgs">${imgs.join("")}</div><div class="question">${esc(r.question)}</div>
    ${r.text ? `<div class="text">${esc(r.text)}</div>` : ""}${verdict}`;
  for (const b of document.querySelectorAll("#buttons button[data-label]")) b.classList.toggle("chosen", S.labels[r.key] === b.dataset.label);
  document.body.dataset.pos = S.pos;
  document.body.dataset.labelled = done;
  document.body.dataset.key = r.key;
}

function label(v) {
  S.labels[D.rows[S.pos].key] = v;
  if (S.pos < D.rows.length - 1) S.pos += 1;
  save();
  show();
}
function move(d) { S.pos = Math.min(Math.max(0, S.pos + d), D.rows.length - 1); save(); show(); }

function setup() {
  const box = document.getElementById("buttons");
  box.innerHTML = D.labels.map((l, i) => `<button data-label="${esc(l)}"><kbd>${i + 1}</kbd> ${esc(l)}</button>`).join("") +
    `<button id="back"><kbd>←</kbd> back</button><button id="skip"><kbd>→</kbd> skip</button>` +
    `<button id="download"><kbd>d</kbd> download labels.csv</button>`;
  box.querySelectorAll("button[data-label]").forEach(b => b.addEventListener("click", () => label(b.dataset.label)));
  document.getElementById("back").addEventListener("click", () => move(-1));
  document.getElementById("skip").addEventListener("click", () => move(1));
  document.getElementById("download").addEventListener("click", download);
  const who = document.getElementById("who");
  who.value = S.labeller;
  who.addEventListener("input", () => { S.labeller = who.value; save(); });
  document.addEventListener("keydown", e => {
    if (e.target === who || e.ctrlKey || e.metaKey || e.altKey) return;
    const n = parseInt(e.key, 10);
    if (n >= 1 && n <= D.labels.length) label(D.labels[n - 1]);
    else if (e.key === "ArrowRight" || e.key === " ") move(1);
    else if (e.key === "ArrowLeft" || e.key === "Backspace") move(-1);
    else if (e.key === "d") download();
    else return;
    e.preventDefault();
  });
  show();
  document.body.dataset.ready = "1";
}
window.acrbLabels = {buildCsv, state: S};
setup();
