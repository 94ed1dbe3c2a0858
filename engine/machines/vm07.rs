//! VM07 web change snapshot. A caller's baseline must be ours (methodology) and intact
//! (page_sha256 = canonical sha256 of the baseline without page_sha256: the six component
//! hashes, both completeness flags and the methodology; docs/hashing.md). The page is
//! read exactly as VM01 reads it; the comparison rules are in docs/vm07-web-change.md.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{Call, CheckFailure, Need, WorkError, vm01};
use crate::catalog::manifest::Machine;
use crate::machines::checks as rc;
use crate::support::canonical::canonical_sha256;
use crate::web::extract::{Extracted, normalize_whitespace};
use crate::web::page::{PageReading, Status};

/// The six hashed components, in the order `changed_components` lists them.
pub(crate) const COMPONENTS: [&str; 6] = [
    "final_url",
    "http",
    "metadata",
    "outline",
    "content",
    "structured_data",
];

const COMPARISON_SCOPE: &str = "The comparison covers the bounded normalized representation of this page (final URL, HTTP status and type, metadata, outline, main text up to the character limit, JSON-LD types), not the whole site or every byte of the page.";
const NOT_A_DIFF: &str = "Fingerprints are not exact historical text diffs.";

/// VM07 web change snapshot.
pub(crate) struct Vm07;

/// A VM07 request.
#[derive(Debug, Deserialize)]
pub(crate) struct Request {
    /// The page to read.
    pub url: String,
    /// The baseline of an earlier response, kept as sent: its seal covers its exact JSON.
    pub baseline: Option<Value>,
}

impl super::Machine for Vm07 {
    const ID: &'static str = "VM07";
    type Request = Request;
    type Answer = Value;
    const NEEDS: &'static [Need] = &[Need::Fetch];

    fn check(machine: &Machine, request: &Request) -> Result<(), CheckFailure> {
        rc::public_url(&request.url, "/url")?;
        if let Some(baseline) = &request.baseline {
            rc::baseline_methodology(baseline, &machine.methodology_version)?;
            // The seal binds the completeness flags too: they decide whether the baseline is
            // known-good, so an edited flag must not pass as an intact baseline.
            rc::self_sealed(baseline, "page_sha256")?;
        }
        Ok(())
    }

    async fn observe(call: Call<'_, Request>) -> Result<Value, WorkError> {
        let (context, machine, request) = call.parts();
        let reading = vm01::read_requested_page(context, machine, &request.url).await?;
        let prior = request.baseline.as_ref().map(Baseline::from_request);
        Ok(response(machine, &reading, prior.as_ref(), &vm01::now()))
    }
}

/// A baseline: the six component hashes and the completeness flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Baseline {
    pub components: Map<String, Value>,
    pub content_truncated: bool,
    pub extraction_complete: bool,
}

impl Baseline {
    /// The caller's baseline (already schema-checked and seal-checked before payment).
    fn from_request(value: &Value) -> Baseline {
        Baseline {
            components: value
                .get("components")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default(),
            content_truncated: value
                .get("content_truncated")
                .and_then(Value::as_bool)
                .unwrap_or(true),
            extraction_complete: value
                .get("extraction_complete")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        }
    }

    /// Complete and untruncated: the only kind that can support UNCHANGED and that
    /// incomplete evidence never replaces.
    fn known_good(&self) -> bool {
        self.extraction_complete && !self.content_truncated
    }

    fn to_json(&self, machine: &Machine) -> Value {
        let mut baseline = json!({
            "methodology_version": machine.methodology_version,
            "components": Value::Object(self.components.clone()),
            "content_truncated": self.content_truncated,
            "extraction_complete": self.extraction_complete,
        });
        let seal = canonical_sha256(&baseline);
        baseline["page_sha256"] = Value::String(seal);
        baseline
    }
}

/// The normalized value of each component (docs/hashing.md, "VM07 components").
pub(crate) fn component_values(
    reading: &PageReading,
    extracted: &Extracted,
) -> Vec<(&'static str, Value)> {
    let norm = |s: &Option<String>| s.as_deref().map(normalize_whitespace);
    let outline: Vec<Value> = extracted
        .outline
        .iter()
        .map(|h| json!({"level": h.level, "text": normalize_whitespace(&h.text)}))
        .collect();
    let mut types: Vec<String> = extracted.json_ld_types.clone();
    types.sort();
    types.dedup();
    vec![
        ("final_url", json!(reading.final_url)),
        (
            "http",
            json!({
                "status": reading.http_status,
                "content_type": reading.content_type.as_deref().map(normalize_content_type),
            }),
        ),
        (
            "metadata",
            json!({
                "title": norm(&extracted.title),
                "description": norm(&extracted.description),
                "canonical": norm(&extracted.canonical),
            }),
        ),
        ("outline", Value::Array(outline)),
        ("content", json!(normalize_whitespace(&extracted.text))),
        ("structured_data", json!({"json_ld_types": types})),
    ]
}

