//! The web console against a real `strata server`: over raw HTTP (sign-in,
//! the session cookie's attributes, CSRF refusal, sign-out, what a key
//! without admin rights sees), and in Debian's headless Chromium driven by
//! Selenium (tests/console/test_console.py), whose screenshots of every
//! page go to `target/console-screenshots`.

mod common;

use common::{Node, pyenv, workspace};
use std::io::{Read, Write};

/// One HTTP/1.1 exchange on a new connection: (status, head, body).
fn exchange(url: &str, method: &str, path: &str, cookie: Option<&str>, form: Option<&str>) -> (u16, String, String) {
    let addr = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(c) = cookie {
        req.push_str(&format!("Cookie: {c}\r\n"));
    }
    let body = form.unwrap_or("");
    if form.is_some() {
        req.push_str(&format!("Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).expect("send");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, head.to_owned(), body.to_owned())
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.trim()))
}

fn enc(s: &str) -> String {
    s.bytes().map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") }).collect()
}

/// The session cookie `Set-Cookie` gives, as `name=value`.
fn session_cookie(head: &str) -> String {
    header(head, "set-cookie").and_then(|c| c.split(';').next()).expect("a session cookie").to_owned()
}

fn csrf_of(page: &str) -> String {
    let at = page.find("name=\"csrf\" value=\"").expect("a CSRF field") + "name=\"csrf\" value=\"".len();
    page[at..].split('"').next().expect("its value").to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn sign_in_sessions_csrf_and_sign_out() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&dir.path().join("data"), &[]).await;
    let admin = strata_auth::credentials::load(&node.credentials()).expect("admin credentials");
    let url = node.url.clone();

    let (st, _, page) = exchange(&url, "GET", "/ui/login", None, None);
    assert_eq!(st, 200);
    assert!(page.contains("Sign in") && page.contains("type=\"password\""), "{page}");
    // Signed out, a page sends you to sign in (401 to a script).
    assert_eq!(exchange(&url, "GET", "/ui/overview", None, None).0, 401);

    // Wrong secret: refused, no session.
    let wrong = format!("access_key_id={}&secret_access_key=nope", enc(&admin.access_key_id));
    let (st, head, page) = exchange(&url, "POST", "/ui/login", None, Some(&wrong));
    assert_eq!(st, 401, "{head}");
    assert!(header(&head, "set-cookie").is_none(), "{head}");
    assert!(page.contains("not valid"), "{page}");

    // Right one: a session cookie that scripts cannot read, sent to this site only.
    let right = format!("access_key_id={}&secret_access_key={}", enc(&admin.access_key_id), enc(&admin.secret_access_key));
    let (st, head, _) = exchange(&url, "POST", "/ui/login", None, Some(&right));
    assert_eq!(st, 303, "{head}");
    let set = header(&head, "set-cookie").expect("set-cookie");
    assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict") && set.contains("Path=/ui"), "{set}");
    assert!(!set.contains(&admin.secret_access_key), "the secret in a cookie: {set}");
    let cookie = session_cookie(&head);
    let (st, _, page) = exchange(&url, "GET", "/ui/overview", Some(&cookie), None);
    assert_eq!(st, 200);
    assert!(page.contains("Signed in as") && page.contains("admin") && page.contains("This node"), "{page}");
    assert!(!page.contains(&admin.secret_access_key), "the secret on a page");

    // A forged or missing CSRF token changes nothing.
    for form in ["csrf=0000", ""] {
        let (st, _, page) = exchange(&url, "POST", "/ui/logout", Some(&cookie), Some(form));
        assert_eq!(st, 403, "{form:?}: {page}");
        assert!(page.contains("security token"), "{page}");
        assert_eq!(exchange(&url, "GET", "/ui/overview", Some(&cookie), None).0, 200, "still signed in");
    }
    // A forged session id is no session.
    assert_eq!(exchange(&url, "GET", "/ui/overview", Some("strata_console=forged"), None).0, 401);

    // Sign out with the page's token: the session is gone.
    let form = format!("csrf={}", csrf_of(&page));
    let (st, head, _) = exchange(&url, "POST", "/ui/logout", Some(&cookie), Some(&form));
    assert_eq!(st, 303, "{head}");
    assert!(header(&head, "set-cookie").is_some_and(|c| c.contains("Max-Age=0")), "{head}");
    assert_eq!(exchange(&url, "GET", "/ui/overview", Some(&cookie), None).0, 401);

    // A key without admin rights signs in and sees no node figures.
    let key = node.client.post_json("/admin/keys", &serde_json::json!({ "name": "reader" })).await.expect("key");
    let form = format!("access_key_id={}&secret_access_key={}", enc(key["access_key_id"].as_str().unwrap()), enc(key["secret_access_key"].as_str().unwrap()));
    let (st, head, _) = exchange(&url, "POST", "/ui/login", None, Some(&form));
    assert_eq!(st, 303, "{head}");
    let (st, _, page) = exchange(&url, "GET", "/ui/overview", Some(&session_cookie(&head)), None);
    assert_eq!(st, 200);
    assert!(page.contains("reader") && !page.contains("This node"), "{page}");
}

/// The whole console in a real browser (tests/console/test_console.py).
#[tokio::test(flavor = "multi_thread")]
async fn a_real_browser_drives_the_console() {
    for tool in ["/usr/bin/chromium", "/usr/bin/chromedriver"] {
        assert!(std::path::Path::new(tool).exists(), "{tool} is missing: scripts/test.sh installs Debian's chromium and chromium-driver");
    }
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&dir.path().join("data"), &["--s3-listen", "127.0.0.1:0"]).await;
    let line = node.printed("S3 API on").await;
    let s3 = line.split_whitespace().find(|w| w.starts_with("http://")).expect("S3 banner names the URL").to_owned();
    let admin = strata_auth::credentials::load(&node.credentials()).expect("admin credentials");
    let shots = workspace().join("target/console-screenshots");
    let out = std::process::Command::new(pyenv().join("bin/python"))
        .arg(workspace().join("crates/strata-cli/tests/console/test_console.py"))
        .env("STRATA_UI", format!("{}/ui", node.url))
        .env("STRATA_S3", &s3)
        .env("AWS_ACCESS_KEY_ID", &admin.access_key_id)
        .env("AWS_SECRET_ACCESS_KEY", &admin.secret_access_key)
        .env("SHOTS", &shots)
        .env("HOME", dir.path())
        // Selenium's own driver manager would try the network: the paths are given.
        .env("SE_AVOID_STATS", "true")
        .output()
        .expect("run python");
    let text = String::from_utf8_lossy(&out.stderr);
    println!("{}{text}", String::from_utf8_lossy(&out.stdout));
    assert!(out.status.success(), "browser tests failed:\n{text}");
}
