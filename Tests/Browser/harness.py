"""Support for the browser tests: real meshgate nodes and headless Chromium sessions.

Nodes are launched like MeshgateTestSupport's NodeProcess does: on a loopback port, with a
temporary data directory, and ready once they print their `meshgate ready ...` line. Browsers
are Debian's chromium driven through Debian's chromedriver (no Selenium Manager downloads).

Every wait is explicit (WebDriverWait / polling a condition with a deadline); nothing sleeps to
synchronise. Timeouts are generous for a loaded 2-core machine; on failure the message names
what was awaited and what was seen instead.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

# One bound for "the page should show this soon": a live update normally lands in well under a
# second; the margin is for a loaded CI machine running Swift builds beside us.
WAIT_SECONDS = float(os.environ.get("MESHGATE_BROWSER_WAIT", "20"))
POLL_SECONDS = 0.05

CHROMIUM = os.environ.get("MESHGATE_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("MESHGATE_CHROMEDRIVER", "/usr/bin/chromedriver")

PHONE = (390, 844)
DESKTOP = (1280, 800)


class TestFailure(AssertionError):
    pass


def wait_until(what: str, condition: Callable[[], Any], timeout: float = WAIT_SECONDS) -> Any:
    """Polls `condition` until it returns something truthy; fails naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = condition()
            if value:
                return value
        except (StaleElementReferenceException, urllib.error.URLError, ConnectionError) as error:
            last_error = error
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error})" if last_error else ""
            raise TestFailure(f"timed out after {timeout:.0f} s waiting for {what}{detail}")
        time.sleep(POLL_SECONDS)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------------------
# Nodes
# ------------------------------------------------------------------------------------------------


