// The asyncagents dashboard: tasks as a tree under their parent sessions, live from /v1/events.
//
// The token is asked once and kept in sessionStorage (this tab only). Every request sends it
// as `Authorization: Bearer`, the event stream too: it is read with fetch() streaming rather
// than EventSource (which cannot send headers), so the token never appears in a URL or a log.
// Reconnects resend `Last-Event-ID`, so the stream resumes without gaps or duplicates.
"use strict";

const TOKEN_KEY = "asyncagents.token";
const STATUSES = ["queued", "running", "resumed", "completed", "error", "cancelled"];
// a queued task has not ended: it can be cancelled, and a provider retry may be waiting in it
const ACTIVE = new Set(["queued", "running", "resumed"]);

const state = {
  tasks: new Map(), // id -> task JSON
  lastEventId: null,
  clockOffset: 0, // server ms - browser ms
  heartbeatMs: 15000,
  controller: null,
  retryMs: 1000,
  lastContact: null,
  detailId: null,
  detailStatus: null,
  full: null, // the opened task as GET /v1/tasks/{id} answered it (texts not cut)
  titles: new Map(), // parent session id -> {title (null: unknown), at (ms), pending}
  renderQueued: false,
};

const $ = (id) => document.getElementById(id);

function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function now() {
  return Date.now() + state.clockOffset;
}

