//! `factomat discovery check BASE_URL`: the preflight that CDP's validator and x402scan run
//! before they list a deployment, run by us against any deployment (our own included), so an
//! operator learns what the index would refuse before it refuses it.
//!
//! Each check is required (the index refuses the listing without it) or advisory (the
//! listing loses something). The paid paths are the OpenAPI document's operations that
//! answer 402, else the `/.well-known/x402` resources.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use crate::catalog::manifest::{
    MAX_DESCRIPTION_CHARS, MAX_SERVICE_NAME_CHARS, MAX_TAGS, compile_schema,
};
use crate::net::gateway::{Gateway, Upstream};
use crate::support::json_value::str_items;

const UPSTREAM: Upstream = Upstream::new("discovery_check", "deployment");
/// A deployment's answer larger than this is not read whole (documents are a few hundred KB).
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;
const OPENAPI_PATH: &str = "/openapi.json";
const WELL_KNOWN_PATH: &str = "/.well-known/x402";
/// What the failed probe check tells a factomat operator.
const PROBE_HINT: &str = "the crawler's probe must get 402; on factomat set unpaid_empty_body = \"challenge\" (FACTOMAT_UNPAID_EMPTY_BODY)";

/// One preflight check and its verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What was checked (`returns_402`, `bazaar_schema`, …).
    pub name: &'static str,
    /// The paid path it was checked on; empty for the whole deployment.
    pub path: String,
    /// Whether the index refuses the listing when it fails.
    pub required: bool,
    /// Whether it passed.
    pub passed: bool,
    /// What was seen, or how to fix it.
    pub detail: String,
}

/// Every check of one run.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The checks, in the order they ran.
    pub checks: Vec<Check>,
}

/// Why the check could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// BASE_URL is not an http(s) URL.
    #[error("{0:?} is not an http(s) base URL")]
    BaseUrl(String),
    /// The HTTP client could not be built.
    #[error("HTTP client: {0}")]
    Client(#[from] reqwest::Error),
}

impl Report {
    /// True when every required check passed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.passed || !c.required)
    }

    /// The report as JSON (`factomat discovery check --json`).
    pub fn to_json(&self) -> Value {
        let checks: Vec<Value> = self
            .checks
            .iter()
            .map(|c| {
                json!({
                    "check": c.name, "path": c.path, "required": c.required,
                    "passed": c.passed, "detail": c.detail,
                })
            })
            .collect();
        json!({"passed": self.passed(), "checks": checks})
    }

    /// The report as lines of text, one per check.
    pub fn to_text(&self) -> String {
        let mut text = String::new();
        for c in &self.checks {
            let verdict = if c.passed { "pass" } else { "FAIL" };
            let kind = if c.required { "required" } else { "advisory" };
            let at = if c.path.is_empty() { "" } else { " " };
            text.push_str(&format!(
                "{verdict} {kind:<8} {}{at}{}: {}\n",
                c.name, c.path, c.detail
            ));
        }
        let summary = if self.passed() {
            "every required check passed"
        } else {
            "a required check failed: the index will not list this deployment"
        };
        text.push_str(summary);
        text.push('\n');
        text
    }

    fn record(
        &mut self,
        name: &'static str,
        path: &str,
        required: bool,
        result: Result<String, String>,
    ) {
        let (passed, detail) = match result {
            Ok(detail) => (true, detail),
            Err(detail) => (false, detail),
        };
        self.checks.push(Check {
            name,
            path: path.to_string(),
            required,
            passed,
            detail,
        });
    }
}

/// One answer of the deployment, read whole.
struct Answer {
    status: u16,
    payment_required: Option<String>,
    body: Vec<u8>,
}

/// The checker: a counted gateway and the deployment's base URL.
struct Checker {
    gateway: Gateway,
    base: url::Url,
}

