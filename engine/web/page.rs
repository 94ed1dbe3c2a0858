//! One bounded reading of one page: the fetch (engine/web/fetch.rs), the extraction
//! (engine/web/extract.rs) and the product status rules shared by VM01 and VM07
//! (docs/extraction.md "Status").

use std::collections::BTreeMap;

use url::Url;

use crate::web::extract::{self, Basis, ExtractOptions, Extracted, Observation};
use crate::web::fetch::{
    BodyEnd, FetchLimits, FetchMethod, FetchOutcome, FetchRequest, Fetcher, Redirects,
};

/// Main texts shorter than this many characters are reported as a weak extraction.
pub const WEAK_TEXT_CHARS: usize = 200;

/// Product status of a reading (VM01 `status`, VM07 `completeness.product_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Everything was read.
    Ok,
    /// Something was read, not everything.
    Partial,
    /// Nothing usable was read.
    Hold,
}

impl Status {
    /// The status as responses print it.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::Partial => "PARTIAL",
            Status::Hold => "HOLD",
        }
    }
}

/// What one reading observed.
#[derive(Debug, Clone)]
pub struct PageReading {
    /// The URL asked for.
    pub requested_url: String,
    /// The URL that answered last.
    pub final_url: Option<String>,
    /// Its HTTP status.
    pub http_status: Option<u16>,
    /// Its Content-Type.
    pub content_type: Option<String>,
    /// Redirects followed.
    pub redirect_count: u32,
    /// Requests sent.
    pub requests_sent: u32,
    /// Allowlisted headers of the final response.
    pub headers: BTreeMap<String, String>,
    /// Body bytes read.
    pub source_bytes_read: usize,
    /// None when the fetch failed before a response.
    pub body_end: Option<BodyEnd>,
    /// None when nothing was extracted (no response, non-2xx, non-HTML).
    pub extracted: Option<Extracted>,
    /// Freshness observations (headers, metadata).
    pub observations: Vec<Observation>,
    /// The reading's status.
    pub status: Status,
    /// Why the status is not OK, or what the reading does not cover. Caller-facing.
    pub limitations: Vec<String>,
    /// Evidence notes.
    pub notes: Vec<String>,
}

impl PageReading {
    /// The bounded main text and its basis ("" / none when nothing was extracted).
    pub fn text(&self) -> (&str, Basis, bool) {
        match &self.extracted {
            Some(e) => (e.text.as_str(), e.basis, e.truncated),
            None => ("", Basis::None, false),
        }
    }

    /// True when the reading is complete: a whole 2xx HTML body, extracted, text not cut.
    pub fn extraction_complete(&self) -> bool {
        self.status != Status::Hold
            && self.body_end == Some(BodyEnd::Complete)
            && self.http_status.is_some_and(|s| (200..300).contains(&s))
            && self.extracted.is_some()
    }
}

/// Fetches one page with the machine's limits and reads it.
pub async fn read(
    fetcher: &Fetcher,
    url: Url,
    limits: FetchLimits,
    max_text_chars: usize,
) -> PageReading {
    let requested_url = url.to_string();
    let outcome = fetcher
        .fetch(FetchRequest {
            url,
            method: FetchMethod::Get,
            redirects: Redirects::Follow,
            limits: limits.clone(),
        })
        .await;
    from_fetch(requested_url, outcome, &limits, max_text_chars)
}

fn from_fetch(
    requested_url: String,
    outcome: FetchOutcome,
    limits: &FetchLimits,
    max_text_chars: usize,
) -> PageReading {
    let mut reading = PageReading {
        requested_url,
        final_url: None,
        http_status: None,
        content_type: None,
        redirect_count: outcome.redirect_count,
        requests_sent: outcome.requests_sent,
        headers: BTreeMap::new(),
        source_bytes_read: 0,
        body_end: None,
        extracted: None,
        observations: Vec::new(),
        status: Status::Hold,
        limitations: Vec::new(),
        notes: Vec::new(),
    };
    let response = match outcome.result {
        Ok(response) => response,
        Err(refusal) => {
            reading.limitations.push(format!(
                "Nothing was read: {refusal} ({}). No page content is reported.",
                refusal.code()
            ));
            return reading;
        }
    };
    reading.final_url = Some(response.final_url.to_string());
    reading.http_status = Some(response.status);
    reading.content_type = response.content_type().map(str::to_string);
    reading.source_bytes_read = response.body.len();
    reading.body_end = Some(response.body_end);
    reading.observations = header_observations(&response.headers);
    for name in &response.dropped_headers {
        reading.notes.push(format!(
            "Response header {name} was not kept (too long or not plain text)."
        ));
    }
    reading.headers = response.headers;
    describe_body_end(&mut reading, limits);
    let page_url = response.final_url.clone();
    read_body(
        &mut reading,
        &response.body,
        Some(page_url),
        Some(max_text_chars),
    );
    settled(reading)
}

/// Reads a local document (the `factomat extract` command): no fetch, no HTTP facts.
pub fn read_local(
    requested_url: String,
    page_url: Option<Url>,
    bytes: &[u8],
    content_type: Option<&str>,
    max_text_chars: Option<usize>,
) -> PageReading {
    let mut reading = PageReading {
        requested_url,
        final_url: page_url.as_ref().map(Url::to_string),
        http_status: None,
        content_type: content_type.map(str::to_string),
        redirect_count: 0,
        requests_sent: 0,
        headers: BTreeMap::new(),
        source_bytes_read: bytes.len(),
        body_end: Some(BodyEnd::Complete),
        extracted: None,
        observations: Vec::new(),
        status: Status::Hold,
        limitations: Vec::new(),
        notes: vec!["Read from a local file; no HTTP request was made.".into()],
    };
    read_body(&mut reading, bytes, page_url, max_text_chars);
    settled(reading)
}

