// The console's one script. Every page is the same document; `boot` asks
// who is signed in and shows the page the path names. Text that comes from
// the server (reasons, summaries, parameters, comments, names) is only ever
// set with textContent: nothing of it becomes markup, a URL or a header.
"use strict";

const STREAM_LIMIT = 200;
const INBOX_REFRESH_MS = 5000;
const RELATIVE_REFRESH_MS = 15000;

let me = null;

// ---- small helpers -------------------------------------------------------

function $(id) {
  return document.getElementById(id);
}

// An element with a class, text and children; attributes only from the
// script's own constants.
function el(tag, className, text, children) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const child of children || []) {
    if (child) node.appendChild(child);
  }
  return node;
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
}

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function api(path, options) {
  const init = { method: "GET", credentials: "same-origin", headers: {} };
  if (options && options.body !== undefined) {
    init.method = options.method || "POST";
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(options.body);
  } else if (options && options.method) {
    init.method = options.method;
  }
  if (init.method !== "GET" && me) init.headers["X-CSRF-Token"] = me.csrf;
  const response = await fetch(path, init);
  if (response.status === 204) return null;
  let body = null;
  try {
    body = await response.json();
  } catch (_) {
    body = null;
  }
  if (!response.ok) {
    const message = body && body.message ? body.message : `request failed (${response.status})`;
    if (response.status === 401 && path !== "/api/session" && path !== "/api/me") {
      showSignIn("Your session has ended: sign in again.");
    }
    throw new ApiError(response.status, body && body.code, message);
  }
  return body;
}

const OUTCOMES = {
  approve: { label: "Approved", icon: "✓", cls: "ok" },
  reject: { label: "Rejected", icon: "✕", cls: "bad" },
  escalated: { label: "Escalated", icon: "◷", cls: "wait" },
  timed_out: { label: "Timed out", icon: "◴", cls: "muted" },
  cancelled: { label: "Cancelled", icon: "⊘", cls: "muted" },
  pending: { label: "Pending", icon: "…", cls: "muted" },
};

function enumName(value, prefix) {
  if (!value) return "";
  return String(value).replace(prefix, "").toLowerCase();
}

// The outcome a proposal shows: its state while undecided, else its decision.
function outcomeOf(proposal) {
  const state = enumName(proposal.state, "PROPOSAL_STATE_");
  if (state === "escalated" || state === "cancelled") return state;
  if (state === "pending" || state === "reviewing") return "pending";
  const decision = proposal.decision;
  return decision ? enumName(decision.outcome, "DECISION_OUTCOME_") : "pending";
}

function outcomeBadge(outcome, label) {
  const known = OUTCOMES[outcome] || { label: outcome || "unknown", icon: "?", cls: "muted" };
  const badge = el("span", `badge ${known.cls}`);
  badge.appendChild(el("span", "icon", known.icon)).setAttribute("aria-hidden", "true");
  badge.appendChild(el("span", "", label || known.label));
  return badge;
}

