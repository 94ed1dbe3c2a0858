//! Free documents as crawlers and agents expect them: each body compressed once at start-up
//! (gzip and brotli, kept only where smaller), a strong ETag per representation,
//! `If-None-Match` answered with 304, and the manifest's Cache-Control lifetime.

use std::io::Write as _;

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_ENCODING, ETAG, IF_NONE_MATCH, VARY};
use http::{HeaderMap, HeaderValue};
use sha2::{Digest, Sha256};

/// Brotli quality 5 and gzip's default level 6: every start-up (and every test server)
/// compresses ~0.5 MB of documents, and the highest settings cost seconds there for a few
/// percent of size.
const BROTLI_QUALITY: u32 = 5;
const BROTLI_WINDOW_BITS: u32 = 22;
const BROTLI_BUFFER: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub(crate) enum FreeDocError {
    #[error("compressing a free document failed: {0}")]
    Compress(#[from] std::io::Error),
    #[error("Cache-Control value is not a valid header: {0}")]
    Header(#[from] http::header::InvalidHeaderValue),
}

/// A content coding we can serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Coding {
    Identity,
    Gzip,
    Brotli,
}

impl Coding {
    fn token(self) -> &'static str {
        match self {
            Coding::Identity => "identity",
            Coding::Gzip => "gzip",
            Coding::Brotli => "br",
        }
    }
}

/// One encoded body with the strong entity tag of exactly these bytes.
#[derive(Debug)]
pub(crate) struct Representation {
    pub coding: Coding,
    pub body: Bytes,
    pub etag: HeaderValue,
}

impl Representation {
    fn new(coding: Coding, body: Bytes) -> Representation {
        let digest = Sha256::digest(&body);
        let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        let etag = HeaderValue::from_str(&format!("\"{hex}\""))
            .unwrap_or_else(|_| HeaderValue::from_static("\"0\""));
        Representation { coding, body, etag }
    }

    fn tag(&self) -> &str {
        self.etag.to_str().unwrap_or_default()
    }
}

/// A free document with every representation prepared.
#[derive(Debug)]
pub(crate) struct FreeDoc {
    pub content_type: &'static str,
    identity: Representation,
    /// Brotli then gzip, each only where it is smaller than the identity body.
    compressed: Vec<Representation>,
    cache_control: HeaderValue,
}

/// What to answer for one request: the chosen representation, and whether the client's
/// copy is current (304).
pub(crate) struct Selection<'a> {
    pub representation: &'a Representation,
    pub not_modified: bool,
}

impl FreeDoc {
    /// Compresses `body` with gzip and brotli once; a coding that does not shrink the body
    /// is not offered.
    pub(crate) fn prepare(
        content_type: &'static str,
        body: Bytes,
        max_age_seconds: u64,
    ) -> Result<FreeDoc, FreeDocError> {
        let gzip = gzip(&body)?;
        let brotli = brotli(&body)?;
        let compressed = [(Coding::Brotli, brotli), (Coding::Gzip, gzip)]
            .into_iter()
            .filter(|(_, encoded)| encoded.len() < body.len())
            .map(|(coding, encoded)| Representation::new(coding, Bytes::from(encoded)))
            .collect();
        let cache_control = HeaderValue::from_str(&format!("public, max-age={max_age_seconds}"))?;
        Ok(FreeDoc {
            content_type,
            identity: Representation::new(Coding::Identity, body),
            compressed,
            cache_control,
        })
    }

    /// The uncompressed body.
    #[allow(dead_code)] // the tests of this module read it
    pub(crate) fn identity(&self) -> &Representation {
        &self.identity
    }

    /// The representation the request's `Accept-Encoding` prefers, and whether its
    /// `If-None-Match` names that representation's tag.
    pub(crate) fn select(&self, request: &HeaderMap) -> Selection<'_> {
        let accept = request
            .get_all(http::header::ACCEPT_ENCODING)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect::<Vec<_>>()
            .join(",");
        // Preference order breaks ties: brotli, then gzip, then identity.
        let mut best: Option<(&Representation, f32)> = None;
        for representation in self
            .compressed
            .iter()
            .chain(std::iter::once(&self.identity))
        {
            let q = quality(&accept, representation.coding);
            if q > 0.0 && best.is_none_or(|(_, best_q)| q > best_q) {
                best = Some((representation, q));
            }
        }
        let representation = best.map_or(&self.identity, |(r, _)| r);
        let not_modified = request
            .get_all(IF_NONE_MATCH)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|value| matches_tag(value, representation.tag()));
        Selection {
            representation,
            not_modified,
        }
    }

    /// The validator and caching headers every answer (200, 304, HEAD) carries.
    pub(crate) fn write_headers(&self, headers: &mut HeaderMap, representation: &Representation) {
        headers.insert(ETAG, representation.etag.clone());
        headers.insert(CACHE_CONTROL, self.cache_control.clone());
        headers.insert(VARY, HeaderValue::from_static("Accept-Encoding"));
        if representation.coding != Coding::Identity {
            headers.insert(
                CONTENT_ENCODING,
                HeaderValue::from_static(representation.coding.token()),
            );
        }
    }
}

