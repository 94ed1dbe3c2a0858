//! VM01 URL context: one bounded fetch of one public HTTPS page, read into structured JSON
//! (docs/fetch-policy.md, docs/extraction.md).

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Call, CheckFailure, Need, NotReady, WorkContext, WorkError};
use crate::catalog::manifest::Machine;
use crate::config::Config;
use crate::machines::checks as rc;
use crate::web::extract::Extracted;
use crate::web::fetch::{FetchLimits, FetchSetupError, Fetcher};
use crate::web::page::{self, PageReading};

/// VM01 URL context.
pub struct Vm01;

/// A VM01 request.
#[derive(Debug, Deserialize)]
pub struct Request {
    /// The page to read.
    pub url: String,
}

impl super::Machine for Vm01 {
    const ID: &'static str = "VM01";
    type Request = Request;
    type Answer = Value;
    const NEEDS: &'static [Need] = &[Need::Fetch];

    fn check(_machine: &Machine, request: &Request) -> Result<(), CheckFailure> {
        rc::public_url(&request.url, "/url")?;
        Ok(())
    }

    async fn observe(call: Call<'_, Request>) -> Result<Value, WorkError> {
        let (context, machine, request) = call.parts();
        let reading = read_requested_page(context, machine, &request.url).await?;
        Ok(response(machine, &reading, &now()))
    }
}

/// Shared by VM01 and VM07: the manifest declares the fetch limits and the TLS setup works.
pub fn fetch_ready(machine: &Machine, config: &Config) -> Result<(), NotReady> {
    let unavailable = |message: String| NotReady::new("fetch_setup_failed", message);
    FetchLimits::from_machine(machine).map_err(|e| unavailable(e.to_string()))?;
    text_limit(machine).map_err(|e| unavailable(e.to_string()))?;
    crate::web::fetch::check_setup(config).map_err(|e| unavailable(e.to_string()))
}

/// The manifest's `max_text_chars`.
pub fn text_limit(machine: &Machine) -> Result<usize, WorkError> {
    machine
        .limit("max_text_chars")
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| WorkError::manifest(&machine.machine, "no limit max_text_chars"))
}

/// Fetches and reads the caller's page with this machine's limits.
pub async fn read_requested_page(
    context: &WorkContext,
    machine: &Machine,
    url: &str,
) -> Result<PageReading, WorkError> {
    let url = rc::public_url(url, "/url").map_err(|_| WorkError::unreadable("url"))?;
    let limits = FetchLimits::from_machine(machine)?;
    let fetcher = Fetcher::new(context.gateway.clone(), &context.config)
        .map_err(|e| FetchSetupError::Client(e.to_string()))?;
    Ok(page::read(&fetcher, url, limits, text_limit(machine)?).await)
}

pub use crate::support::timestamp::now;

/// The VM01 response of a reading.
pub fn response(machine: &Machine, reading: &PageReading, checked_at: &str) -> Value {
    let (text, basis, truncated) = reading.text();
    let characters = text.chars().count();
    let extracted = reading.extracted.as_ref();
    let observations: Vec<Value> = reading
        .observations
        .iter()
        .map(|o| json!({"source": o.source, "name": o.name, "value": o.value}))
        .collect();
    let mut body = json!({
        "status": reading.status.as_str(),
        "methodology_version": machine.methodology_version,
        "checked_at": checked_at,
        "requested_url": reading.requested_url,
        "final_url": reading.final_url,
        "http": http_object(reading),
        "metadata": metadata_object(extracted),
        "outline": outline_array(extracted),
        "content": {
            "text": text,
            "extraction_basis": basis.as_str(),
            "characters": characters,
            "approx_tokens": characters.div_ceil(4),
            "token_estimate_method": "ceil(characters/4)",
            "truncated": truncated,
        },
        "structured_data": {"json_ld_types": extracted.map(|e| e.json_ld_types.clone()).unwrap_or_default()},
        "freshness": {"observations": observations},
        "size": {
            "source_bytes_read": reading.source_bytes_read,
            "output_json_bytes": 0,
            "normalized_content_characters": extracted.map_or(0, |e| e.normalized_characters),
        },
        "evidence": {
            "final_response_headers": reading.headers,
            "notes": reading.notes,
        },
        "limitations": reading.limitations,
    });
    set_output_size(&mut body);
    body
}

/// The `metadata` object shared with VM07: title, description and canonical URL, null when
/// not found.
pub fn metadata_object(extracted: Option<&Extracted>) -> Value {
    json!({
        "title": extracted.and_then(|e| e.title.clone()),
        "description": extracted.and_then(|e| e.description.clone()),
        "canonical": extracted.and_then(|e| e.canonical.clone()),
    })
}

/// The `outline` array shared with VM07: the page's headings, empty when nothing was extracted.
pub fn outline_array(extracted: Option<&Extracted>) -> Vec<Value> {
    extracted
        .map(|e| {
            e.outline
                .iter()
                .map(|h| json!({"level": h.level, "text": h.text}))
                .collect()
        })
        .unwrap_or_default()
}

/// The `http` object shared with VM07.
pub fn http_object(reading: &PageReading) -> Value {
    json!({
        "status": reading.http_status,
        "content_type": reading.content_type,
        "redirect_count": reading.redirect_count,
    })
}

/// `size.output_json_bytes` = the length of this response's compact JSON, the number itself
/// included (iterated until the digit count is stable).
fn set_output_size(body: &mut Value) {
    for _ in 0..4 {
        let length = serde_json::to_vec(body).map_or(0, |b| b.len());
        if body["size"]["output_json_bytes"] == json!(length) {
            return;
        }
        body["size"]["output_json_bytes"] = json!(length);
    }
}
