// acrb_nb run viewer: the items embedded in #acrb-data, a filter per facet, a search box, one page of cards at a time.
// Counts beside each filter value are the items that match every *other* filter (faceted search). Only the cards of the
// page shown are in the document (their thumbnails load lazily), so a run of any size opens and filters at once.
// Every text reaches the page through textContent (never as HTML); NUL is shown as U+FFFD.
"use strict";
const t0 = performance.now();
const D = JSON.parse(document.getElementById("acrb-data").textContent);
const ITEMS = D.items, N = ITEMS.length, PAGE = D.page_size || 60;
const NONE = "(none)";  // the filter option of the items without a value (not part of any item's search text)
const PLAIN = new Set(["attribute_id", "domain", "final_outcome", "pair_id", "condition", "outcome"]);
const shown = s => String(s).replace(/\0/g, "\uFFFD");
const present = v => v != null && v !== "";

// Per facet: its values (in the order met) and per item the index of its value (or a list of them: identities).
const F = D.facets.map(f => {
  const index = new Map(), codes = new Array(N);
  const code = v => { let c = index.get(v); if (c === undefined) index.set(v, c = index.size); return c; };
  for (let i = 0; i < N; i++) {
    const v = ITEMS[i][f.field];
    if (Array.isArray(v)) codes[i] = v.length ? [...new Set(v.map(x => code(String(x))))] : code(NONE);
    else codes[i] = code(present(v) ? String(v) : NONE);
  }
  return {...f, values: [...index.keys()], codes, sel: -1, select: null};
});
const has = (c, want) => typeof c === "number" ? c === want : c.includes(want);

// What the search box searches: the item's own texts and values, lower-cased (built on the first search).
let HAY = null;
function haystacks() {
  HAY = ITEMS.map(it => [it.key, it.text, it.answer, it.reason, it.verdict, it.human,
    ...D.facets.flatMap(f => [].concat(it[f.field] ?? []))].filter(present).join("\n").toLowerCase());
}
const searchText = i => { if (!HAY) haystacks(); return HAY[i]; };
const state = {q: "", page: 0, matched: []};

function el(tag, cls, ...kids) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  for (const k of kids) if (k != null && k !== false) e.append(typeof k === "string" ? shown(k) : k);
  return e;
}
const mark = (e, name) => { e.dataset.show = name; return e; };   // which of the item's fields an element shows

function figure(im) {
  const img = el("img");
  Object.assign(img, {decoding: "async", width: D.size, height: D.size, alt: shown(im.caption)});
  img.style.objectFit = "contain";
  img.src = D.images[im.id] || "";
  return el("figure", null, img, im.caption, im.redacted && el("div", "redacted", "blurred: ", im.redacted));
}

function verdictLine(it) {
  if (!present(it.verdict)) return null;
  const [who, p] = D.verdict_label || ["judge", "p"];
  const line = el("div", "verdict", `${who}: `, mark(el("b", null, it.verdict), "verdict"));
  if (it.prob == null) return line;
  const d = D.decision;
  // with a threshold: as many decimals as it takes to tell the probability from the threshold (0.846 ≤ 0.848)
  let k = 2;
  while (d && k < 6 && (+it.prob).toFixed(k) === (+d.p_threshold).toFixed(k)) k++;
  line.append(shown(` · ${p} ${(+it.prob).toFixed(k)}`));
  if (d) line.append(shown(` ${it.verdict === d.positive ? ">" : "≤"} ${(+d.p_threshold).toFixed(k)}, the threshold of ${d.rule}`));
  return line;
}

function card(it) {
  const c = el("div", "card");
  c.dataset.key = it.key;
  if ((it.images || []).length) c.append(el("div", "imgs", ...it.images.map(figure)));
  // attribute, domain, condition and outcome as plain tags; verdicts, labels and identities named ("gold label: toxic")
  const tags = el("div", "tags");
  for (const f of D.facets) {
    for (const v of [].concat(it[f.field] ?? []).filter(present).map(String)) {
      const t = el("span", f.field === "outcome" || f.field === "final_outcome" ? "out-" + v : "",
                   PLAIN.has(f.field) ? null : el("i", null, f.label + ": "), el("bdi", null, v));
      t.title = f.label;
      t.dataset.field = f.field;
      tags.append(t);
    }
  }
  c.append(tags, mark(el("div", "text", it.text ?? ""), "text"));
  if (present(it.answer)) c.append(el("div", "answer", "answer: ", mark(el("bdi", null, it.answer), "answer")));
  if (present(it.reason)) c.append(mark(el("div", "reason", it.reason), "reason"));
  c.append(verdictLine(it) || "");
  if (present(it.human)) c.append(el("div", null, "human label: ", mark(el("b", null, it.human), "human")));
  c.append(el("details", null, mark(el("summary", "key", it.key), "key"),
              el("pre", null, JSON.stringify(it.extra || {}, null, 1))));
  return c;
}

