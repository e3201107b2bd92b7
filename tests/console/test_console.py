"""The console in headless Chromium against the real binary: sign-in and
sessions, the live Stream, the Inbox's four eyes, untrusted text, CSRF, the
auditor's export and verification, the agent's terse view, and every page at
desktop and phone widths (screenshots in target/console-screenshots/)."""

import json
import re
import time

import pytest
from playwright.sync_api import Page, expect

import countersign
from conftest import DESKTOP, PHONE, screenshot
from countersign.v1 import policy_service_pb2, policy_service_pb2_grpc, types_pb2
from support import unique

ESCALATED_ACTION = "console_escalated_restart"
# Markup in untrusted text: executed, it would set window.__xss or add an <img>.
SCRIPT = '<script>window.__xss = "script"</script>'
ONERROR = '<img src="x" onerror="window.__xss = \'onerror\'">'


def rejected_spec(server, **changes):
    """A spec no SOP covers: the reviewers reject it at once."""
    spec = dict(
        action=unique("console_unknown"),
        target=server.target(),
        blast_radius="single_device",
        reason=unique("reason"),
    )
    spec.update(changes)
    return countersign.Spec(**spec)


def wait_for_state(server, key, proposal_id, state, within=30.0):
    with countersign.Client(server.endpoint, key) as client:
        deadline = time.monotonic() + within
        while True:
            proposal = client.get(proposal_id)
            if proposal.state == state or time.monotonic() > deadline:
                assert proposal.state == state, proposal
                return proposal
            time.sleep(0.05)


def assert_no_markup_ran(page: Page) -> None:
    assert page.evaluate("window.__xss") is None
    assert page.locator('img[src="x"]').count() == 0
    assert page.locator("main script").count() == 0


@pytest.fixture(scope="module")
def route(server):
    """Every proposal of ESCALATED_ACTION waits for one person's approval."""
    server.put_sop("SOP-CONSOLE-ESCALATED", ESCALATED_ACTION, selector={"env": "pytest"})
    route = types_pb2.Route(
        id="console-escalate", match=types_pb2.RouteMatch(actions=[ESCALATED_ACTION]), approvals_required=1
    )
    with server.channel() as channel:
        policy = policy_service_pb2_grpc.PolicyServiceStub(channel)
        policy.PutRoute(policy_service_pb2.PutRouteRequest(route=route), metadata=server.auth())
    return route


@pytest.fixture(scope="module")
def bob(server):
    """An admin who submits (and so may not countersign his own proposals)."""
    return server.key("admin", "--person", "bob@example.com")


@pytest.fixture(scope="module")
def ann(server):
    return server.key("oncall", "--person", "ann@example.com")


def escalate(server, key, **changes):
    """A proposal of `key`'s that waits in the inbox."""
    spec = dict(
        action=ESCALATED_ACTION,
        target=server.target(),
        blast_radius="single_device",
        reason=unique("reason"),
        idempotency_key=unique("escalated"),
    )
    spec.update(changes)
    with countersign.Client(server.endpoint, key) as client:
        proposal_id = client.submit(countersign.Spec(**spec)).proposal.id
    wait_for_state(server, key, proposal_id, "escalated")
    return proposal_id


def test_sign_in_sets_an_http_only_strict_cookie_without_the_key_and_sign_out_revokes_it(server, browser, sign_in):
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    response = page.goto(server.console_url + "/signin")
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy and "unsafe-inline" not in policy
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"
    screenshot(page, "signin")
    page.fill("#signin-key", "cs_not_a_key")
    page.click("#signin-form button")
    expect(page.locator("#signin-error")).to_have_text("missing or invalid API key")
    context.close()

    key = server.key("oncall", "--person", "carol@example.com")
    page = sign_in(key, "/stream")
    expect(page.locator("#who")).to_contain_text("oncall")
    cookies = page.context.cookies()
    assert [c["name"] for c in cookies] == ["countersign_session"]
    cookie = cookies[0]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert key not in cookie["value"] and cookie["value"] not in key
    assert page.evaluate("document.cookie") == "", "script cannot read the session"

    page.click("#signout")
    expect(page.locator("#signin-page")).to_be_visible()
    expect(page.locator("#signout")).to_be_hidden()
    expect(page.locator("#nav")).to_be_hidden()
    # The revoked session's cookie opens nothing, in any browser.
    again = browser.new_context()
    again.add_cookies([cookie])
    assert again.request.get(server.console_url + "/api/me").status == 401
    again.close()


