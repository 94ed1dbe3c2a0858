//! URL inputs are checked structurally before any payment: hostile spellings get a 400 with
//! a policy code and nothing goes outbound; public HTTPS URLs reach the 402.

mod common;

use common::{TestServer, expect_400, machine};
use serde_json::{Value, json};

/// (url, expected code). Every one must be refused without any outbound request.
const REFUSED: &[(&str, &str)] = &[
    ("http://example.com/", "url_scheme_not_https"),
    ("ftp://example.com/file", "url_scheme_not_https"),
    ("file:///etc/passwd", "url_scheme_not_https"),
    ("gopher://example.com/", "url_scheme_not_https"),
    ("https://127.0.0.1/", "url_host_not_public"),
    ("https://127.1/", "url_host_not_public"),
    ("https://127.0.0.1./", "url_host_not_public"),
    ("https://2130706433/", "url_host_not_public"),
    ("https://0x7f000001/", "url_host_not_public"),
    ("https://0177.0.0.1/", "url_host_not_public"),
    ("https://0x7f.0.0.1/", "url_host_not_public"),
    ("https://0/", "url_host_not_public"),
    ("https://0.0.0.0/", "url_host_not_public"),
    ("https://10.0.0.1/", "url_host_not_public"),
    ("https://172.16.0.1/", "url_host_not_public"),
    ("https://172.31.255.254/", "url_host_not_public"),
    ("https://192.168.1.1/", "url_host_not_public"),
    (
        "https://169.254.169.254/latest/meta-data/",
        "url_host_not_public",
    ),
    ("https://100.64.0.1/", "url_host_not_public"),
    ("https://100.127.255.254/", "url_host_not_public"),
    ("https://192.0.2.10/", "url_host_not_public"),
    ("https://198.51.100.7/", "url_host_not_public"),
    ("https://203.0.113.9/", "url_host_not_public"),
    ("https://198.18.0.1/", "url_host_not_public"),
    ("https://224.0.0.1/", "url_host_not_public"),
    ("https://240.0.0.1/", "url_host_not_public"),
    ("https://255.255.255.255/", "url_host_not_public"),
    ("https://[::1]/", "url_host_not_public"),
    ("https://[::]/", "url_host_not_public"),
    ("https://[fe80::1]/", "url_host_not_public"),
    ("https://[fc00::1]/", "url_host_not_public"),
    ("https://[fd12:3456:789a::1]/", "url_host_not_public"),
    ("https://[::ffff:127.0.0.1]/", "url_host_not_public"),
    ("https://[::ffff:7f00:1]/", "url_host_not_public"),
    ("https://[::ffff:169.254.169.254]/", "url_host_not_public"),
    ("https://[::ffff:10.0.0.1]/", "url_host_not_public"),
    ("https://[ff02::1]/", "url_host_not_public"),
    ("https://[2001:db8::1]/", "url_host_not_public"),
    ("https://localhost/", "url_host_name_not_allowed"),
    ("https://LOCALHOST/", "url_host_name_not_allowed"),
    ("https://api.localhost/", "url_host_name_not_allowed"),
    ("https://printer.local/", "url_host_name_not_allowed"),
    (
        "https://metadata.google.internal/",
        "url_host_name_not_allowed",
    ),
    ("https://nas.home.arpa/", "url_host_name_not_allowed"),
    ("https://intranet/", "url_host_name_not_allowed"),
    ("https://localhost./", "url_host_trailing_dot"),
    ("https://example.com./", "url_host_trailing_dot"),
    ("https://user@example.com/", "url_userinfo_not_allowed"),
    (
        "https://user:secret@example.com/",
        "url_userinfo_not_allowed",
    ),
    ("https://@example.com/", "url_userinfo_not_allowed"),
    ("https://example.com/#top", "url_fragment_not_allowed"),
    ("https://example.com/#", "url_fragment_not_allowed"),
    ("https://example.com:80/", "url_port_not_allowed"),
    ("https://example.com:444/", "url_port_not_allowed"),
    ("https://example.com:8443/", "url_port_not_allowed"),
    ("https://example.com:0/", "url_port_not_allowed"),
    ("https://", "url_invalid"),
    ("not a url", "url_invalid"),
    ("/relative/path", "url_invalid"),
    ("https://exa mple.com/", "url_invalid"),
];

const ACCEPTED: &[&str] = &[
    "https://example.com/",
    "https://example.com:443/a?b=c",
    "https://EXAMPLE.com/Path",
    "https://sub.domain.example.org/x/y.html",
    "https://93.184.216.34/",
    "https://[2606:4700:4700::1111]/",
    "https://xn--bcher-kva.example/",
    "https://bücher.example/",
    "https://api.example.com/v1/resource?x=1&y=2",
    "https://example.com/%20encoded",
];

fn request_for(id: &str, url: &str) -> (String, Value) {
    let m = machine(id);
    let mut body = m["input_example"].clone();
    let field = match id {
        "VM01" | "VM07" => "url",
        "VM05" | "VM11" => "resource",
        _ => "resource_url",
    };
    body[field] = json!(url);
    (m["path"].as_str().expect("path").to_string(), body)
}

#[tokio::test]
async fn hostile_url_spellings_are_refused_before_payment() {
    assert!(REFUSED.len() >= 40);
    let server = TestServer::start().await;
    for (url, code) in REFUSED {
        let (path, body) = request_for("VM01", url);
        let error = expect_400(server.post_json(&path, &body).await, code, url).await;
        assert_eq!(error["field"], "/url", "{url}");
    }
    // The same policy guards every URL-taking machine.
    for id in ["VM05", "VM07", "VM08", "VM09", "VM10", "VM11"] {
        for (url, code) in REFUSED.iter().step_by(5) {
            let (path, body) = request_for(id, url);
            expect_400(
                server.post_json(&path, &body).await,
                code,
                &format!("{id} {url}"),
            )
            .await;
        }
    }
    assert_eq!(server.outbound(), 0, "a refused URL is never fetched");
}

#[tokio::test]
async fn public_https_urls_reach_the_payment_challenge() {
    let server = TestServer::start().await;
    for id in ["VM01", "VM07", "VM08"] {
        for url in ACCEPTED {
            let (path, body) = request_for(id, url);
            let response = server.post_json(&path, &body).await;
            let status = response.status().as_u16();
            assert_eq!(
                status,
                402,
                "{id} {url}: {}",
                response.text().await.unwrap_or_default()
            );
        }
    }
    assert_eq!(
        server.outbound(),
        0,
        "an unpaid valid request is never fetched either"
    );
}
