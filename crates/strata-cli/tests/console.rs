//! The web console against a real `strata server`: over raw HTTP (sign-in,
//! the session cookie's attributes, CSRF refusal, sign-out, what a key
//! without admin rights sees), and in Debian's headless Chromium driven by
//! Selenium (tests/console/test_console.py), whose screenshots of every
//! page go to `target/console-screenshots`.

mod common;

use common::Node;
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
    assert!(page.contains("id=\"chart-rate\"") && page.contains("id=\"chart-latency\"") && page.contains("id=\"capacity\""), "{page}");
    assert!(page.contains("Needs attention") && page.contains("Nothing: every partition takes writes"), "{page}");
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
/// With an operator's certificate (`--tls-cert`) that names neither the
/// loopback address nor anything the console could ask for, the console
/// still serves: a user signs in over TLS and sees the overview and the
/// buckets (read through the S3 port, over TLS too).
#[tokio::test(flavor = "multi_thread")]
async fn the_console_serves_with_an_operators_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let tls = data.join("tls");
    std::fs::create_dir_all(&tls).unwrap();
    let (cert, key) = strata_auth::tls::self_signed(&["storage.example.test".into()]).unwrap();
    std::fs::write(tls.join("cert.pem"), cert).unwrap();
    std::fs::write(tls.join("key.pem"), key).unwrap();
    std::fs::write(tls.join("server-name"), "storage.example.test").unwrap();
    let (c, k) = (tls.join("cert.pem").display().to_string(), tls.join("key.pem").display().to_string());
    let node = Node::start(&data, &["--tls-cert", &c, "--tls-key", &k, "--s3-listen", "127.0.0.1:0"]).await;
    assert!(node.url.starts_with("https://"), "{}", node.url);
    node.printed("S3 API on").await;
    let admin = strata_auth::credentials::load(&node.credentials()).expect("admin credentials");
    let browser = node.anonymous();
    let form = format!("access_key_id={}&secret_access_key={}", enc(&admin.access_key_id), enc(&admin.secret_access_key));
    let signed = browser
        .send(http::Method::POST, "/ui/login", &[("content-type", "application/x-www-form-urlencoded".into())], strata_client::full(form))
        .await
        .expect("the sign-in page answers over the operator's certificate");
    assert_eq!(signed.head.status, 303, "{:?}", signed.head);
    let cookie = signed.head.headers.get("set-cookie").and_then(|v| v.to_str().ok()).and_then(|c| c.split(';').next()).expect("a session cookie").to_owned();
    assert!(signed.head.headers["set-cookie"].to_str().unwrap().contains("Secure"), "over TLS the cookie is Secure");
    let get = |page: &'static str| {
        let (browser, cookie) = (browser.clone(), cookie.clone());
        async move {
            // A call the console could not make answers 502: an error here.
            let r = browser.send(http::Method::GET, page, &[("cookie", cookie)], strata_client::full("")).await.unwrap_or_else(|e| panic!("{page}: {e}"));
            assert_eq!(r.head.status, 200, "{page}");
            let body = String::from_utf8_lossy(&r.bytes().await.expect("the page")).into_owned();
            assert!(body.contains("Sign out"), "{page} is not a signed-in page: {body}");
            body
        }
    };
    get("/ui/overview").await;
    // A bucket made through the console (its S3 call over TLS) is listed.
    let csrf = csrf_of(&get("/ui/buckets").await);
    let made = browser
        .send(
            http::Method::POST,
            "/ui/buckets",
            &[("content-type", "application/x-www-form-urlencoded".into()), ("cookie", cookie.clone())],
            strata_client::full(format!("csrf={}&name=over-tls", enc(&csrf))),
        )
        .await
        .expect("the console creates the bucket");
    assert_eq!(made.head.status, 303, "{:?}", made.head);
    assert!(get("/ui/buckets").await.contains("over-tls"), "the new bucket is not listed");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_real_browser_drives_the_console() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&dir.path().join("data"), &["--s3-listen", "127.0.0.1:0"]).await;
    let line = node.printed("S3 API on").await;
    let s3 = line.split_whitespace().find(|w| w.starts_with("http://")).expect("S3 banner names the URL").to_owned();
    let admin = strata_auth::credentials::load(&node.credentials()).expect("admin credentials");
    common::browser_test(
        "console/test_console.py",
        dir.path(),
        &[
            ("STRATA_UI", format!("{}/ui", node.url)),
            ("STRATA_S3", s3),
            ("AWS_ACCESS_KEY_ID", admin.access_key_id),
            ("AWS_SECRET_ACCESS_KEY", admin.secret_access_key),
        ],
    );
}