/// Runs every check against the deployment at `base_url`.
pub async fn run(base_url: &str) -> Result<Report, CheckError> {
    let base = url::Url::parse(base_url)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
        .ok_or_else(|| CheckError::BaseUrl(base_url.to_string()))?;
    let checker = Checker {
        gateway: Gateway::new()?.with_connect_timeout(Duration::from_secs(5))?,
        base,
    };
    let mut report = Report::default();
    let openapi = checker.document(OPENAPI_PATH).await;
    let well_known = checker.document(WELL_KNOWN_PATH).await;
    let reachable = match (&openapi, &well_known) {
        (Err(a), Err(b)) => Err(format!("{OPENAPI_PATH}: {a}; {WELL_KNOWN_PATH}: {b}")),
        _ => Ok(format!("{} answered", checker.base)),
    };
    report.record("reachable", "", true, reachable);
    let paid = paid_paths(openapi.as_ref().ok(), well_known.as_ref().ok());
    report.record(
        "paid_resources_found",
        "",
        true,
        if paid.is_empty() {
            Err("neither /openapi.json nor /.well-known/x402 names a paid resource".into())
        } else {
            Ok(format!("{} paid resources", paid.len()))
        },
    );
    if let Ok(openapi) = &openapi {
        report.record("openapi_x_payment_info", "", false, payment_info(openapi));
    }
    report.record(
        "well_known_consistent",
        "",
        false,
        consistent(openapi.as_ref().ok(), well_known.as_ref().ok(), &paid),
    );
    for path in &paid {
        checker.check_resource(path, &mut report).await;
    }
    Ok(report)
}

impl Checker {
    /// The URL of a path under the base URL (which may itself have a path).
    fn url(&self, path: &str) -> url::Url {
        let mut url = self.base.clone();
        let base_path = self.base.path().trim_end_matches('/');
        url.set_path(&format!("{base_path}/{}", path.trim_start_matches('/')));
        url.set_query(None);
        url
    }

    async fn send(&self, request: impl Fn() -> reqwest::RequestBuilder) -> Result<Answer, String> {
        let response = self
            .gateway
            .send(UPSTREAM, || request().build())
            .await
            .map_err(|e| format!("no answer: {e}"))?;
        let status = response.status().as_u16();
        let payment_required = response
            .headers()
            .get("payment-required")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = response.bytes().await.map_err(|e| e.to_string())?;
        if body.len() > MAX_ANSWER_BYTES {
            return Err(format!("answer over {MAX_ANSWER_BYTES} bytes"));
        }
        Ok(Answer {
            status,
            payment_required,
            body: body.to_vec(),
        })
    }

    async fn document(&self, path: &str) -> Result<Value, String> {
        let url = self.url(path);
        let answer = self
            .send(|| self.gateway.request(reqwest::Method::GET, url.clone()))
            .await?;
        if answer.status != 200 {
            return Err(format!("status {}", answer.status));
        }
        serde_json::from_slice(&answer.body).map_err(|e| format!("not JSON: {e}"))
    }

    async fn probe(&self, path: &str, body: Option<&'static [u8]>) -> Result<Answer, String> {
        let url = self.url(path);
        let request = || {
            let request = self.gateway.request(reqwest::Method::POST, url.clone());
            match body {
                Some(body) => request
                    .header("content-type", "application/json")
                    .body(body),
                None => request,
            }
        };
        self.send(request).await
    }

