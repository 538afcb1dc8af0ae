"""The dashboard in real headless Chromium against two real, linked meshgate nodes.

One scenario, in order (each step builds on the previous ones): Ann's browser talks to node
alpha, Bob's to node beta. Screenshots of every main view go to the artifacts folder, and every
step ends by checking both browsers' consoles for errors.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import unittest
from pathlib import Path

from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

from harness import DESKTOP, PHONE, Browser, Node, TestFailure, retrying, start_linked_pair, wait_until, linked

BINARY = os.environ.get("MESHGATE_BINARY", "")
PUBLIC_DIR = os.environ.get("MESHGATE_PUBLIC_DIR", str(Path(__file__).resolve().parents[2] / "Public"))
ARTIFACTS = Path(os.environ.get("MESHGATE_BROWSER_ARTIFACTS", ".build/test-artifacts/browser")).resolve()

JOB_NAME = "Fix the roof"
VIEWS = ["nearby", "jobs", "invitations", "sessions", "chat", "events"]


def row_by_key(browser: Browser, testid: str, attribute: str, value: str):
    for row in browser.qa(testid):
        if row.get_attribute(attribute) == value:
            return row
    return None


class DashboardScenario(unittest.TestCase):
    alpha: Node
    beta: Node
    ann: Browser
    bob: Browser
    work: tempfile.TemporaryDirectory
    noisy = False  # set by a step that takes a node down on purpose

    @classmethod
    def setUpClass(cls) -> None:
        if not BINARY or not Path(BINARY).exists():
            raise unittest.SkipTest(f"MESHGATE_BINARY is not set to a built meshgate (got {BINARY!r})")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        for old in ARTIFACTS.glob("*.png"):
            old.unlink()
        cls.work = tempfile.TemporaryDirectory(prefix="meshgate-browser-test-")
        work = Path(cls.work.name)
        cls.alpha, cls.beta = start_linked_pair(BINARY, PUBLIC_DIR, work)
        cls.ann = Browser("ann", ARTIFACTS)
        cls.bob = Browser("bob", ARTIFACTS)

    @classmethod
    def tearDownClass(cls) -> None:
        for browser in (getattr(cls, "ann", None), getattr(cls, "bob", None)):
            if browser:
                browser.quit()
        for node in (getattr(cls, "alpha", None), getattr(cls, "beta", None)):
            if node:
                node.kill()
                # Keep the node logs beside the screenshots for a failed run.
                for path in (node.stdout_path, node.stderr_path):
                    if path.exists():
                        (ARTIFACTS / path.name).write_bytes(path.read_bytes())
        cls.work.cleanup()

    def setUp(self) -> None:
        type(self).noisy = False

    def tearDown(self) -> None:
        for browser in (self.ann, self.bob):
            browser.assert_no_console_errors(allow_network_noise=type(self).noisy)

    # ------------------------------------------------------------------ helpers

    def sign_in(self, browser: Browser, node: Node, name: str) -> None:
        browser.open(node.url)
        browser.visible("sign-in-form")
        browser.type_into("name-input", name + "\n")
        browser.wait(f"signed in as {name}", lambda: browser.text("peer-name") == name)
        browser.wait("the event socket to be live", lambda: browser.state() == "live")
        self.assertTrue(browser.local_storage("meshgate.token"), "the token is kept in localStorage")

    def nearby_names(self, browser: Browser) -> list[str]:
        return [r.text for r in browser.qa("nearby-peer-name")]

    def job_row(self, browser: Browser, name: str):
        for row in browser.qa("job-row"):
            if browser.text("job-name", row) == name:
                return row
        return None

    session_id = ""

    def session_row(self, browser: Browser):
        """The row of the session Ann started in step 4 (Bob also has the job's session)."""
        return row_by_key(browser, "session-row", "data-session-id", type(self).session_id)

    def views(self, browser: Browser) -> list[str]:
        """The main views this node offers (the Chat tab shows only where the node has the chat API)."""
        return [v for v in VIEWS if browser.q(f"tab-{v}").is_displayed()]

    def session_input(self, browser: Browser):
        return browser.q("session-text", self.session_row(browser))

    def session_say(self, browser: Browser, text: str) -> None:
        browser.tab("sessions")
        field = browser.wait("the session's text field", lambda: self.session_row(browser) and self.session_input(browser))
        field.clear()
        field.send_keys(text + "\n")
        browser.wait(f"{text!r} sent", lambda: self.session_input(browser).get_attribute("value") == "")

    def record_row_classes(self, browser: Browser) -> None:
        """Records the classes Nearby rows take as they come and go (the found / lost animations)."""
        browser.js(
            """
            window.__rowClasses = [];
            const list = document.querySelector('[data-testid=nearby-list]');
            new MutationObserver((records) => {
              for (const r of records) {
                for (const n of r.addedNodes) if (n.className) window.__rowClasses.push(n.className);
                if (r.type === 'attributes') window.__rowClasses.push(r.target.className);
              }
            }).observe(list, { childList: true, attributes: true, attributeFilter: ['class'], subtree: true });
            """
        )

    def saw_row_class(self, browser: Browser, name: str) -> bool:
        return any(name in c for c in browser.js("return window.__rowClasses || []"))

    # -------------------------------------------------------------------- steps

    def test_01_sign_in(self) -> None:
        self.ann.open(self.alpha.url)
        self.ann.visible("sign-in-form")
        self.ann.wait("the idle badge", lambda: self.ann.state() == "idle")
        self.ann.screenshot("ann-signed-out")
        # The client-side rule mirrors the server's: 63 UTF-8 bytes at most.
        self.ann.type_into("name-input", "é" * 32)
        self.ann.wait("the byte-limit error", lambda: "63" in self.ann.text("sign-in-error"))
        self.sign_in(self.ann, self.alpha, "Ann")
        self.sign_in(self.bob, self.beta, "Bob")
        self.assertEqual(self.ann.text("node-name"), "alpha")
        self.assertEqual(self.bob.text("node-name"), "beta")

    def test_02_nearby_with_receive_jobs(self) -> None:
        for browser in (self.ann, self.bob):
            browser.tab("nearby")
            self.record_row_classes(browser)
        # Keyboard: the switch is a focusable checkbox toggled with Space.
        for browser in (self.ann, self.bob):
            switch = browser.q("receive-jobs")
            browser.wait("Receive Jobs enabled", lambda: switch.is_enabled())
            browser.js("arguments[0].focus()", switch)
            switch.send_keys(Keys.SPACE)
            browser.wait("Receive Jobs on", lambda: browser.q("receive-jobs").get_attribute("aria-checked") == "true")
            browser.wait("the receiving status", lambda: "You are receiving jobs" in browser.text("receive-jobs-status"))
        self.ann.wait("Bob in Nearby", lambda: self.nearby_names(self.ann) == ["Bob"])
        self.bob.wait("Ann in Nearby", lambda: self.nearby_names(self.bob) == ["Ann"])
        self.assertIn("beta", self.ann.text("nearby-peer-node"), "the row names the peer's node")
        self.ann.wait("Bob's row to animate in", lambda: self.saw_row_class(self.ann, "is-entering"))
        # The mesh: the other node, linked, with a round-trip time.
        for browser, other in ((self.ann, "beta"), (self.bob, "alpha")):
            browser.wait(f"{other} linked in Mesh", lambda: browser.text("mesh-node-state") == "linked")
            self.assertEqual(browser.text("mesh-node-name"), other)
            # Link internals are folded away until asked for.
            self.assertFalse(browser.q("mesh-node-rtt").is_displayed(), "RTT folded under Details")
            browser.css('[data-testid="mesh-node-details"] > summary')[0].click()
            browser.wait("the RTT shown", lambda: re.match(r"^\d+ ms$", browser.text("mesh-node-rtt")))
            self.assertFalse(browser.q("node-id").is_displayed(), "the node id is folded under Details")
        self.ann.screenshot("ann-nearby-desktop")

    def service_peers(self, browser: Browser, service_type: str) -> list[str] | None:
        group = row_by_key(browser, "service-group", "data-service-type", service_type)
        return None if group is None else [browser.text("service-peer-name", r) for r in browser.qa("service-peer", group)
                                           if "is-leaving" not in (r.get_attribute("class") or "")]

    def test_02b_peers_by_service_type(self) -> None:
        ann, bob = self.ann, self.bob
        bob.tab("nearby")
        self.assertFalse(bob.q("browse-type").is_displayed(), "the service-type panel is folded")
        bob.css('[data-testid="services-panel"] > summary')[0].click()
        bob.type_into("browse-type", "Bad--Type\n")
        bob.wait("the service type rule", lambda: "serviceType" in bob.text("browse-error"))
        bob.type_into("browse-type", "printer\n")
        bob.wait("an empty printer group", lambda: self.service_peers(bob, "printer") == [])
        token = ann.local_storage("meshgate.token")
        self.alpha.api("PUT", "advertising/printer", {"discoveryInfo": {"model": "laser"}}, token=token)
        bob.wait("Ann advertising printer", lambda: self.service_peers(bob, "printer") == ["Ann"])
        group = row_by_key(bob, "service-group", "data-service-type", "printer")
        self.assertIn("model: laser", bob.text("service-peer-node", group))
        self.alpha.api("DELETE", "advertising/printer", token=token)
        bob.wait("Ann gone from printer", lambda: self.service_peers(bob, "printer") == [])
        bob.click("service-stop", row_by_key(bob, "service-group", "data-service-type", "printer"))
        bob.wait("the printer group gone", lambda: self.service_peers(bob, "printer") is None)

    def test_03_send_and_accept_a_job(self) -> None:
        ann, bob = self.ann, self.bob
        ann.tab("jobs")
        # Limits are shown, never silent: a live character count, and a name over 200 characters is refused
        # with a field error (not cut and saved).
        self.assertEqual(ann.text("job-name-count"), "0 / 200")
        ann.q("job-name").send_keys(Keys.ENTER)
        ann.wait("the empty-name error", lambda: ann.text("job-name-error") == "Give the job a name.")
        ann.type_into("job-name", "é" * 300)
        ann.wait("the count past the limit", lambda: ann.text("job-name-count") == "300 / 200")
        self.assertIn("is-over", ann.q("job-name-count").get_attribute("class"))
        ann.click("job-submit")
        ann.wait("the too-long error", lambda: "200 characters or fewer (it has 300)" in ann.text("job-name-error"))
        self.assertEqual(len(ann.q("job-name").get_attribute("value")), 300, "the name is not cut")
        self.assertFalse([r for r in ann.qa("job-row") if ann.text("job-name", r).startswith("éé")], "not saved")
        ann.type_into("job-name", JOB_NAME)
        self.assertEqual(ann.text("job-name-count"), f"{len(JOB_NAME)} / 200")
        ann.type_into("job-payment", "120.00")
        ann.type_into("job-notes", "Bring a ladder")
        ann.q("job-name").send_keys(Keys.ENTER)  # Enter submits the form
        row = ann.wait("the new job row", lambda: self.job_row(ann, JOB_NAME))
        self.assertIn("Pays 120.00", ann.text("job-meta", row))
        self.assertEqual(ann.q("job-name").get_attribute("value"), "", "the form is cleared after adding")
        # Edit it (PATCH) and see the row update in place.
        ann.click("job-edit", row)
        ann.wait("the edit form", lambda: ann.text("job-form-title").startswith("Edit"))
        ann.type_into("job-payment", "150.00")
        ann.click("job-submit")
        ann.wait("the edited payment", lambda: "Pays 150.00" in ann.text("job-meta", self.job_row(ann, JOB_NAME)))

        row = self.job_row(ann, JOB_NAME)
        select = ann.wait("Bob in the send-to picker", lambda: (s := ann.q("job-send-to", row)).is_enabled() and s)
        Select(select).select_by_visible_text("Bob · beta")
        ann.click("job-send", row)
        status = ann.wait(
            "the pending offer with its code",
            lambda: re.search(r"Offered to Bob · code (\S+)", ann.text("job-status", self.job_row(ann, JOB_NAME))),
        )
        code = status.group(1)
        ann.screenshot("ann-jobs-offered")

        prompt = bob.wait("the job offer prompt", lambda: (p := bob.qa("invitation-prompt")) and p[0])
        # Arrivals you notice: a count in the title and the offer said in the live region.
        bob.wait("the offer counted in the title", lambda: bob.driver.title == "(1) beta · meshgate")
        self.assertIn(f"Ann offers you", bob.q("arrivals-live").get_attribute("textContent"))
        self.assertIn(JOB_NAME, bob.q("arrivals-live").get_attribute("textContent"))
        self.assertEqual(bob.q("arrivals-live").get_attribute("aria-live"), "polite")
        self.assertEqual(bob.text("prompt-from", prompt), "Ann")
        self.assertIn(JOB_NAME, bob.text("prompt-context", prompt))
        self.assertEqual(bob.text("prompt-code", prompt), code, "both sides show the same verification code")
        bob.screenshot("bob-job-prompt")
        bob.click("prompt-accept", prompt)

        bob.tab("jobs")
        received = bob.wait("the received job in Bob's list", lambda: self.job_row(bob, JOB_NAME))
        bob.wait("received-from Ann", lambda: "Ann" in bob.text("job-received-from", self.job_row(bob, JOB_NAME)))
        self.assertIsNotNone(received)
        self.assertEqual(bob.text("job-received-from", received), "From Ann on alpha")
        self.assertFalse(bob.q("job-send", received).is_displayed(), "a received job is not offered on")
        ann.wait(
            "Ann's job assigned to Bob",
            lambda: self.job_row(ann, JOB_NAME).get_attribute("data-assigned") == "true"
            and "Bob" in ann.text("job-assigned-to", self.job_row(ann, JOB_NAME)),
        )
        self.assertEqual(ann.text("job-assigned-to", self.job_row(ann, JOB_NAME)), "Delivered to Bob on beta")
        for browser in (ann, bob):
            page = browser.driver.find_element("tag name", "body").text
            for internal in ("assignedTo", "receivedFrom", "notConnected"):
                self.assertNotIn(internal, page, f"{browser.name} sees the internal word {internal}")
        bob.wait("the prompt to go away", lambda: not bob.qa("invitation-prompt"))
        bob.wait("the title without a count", lambda: bob.driver.title == "beta · meshgate")

        # A declined offer: Ann is told, and the job stays hers to send again.
        ann.type_into("job-name", "Paint the fence\n")
        row = ann.wait("the second job row", lambda: self.job_row(ann, "Paint the fence"))
        Select(ann.wait("Bob in its picker", lambda: (s := ann.q("job-send-to", row)).is_enabled() and s)).select_by_visible_text("Bob · beta")
        ann.click("job-send", row)
        prompt = bob.wait("the second offer", lambda: (p := bob.qa("invitation-prompt")) and p[0])
        self.assertIn("Paint the fence", bob.text("prompt-context", prompt))
        bob.click("prompt-decline", prompt)
        ann.wait("the decline shown on Ann's job", lambda: "declined the offer"
                 in ann.text("job-status", self.job_row(ann, "Paint the fence")))
        self.assertIsNone(self.job_row(bob, "Paint the fence"), "a declined job is not delivered")
        # Delete takes two presses (the first arms the button).
        ann.click("job-delete", self.job_row(ann, "Paint the fence"))
        ann.wait("the armed delete", lambda: ann.text("job-delete", self.job_row(ann, "Paint the fence")) == "Confirm delete")
        ann.click("job-delete", self.job_row(ann, "Paint the fence"))
        ann.wait("the job deleted", lambda: self.job_row(ann, "Paint the fence") is None)

    def test_04_sessions_and_text(self) -> None:
        ann, bob = self.ann, self.bob
        ann.tab("sessions")
        before = {r.get_attribute("data-session-id") for r in ann.qa("session-row")}
        ann.click("session-create")
        row = ann.wait("a new session row", lambda: [r for r in ann.qa("session-row")
                                                     if r.get_attribute("data-session-id") not in before])[0]
        type(self).session_id = row.get_attribute("data-session-id")
        select = ann.wait("Bob in the invite picker", lambda: (s := ann.q("session-invite-peer", row)).is_enabled() and s)
        Select(select).select_by_visible_text("Bob · beta")
        ann.click("session-invite", row)
        prompt = bob.wait("the session invitation prompt", lambda: (p := bob.qa("invitation-prompt")) and p[0])
        self.assertEqual(bob.text("prompt-from", prompt), "Ann")
        bob.click("prompt-accept", prompt)
        bob.tab("sessions")
        for browser in (ann, bob):
            browser.wait(
                "both members connected",
                lambda: (row := self.session_row(browser)) is not None and sorted(
                    m.get_attribute("data-state") for m in browser.qa("session-member", row)
                ) == ["connected", "connected"],
            )
        self.session_say(ann, "hello bob")
        bob.wait("Ann's text in Bob's session", lambda: "hello bob" in [m.text for m in bob.qa("session-message-text")])
        self.session_say(bob, "hi ann")
        ann.wait("Bob's text in Ann's session", lambda: "hi ann" in [m.text for m in ann.qa("session-message-text")])
        ann.screenshot("ann-sessions-desktop")

    def test_04b_files_in_a_session(self) -> None:
        ann, bob = self.ann, self.bob
        if not ann.q("tab-files").is_displayed():
            self.skipTest("the node has no Files API (/api/v1/transfers) yet")
        payload = os.urandom(3 * 1024 * 1024 + 17)
        source = Path(self.work.name) / "site-plan.bin"
        source.write_bytes(payload)
        digest = hashlib.sha256(payload).hexdigest()

        bob.tab("jobs")  # looking elsewhere when the file arrives
        ann.tab("files")
        Select(ann.wait("the session picker", lambda: (s := ann.q("file-session")).is_enabled() and s)).select_by_value(
            type(self).session_id)
        Select(ann.wait("Bob in the To picker", lambda: (s := ann.q("file-to")).is_enabled() and s)).select_by_visible_text("Bob")
        picker = ann.q("file-input")
        ann.js("arguments[0].hidden = false", picker)
        picker.send_keys(str(source))
        ann.js("arguments[0].hidden = true", picker)

        def transfer_row(browser: Browser, direction: str):
            for row in browser.qa("transfer-row"):
                if browser.text("transfer-name", row) == source.name and row.get_attribute("data-direction") == direction:
                    return row
            return None

        # Bob is elsewhere: the Files tab gets a badge and the title a count, cleared when he looks.
        bob.wait("the new-file badge", lambda: bob.q("files-badge").is_displayed() and bob.text("files-badge") == "1")
        self.assertEqual(bob.driver.title, "(1) beta · meshgate")
        self.assertIn(f"Ann is sending you {source.name}", bob.q("arrivals-live").get_attribute("textContent"))
        bob.tab("files")
        bob.wait("the badge cleared", lambda: not bob.q("files-badge").is_displayed())
        self.assertEqual(bob.driver.title, "beta · meshgate")
        for browser, direction in ((ann, "outgoing"), (bob, "incoming")):
            browser.wait(f"the {direction} transfer finished", lambda: (r := transfer_row(browser, direction))
                         and r.get_attribute("data-state") == "finished")
            bar = browser.q("transfer-progress", transfer_row(browser, direction))
            self.assertEqual(bar.get_attribute("value"), bar.get_attribute("max"), "a finished bar is full")
        self.assertIn(digest[:12], bob.text("transfer-status", transfer_row(bob, "incoming")))
        ann.screenshot("ann-files-desktop")
        bob.screenshot("bob-files-desktop")

        bob.click("transfer-download", transfer_row(bob, "incoming"))
        saved = bob.downloads / source.name
        bob.wait("the download on disk", lambda: saved.exists() and saved.stat().st_size == len(payload))
        self.assertEqual(hashlib.sha256(saved.read_bytes()).hexdigest(), digest, "the downloaded file is the sent file")

        # Cancel while the file is still going up to Ann's node (the browser's upload is throttled to
        # 256 KiB/s so there is time to press Cancel): it never arrives at Bob.
        big = Path(self.work.name) / "too-late.bin"
        big.write_bytes(os.urandom(4 * 1024 * 1024))
        ann.driver.execute_cdp_cmd("Network.enable", {})
        ann.driver.execute_cdp_cmd("Network.emulateNetworkConditions", {
            "offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": 256 * 1024})
        try:
            picker = ann.q("file-input")
            ann.js("arguments[0].hidden = false", picker)
            picker.send_keys(str(big))
            ann.js("arguments[0].hidden = true", picker)
            uploading = ann.wait("the upload under way", lambda: [
                r for r in ann.qa("transfer-row")
                if ann.text("transfer-name", r) == big.name and r.get_attribute("data-state") == "uploading"])
            ann.click("transfer-cancel", uploading[0])
            ann.wait("the upload gone or ended", lambda: all(
                r.get_attribute("data-state") in ("failed", "canceled")
                for r in ann.qa("transfer-row") if ann.text("transfer-name", r) == big.name))
        finally:
            ann.driver.execute_cdp_cmd("Network.emulateNetworkConditions", {
                "offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})
        self.assertFalse([r for r in bob.qa("transfer-row")
                          if bob.text("transfer-name", r) == big.name and r.get_attribute("data-state") == "finished"])

    def test_05_live_event_log(self) -> None:
        ann, bob = self.ann, self.bob
        bob.tab("events")
        types = bob.wait("events in Bob's log", lambda: bob.event_types())
        for expected in ("peer.found", "invitation.received", "job.received", "session.data"):
            self.assertIn(expected, types)
        ids = bob.event_ids()
        self.assertEqual(len(ids), len(set(ids)), "no event is shown twice")
        # Live: a new event arrives at the top while the view is open.
        self.session_say(ann, "live one")
        bob.wait("the new session.data event at the top", lambda: bob.event_types()[:1] == ["session.data"]
                 and bob.event_ids()[0] not in ids)
        bob.type_into("event-filter", "job.")
        bob.wait("the filter to apply", lambda: set(bob.js(
            "return [...document.querySelectorAll('[data-testid=event-row]')].filter(r => !r.hidden && r.offsetParent)"
            ".map(r => r.dataset.type)")) == {"job.received"})
        bob.screenshot("bob-events-filtered")
        bob.q("event-filter").clear()
        bob.q("event-filter").send_keys(" ", Keys.BACKSPACE)

    def chat_bodies(self, browser: Browser) -> list[str]:
        return [m.text for m in browser.qa("chat-message-body")]

    def chat_members(self, browser: Browser) -> list[tuple[str, str]]:
        return sorted((browser.text("chat-member-name", m), m.get_attribute("data-role")) for m in browser.qa("chat-member"))

    def chat_say(self, browser: Browser, text: str) -> None:
        field = browser.visible("chat-input")
        browser.wait("the composer to be usable", lambda: field.is_enabled())
        field.send_keys(text, Keys.ENTER)  # Enter sends
        browser.wait(f"{text!r} taken by the node", lambda: field.get_attribute("value") == "")

    def test_06_chat_both_ways(self) -> None:
        ann, bob = self.ann, self.bob
        for browser in (ann, bob):
            browser.wait("the Chat tab (the node serves /api/v1/chats)", lambda: browser.q("tab-chat").is_displayed())
            browser.tab("chat")
        ann.type_into("chat-host-name", "Roof crew\n")
        ann.wait("the hosted room open", lambda: ann.q("chat-room").is_displayed() and ann.text("chat-room-name") == "Roof crew")
        self.assertEqual(ann.text("chat-room-host"), "You host this room")
        ann.wait("Ann as the host in the members bar", lambda: self.chat_members(ann) == [("Ann (you)", "host")])

        room = bob.wait("the room in Bob's Rooms nearby", lambda: row_by_key(bob, "chat-nearby-room", "data-chat-id",
                                                                            ann.q("chat-room").get_attribute("data-chat-id")))
        self.assertEqual(bob.text("chat-nearby-name", room), "Roof crew")
        self.assertIn("hosted by Ann", bob.text("chat-nearby-host", room))
        # Nearby lists the room's host under the chat service type too.
        bob.tab("nearby")
        bob.wait("Ann under jobmanager-chat", lambda: self.service_peers(bob, "jobmanager-chat") == ["Ann"])
        bob.tab("chat")
        room = row_by_key(bob, "chat-nearby-room", "data-chat-id", ann.q("chat-room").get_attribute("data-chat-id"))
        bob.click("chat-join", room)
        bob.wait("the joined room open", lambda: bob.q("chat-room").is_displayed()
                 and bob.q("chat-room").get_attribute("data-joined") == "true")
        expected = [("Ann", "host"), ("Bob (you)", "member")]
        bob.wait("both in Bob's members bar", lambda: self.chat_members(bob) == expected)
        ann.wait("Bob in Ann's members bar, live", lambda: self.chat_members(ann) == [("Ann (you)", "host"), ("Bob", "member")])

        self.chat_say(ann, "welcome bob")
        bob.wait("Ann's message at Bob", lambda: self.chat_bodies(bob) == ["welcome bob"])
        self.chat_say(bob, "thanks ann")
        ann.wait("Bob's message at Ann", lambda: self.chat_bodies(ann) == ["welcome bob", "thanks ann"])
        bob.wait("the same order at Bob", lambda: self.chat_bodies(bob) == ["welcome bob", "thanks ann"])
        for browser in (ann, bob):
            browser.wait("every message ordered by the host", lambda: all(
                m.get_attribute("data-pending") == "false" for m in browser.qa("chat-message")))
        ann.screenshot("ann-chat-desktop")
        bob.screenshot("bob-chat-desktop")

        # Leave, miss a message, rejoin: the whole history is back.
        bob.click("chat-leave")
        bob.wait("Bob out of the room", lambda: not bob.q("chat-room").is_displayed())
        ann.wait("Bob gone from Ann's members bar", lambda: self.chat_members(ann) == [("Ann (you)", "host")])
        self.chat_say(ann, "you missed this")
        rejoin = bob.wait("the room to rejoin", lambda: [b for b in bob.qa("chat-join") + bob.qa("chat-open")
                                                          if b.is_displayed() and b.text in ("Join", "Rejoin")])
        rejoin[0].click()
        bob.wait("the whole history after the rejoin",
                 lambda: self.chat_bodies(bob) == ["welcome bob", "thanks ann", "you missed this"])

        # A half-typed chat message survives a reload, and the room is open again.
        bob.q("chat-input").send_keys("half a thought")
        bob.driver.refresh()
        bob.wait("live after reload", lambda: bob.state() == "live")
        bob.wait("the room and the draft back", lambda: bob.q("chat-room").is_displayed()
                 and bob.q("chat-input").get_attribute("value") == "half a thought"
                 and "you missed this" in self.chat_bodies(bob))
        bob.q("chat-input").send_keys(Keys.ENTER)
        ann.wait("the draft sent after the reload", lambda: self.chat_bodies(ann)[-1:] == ["half a thought"])

    def test_07_resume_with_since_after_reload(self) -> None:
        ann, bob = self.ann, self.bob
        cursor = bob.local_storage("meshgate.cursor")
        self.assertTrue(cursor, "the resume cursor is kept")
        bob.driver.get("about:blank")  # the page (and its socket) is gone
        ann.tab("sessions")
        self.session_say(ann, "while you were away")
        ann.wait("Ann's own copy", lambda: "while you were away" in [m.text for m in ann.qa("session-message-text")])
        bob.open(self.beta.url)
        bob.wait("live again", lambda: bob.state() == "live")
        bob.tab("sessions")
        bob.wait("the missed text, replayed from the cursor",
                 lambda: "while you were away" in [m.text for m in bob.qa("session-message-text")])
        bob.tab("events")
        ids = bob.event_ids()
        self.assertEqual(len(ids), len(set(ids)), "no event is shown twice after a resume")
        self.assertTrue(all(int(i) > int(cursor) for i in ids), "only events after the cursor are replayed")

    def test_08_drafts_survive_reload(self) -> None:
        ann = self.ann
        ann.tab("jobs")
        ann.type_into("job-name", "Half-typed job")
        ann.type_into("job-notes", "remember the paint")
        ann.tab("sessions")
        self.session_input(ann).send_keys("a draft message")
        ann.driver.refresh()
        ann.wait("live after reload", lambda: ann.state() == "live")
        ann.wait("the session draft restored", lambda: self.session_row(ann)
                 and self.session_input(ann).get_attribute("value") == "a draft message")
        ann.tab("jobs")
        self.assertEqual(ann.q("job-name").get_attribute("value"), "Half-typed job")
        self.assertEqual(ann.q("job-notes").get_attribute("value"), "remember the paint")

    def test_09_offline_and_reconnect_after_node_restart(self) -> None:
        ann, bob = self.ann, self.bob
        type(self).noisy = True
        ann.tab("events")
        before = set(ann.event_ids())
        bob.tab("nearby")
        self.record_row_classes(bob)
        self.alpha.stop()
        ann.wait("the offline indicator", lambda: ann.state() == "offline", 30)
        ann.wait("the retry countdown", lambda: ann.q("connection-retry").is_displayed())
        ann.screenshot("ann-offline")
        bob.tab("nearby")
        bob.wait("Ann lost in Bob's Nearby", lambda: "Ann" not in self.nearby_names(bob), 30)
        self.assertTrue(self.saw_row_class(bob, "is-leaving"), "the lost row animates out")
        # Losses you see: the lost node stays in Bob's Mesh panel as unreachable, with the time.
        lost = bob.wait("alpha unreachable in Bob's Mesh", lambda: row_by_key(bob, "mesh-node", "data-state", "unreachable"), 30)
        self.assertRegex(bob.text("mesh-node-state", lost), r"^unreachable since \d{1,2}:\d{2}")
        self.assertEqual(bob.text("mesh-node-name", lost), "alpha")
        self.assertFalse(bob.q("mesh-empty").is_displayed(), "not 'No other nodes known yet'")
        # Typing while offline: the text must still be there after the reconnect. (Sessions end with
        # their node, so the job form is the place to type into.)
        ann.tab("jobs")
        ann.type_into("job-name", "typed while offline")
        self.alpha.start()
        wait_until("alpha and beta linked again", lambda: linked(self.alpha, self.beta) and linked(self.beta, self.alpha), 30)
        ann.wait("live again without a reload", lambda: ann.state() == "live", 30)
        self.assertEqual(ann.q("job-name").get_attribute("value"), "typed while offline")
        ann.tab("nearby")
        ann.wait("Bob found again", lambda: self.nearby_names(ann) == ["Bob"], 30)
        bob.wait("Ann found again", lambda: self.nearby_names(bob) == ["Ann"], 30)
        bob.wait("alpha linked again in Bob's Mesh", lambda: bob.text("mesh-node-state") == "linked", 30)
        ann.tab("events")
        ids = ann.event_ids()
        self.assertEqual(len(ids), len(set(ids)), "no event is shown twice after the reconnect")
        self.assertTrue(set(ids) - before, "events after the restart reach the page")
        ann.assert_no_console_errors(allow_network_noise=True)
        bob.assert_no_console_errors(allow_network_noise=True)

    def test_10_views_on_phone_and_desktop(self) -> None:
        for browser in (self.ann, self.bob):
            headings = browser.css("h1")
            self.assertEqual(len(headings), 1, "one top-level heading")
            self.assertIn("meshgate", headings[0].text)
            for label, size in (("phone", PHONE), ("desktop", DESKTOP)):
                browser.viewport(size)
                for view in self.views(browser):
                    browser.tab(view)
                    overflow = browser.js("return document.documentElement.scrollWidth - window.innerWidth")
                    self.assertLessEqual(overflow, 0, f"{browser.name}: the {view} view scrolls sideways at {size}")
                    browser.screenshot(f"{browser.name}-{label}-{view}")

    def test_11_keyboard_navigation(self) -> None:
        ann = self.ann
        ann.tab("nearby")
        ann.q("tab-nearby").send_keys(Keys.ARROW_RIGHT)
        ann.wait("Jobs selected by arrow key", lambda: ann.q("tab-jobs").get_attribute("aria-selected") == "true")
        self.assertEqual(ann.js("return document.activeElement.dataset.testid"), "tab-jobs")
        ann.q("tab-jobs").send_keys(Keys.END)
        ann.wait("the last tab selected by End", lambda: ann.q("tab-events").get_attribute("aria-selected") == "true")
        ann.q("tab-events").send_keys(Keys.HOME)
        ann.wait("the first tab selected by Home", lambda: ann.q("tab-nearby").get_attribute("aria-selected") == "true")
        # Every button and field in the Nearby view and header can be reached by Tab.
        unreachable = ann.js(
            """
            return [...document.querySelectorAll('button, input, select, textarea, a[href]')]
              .filter(e => e.offsetParent && !e.disabled && e.tabIndex < 0 && e.getAttribute('role') !== 'tab')
              .map(e => e.dataset.testid || e.outerHTML.slice(0, 60));
            """
        )
        self.assertEqual(unreachable, [], "controls removed from the tab order")

    def test_99_switch_peer_and_leave(self) -> None:
        ann = self.ann
        ann.tab("nearby")
        ann.click("switch-peer")
        ann.visible("sign-in-form")
        self.assertIsNone(ann.local_storage("meshgate.token"))
        self.sign_in(ann, self.alpha, "Ann Two")
        peers_before = self.alpha.api("GET", "node")["peerCount"]
        ann.click("leave")
        ann.visible("sign-in-form")
        ann.wait("the left notice", lambda: "You left the mesh" in ann.text("identity-notice"))
        wait_until("the node to forget the peer", lambda: self.alpha.api("GET", "node")["peerCount"] == peers_before - 1)