function fmtDuration(ms) {
  if (ms === null || ms === undefined || ms < 0) return "";
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${String(s % 60).padStart(2, "0")}s`;
  const h = Math.floor(m / 60);
  return `${h}h ${String(m % 60).padStart(2, "0")}m`;
}

// Tokens in at most 5 characters (950, 12.3k, 4.5M), as asyncagents_list shows them.
function fmtTokens(n) {
  if (n < 1000) return String(n);
  if (n < 999950) return `${(n / 1000).toFixed(1)}k`;
  return `${(n / 1000000).toFixed(1)}M`;
}

// Dollars with 2 to 4 decimals ($10.00, $0.0123), as the agents' texts show them.
function fmtCost(usd) {
  let text = (usd || 0).toFixed(4);
  while (text.endsWith("0") && text.split(".")[1].length > 2) text = text.slice(0, -1);
  return `$${text}`;
}

const TOKEN_FIELDS = ["input_tokens", "output_tokens", "reasoning_tokens", "cache_read_tokens", "cache_write_tokens"];

function tokensOf(usage) {
  return TOKEN_FIELDS.reduce((sum, k) => sum + ((usage && usage[k]) || 0), 0);
}

function fmtTime(ms) {
  return ms ? new Date(ms).toLocaleString() : "";
}

// How long ago, in the words a person says it ("just now", "42 s ago", "3 min ago", "5 h ago",
// "2 days ago"); the absolute local time goes in the tooltip.
function fmtAgo(ms) {
  const s = Math.max(0, Math.floor((now() - ms) / 1000));
  if (s < 5) return "just now";
  if (s < 60) return `${s} s ago`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ago`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h} h ago`;
  return `${Math.floor(h / 24)} days ago`;
}

// A turn tried again after a provider error, waiting in the queue for its backoff to end.
function waitingTry(task) {
  return task.status === "queued" && task.tries && task.tries.length && task.retry_at
    ? task.tries.length
    : null;
}

// OpenCode retrying the provider for an active task: "retry 2 in 14s" (counting down), "retry 2
// now" once the time has come; a turn tried again by the manager: "try 2 in 40s", then "try 2,
// waiting for a slot"; null when no retry is under way.
function retryText(task) {
  const tryNumber = waitingTry(task);
  if (tryNumber) {
    const left = Math.ceil((task.retry_at - now()) / 1000);
    return left > 0 ? `try ${tryNumber} in ${left}s` : `try ${tryNumber}, waiting for a slot`;
  }
  const retry = task.progress && task.progress.retry;
  if (!retry || !ACTIVE.has(task.status)) return null;
  const n = retry.attempt === null || retry.attempt === undefined ? "" : ` ${retry.attempt}`;
  if (!retry.next) return `retry${n}`;
  const left = Math.ceil((retry.next - now()) / 1000);
  return left > 0 ? `retry${n} in ${left}s` : `retry${n} now`;
}

function retryTitle(task) {
  const n = waitingTry(task);
  if (n) {
    const at = new Date(task.retry_at).toLocaleTimeString();
    return `Tried again after a provider error: ${task.retry_error || "no reason given"}. ` +
      `Try ${n} on ${task.model || "the server's default model"} from ${at}.`;
  }
  const retry = task.progress.retry;
  const when = retry.next ? ` Next try at ${new Date(retry.next).toLocaleTimeString()}.` : "";
  return `OpenCode is retrying the provider: ${retry.message || "no reason given"}.${when}`;
}

// The time the current turn has run (ticking while active), or the last turn's length.
function durationOf(task) {
  if (task.status === "queued") return null; // no turn runs yet: its row says when it was created
  const start = task.resume_count > 0 && task.turn_started_at ? task.turn_started_at : task.created_at;
  if (ACTIVE.has(task.status)) return now() - start;
  return task.completed_at ? task.completed_at - start : null;
}

// -- connection -------------------------------------------------------------------------------

function setConn(stateName, text) {
  const conn = $("conn");
  conn.dataset.state = stateName;
  conn.textContent = text;
}

function showDown(message) {
  const down = $("down");
  down.hidden = false;
  down.textContent = message;
  $("tree").classList.add("stale");
}

function hideDown() {
  $("down").hidden = true;
  $("tree").classList.remove("stale");
}

async function api(path, options = {}) {
  const headers = Object.assign({ Authorization: `Bearer ${token()}` }, options.headers || {});
  const response = await fetch(path, Object.assign({}, options, { headers }));
  if (response.status === 401) {
    forgetToken("The service refused this token.");
    throw new Error("unauthorized");
  }
  return response;
}

function scheduleReconnect(reason) {
  const seconds = Math.round(state.retryMs / 1000);
  const since = state.lastContact ? ` Last contact ${new Date(state.lastContact).toLocaleTimeString()}.` : "";
  setConn("down", "Service unreachable");
  showDown(`The service is unreachable (${reason}). Retrying in ${seconds}s; the tasks shown may be out of date.${since}`);
  clearTimeout(state.retryTimer);
  state.retryTimer = setTimeout(connect, state.retryMs);
  state.retryMs = Math.min(state.retryMs * 2, 10000);
}

async function connect() {
  if (!token()) return;
  if (state.controller) state.controller.abort();
  const controller = new AbortController();
  state.controller = controller;
  setConn("connecting", "Connecting…");
  const headers = { Authorization: `Bearer ${token()}`, Accept: "text/event-stream" };
  if (state.lastEventId !== null) headers["Last-Event-ID"] = state.lastEventId;
  let response;
  try {
    response = await fetch("/v1/events", { headers, signal: controller.signal, cache: "no-store" });
  } catch (err) {
    if (controller.signal.aborted && state.controller !== controller) return;
    scheduleReconnect("no answer");
    return;
  }
  if (response.status === 401) {
    forgetToken("The service refused this token.");
    return;
  }
  if (!response.ok || !response.body) {
    scheduleReconnect(`HTTP ${response.status}`);
    return;
  }
  try {
    await readStream(response.body, controller);
    if (state.controller === controller) scheduleReconnect("the stream ended");
  } catch (err) {
    if (state.controller === controller) scheduleReconnect("the connection dropped");
  }
}

// Parse Server-Sent Events from a fetch body; a watchdog aborts a silent stream.
async function readStream(body, controller) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let watchdog = null;
  const arm = () => {
    clearTimeout(watchdog);
    watchdog = setTimeout(() => controller.abort(), state.heartbeatMs * 3 + 2000);
  };
  arm();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      arm();
      state.lastContact = Date.now();
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.search(/\r?\n\r?\n/)) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut).replace(/^\r?\n\r?\n/, "");
        handleBlock(block);
      }
    }
  } finally {
    clearTimeout(watchdog);
  }
}

function handleBlock(block) {
  let id = null;
  let kind = "message";
  const data = [];
  for (const line of block.split(/\r?\n/)) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "id") id = value;
    else if (field === "event") kind = value;
    else if (field === "data") data.push(value);
  }
  if (!data.length) return;
  handleEvent(kind, JSON.parse(data.join("\n")));
  if (id !== null) state.lastEventId = id;
}

function handleEvent(kind, payload) {
  if (kind === "snapshot") {
    state.tasks = new Map(payload.tasks.map((t) => [t.id, t]));
    if (payload.heartbeat_ms) state.heartbeatMs = payload.heartbeat_ms;
    if (payload.now_ms) state.clockOffset = payload.now_ms - Date.now();
    state.retryMs = 1000;
    setConn("live", "Live");
    hideDown();
    render();
    if (state.detailId) renderDetail(state.detailId); // the open task may have changed meanwhile
    return;
  }
  state.retryMs = 1000;
  if ($("conn").dataset.state !== "live") {
    setConn("live", "Live");
    hideDown();
  }
  if (kind === "task.cleared") {
    state.tasks.delete(payload.id);
    queueRender();
  } else if (kind.startsWith("task.")) {
    const shown = state.tasks.get(payload.id);
    // an event queued while the snapshot was read may be older than what the snapshot shows
    if (shown && payload.updated_at < shown.updated_at) return;
    const known = shown !== undefined;
    state.tasks.set(payload.id, payload);
    if (!known || !updateRowInPlace(payload)) queueRender();
    else renderCounts();
  }
  if (state.detailId === payload.id) {
    const before = state.detailStatus;
    renderDetail(payload.id);
    if ((payload.truncated || []).length) loadFull(payload.id);
    // the turn ended (or a resume began): its conversation changed
    if (before !== payload.status) loadMessages(payload.id);
  }
}

// -- the tree ---------------------------------------------------------------------------------

function filters() {
  const statuses = new Set(
    [...document.querySelectorAll("#status-filter input:checked")].map((i) => i.value)
  );
  return { statuses, text: $("q").value.trim().toLowerCase() };
}

function matches(task, f) {
  if (!f.statuses.has(task.status)) return false;
  if (!f.text) return true;
  const parent = state.titles.get(task.parent_session_id);
  return [task.id, task.agent, task.model, task.description, task.prompt, task.parent_session_id,
    parent && parent.title]
    .some((v) => (v || "").toLowerCase().includes(f.text));
}

function queueRender() {
  if (state.renderQueued) return;
  state.renderQueued = true;
  requestAnimationFrame(() => {
    state.renderQueued = false;
    render();
  });
}

function fillRow(row, task) {
  row.replaceChildren();
  row.dataset.status = task.status;
  const status = el("span", "statuscell");
  status.append(el("span", `badge ${task.status}`, task.status));
  const retrying = retryText(task);
  if (retrying) {
    const retry = el("span", "retry", retrying);
    retry.title = retryTitle(task);
    status.append(retry);
  }
  const id = el("span", "idcell");
  id.append(el("span", "id mono", task.id));
  id.title = task.id;
  if (task.is_forked) id.append(el("span", "mark", "(forked)"));
  if (task.resume_count > 0) id.append(el("span", "mark", "(resumed)"));
  // the model under the agent on wide screens, after it on narrow ones
  const agent = el("span", "agent", task.agent);
  agent.title = task.model ? `${task.agent} · ${task.model}` : task.agent;
  if (task.model) agent.append(el("span", "sep", " · "), el("span", "model", task.model));
  const desc = el("span", "desc", task.description);
  desc.title = task.description;
  const created = el("span", "created", fmtAgo(task.created_at));
  created.title = fmtTime(task.created_at);
  const dur = el("span", "dur", fmtDuration(durationOf(task)));
  const p = task.progress || {};
  // a running turn's count is known when it ends; its last tool as it happens
  const n = p.tool_calls || 0;
  const count = n || !p.last_tool ? `${n} tool${n === 1 ? "" : "s"}` : "tool";
  const tools = el("span", "tools", `${count}${p.last_tool ? ` · ${p.last_tool}` : ""}`);
  const usage = task.usage || {};
  const tokens = el("span", "tokens", `${fmtTokens(tokensOf(usage))} tok`);
  tokens.title = `${tokensOf(usage).toLocaleString("en-US")} tokens`;
  const cost = el("span", "cost", fmtCost(usage.cost));
  row.append(status, id, agent, desc, created, dur, tools, tokens, cost);
  const marks = `${task.is_forked ? " (forked)" : ""}${task.resume_count > 0 ? " (resumed)" : ""}`;
  const on = task.model ? ` on ${task.model}` : "";
  const again = retrying ? ` (${retrying})` : "";
  row.setAttribute("aria-label", `${task.status}${again}: ${task.description}, agent ${task.agent}${on}, ${task.id}${marks}, created ${fmtAgo(task.created_at)}`);
}

function makeRow(task, level) {
  const row = el("div", "row");
  row.setAttribute("role", "treeitem");
  row.setAttribute("aria-level", String(level));
  row.tabIndex = 0;
  row.dataset.id = task.id;
  fillRow(row, task);
  return row;
}

function updateRowInPlace(task) {
  const row = document.querySelector(`.row[data-id="${CSS.escape(task.id)}"]`);
  if (!row) return !matches(task, filters()); // hidden before and after: nothing to draw
  if (!matches(task, filters())) return false;
  fillRow(row, task);
  const head = document.querySelector(`.group[data-parent="${CSS.escape(task.parent_session_id)}"] .parent-usage`);
  if (head) {
    const f = filters();
    head.textContent = parentUsage([...state.tasks.values()].filter(
      (t) => t.parent_session_id === task.parent_session_id && matches(t, f)));
  }
  return true;
}

// " · 12.3k tokens · $0.05": what a parent's tasks used together.
function parentUsage(tasks) {
  const spent = tasks.reduce((sum, t) => sum + ((t.usage && t.usage.cost) || 0), 0);
  const used = tasks.reduce((sum, t) => sum + tokensOf(t.usage), 0);
  return ` · ${fmtTokens(used)} tokens · ${fmtCost(spent)}`;
}

function renderCounts() {
  const counts = Object.fromEntries(STATUSES.map((s) => [s, 0]));
  for (const t of state.tasks.values()) counts[t.status] = (counts[t.status] || 0) + 1;
  const box = $("counts");
  box.replaceChildren();
  box.append(`${state.tasks.size} tasks: `);
  STATUSES.forEach((s, i) => {
    if (i) box.append(" · ");
    box.append(el("b", null, counts[s]), ` ${s}`);
  });
  let tokens = 0;
  let cost = 0;
  for (const t of state.tasks.values()) {
    tokens += tokensOf(t.usage);
    cost += (t.usage && t.usage.cost) || 0;
  }
  const total = el("span", "usage-total");
  total.id = "usage-total";
  total.append(" — ", el("b", null, tokens.toLocaleString("en-US")), " tokens · ", el("b", null, fmtCost(cost)));
  box.append(total);
}

function render() {
  renderCounts();
  const f = filters();
  const focused = document.activeElement && document.activeElement.dataset
    ? document.activeElement.dataset.id : undefined;
  const visible = [...state.tasks.values()].filter((t) => matches(t, f));
  visible.sort((a, b) => b.created_at - a.created_at || (a.id < b.id ? 1 : -1));
  // a task whose parent is another visible task's session nests under that task
  const bySession = new Map();
  for (const t of visible) if (t.session_id) bySession.set(t.session_id, t);
  const children = new Map(); // session id -> tasks
  for (const t of visible) {
    const list = children.get(t.parent_session_id) || [];
    list.push(t);
    children.set(t.parent_session_id, list);
  }
  const tree = $("tree");
  const fragment = document.createDocumentFragment();
  const groups = [...children.keys()].filter((sid) => !bySession.has(sid));
  for (const parent of groups) {
    const group = el("div", "group");
    group.dataset.parent = parent;
    group.setAttribute("role", "group");
    const tasks = children.get(parent);
    const head = el("div", "parent");
    head.title = `Parent session ${parent}`;
    const name = el("span", "ptitle");
    head.append(
      "Parent ", name, el("span", "pid mono", parent),
      el("span", "pcount", ` · ${tasks.length} task${tasks.length === 1 ? "" : "s"}`),
      el("span", "parent-usage", parentUsage(tasks)),
    );
    showTitle(head, parent);
    loadTitle(parent, tasks[0].id);
    group.append(head);
    const add = (list, level) => {
      for (const t of list) {
        group.append(makeRow(t, level));
        const sub = t.session_id && children.get(t.session_id);
        if (sub && level < 4) add(sub, level + 1);
      }
    };
    add(tasks, 2);
    fragment.append(group);
  }
  tree.replaceChildren(fragment);
  $("empty").hidden = state.tasks.size > 0;
  $("cols").hidden = groups.length === 0;
  if (focused) {
    const row = tree.querySelector(`.row[data-id="${CSS.escape(focused)}"]`);
    if (row) row.focus();
  }
}

// -- parent titles ----------------------------------------------------------------------------

const TITLE_TTL_MS = 60000;

// The parent's title, once known, with its id beside it; the id alone until then (or when the
// session server cannot say).
function showTitle(head, parent) {
  const known = state.titles.get(parent);
  const title = known && known.title;
  const name = head.querySelector(".ptitle");
  name.textContent = title || "";
  name.hidden = !title;
  head.querySelector(".pid").classList.toggle("secondary", Boolean(title));
}

// One read per parent (GET /v1/tasks/{id} names its parent's title), again after a minute.
async function loadTitle(parent, taskId) {
  const known = state.titles.get(parent);
  if (known && (known.pending || Date.now() - known.at < TITLE_TTL_MS)) return;
  state.titles.set(parent, { title: known ? known.title : null, at: Date.now(), pending: true });
  let title = known ? known.title : null;
  try {
    const response = await api(`/v1/tasks/${encodeURIComponent(taskId)}`);
    if (response.ok) title = (await response.json()).parent_title || null;
  } catch (err) {
    // the id stays shown
  }
  state.titles.set(parent, { title, at: Date.now(), pending: false });
  const head = document.querySelector(`.group[data-parent="${CSS.escape(parent)}"] .parent`);
  if (head) showTitle(head, parent);
}

function tick() {
  for (const row of document.querySelectorAll("#tree .row")) {
    const task = state.tasks.get(row.dataset.id);
    if (!task) continue;
    row.querySelector(".created").textContent = fmtAgo(task.created_at);
    if (!ACTIVE.has(task.status)) continue;
    row.querySelector(".dur").textContent = fmtDuration(durationOf(task));
    const retry = row.querySelector(".retry");
    if (retry) retry.textContent = retryText(task) || "";
  }
  // the open detail counts down to the next try too
  const open = state.detailId && state.tasks.get(state.detailId);
  if (open && retryText(open)) renderDetail(state.detailId);
}

// -- the detail -------------------------------------------------------------------------------

function count(n) {
  return Number(n || 0).toLocaleString("en-US");
}

function plural(n, word) {
  return `${count(n)} ${word}${n === 1 ? "" : "s"}`;
}

const FORK_FIELDS = new Set([
  "original_count", "final_count", "total_chars", "truncated_results", "removed_messages",
  "compaction_detected", "compaction_slice_index", "compaction_tail_messages", "tier_distribution",
  "head_tail_applied", "compacted_results", "hard_capped", "char_budget", "budget_reason",
  "fork_turns",
]);

// What a fork kept and cut, as [label, sentence] pairs (the stats' fields: the pipeline's
// ForkStats plus the launcher's char_budget, budget_reason and fork_turns). A field this page
// does not know is shown by its name, so nothing is hidden.
function forkStatLines(s) {
  const out = [];
  if ("original_count" in s) {
    out.push(["Messages kept", `${count(s.final_count)} of the parent's ${plural(s.original_count, "message")}`]);
  }
  if ("total_chars" in s) out.push(["Context size", `${count(s.total_chars)} characters`]);
  if ("char_budget" in s) {
    const why = s.budget_reason ? ` (${s.budget_reason})` : "";
    out.push(["Budget", `${count(s.char_budget)} characters${why}`]);
  }
  if ("compaction_detected" in s) {
    if (!s.compaction_detected) {
      out.push(["Compaction", "No compaction in the parent: every message could be kept"]);
    } else {
      const left = Math.max((s.original_count || 0) - (s.final_count || 0) - (s.removed_messages || 0), 0);
      const tail = s.compaction_tail_messages
        ? `, the ${plural(s.compaction_tail_messages, "message")} it keeps verbatim before it,` : "";
      out.push(["Compaction", `Kept the last compaction summary${tail} and everything after it; ${plural(left, "earlier message")} left out`]);
    }
  }
  if (s.fork_turns !== null && s.fork_turns !== undefined) {
    out.push(["Turns kept", `The last ${plural(s.fork_turns, "user turn")}`]);
  }
  if ("removed_messages" in s || "hard_capped" in s) {
    let fit = "Nothing dropped: every kept message fits the budget";
    if (s.hard_capped) fit = "The newest message alone was over the budget: its text was cut, head and tail kept";
    else if (s.removed_messages) fit = `The ${plural(s.removed_messages, "oldest message")} dropped to fit the budget`;
    out.push(["Fitting the budget", fit]);
  }
  const tiers = s.tier_distribution;
  if (tiers && typeof tiers === "object") {
    const total = (tiers.tier1 || 0) + (tiers.tier2 || 0) + (tiers.tier3 || 0);
    out.push(["Tool outputs", total
      ? `${count(total)}: the ${count(tiers.tier1)} newest whole, the next ${count(tiers.tier2)} shortened, ${count(tiers.tier3)} older ones shortened more`
      : "None"]);
    if (total) {
      const ends = s.head_tail_applied ? ` (${count(s.head_tail_applied)} keeping head and tail)` : "";
      out.push(["Tool outputs cut", `${count(s.truncated_results)} of ${count(total)}${ends}`]);
    }
  }
  if (s.compacted_results) {
    out.push(["Cleared by OpenCode", `${plural(s.compacted_results, "tool output")} already cleared by its compaction`]);
  }
  for (const [k, v] of Object.entries(s)) {
    if (!FORK_FIELDS.has(k)) out.push([k, typeof v === "object" ? JSON.stringify(v) : String(v)]);
  }
  return out;
}