    async fn check_resource(&self, path: &str, report: &mut Report) {
        let bare = self.probe(path, None).await;
        let empty = self.probe(path, Some(b"{}")).await;
        for (name, answer) in [
            ("returns_402_no_body", &bare),
            ("returns_402_empty_json", &empty),
        ] {
            let verdict = match answer {
                Ok(a) if a.status == 402 => Ok("402".to_string()),
                Ok(a) => Err(format!("{}; {PROBE_HINT}", a.status)),
                Err(e) => Err(e.clone()),
            };
            report.record(name, path, true, verdict);
        }
        // The terms come from the body-less probe, else from the {} one.
        let answer = [bare, empty]
            .into_iter()
            .flatten()
            .find(|a| a.status == 402);
        let Some(answer) = answer else { return };
        let header = decode_header(answer.payment_required.as_deref());
        report.record(
            "header_decodes",
            path,
            true,
            header
                .as_ref()
                .map(|_| "PAYMENT-REQUIRED is base64 JSON".into())
                .map_err(Clone::clone),
        );
        let Ok(header) = header else { return };
        report.record("x402_version_2", path, true, version(&header));
        report.record("accepts_fields", path, true, accepts(&header));
        // The body carries the whole declaration; the header a compact one.
        let body: Option<Value> = serde_json::from_slice(&answer.body).ok();
        let declared = body
            .as_ref()
            .filter(|b| b.pointer("/extensions/bazaar").is_some())
            .unwrap_or(&header);
        let bazaar = declared.pointer("/extensions/bazaar");
        report.record("bazaar_schema", path, true, bazaar_valid(bazaar));
        report.record("bazaar_input", path, true, bazaar_input(bazaar));
        report.record("bazaar_output", path, false, bazaar_output(bazaar));
        let resource = header.get("resource");
        report.record("description_length", path, true, description(resource));
        report.record("service_name", path, false, service_name(resource));
        report.record("tags", path, false, tags(resource));
    }
}

fn decode_header(value: Option<&str>) -> Result<Value, String> {
    let value = value.ok_or("no PAYMENT-REQUIRED header")?;
    let bytes = STANDARD
        .decode(value.trim())
        .map_err(|e| format!("not standard base64: {e}"))?;
    serde_json::from_slice(&bytes).map_err(|e| format!("not JSON: {e}"))
}

fn version(required: &Value) -> Result<String, String> {
    match required.get("x402Version").and_then(Value::as_u64) {
        Some(2) => Ok("2".into()),
        other => Err(format!("x402Version is {other:?}, not 2")),
    }
}

fn accepts(required: &Value) -> Result<String, String> {
    let first = required
        .pointer("/accepts/0")
        .ok_or("accepts is empty or missing")?;
    let missing: Vec<&str> = ["scheme", "network", "amount", "asset", "payTo"]
        .into_iter()
        .filter(|field| {
            first
                .get(*field)
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
        })
        .collect();
    if missing.is_empty() {
        Ok("scheme, network, amount, asset, payTo".into())
    } else {
        Err(format!("accepts[0] lacks {}", missing.join(", ")))
    }
}

fn bazaar_valid(bazaar: Option<&Value>) -> Result<String, String> {
    let bazaar = bazaar.ok_or("no extensions.bazaar")?;
    let (info, schema) = match (bazaar.get("info"), bazaar.get("schema")) {
        (Some(info), Some(schema)) => (info, schema),
        _ => return Err("extensions.bazaar lacks info or schema".into()),
    };
    let validator = compile_schema(schema).map_err(|e| format!("schema: {e}"))?;
    match validator.iter_errors(info).next() {
        None => Ok("info validates against its schema".into()),
        Some(error) => Err(format!(
            "info at {:?}: {error}",
            error.instance_path().as_str()
        )),
    }
}

fn bazaar_input(bazaar: Option<&Value>) -> Result<String, String> {
    let input = bazaar
        .and_then(|b| b.pointer("/info/input"))
        .ok_or("no info.input")?;
    let field = |name: &str| input.get(name).and_then(Value::as_str);
    match (field("type"), field("method")) {
        (Some(kind), Some(method)) => Ok(format!("{kind} {method}")),
        _ => Err("info.input needs type and method (CDP's extractor fails closed)".into()),
    }
}

fn bazaar_output(bazaar: Option<&Value>) -> Result<String, String> {
    let output = bazaar
        .and_then(|b| b.pointer("/info/output"))
        .ok_or("no info.output: listings show an output example")?;
    match (output.get("type"), output.get("example")) {
        (Some(_), Some(_)) => Ok("type and example".into()),
        _ => Err("info.output lacks type or example".into()),
    }
}

