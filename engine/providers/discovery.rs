//! The x402 discovery provider (a hosted Bazaar-style index): its client.
//!
//! One reading is one merchant GET (`/discovery/merchant?payTo=..&limit=20&offset=0`) and
//! one search GET per normalized query (`/discovery/search?query=..&limit=20`), sent
//! concurrently through the counted gateway with no auth header. Every bound (page sizes,
//! request count, timeouts, answer size, JSON shape) is a manifest limit of the calling
//! machine. Provider failures are not errors: each read carries its own [`ReadError`] and
//! the machines (engine/machines/listing/) turn them into truthful PARTIAL/HOLD results.

use std::time::Duration;

use alloy_primitives::Address;
use serde_json::{Value, json};
use tokio::time::Instant;
use url::Url;

use crate::catalog::manifest::Machine;
use crate::net::bounded_json::{self, JsonBounds, JsonRefusal};
use crate::net::gateway::{Gateway, Upstream};

/// The metrics labels of the discovery index's two endpoints.
const MERCHANT: Upstream = Upstream::new("discovery_index", "merchant");
const SEARCH: Upstream = Upstream::new("discovery_index", "search");
use crate::net::upstream::{self, Bounds, GetError, Got};
use crate::support::timestamp;

/// A failure of ours (configuration or manifest), not of the provider.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("{machine} has no manifest limit {name}")]
    MissingLimit { machine: String, name: &'static str },
    #[error("{needed} provider requests would exceed max_outbound_requests {max}")]
    TooManyRequests { needed: u64, max: u64 },
    #[error("no discovery provider is configured")]
    NoProvider,
    #[error("the discovery provider URL cannot take a path")]
    UnusableProviderUrl,
}

/// The manifest limits one observation runs under.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DiscoveryLimits {
    pub merchant_limit: u64,
    pub merchant_offset: u64,
    pub search_limit: u64,
    pub max_outbound_requests: u64,
    pub response_timeout: Duration,
    pub overall_timeout: Duration,
    pub max_response_bytes: u64,
    pub json: JsonBounds,
}

impl DiscoveryLimits {
    /// Reads every limit from the machine's manifest entry; none has a default here.
    pub(crate) fn from_machine(machine: &Machine) -> Result<Self, DiscoveryError> {
        let get = |name: &'static str| {
            machine
                .limit(name)
                .ok_or_else(|| DiscoveryError::MissingLimit {
                    machine: machine.machine.clone(),
                    name,
                })
        };
        Ok(DiscoveryLimits {
            merchant_limit: get("merchant_limit")?,
            merchant_offset: get("merchant_page_offset")?,
            search_limit: get("search_limit")?,
            max_outbound_requests: get("max_outbound_requests")?,
            response_timeout: Duration::from_millis(get("response_timeout_ms")?),
            overall_timeout: Duration::from_millis(get("overall_timeout_ms")?),
            max_response_bytes: get("max_response_bytes")?,
            json: JsonBounds {
                max_depth: get("max_json_depth")?,
                max_object_keys: get("max_object_keys")?,
                max_array_length: get("max_array_length")?,
                max_nodes: get("max_json_nodes")?,
            },
        })
    }
}

/// Why one provider read produced no usable answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReadError {
    pub code: &'static str,
    pub message: String,
    /// The provider's `Retry-After`, as it wrote it, when it rate-limited the read.
    pub retry_after: Option<String>,
}