function field(dl, name, value) {
  if (value === null || value === undefined || value === "") return;
  dl.append(el("dt", null, name), el("dd", null, value));
}

function renderDetail(id) {
  const task = state.tasks.get(id);
  if (!task) {
    $("detail-title").textContent = `${id} (removed)`;
    return;
  }
  state.detailStatus = task.status;
  // events cut long texts; the full task (GET /v1/tasks/{id}) has them when it is as recent
  const full = state.full && state.full.id === id && state.full.updated_at >= task.updated_at
    ? state.full : null;
  const text = (name) => (full ? full[name] : task[name]);
  $("detail-title").textContent = task.label || task.id;
  const badge = $("detail-status");
  badge.className = `badge ${task.status}`;
  badge.textContent = task.status;
  const dl = $("detail-fields");
  dl.replaceChildren();
  const p = task.progress || {};
  field(dl, "Description", task.description);
  field(dl, "Agent", task.agent);
  field(dl, "Model", task.model || "the server's default");
  if (task.tries && task.tries.length) {
    field(dl, "Attempts", `${task.tries.length}: ${task.tries.map((m) => m || "default").join(", ")}`);
  }
  if (task.retry_error) field(dl, "Last provider error", task.retry_error);
  if (waitingTry(task)) field(dl, "Next try", retryText(task));
  const retry = p.retry;
  if (retry && ACTIVE.has(task.status)) {
    const left = retry.next ? Math.ceil((retry.next - now()) / 1000) : null;
    const when = retry.next ? ` (${new Date(retry.next).toLocaleTimeString()})` : "";
    const next = left === null ? "" : left > 0 ? `; next try in ${left}s${when}` : `; next try now${when}`;
    field(dl, "OpenCode retrying", `attempt ${retry.attempt}: ${retry.message}${next}`);
  }
  if (task.pending_followups && task.pending_followups.length) {
    field(dl, "Queued follow-ups", String(task.pending_followups.length));
  }
  const parent = state.titles.get(task.parent_session_id);
  const parentTitle = (full && full.parent_title) || (parent && parent.title);
  field(dl, "Parent session", parentTitle ? `${parentTitle} (${task.parent_session_id})` : task.parent_session_id);
  field(dl, "Child session", task.session_id);
  field(dl, "Created", fmtTime(task.created_at));
  field(dl, "Ended", fmtTime(task.completed_at));
  field(dl, "Duration", fmtDuration(durationOf(task)));
  field(dl, "Tool calls", `${p.tool_calls || 0}${p.last_tool ? ` (last: ${p.last_tool})` : ""}`);
  const u = task.usage || {};
  field(dl, "Tokens", `${tokensOf(u).toLocaleString("en-US")} (input ${(u.input_tokens || 0).toLocaleString("en-US")}, output ${(u.output_tokens || 0).toLocaleString("en-US")}, reasoning ${(u.reasoning_tokens || 0).toLocaleString("en-US")}, cache read ${(u.cache_read_tokens || 0).toLocaleString("en-US")}, cache write ${(u.cache_write_tokens || 0).toLocaleString("en-US")})`);
  field(dl, "Cost", fmtCost(u.cost));
  field(dl, "Forked", task.is_forked ? "yes" : "no");
  field(dl, "Resumes", String(task.resume_count));
  field(dl, "Prompt", text("last_prompt") || text("prompt"));
  $("detail-result-box").hidden = !text("result");
  $("detail-result").textContent = text("result") || "";
  $("detail-error-box").hidden = !text("error");
  $("detail-error").textContent = text("error") || "";
  const fork = $("detail-fork");
  fork.replaceChildren();
  const stats = task.fork_stats || {};
  for (const [name, text] of forkStatLines(stats)) field(fork, name, text);
  $("detail-fork-box").hidden = Object.keys(stats).length === 0;
  $("cancel").hidden = !ACTIVE.has(task.status);
}

