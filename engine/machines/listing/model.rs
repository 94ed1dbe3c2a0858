//! The VM05/VM11 model of a discovery reading: presence in the merchant index, visibility in
//! each query's search window, evidence, status and limitations, interpreted from the
//! provider client's raw reads (engine/providers/discovery.rs). The submitted resource is an
//! identifier only: it is compared with listed URLs and never fetched. Rules:
//! docs/vm05-vm11-discovery.md.

use alloy_primitives::Address;
use serde_json::{Value, json};
use url::Url;

use crate::providers::discovery::{DiscoveryLimits, Fetched, ReadError, Reading};
use crate::support::json_value::strings;
use crate::support::timestamp;

/// The URL equality rule, as stated in every VM05 response's evidence.
pub(crate) const URL_EQUALITY: &str = "https; host lowercased; default port 443; pathname plus query string compared exactly; fragments and userinfo rejected; query parameter order significant.";

/// The request's inputs, re-read after the pre-payment checks accepted them.
#[derive(Debug, Clone)]
pub(crate) struct Inputs {
    pub resource: Url,
    pub pay_to: Address,
    /// Whitespace collapsed, sorted, unique (the pre-payment check rejects duplicates).
    pub queries: Vec<String>,
}

impl Inputs {
    /// The inputs of parsed values.
    pub(crate) fn new(resource: Url, pay_to: Address, queries: Vec<String>) -> Inputs {
        Inputs {
            resource,
            pay_to,
            queries,
        }
    }
}

/// Whether the resource is listed in the merchant index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Presence {
    /// An entry of the merchant page equals the resource under the URL equality rule.
    Found,
    /// The index lists nothing for this payTo (an empty listing, CDP's answer since June 2026).
    NotFound,
    /// The payTo lists resources, the page is complete, and none equals the resource.
    MerchantFoundResourceNotListed,
    /// The read failed, or the resource is not on the first page and more pages exist.
    Unknown,
}

impl Presence {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Presence::Found => "FOUND",
            Presence::NotFound => "NOT_FOUND",
            Presence::MerchantFoundResourceNotListed => "MERCHANT_FOUND_RESOURCE_NOT_LISTED",
            Presence::Unknown => "UNKNOWN",
        }
    }
}

/// Whether the resource appeared in the search window of one query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Visibility {
    InTop20,
    NotInTop20,
    Unknown,
}

impl Visibility {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Visibility::InTop20 => "IN_TOP_20",
            Visibility::NotInTop20 => "NOT_IN_TOP_20",
            Visibility::Unknown => "UNKNOWN",
        }
    }
}

/// The merchant page as read.
#[derive(Debug, Clone)]
pub(crate) struct MerchantRead {
    pub presence: Presence,
    pub limit: u64,
    pub offset: u64,
    pub total: Option<u64>,
    pub returned: u64,
    /// The matched listing in the VM05 `merchant.match` shape.
    pub matched: Option<Value>,
    pub retrieved_at: Option<String>,
    pub path: String,
    pub error: Option<ReadError>,
    pub notes: Vec<String>,
}

/// One query's search window as read.
#[derive(Debug, Clone)]
pub(crate) struct SearchRead {
    pub query: String,
    pub visibility: Visibility,
    pub position: Option<u64>,
    pub returned_count: u64,
    pub search_method: Option<String>,
    pub partial_results: bool,
    pub retrieved_at: Option<String>,
    pub path: String,
    pub error: Option<ReadError>,
    pub notes: Vec<String>,
}

/// Where the answers came from and how many requests were sent.
#[derive(Debug, Clone)]
pub(crate) struct Evidence {
    pub host: String,
    pub origin: String,
    pub path_prefix: String,
    pub merchant_requests: u64,
    pub search_requests: u64,
}

/// One complete or partial reading of the provider.
#[derive(Debug, Clone)]
pub(crate) struct Observation {
    pub merchant: MerchantRead,
    pub searches: Vec<SearchRead>,
    pub evidence: Evidence,
    pub search_limit: u64,
}

impl Observation {
    /// Every fact the machines report was observed: presence and every visibility are known.
    pub(crate) fn complete(&self) -> bool {
        self.merchant.presence != Presence::Unknown
            && self
                .searches
                .iter()
                .all(|s| s.visibility != Visibility::Unknown)
    }