/// `type/subtype` lowercased, plus `; charset=<lowercased>` when a charset is declared.
/// Other parameters (boundary, …) are dropped; an unparseable value is kept trimmed and
/// lowercased.
pub(crate) fn normalize_content_type(raw: &str) -> String {
    match raw.parse::<mime::Mime>() {
        Ok(parsed) => {
            let essence = parsed.essence_str().to_ascii_lowercase();
            match parsed.get_param(mime::CHARSET) {
                Some(charset) => format!(
                    "{essence}; charset={}",
                    charset.as_str().to_ascii_lowercase()
                ),
                None => essence,
            }
        }
        Err(_) => normalize_whitespace(raw).to_ascii_lowercase(),
    }
}

/// The current observation as a baseline; None when nothing was extracted.
pub(crate) fn current_baseline(reading: &PageReading) -> Option<Baseline> {
    let extracted = reading.extracted.as_ref()?;
    if reading.status == Status::Hold {
        return None;
    }
    let components = component_values(reading, extracted)
        .into_iter()
        .map(|(name, value)| (name.to_string(), Value::String(canonical_sha256(&value))))
        .collect();
    Some(Baseline {
        components,
        content_truncated: extracted.truncated,
        extraction_complete: reading.extraction_complete(),
    })
}

/// The outcome of the comparison.
struct Comparison {
    status: &'static str,
    changed: Vec<&'static str>,
    baseline: Option<Baseline>,
    limitations: Vec<String>,
}

fn differing(current: &Baseline, prior: &Baseline) -> Vec<&'static str> {
    COMPONENTS
        .into_iter()
        .filter(|name| current.components.get(*name) != prior.components.get(*name))
        .collect()
}

/// The comparison rules (docs/vm07-web-change.md):
/// * no usable current observation (HOLD, non-2xx, non-HTML) → INCONCLUSIVE, the caller's
///   baseline (if any) returned;
/// * no baseline → BASELINE with the current observation;
/// * a current observation that is incomplete or truncated → INCONCLUSIVE; a known-good
///   caller baseline is returned unchanged;
/// * a baseline from an incomplete extraction → INCONCLUSIVE;
/// * components equal → UNCHANGED only when both sides are complete and untruncated;
/// * components differ → CHANGED, naming them.
fn compare(reading: &PageReading, prior: Option<&Baseline>) -> Comparison {
    match (current_baseline(reading), prior) {
        (Some(current), Some(prior)) => compare_pair(current, prior),
        (Some(current), None) => Comparison {
            status: "BASELINE",
            changed: Vec::new(),
            baseline: Some(current),
            limitations: Vec::new(),
        },
        (None, Some(prior)) => Comparison {
            status: "INCONCLUSIVE",
            changed: Vec::new(),
            baseline: Some(prior.clone()),
            limitations: vec!["Nothing usable was observed, so nothing was compared; your baseline is returned unchanged as the reusable one.".into()],
        },
        (None, None) => Comparison {
            status: "INCONCLUSIVE",
            changed: Vec::new(),
            baseline: None,
            limitations: vec![
                "Nothing usable was observed, so no baseline could be made.".into(),
            ],
        },
    }
}

fn compare_pair(current: Baseline, prior: &Baseline) -> Comparison {
    let mut limitations = Vec::new();
    let changed = differing(&current, prior);
    if !current.known_good() {
        limitations.push(if current.extraction_complete {
            "The current main text was cut at the character limit, so this observation can show neither that the page is unchanged nor that it changed.".to_string()
        } else {
            "The current observation is not a complete 2xx HTML extraction, so it can show neither that the page is unchanged nor that it changed.".to_string()
        });
        if !changed.is_empty() {
            limitations.push(format!(
                "Fingerprints that differ from your baseline (not claimed as changes): {}.",
                changed.join(", ")
            ));
        }
        // Never replace a known-good baseline with weaker evidence; a complete but
        // truncated observation may replace a baseline that was no better.
        let returned = if prior.known_good() || !current.extraction_complete {
            limitations.push("Your baseline is returned unchanged as the reusable one.".into());
            prior.clone()
        } else {
            current
        };
        return inconclusive(returned, limitations);
    }
    if changed.is_empty() && prior.known_good() {
        return Comparison {
            status: "UNCHANGED",
            changed,
            baseline: Some(current),
            limitations,
        };
    }
    if !prior.extraction_complete {
        limitations.push("Your baseline came from an incomplete extraction, so it cannot support a comparison; the current observation is returned as the reusable baseline.".into());
        return inconclusive(current, limitations);
    }
    if changed.is_empty() {
        limitations.push("Your baseline's main text was cut at the character limit, so equal fingerprints cannot show that the page is unchanged.".into());
        return inconclusive(current, limitations);
    }
    Comparison {
        status: "CHANGED",
        changed,
        baseline: Some(current),
        limitations,
    }
}

fn inconclusive(baseline: Baseline, limitations: Vec<String>) -> Comparison {
    Comparison {
        status: "INCONCLUSIVE",
        changed: Vec::new(),
        baseline: Some(baseline),
        limitations,
    }
}