/// The key-value page: a read-only store's versions, a key looked up as
/// text, a swap through its confirmation (and refused without one's
/// token), and a lookup of a key the store lacks.
#[tokio::test(flavor = "multi_thread")]
async fn the_key_value_page_swaps_versions_and_looks_up_keys() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&dir.path().join("data"), &[]).await;
    let admin = strata_auth::credentials::load(&node.credentials()).expect("admin credentials");
    let def = strata_kv::StoreDef { name: "scores".into(), partitions: 4, replication: 1, chunks: 2 };
    for v in [1u8, 2] {
        let recs: Vec<(Vec<u8>, Vec<u8>)> = (0..50u32).map(|i| (format!("k{i}").into_bytes(), format!("v{v}:{i}").into_bytes())).collect();
        strata_kv::build_in_memory(&def, recs, &dir.path().join(format!("b{v}")), strata_kv::Duplicates::Fail).unwrap();
    }
    node.client.post_json("/admin/kv/scores", &serde_json::json!({ "partitions": 4, "chunks": 2 })).await.unwrap();
    let mut versions = Vec::new();
    for v in [1u8, 2] {
        let loaded = node.client.post_json("/admin/kv/scores/load", &serde_json::json!({ "dir": dir.path().join(format!("b{v}")) })).await.unwrap();
        versions.push(loaded["version"].as_u64().unwrap());
    }
    node.client.post_json("/admin/kv/scores/swap", &serde_json::json!({ "version": versions[0] })).await.unwrap();

    let url = node.url.clone();
    let form = format!("access_key_id={}&secret_access_key={}", enc(&admin.access_key_id), enc(&admin.secret_access_key));
    let (_, head, _) = exchange(&url, "POST", "/ui/login", None, Some(&form));
    let cookie = session_cookie(&head);
    let (st, _, page) = exchange(&url, "GET", "/ui/kv", Some(&cookie), None);
    assert_eq!(st, 200);
    assert!(page.contains("scores") && page.contains(&format!("<option value=\"{}\">", versions[1])), "{page}");
    let (st, _, page) = exchange(&url, "GET", "/ui/kv/lookup?store=scores&kind=ro&key=k7", Some(&cookie), None);
    assert_eq!(st, 200, "{page}");
    assert!(page.contains("v1:7"), "{page}");
    let (st, _, page) = exchange(&url, "GET", "/ui/kv/lookup?store=scores&kind=ro&key=missing", Some(&cookie), None);
    assert_eq!(st, 404, "{page}");

    // The swap: a confirmation that says what happens, then the swap.
    let csrf = csrf_of(&page);
    let confirm = format!("csrf={csrf}&store=scores&action=swap&version={}", versions[1]);
    let (st, _, page) = exchange(&url, "POST", "/ui/kv/confirm", Some(&cookie), Some(&confirm));
    assert_eq!(st, 200);
    assert!(page.contains(&format!("Swap store scores to version {}?", versions[1])), "{page}");
    let forged = format!("csrf=forged&store=scores&action=swap&version={}", versions[1]);
    assert_eq!(exchange(&url, "POST", "/ui/kv/act", Some(&cookie), Some(&forged)).0, 403);
    let (_, _, page) = exchange(&url, "GET", "/ui/kv/lookup?store=scores&kind=ro&key=k7", Some(&cookie), None);
    assert!(page.contains("v1:7"), "a forged token swapped: {page}");
    let (st, _, _) = exchange(&url, "POST", "/ui/kv/act", Some(&cookie), Some(&confirm));
    assert_eq!(st, 303);
    let (_, _, page) = exchange(&url, "GET", "/ui/kv/lookup?store=scores&kind=ro&key=k7", Some(&cookie), None);
    assert!(page.contains("v2:7"), "{page}");
}