    /// Every read error, labelled with the read it belongs to.
    pub(crate) fn failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(error) = &self.merchant.error {
            out.push(format!("merchant read: {}: {}", error.code, error.message));
        }
        for search in &self.searches {
            if let Some(error) = &search.error {
                out.push(format!(
                    "search {:?}: {}: {}",
                    search.query, error.code, error.message
                ));
            }
        }
        out
    }

    /// The first answer that broke a size or JSON bound, if any.
    pub(crate) fn bound_exceeded(&self) -> Option<&ReadError> {
        std::iter::once(&self.merchant.error)
            .chain(self.searches.iter().map(|s| &s.error))
            .flatten()
            .find(|e| e.bound_exceeded())
    }

    /// Product status: HOLD when the merchant read failed or any answer broke a bound (fail
    /// closed), PARTIAL when some fact is still unknown, OK otherwise.
    pub(crate) fn status(&self) -> &'static str {
        if self.merchant.error.is_some() || self.bound_exceeded().is_some() {
            "HOLD"
        } else if !self.complete() {
            "PARTIAL"
        } else {
            "OK"
        }
    }

    /// Human-readable limitations of this observation.
    pub(crate) fn limitations(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .failures()
            .into_iter()
            .map(|f| format!("Provider read failed ({f}); the affected value is UNKNOWN."))
            .collect();
        out.extend(self.merchant.notes.iter().cloned());
        for search in &self.searches {
            out.extend(search.notes.iter().cloned());
        }
        let window = self.search_limit;
        if self
            .searches
            .iter()
            .any(|s| s.visibility == Visibility::NotInTop20)
        {
            out.push(format!("NOT_IN_TOP_20 means not observed in the first {window} results; it is not a global rank or a removal claim."));
        }
        if self.searches.iter().any(|s| s.partial_results) {
            out.push("partial_results true means the provider reports that more results may exist beyond the returned page.".into());
        }
        if self
            .merchant
            .matched
            .as_ref()
            .is_some_and(|m| !m["quality"].is_null())
        {
            out.push("merchant.match.quality holds values reported by the discovery provider; the service does not verify them.".into());
        }
        out
    }

    /// The VM05 `merchant` object.
    pub(crate) fn merchant_json(&self) -> Value {
        let m = &self.merchant;
        json!({
            "presence": m.presence.as_str(),
            "pagination": {"limit": m.limit, "offset": m.offset, "total": m.total, "returned": m.returned},
            "match": m.matched,
            "retrieved_at": m.retrieved_at,
            "provider": {"host": self.evidence.host, "path": m.path, "method": "GET"},
            "error": m.error.as_ref().map(ReadError::to_json),
        })
    }

    /// The VM05 `searches` array.
    pub(crate) fn searches_json(&self) -> Value {
        self.searches
            .iter()
            .map(|s| {
                json!({
                    "query": s.query,
                    "visibility": s.visibility.as_str(),
                    "position": s.position,
                    "returned_count": s.returned_count,
                    "search_method": s.search_method,
                    "partial_results": s.partial_results,
                    "retrieved_at": s.retrieved_at,
                    "provider": {"host": self.evidence.host, "path": s.path, "method": "GET"},
                    "error": s.error.as_ref().map(ReadError::to_json),
                })
            })
            .collect()
    }

    /// The VM05 `evidence` object.
    pub(crate) fn evidence_json(&self) -> Value {
        let e = &self.evidence;
        json!({
            "provider": e.host,
            "origin": e.origin,
            "path_prefix": e.path_prefix,
            "outbound_requests": e.merchant_requests + e.search_requests,
            "merchant_requests": e.merchant_requests,
            "search_requests": e.search_requests,
            "auth_header_sent": false,
            "submitted_resource_fetched": false,
            "url_equality": URL_EQUALITY,
        })
    }
}

/// Interprets one reading of the provider for the request's inputs.
pub(crate) fn interpret(reading: Reading, inputs: &Inputs) -> Observation {
    let Reading {
        merchant,
        searches,
        host,
        origin,
        path_prefix,
        merchant_path,
        search_path,
        limits,
    } = reading;
    let evidence = Evidence {
        host,
        origin,
        path_prefix,
        merchant_requests: u64::from(merchant.sent),
        search_requests: searches.iter().filter(|f| f.sent).count() as u64,
    };
    let merchant = interpret_merchant(merchant, merchant_path, inputs, &limits);
    let searches = inputs
        .queries
        .iter()
        .zip(searches)
        .map(|(query, fetched)| {
            interpret_search(
                fetched,
                query,
                search_path.clone(),
                &inputs.resource,
                &limits,
            )
        })
        .collect();
    Observation {
        merchant,
        searches,
        evidence,
        search_limit: limits.search_limit,
    }
}

