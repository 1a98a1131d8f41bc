"""The web console in a real browser: Debian's headless Chromium driven by
Selenium through Debian's chromedriver, against a real `strata server`.

Signs in (and is refused with a wrong secret), creates a bucket, uploads a
20 MB file through the page (an S3 multipart upload behind it) and
downloads it identical, browses a bucket of 5,000 objects by prefix and
page, creates a key and grants it one bucket, signs in as that key and
sees only that bucket, and is refused a forged CSRF token and an admin
page. Every page it visits is saved as a screenshot.

Run by tests/console.rs; needs STRATA_UI (the node's /ui URL), STRATA_S3,
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (the admin key), SHOTS (where
screenshots go), and CHROMIUM / CHROMEDRIVER (default /usr/bin/chromium,
/usr/bin/chromedriver).
"""

import concurrent.futures
import hashlib
import os
import sys
import tempfile
import time
import unittest

import boto3
from botocore.config import Config
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

UI = os.environ["STRATA_UI"]
S3 = os.environ["STRATA_S3"]
SHOTS = os.environ["SHOTS"]
ADMIN = (os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"])


def s3():
    return boto3.client("s3", endpoint_url=S3, region_name="us-east-1", config=Config(signature_version="s3v4", s3={"addressing_style": "path"}, max_pool_connections=16))


def browser(downloads):
    options = webdriver.ChromeOptions()
    options.binary_location = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    for arg in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,900"]:
        options.add_argument(arg)
    options.add_experimental_option("prefs", {"download.default_directory": downloads, "download.prompt_for_download": False})
    return webdriver.Chrome(options=options, service=Service(os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")))


class Console(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        os.makedirs(SHOTS, exist_ok=True)
        cls.tmp = tempfile.mkdtemp()
        cls.downloads = os.path.join(cls.tmp, "downloads")
        os.makedirs(cls.downloads)
        cls.b = browser(cls.downloads)
        # A check may read an element the page just replaced (a reload):
        # it is asked again rather than failing the test.
        cls.wait = WebDriverWait(cls.b, 60, ignored_exceptions=[StaleElementReferenceException, NoSuchElementException])

    @classmethod
    def tearDownClass(cls):
        cls.b.quit()

    def shot(self, name):
        self.b.save_screenshot(os.path.join(SHOTS, f"{name}.png"))

    def open(self, path):
        self.b.get(UI.rstrip("/") + path.removeprefix("/ui"))

    def sign_in(self, key, secret):
        self.open("/ui/login")
        self.b.find_element(By.ID, "access_key_id").send_keys(key)
        self.b.find_element(By.ID, "secret_access_key").send_keys(secret)
        self.b.find_element(By.ID, "sign-in").click()

    def sign_out(self):
        self.b.find_element(By.ID, "sign-out").click()
        self.wait.until(lambda d: "Sign in" in d.title)

    def text(self):
        return self.b.find_element(By.TAG_NAME, "body").text

    def until_text(self, needle):
        """Waits until the page (after a click's navigation) says `needle`."""

        def has(d):
            try:
                return needle in d.find_element(By.TAG_NAME, "body").text
            except Exception:
                return False

        try:
            self.wait.until(has)
        except Exception:
            self.fail(f"the page never said {needle!r}: {self.text()}")

    def test_the_console_end_to_end(self):
        b = self.b
        # Wrong credentials: a message, no session.
        self.sign_in(ADMIN[0], "not-the-secret")
        self.until_text("not valid")
        self.shot("01-sign-in-refused")
        self.sign_in(*ADMIN)
        self.wait.until(lambda d: "Overview" in d.title)
        self.assertIn("Signed in as", self.text())
        self.shot("02-overview")

        # A bucket, made on the page.
        self.open("/ui/buckets")
        b.find_element(By.ID, "bucket-name").send_keys("photos")
        b.find_element(By.ID, "create-bucket").click()
        self.wait.until(lambda d: "Bucket photos" in d.title)
        # A name S3 refuses: the page says why.
        self.open("/ui/buckets")
        b.execute_script("document.getElementById('bucket-name').removeAttribute('pattern')")
        b.find_element(By.ID, "bucket-name").send_keys("Bad_Name")
        b.find_element(By.ID, "create-bucket").click()
        self.until_text("InvalidBucketName")
        self.shot("03-bucket-name-refused")

        # A 20 MB upload through the page, then a download identical to it.
        data = os.urandom(20 << 20)
        path = os.path.join(self.tmp, "big.bin")
        with open(path, "wb") as f:
            f.write(data)
        self.open("/ui/buckets/photos")
        b.find_element(By.ID, "file").send_keys(path)
        b.find_element(By.ID, "upload").click()
        self.wait.until(lambda d: any(w in d.find_element(By.ID, "upload-status").text for w in ["Uploaded big.bin", "refused", "failed"]))
        self.assertIn("Uploaded big.bin", b.find_element(By.ID, "upload-status").text)
        self.shot("04-uploaded")
        self.wait.until(lambda d: d.find_elements(By.LINK_TEXT, "big.bin"))
        b.find_element(By.LINK_TEXT, "big.bin").click()
        self.wait.until(lambda d: d.find_elements(By.ID, "download"))
        self.assertIn("20971520", self.text())
        self.shot("05-object")
        b.find_element(By.ID, "download").click()
        target = os.path.join(self.downloads, "big.bin")
        deadline = time.time() + 60
        while time.time() < deadline and not (os.path.exists(target) and os.path.getsize(target) == len(data)):
            time.sleep(0.2)
        with open(target, "rb") as f:
            got = f.read()
        self.assertEqual(hashlib.sha256(got).hexdigest(), hashlib.sha256(data).hexdigest(), "the download differs from the upload")

        # Tags on the object, and the bucket's expiration.
        tags = b.find_element(By.ID, "tags")
        tags.clear()
        tags.send_keys("team=photos\nstage=raw")
        b.find_element(By.ID, "set-tags").click()
        self.until_text("tag team")
        self.assertEqual(s3().get_object_tagging(Bucket="photos", Key="big.bin")["TagSet"], [{"Key": "team", "Value": "photos"}, {"Key": "stage", "Value": "raw"}])
        # A rule set by another tool stays through the console's changes.
        s3().put_bucket_lifecycle_configuration(
            Bucket="photos",
            LifecycleConfiguration={"Rules": [{"ID": "tmp-cleanup", "Filter": {"Prefix": "tmp/"}, "Status": "Enabled", "Expiration": {"Days": 1}}]},
        )
        self.open("/ui/buckets/photos")
        self.until_text('Objects under "tmp/" expire after 1 day.')
        b.find_element(By.ID, "expire-days").send_keys("30")
        b.find_element(By.ID, "set-lifecycle").click()
        self.until_text("Objects expire after 30 days.")
        b.find_element(By.ID, "expire-prefix").send_keys("raw/")
        b.find_element(By.ID, "expire-days").send_keys("7")
        b.find_element(By.ID, "set-lifecycle").click()
        self.until_text('Objects under "raw/" expire after 7 days.')
        self.shot("05a-lifecycle")
        rules = {r["ID"]: r for r in s3().get_bucket_lifecycle_configuration(Bucket="photos")["Rules"]}
        self.assertEqual(sorted(rules), ["console-expiration", "console-expiration raw/", "tmp-cleanup"])
        self.assertEqual(rules["tmp-cleanup"]["Expiration"]["Days"], 1)
        # Remove the other tool's rule: only it goes.
        row = next(r for r in b.find_elements(By.CSS_SELECTOR, "#lifecycle-rules tbody tr") if r.text.startswith("tmp-cleanup"))
        row.find_element(By.CSS_SELECTOR, "button.remove-rule").click()

        def tmp_rule_gone(d):
            try:
                return "tmp/" not in d.find_element(By.ID, "lifecycle").text
            except Exception:
                return False  # Still loading.

        self.wait.until(tmp_rule_gone)
        self.assertIn("Objects expire after 30 days.", b.find_element(By.ID, "lifecycle").text)
        self.assertEqual(sorted(r["ID"] for r in s3().get_bucket_lifecycle_configuration(Bucket="photos")["Rules"]), ["console-expiration", "console-expiration raw/"])
        b.execute_script("document.getElementById('expire-days').removeAttribute('pattern')")
        b.find_element(By.ID, "expire-days").send_keys("soon")
        b.find_element(By.ID, "set-lifecycle").click()
        self.until_text("is not a number of days")

        # A bucket of 5,000 objects, browsed by prefix and page.
        c = s3()
        c.create_bucket(Bucket="many")
        keys = [f"logs/{d:02d}/{i:04d}.txt" for d in range(5) for i in range(1000)]
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda k: c.put_object(Bucket="many", Key=k, Body=k.encode()), keys))
        # The overview's charts now have the last minutes' PUTs.
        self.open("/ui/overview")
        legend = b.find_element(By.ID, "chart-rate").text
        self.assertRegex(legend, r"PUT \(now [0-9.]+ /s, peak [0-9.]+ /s\)")
        self.assertNotIn("peak 0.0 /s)", legend.split("GET")[0], "5,000 PUTs and the chart shows none")
        self.shot("06a-overview-charts")
        # On a phone's width the pages still fit: nothing wider than the screen.
        b.set_window_size(390, 844)
        for path, name in [("/ui/overview", "narrow-overview"), ("/ui/buckets/photos", "narrow-bucket")]:
            self.open(path)
            over = b.execute_script("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
            self.assertLessEqual(over, 0, f"{path} is {over} px wider than a 390 px screen")
            self.shot(name)
        b.set_window_size(1280, 900)
        self.open("/ui/buckets/many")
        b.find_element(By.LINK_TEXT, "📁 logs/").click()
        self.wait.until(lambda d: d.find_elements(By.LINK_TEXT, "📁 03/"))
        self.assertEqual(len(b.find_elements(By.CSS_SELECTOR, "a.folder")), 5)
        self.shot("06-folders")
        b.find_element(By.LINK_TEXT, "📁 03/").click()
        seen = []
        for page in range(10):
            self.wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "a.object"))
            names = [a.text for a in b.find_elements(By.CSS_SELECTOR, "a.object")]
            self.assertEqual(len(names), 100, f"page {page}")
            seen.extend(names)
            if page == 0:
                self.shot("07-objects-page-1")
            nxt = b.find_elements(By.ID, "next-page")
            if page < 9:
                nxt[0].click()
            else:
                self.assertEqual(nxt, [], "a page after the last")
        self.assertEqual(seen, [f"{i:04d}.txt" for i in range(1000)], "the pages skip or repeat objects")

        # A key, granted one bucket.
        self.open("/ui/keys")
        b.find_element(By.ID, "key-name").send_keys("photographer")
        b.find_element(By.ID, "create-key").click()
        self.wait.until(lambda d: d.find_elements(By.ID, "new-key-secret"))
        key, secret = b.find_element(By.ID, "new-key-id").text, b.find_element(By.ID, "new-key-secret").text
        self.shot("08-key-created")
        self.open("/ui/keys")
        self.assertNotIn(secret, b.page_source, "a secret shown twice")
        row = b.find_element(By.CSS_SELECTOR, f"tr[data-key='{key}']")
        row.find_element(By.NAME, "bucket").send_keys("photos")
        Select(row.find_element(By.NAME, "right")).select_by_value("readwrite")
        row.find_element(By.CSS_SELECTOR, "form.grant button").click()
        self.wait.until(lambda d: "photos: readwrite" in d.find_element(By.CSS_SELECTOR, f"tr[data-key='{key}']").text)
        self.shot("09-keys")
        self.sign_out()

        # As that key: only its bucket.
        self.sign_in(key, secret)
        self.wait.until(lambda d: "Overview" in d.title)
        self.open("/ui/buckets")
        buckets = [a.text for a in b.find_elements(By.CSS_SELECTOR, "a.bucket")]
        self.assertEqual(buckets, ["photos"])
        self.shot("10-buckets-as-a-key")
        # An admin page: refused, with the reason.
        self.open("/ui/keys")
        self.until_text("AccessDenied")
        self.shot("11-admin-page-refused")
        # A forged CSRF token: refused, and nothing is made.
        self.open("/ui/buckets")
        b.execute_script("document.querySelector('form[action=\"/ui/buckets\"] input[name=csrf]').value = 'forged'")
        b.find_element(By.ID, "bucket-name").send_keys("forged-bucket")
        b.find_element(By.ID, "create-bucket").click()
        self.until_text("security token")
        self.shot("12-csrf-refused")
        names = [x["Name"] for x in s3().list_buckets()["Buckets"]]
        self.assertNotIn("forged-bucket", names)
        self.sign_out()
        # Signed out, the pages are closed again.
        self.open("/ui/buckets")
        self.assertIn("Sign in", b.title)


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    sys.exit(0 if result.wasSuccessful() else 1)
