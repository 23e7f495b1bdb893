// acrb_nb run viewer: renders the items embedded in #acrb-data, with a filter per facet and a search box.
// Counts beside each filter value are the items that match every *other* filter (faceted search).
"use strict";
const D = JSON.parse(document.getElementById("acrb-data").textContent);
const NONE = "(none)";
const PLAIN = new Set(["attribute_id", "domain", "final_outcome", "pair_id", "condition", "outcome"]);
const esc = s => String(s).replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;", "'": "&#39;"}[c]));
const vals = (it, f) => { const v = it[f]; return Array.isArray(v) ? (v.length ? v.map(String) : [NONE]) : [v == null || v === "" ? NONE : String(v)]; };
const state = {q: "", sel: {}};
const cards = [];

function card(it) {
  const imgs = (it.images || []).map(im => `<figure><img src="${D.images[im.id] || ""}" style="width:${D.size}px;height:${D.size}px;
    object-fit:contain" alt="${esc(im.caption)}">${esc(im.caption)}${im.redacted ? `<div class="redacted">blurred: ${esc(im.redacted)}</div>` : ""}</figure>`);
  // attribute, domain, condition and outcome as plain tags; verdicts, labels and identities named ("gold label: toxic")
  const tags = D.facets.map(f => vals(it, f.field).filter(v => v !== NONE).map(v => `<span class="${
    f.field === "outcome" || f.field === "final_outcome" ? "out-" + esc(v) : ""}" title="${esc(f.label)}">${
    PLAIN.has(f.field) ? "" : esc(f.label) + ": "}${esc(v)}</span>`).join("")).join("");
  const [who, p] = D.verdict_label || ["judge", "p"];
  const judge = it.verdict == null ? "" : `<div>${esc(who)}: <b>${esc(it.verdict)}</b>${
    it.prob == null ? "" : ` (${esc(p)} ${(+it.prob).toFixed(2)})`}</div>`;
  return `<div class="card" data-key="${esc(it.key)}">${imgs.length ? `<div class="imgs">${imgs.join("")}</div>` : ""}
    <div class="tags">${tags}</div><div class="text">${esc(it.text || "")}</div>
    ${it.answer ? `<div class="answer">answer: ${esc(it.answer)}</div>` : ""}
    ${it.reason ? `<div class="reason">${esc(it.reason)}</div>` : ""}${judge}
    ${it.human == null ? "" : `<div>human label: <b>${esc(it.human)}</b></div>`}
    <details><summary class="key">${esc(it.key)}</summary><pre>${esc(JSON.stringify(it.extra || {}, null, 1))}</pre></details></div>`;
}

function matches(it, skip) {
  for (const f of D.facets) {
    const want = state.sel[f.field];
    if (f.field !== skip && want && !vals(it, f.field).includes(want)) return false;
  }
  return !state.q || it._search.includes(state.q);
}

function update() {
  let shown = 0;
  D.items.forEach((it, i) => { const ok = matches(it, null); cards[i].hidden = !ok; shown += ok; });
  document.getElementById("count").textContent = `${shown} of ${D.items.length} items`;
  document.body.dataset.shown = shown;
  for (const f of D.facets) {
    const counts = {};
    for (const it of D.items) if (matches(it, f.field)) for (const v of new Set(vals(it, f.field))) counts[v] = (counts[v] || 0) + 1;
    for (const o of document.getElementById("f-" + f.field).options) {
      if (o.value) { o.textContent = `${o.value} (${counts[o.value] || 0})`; o.dataset.count = counts[o.value] || 0; }
    }
  }
}

function controls() {
  const box = document.getElementById("controls");
  for (const f of D.facets) {
    const all = [...new Set(D.items.flatMap(it => vals(it, f.field)))].sort();
    const lab = document.createElement("label");
    lab.innerHTML = `${esc(f.label)} <select id="f-${esc(f.field)}" data-field="${esc(f.field)}"><option value="">all</option>${
      all.map(v => `<option value="${esc(v)}">${esc(v)}</option>`).join("")}</select>`;
    lab.querySelector("select").addEventListener("change", e => { state.sel[f.field] = e.target.value; update(); });
    box.insertBefore(lab, document.getElementById("count"));
  }
  document.getElementById("q").addEventListener("input", e => { state.q = e.target.value.trim().toLowerCase(); update(); });
}

const t0 = performance.now();
for (const it of D.items) {
  it._search = [it.key, it.text, it.answer, it.reason, it.verdict, it.human, ...D.facets.flatMap(f => vals(it, f.field))].join(" ").toLowerCase();
}
const box = document.getElementById("items");
box.innerHTML = D.items.map(card).join("");  // one parse for every card
cards.push(...box.children);
controls();
update();
document.body.dataset.renderMs = Math.round(performance.now() - t0);
document.body.dataset.ready = "1";