def test_a_proposal_submitted_through_grpc_appears_on_the_stream_within_two_seconds(server, sign_in, coordinator_key):
    page = sign_in(server.key("oncall"), "/stream")
    expect(page.locator("#stream-status")).to_have_text("Live")
    spec = rejected_spec(server, operator=unique("operator"))
    with countersign.Client(server.endpoint, coordinator_key) as client:
        client.submit(spec)
    row = page.locator("#stream-list li", has_text=spec.target)
    expect(row).to_be_visible(timeout=2000)
    expect(row.locator(".badge")).to_have_text("✕Rejected")
    expect(row).to_contain_text(spec.operator)
    expect(row).to_contain_text("failed:")
    screenshot(page, "stream")

    # Filtered by another action, it is gone; by its own, it comes back on
    # the next decision.
    page.fill("#stream-filters input[name=action]", spec.action)
    page.click("#stream-filters button")
    expect(page.locator("#stream-list li")).to_have_count(0)
    expect(page.locator("#stream-empty")).to_be_visible()
    expect(page.locator("#stream-status")).to_have_text("Live")
    other = rejected_spec(server)
    again = rejected_spec(server, action=spec.action)
    with countersign.Client(server.endpoint, coordinator_key) as client:
        client.submit(other)
        client.submit(again)
    expect(page.locator("#stream-list li", has_text=again.target)).to_be_visible(timeout=2000)
    expect(page.locator("#stream-list li", has_text=other.target)).to_have_count(0)


@pytest.fixture(scope="module")
def coordinator_key(server):
    return server.key("coordinator")


def test_an_escalation_waits_in_the_inbox_the_submitter_cannot_approve_and_a_second_person_does(
    server, route, bob, ann, sign_in
):
    proposal_id = escalate(server, bob, reason=f"drain first {SCRIPT} then {ONERROR}", context_summary=ONERROR)

    bobs = sign_in(bob, "/inbox")
    card = bobs.locator(f'article[data-proposal="{proposal_id}"]')
    expect(card).to_be_visible()
    expect(card).to_contain_text("0 of 1")
    expect(card.locator(".gate")).to_have_count(5)
    card.locator("textarea").fill("mine, looks fine")
    card.locator("button.approve").click()
    expect(card.locator("[role=alert]")).to_contain_text("submitted this proposal")
    screenshot(bobs, "inbox")

    anns = sign_in(ann, "/inbox")
    card = anns.locator(f'article[data-proposal="{proposal_id}"]')
    expect(card).to_be_visible()
    card.locator("textarea").fill(f"checked {SCRIPT} {ONERROR}")
    card.locator("button.approve").click()
    expect(card.locator(".done")).to_have_text("Decided: Approved.")

    for page in (anns, bobs):
        page.goto(f"{server.console_url}/proposals/{proposal_id}")
        expect(page.locator("#proposal-body .big .badge")).to_have_text("✓Approved")
        expect(page.locator(".votes")).to_contain_text("ann@example.com approved")
    screenshot(anns, "proposal")
    # The same decision through gRPC.
    assert wait_for_state(server, bob, proposal_id, "approved").decision.votes[0].person == "ann@example.com"