/// The weight `Accept-Encoding` gives `coding` (RFC 9110 §12.5.3). No header means only
/// identity is wanted; identity stays acceptable unless excluded by `identity;q=0` or `*;q=0`.
fn quality(accept: &str, coding: Coding) -> f32 {
    let mut explicit = None;
    let mut wildcard = None;
    for item in accept.split(',') {
        let mut parts = item.split(';');
        let name = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
        if name.is_empty() {
            continue;
        }
        let weight = parts
            .filter_map(|p| p.trim().split_once('='))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
            .map(|(_, v)| v.trim().parse::<f32>().unwrap_or(0.0))
            .unwrap_or(1.0)
            .clamp(0.0, 1.0);
        let named = name == coding.token() || (coding == Coding::Gzip && name == "x-gzip");
        if named {
            explicit = Some(weight);
        } else if name == "*" {
            wildcard = Some(weight);
        }
    }
    match (explicit, wildcard, coding) {
        (Some(q), _, _) => q,
        (None, Some(q), _) => q,
        // Identity is least preferred but acceptable when not excluded.
        (None, None, Coding::Identity) => 0.001,
        (None, None, _) => 0.0,
    }
}

/// `If-None-Match` uses the weak comparison: `W/` prefixes are ignored; `*` matches.
fn matches_tag(header: &str, tag: &str) -> bool {
    header.split(',').map(str::trim).any(|candidate| {
        candidate == "*" || candidate.strip_prefix("W/").unwrap_or(candidate) == tag
    })
}

fn gzip(body: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(body)?;
    encoder.finish()
}

fn brotli(body: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut encoder = brotli::CompressorWriter::new(
        Vec::new(),
        BROTLI_BUFFER,
        BROTLI_QUALITY,
        BROTLI_WINDOW_BITS,
    );
    encoder.write_all(body)?;
    encoder.flush()?;
    Ok(encoder.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> FreeDoc {
        let body = Bytes::from("{\"a\":\"".to_string() + &"x".repeat(2000) + "\"}");
        FreeDoc::prepare("application/json", body, 300).expect("prepared")
    }

    fn pick(accept: Option<&str>) -> Coding {
        let mut headers = HeaderMap::new();
        if let Some(accept) = accept {
            headers.insert(
                http::header::ACCEPT_ENCODING,
                HeaderValue::from_str(accept).expect("ascii"),
            );
        }
        doc().select(&headers).representation.coding
    }

    #[test]
    fn accept_encoding_picks_the_best_acceptable_coding() {
        assert_eq!(pick(None), Coding::Identity);
        assert_eq!(pick(Some("gzip")), Coding::Gzip);
        assert_eq!(pick(Some("x-gzip")), Coding::Gzip);
        assert_eq!(pick(Some("gzip, deflate, br, zstd")), Coding::Brotli);
        assert_eq!(pick(Some("br;q=0.5, gzip;q=0.8")), Coding::Gzip);
        assert_eq!(pick(Some("br;q=0, gzip;q=0")), Coding::Identity);
        assert_eq!(pick(Some("*")), Coding::Brotli);
        assert_eq!(pick(Some("*;q=0.5, identity")), Coding::Identity);
        assert_eq!(pick(Some("deflate")), Coding::Identity);
        assert_eq!(pick(Some("GZIP;Q=1")), Coding::Gzip);
    }

    #[test]
    fn if_none_match_uses_the_weak_comparison() {
        assert!(matches_tag("\"abc\"", "\"abc\""));
        assert!(matches_tag("W/\"abc\"", "\"abc\""));
        assert!(matches_tag("\"x\", \"abc\"", "\"abc\""));
        assert!(matches_tag("*", "\"abc\""));
        assert!(!matches_tag("\"abcd\"", "\"abc\""));
    }

    #[test]
    fn a_body_that_does_not_shrink_is_served_as_is() {
        let tiny = FreeDoc::prepare("text/plain", Bytes::from_static(b"ok"), 60).expect("ok");
        assert!(tiny.compressed.is_empty());
    }
}