/// The URL equality rule: both https on the default port without userinfo or fragment, the
/// same lowercased host, and the same path and query string, byte for byte (parameter order
/// counts). Both sides are WHATWG-parsed first; an empty query (`?`) equals no query, as in
/// the WHATWG `search` attribute.
pub(crate) fn same_resource(submitted: &Url, listed: &str) -> bool {
    let Ok(listed) = Url::parse(listed) else {
        return false;
    };
    let search = |url: &Url| url.query().unwrap_or_default().to_string();
    listed.scheme() == "https"
        && listed.username().is_empty()
        && listed.password().is_none()
        && listed.fragment().is_none()
        && listed.port_or_known_default() == Some(443)
        && listed.host_str() == submitted.host_str()
        && listed.path() == submitted.path()
        && search(&listed) == search(submitted)
}

fn unexpected(what: &str) -> ReadError {
    ReadError::new("unexpected_answer", format!("the answer {what}"))
}

/// The listed resources of an answer, or why the answer is unusable.
fn resources(answer: &Value) -> Result<&Vec<Value>, ReadError> {
    if !answer.is_object() {
        return Err(unexpected("is not a JSON object"));
    }
    answer
        .get("resources")
        .and_then(Value::as_array)
        .ok_or_else(|| unexpected("has no resources array"))
}

/// The first `window` items and a note when the provider returned more than asked for.
fn window<'a>(items: &'a [Value], window: u64, what: &str, notes: &mut Vec<String>) -> &'a [Value] {
    let size = usize::try_from(window).unwrap_or(usize::MAX);
    if items.len() > size {
        notes.push(format!(
            "The provider returned {} {what} for a limit of {window}; only the first {window} are considered.",
            items.len()
        ));
    }
    &items[..items.len().min(size)]
}

/// The 1-based positions of the items that equal the resource.
fn matches(items: &[Value], resource: &Url) -> Vec<usize> {
    items
        .iter()
        .enumerate()
        .filter(|(_, item)| {
            item.get("resource")
                .and_then(Value::as_str)
                .is_some_and(|listed| same_resource(resource, listed))
        })
        .map(|(i, _)| i + 1)
        .collect()
}

fn interpret_merchant(
    fetched: Fetched,
    path: String,
    inputs: &Inputs,
    limits: &DiscoveryLimits,
) -> MerchantRead {
    let mut read = MerchantRead {
        presence: Presence::Unknown,
        limit: limits.merchant_limit,
        offset: limits.merchant_offset,
        total: None,
        returned: 0,
        matched: None,
        retrieved_at: fetched.retrieved_at,
        path,
        error: None,
        notes: Vec::new(),
    };
    let answer = match fetched.answer {
        Ok(answer) => answer,
        Err(error) => {
            read.error = Some(error);
            return read;
        }
    };
    if let Err(error) = read_merchant_page(&mut read, &answer, inputs, limits) {
        read.presence = Presence::Unknown;
        read.matched = None;
        read.error = Some(error);
    }
    read
}

fn read_merchant_page(
    read: &mut MerchantRead,
    answer: &Value,
    inputs: &Inputs,
    limits: &DiscoveryLimits,
) -> Result<(), ReadError> {
    let items = resources(answer)?;
    if let Some(echo) = answer.get("payTo").and_then(Value::as_str)
        && !echo.eq_ignore_ascii_case(&inputs.pay_to.to_checksum(None))
    {
        return Err(unexpected("is for another payTo"));
    }
    read.total = answer.pointer("/pagination/total").and_then(Value::as_u64);
    let page = window(
        items,
        limits.merchant_limit,
        "merchant listings",
        &mut read.notes,
    );
    read.returned = page.len() as u64;
    let found = matches(page, &inputs.resource);
    if found.len() > 1 {
        read.notes.push(format!(
            "{} merchant listings equal the resource; the first is reported.",
            found.len()
        ));
    }
    let complete_page = match read.total {
        Some(total) => limits.merchant_offset + read.returned >= total,
        None => read.returned < limits.merchant_limit,
    };
    read.presence = if let Some(first) = found.first() {
        read.matched = Some(listing_summary(&page[first - 1]));
        Presence::Found
    } else if read.returned == 0 && complete_page {
        read.notes
            .push("The merchant index lists no resources for this payTo.".into());
        Presence::NotFound
    } else if complete_page {
        Presence::MerchantFoundResourceNotListed
    } else {
        read.notes.push(format!(
            "The resource is not among the first {} merchant listings and more exist (total {}); only offset {} was read, so presence is UNKNOWN.",
            read.returned,
            read.total.map_or("not reported".to_string(), |t| t.to_string()),
            limits.merchant_offset
        ));
        Presence::Unknown
    };
    Ok(())
}