async function loadFull(id) {
  try {
    const response = await api(`/v1/tasks/${encodeURIComponent(id)}`);
    if (!response.ok) return;
    const task = await response.json();
    if (state.detailId !== id) return;
    state.full = task;
    renderDetail(id);
  } catch (err) {
    // the live copy stays shown; the banner tells when the service is down
  }
}

async function loadMessages(id) {
  const box = $("detail-messages");
  box.replaceChildren(el("p", "empty", "Loading…"));
  try {
    const response = await api(`/v1/tasks/${encodeURIComponent(id)}/messages?full_session=true`);
    const body = await response.json();
    if (!response.ok) throw new Error(body.detail || `HTTP ${response.status}`);
    if (state.detailId !== id) return;
    box.replaceChildren();
    if (!body.messages.length) box.append(el("p", "empty", "No messages yet."));
    for (const m of body.messages) {
      const item = el("div", "msg");
      item.append(el("div", "who", `${m.role}${m.agent ? ` · ${m.agent}` : ""} · ${fmtTime(m.created_at)}`));
      for (const part of m.parts) {
        if (part.type === "text" || part.type === "reasoning") {
          item.append(el("pre", part.type, part.text));
        } else if (part.type === "tool") {
          item.append(el("pre", "tool", `⚙ ${part.tool} [${part.status}]${part.output ? `\n${part.output}` : ""}`));
        }
      }
      if (m.error) item.append(el("pre", "error", m.error));
      box.append(item);
    }
  } catch (err) {
    if (state.detailId === id) box.replaceChildren(el("p", "error", `Could not load the conversation: ${err.message}`));
  }
}