def test_script_and_onerror_payloads_in_reasons_and_comments_render_as_text(server, route, bob, ann, sign_in, coordinator_key):
    stream = sign_in(ann, "/stream")
    expect(stream.locator("#stream-status")).to_have_text("Live")
    spec = rejected_spec(server, reason=f"{SCRIPT}{ONERROR}", context_summary=ONERROR, parameters={"note": "<b>bold</b><script>x()</script>"})
    with countersign.Client(server.endpoint, coordinator_key) as client:
        rejected = client.submit(spec).proposal.id
    row = stream.locator("#stream-list li", has_text=spec.target)
    expect(row).to_be_visible()
    assert_no_markup_ran(stream)

    escalated = escalate(server, bob, reason=f"{ONERROR} and {SCRIPT}")
    inbox = sign_in(ann, "/inbox")
    card = inbox.locator(f'article[data-proposal="{escalated}"]')
    expect(card.locator(".reason").first).to_have_text(f"{ONERROR} and {SCRIPT}")
    card.locator("textarea").fill(f"{SCRIPT}{ONERROR}")
    card.locator("button.deny").click()
    expect(card.locator(".done")).to_have_text("Decided: Rejected.")
    assert_no_markup_ran(inbox)

    page = inbox
    page.goto(f"{server.console_url}/proposals/{rejected}")
    expect(page.locator("#proposal-body .reason").nth(1)).to_have_text(f"{SCRIPT}{ONERROR}")
    expect(page.locator(".parameters")).to_contain_text("<b>bold</b><script>x()</script>")
    assert page.locator(".parameters b").count() == 0
    assert_no_markup_ran(page)
    page.goto(f"{server.console_url}/proposals/{escalated}")
    expect(page.locator(".votes .comment")).to_have_text(f"{SCRIPT}{ONERROR}")
    assert_no_markup_ran(page)


def test_a_cross_site_form_post_without_the_token_is_refused(server, route, bob, ann, sign_in):
    proposal_id = escalate(server, bob)
    page = sign_in(ann, "/inbox")
    target = f"{server.console_url}/api/proposals/{proposal_id}/resolve"

    # Another site's page posts a form to the console in the signed-in browser.
    attacker = f"""<!doctype html><form id=f method=post action="{target}">
        <input name=verdict value=approve><input name=comment value=pwned></form>
        <script>document.getElementById('f').submit()</script>"""
    page.route("http://attacker.test/", lambda route: route.fulfill(body=attacker, content_type="text/html"))
    with page.expect_response(target) as answer:
        page.goto("http://attacker.test/")
    assert answer.value.status in (401, 403), answer.value.status

    # The session's own cookie, but no CSRF token: refused as such.
    posted = page.context.request.post(target, form={"verdict": "approve", "comment": "pwned"})
    assert posted.status == 403 and posted.json()["code"] == "CSRF"
    as_json = page.context.request.post(target, data={"verdict": "approve"}, headers={"Content-Type": "application/json"})
    assert as_json.status == 403 and as_json.json()["code"] == "CSRF"

    assert wait_for_state(server, bob, proposal_id, "escalated").decision.votes == ()


def test_an_auditor_filters_exports_and_verifies_the_log(server, sign_in, coordinator_key):
    spec = rejected_spec(server, operator=unique("audited"))
    with countersign.Client(server.endpoint, coordinator_key) as client:
        proposal_id = client.submit(spec).proposal.id
    wait_for_state(server, coordinator_key, proposal_id, "rejected")

    page = sign_in(server.key("auditor"), "/decisions")
    expect(page.locator("#nav a:visible")).to_have_text(["Decisions"])
    page.fill("#decisions-filters input[name=operator]", spec.operator)
    link = page.locator(f'#decisions-rows a[href="/proposals/{proposal_id}"]')
    # The sequencer chains a decision a moment after it is made.
    deadline = time.monotonic() + 30
    while True:
        page.click("#decisions-filters button")
        expect(page.locator("#decisions-status")).not_to_have_text("Loading…")
        if link.count() or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    expect(link).to_be_visible()
    expect(page.locator("#decisions-rows tr")).to_have_count(1)
    expect(page.locator("#decisions-more")).to_be_hidden()

    with page.expect_download() as download:
        page.click("#export-csv")
    csv_text = open(download.value.path()).read()
    header, row = csv_text.strip().splitlines()
    assert header.startswith("sequence,digest,proposal_id,decided_at,outcome")
    assert proposal_id in row and spec.operator in row
    with page.expect_download() as download:
        page.click("#export-jsonl")
    lines = [json.loads(line) for line in open(download.value.path()).read().splitlines()]
    assert [entry["proposal_id"] for entry in lines] == [proposal_id]

    page.click("#verify")
    result = page.locator("#verify-result")
    expect(result).to_contain_text("Verified")
    expect(result).to_contain_text("Signature")
    assert result.locator(".mono dd").last.inner_text() != "—"
    screenshot(page, "decisions")


