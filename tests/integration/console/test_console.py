"""The NameServer's web console in a real headless Chromium (Debian's ``chromium`` driven by
``chromedriver`` through Selenium), against a running cluster: every page loads and shows the
cluster's data, a message is found by id and by key, and a drain goes through its confirmation
and changes the route. Screenshots of every page are kept under ``test-output/console/`` (or
``$POCKETMQ_TEST_OUTPUT/console/``) as artefacts."""

from __future__ import annotations

import os
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select, WebDriverWait

from pocketmq import Consumer, Message, Producer
from pocketmq.wire.msgid import offset_msg_id, parse_offset_msg_id
from tests.integration.client.cluster import Cluster
from tests.integration.procs import ProcessGroup
from tests.support import free_port, require_executable, wait_until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]


def output_dir() -> Path:
    base = Path(os.environ.get("POCKETMQ_TEST_OUTPUT") or ROOT / "test-output")
    path = base / "console"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, str]]:
    tmp = tmp_path_factory.mktemp("console-cluster")
    group = ProcessGroup(tmp / "logs")
    cluster = Cluster(group, tmp)
    port = free_port()
    try:
        cluster.start_namesrv("--console-port", str(port))
        cluster.start_broker("broker-a", 0)
        cluster.start_broker("broker-a", 1)
        cluster.start_broker("broker-b", 0)
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: urllib.request.urlopen(url + "/healthz", timeout=2).status == 200, 10,
                   message="console answers")
        yield cluster, url
    finally:
        group.stop_all()


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = require_executable("chromium", "chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000", "--no-proxy-server"):
        options.add_argument(arg)
    service = Service(executable_path=require_executable("chromedriver", "chromium-driver"))
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def shot(driver: WebDriver, name: str) -> None:
    path = output_dir() / f"{name}.png"
    assert driver.save_screenshot(str(path)), path
    assert path.stat().st_size > 1000


def submit(driver: WebDriver, selector: str) -> None:
    """Click the button matched by ``selector`` and wait until the next page has loaded."""
    # The old document is marked; the next one is loaded when the mark is gone and it is complete.
    # (Watching the old <html> element go stale races with the navigation: Chromium may answer
    # "Node with given id does not belong to the document" instead of a stale-element error.)
    driver.execute_script("window.__beforeSubmit = true")
    driver.find_element(By.CSS_SELECTOR, selector).click()
    WebDriverWait(driver, 20, ignored_exceptions=(WebDriverException,)).until(lambda d: d.execute_script(
        "return window.__beforeSubmit === undefined && document.readyState === 'complete'"))


def cells(driver: WebDriver, table_id: str) -> list[list[str]]:
    rows = driver.find_elements(By.CSS_SELECTOR, f"table#{table_id} tbody tr")
    return [[td.text for td in row.find_elements(By.TAG_NAME, "td")] for row in rows]