/// The reading as reported: a HOLD names no final URL (SPEC: `final_url` is null on HOLD),
/// whatever the fetch reached before it failed — e.g. headers that arrived before the body
/// timed out.
fn settled(mut reading: PageReading) -> PageReading {
    if reading.status == Status::Hold {
        reading.final_url = None;
    }
    reading
}

/// Extraction and the status decision for a body we hold.
fn read_body(
    reading: &mut PageReading,
    body: &[u8],
    page_url: Option<Url>,
    max_text_chars: Option<usize>,
) {
    if let Some(status) = reading.http_status.filter(|s| !(200..300).contains(s)) {
        reading.limitations.push(format!(
            "The server answered HTTP {status}; the body of a non-2xx answer is not read as page content."
        ));
        reading.status = Status::Partial;
        return;
    }
    let content_type = reading.content_type.clone();
    if !extract::is_html(content_type.as_deref(), body) {
        reading.limitations.push(format!(
            "The response is {}, not HTML; no text was extracted.",
            content_type.as_deref().unwrap_or("of unknown type")
        ));
        reading.status = Status::Partial;
        return;
    }
    let options = ExtractOptions {
        page_url,
        max_text_chars,
    };
    let extracted = extract::extract_bytes(body, content_type.as_deref(), &options);
    reading.notes.extend(extracted.notes.iter().cloned());
    reading.notes.push(basis_note(extracted.basis).into());
    reading
        .observations
        .extend(extracted.observations.iter().cloned());
    reading.status = decide(reading, &extracted);
    reading.extracted = Some(extracted);
}

/// OK, PARTIAL or HOLD for an extracted 2xx HTML body; adds the limitations that say why.
fn decide(reading: &mut PageReading, extracted: &Extracted) -> Status {
    let usable = !extracted.text.is_empty()
        || extracted.title.is_some()
        || extracted.description.is_some()
        || !extracted.outline.is_empty()
        || !extracted.json_ld_types.is_empty();
    if !usable {
        reading
            .limitations
            .push("The page yielded no title, description, headings, main text or JSON-LD.".into());
        return Status::Hold;
    }
    let mut status = if reading.body_end == Some(BodyEnd::Complete) {
        Status::Ok
    } else {
        Status::Partial
    };
    if extracted.basis == Basis::None {
        reading
            .limitations
            .push("No main text was found on the page; content.text is empty.".into());
        status = Status::Partial;
    } else if extracted.normalized_characters < WEAK_TEXT_CHARS {
        reading.limitations.push(format!(
            "The main text is short ({} characters); the extraction may be weak.",
            extracted.normalized_characters
        ));
        status = Status::Partial;
    }
    if extracted.truncated {
        reading.limitations.push(format!(
            "The main text was cut at {} of {} characters.",
            extracted.characters, extracted.normalized_characters
        ));
        status = Status::Partial;
    }
    status
}

fn describe_body_end(reading: &mut PageReading, limits: &FetchLimits) {
    let message = match reading.body_end {
        Some(BodyEnd::LimitReached) => format!(
            "The response body was read up to the limit of {} bytes (after decompression); the rest was not read.",
            limits.max_body_bytes
        ),
        Some(BodyEnd::TimedOut) => format!(
            "The response body did not finish before the deadline; {} bytes were read.",
            reading.source_bytes_read
        ),
        Some(BodyEnd::Interrupted) => format!(
            "The response body broke off (connection or decoding error) after {} bytes.",
            reading.source_bytes_read
        ),
        _ => return,
    };
    reading.limitations.push(message);
}

fn basis_note(basis: Basis) -> &'static str {
    match basis {
        Basis::Main => "Main text taken from the main element.",
        Basis::Article => "Main text taken from an article element.",
        Basis::BodyHeuristic => {
            "Main text chosen by content scoring over the body (Readability method)."
        }
        Basis::None => "No main text was found.",
    }
}

/// Last-Modified, Date and Age as observed; ETag by presence only.
fn header_observations(headers: &BTreeMap<String, String>) -> Vec<Observation> {
    let mut observations = Vec::new();
    for name in ["last-modified", "date", "age"] {
        if let Some(value) = headers.get(name) {
            observations.push(Observation {
                source: "http_header",
                name: name.to_string(),
                value: value.clone(),
            });
        }
    }
    if headers.contains_key("etag") {
        observations.push(Observation {
            source: "http_header",
            name: "etag".into(),
            value: "present".into(),
        });
    }
    observations
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(body: &[u8]) -> PageReading {
        let url = Url::parse("https://news.example.com/a").ok();
        read_local(
            "https://news.example.com/a".into(),
            url,
            body,
            Some("text/html"),
            None,
        )
    }

    #[test]
    fn a_hold_names_no_final_url() {
        let empty = local(b"<!-- nothing -->");
        assert_eq!(empty.status, Status::Hold);
        assert_eq!(empty.final_url, None);
        let page = local(b"<html><head><title>T</title></head><body><p>Text.</p></body></html>");
        assert_ne!(page.status, Status::Hold);
        assert_eq!(
            page.final_url.as_deref(),
            Some("https://news.example.com/a")
        );
    }
}
