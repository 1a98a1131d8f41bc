"""A real browser against Strata's S3 API: Debian's headless Chromium,
driven by Selenium through Debian's chromedriver, loads pages from another
origin (a local HTTP server on its own port) that (1) upload a file through
an HTML form to a presigned POST policy whose key says ${filename}, and
(2) PUT and GET an object with cross-origin fetch(), which the browser
allows only after the bucket's CORS rules answer its preflight. With the
rules removed, the same fetch must fail in the browser.

Run by tests/s3.rs; needs STRATA_S3, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
and CHROMIUM / CHROMEDRIVER (default /usr/bin/chromium, /usr/bin/chromedriver).
"""

import html
import http.server
import json
import os
import sys
import tempfile
import threading
import unittest
import urllib.parse

import boto3
from botocore.config import Config
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

S3 = os.environ["STRATA_S3"]


def client():
    return boto3.client("s3", endpoint_url=S3, region_name="us-east-1", config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))


class Pages:
    """Pages served from an origin of their own (another port than S3's)."""

    def __init__(self):
        self.pages = {}
        pages = self.pages

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = pages.get(urllib.parse.urlparse(self.path).path, "<title>done</title>").encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    for arg in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"]:
        options.add_argument(arg)
    return webdriver.Chrome(options=options, service=Service(os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")))


FETCH_PAGE = """<!doctype html><title>loading</title><script>
(async () => {
  try {
    const put = await fetch(%(put)s, {method: "PUT", headers: {"Content-Type": "application/json"}, body: '{"from": "a browser"}'});
    const got = await fetch(%(get)s);
    document.title = "ok " + put.status + " " + put.headers.get("ETag") + " " + (await got.text());
  } catch (e) {
    document.title = "blocked: " + e;
  }
})();
</script>"""


class Browser(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pages = Pages()
        cls.driver = browser()

    @classmethod
    def tearDownClass(cls):
        cls.driver.quit()
        cls.pages.server.shutdown()

    def title_after(self, url, wait=20):
        self.driver.get(url)
        WebDriverWait(self.driver, wait).until(lambda d: d.title not in ("", "loading"))
        return self.driver.title

    def test_a_form_posts_a_file_to_a_presigned_policy(self):
        s3, b = client(), "browser-form-" + os.urandom(2).hex()
        s3.create_bucket(Bucket=b)
        done = self.pages.origin + "/done.html"
        post = s3.generate_presigned_post(
            Bucket=b,
            Key="browser/${filename}",
            Fields={"success_action_redirect": done},
            Conditions=[["starts-with", "$key", "browser/"], {"success_action_redirect": done}, ["content-length-range", 1, 10000]],
            ExpiresIn=300,
        )
        hidden = "".join(f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">' for k, v in post["fields"].items())
        self.pages.pages["/form.html"] = (
            f'<!doctype html><title>form</title><form id="f" action="{post["url"]}" method="post" enctype="multipart/form-data">'
            f'{hidden}<input type="file" name="file" id="file"><input type="submit" id="go" value="Upload"></form>'
        )
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "from the browser.txt")
            with open(path, "wb") as f:
                f.write(b"uploaded by Chromium through an HTML form")
            self.driver.get(self.pages.origin + "/form.html")
            self.driver.find_element(By.ID, "file").send_keys(path)
            self.driver.find_element(By.ID, "go").click()
            WebDriverWait(self.driver, 20).until(lambda d: d.current_url.startswith(done))
        # S3 redirects to success_action_redirect with the bucket, key and ETag.
        query = urllib.parse.parse_qs(urllib.parse.urlparse(self.driver.current_url).query)
        self.assertEqual(query["bucket"], [b])
        self.assertEqual(query["key"], ["browser/from the browser.txt"])
        got = s3.get_object(Bucket=b, Key="browser/from the browser.txt")
        self.assertEqual(got["Body"].read(), b"uploaded by Chromium through an HTML form")
        self.assertEqual(query["etag"][0].strip('"'), got["ETag"].strip('"'))

    def test_cross_origin_fetch_passes_cors_preflight(self):
        s3, b = client(), "browser-cors-" + os.urandom(2).hex()
        s3.create_bucket(Bucket=b)
        put_url = s3.generate_presigned_url("put_object", Params={"Bucket": b, "Key": "note.json"}, ExpiresIn=300)
        get_url = s3.generate_presigned_url("get_object", Params={"Bucket": b, "Key": "note.json"}, ExpiresIn=300)
        self.pages.pages["/fetch.html"] = FETCH_PAGE % {"put": json.dumps(put_url), "get": json.dumps(get_url)}
        page = self.pages.origin + "/fetch.html"

        # No CORS rules: the browser's preflight is refused and the PUT never happens.
        self.assertTrue(self.title_after(page).startswith("blocked"), self.driver.title)
        self.assertEqual(s3.list_objects_v2(Bucket=b).get("KeyCount"), 0)

        # A rule for another origin does not let this page in either.
        rule = {"AllowedOrigins": ["https://elsewhere.example"], "AllowedMethods": ["GET", "PUT"], "AllowedHeaders": ["*"], "ExposeHeaders": ["ETag"]}
        s3.put_bucket_cors(Bucket=b, CORSConfiguration={"CORSRules": [rule]})
        self.assertTrue(self.title_after(page).startswith("blocked"), self.driver.title)

        # A rule for this origin: the preflight passes, the PUT lands, the ETag is exposed.
        rule["AllowedOrigins"] = [self.pages.origin]
        s3.put_bucket_cors(Bucket=b, CORSConfiguration={"CORSRules": [rule]})
        title = self.title_after(page)
        etag = s3.head_object(Bucket=b, Key="note.json")["ETag"]
        self.assertEqual(title, f'ok 200 {etag} {{"from": "a browser"}}')


if __name__ == "__main__":
    result = unittest.main(argv=[sys.argv[0], *sys.argv[1:]], exit=False, verbosity=2).result
    sys.exit(0 if result.wasSuccessful() else 1)
