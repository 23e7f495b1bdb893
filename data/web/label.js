// acrb_nb labelling page: one item at a time, a key per label, work kept in the browser (localStorage) across reloads,
// and a labels.csv download with the exported header and rows, human_label filled in (import_labels reads it as it is).
// Every text reaches the page through textContent (never as HTML); NUL is shown as U+FFFD.
"use strict";
const D = JSON.parse(document.getElementById("acrb-data").textContent);
const STORE = "acrb_nb.labels:" + D.sample_id;
const shown = s => String(s).replace(/\0/g, "\uFFFD");
// An allowed label as import_labels compares it: trimmed, any case.
const ALLOWED = new Map(D.labels.map(l => [String(l).trim().toLowerCase(), l]));
const canonical = v => ALLOWED.get(String(v ?? "").trim().toLowerCase());
const saved = JSON.parse(localStorage.getItem(STORE) || "null") || {};
const S = {labels: {}, pos: 0, labeller: "", ...saved};
for (const [k, v] of Object.entries(S.labels)) if (!canonical(v)) delete S.labels[k];
// labels.csv's own labels are the starting point; a value outside the allowed labels is marked, not counted, and kept
// as it is in the download (import_labels names it) until a label is chosen for that item.
const INVALID = {};
for (const r of D.rows) {
  const v = String(r.human_label ?? "").trim();
  if (!v || r.key in S.labels) continue;
  if (canonical(v)) S.labels[r.key] = canonical(v); else INVALID[r.key] = r.human_label;
}
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
    const row = {...r, human_label: S.labels[r.key] || INVALID[r.key] || "", ...(who ? {labeller: who} : {})};
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

// An element with a class and children (strings become text nodes).
function el(tag, cls, ...kids) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  for (const k of kids) if (k != null) e.append(typeof k === "string" ? shown(k) : k);
  return e;
}

// Image paths come from labels.csv (a file anyone can edit): only a relative file path is loaded. The test sees the
// path as a browser parses a URL (tabs and line breaks dropped, leading and trailing spaces and controls trimmed).
const relative = p => {
  const t = String(p).replace(/[\t\n\r]/g, "").replace(/^[\0-\x20]+|[\0-\x20]+$/g, "");
  return t !== "" && !/^[a-zA-Z][a-zA-Z0-9+.-]*:/.test(t) && !/^[\\/]/.test(t);
};

function figure(p, i, n) {
  const cap = n > 1 ? `image ${i + 1}` : null;
  if (!relative(p)) return el("figure", "bad-path", el("figcaption", null, "not a relative image path, not loaded: ", el("code", null, p)));
  const img = el("img");
  img.alt = cap || "image";
  img.src = p;
  return el("figure", null, img, cap && el("figcaption", null, cap));
}

function show() {
  const r = D.rows[S.pos];
  const done = D.rows.filter(x => S.labels[x.key]).length;
  const bad = D.rows.filter(x => !S.labels[x.key] && x.key in INVALID).length;
  document.getElementById("status").textContent = `item ${S.pos + 1} of ${D.rows.length} · ${done} labelled` +
    (bad ? ` · ${bad} invalid label${bad > 1 ? "s" : ""} from labels.csv (not counted)` : "");
  document.getElementById("bar").style.width = (100 * done / D.rows.length) + "%";
  const paths = String(r.image || "").split(";").filter(Boolean);
  const box = document.getElementById("item");
  const invalid = !S.labels[r.key] && r.key in INVALID;
  box.replaceChildren(invalid ? el("p", "invalid", "labels.csv has ", el("b", null, INVALID[r.key]),
                                   " for this item: not one of the allowed labels, so it is not counted. Choose a label.") : "",
                      el("div", "imgs", ...paths.map((p, i) => figure(p, i, paths.length))), el("div", "question", r.question ?? ""));
  if (r.text) box.append(el("div", "text", r.text));
  if (D.show_verdict && r.judge_verdict) box.append(el("p", "verdict", "judge's verdict: ", el("b", null, r.judge_verdict)));
  for (const b of document.querySelectorAll("#buttons button[data-label]")) b.classList.toggle("chosen", S.labels[r.key] === b.dataset.label);
  Object.assign(document.body.dataset, {pos: S.pos, labelled: done, invalid: bad, key: r.key,
                                        itemInvalid: invalid ? "1" : "0"});
}

function label(v) {
  S.labels[D.rows[S.pos].key] = v;
  if (S.pos < D.rows.length - 1) S.pos += 1;
  save();
  show();
}
function move(d) { S.pos = Math.min(Math.max(0, S.pos + d), D.rows.length - 1); save(); show(); }

function button(id, key, text, onclick) {
  const b = el("button", null, el("kbd", null, key), " ", text);
  if (id) b.id = id;
  b.addEventListener("click", onclick);
  return b;
}

function setup() {
  const box = document.getElementById("buttons");
  box.replaceChildren(...D.labels.map((l, i) => {
    const b = button(null, i < 9 ? String(i + 1) : "·", l, () => label(l));
    b.dataset.label = l;
    return b;
  }), button("back", "←", "back", () => move(-1)), button("skip", "→", "skip", () => move(1)),
  button("download", "d", "download labels.csv", download));
  const who = document.getElementById("who");
  who.value = S.labeller;
  who.addEventListener("input", () => { S.labeller = who.value; save(); });
  document.addEventListener("keydown", e => {
    if (e.target === who || e.ctrlKey || e.metaKey || e.altKey) return;
    const n = parseInt(e.key, 10);
    if (n >= 1 && n <= Math.min(9, D.labels.length)) label(D.labels[n - 1]);
    else if (e.key === "ArrowRight" || e.key === " ") move(1);
    else if (e.key === "ArrowLeft" || e.key === "Backspace") move(-1);
    else if (e.key === "d") download();
    else return;
    e.preventDefault();
  });
  show();
  document.body.dataset.ready = "1";
}
window.acrbLabels = {buildCsv, state: S, invalid: INVALID};
setup();