/// The VM07 response of a reading and an optional caller baseline.
pub(crate) fn response(
    machine: &Machine,
    reading: &PageReading,
    prior: Option<&Baseline>,
    checked_at: &str,
) -> Value {
    let comparison = compare(reading, prior);
    let extracted = reading.extracted.as_ref();
    let (text, basis, truncated) = reading.text();
    let extraction_complete = reading.extraction_complete();
    let mut limitations = reading.limitations.clone();
    limitations.extend(comparison.limitations);
    limitations.push(NOT_A_DIFF.into());
    json!({
        "status": reading.status.as_str(),
        "machine": machine.machine,
        "methodology_version": machine.methodology_version,
        "checked_at": checked_at,
        "requested_url": reading.requested_url,
        "final_url": reading.final_url,
        "http": vm01::http_object(reading),
        "comparison_status": comparison.status,
        "comparison_scope": COMPARISON_SCOPE,
        "changed_components": comparison.changed,
        "baseline": comparison.baseline.map(|b| b.to_json(machine)),
        "metadata": vm01::metadata_object(extracted),
        "outline": vm01::outline_array(extracted),
        "structured_data": {"json_ld_types": extracted.map(|e| e.json_ld_types.clone()).unwrap_or_default()},
        "extraction": {
            "basis": basis.as_str(),
            "characters": text.chars().count(),
            "truncated": truncated,
            "complete": extraction_complete,
        },
        "completeness": {
            "content_truncated": truncated,
            "extraction_complete": extraction_complete,
            "product_status": reading.status.as_str(),
        },
        "limitations": limitations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::web::extract::{Basis, CharsetSource, Heading};
    use crate::web::fetch::BodyEnd;

    /// The worked example of docs/hashing.md, computed there with Python's json.dumps.
    #[test]
    fn the_documented_example_hashes_reproduce() {
        let extracted = Extracted {
            title: Some("Changelog".into()),
            description: Some("Release\u{a0}notes. ".into()),
            canonical: Some("https://example.com/changelog".into()),
            outline: vec![
                Heading {
                    level: 1,
                    text: "Changelog".into(),
                },
                Heading {
                    level: 2,
                    text: "v3.2".into(),
                },
            ],
            text: "Changelog v3.2 Fixed a crash.".into(),
            basis: Basis::Main,
            characters: 29,
            normalized_characters: 29,
            truncated: false,
            json_ld_types: vec!["WebPage".into()],
            observations: Vec::new(),
            charset: "UTF-8",
            charset_source: CharsetSource::Header,
            notes: Vec::new(),
        };
        let reading = PageReading {
            requested_url: "https://example.com/changelog".into(),
            final_url: Some("https://example.com/changelog".into()),
            http_status: Some(200),
            content_type: Some("text/html;charset=UTF-8".into()),
            redirect_count: 0,
            requests_sent: 1,
            headers: Default::default(),
            source_bytes_read: 1000,
            body_end: Some(BodyEnd::Complete),
            extracted: Some(extracted),
            observations: Vec::new(),
            status: Status::Ok,
            limitations: Vec::new(),
            notes: Vec::new(),
        };
        let baseline = current_baseline(&reading).expect("baseline");
        let hash = |name: &str| {
            baseline.components[name]
                .as_str()
                .unwrap_or_default()
                .to_string()
        };
        assert_eq!(
            hash("final_url"),
            "c4adba4e64d555b5b2c80ffe3319cdd9b91d7537c4ef277d1c2bb50963442fb4"
        );
        assert_eq!(
            hash("http"),
            "311d9c49d5ae25c2a778b4241778a131d5dfc55e247f7081f6286f87b6abb243"
        );
        assert_eq!(
            hash("metadata"),
            "196ac13f46c24dc24452597a0b6ed002157597a8c1f7221c22dd217597b4df2d"
        );
        assert_eq!(
            hash("outline"),
            "463004cb43bb7c313d6deb50372277c48354bc8d5a771abe2700a2b533a70136"
        );
        assert_eq!(
            hash("content"),
            "3b7ebe643689ca9242371091c87f129aebd16f6360304cba52590083504916b8"
        );
        assert_eq!(
            hash("structured_data"),
            "8d4d10afe6b747b737cc984e816bf4d2d34cc2a848ca278f0ff99f4956c03784"
        );
        let machine = crate::catalog::embedded::MANIFEST
            .machines
            .iter()
            .find(|m| m.machine == "VM07")
            .expect("VM07");
        assert_eq!(
            baseline.to_json(machine)["page_sha256"],
            "d5438204f0c12e7e6a2ba604c153346446554d48dbff63ce5a0c4d1a606c2606"
        );
        assert!(baseline.known_good());
    }

    #[test]
    fn content_types_normalize() {
        assert_eq!(
            normalize_content_type("Text/HTML; Charset=\"UTF-8\"; boundary=x"),
            "text/html; charset=utf-8"
        );
        assert_eq!(normalize_content_type("application/pdf"), "application/pdf");
    }
}