fn interpret_search(
    fetched: Fetched,
    query: &str,
    path: String,
    resource: &Url,
    limits: &DiscoveryLimits,
) -> SearchRead {
    let mut read = SearchRead {
        query: query.to_string(),
        visibility: Visibility::Unknown,
        position: None,
        returned_count: 0,
        search_method: None,
        partial_results: false,
        retrieved_at: fetched.retrieved_at,
        path,
        error: None,
        notes: Vec::new(),
    };
    let answer = match fetched.answer {
        Ok(answer) => answer,
        Err(error) => {
            read.error = Some(error);
            return read;
        }
    };
    let items = match resources(&answer) {
        Ok(items) => items,
        Err(error) => {
            read.error = Some(error);
            return read;
        }
    };
    let what = format!("results for {query:?}");
    let page = window(items, limits.search_limit, &what, &mut read.notes);
    read.returned_count = page.len() as u64;
    read.search_method = answer
        .get("searchMethod")
        .and_then(Value::as_str)
        .map(str::to_string);
    read.partial_results = answer
        .get("partialResults")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    read.position = matches(page, resource).first().map(|p| *p as u64);
    read.visibility = match read.position {
        Some(_) => Visibility::InTop20,
        None => Visibility::NotInTop20,
    };
    read
}

fn text(item: &Value, key: &str) -> Value {
    item.get(key)
        .and_then(Value::as_str)
        .map_or(Value::Null, |s| json!(s))
}

fn integer(item: &Value, key: &str) -> Value {
    item.get(key)
        .and_then(Value::as_i64)
        .map_or(Value::Null, |n| json!(n))
}

/// A string or a number as text (amounts are strings in v2 but numbers in some listings).
fn text_or_number(item: &Value, key: &str) -> Value {
    match item.get(key) {
        Some(Value::String(s)) => json!(s),
        Some(Value::Number(n)) => json!(n.to_string()),
        _ => Value::Null,
    }
}

/// `lastUpdated` is ISO-8601 text at the hosted provider but unix seconds in the x402 spec.
fn last_updated(item: &Value) -> Value {
    match item.get("lastUpdated") {
        Some(Value::String(s)) => json!(s),
        Some(Value::Number(n)) => n
            .as_i64()
            .and_then(|secs| chrono::DateTime::from_timestamp(secs, 0))
            .map_or(Value::Null, |t| json!(timestamp::seconds(t))),
        _ => Value::Null,
    }
}