function filter() {
  const q = state.q, counts = F.map(f => new Int32Array(f.values.length)), matched = [];
  for (let i = 0; i < N; i++) {
    let fails = 0, miss = -1;
    for (let k = 0; k < F.length && fails < 2; k++) {
      if (F[k].sel >= 0 && !has(F[k].codes[i], F[k].sel)) { fails++; miss = k; }
    }
    if (fails > 1 || (q && !searchText(i).includes(q))) continue;
    if (fails === 0) matched.push(i);
    for (let k = 0; k < F.length; k++) {
      if (fails === 1 && k !== miss) continue;   // counted for the one facet it fails: the facet's other values
      const c = F[k].codes[i];
      if (typeof c === "number") counts[k][c]++; else for (const x of c) counts[k][x]++;
    }
  }
  state.matched = matched;
  F.forEach((f, k) => {
    for (const o of f.select.options) {
      if (o.index === 0) continue;
      const n = counts[k][+o.dataset.code];
      if (o.dataset.count !== String(n)) { o.dataset.count = n; o.textContent = `${shown(f.values[+o.dataset.code])} (${n})`; }
    }
  });
  document.getElementById("count").textContent = `${matched.length} of ${N} items`;
  document.body.dataset.shown = matched.length;
}

function render() {
  const pages = Math.max(1, Math.ceil(state.matched.length / PAGE));
  state.page = Math.min(Math.max(0, state.page), pages - 1);
  const from = state.page * PAGE, upto = Math.min(from + PAGE, state.matched.length);
  document.getElementById("items").replaceChildren(...state.matched.slice(from, upto).map(i => card(ITEMS[i])));
  document.getElementById("page").textContent = upto ? `${from + 1}–${upto}` : "0";
  document.getElementById("pages").textContent = `page ${state.page + 1} of ${pages}`;
  document.getElementById("prev").disabled = state.page === 0;
  document.getElementById("next").disabled = state.page >= pages - 1;
  Object.assign(document.body.dataset, {page: state.page + 1, pages, cards: upto - from});
}

function update() { filter(); state.page = 0; render(); }
function turn(d) { state.page += d; render(); window.scrollTo(0, 0); }

function controls() {
  const box = document.getElementById("controls"), count = document.getElementById("count");
  for (const f of F) {
    const sel = el("select");
    sel.id = "f-" + f.field;
    sel.dataset.field = f.field;
    const all = el("option", null, "all");
    all.value = "";
    sel.append(all);
    // values sorted as strings; an option's value is the item's value itself
    [...f.values.keys()].sort((a, b) => f.values[a] < f.values[b] ? -1 : f.values[a] > f.values[b] ? 1 : 0).forEach(c => {
      const o = el("option", null, f.values[c]);
      o.value = f.values[c];
      o.dataset.code = c;
      sel.append(o);
    });
    sel.addEventListener("change", () => { f.sel = sel.value === "" ? -1 : +sel.selectedOptions[0].dataset.code; update(); });
    f.select = sel;
    box.insertBefore(el("label", null, f.label + " ", sel), count);
  }
  document.getElementById("q").addEventListener("input", e => { state.q = e.target.value.trim().toLowerCase(); update(); });
  document.getElementById("prev").addEventListener("click", () => turn(-1));
  document.getElementById("next").addEventListener("click", () => turn(1));
  document.addEventListener("keydown", e => {
    if (e.target.closest("input, select, textarea") || e.ctrlKey || e.metaKey || e.altKey) return;
    if (e.key === "ArrowRight" && !document.getElementById("next").disabled) turn(1);
    else if (e.key === "ArrowLeft" && !document.getElementById("prev").disabled) turn(-1);
    else if (e.key === "/") document.getElementById("q").focus();
    else return;
    e.preventDefault();
  });
}

controls();
update();
window.acrbView = {state, searchText, facets: F};
document.body.dataset.renderMs = Math.round(performance.now() - t0);
document.body.dataset.readyMs = Math.round(performance.now());  // since the navigation started
document.body.dataset.ready = "1";
// the first frame with the page's cards laid out and painted
requestAnimationFrame(() => setTimeout(() => { document.body.dataset.paintedMs = Math.round(performance.now()); }, 0));
