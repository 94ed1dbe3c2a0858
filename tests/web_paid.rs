//! VM01 and VM07 end to end: the official x402 client pays on the dev stack, the service
//! fetches from a real HTTPS origin on 127.0.0.1 (test CA, public-looking host names mapped
//! through the test seams), and every hostile target ends in the right status. Nothing here
//! leaves loopback: hostile redirects and DNS answers point only at loopback or are refused
//! before any connection.

mod common;

use std::sync::{Arc, LazyLock};

use common::TestServer;
use common::devstack::DevStack;
use common::facilitator_proxy::{FacilitatorProxy, Settle, facilitator_proxy};
use common::https::{Handler, Reply, Seen, Site, TestCa, gzip};
use serde_json::{Value, json};

const VM01: &str = "/v1/url-context";
const VM07: &str = "/v1/web-change-snapshot";
/// /verify and /settle go through the counted gateway too.
const FACILITATOR_REQUESTS: u64 = 2;

struct Web {
    stack: Arc<DevStack>,
    server: TestServer,
    site: Site,
    wrong_cert: Site,
    _ca: TestCa,
    /// The facilitator proxy, when the rig has one.
    facilitator: Option<FacilitatorProxy>,
}

impl Web {
    async fn start(handler: Handler) -> Web {
        Web::start_with(handler, None).await
    }

