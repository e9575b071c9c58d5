// evalpipe browse: the page's script. Hand-written, no build step, no library.
// Every value from the table is put on the page as text (text nodes, textContent): a state
// holding HTML or a script shows as what it is. The view (mode, sort, filters, columns, row)
// lives in the address's hash, so it can be bookmarked and sent.
"use strict";

const TOKEN = document.querySelector('meta[name="evalpipe-token"]').content;
const ROW = 24; // px per table row (app.css: #grid td height)
const BLOCK = 100; // rows per request
const MAX_HEIGHT = 8_000_000; // px: browsers cap an element's height; beyond, the bar is scaled

const $ = (id) => document.getElementById(id);

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k === "class") node.className = v;
    else if (k === "on") for (const [e, f] of Object.entries(v)) node.addEventListener(e, f);
    else if (k === "data") for (const [d, x] of Object.entries(v)) node.dataset[d] = x;
    else node[k] = v;
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

async function api(path, params, body) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(params || {})) if (v !== undefined && v !== null) url.searchParams.set(k, v);
  const init = { headers: { "X-Evalpipe-Token": TOKEN } };
  if (body !== undefined) {
    init.method = "POST";
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(url, init);
  const data = await response.json();
  if (!response.ok) throw new Error(data.error || response.statusText);
  return data;
}

function showError(err) {
  const box = $("error");
  box.hidden = !err;
  box.textContent = err ? String(err.message || err) : "";
}

// ------------------------------------------------------------------------------ the address

const state = { mode: "table", sort: "", filters: [], cols: null, at: 0, row: null,
  q: "", design: "uniform", n: 100, seed: 1, reviewer: "" };

function readHash() {
  const p = new URLSearchParams(location.hash.slice(1));
  const json = (k, d) => { try { return p.has(k) ? JSON.parse(p.get(k)) : d; } catch { return d; } };
  state.mode = p.get("mode") || "table";
  state.sort = p.get("sort") || "";
  state.filters = json("filters", []);
  state.cols = json("cols", null);
  state.at = parseInt(p.get("at") || "0", 10) || 0;
  state.row = p.has("row") ? p.get("row") : null;
  state.q = p.get("q") || "";
  state.design = p.get("design") || "uniform";
  state.n = parseInt(p.get("n") || "100", 10) || 100;
  state.seed = p.get("seed") || "1";
  state.reviewer = p.get("reviewer") || "";
}

function writeHash() {
  const p = new URLSearchParams();
  if (state.mode !== "table") p.set("mode", state.mode);
  if (state.sort) p.set("sort", state.sort);
  if (state.filters.length) p.set("filters", JSON.stringify(state.filters));
  if (state.cols) p.set("cols", JSON.stringify(state.cols));
  if (state.at) p.set("at", String(state.at));
  if (state.row !== null) p.set("row", state.row);
  if (state.mode === "label") {
    for (const k of ["q", "design", "n", "seed", "reviewer"]) if (state[k]) p.set(k, String(state[k]));
  }
  history.replaceState(null, "", location.pathname + location.search + "#" + p.toString());
}

// ------------------------------------------------------------------------------ formatting

let META = null;
const TYPES = {};