function openDetail(id) {
  state.detailId = id;
  $("cancel-msg").textContent = "";
  state.full = null;
  renderDetail(id);
  const dialog = $("detail");
  if (!dialog.open) dialog.showModal();
  loadFull(id);
  loadMessages(id);
}

function closeDetail() {
  const id = state.detailId;
  state.detailId = null;
  const dialog = $("detail");
  if (dialog.open) dialog.close();
  const row = id && document.querySelector(`.row[data-id="${CSS.escape(id)}"]`);
  if (row) row.focus();
}

async function cancelTask() {
  const id = state.detailId;
  if (!id) return;
  const button = $("cancel");
  button.disabled = true;
  $("cancel-msg").textContent = "Cancelling…";
  try {
    const response = await api(`/v1/tasks/${encodeURIComponent(id)}/cancel`, { method: "POST" });
    const body = await response.json();
    if (response.ok) {
      state.full = body;
      // the stream may have brought a newer copy (or the task's clear) before this answer
      const shown = state.tasks.get(body.id);
      if (shown && shown.updated_at <= body.updated_at) state.tasks.set(body.id, body);
      $("cancel-msg").textContent = "Cancelled.";
      renderDetail(id);
      queueRender();
    } else {
      $("cancel-msg").textContent = body.detail || `HTTP ${response.status}`;
    }
  } catch (err) {
    $("cancel-msg").textContent = `Could not cancel: ${err.message}`;
  } finally {
    button.disabled = false;
  }
}