impl ReadError {
    pub(crate) fn new(code: &'static str, message: impl Into<String>) -> Self {
        ReadError {
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// HTTP 429: the provider's own code (`rate_limit_exceeded`, 600 reads per 10 s at
    /// CDP), told apart from other statuses, with its `Retry-After` kept as evidence.
    fn rate_limited(retry_after: Option<String>) -> Self {
        let message = match &retry_after {
            Some(after) => {
                format!("the provider rate-limited the read (HTTP 429, Retry-After {after})")
            }
            None => "the provider rate-limited the read (HTTP 429, no Retry-After)".to_string(),
        };
        ReadError {
            code: "provider_rate_limited",
            message,
            retry_after,
        }
    }

    /// The answer broke a size or JSON-shape bound (the message names the limit).
    pub(crate) fn bound_exceeded(&self) -> bool {
        matches!(self.code, "response_too_large" | "json_limit_exceeded")
    }

    /// The `error` object of a response; `retry_after` appears only when the provider sent it.
    pub(crate) fn to_json(&self) -> Value {
        let mut out = json!({"code": self.code, "message": self.message});
        if let Some(after) = &self.retry_after {
            out["retry_after"] = json!(after);
        }
        out
    }
}

/// One reading of the provider: the merchant GET and one search GET per query, sent
/// concurrently, as read (the machines interpret them).
pub(crate) struct Reading {
    /// The merchant page GET.
    pub merchant: Fetched,
    /// The search GETs, in query order.
    pub searches: Vec<Fetched>,
    /// The provider's host.
    pub host: String,
    /// The provider's origin.
    pub origin: String,
    /// The discovery path prefix under the configured base.
    pub path_prefix: String,
    /// The merchant endpoint's path.
    pub merchant_path: String,
    /// The search endpoint's path.
    pub search_path: String,
    /// The limits the reads ran under.
    pub limits: DiscoveryLimits,
}

/// Reads the provider once for `pay_to` and the normalized `queries`.
pub(crate) async fn read(
    gateway: &Gateway,
    base: Option<&Url>,
    machine: &Machine,
    pay_to: Address,
    queries: &[String],
) -> Result<Reading, DiscoveryError> {
    let limits = DiscoveryLimits::from_machine(machine)?;
    let needed = 1 + queries.len() as u64;
    if needed > limits.max_outbound_requests {
        return Err(DiscoveryError::TooManyRequests {
            needed,
            max: limits.max_outbound_requests,
        });
    }
    let provider = Provider::new(base.ok_or(DiscoveryError::NoProvider)?)?;
    let reader = Reader {
        gateway,
        limits,
        deadline: Instant::now() + limits.overall_timeout,
    };
    let merchant_url = provider.merchant(pay_to, &limits)?;
    let search_urls = queries
        .iter()
        .map(|query| provider.search(query, &limits))
        .collect::<Result<Vec<Url>, DiscoveryError>>()?;
    let (merchant_path, search_path) = (provider.path("merchant"), provider.path("search"));
    let (merchant, searches) = tokio::join!(
        reader.fetch(MERCHANT, merchant_url),
        futures_util::future::join_all(
            search_urls.into_iter().map(|url| reader.fetch(SEARCH, url))
        ),
    );
    Ok(Reading {
        merchant,
        searches,
        host: provider.host,
        origin: provider.origin,
        path_prefix: provider.prefix,
        merchant_path,
        search_path,
        limits,
    })
}

/// The configured provider base and the endpoints under it.
struct Provider {
    base: Url,
    host: String,
    origin: String,
    prefix: String,
}

impl Provider {
    /// Userinfo, query and fragment of the configured base are dropped: the provider takes
    /// no credentials, and a userinfo would otherwise become an Authorization header.
    fn new(configured: &Url) -> Result<Provider, DiscoveryError> {
        let mut base = configured.clone();
        base.set_query(None);
        base.set_fragment(None);
        base.set_username("")
            .and_then(|()| base.set_password(None))
            .map_err(|()| DiscoveryError::UnusableProviderUrl)?;
        if base.cannot_be_a_base() {
            return Err(DiscoveryError::UnusableProviderUrl);
        }
        let host = base.host_str().unwrap_or_default().to_string();
        let origin = base.origin().ascii_serialization();
        let prefix = format!("{}/discovery", base.path().trim_end_matches('/'));
        Ok(Provider {
            base,
            host,
            origin,
            prefix,
        })
    }

    fn path(&self, leaf: &str) -> String {
        format!("{}/{leaf}", self.prefix)
    }

    fn endpoint(&self, leaf: &str, query: &[(&str, String)]) -> Result<Url, DiscoveryError> {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .map_err(|()| DiscoveryError::UnusableProviderUrl)?
            .pop_if_empty()
            .extend(["discovery", leaf]);
        url.query_pairs_mut()
            .extend_pairs(query.iter().map(|(k, v)| (*k, v.as_str())));
        Ok(url)
    }

    /// The payTo is sent in its EIP-55 checksummed spelling.
    fn merchant(&self, pay_to: Address, limits: &DiscoveryLimits) -> Result<Url, DiscoveryError> {
        self.endpoint(
            "merchant",
            &[
                ("payTo", pay_to.to_checksum(None)),
                ("limit", limits.merchant_limit.to_string()),
                ("offset", limits.merchant_offset.to_string()),
            ],
        )
    }

    fn search(&self, query: &str, limits: &DiscoveryLimits) -> Result<Url, DiscoveryError> {
        self.endpoint(
            "search",
            &[
                ("query", query.to_string()),
                ("limit", limits.search_limit.to_string()),
            ],
        )
    }
}

/// One GET as read: its answer or why it failed, when it was read, and whether it was sent.
pub(crate) struct Fetched {
    /// The JSON answer (HTTP 200, within the size and JSON bounds), or why there is none.
    pub answer: Result<Value, ReadError>,
    /// When a usable answer arrived.
    pub retrieved_at: Option<String>,
    /// Whether the request left the process.
    pub sent: bool,
}

struct Reader<'g> {
    /// The paid call's gateway: it already connects within the machine's `connect_timeout_ms`.
    gateway: &'g Gateway,
    limits: DiscoveryLimits,
    deadline: Instant,
}

impl Reader<'_> {
    /// One GET: bounded by the response timeout and by what is left of the overall one.
    async fn fetch(&self, endpoint: Upstream, url: Url) -> Fetched {
        let remaining = self.deadline.saturating_duration_since(Instant::now());
        let (budget, limit_name) = if remaining < self.limits.response_timeout {
            (remaining, "overall_timeout_ms")
        } else {
            (self.limits.response_timeout, "response_timeout_ms")
        };
        let timed_out = ReadError::new(
            "provider_timeout",
            format!(
                "no complete answer within {limit_name} {}",
                match limit_name {
                    "overall_timeout_ms" => self.limits.overall_timeout.as_millis(),
                    _ => self.limits.response_timeout.as_millis(),
                }
            ),
        );
        if budget.is_zero() {
            return Fetched {
                answer: Err(timed_out),
                retrieved_at: None,
                sent: false,
            };
        }
        let bounds = Bounds {
            timeout: budget,
            max_bytes: usize::try_from(self.limits.max_response_bytes).unwrap_or(usize::MAX),
        };
        let got = upstream::get(self.gateway, endpoint, url, bounds, |status| {
            status == reqwest::StatusCode::OK
        })
        .await;
        let sent = !matches!(got, Err(GetError::Build));
        let answer = got
            .map_err(|error| self.read_error(error, timed_out))
            .and_then(|got| self.interpret(endpoint, got));
        let retrieved_at = answer.is_ok().then(timestamp::now);
        Fetched {
            answer,
            retrieved_at,
            sent,
        }
    }