fn description(resource: Option<&Value>) -> Result<String, String> {
    let chars = resource
        .and_then(|r| r.get("description"))
        .and_then(Value::as_str)
        .map_or(0, |d| d.chars().count());
    if chars <= MAX_DESCRIPTION_CHARS {
        Ok(format!("{chars} characters"))
    } else {
        Err(format!(
            "{chars} characters; CDP's /verify fails over {MAX_DESCRIPTION_CHARS}"
        ))
    }
}

fn short_ascii(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= MAX_SERVICE_NAME_CHARS
        && text.bytes().all(|b| (0x20..=0x7e).contains(&b))
}

fn service_name(resource: Option<&Value>) -> Result<String, String> {
    match resource.and_then(|r| r.get("serviceName")) {
        None => Err("no resource.serviceName: the index shows no service name".into()),
        Some(Value::String(name)) if short_ascii(name) => Ok(name.clone()),
        Some(other) => Err(format!(
            "{other} is dropped: 1 to {MAX_SERVICE_NAME_CHARS} printable ASCII characters"
        )),
    }
}

fn tags(resource: Option<&Value>) -> Result<String, String> {
    let Some(tags) = resource.and_then(|r| r.get("tags")) else {
        return Err("no resource.tags: the index shows no tags".into());
    };
    let tags = tags.as_array().ok_or("resource.tags is not an array")?;
    if tags.len() > MAX_TAGS {
        return Err(format!("{} tags; the index keeps {MAX_TAGS}", tags.len()));
    }
    match tags.iter().find(|t| !t.as_str().is_some_and(short_ascii)) {
        Some(bad) => Err(format!("{bad} is dropped")),
        None => Ok(format!("{} tags", tags.len())),
    }
}

/// The paid paths: OpenAPI operations that answer 402, else the well-known resources.
fn paid_paths(openapi: Option<&Value>, well_known: Option<&Value>) -> Vec<String> {
    let from_openapi: Vec<String> = openapi
        .and_then(|o| o.get("paths"))
        .and_then(Value::as_object)
        .map(|paths| {
            paths
                .iter()
                .filter(|(_, item)| paid_operation(item).is_some())
                .map(|(path, _)| path.clone())
                .collect()
        })
        .unwrap_or_default();
    if !from_openapi.is_empty() {
        return from_openapi;
    }
    well_known_paths(well_known)
}

/// The operation of a path item that answers 402.
fn paid_operation(item: &Value) -> Option<&Value> {
    item.as_object()?
        .values()
        .find(|operation| operation.pointer("/responses/402").is_some())
}

fn well_known_paths(well_known: Option<&Value>) -> Vec<String> {
    str_items(well_known.and_then(|w| w.get("resources")))
        .filter_map(|r| url::Url::parse(r).ok())
        .map(|u| u.path().to_string())
        .collect()
}

fn payment_info(openapi: &Value) -> Result<String, String> {
    let paths = openapi
        .get("paths")
        .and_then(Value::as_object)
        .ok_or("no paths")?;
    let lacking: Vec<&str> = paths
        .iter()
        .filter(|(_, item)| {
            paid_operation(item).is_some_and(|op| op.get("x-payment-info").is_none())
        })
        .map(|(path, _)| path.as_str())
        .collect();
    if lacking.is_empty() {
        Ok("every paid operation has x-payment-info".into())
    } else {
        Err(format!("no x-payment-info on {}", lacking.join(", ")))
    }
}

fn consistent(
    openapi: Option<&Value>,
    well_known: Option<&Value>,
    paid: &[String],
) -> Result<String, String> {
    let listed = well_known_paths(well_known);
    if well_known.is_none() {
        return Err("no /.well-known/x402".into());
    }
    if openapi.is_none() {
        return Ok(format!(
            "{} resources (no OpenAPI to compare)",
            listed.len()
        ));
    }
    let mut a: Vec<&String> = listed.iter().collect();
    let mut b: Vec<&String> = paid.iter().collect();
    a.sort();
    b.sort();
    if a == b {
        Ok(format!(
            "the same {} paid resources as the OpenAPI document",
            a.len()
        ))
    } else {
        Err(format!(
            "/.well-known/x402 lists {a:?}, the OpenAPI document {b:?}"
        ))
    }
}
