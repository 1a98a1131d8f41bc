"""The console's cluster page in a real browser, on a real cluster: mark a
disk down and up again from its node's page, remove a node through the
page (a confirmation that says what will happen) and watch its replicas
move off, with the bytes copied and the rate, until it leaves the map; an
action on a node or disk that is not there is refused with the reason.

Run by tests/live_cluster.rs; needs STRATA_UI (a node's https://.../ui),
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (an admin key), REMOVE (the node
to remove), DISK_NODE (a node whose disk is marked down and up), SHOTS, and
CHROMIUM / CHROMEDRIVER.
"""

import os
import re
import sys
import time
import unittest

from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

UI = os.environ["STRATA_UI"]
SHOTS = os.environ["SHOTS"]
REMOVE = os.environ["REMOVE"]
DISK_NODE = os.environ["DISK_NODE"]


def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    # The cluster's own CA signs the node's certificate; this browser has
    # never heard of it.
    for arg in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,1000", "--ignore-certificate-errors"]:
        options.add_argument(arg)
    return webdriver.Chrome(options=options, service=Service(os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")))


class ClusterPage(unittest.TestCase):
    def test_remove_a_node_and_watch_it_go(self):
        os.makedirs(SHOTS, exist_ok=True)
        b = browser()
        # A page that reloads itself replaces its elements under a check.
        wait = WebDriverWait(b, 120, poll_frequency=0.3, ignored_exceptions=[StaleElementReferenceException, NoSuchElementException])
        try:
            b.get(UI + "/login")
            b.find_element(By.ID, "access_key_id").send_keys(os.environ["AWS_ACCESS_KEY_ID"])
            b.find_element(By.ID, "secret_access_key").send_keys(os.environ["AWS_SECRET_ACCESS_KEY"])
            b.find_element(By.ID, "sign-in").click()
            wait.until(lambda d: "Overview" in d.title)
            b.get(UI + "/cluster")
            self.assertTrue(b.find_elements(By.CSS_SELECTOR, f"tr[data-node='{REMOVE}']"))
            self.assertIn("No rebalancing under way", b.find_element(By.TAG_NAME, "body").text)
            b.save_screenshot(os.path.join(SHOTS, "cluster-1-before.png"))

            # A node's own page: its disks and the partitions it holds.
            b.find_element(By.CSS_SELECTOR, f"tr[data-node='{REMOVE}'] a.node").click()
            wait.until(lambda d: d.find_elements(By.ID, "disks"))
            self.assertEqual(len(b.find_elements(By.CSS_SELECTOR, "#disks tbody tr")), 1)
            self.assertGreater(len(b.find_elements(By.CSS_SELECTOR, "#node-partitions tbody tr")), 0)
            b.save_screenshot(os.path.join(SHOTS, "cluster-node.png"))
            # Every partition with its replicas, and those of one state.
            b.get(UI + "/cluster")
            b.find_element(By.ID, "all-partitions").click()
            wait.until(lambda d: d.find_elements(By.ID, "partitions"))
            rows = b.find_elements(By.CSS_SELECTOR, "#partitions tbody tr")
            self.assertEqual(len(rows), int(os.environ["PARTITIONS"]))
            self.assertTrue(all(f"{REMOVE}:0 (Up, disk Up)" in r.text for r in rows), [r.text for r in rows])
            b.save_screenshot(os.path.join(SHOTS, "cluster-partitions.png"))
            b.get(UI + "/cluster/partitions?state=degraded")
            self.assertEqual(b.find_element(By.ID, "partition-count").text, "0 partitions.")
            b.get(UI + "/cluster/nodes/99")
            self.assertIn("node 99 is not in the cluster", b.find_element(By.TAG_NAME, "body").text)
            b.get(UI + "/cluster")

            # A disk's actions, from its node's page: down (the
            # confirmation says what follows), then up again; a disk that
            # is not there is refused.
            def disk_state(d):
                b.get(UI + f"/cluster/nodes/{DISK_NODE}")
                return d.find_element(By.CSS_SELECTOR, "#disks tr[data-disk='0'] td.state").text

            b.get(UI + f"/cluster/nodes/{DISK_NODE}")
            b.find_element(By.CSS_SELECTOR, "#disks tr[data-disk='0'] button.mark-disk-down").click()
            wait.until(lambda d: d.find_elements(By.ID, "consequence"))
            self.assertIn(f"Mark disk 0 of node {DISK_NODE} down?", b.find_element(By.ID, "consequence").text)
            b.save_screenshot(os.path.join(SHOTS, "cluster-disk-confirm.png"))
            b.find_element(By.ID, "confirm").click()
            wait.until(lambda d: disk_state(d) == "Down")
            b.save_screenshot(os.path.join(SHOTS, "cluster-disk-down.png"))
            form = b.find_element(By.CSS_SELECTOR, "#disks tr[data-disk='0'] form:has(button.mark-disk-up)")
            b.execute_script("arguments[0].querySelector('input[name=disk]').value = '5'", form)
            form.find_element(By.CSS_SELECTOR, "button.mark-disk-up").click()
            wait.until(lambda d: f"node {DISK_NODE} has no disk 5" in d.find_element(By.TAG_NAME, "body").text)
            b.get(UI + f"/cluster/nodes/{DISK_NODE}")
            b.find_element(By.CSS_SELECTOR, "#disks tr[data-disk='0'] button.mark-disk-up").click()
            wait.until(lambda d: d.find_elements(By.ID, "consequence"))
            b.find_element(By.ID, "confirm").click()
            wait.until(lambda d: disk_state(d) == "Up")
            b.get(UI + "/cluster")

            # An action on a node that is not there: refused, with the reason.
            form = b.find_element(By.CSS_SELECTOR, f"tr[data-node='{REMOVE}'] form:has(button.mark-down)")
            b.execute_script("arguments[0].querySelector('input[name=node]').value = '99'", form)
            form.find_element(By.CSS_SELECTOR, "button.mark-down").click()
            wait.until(lambda d: "node 99 is not in the cluster" in d.find_element(By.TAG_NAME, "body").text)

            # Remove the node: the confirmation says what will happen.
            b.get(UI + "/cluster")
            b.find_element(By.CSS_SELECTOR, f"tr[data-node='{REMOVE}'] button.remove-node").click()
            wait.until(lambda d: d.find_elements(By.ID, "consequence"))
            consequence = b.find_element(By.ID, "consequence").text
            self.assertIn(f"Remove node {REMOVE}?", consequence)
            self.assertIn("copied to other nodes", consequence)
            b.save_screenshot(os.path.join(SHOTS, "cluster-2-confirm.png"))
            b.find_element(By.ID, "confirm").click()

            # The page refreshes itself while the node's replicas move; it
            # shows the node being removed, then no more.
            wait.until(lambda d: "being removed" in d.find_element(By.TAG_NAME, "body").text or not d.find_elements(By.CSS_SELECTOR, f"tr[data-node='{REMOVE}']"))
            b.save_screenshot(os.path.join(SHOTS, "cluster-3-moving.png"))

            # Reloaded often enough to see every move (each lasts a second
            # at least): what each has copied and how fast.
            copies, shot = [], False
            deadline = time.time() + 120
            while True:
                b.get(UI + "/cluster")
                try:
                    text = b.find_element(By.TAG_NAME, "body").text
                    seen = [li.text for li in b.find_elements(By.CSS_SELECTOR, "#moves li")]
                    left = b.find_elements(By.CSS_SELECTOR, f"tr[data-node='{REMOVE}']")
                except StaleElementReferenceException:
                    continue  # The page reloaded itself meanwhile.
                copies += [t for t in seen if re.search(r"copied [0-9.]+ (KiB|MiB|GiB)", t)]
                if copies and not shot:
                    b.save_screenshot(os.path.join(SHOTS, "cluster-3-copying.png"))
                    shot = True
                if not left and "Moves under way: 0." in text:
                    break
                self.assertLess(time.time(), deadline, "the node never left the map")
                time.sleep(0.3)
            self.assertTrue(copies, "no page showed a move's bytes copied")
            self.assertTrue(all(re.search(r"at [0-9]+\.[0-9] MB/s", c) for c in copies), copies)
            self.assertTrue(any(not re.search(r"at 0\.0 MB/s", c) for c in copies), f"every copy at 0.0 MB/s: {copies}")
            b.save_screenshot(os.path.join(SHOTS, "cluster-4-after.png"))

            # Striped blobs: no table yet; a bad tract size is refused;
            # the table made through its confirmation shows its rows.
            b.find_element(By.ID, "striped").click()
            wait.until(lambda d: d.find_elements(By.ID, "no-table"))
            def make_table(mib):
                for field, value in [("tract-mib", mib), ("row-disks", "3"), ("scatter", "2"), ("row-gib", "1")]:
                    e = b.find_element(By.ID, field)
                    e.clear()
                    e.send_keys(value)
                b.find_element(By.ID, "make-table").click()

            make_table("3")
            wait.until(lambda d: "not a power of two" in d.find_element(By.TAG_NAME, "body").text)
            b.get(UI + "/striped")
            make_table("1")
            wait.until(lambda d: d.find_elements(By.ID, "consequence"))
            self.assertIn("tracts of 1.0 MiB", b.find_element(By.ID, "consequence").text)
            b.find_element(By.ID, "confirm").click()
            wait.until(lambda d: d.find_elements(By.ID, "tract-table"))
            rows = int(b.find_element(By.ID, "tract-rows").text)
            self.assertGreater(rows, 0)
            self.assertEqual(len(b.find_elements(By.CSS_SELECTOR, "#tract-rows-list tbody tr")), min(rows, 200))
            b.save_screenshot(os.path.join(SHOTS, "striped.png"))
            b.find_element(By.ID, "reclaim-orphans").click()
            wait.until(lambda d: d.find_elements(By.ID, "pass-result"))

            # Transactions: every node's participant, and a recovery pass run now.
            b.get(UI + "/transactions")
            wait.until(lambda d: d.find_elements(By.ID, "participants"))
            self.assertEqual(len(b.find_elements(By.CSS_SELECTOR, "#participants tbody tr")), int(os.environ["NODES_AFTER"]))
            self.assertEqual(b.find_element(By.ID, "intents-held").text, "Intents held in all: 0.")
            self.assertEqual(b.find_element(By.ID, "decided").text, "Since the nodes started: 0 committed, 0 aborted.")
            b.save_screenshot(os.path.join(SHOTS, "transactions.png"))
            b.find_element(By.ID, "run-recover").click()
            wait.until(lambda d: d.find_elements(By.ID, "pass-result"))
            self.assertIn("expired", b.find_element(By.ID, "pass-result").text)

            # On a phone's width these pages fit too.
            b.set_window_size(390, 844)
            for path in ["/cluster", "/cluster/nodes/1", "/cluster/partitions", "/striped", "/transactions"]:
                b.get(UI + path)
                over = b.execute_script("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
                self.assertLessEqual(over, 0, f"{path} is {over} px wider than a 390 px screen")
            b.save_screenshot(os.path.join(SHOTS, "narrow-cluster.png"))
        finally:
            b.quit()


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    sys.exit(0 if result.wasSuccessful() else 1)