fn accepts(item: &Value) -> Vec<Value> {
    item.get("accepts")
        .and_then(Value::as_array)
        .map(|entries| {
            entries
                .iter()
                .filter(|e| e.is_object())
                .map(|e| {
                    let amount = match text_or_number(e, "amount") {
                        Value::Null => text_or_number(e, "maxAmountRequired"),
                        amount => amount,
                    };
                    json!({
                        "scheme": text(e, "scheme"),
                        "network": text(e, "network"),
                        "asset": text(e, "asset"),
                        "amount": amount,
                        "pay_to": text(e, "payTo"),
                        "max_timeout_seconds": integer(e, "maxTimeoutSeconds"),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Extension names (sorted) and whether the Bazaar discovery `info`/`schema` are present.
fn extensions_summary(item: &Value) -> Value {
    let extensions = item.get("extensions").and_then(Value::as_object);
    let mut names: Vec<&String> = extensions.map(|e| e.keys().collect()).unwrap_or_default();
    names.sort();
    let bazaar = |part: &str| {
        extensions
            .and_then(|e| e.get("bazaar"))
            .and_then(|b| b.get(part))
            .is_some_and(Value::is_object)
    };
    json!({
        "names": names,
        "discovery_info_present": bazaar("info"),
        "discovery_schema_present": bazaar("schema"),
    })
}

fn quality(item: &Value) -> Value {
    match item.get("quality") {
        Some(q) if q.is_object() => json!({
            "l30_days_total_calls": integer(q, "l30DaysTotalCalls"),
            "l30_days_unique_payers": integer(q, "l30DaysUniquePayers"),
            "last_called_at": text(q, "lastCalledAt"),
        }),
        _ => Value::Null,
    }
}

/// CDP omits `curated` for an entry it has not curated, so absent (or null) is false; a
/// value of another type is not read as either.
fn curated(item: &Value) -> Value {
    match item.get("curated") {
        None | Some(Value::Null) => json!(false),
        Some(Value::Bool(b)) => json!(b),
        Some(_) => Value::Null,
    }
}

/// A listed entry in the VM05 `merchant.match` shape (snake_case, provider values as given).
pub(crate) fn listing_summary(item: &Value) -> Value {
    json!({
        "resource": text(item, "resource"),
        "type": text(item, "type"),
        "x402_version": integer(item, "x402Version"),
        "description": text(item, "description"),
        "last_updated": last_updated(item),
        "accepts": accepts(item),
        "extensions_summary": extensions_summary(item),
        "quality": quality(item),
        "service_name": text(item, "serviceName"),
        "tags": strings(item.get("tags")),
        "icon_url": text(item, "iconUrl"),
        "curated": curated(item),
        "skill_url": text(item, "skillUrl"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> Url {
        Url::parse(text).expect("url")
    }

    #[test]
    fn url_equality_follows_the_stated_rule() {
        let submitted = url("https://API.Example.com:443/v1/weather?city=paris&units=metric");
        let equal = [
            "https://api.example.com/v1/weather?city=paris&units=metric",
            "HTTPS://API.EXAMPLE.COM/v1/weather?city=paris&units=metric",
            "https://api.example.com:443/v1/weather?city=paris&units=metric",
        ];
        for listed in equal {
            assert!(same_resource(&submitted, listed), "{listed}");
        }
        let different = [
            "https://api.example.com/v1/weather?units=metric&city=paris",
            "http://api.example.com/v1/weather?city=paris&units=metric",
            "https://api.example.com:8443/v1/weather?city=paris&units=metric",
            "https://api.example.com/V1/weather?city=paris&units=metric",
            "https://api.example.com/v1/weather/?city=paris&units=metric",
            "https://api.example.com/v1/weather?city=Paris&units=metric",
            "https://api.example.com/v1/weather?city=paris&units=metric#top",
            "https://user@api.example.com/v1/weather?city=paris&units=metric",
            "https://www.api.example.com/v1/weather?city=paris&units=metric",
            "https://api.example.com/v1/weather",
            "not a url",
        ];
        for listed in different {
            assert!(!same_resource(&submitted, listed), "{listed}");
        }
        let bare = url("https://api.example.com/v1/weather");
        assert!(same_resource(&bare, "https://api.example.com/v1/weather?"));
    }

    #[test]
    fn listings_map_to_the_match_shape() {
        let item = json!({
            "resource": "https://a.example.com/x", "type": "http", "x402Version": 1,
            "lastUpdated": 1_700_000_000,
            "accepts": [{"scheme": "exact", "network": "base", "maxAmountRequired": "10", "payTo": "0xab", "maxTimeoutSeconds": 30}, 7],
            "extensions": {"z": {}, "bazaar": {"info": {}, "schema": true}},
            "tags": ["a", 3, "b"], "curated": "yes",
        });
        let summary = listing_summary(&item);
        assert_eq!(summary["last_updated"], "2023-11-14T22:13:20Z");
        assert_eq!(
            summary["accepts"],
            json!([{"scheme": "exact", "network": "base", "asset": null, "amount": "10", "pay_to": "0xab", "max_timeout_seconds": 30}])
        );
        assert_eq!(
            summary["extensions_summary"],
            json!({"names": ["bazaar", "z"], "discovery_info_present": true, "discovery_schema_present": false})
        );
        assert_eq!(summary["tags"], json!(["a", "b"]));
        assert_eq!(summary["curated"], Value::Null, "not a boolean: unread");
        assert_eq!(summary["quality"], Value::Null);
        let omitted = listing_summary(&json!({"resource": "https://a.example.com/x"}));
        assert_eq!(
            omitted["curated"], false,
            "CDP omits curated when it is false"
        );
    }
}