function fmt(value, column) {
  if (value === null || value === undefined) return "";
  const type = TYPES[column] || "";
  if (typeof value === "number" && type.startsWith("Float")) return value.toFixed(3);
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

const isNumeric = (column) => /^(Float|Int|UInt)/.test(TYPES[column] || "");

// ------------------------------------------------------------------------------ the table

const table = { count: 0, blocks: new Map(), pending: new Set(), key: "", first: 0, timer: 0, exact: null };

function columns() { return state.cols || META.shown; }

function viewParams() {
  const params = { columns: JSON.stringify(columns()) };
  if (state.sort) params.sort = state.sort;
  if (state.filters.length) params.filters = JSON.stringify(state.filters);
  return params;
}

function resetTable() {
  table.key = JSON.stringify(viewParams());
  table.exact = null;
  table.blocks = new Map();
  table.pending = new Set();
  drawHead();
  drawFilters();
  draw();
  fetchBlock(Math.floor(Math.max(0, state.at - 1) / BLOCK), true);
}

function drawHead() {
  const thead = $("grid").tHead;
  thead.textContent = "";
  const tr = el("tr", {}, el("th", { title: "row number in this view" }, "#"));
  const [desc, sorted] = [state.sort.startsWith("-"), state.sort.replace(/^-/, "")];
  for (const c of columns()) {
    const th = el("th", { title: describeColumn(c), data: { column: c } }, c);
    if (c === sorted) th.className = desc ? "sorted-desc" : "sorted-asc";
    th.addEventListener("click", () => sortBy(c));
    tr.append(th);
  }
  thead.append(tr);
  $("sort").value = sorted;
  $("desc").checked = desc;
}

function describeColumn(c) {
  const col = META.columns.find((x) => x.name === c);
  return col && col.description ? col.description : c;
}

function sortBy(column, descending) {
  const current = state.sort.replace(/^-/, "");
  if (descending === undefined) descending = current === column ? !state.sort.startsWith("-") : isNumeric(column);
  state.sort = column ? (descending ? "-" : "") + column : "";
  state.at = 0;
  writeHash();
  $("scroller").scrollTop = 0;
  resetTable();
}

async function fetchBlock(block, first) {
  const key = table.key;
  if (table.blocks.has(block) || table.pending.has(block)) return;
  table.pending.add(block);
  try {
    const data = await api("/api/rows", { ...viewParams(), offset: block * BLOCK, limit: BLOCK });
    if (key !== table.key) return;
    table.blocks.set(block, data);
    if (table.count !== data.count || first) {
      table.count = data.count;
      $("count").textContent = `${data.count.toLocaleString("en")} of ${META.total.toLocaleString("en")} rows`;
      sizeSpacer();
      if (first && state.at) scrollToRow(state.at);
    }
    showError(null);
    draw();
  } catch (err) {
    showError(err);
  } finally {
    table.pending.delete(block);
  }
}

function sizeSpacer() { $("spacer").style.height = Math.min(table.count * ROW + ROW, MAX_HEIGHT) + "px"; }

function visibleRows() { return Math.max(1, Math.floor(($("scroller").clientHeight - ROW) / ROW)); }

const scaled = () => table.count * ROW + ROW > MAX_HEIGHT;

// Beyond MAX_HEIGHT a pixel of the scroll bar is more than a row: the row asked for (a jump,
// the wheel) is kept exactly while the bar stays where that row maps to.
function firstRow() {
  const s = $("scroller");
  const max = s.scrollHeight - s.clientHeight;
  const rows = Math.max(0, table.count - visibleRows());
  if (!scaled() || max <= 0) return Math.min(rows, Math.floor(s.scrollTop / ROW));
  const mapped = Math.round((s.scrollTop / max) * rows);
  if (table.exact !== null && Math.abs(mapped - table.exact) <= Math.ceil(rows / max) + 1) return table.exact;
  table.exact = null;
  return mapped;
}

function placeAt(index) {
  const s = $("scroller");
  const rows = Math.max(1, table.count - visibleRows());
  index = Math.max(0, Math.min(index, rows));
  if (scaled()) {
    table.exact = index;
    s.scrollTop = (index / rows) * (s.scrollHeight - s.clientHeight);
  } else {
    s.scrollTop = index * ROW;
  }
  draw();
}

function scrollToRow(n) { placeAt(Math.max(0, Math.min(n - 1, table.count - 1))); }

function onWheel(e) {
  if (!scaled() || e.ctrlKey) return;
  e.preventDefault();
  const rows = e.deltaMode === 1 ? e.deltaY : e.deltaMode === 2 ? e.deltaY * visibleRows() : e.deltaY / ROW;
  placeAt(firstRow() + Math.round(rows || Math.sign(e.deltaY)));
}

function draw() {
  const s = $("scroller");
  const first = firstRow();
  table.first = first;
  const grid = $("grid");
  grid.style.transform = `translateY(${s.scrollTop}px)`;
  const body = grid.tBodies[0];
  body.textContent = "";
  const cols = columns();
  const n = Math.min(visibleRows() + 1, Math.max(0, table.count - first));
  let complete = table.blocks.size > 0 || table.count === 0;
  for (let i = first; i < first + n; i++) {
    const block = table.blocks.get(Math.floor(i / BLOCK));
    if (!block) { complete = false; fetchBlock(Math.floor(i / BLOCK)); }
    const tr = el("tr", {}, el("td", { class: "rownum" }, (i + 1).toLocaleString("en")));
    if (block) {
      const j = i - block.offset;
      const values = block.rows[j];
      if (!values) continue;
      tr.dataset.pos = block.positions[j];
      tr.dataset.row = i + 1;
      if (String(block.positions[j]) === state.openPos) tr.classList.add("open");
      values.forEach((v, k) => {
        tr.append(el("td", { class: v === null ? "null" : isNumeric(cols[k]) ? "num" : "", title: fmt(v, cols[k]) }, fmt(v, cols[k])));
      });
      tr.addEventListener("click", () => openRow({ pos: block.positions[j] }));
    } else {
      tr.append(el("td", { colSpan: cols.length, class: "null" }, "…"));
    }
    body.append(tr);
  }
  // what a test or a bench waits for: every visible row of this view drawn
  body.dataset.complete = complete ? "1" : "0";
  grid.dataset.view = table.key;
}

function onScroll() {
  draw();
  clearTimeout(table.timer);
  table.timer = setTimeout(() => {
    const at = table.first + 1;
    state.at = at > 1 ? at : 0;
    writeHash();
  }, 300);
}

// ------------------------------------------------------------------------------ controls

function drawFilters() {
  const box = $("filters");
  box.textContent = "";
  state.filters.forEach((f, i) => {
    const [c, op, v] = f;
    const text = ["null", "notnull"].includes(op) ? `${c} ${op}` : `${c} ${op} ${v}`;
    box.append(el("span", { class: "chip" }, text, el("button", {
      type: "button", title: "remove this filter", ariaLabel: `remove filter ${text}`,
      on: { click: () => { state.filters.splice(i, 1); state.at = 0; writeHash(); resetTable(); } },
    }, "×")));
  });
}

function setupControls() {
  const names = META.columns.map((c) => c.name);
  const colOptions = (select, blank) => {
    select.textContent = "";
    if (blank) select.append(el("option", { value: "" }, blank));
    if (META.state) select.append(el("option", { value: META.state }, "text in the state"));
    for (const n of names) select.append(el("option", { value: n }, n));
  };
  colOptions($("f-col"));
  $("sort").append(el("option", { value: "" }, "(table order)"));
  for (const n of names) $("sort").append(el("option", { value: n }, n));
  for (const op of META.ops) $("f-op").append(el("option", { value: op }, op));
  $("f-add").addEventListener("click", () => {
    const f = [$("f-col").value, $("f-op").value];
    if (!["null", "notnull"].includes(f[1])) f.push($("f-val").value);
    if (f[0] === META.state) f[1] = "contains";
    state.filters.push(f);
    state.at = 0;
    writeHash();
    resetTable();
  });
  $("sort").addEventListener("change", () => sortBy($("sort").value, $("desc").checked));
  $("desc").addEventListener("change", () => sortBy($("sort").value, $("desc").checked));
  const go = () => { const n = parseInt($("jump").value, 10); if (n > 0) { state.at = n; writeHash(); scrollToRow(n); } };
  $("go").addEventListener("click", go);
  $("jump").addEventListener("keydown", (e) => { if (e.key === "Enter") go(); });
  const pick = $("colpick");
  for (const n of names) {
    const box = el("input", { type: "checkbox", checked: columns().includes(n) });
    box.addEventListener("change", () => {
      const now = columns().filter((c) => c !== n);
      if (box.checked) now.push(n);
      state.cols = names.filter((c) => now.includes(c));
      writeHash();
      resetTable();
    });
    pick.append(el("label", {}, box, " ", n));
  }
  $("scroller").addEventListener("scroll", onScroll);
  $("scroller").addEventListener("wheel", onWheel, { passive: false });
  window.addEventListener("resize", draw);
  for (const b of document.querySelectorAll("nav button.mode")) {
    b.addEventListener("click", () => setMode(b.dataset.mode));
  }
  $("l-start").addEventListener("click", startQueue);
}

function setMode(mode) {
  state.mode = mode;
  writeHash();
  for (const v of ["table", "compare", "label"]) $(`${v}-view`).hidden = v !== mode;
  for (const b of document.querySelectorAll("nav button.mode")) b.classList.toggle("active", b.dataset.mode === mode);
  if (mode === "compare") loadCompare(0);
  if (mode === "label") setupLabel();
  if (mode === "table") draw();
}

// ------------------------------------------------------------------------------ one row

function prettyText(value) {
  if (typeof value !== "string") return JSON.stringify(value, null, 2);
  const t = value.trim();
  if ((t.startsWith("{") && t.endsWith("}")) || (t.startsWith("[") && t.endsWith("]"))) {
    try { return JSON.stringify(JSON.parse(t), null, 2); } catch { /* not JSON: as it is */ }
  }
  return value;
}

function bars(items) {
  const grid = el("div", { class: "bars" });
  for (const [label, p] of items) {
    const fill = el("div");
    fill.style.width = `${Math.max(0, Math.min(1, p || 0)) * 100}%`;
    grid.append(el("span", {}, label), el("div", { class: "bar" }, fill), el("span", {}, p === null ? "" : p.toFixed(3)));
  }
  return grid;
}

function renderRow(data, labelling) {
  const values = Object.fromEntries(data.values);
  const used = new Set([META.id_column]);
  const box = el("div", { class: "detail" });
  box.append(el("h2", {}, `${META.id_column} `, el("span", { class: "rowid" }, fmt(values[META.id_column])), ` (row ${data.position + 1} of the table)`));
  box.append(el("h3", {}, "State"));
  if (data.state) {
    for (const [k, v] of data.state) {
      if (k === META.id_column) continue;
      box.append(el("div", { class: "desc" }, k), el("pre", { class: "state" }, v === null ? "" : prettyText(v)));
    }
  } else {
    box.append(el("p", { class: "desc" }, "The output holds no state; start the browser with --input CORPUS to show it."));
  }
  for (const q of META.questions) {
    box.append(el("h3", {}, `${q.key} (${q.kind})`));
    box.append(el("p", { class: "desc" }, describeColumn(q.head)));
    const head = values[q.head];
    used.add(q.head);
    if (q.kind === "noul") {
      box.append(el("p", {}, "answer: ", el("span", { class: "answer" }, head === null ? "none" : head > 0.5 ? "yes" : "no"), head === null ? "" : ` (p(yes) = ${head.toFixed(3)})`));
      if (head !== null) box.append(bars([["yes", head], ["no", 1 - head]]));
    } else {
      box.append(el("p", {}, "answer: ", el("span", { class: "answer" }, fmt(head, q.head)),
        q.confidence ? ` (confidence ${fmt(values[q.confidence], q.confidence)})` : ""));
      box.append(bars(q.probs.map((p) => [p.label, values[p.column]])));
      used.add(q.confidence);
      q.probs.forEach((p) => used.add(p.column));
    }
    const extra = q.extra.filter((c) => c in values);
    if (extra.length) box.append(el("dl", {}, ...extra.flatMap((c) => { used.add(c); return [el("dt", {}, c), el("dd", {}, fmt(values[c], c))]; })));
    const buttons = labelling ? labelling(q) : null;
    if (buttons) box.append(buttons);
  }
  box.append(el("h3", {}, "Provenance"));
  const rest = data.values.filter(([k]) => !used.has(k));
  box.append(el("dl", {}, ...rest.flatMap(([k, v]) => [el("dt", { title: describeColumn(k) }, k), el("dd", {}, fmt(v, k))])));
  return box;
}

function labelButtons(id, design, prob) {
  if (!META.labels) return null;
  return (q) => el("div", { class: "label-buttons" }, "label: ", ...q.answers.map((a) => el("button", {
    type: "button", on: { click: () => sendLabel(id, q.key, a, design, prob).catch(showError) },
  }, a)));
}

async function openRow(which) {
  try {
    const data = await api("/api/row", which);
    state.openPos = String(data.position);
    const values = Object.fromEntries(data.values);
    state.row = String(values[META.id_column]);
    writeHash();
    const aside = $("detail");
    aside.hidden = false;
    aside.textContent = "";
    aside.append(el("button", { type: "button", on: { click: closeRow } }, "Close (Esc)"));
    aside.append(renderRow(data, labelButtons(values[META.id_column], "browse", null)));
    draw();
  } catch (err) { showError(err); }
}

function closeRow() {
  $("detail").hidden = true;
  state.row = null;
  state.openPos = null;
  writeHash();
  draw();
}

// ------------------------------------------------------------------------------ two runs

async function loadCompare(offset) {
  const view = $("compare-view");
  try {
    const data = await api("/api/compare", { offset, limit: 100 });
    const c = data.counts;
    view.textContent = "";
    view.append(el("h2", {}, `A: ${c.a.output}  against  B: ${c.b.output}`));
    const n = (x) => el("td", { class: "num" }, x === null || x === undefined ? "" : typeof x === "number" && !Number.isInteger(x) ? x.toFixed(4) : x.toLocaleString("en"));
    view.append(el("table", { class: "figures", id: "compare-ids" },
      el("tr", {}, el("th", {}, "shared ids"), el("th", {}, "only in A"), el("th", {}, "only in B"), el("th", {}, "rows with a change")),
      el("tr", {}, n(c.shared_ids), n(c.only_in_a), n(c.only_in_b), n(c.changed_rows))));
    const figures = el("table", { class: "figures", id: "compare-questions" },
      el("tr", {}, ...["question", "kind", "answered on both (n)", "flips", "share", "figure", "A", "B", "change", "95% interval"].map((h) => el("th", {}, h))));
    for (const q of c.questions) {
      const changes = q.changes.length ? q.changes : [{ what: "", a: null, b: null, change: null, low: null, high: null }];
      changes.forEach((ch, i) => {
        const interval = ch.low === null ? "" : `${ch.low.toFixed(4)} to ${ch.high.toFixed(4)}`;
        figures.append(el("tr", { data: { question: q.key } },
          el("td", {}, i ? "" : q.key), el("td", {}, i ? "" : q.kind), i ? el("td") : n(q.n),
          i ? el("td") : el("td", { class: "num flips" }, q.flips.count.toLocaleString("en")),
          i ? el("td") : n(q.flips.share), el("td", {}, ch.what), n(ch.a), n(ch.b), n(ch.change), el("td", {}, interval)));
      });
    }
    view.append(figures);
    for (const note of c.notes) view.append(el("p", { class: "desc" }, "note: ", note));
    const ch = data.changed;
    view.append(el("h2", {}, `Rows whose answer changed (${ch.count.toLocaleString("en")})`));
    const rows = el("table", { class: "figures", id: "compare-rows" }, el("tr", {}, ...ch.columns.map((h) => el("th", {}, h))));
    const cell = (v) => (typeof v === "number" && !Number.isInteger(v) ? v.toFixed(3) : fmt(v));
    for (const r of ch.rows) {
      rows.append(el("tr", {}, ...r.map((v) => el("td", { class: v === true ? "flip" : typeof v === "number" ? "num" : "" }, cell(v)))));
    }
    view.append(rows);
    const pager = el("div", { class: "pager" });
    if (offset > 0) pager.append(el("button", { type: "button", on: { click: () => loadCompare(Math.max(0, offset - 100)) } }, "Previous"));
    if (offset + 100 < ch.count) pager.append(el("button", { type: "button", on: { click: () => loadCompare(offset + 100) } }, "Next"));
    view.append(pager);
    showError(null);
  } catch (err) { showError(err); }
}

// ------------------------------------------------------------------------------ labelling

const queue = { rows: [], at: 0, question: null, done: 0 };

function setupLabel() {
  const select = $("l-question");
  if (!select.options.length) for (const q of META.questions) select.append(el("option", { value: q.key }, `${q.key} (${q.kind})`));
  if (state.q) select.value = state.q;
  $("l-design").value = state.design;
  $("l-n").value = state.n;
  $("l-seed").value = state.seed;
  $("l-reviewer").value = state.reviewer || META.reviewer;
  loadSummary();
}

const keyFor = (q, i) => (q.kind === "noul" ? ["y", "n"][i] : String(i + 1));

async function startQueue() {
  state.q = $("l-question").value;
  state.design = $("l-design").value;
  state.n = parseInt($("l-n").value, 10) || 100;
  state.seed = $("l-seed").value;
  state.reviewer = $("l-reviewer").value.trim() || META.reviewer;
  writeHash();
  try {
    const data = await api("/api/queue", { question: state.q, design: state.design, n: state.n, seed: state.seed, reviewer: state.reviewer });
    queue.rows = data.rows;
    queue.at = 0;
    queue.done = data.done;
    queue.question = META.questions.find((q) => q.key === data.question);
    const keys = $("l-keys");
    keys.textContent = "";
    keys.append("keys: ", ...queue.question.answers.flatMap((a, i) => [el("kbd", {}, keyFor(queue.question, i)), ` ${a}  `]), el("kbd", {}, "s"), " skip  ", el("kbd", {}, "b"), " back");
    await showQueued();
  } catch (err) { showError(err); }
}

async function showQueued() {
  const box = $("l-row");
  box.textContent = "";
  const left = queue.rows.length - queue.at;
  $("l-progress").textContent = left > 0
    ? `row ${queue.at + 1} of ${queue.rows.length} in the queue (${queue.design || state.design}); ${queue.done} labelled by ${state.reviewer} before`
    : `queue done: ${queue.rows.length} rows; labels are in ${META.labels}`;
  if (left <= 0) { loadSummary(); return; }
  const item = queue.rows[queue.at];
  const data = await api("/api/row", { id: String(item.id) });
  const only = (q) => (q.key === queue.question.key ? labelButtons(item.id, item.design, item.inclusion_prob)(q) : null);
  box.append(renderRow(data, only));
  box.dataset.id = String(item.id);
}

async function sendLabel(id, question, answer, design, prob) {
  await api("/api/label", null, { id, question, answer, design, inclusion_prob: prob, reviewer: state.reviewer || META.reviewer });
  const sent = $("l-progress");
  if (state.mode === "label" && queue.rows[queue.at] && String(queue.rows[queue.at].id) === String(id)) {
    queue.at += 1;
    await showQueued();
    if (queue.at % 10 === 0) loadSummary();
  } else {
    sent.textContent = `labelled ${META.id_column} ${id}: ${question} = ${answer}`;
  }
}

async function loadSummary() {
  if (!META.labels) { $("l-summary").textContent = "No labels file: start the browser with --labels FILE."; return; }
  try {
    const data = await api("/api/labels");
    const box = $("l-summary");
    box.textContent = "";
    box.append(el("h2", {}, `Labels in ${data.file}`));
    const t = el("table", { class: "figures" }, el("tr", {}, el("th", {}, "question"), el("th", {}, "labels by reviewer"), el("th", {}, "agreement between reviewers")));
    for (const q of data.questions) {
      const counts = Object.entries(q.labels).map(([r, n]) => `${r}: ${n}`).join(", ");
      const pairs = q.pairs.map((p) => `${p.a} & ${p.b}: ${p.agree} of ${p.both} agree`).join("; ");
      t.append(el("tr", {}, el("td", {}, q.key || q.question), el("td", {}, counts), el("td", {}, pairs)));
    }
    box.append(t);
  } catch (err) { showError(err); }
}

document.addEventListener("keydown", (e) => {
  if (e.target.closest && e.target.closest("input, select, textarea")) return;
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  if (state.mode === "table" && e.key === "Escape") { closeRow(); return; }
  if (state.mode !== "label" || !queue.question || queue.at >= queue.rows.length) return;
  const q = queue.question;
  const i = q.answers.findIndex((_, k) => keyFor(q, k) === e.key.toLowerCase());
  const item = queue.rows[queue.at];
  if (i >= 0) { e.preventDefault(); sendLabel(item.id, q.key, q.answers[i], item.design, item.inclusion_prob).catch(showError); }
  else if (e.key === "s") { queue.at += 1; showQueued().catch(showError); }
  else if (e.key === "b" && queue.at > 0) { queue.at -= 1; showQueued().catch(showError); }
});

// ------------------------------------------------------------------------------ start

async function start() {
  readHash();
  try {
    META = await api("/api/meta");
  } catch (err) { showError(err); return; }
  for (const c of META.columns) TYPES[c.name] = c.type;
  $("output").textContent = META.output + (META.vs ? `  vs  ${META.vs}` : "");
  document.querySelector('nav button[data-mode="compare"]').hidden = !META.vs;
  document.querySelector('nav button[data-mode="label"]').hidden = !META.labels;
  for (const n of META.notes) showError(n);
  setupControls();
  resetTable();
  setMode(state.mode);
  if (state.row !== null && state.mode === "table") openRow({ id: state.row });
}

start();