def test_an_agent_keys_session_sees_only_the_terse_messages(server, sign_in):
    agent = server.key("coordinator", "--agent", "--person", "owner@example.com")
    page = sign_in(agent, "/stream")
    expect(page.locator("#who")).to_contain_text("(agent)")
    expect(page.locator("#stream-status")).to_have_text("Live")
    spec = rejected_spec(server)
    with countersign.Client(server.endpoint, agent) as client:
        proposal_id = client.submit(spec).proposal.id
    full = wait_for_state(server, server.admin_key, proposal_id, "rejected").decision
    assert full.reason and full.agent_message and full.reason != full.agent_message

    row = page.locator("#stream-list li", has_text=spec.target)
    expect(row.locator(".reason")).to_have_text(full.agent_message)
    expect(row).not_to_contain_text(full.reason)
    expect(row.locator(".failed")).to_have_count(0)
    page.goto(f"{server.console_url}/proposals/{proposal_id}")
    expect(page.locator("#proposal-body")).to_contain_text(full.agent_message)
    expect(page.locator("#proposal-body")).not_to_contain_text(full.reason)
    expect(page.locator(".gates")).to_have_count(0)
    screenshot(page, "agent-proposal")


@pytest.mark.parametrize("size", ["desktop", "phone"])
def test_every_page_fits_the_width_and_is_keyboard_operable(server, sign_in, size):
    viewport = DESKTOP if size == "desktop" else PHONE
    page = sign_in(server.admin_key, "/stream", viewport=viewport)
    for name in ["stream", "inbox", "decisions", "tenant"]:
        page.goto(f"{server.console_url}/{name}")
        expect(page.locator(f"#{name}-page")).to_be_visible()
        expect(page.locator(f'#nav a[data-page="{name}"]')).to_have_attribute("aria-current", "page")
        page.wait_for_load_state("networkidle") if name != "stream" else None
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"), name
        screenshot(page, f"{name}-{size}")
    page.goto(f"{server.console_url}/tenant")
    expect(page.locator("#tenant-body")).to_contain_text("SOP-PY")
    # The keyboard reaches the skip link, then the pages.
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "skip"
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.getAttribute('href')") == "/stream"
    page.keyboard.press("Enter")
    expect(page.locator("#stream-page")).to_be_visible()


def test_an_admin_sees_an_open_breaker_and_resets_it(server, sign_in):
    tenant = unique("breakers")
    server.admin("tenant", "create", tenant)
    server.admin("tenant", "set", tenant, "--breaker-threshold", "2", "--breaker-window", "5m")
    admin = server.admin("key", "create", "--tenant", tenant, "--role", "admin", "--name", unique("admin"))
    operator = unique("looping-operator")

    def submit():
        with countersign.Client(server.endpoint, admin) as client:
            return client.submit(rejected_spec(server, operator=operator))

    deadline = time.monotonic() + 30
    while True:
        try:
            submit()
        except countersign.CountersignError as refused:
            assert "too many rejected proposals" in str(refused), refused
            break
        assert time.monotonic() < deadline, "the breaker never opened"
        time.sleep(0.2)

    page = sign_in(admin, "/tenant")
    row = page.locator(".breaker", has_text=operator)
    expect(row).to_be_visible()
    # The queue's depth as last sampled (or that no sample has come yet).
    expect(page.locator(".field", has_text="Queue depth")).to_contain_text(
        re.compile(r"\d+ waiting|not sampled yet")
    )
    screenshot(page, "tenant")
    row.locator("button").click()
    expect(row.locator(".done")).to_contain_text("Reset")
    submit()  # reviewed again, not refused
    page.reload()
    expect(page.locator(".breaker", has_text=operator)).to_have_count(0)