// -- the token --------------------------------------------------------------------------------

function forgetToken(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  if (state.controller) state.controller.abort();
  state.controller = null;
  clearTimeout(state.retryTimer);
  setConn("denied", "Not connected");
  $("main").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message || "";
  $("token").focus();
}

function start() {
  $("login").hidden = true;
  $("main").hidden = false;
  state.lastEventId = null;
  connect();
}

// -- wiring -----------------------------------------------------------------------------------

function rowsInOrder() {
  return [...document.querySelectorAll("#tree .row")];
}

document.addEventListener("DOMContentLoaded", () => {
  // a token given in the URL fragment (never sent to a server) is taken once, then hidden
  const hash = new URLSearchParams(location.hash.slice(1));
  if (hash.get("token")) {
    sessionStorage.setItem(TOKEN_KEY, hash.get("token"));
    history.replaceState(null, "", location.pathname + location.search);
  }
  $("login").addEventListener("submit", (event) => {
    event.preventDefault();
    const value = $("token").value.trim();
    if (!value) return;
    sessionStorage.setItem(TOKEN_KEY, value);
    $("token").value = "";
    start();
  });
  $("logout").addEventListener("click", () => forgetToken(""));
  $("status-filter").addEventListener("change", render);
  $("q").addEventListener("input", render);
  $("tree").addEventListener("click", (event) => {
    const row = event.target.closest(".row");
    if (row) openDetail(row.dataset.id);
  });
  $("tree").addEventListener("keydown", (event) => {
    const row = event.target.closest(".row");
    if (!row) return;
    if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      openDetail(row.dataset.id);
    } else if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      event.preventDefault();
      const rows = rowsInOrder();
      const next = rows[rows.indexOf(row) + (event.key === "ArrowDown" ? 1 : -1)];
      if (next) next.focus();
    } else if (event.key === "Home" || event.key === "End") {
      event.preventDefault();
      const rows = rowsInOrder();
      (event.key === "Home" ? rows[0] : rows[rows.length - 1]).focus();
    }
  });
  $("detail-close").addEventListener("click", closeDetail);
  $("detail").addEventListener("close", () => {
    if (state.detailId) closeDetail();
  });
  $("cancel").addEventListener("click", cancelTask);
  setInterval(tick, 1000);
  if (token()) start();
  else forgetToken("");
});