def test_console_pages_show_the_running_cluster(cluster: tuple[Cluster, str], browser: WebDriver) -> None:
    c, url = cluster
    topic, group = "console-t", "console-g"
    c.create_topic(topic, queues=2)
    stop = threading.Event()
    with Producer(c.namesrv) as producer, Consumer(group, c.namesrv, consume_from="first",
                                                  heartbeat_interval=1.0) as consumer:
        sent = [producer.send(Message(topic, f"order {i}".encode(), keys=[f"order-{i}"], tags="paid"))
                for i in range(10)]
        consumer.subscribe(topic)
        got: list[str] = []
        consumer.start(lambda m: got.append(m.msg_id))
        wait_until(lambda: len(got) >= 10, 20, message="consumed")
        wait_until(lambda: c.masters()[0].status().commit_log_max_offset > 0, 5, message="stored")

        # Cluster: every broker with its role and HA state; slaves replicate.
        browser.get(url + "/")
        rows = {(r[1], r[2]): r for r in cells(browser, "brokers")}
        assert set(rows) == {("broker-a", "0"), ("broker-a", "1"), ("broker-b", "0")}
        assert rows[("broker-a", "0")][4] == "ASYNC_MASTER" and rows[("broker-a", "1")][4] == "SLAVE"
        assert int(rows[("broker-a", "0")][5]) > 0
        wait_until(lambda: (browser.get(url + "/"), "replicating from" in browser.page_source)[1], 15,
                   message="slave shown replicating")
        shot(browser, "cluster")

        # Topics and one topic's queue offsets.
        browser.get(url + "/topics")
        assert topic in [r[0] for r in cells(browser, "topics")]
        browser.get(url + "/topic?name=" + topic)
        queues = cells(browser, "queues")
        assert len(queues) == 4  # 2 queues on each of 2 groups
        assert sum(int(r[4]) for r in queues) == 10  # max offsets add up to what was sent
        shot(browser, "topic")

        # The group: lag per queue and the running member.
        browser.get(url + "/groups")
        assert group in [r[0] for r in cells(browser, "groups")]
        browser.get(url + "/group?name=" + group)
        wait_until(lambda: (browser.refresh(), all(r[5] == "0" for r in cells(browser, "lag")))[1], 15,
                   message="lag 0 shown")
        lag = cells(browser, "lag")
        assert {r[0] for r in lag} >= {topic} and sum(int(r[3]) for r in lag if r[0] == topic) == 10
        connections = cells(browser, "connections")
        assert [r[0] for r in connections] == [consumer.async_consumer.client_id]
        assert connections[0][2] == "pocketmq-python" and topic in connections[0][6]
        shot(browser, "group")

        # Reset the running group to the earliest offsets through the form and its confirmation.
        got.clear()
        to = Select(browser.find_element(By.CSS_SELECTOR, "form#reset select[name=to]"))
        to.select_by_value("earliest")
        submit(browser, "form#reset button")
        asked = f"reset the offsets of consumer group {group} on topic {topic} to earliest"
        assert asked in browser.page_source
        submit(browser, "form#confirm button")
        reset_rows = [[td.text for td in r.find_elements(By.TAG_NAME, "td")]
                      for r in browser.find_elements(By.CSS_SELECTOR, "main table tbody tr")]
        assert len(reset_rows) == 4 and all(r[3] == "0" for r in reset_rows), reset_rows
        shot(browser, "group-reset")
        wait_until(lambda: len(got) >= 10, 20, message="the running consumer read everything again")

        # Message lookup by id (an offset message id names its broker: no topic needed), by key.
        browser.get(url + "/message")
        browser.find_element(By.CSS_SELECTOR, "form#by-id input[name=id]").send_keys(sent[3].msg_id)
        submit(browser, "form#by-id button")
        assert browser.find_element(By.ID, "body").text == "order 3"
        detail = dict((r[0], r[1]) for r in cells(browser, "message"))
        assert detail["topic"] == topic and detail["keys"] == "order-3" and detail["msg id"] == sent[3].msg_id
        shot(browser, "message-by-id")
        host, physical = parse_offset_msg_id(sent[3].msg_id)
        browser.get(url + "/message?id=" + offset_msg_id(host, physical + 1))
        assert browser.find_elements(By.ID, "not-found")  # no message starts one byte further
        browser.get(url + "/message")
        browser.find_element(By.CSS_SELECTOR, "form#by-key input[name=topic]").send_keys(topic)
        browser.find_element(By.CSS_SELECTOR, "form#by-key input[name=key]").send_keys("order-7")
        submit(browser, "form#by-key button")
        found = cells(browser, "messages")
        assert [(r[0], r[8]) for r in found] == [(sent[7].msg_id, "order 7")]
        shot(browser, "message-by-key")
        stop.set()

    # Broker page: the config with its live keys.
    browser.get(url + "/broker?name=broker-b")
    config = {r[0]: r for r in cells(browser, "config-0")}
    assert config["maxMessageSize"][2] == "yes" and config["listenPort"][2] == ""
    shot(browser, "broker")


def test_drain_from_the_console_asks_for_confirmation(cluster: tuple[Cluster, str],
                                                      browser: WebDriver) -> None:
    c, url = cluster
    c.create_topic("console-drain", queues=1)
    browser.get(url + "/")
    submit(browser, "form#drain-broker-b button")
    assert "wipe the write permission of broker group broker-b" in browser.page_source
    perms = {q.broker_name: q.perm for q in (c.route("console-drain") or pytest.fail("no route")).queue_datas}
    assert perms["broker-b"] == 6  # nothing happened before the confirmation
    shot(browser, "drain-confirm")
    submit(browser, "form#confirm button")
    assert "Requested: wipe the write permission" in browser.find_element(By.ID, "result").text
    route = c.route("console-drain")
    assert route is not None and {q.broker_name: q.perm for q in route.queue_datas}["broker-b"] == 4
    browser.get(url + "/")
    rows = {(r[1], r[2]): r for r in cells(browser, "brokers")}
    assert rows[("broker-b", "0")][7].startswith("drained")
    shot(browser, "drained")
    submit(browser, "form#undrain-broker-b button")
    submit(browser, "form#confirm button")
    route = c.route("console-drain")
    assert route is not None and {q.broker_name: q.perm for q in route.queue_datas}["broker-b"] == 6

    # A POST without the page's token is refused.
    request = urllib.request.Request(url + "/action", data=b"action=drain&broker=broker-b", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)
    assert refused.value.code == 403