class Node:
    """A meshgate process on 127.0.0.1:<port> with its own data directory (kept across restarts)."""

    def __init__(self, binary: str, public_dir: str, name: str, port: int, work_dir: Path):
        self.binary = binary
        self.public_dir = public_dir
        self.name = name
        self.port = port
        self.data_dir = work_dir / f"{name}-data"
        self.stdout_path = work_dir / f"{name}.stdout"
        self.stderr_path = work_dir / f"{name}.stderr"
        self.peers: list[int] = []
        self.extra_args: list[str] = []  # more flags for the next start (e.g. --transfer-rate)
        self.process: subprocess.Popen | None = None
        self.node_id = ""
        self.admin_token = ""  # printed once, on the node's first start

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self, timeout: float = 30) -> None:
        args = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--data-dir", str(self.data_dir),
            "--name", self.name,
            "--public-dir", self.public_dir,
            "--discovery", "static",
            "--log-level", "debug",
        ]
        for port in self.peers:
            args += ["--peer", f"127.0.0.1:{port}"]
        args += self.extra_args
        offset = self.stdout_path.stat().st_size if self.stdout_path.exists() else 0
        with open(self.stderr_path, "a") as err:
            err.write(f"=== browser-test: launching {' '.join(args)}\n")
        out = open(self.stdout_path, "a")
        err = open(self.stderr_path, "a")
        try:
            self.process = subprocess.Popen(args, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        finally:
            out.close()
            err.close()
        deadline = time.monotonic() + timeout
        while True:
            text = self.stdout_path.read_text(errors="replace")[offset:]
            complete = text[: text.rfind("\n") + 1]
            ready = [line for line in complete.splitlines() if line.startswith("meshgate ready ")]
            for line in complete.splitlines():
                if line.startswith("meshgate admin-token="):
                    self.admin_token = line.split("=", 1)[1].split()[0]
            if ready:
                fields = dict(tok.split("=", 1) for tok in ready[0].split()[2:] if "=" in tok)
                self.node_id = fields.get("node.id", "")
                return
            if self.process.poll() is not None:
                raise TestFailure(
                    f"node {self.name} exited with status {self.process.returncode} before it was ready; "
                    f"last lines of its log:\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                self.kill()
                raise TestFailure(f"node {self.name} printed no ready line within {timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(POLL_SECONDS)

    def stop(self, timeout: float = 15) -> None:
        """SIGTERM (graceful shutdown) and wait; SIGKILL if it hangs."""
        if not self.process or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise TestFailure(f"node {self.name} did not exit within {timeout:.0f} s of SIGTERM")

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.stderr_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def api(self, method: str, path: str, body: Any = None, token: str | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        return self.api_raw(method, path, data, token, "application/json")

    def api_raw(self, method: str, path: str, data: bytes | None, token: str | None = None,
                content_type: str = "application/octet-stream") -> Any:
        """A request with a raw body (a file's bytes); the JSON answer, if any."""
        request = urllib.request.Request(self.url + "api/v1/" + path, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", content_type)
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read().decode()
            return json.loads(text) if text else None


def start_linked_pair(binary: str, public_dir: str, work_dir: Path) -> tuple[Node, Node]:
    """Two nodes on free loopback ports, each a static seed of the other, once both are linked."""
    for attempt in range(3):
        port_a, port_b = free_port(), free_port()
        if port_a == port_b:
            continue
        a = Node(binary, public_dir, "alpha", port_a, work_dir)
        b = Node(binary, public_dir, "beta", port_b, work_dir)
        a.peers, b.peers = [port_b], [port_a]
        try:
            a.start()
            b.start()
        except TestFailure:
            # A port picked above may have been taken meanwhile: try other ports.
            a.kill()
            b.kill()
            if attempt == 2:
                raise
            continue
        wait_until("alpha and beta to report their link as linked", lambda: linked(a, b) and linked(b, a), 30)
        return a, b
    raise TestFailure("could not start two nodes")


def linked(node: Node, other: Node) -> bool:
    nodes = node.api("GET", "mesh/nodes").get("nodes", [])
    return any(n.get("id") == other.node_id and n.get("state") == "linked" for n in nodes)


# ------------------------------------------------------------------------------------------------
# Browsers
# ------------------------------------------------------------------------------------------------

# Console messages that are expected while a test deliberately takes a node down: Chromium logs a
# refused connection for every fetch and WebSocket attempt the page makes to reconnect.
NETWORK_NOISE = ("net::ERR_CONNECTION_REFUSED", "net::ERR_CONNECTION_RESET", "net::ERR_EMPTY_RESPONSE",
                 "net::ERR_SOCKET_NOT_CONNECTED",
                 "WebSocket connection to", "Failed to fetch")


@dataclass
class Browser:
    """One headless Chromium window (its own profile, so its own localStorage)."""

    name: str
    artifacts: Path
    driver: webdriver.Chrome = field(init=False)
    profile: str = field(init=False)
    console: list[dict] = field(default_factory=list)
    downloads: Path = field(init=False)

    def __post_init__(self) -> None:
        self.profile = tempfile.mkdtemp(prefix=f"meshgate-browser-{self.name}-")
        self.downloads = Path(self.profile) / "downloads"
        self.downloads.mkdir()
        options = webdriver.ChromeOptions()
        options.add_experimental_option(
            "prefs",
            {
                "download.default_directory": str(self.downloads),
                "download.prompt_for_download": False,
                "safebrowsing.enabled": False,
            },
        )
        options.binary_location = CHROMIUM
        for argument in (
            "--headless=new",
            "--no-sandbox",  # CI runs as root
            "--disable-dev-shm-usage",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            # Two windows run side by side: neither may have its timers or rendering throttled.
            "--disable-background-timer-throttling",
            "--disable-backgrounding-occluded-windows",
            "--disable-renderer-backgrounding",
            "--disable-features=Translate,MediaRouter,OptimizationHints",
            f"--user-data-dir={self.profile}",
            f"--window-size={DESKTOP[0]},{DESKTOP[1]}",
        ):
            options.add_argument(argument)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        # Keep Chromium off D-Bus: it aborts (FATAL "D-Bus connection was disconnected") when a bus it
        # connected to goes away, as the system bus can while other tests start and stop Avahi.
        env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS="disabled:", DBUS_SYSTEM_BUS_ADDRESS="disabled:")
        service = Service(
            executable_path=CHROMEDRIVER, log_output=str(self.artifacts / f"chromedriver-{self.name}.log"), env=env
        )
        self.driver = webdriver.Chrome(service=service, options=options)
        self.driver.set_page_load_timeout(30)
        self.driver.set_script_timeout(30)

    # ---- lifecycle

    def quit(self) -> None:
        try:
            self.driver.quit()
        except WebDriverException:
            pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def open(self, url: str) -> None:
        self.driver.get(url)
        # The module has run once the badge has left its initial "connecting" for the first /node answer
        # or the socket; the data-testid hooks are present from the HTML itself.
        self.wait("the page's script to start", lambda: self.js("return document.body.dataset.signedIn !== undefined"))

    def viewport(self, size: tuple[int, int]) -> None:
        # Headless Chromium's window size is the viewport plus nothing; set both exactly via CDP.
        width, height = size
        self.driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600},
        )

    # ---- console

    def drain_console(self) -> list[dict]:
        entries = self.driver.get_log("browser")
        self.console.extend(entries)
        return entries

    def assert_no_console_errors(self, allow_network_noise: bool = False) -> None:
        entries = self.drain_console()
        bad = [
            e for e in entries
            if e.get("level") in ("SEVERE", "ERROR")
            or (e.get("level") == "WARNING" and e.get("source") in ("javascript", "console-api", "security"))
        ]
        if allow_network_noise:
            bad = [e for e in bad if not any(noise in e.get("message", "") for noise in NETWORK_NOISE)]
        if bad:
            lines = "\n".join(f"  [{e.get('level')}] {e.get('source')}: {e.get('message')}" for e in bad)
            raise TestFailure(f"{self.name}: console errors:\n{lines}")

    # ---- DOM helpers

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def wait(self, what: str, condition: Callable[[], Any], timeout: float = WAIT_SECONDS) -> Any:
        try:
            return wait_until(f"{self.name}: {what}", condition, timeout)
        except TestFailure:
            self.screenshot(f"FAILED-{self.name}")
            raise

    def q(self, testid: str, root: WebElement | None = None) -> WebElement:
        return (root or self.driver).find_element(By.CSS_SELECTOR, f'[data-testid="{testid}"]')

    def qa(self, testid: str, root: WebElement | None = None) -> list[WebElement]:
        return (root or self.driver).find_elements(By.CSS_SELECTOR, f'[data-testid="{testid}"]')

    def css(self, selector: str, root: WebElement | None = None) -> list[WebElement]:
        return (root or self.driver).find_elements(By.CSS_SELECTOR, selector)

    def text(self, testid: str, root: WebElement | None = None) -> str:
        return self.q(testid, root).text

    def visible(self, testid: str) -> WebElement:
        """Waits for the element to be displayed and returns it."""
        return self.wait(f"[{testid}] to be visible", lambda: (e := self.q(testid)).is_displayed() and e)

    def click(self, testid: str, root: WebElement | None = None) -> None:
        element = self.wait(
            f"[{testid}] to be clickable",
            lambda: (e := self.q(testid, root)).is_displayed() and e.is_enabled() and e,
        )
        # As a person does: bring the control into view first. The page's scroll-padding keeps what is scrolled to
        # clear of the sticky tab bar; chromedriver alone clicks a control that is in the viewport but under it.
        self.js("arguments[0].scrollIntoView({block: 'nearest', inline: 'nearest', behavior: 'instant'})", element)
        element.click()

    def choose_file(self, picker: WebElement, path: Any) -> None:
        """Chooses `path` (a file, or several joined by newlines) in a hidden file input, as its button's picker would."""
        self.js("arguments[0].hidden = false", picker)
        picker.send_keys(str(path))
        try:
            self.js("arguments[0].hidden = true", picker)
        except StaleElementReferenceException:
            pass  # the page answered the choice by drawing its row anew: the shown input went with the old row

    def type_into(self, testid: str, text: str, clear: bool = True) -> None:
        element = self.visible(testid)
        if clear:
            element.clear()
        element.send_keys(text)

    def state(self) -> str:
        return self.q("connection-state").get_attribute("data-state") or ""

    def tab(self, view: str) -> None:
        if view == "events" and not self.q("tab-events").is_displayed():
            # The Events tab is a developer's: switch it on (You panel) the way a developer would.
            self.js("arguments[0].click()", self.q("developer-views"))
            self.wait("the Events tab", lambda: self.q("tab-events").is_displayed())
        self.click(f"tab-{view}")
        self.wait(f"the {view} view", lambda: self.q(f"tab-{view}").get_attribute("aria-selected") == "true")

    def screenshot(self, name: str) -> Path:
        """The whole page (not just the viewport: on a phone the views sit below the node panel)."""
        path = self.artifacts / f"{name}.png"
        try:
            size = self.driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
            shot = self.driver.execute_cdp_cmd(
                "Page.captureScreenshot",
                {
                    "format": "png",
                    "captureBeyondViewport": True,
                    "clip": {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 6000), "scale": 1},
                },
            )
            path.write_bytes(base64.b64decode(shot["data"]))
        except (WebDriverException, KeyError):
            self.driver.save_screenshot(str(path))
        return path

    def local_storage(self, key: str) -> str | None:
        return self.js("return window.localStorage.getItem(arguments[0])", key)

    def event_ids(self) -> list[str]:
        return self.js(
            "return [...document.querySelectorAll('[data-testid=event-row]')].map(r => r.dataset.id)"
        )

    def event_types(self) -> list[str]:
        return self.js(
            "return [...document.querySelectorAll('[data-testid=event-row]')].map(r => r.dataset.type)"
        )


def retrying(action: Callable[[], Any]) -> Any:
    """Runs a DOM action again when the element it held was replaced by a live update meanwhile."""
    for attempt in range(5):
        try:
            return action()
        except StaleElementReferenceException:
            if attempt == 4:
                raise
    return None


__all__ = [
    "Browser", "Node", "TestFailure", "WAIT_SECONDS", "PHONE", "DESKTOP", "start_linked_pair", "linked",
    "wait_until", "retrying", "TimeoutException",
]