    /// Any status but 200 is a failed read. Since June 2026 CDP answers an empty `resources`
    /// list for a payTo with nothing listed; its former "Merchant not found" 404 is gone
    /// from its API, so a 404 now means a provider (or base URL) without this endpoint.
    fn interpret(&self, endpoint: Upstream, got: Got) -> Result<Value, ReadError> {
        match got {
            Got::Refused(refusal) if refusal.status == reqwest::StatusCode::NOT_FOUND => {
                Err(ReadError::new(
                    "provider_endpoint_missing",
                    format!(
                        "the provider does not serve the {} endpoint (HTTP 404)",
                        endpoint.endpoint()
                    ),
                ))
            }
            Got::Refused(refusal) if refusal.status == reqwest::StatusCode::TOO_MANY_REQUESTS => {
                Err(ReadError::rate_limited(refusal.retry_after))
            }
            Got::Refused(refusal) => Err(ReadError::new(
                "provider_http_status",
                format!("the provider answered HTTP {}", refusal.status.as_u16()),
            )),
            Got::Body(body) => {
                bounded_json::parse(&body, &self.limits.json).map_err(|refusal| match refusal {
                    JsonRefusal::LimitExceeded { .. } => {
                        ReadError::new("json_limit_exceeded", refusal.to_string())
                    }
                    JsonRefusal::Invalid(_) => ReadError::new("invalid_json", refusal.to_string()),
                })
            }
        }
    }

    /// A failed GET in words, without the URL; `timed_out` names the budget that ran out.
    fn read_error(&self, error: GetError, timed_out: ReadError) -> ReadError {
        match error {
            GetError::Deadline => timed_out,
            GetError::Build => {
                ReadError::new("request_not_built", "the request could not be built")
            }
            GetError::Timeout => {
                ReadError::new("provider_timeout", "the provider did not answer in time")
            }
            GetError::Connect => ReadError::new(
                "provider_unreachable",
                "the connection to the provider failed",
            ),
            GetError::Failed => ReadError::new(
                "provider_request_failed",
                "the request or its answer failed",
            ),
            GetError::TooLarge(_) => ReadError::new(
                "response_too_large",
                format!(
                    "the answer exceeds max_response_bytes {}",
                    self.limits.max_response_bytes
                ),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> Url {
        Url::parse(text).expect("url")
    }

    #[test]
    fn provider_paths_keep_the_base_path_and_drop_credentials() {
        let provider = Provider::new(&url(
            "https://user:pw@api.example.net/platform/v2/x402/?k=v",
        ))
        .expect("provider");
        assert_eq!(provider.origin, "https://api.example.net");
        assert_eq!(provider.prefix, "/platform/v2/x402/discovery");
        let search = provider
            .endpoint(
                "search",
                &[("query", "a b&c".into()), ("limit", "20".into())],
            )
            .expect("endpoint");
        assert_eq!(
            provider.path("search"),
            "/platform/v2/x402/discovery/search"
        );
        assert_eq!(
            search.as_str(),
            "https://api.example.net/platform/v2/x402/discovery/search?query=a+b%26c&limit=20"
        );
    }
}