    /// A web rig whose facilitator is `settle`'s proxy in front of the real one (None: the
    /// real one directly).
    async fn start_with(handler: Handler, settle: Option<Settle>) -> Web {
        let stack = Arc::new(
            tokio::task::spawn_blocking(DevStack::start)
                .await
                .expect("stack"),
        );
        let proxy = match settle {
            Some(settle) => Some(facilitator_proxy(&stack, settle).await),
            None => None,
        };
        let ca = TestCa::new();
        let site = Site::start(
            ca.server_config(&["news.example.com", "blog.example.com"]),
            handler.clone(),
        )
        .await;
        // A valid certificate from the trusted CA, but for another name.
        let wrong_cert = Site::start(ca.server_config(&["other.example.net"]), handler).await;
        let connect_to = format!(
            "news.example.com={},blog.example.com={},wrongcert.example.com={}",
            site.addr, site.addr, wrong_cert.addr
        );
        let ca_path = ca.pem_path.display().to_string();
        let pay_to = stack.field("pay_to");
        let facilitator = proxy
            .as_ref()
            .map_or_else(|| stack.field("facilitator_url"), |p| p.url.clone());
        let server = TestServer::with_env(&[
            ("FACTOMAT_PAY_TO", pay_to.as_str()),
            ("FACTOMAT_FACILITATOR_URL", facilitator.as_str()),
            ("FACTOMAT_UNSAFE_TEST_CONNECT_TO", connect_to.as_str()),
            ("FACTOMAT_UNSAFE_TEST_CA", ca_path.as_str()),
            (
                "FACTOMAT_UNSAFE_TEST_DNS",
                "loopback.example.com=127.0.0.1,private.example.com=10.20.30.40,metadata.example.com=169.254.169.254,v6.example.com=::1",
            ),
        ])
        .await;
        // The start-up /supported check is counted too; let it land before measuring.
        for _ in 0..50 {
            if server.outbound() >= 1 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        Web {
            stack,
            server,
            site,
            wrong_cert,
            _ca: ca,
            facilitator: proxy,
        }
    }

    /// One paid call with the official client, answered 200: the client's whole record
    /// (status, headers, body, the PAYMENT-SIGNATURE it sent).
    async fn paid_call(&self, path: &str, request: &Value) -> Value {
        let url = format!("{}{path}", self.server.url);
        let (stack, request) = (self.stack.clone(), request.clone());
        let answer = tokio::task::spawn_blocking(move || stack.pay(&url, &request))
            .await
            .expect("pay");
        assert_eq!(answer["status"], 200, "{answer}");
        answer
    }

    /// One paid call with the official client; returns (body, fetch requests made).
    async fn pay(&self, path: &str, request: Value) -> (Value, u64) {
        let before = self.server.outbound();
        let answer = self.paid_call(path, &request).await;
        assert_eq!(answer["payment_response"]["success"], true, "{answer}");
        let fetches = self.server.outbound() - before - FACILITATOR_REQUESTS;
        assert!(
            fetches <= 4,
            "at most 4 outbound requests per call, saw {fetches}"
        );
        (answer["body"].clone(), fetches)
    }

    async fn vm01(&self, url: &str) -> (Value, u64) {
        let (body, fetches) = self.pay(VM01, json!({"url": url})).await;
        assert_schema("VM01", &body);
        (body, fetches)
    }

    async fn vm07(&self, url: &str, baseline: Option<&Value>) -> Value {
        let mut request = json!({"url": url});
        if let Some(baseline) = baseline {
            request["baseline"] = baseline.clone();
        }
        let (body, _) = self.pay(VM07, request).await;
        assert_schema("VM07", &body);
        body
    }
}

fn assert_schema(machine: &str, body: &Value) {
    let schema = common::machine(machine)["output_schema"].clone();
    let validator = jsonschema::validator_for(&schema).expect("schema");
    let errors: Vec<String> = validator.iter_errors(body).map(|e| e.to_string()).collect();
    assert!(
        errors.is_empty(),
        "{machine} output invalid: {errors:?}\n{body:#}"
    );
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(common::repo_root().join("tests/fixtures/pages").join(name)).expect("fixture")
}

fn limitations(body: &Value) -> String {
    body["limitations"].to_string()
}

/// About 10 KB on the wire, 64 MB once decompressed. Compressed once, before any paid call
/// (see `vm01_reads_real_pages_over_the_paid_rail`): compressing 64 MB inside the handler took
/// long enough on a loaded machine to run past VM01's own deadline.
static BOMB: LazyLock<Vec<u8>> = LazyLock::new(|| {
    let mut page = b"<!doctype html><html><head><title>Bomb</title></head><body><p>".to_vec();
    page.resize(64 * 1024 * 1024, b'a');
    gzip(&page)
});

/// The origin's routes for the VM01 tests.
fn vm01_routes(seen: &Seen) -> Reply {
    let article = || fixture("news-article.html");
    match seen.path.as_str() {
        "/article" => Reply::Full {
            status: 200,
            headers: vec![
                ("content-type".into(), "text/html; charset=utf-8".into()),
                ("last-modified".into(), "Mon, 02 Mar 2026 11:05:00 GMT".into()),
                ("etag".into(), "\"v1-abc\"".into()),
                ("set-cookie".into(), "session=SECRET-COOKIE-VALUE; HttpOnly".into()),
                ("x-internal-token".into(), "SECRET-HEADER-VALUE".into()),
            ],
            body: article(),
        },
        "/gzipped" => Reply::Full {
            status: 200,
            headers: vec![
                ("content-type".into(), "text/html".into()),
                ("content-encoding".into(), "gzip".into()),
            ],
            body: gzip(&fixture("blog-graph.html")),
        },
        "/r1" => Reply::redirect(301, "/r2"),
        "/r2" => Reply::redirect(302, "https://blog.example.com/r3"),
        "/r3" => Reply::redirect(307, "/gzipped"),
        "/missing" => Reply::Full {
            status: 404,
            headers: vec![("content-type".into(), "text/html".into())],
            body: b"<html><head><title>Not found</title></head><body><h1>Page not found</h1></body></html>".to_vec(),
        },
        "/report.pdf" => Reply::Full {
            status: 200,
            headers: vec![("content-type".into(), "application/pdf".into())],
            body: b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n".to_vec(),
        },
        "/ten-mb" => {
            let paragraph = "<p>A very long page, ten megabytes of it, read only up to the byte limit.</p>\n";
            let mut page = String::from("<!doctype html><html><head><title>Ten megabytes</title></head><body><article><h1>Big</h1>");
            while page.len() < 10 * 1024 * 1024 {
                page.push_str(paragraph);
            }
            Reply::html(page)
        }
        "/bomb" => Reply::Full {
            status: 200,
            headers: vec![
                ("content-type".into(), "text/html".into()),
                ("content-encoding".into(), "gzip".into()),
            ],
            body: BOMB.clone(),
        },
        "/drip" => Reply::Drip {
            headers: vec![("content-type".into(), "text/html".into())],
            chunk: b"<p>drip drip drip drip drip drip drip drip drip drip drip drip</p>\n".to_vec(),
            every: std::time::Duration::from_millis(400),
            count: 1000,
        },
        "/stall" => Reply::stall(std::time::Duration::from_secs(12)),
        // Headers at once, then nothing usable before the deadline.
        "/silent-body" => Reply::Drip {
            headers: vec![("content-type".into(), "text/html".into())],
            chunk: b"<!-- -->\n".to_vec(),
            every: std::time::Duration::from_secs(10),
            count: 2,
        },
        // Hostile redirects: every target is loopback, refused, or unmapped.
        "/to-loopback" => Reply::redirect(302, "https://127.0.0.1/admin"),
        "/to-other-loopback" => Reply::redirect(302, "https://127.0.0.2/"),
        "/to-v6-loopback" => Reply::redirect(302, "https://[::1]/"),
        "/to-http" => Reply::redirect(301, "http://news.example.com/article"),
        "/to-8443" => Reply::redirect(301, "https://news.example.com:8443/article"),
        "/to-localhost" => Reply::redirect(302, "https://localhost/"),
        "/to-unmapped" => Reply::redirect(302, "https://elsewhere.example.org/"),
        "/to-rebinding" => Reply::redirect(302, "https://loopback.example.com/"),
        "/loop-a" => Reply::redirect(302, "/loop-b"),
        "/loop-b" => Reply::redirect(302, "/loop-a"),
        path if path.starts_with("/hop/") => {
            let n: u32 = path[5..].parse().unwrap_or(0);
            Reply::redirect(302, &format!("/hop/{}", n + 1))
        }
        _ => Reply::Full {
            status: 500,
            headers: Vec::new(),
            body: b"unexpected path".to_vec(),
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn vm01_reads_real_pages_over_the_paid_rail() {
    LazyLock::force(&BOMB);
    let web = Web::start(Arc::new(vm01_routes)).await;

    let (body, fetches) = web.vm01("https://news.example.com/article").await;
    assert_eq!(fetches, 1);
    assert_eq!(body["status"], "OK", "{body:#}");
    assert_eq!(body["final_url"], "https://news.example.com/article");
    assert_eq!(
        body["http"],
        json!({"status": 200, "content_type": "text/html; charset=utf-8", "redirect_count": 0})
    );
    assert_eq!(
        body["metadata"]["canonical"],
        "https://news.example.com/news/2026/03/harbour-bridge-reopens"
    );
    assert_eq!(body["content"]["extraction_basis"], "article");
    assert!(
        body["content"]["text"]
            .as_str()
            .expect("text")
            .contains("212 suspension hangers")
    );
    let headers = body["evidence"]["final_response_headers"]
        .as_object()
        .expect("headers");
    assert_eq!(headers["last-modified"], "Mon, 02 Mar 2026 11:05:00 GMT");
    assert!(!headers.contains_key("set-cookie") && !headers.contains_key("x-internal-token"));
    let serialized = body.to_string();
    assert!(
        !serialized.contains("SECRET-COOKIE-VALUE") && !serialized.contains("SECRET-HEADER-VALUE")
    );
    let observations = body["freshness"]["observations"].as_array().expect("array");
    assert!(observations.contains(&json!({"source": "http_header", "name": "last-modified", "value": "Mon, 02 Mar 2026 11:05:00 GMT"})));
    assert!(
        observations
            .contains(&json!({"source": "http_header", "name": "etag", "value": "present"}))
    );
    assert!(
        observations.iter().any(|o| o["name"] == "date"),
        "the Date header is observed"
    );
    let request = &web.site.seen()[0];
    assert_eq!(
        (request.method.as_str(), request.host.as_str()),
        ("GET", "news.example.com")
    );
    let header = |name: &str| {
        request
            .headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    assert!(header("user-agent").is_some_and(|ua| ua.starts_with("factomat/")));
    assert_eq!(header("cookie"), None);
    assert_eq!(header("authorization"), None);
    assert_eq!(header("referer"), None);

    // Three redirects (the manifest's limit), across two hosts, then a gzip body.
    let (body, fetches) = web.vm01("https://news.example.com/r1").await;
    assert_eq!(fetches, 4);
    assert_eq!(body["status"], "OK", "{body:#}");
    assert_eq!(body["http"]["redirect_count"], 3);
    assert_eq!(body["final_url"], "https://blog.example.com/gzipped");
    assert!(
        body["structured_data"]["json_ld_types"]
            .to_string()
            .contains("BlogPosting")
    );

    let (body, _) = web.vm01("https://news.example.com/missing").await;
    assert_eq!(body["status"], "PARTIAL");
    assert_eq!(body["http"]["status"], 404);
    assert_eq!(
        body["content"]["text"], "",
        "an error page is not passed off as content"
    );
    assert!(limitations(&body).contains("HTTP 404"));

    let (body, _) = web.vm01("https://news.example.com/report.pdf").await;
    assert_eq!(body["status"], "PARTIAL");
    assert!(limitations(&body).contains("application/pdf"));

    let (body, _) = web.vm01("https://news.example.com/ten-mb").await;
    assert_eq!(body["status"], "PARTIAL", "{body:#}");
    assert_eq!(body["size"]["source_bytes_read"], 262_144);
    assert!(limitations(&body).contains("262144 bytes"));

    let (body, _) = web.vm01("https://news.example.com/bomb").await;
    assert_eq!(body["status"], "PARTIAL", "{body:#}");
    assert_eq!(
        body["size"]["source_bytes_read"], 262_144,
        "decompressed bytes are bounded"
    );

    let (body, fetches) = web.vm01("https://news.example.com/drip").await;
    assert_eq!(fetches, 1);
    assert_eq!(body["status"], "PARTIAL", "{body:#}");
    assert!(limitations(&body).contains("deadline"), "{body:#}");

    let started = std::time::Instant::now();
    let (body, _) = web.vm01("https://news.example.com/stall").await;
    assert_eq!(body["status"], "HOLD", "{body:#}");
    assert_eq!(body["final_url"], Value::Null);
    assert!(limitations(&body).contains("timeout"), "{body:#}");
    assert!(
        started.elapsed().as_secs() < 12,
        "the 5 s request deadline held"
    );

    // The headers arrived (a final URL was reached) but the body timed out with nothing
    // usable: HOLD, and a HOLD names no final URL.
    let (body, _) = web.vm01("https://news.example.com/silent-body").await;
    assert_eq!(body["status"], "HOLD", "{body:#}");
    assert_eq!(body["final_url"], Value::Null, "{body:#}");
    assert!(limitations(&body).contains("deadline"), "{body:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn vm01_hostile_targets_hold_without_leaving_loopback() {
    let web = Web::start(Arc::new(vm01_routes)).await;
    // (start path, the refusal code in the limitation, requests that reach our origin)
    let cases: &[(&str, &str, usize)] = &[
        (
            "https://news.example.com/to-loopback",
            "redirect_refused",
            1,
        ),
        (
            "https://news.example.com/to-other-loopback",
            "redirect_refused",
            1,
        ),
        (
            "https://news.example.com/to-v6-loopback",
            "redirect_refused",
            1,
        ),
        ("https://news.example.com/to-http", "redirect_refused", 1),
        ("https://news.example.com/to-8443", "redirect_refused", 1),
        (
            "https://news.example.com/to-localhost",
            "redirect_refused",
            1,
        ),
        (
            "https://news.example.com/to-unmapped",
            "test_seam_unmapped",
            1,
        ),
        ("https://news.example.com/to-rebinding", "dns_not_public", 1),
        ("https://news.example.com/loop-a", "redirect_loop", 2),
        ("https://news.example.com/hop/0", "too_many_redirects", 4),
        ("https://loopback.example.com/", "dns_not_public", 0),
        ("https://private.example.com/", "dns_not_public", 0),
        (
            "https://metadata.example.com/latest/meta-data/",
            "dns_not_public",
            0,
        ),
        ("https://v6.example.com/", "dns_not_public", 0),
        (
            "https://wrongcert.example.com/article",
            "not valid for this host name",
            0,
        ),
    ];
    for (url, code, origin_hits) in cases {
        let site_before = web.site.hits();
        let (body, fetches) = web.vm01(url).await;
        assert_eq!(body["status"], "HOLD", "{url}: {body:#}");
        assert_eq!(body["final_url"], Value::Null, "{url}");
        assert_eq!(body["content"]["text"], "", "{url}");
        assert_eq!(
            body["metadata"],
            json!({"title": null, "description": null, "canonical": null})
        );
        assert!(
            limitations(&body).contains(code),
            "{url}: want {code}: {body:#}"
        );
        assert_eq!(
            web.site.hits() - site_before,
            *origin_hits,
            "{url}: requests at the origin"
        );
        assert!(
            fetches as usize >= *origin_hits,
            "{url}: every request is counted"
        );
        assert!(body["http"]["redirect_count"].as_u64().expect("n") <= 3);
    }
    assert_eq!(
        web.wrong_cert.hits(),
        0,
        "no HTTP request after a failed handshake"
    );
    // The origin only ever saw the paths we asked for or redirected to, on mapped names.
    for seen in web.site.seen() {
        assert!(
            ["news.example.com", "blog.example.com"].contains(&seen.host.as_str()),
            "{seen:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn vm07_baselines_compare_and_never_let_bad_evidence_win() {
    let page = Arc::new(std::sync::Mutex::new(String::new()));
    let served = page.clone();
    let handler: Handler = Arc::new(move |seen: &Seen| match seen.path.as_str() {
        "/changelog" => Reply::html(served.lock().expect("page").clone()),
        // Headers at once, then nothing usable before the deadline.
        "/broken" => Reply::Drip {
            headers: vec![("content-type".into(), "text/html".into())],
            chunk: b"<!-- -->\n".to_vec(),
            every: std::time::Duration::from_secs(10),
            count: 2,
        },
        _ => Reply::Full {
            status: 404,
            headers: Vec::new(),
            body: Vec::new(),
        },
    });
    let web = Web::start(handler).await;
    let set = |title: &str, text: &str, ld_type: &str| {
        *page.lock().expect("page") = format!(
            "<!doctype html><html><head><title>{title}</title><meta name=description content='Release notes'>\
             <script type='application/ld+json'>{{\"@type\": \"{ld_type}\"}}</script></head>\
             <body><main><h1>Changelog</h1><h2>v3.2</h2><p>{text}</p></main></body></html>"
        );
    };
    let long_text = "Fixed a crash when the cache directory is on a read-only file system, and made retries back off. \
        Requests that time out are now retried twice with jitter, and the status page shows the retry count. \
        The command line gained a --dry-run flag that prints what would change without writing anything. ";
    set("Changelog", long_text, "WebPage");
    let url = "https://news.example.com/changelog";

    let first = web.vm07(url, None).await;
    assert_eq!(first["comparison_status"], "BASELINE", "{first:#}");
    assert_eq!(first["status"], "OK");
    let baseline = first["baseline"].clone();
    assert_eq!(baseline["extraction_complete"], true);
    assert_eq!(baseline["content_truncated"], false);
    // page_sha256 seals the component hashes, both completeness flags and the methodology.
    common::assert_sealed_by(&baseline, "page_sha256");

    let same = web.vm07(url, Some(&baseline)).await;
    assert_eq!(same["comparison_status"], "UNCHANGED", "{same:#}");
    assert_eq!(same["changed_components"], json!([]));
    assert_eq!(same["baseline"], baseline);

    for (title, text, ld_type, moved) in [
        ("Changelog 2026", long_text, "WebPage", "metadata"),
        (
            "Changelog",
            &long_text.replace("twice", "three times"),
            "WebPage",
            "content",
        ),
        ("Changelog", long_text, "CollectionPage", "structured_data"),
    ] {
        set(title, text, ld_type);
        let changed = web.vm07(url, Some(&baseline)).await;
        assert_eq!(changed["comparison_status"], "CHANGED", "{changed:#}");
        assert_eq!(
            changed["changed_components"],
            json!([moved]),
            "only {moved} moved"
        );
        assert_ne!(
            changed["baseline"], baseline,
            "the new observation is the reusable baseline"
        );
    }

    // Truncated evidence: INCONCLUSIVE, and the caller's complete baseline is kept.
    set("Changelog", &long_text.repeat(120), "WebPage");
    let truncated = web.vm07(url, Some(&baseline)).await;
    assert_eq!(truncated["status"], "PARTIAL");
    assert_eq!(truncated["completeness"]["content_truncated"], true);
    assert_eq!(
        truncated["comparison_status"], "INCONCLUSIVE",
        "{truncated:#}"
    );
    assert_eq!(truncated["changed_components"], json!([]));
    assert!(
        limitations(&truncated).contains("not claimed as changes): content"),
        "{truncated:#}"
    );
    assert_eq!(
        truncated["baseline"], baseline,
        "truncated evidence never replaces a known-good baseline"
    );
    let truncated_baseline = web.vm07(url, None).await["baseline"].clone();
    assert_eq!(truncated_baseline["content_truncated"], true);
    let again = web.vm07(url, Some(&truncated_baseline)).await;
    assert_eq!(
        again["comparison_status"], "INCONCLUSIVE",
        "equal truncated fingerprints are not UNCHANGED: {again:#}"
    );

    // HOLD: nothing usable; INCONCLUSIVE with the caller's baseline returned.
    let hold = web
        .vm07("https://news.example.com/broken", Some(&baseline))
        .await;
    assert_eq!(hold["status"], "HOLD");
    assert_eq!(hold["final_url"], Value::Null, "a HOLD names no final URL");
    assert_eq!(hold["comparison_status"], "INCONCLUSIVE");
    assert_eq!(hold["baseline"], baseline);
    assert_eq!(hold["completeness"]["extraction_complete"], false);
    let not_found = web
        .vm07("https://news.example.com/gone", Some(&baseline))
        .await;
    assert_eq!(
        not_found["comparison_status"], "INCONCLUSIVE",
        "{not_found:#}"
    );
    assert_eq!(not_found["baseline"], baseline);

    // Tampered and foreign baselines: 400 before any payment or fetch.
    let before = (web.server.outbound(), web.site.hits());
    let mut tampered = baseline.clone();
    tampered["components"]["content"] = json!("0".repeat(64));
    let response = web
        .server
        .post_json(VM07, &json!({"url": url, "baseline": tampered}))
        .await;
    common::expect_400(response, "baseline_tampered", "tampered").await;
    // Each completeness flag is sealed: flipping one (e.g. to pass a truncated baseline off
    // as known-good) is a 400 too, and still before any payment or fetch.
    for (source, flag) in [
        (&baseline, "content_truncated"),
        (&baseline, "extraction_complete"),
        (&truncated_baseline, "content_truncated"),
    ] {
        let mut flipped = source.clone();
        let value = flipped[flag].as_bool().expect("flag");
        flipped[flag] = json!(!value);
        let response = web
            .server
            .post_json(VM07, &json!({"url": url, "baseline": flipped}))
            .await;
        common::expect_400(response, "baseline_tampered", flag).await;
    }
    let mut foreign = baseline.clone();
    foreign["methodology_version"] = json!("web-change-snapshot-0.0.9");
    let response = web
        .server
        .post_json(VM07, &json!({"url": url, "baseline": foreign}))
        .await;
    common::expect_400(response, "baseline_methodology_mismatch", "foreign").await;
    assert_eq!(
        (web.server.outbound(), web.site.hits()),
        before,
        "no work before payment"
    );
}

/// A retained VM01 answer is sealed at rest: a paid VM01 call, collected again with the same
/// payment (so its answer is surely retained), leaves neither the page's text nor the
/// payment's signature readable anywhere in the ledger file or its WAL.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retained_vm01_page_is_unreadable_at_rest() {
    let web = Web::start(Arc::new(vm01_routes)).await;
    let request = json!({"url": "https://news.example.com/article"});
    let answer = web.paid_call(VM01, &request).await;
    let header = answer["payment_signature"].as_str().expect("captured");
    let again = web.server.post_paid(VM01, &request, header).await;
    assert_eq!(again.status().as_u16(), 200);
    let collected = again.text().await.expect("body");
    assert_eq!(collected, answer["body_text"].as_str().expect("body text"));

    let page_text: String = answer["body"]["content"]["text"]
        .as_str()
        .expect("the page's text")
        .chars()
        .take(60)
        .collect();
    let signature = answer["payment_payload"]["payload"]["signature"]
        .as_str()
        .expect("signature")
        .to_string();
    let database_url = web.server.server.state.config.database_url.expose();
    let ledger = common::ledgers::sqlite_file(database_url);
    let wal = ledger.with_extension("db-wal");
    assert!(wal.exists(), "the WAL is part of what is scanned");
    for file in [&ledger, &wal] {
        let bytes = std::fs::read(file).expect("readable");
        for needle in [page_text.as_str(), signature.as_str(), &signature[2..]] {
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle.as_bytes()),
                "{} holds {needle:?} in the clear",
                file.display()
            );
        }
    }
}

/// A payment for VM07, presented with the same body on VM01's route (both take `{"url"}`),
/// neither collects VM07's retained answer there nor, once that answer is gone, buys VM01's
/// work: the nonce was presented already. Before, the resend lookup (payload and body, not
/// route) served VM07's answer on VM01's route, and ran VM01 for a VM07 payment; and once no
/// answer was retained the nonce's row told VM01's route that VM07's answer had expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_payment_for_one_machine_never_runs_another_machines_work() {
    let web = Web::start(Arc::new(vm01_routes)).await;
    let request = json!({"url": "https://news.example.com/article"});
    let answer = web.paid_call(VM07, &request).await;
    let header = answer["payment_signature"].as_str().expect("captured");
    // Its retained answer is VM07's to collect, not VM01's to serve.
    let retained_elsewhere = web.server.post_paid(VM01, &request, header).await;
    assert_eq!(retained_elsewhere.status().as_u16(), 402);
    let database_url = web.server.server.state.config.database_url.expose();
    // The binding without its answer, as after a crash between the settlement and the store.
    common::ledgers::execute_sql(
        database_url,
        "UPDATE retained_answers SET kind = 'in_flight', sealed = NULL, collectable_until = NULL;",
    );
    let (outbound, hits) = (web.server.outbound(), web.site.hits());

    let elsewhere = web.server.post_paid(VM01, &request, header).await;
    assert_eq!(elsewhere.status().as_u16(), 402, "not VM01's answer");
    assert_eq!(
        common::payment_required(&elsewhere)["error"],
        "payment_nonce_already_presented"
    );
    assert_eq!(
        (web.server.outbound(), web.site.hits()),
        (outbound, hits),
        "no work ran"
    );
    // On its own route the paid row's work runs once more, as before.
    let home = web.server.post_paid(VM07, &request, header).await;
    assert_eq!(home.status().as_u16(), 200);

    // Once no answer is retained at all (its window passed), the nonce's row answers: on its
    // own route the answer expired; on the other machine's it was presented already.
    common::ledgers::execute_sql(database_url, "DELETE FROM retained_answers;");
    for (route, reason) in [
        (VM01, "payment_nonce_already_presented"),
        (VM07, "payment_answer_expired"),
    ] {
        let response = web.server.post_paid(route, &request, header).await;
        assert_eq!(response.status().as_u16(), 402, "{route}");
        assert_eq!(
            common::payment_required(&response)["error"],
            reason,
            "{route}"
        );
    }
}

/// Without a payment-chain reader (a web machine needs no RPC endpoint, and none is
/// configured), nothing is ever concluded "unpaid" from the chain: a settle that fails is an
/// unknown outcome — 503 `settlement_pending` with `Retry-After` and no fresh challenge, the
/// official client signs once, and the row is `settle_pending` for reconciliation.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_a_trusted_chain_reader_a_failed_settle_is_pending_never_unpaid() {
    let web = Web::start_with(Arc::new(vm01_routes), Some(Settle::Fail)).await;
    let url = format!("{}{VM01}", web.server.url);
    let stack = web.stack.clone();
    let request = json!({"url": "https://news.example.com/article"});
    let answer = tokio::task::spawn_blocking(move || stack.pay(&url, &request))
        .await
        .expect("pay");
    assert_eq!(answer["status"], 503, "{answer}");
    assert_eq!(answer["signed"], 1, "the client signed once: {answer}");
    assert_eq!(
        answer["payment_response"]["errorReason"], "settlement_pending",
        "{answer}"
    );
    assert!(answer["headers"]["payment-required"].is_null(), "{answer}");
    let recorder = &web.facilitator.as_ref().expect("proxy").recorder;
    assert_eq!(recorder.settles(), 1);
    let database_url = web.server.server.state.config.database_url.expose();
    let rows = common::ledgers::rows_of(database_url).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].state, "settle_pending", "{rows:?}");
}