function relative(date) {
  const seconds = Math.round((Date.now() - date.getTime()) / 1000);
  const future = seconds < 0;
  const s = Math.abs(seconds);
  let text;
  if (s < 5) return "just now";
  if (s < 60) text = `${s}s`;
  else if (s < 3600) text = `${Math.floor(s / 60)}m`;
  else if (s < 86400) text = `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  else text = `${Math.floor(s / 86400)}d`;
  return future ? `in ${text}` : `${text} ago`;
}

// A <time> that keeps saying how long ago (or how soon) it is.
function timeEl(iso) {
  const node = el("time", "when");
  if (!iso) return node;
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return node;
  node.dateTime = date.toISOString();
  node.title = date.toLocaleString();
  node.textContent = relative(date);
  return node;
}

setInterval(() => {
  for (const node of document.querySelectorAll("time.when[datetime]")) {
    node.textContent = relative(new Date(node.dateTime));
  }
}, RELATIVE_REFRESH_MS);

function blast(value) {
  return enumName(value, "BLAST_RADIUS_").replace("_", " ");
}

function proposalLink(id, text) {
  const link = el("a", "", text || id);
  link.href = `/proposals/${encodeURIComponent(id)}`;
  return link;
}

function field(label, value, className) {
  const row = el("div", `field ${className || ""}`);
  row.appendChild(el("dt", "", label));
  const dd = el("dd", "");
  if (value instanceof Node) dd.appendChild(value);
  else dd.textContent = value === undefined || value === null || value === "" ? "—" : String(value);
  row.appendChild(dd);
  return row;
}

// The queue's depth as last sampled: how many wait, how long the oldest has,
// and when it was read.
function queueDepth(queue) {
  if (!queue) return "not sampled yet";
  const node = el("span", "");
  let text = `${queue.depth} waiting`;
  if (queue.depth) text += `, the oldest for ${Math.round(queue.oldest_age_ms / 1000)}s`;
  node.appendChild(el("span", "queue-depth", text));
  node.appendChild(document.createTextNode(" · sampled "));
  node.appendChild(timeEl(new Date(queue.sampled_at).toISOString()));
  return node;
}

function failedGates(decision) {
  if (!decision || !decision.gates) return [];
  return decision.gates.filter((g) => !g.passed).map((g) => g.gate);
}

// What a decision says: the reason, or for an agent key the terse message.
function message(decision) {
  if (!decision) return "";
  return decision.reason || decision.agent_message || "";
}

function gatesList(decision) {
  const list = el("ul", "gates");
  for (const gate of (decision && decision.gates) || []) {
    const item = el("li", gate.passed ? "gate pass" : "gate fail");
    item.appendChild(el("span", "icon", gate.passed ? "✓" : "✕")).setAttribute("aria-hidden", "true");
    item.appendChild(el("strong", "", gate.gate));
    item.appendChild(el("span", "sr", gate.passed ? " passed" : " failed"));
    if (gate.detail) item.appendChild(el("span", "detail", gate.detail));
    list.appendChild(item);
  }
  return list;
}

function votesList(votes) {
  const list = el("ul", "votes");
  for (const vote of votes || []) {
    const verdict = enumName(vote.verdict, "VERDICT_");
    const item = el("li", verdict === "approve" ? "vote ok" : "vote bad");
    item.appendChild(el("strong", "", vote.person || vote.key_id));
    item.appendChild(el("span", "", verdict === "approve" ? " approved" : " rejected"));
    if (vote.at) {
      item.appendChild(el("span", "", " · "));
      item.appendChild(timeEl(vote.at));
    }
    if (vote.comment) item.appendChild(el("q", "comment", vote.comment));
    list.appendChild(item);
  }
  return list;
}

// ---- pages ---------------------------------------------------------------

const PAGES = ["signin", "stream", "inbox", "proposal", "decisions", "tenant"];
let leavePage = null;

function showPage(name) {
  $("loading").hidden = true;
  for (const page of PAGES) $(`${page}-page`).hidden = page !== name;
  for (const link of document.querySelectorAll("#nav a")) {
    if (link.dataset.page === name) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

function showSignIn(note) {
  if (leavePage) {
    leavePage();
    leavePage = null;
  }
  me = null;
  $("nav").hidden = true;
  $("signout").hidden = true;
  $("who").textContent = "";
  $("signin-error").textContent = note || "";
  showPage("signin");
  $("signin-key").focus();
}

function route() {
  const path = window.location.pathname;
  const proposal = path.match(/^\/proposals\/([^/]+)$/);
  if (proposal) return ["proposal", decodeURIComponent(proposal[1])];
  const name = path.replace(/^\//, "");
  if (me.pages.includes(name)) return [name, null];
  return [me.pages[0] || "proposal", null];
}

function signedIn(who) {
  me = who;
  $("who").textContent = `${who.name} · ${who.role}${who.agent ? " (agent)" : ""} · ${who.tenant}`;
  $("nav").hidden = false;
  for (const link of document.querySelectorAll("#nav a")) {
    link.hidden = !who.pages.includes(link.dataset.page);
  }
  $("signout").hidden = false;
  const [page, arg] = route();
  if (page !== "proposal" && window.location.pathname !== `/${page}`) {
    history.replaceState(null, "", `/${page}`);
  }
  const open = { stream: openStream, inbox: openInbox, proposal: openProposal, decisions: openDecisions, tenant: openTenant }[page];
  showPage(page);
  if (page === "proposal" && !arg) {
    $("proposal-status").textContent = "This key's role has no pages here: open a proposal by its link.";
    return;
  }
  leavePage = open(arg) || null;
}

// ---- Stream --------------------------------------------------------------

function streamRow(note) {
  const proposal = note.proposal || {};
  const spec = proposal.spec || {};
  const decision = proposal.decision;
  const kind = enumName(note.event, "EVENT_KIND_");
  const row = el("li", `event ${(OUTCOMES[note.outcome] || {}).cls || "muted"}`);
  row.dataset.proposal = proposal.id || "";
  const head = el("div", "event-head");
  head.appendChild(outcomeBadge(note.outcome));
  if (kind === "vote" || kind === "suppressed" || kind === "breaker_tripped") {
    head.appendChild(el("span", "kind", kind.replace("_", " ")));
  }
  head.appendChild(el("strong", "action", spec.action));
  head.appendChild(el("span", "target", spec.target));
  head.appendChild(timeEl(note.emitted_at));
  row.appendChild(head);
  const facts = el("div", "event-facts");
  facts.appendChild(el("span", "", `blast: ${blast(spec.blast_radius) || "—"}`));
  facts.appendChild(el("span", "", `operator: ${spec.operator || "—"}`));
  const failed = failedGates(decision);
  if (failed.length) facts.appendChild(el("span", "failed", `failed: ${failed.join(", ")}`));
  row.appendChild(facts);
  const text = message(decision);
  if (text) row.appendChild(el("p", "reason", text));
  const link = proposalLink(proposal.id, "Details");
  link.className = "more";
  row.appendChild(link);
  return row;
}

function openStream() {
  const form = $("stream-filters");
  const list = $("stream-list");
  const status = $("stream-status");
  let source = null;
  let retry = null;

  function connect(fresh) {
    if (source) source.close();
    if (fresh) {
      clear(list);
      $("stream-empty").hidden = false;
    }
    const params = new URLSearchParams(new FormData(form));
    for (const [key, value] of [...params]) if (!value) params.delete(key);
    source = new EventSource(`/api/stream?${params}`);
    status.textContent = "Connecting…";
    source.onopen = () => {
      status.textContent = "Live";
      status.className = "status live";
    };
    source.addEventListener("notification", (event) => {
      const note = JSON.parse(event.data);
      $("stream-empty").hidden = true;
      list.insertBefore(streamRow(note), list.firstChild);
      while (list.childElementCount > STREAM_LIMIT) list.removeChild(list.lastChild);
    });
    source.addEventListener("end", (event) => {
      const end = JSON.parse(event.data);
      source.close();
      if (end.code === "UNAUTHENTICATED") {
        showSignIn("Your session has ended: sign in again.");
        return;
      }
      status.className = "status";
      status.textContent = `The stream ended: ${end.message}. Reconnecting…`;
      retry = setTimeout(() => connect(false), 2000);
    });
    source.onerror = () => {
      status.className = "status";
      if (source.readyState === EventSource.CLOSED) {
        status.textContent = "Disconnected. Reconnecting…";
        api("/api/me").then(
          () => {
            retry = setTimeout(() => connect(true), 2000);
          },
          () => {}
        );
      } else {
        status.textContent = "Reconnecting…";
      }
    };
  }

  form.onsubmit = (event) => {
    event.preventDefault();
    connect(true);
  };
  connect(true);
  return () => {
    if (source) source.close();
    clearTimeout(retry);
  };
}

// ---- Inbox ---------------------------------------------------------------

function escalationCard(escalation) {
  const proposal = escalation.proposal || {};
  const spec = proposal.spec || {};
  const decision = proposal.decision || {};
  const card = el("article", "card escalation");
  card.dataset.proposal = proposal.id;
  const title = el("h2", "", null, [outcomeBadge("escalated"), el("span", "action", ` ${spec.action} `), el("span", "target", spec.target)]);
  card.appendChild(title);
  const facts = el("dl", "facts");
  facts.appendChild(field("Proposal", proposalLink(proposal.id)));
  facts.appendChild(field("Blast radius", blast(spec.blast_radius)));
  facts.appendChild(field("Operator", spec.operator));
  facts.appendChild(field("Submitted by", proposal.submitted_by_person || proposal.submitted_by));
  facts.appendChild(field("Route", escalation.route_id));
  const approvals = (escalation.votes || []).filter((v) => enumName(v.verdict, "VERDICT_") === "approve").length;
  facts.appendChild(field("Approvals", `${approvals} of ${escalation.approvals_required}`));
  facts.appendChild(field("Time left", timeEl(escalation.expires_at)));
  card.appendChild(facts);
  card.appendChild(el("h3", "", "Reason"));
  card.appendChild(el("p", "reason", spec.reason));
  if (spec.context_summary) {
    card.appendChild(el("h3", "", "Summary"));
    card.appendChild(el("p", "reason", spec.context_summary));
  }
  if (message(decision)) card.appendChild(el("p", "note", message(decision)));
  card.appendChild(el("h3", "", "Gates"));
  card.appendChild(gatesList(decision));
  if ((escalation.votes || []).length) {
    card.appendChild(el("h3", "", "Votes"));
    card.appendChild(votesList(escalation.votes));
  }
  if (me.agent) return card;
  const form = el("form", "vote-form");
  const id = `comment-${proposal.id}`;
  const label = el("label", "", "Comment");
  label.htmlFor = id;
  const comment = el("textarea", "");
  comment.id = id;
  comment.rows = 2;
  const approve = el("button", "approve", "Approve");
  approve.type = "submit";
  approve.value = "approve";
  const deny = el("button", "deny", "Deny");
  deny.type = "submit";
  deny.value = "reject";
  const result = el("p", "error");
  result.setAttribute("role", "alert");
  form.appendChild(label);
  form.appendChild(comment);
  form.appendChild(el("div", "buttons", null, [approve, deny]));
  form.appendChild(result);
  form.onsubmit = async (event) => {
    event.preventDefault();
    const verdict = event.submitter ? event.submitter.value : "reject";
    approve.disabled = deny.disabled = true;
    result.className = "error";
    result.textContent = "";
    try {
      const answer = await api(`/api/proposals/${encodeURIComponent(proposal.id)}/resolve`, {
        body: { verdict, comment: comment.value },
      });
      const outcome = outcomeOf(answer);
      result.className = "done";
      result.textContent =
        outcome === "escalated" ? "Your vote is recorded; more approvals are needed." : `Decided: ${(OUTCOMES[outcome] || {}).label || outcome}.`;
    } catch (error) {
      result.textContent = error.message;
      approve.disabled = deny.disabled = false;
    }
  };
  card.appendChild(form);
  return card;
}

function openInbox() {
  const list = $("inbox-list");
  const status = $("inbox-status");
  let timer = null;

  async function load() {
    try {
      const answer = await api("/api/escalations");
      const escalations = answer.escalations || [];
      status.textContent = `${escalations.length} open${answer.next_page_token ? " (and more)" : ""}`;
      $("inbox-empty").hidden = escalations.length > 0;
      // Cards someone is typing in or has just voted on stay as they are.
      const seen = new Set();
      for (const escalation of escalations) {
        const id = escalation.proposal.id;
        seen.add(id);
        if (!list.querySelector(`[data-proposal="${CSS.escape(id)}"]`)) list.appendChild(escalationCard(escalation));
      }
      for (const card of [...list.children]) {
        const busy = card.contains(document.activeElement) || card.querySelector(".done");
        if (!seen.has(card.dataset.proposal) && !busy) card.remove();
      }
    } catch (error) {
      status.textContent = error.message;
    }
  }

  load();
  timer = setInterval(load, INBOX_REFRESH_MS);
  return () => clearInterval(timer);
}

// ---- Proposal ------------------------------------------------------------

function parametersText(parameters) {
  if (!parameters || Object.keys(parameters).length === 0) return "";
  return JSON.stringify(parameters, null, 2);
}

async function openProposal(id) {
  const body = $("proposal-body");
  const status = $("proposal-status");
  clear(body);
  $("proposal-title").textContent = `Proposal ${id}`;
  status.textContent = "Loading…";
  let proposal;
  try {
    proposal = await api(`/api/proposals/${encodeURIComponent(id)}`);
  } catch (error) {
    status.textContent = error.message;
    return null;
  }
  status.textContent = "";
  const spec = proposal.spec || {};
  const decision = proposal.decision;
  const outcome = outcomeOf(proposal);
  const head = el("div", "card");
  head.appendChild(el("p", "big", null, [outcomeBadge(outcome), el("span", "action", ` ${spec.action} `), el("span", "target", spec.target)]));
  if (message(decision)) head.appendChild(el("p", "reason", message(decision)));
  body.appendChild(head);

  const specCard = el("div", "card");
  specCard.appendChild(el("h2", "", "Spec"));
  const facts = el("dl", "facts");
  facts.appendChild(field("Class", enumName(spec.class, "OPERATION_CLASS_")));
  facts.appendChild(field("Blast radius", blast(spec.blast_radius)));
  facts.appendChild(field("Operator", spec.operator));
  facts.appendChild(field("Incident", spec.incident_id));
  facts.appendChild(field("Submitted by", proposal.submitted_by_person || proposal.submitted_by));
  facts.appendChild(field("Submitted", timeEl(proposal.created_at)));
  facts.appendChild(field("Suppressed retries", proposal.suppressed_retries));
  specCard.appendChild(facts);
  specCard.appendChild(el("h3", "", "Reason"));
  specCard.appendChild(el("p", "reason", spec.reason));
  if (spec.context_summary) {
    specCard.appendChild(el("h3", "", "Summary"));
    specCard.appendChild(el("p", "reason", spec.context_summary));
  }
  if (spec.rollback_plan) {
    specCard.appendChild(el("h3", "", "Rollback plan"));
    specCard.appendChild(el("p", "reason", spec.rollback_plan));
  }
  const parameters = parametersText(spec.parameters);
  if (parameters) {
    specCard.appendChild(el("h3", "", "Parameters"));
    specCard.appendChild(el("pre", "parameters", parameters));
  }
  body.appendChild(specCard);

  if (decision) {
    const decisionCard = el("div", "card");
    decisionCard.appendChild(el("h2", "", "Decision"));
    const dl = el("dl", "facts");
    dl.appendChild(field("Outcome", outcomeBadge(outcome)));
    dl.appendChild(field("Decided", decision.decided_at ? timeEl(decision.decided_at) : ""));
    dl.appendChild(field("Reviewer", decision.reviewer));
    dl.appendChild(field("SOP", decision.sop_id ? `${decision.sop_id} v${decision.sop_version}` : ""));
    dl.appendChild(field("Route", decision.route_id));
    dl.appendChild(field("Audit sequence", decision.sequence || ""));
    dl.appendChild(field("Audit digest", decision.digest, "mono"));
    decisionCard.appendChild(dl);
    if (decision.summary) {
      decisionCard.appendChild(el("h3", "", "Summary"));
      decisionCard.appendChild(el("p", "reason", decision.summary));
    }
    if ((decision.gates || []).length) {
      decisionCard.appendChild(el("h3", "", "Gates"));
      decisionCard.appendChild(gatesList(decision));
    }
    if ((decision.votes || []).length) {
      decisionCard.appendChild(el("h3", "", "Votes"));
      decisionCard.appendChild(votesList(decision.votes));
    }
    body.appendChild(decisionCard);
  }
  return null;
}

// ---- Decisions -----------------------------------------------------------

function decisionFilters() {
  const params = new URLSearchParams(new FormData($("decisions-filters")));
  for (const [key, value] of [...params]) if (!value) params.delete(key);
  return params;
}

function decisionRow(entry) {
  const decision = entry.decision || {};
  const row = el("tr", "");
  row.appendChild(el("td", "num", entry.sequence));
  const outcome = el("td", "");
  outcome.appendChild(outcomeBadge(enumName(decision.outcome, "DECISION_OUTCOME_")));
  row.appendChild(outcome);
  const when = el("td", "");
  when.appendChild(timeEl(decision.decided_at));
  row.appendChild(when);
  const action = el("td", "");
  action.appendChild(proposalLink(entry.proposal_id, entry.action));
  row.appendChild(action);
  row.appendChild(el("td", "", entry.target));
  row.appendChild(el("td", "", entry.operator));
  row.appendChild(el("td", "reason", message(decision)));
  return row;
}

function openDecisions() {
  const rows = $("decisions-rows");
  const status = $("decisions-status");
  const more = $("decisions-more");
  let token = "";

  async function load(fresh) {
    const params = decisionFilters();
    const exportParams = new URLSearchParams(params);
    exportParams.set("format", "csv");
    $("export-csv").href = `/api/decisions/export?${exportParams}`;
    exportParams.set("format", "jsonl");
    $("export-jsonl").href = `/api/decisions/export?${exportParams}`;
    if (fresh) token = "";
    if (token) params.set("page_token", token);
    status.textContent = "Loading…";
    try {
      const answer = await api(`/api/decisions?${params}`);
      if (fresh) clear(rows);
      for (const entry of answer.entries || []) rows.appendChild(decisionRow(entry));
      token = answer.next_page_token || "";
      more.hidden = !token;
      $("decisions-table").hidden = rows.childElementCount === 0;
      $("decisions-empty").hidden = rows.childElementCount > 0;
      status.textContent = `${rows.childElementCount} shown`;
    } catch (error) {
      status.textContent = error.message;
    }
  }

  $("decisions-filters").onsubmit = (event) => {
    event.preventDefault();
    load(true);
  };
  more.onclick = () => load(false);
  $("verify").onclick = async () => {
    const box = $("verify-result");
    box.hidden = false;
    clear(box);
    box.appendChild(el("p", "", "Verifying…"));
    try {
      const answer = await api("/api/verify");
      const v = answer.verification;
      clear(box);
      box.className = `card ${v.ok ? "ok-box" : "bad-box"}`;
      box.appendChild(
        el("p", "big", null, [
          outcomeBadge(v.ok ? "approve" : "reject", v.ok ? "Verified" : "Failed"),
          el("span", "", v.ok ? ` ${v.entries_checked} entries, chain intact` : ` ${enumName(v.failure, "VERIFY_FAILURE_")}`),
        ])
      );
      const dl = el("dl", "facts");
      dl.appendChild(field("Head digest", v.head_digest, "mono"));
      if (!v.ok) {
        dl.appendChild(field("First invalid sequence", v.first_invalid_sequence));
        dl.appendChild(field("Detail", v.detail));
        if (v.column) dl.appendChild(field("Column", v.column));
      }
      const c = answer.checkpoint;
      if (c) {
        dl.appendChild(field("Checkpoint size", c.size));
        dl.appendChild(field("Checkpoint head", c.head_digest, "mono"));
        dl.appendChild(field("Signed", timeEl(new Date(Number(c.signed_at_ms)).toISOString())));
        dl.appendChild(field("Public key", c.public_key, "mono"));
        dl.appendChild(field("Signature", c.signature, "mono"));
      } else {
        dl.appendChild(field("Checkpoint", "none: this server has no signing key"));
      }
      box.appendChild(dl);
    } catch (error) {
      clear(box);
      box.appendChild(el("p", "error", error.message));
    }
  };
  load(true);
  return null;
}

// ---- Tenant --------------------------------------------------------------

function table(headers, rows) {
  const t = el("table", "");
  const head = el("tr", "");
  for (const h of headers) {
    const th = el("th", "", h);
    th.scope = "col";
    head.appendChild(th);
  }
  t.appendChild(el("thead", "", null, [head]));
  const body = el("tbody", "");
  for (const cells of rows) body.appendChild(el("tr", "", null, cells.map((c) => el("td", "", c))));
  t.appendChild(body);
  return el("div", "table-wrap", null, [t]);
}

function labels(map) {
  return Object.entries(map || {})
    .map(([k, v]) => `${k}=${v}`)
    .join(", ");
}

async function openTenant() {
  const body = $("tenant-body");
  const status = $("tenant-status");
  clear(body);
  status.textContent = "Loading…";
  let t;
  try {
    t = await api("/api/tenant");
  } catch (error) {
    status.textContent = error.message;
    return null;
  }
  status.textContent = "";
  const summary = el("dl", "facts card");
  summary.appendChild(field("Tenant", t.tenant));
  summary.appendChild(field("Queue depth", queueDepth(t.queue)));
  summary.appendChild(field("Open escalations", `${t.open_escalations}${t.more_escalations ? "+" : ""}`));
  summary.appendChild(field("Routes", t.routes.length));
  body.appendChild(summary);
  body.appendChild(el("h2", "", "Open breakers"));
  if (t.breakers.length) {
    const list = el("ul", "breakers");
    for (const operator of t.breakers) {
      const item = el("li", "card breaker");
      item.appendChild(el("strong", "", operator || "(no operator)"));
      const reset = el("button", "", "Reset");
      reset.type = "button";
      const result = el("span", "error");
      result.setAttribute("role", "alert");
      reset.onclick = async () => {
        reset.disabled = true;
        try {
          await api("/api/breakers/reset", { body: { operator } });
          result.className = "done";
          result.textContent = " Reset: the next proposal is reviewed.";
        } catch (error) {
          result.textContent = ` ${error.message}`;
          reset.disabled = false;
        }
      };
      item.appendChild(el("span", "", " "));
      item.appendChild(reset);
      item.appendChild(result);
      list.appendChild(item);
    }
    body.appendChild(list);
  } else {
    body.appendChild(el("p", "empty", "No breaker is open: every operator's proposals are reviewed as usual."));
  }
  body.appendChild(el("h2", "", "SOPs"));
  body.appendChild(
    t.sops.length
      ? table(["Id", "Action", "Title", "Version", "Max blast radius", "Selector"], t.sops.map((s) => [s.id, s.action, s.title, s.version, blast(s.max_blast_radius), labels(s.selector)]))
      : el("p", "empty", "No SOPs: put one with `countersign sop put` so proposals have a procedure to follow.")
  );
  body.appendChild(el("h2", "", "Targets"));
  body.appendChild(
    t.targets.length
      ? table(["Id", "Status", "Labels"], t.targets.map((x) => [x.id, enumName(x.status, "TARGET_STATUS_"), labels(x.labels)]))
      : el("p", "empty", "No targets: put them with `countersign target put`.")
  );
  body.appendChild(el("h2", "", "Routes"));
  body.appendChild(
    t.routes.length
      ? table(["Id", "Approvals", "Approver roles", "Actions"], t.routes.map((r) => [r.id, r.approvals_required, (r.approver_roles || []).join(", "), ((r.match || {}).actions || []).join(", ")]))
      : el("p", "empty", "No routes: nothing escalates to people. Add one with `countersign route put`.")
  );
  return null;
}

// ---- sign in and out -----------------------------------------------------

async function boot() {
  $("signin-form").onsubmit = async (event) => {
    event.preventDefault();
    const input = $("signin-key");
    $("signin-error").textContent = "";
    try {
      const who = await api("/api/session", { body: { key: input.value } });
      input.value = "";
      signedIn(who);
    } catch (error) {
      $("signin-error").textContent = error.message;
    }
  };
  $("signout").onclick = async () => {
    try {
      await api("/api/session/end", { method: "POST" });
    } catch (_) {
      // Signed out either way.
    }
    showSignIn("Signed out.");
  };
  try {
    signedIn(await api("/api/me"));
  } catch (error) {
    showSignIn(error.status === 401 ? "" : error.message);
  }
}

document.addEventListener("DOMContentLoaded", boot);
