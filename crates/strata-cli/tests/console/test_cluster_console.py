"""The console's cluster page in a real browser, on a real cluster: remove
a node through the page (a confirmation that says what will happen) and
watch its replicas move off until it leaves the map; an action on a node
that is not there is refused with the reason.

Run by tests/live_cluster.rs; needs STRATA_UI (a node's https://.../ui),
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (an admin key), REMOVE (the node
to remove), SHOTS, and CHROMIUM / CHROMEDRIVER.
"""

import os
import sys
import unittest

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

UI = os.environ["STRATA_UI"]
SHOTS = os.environ["SHOTS"]
REMOVE = os.environ["REMOVE"]


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
        wait = WebDriverWait(b, 120, poll_frequency=0.3)
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
            b.get(UI + "/cluster/nodes/99")
            self.assertIn("node 99 is not in the cluster", b.find_element(By.TAG_NAME, "body").text)
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

            def gone(d):
                try:
                    text = d.find_element(By.TAG_NAME, "body").text
                    return not d.find_elements(By.CSS_SELECTOR, f"tr[data-node='{REMOVE}']") and "Moves under way: 0." in text
                except Exception:
                    return False

            wait.until(gone)
            b.save_screenshot(os.path.join(SHOTS, "cluster-4-after.png"))
        finally:
            b.quit()


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    sys.exit(0 if result.wasSuccessful() else 1)
