//! The responses every route shares: the JSON error body, the CORS headers, the 405 and the
//! preflight, and each paid route's unpaid 402, prepared at start-up.

use std::sync::LazyLock;

use bytes::Bytes;
use http::header::{
    ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_EXPOSE_HEADERS, ALLOW, CACHE_CONTROL, CONTENT_TYPE,
    RETRY_AFTER,
};
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};

use crate::catalog::challenge::{self, Challenge};
use crate::http::error::ApiError;
use crate::http::request_id;

/// The media type of every JSON body.
pub(crate) const JSON: &str = "application/json";
/// `Retry-After` of a 503 of ours (ledger, facilitator, readiness): seconds.
const RETRY_UNAVAILABLE: &str = "5";
/// Per-request answers (a challenge, a pending settlement) are never cached.
pub(crate) const NO_STORE: HeaderValue = HeaderValue::from_static("no-store");
/// Headers a browser buyer may read: the x402 ones and a paid answer's evidence.
const CORS_EXPOSE: &str =
    "PAYMENT-REQUIRED, PAYMENT-RESPONSE, Evidence-Seal, Content-Digest, X-Request-Id";
/// The request headers a browser may send: the official fetch client's paid retry carries
/// `Access-Control-Expose-Headers` (naming PAYMENT-RESPONSE) besides the payment, and a
/// preflight that does not allow it blocks the paid call.
const CORS_ALLOW_HEADERS: &str =
    "Content-Type, PAYMENT-SIGNATURE, X-Request-Id, Access-Control-Expose-Headers";

/// A response with its status, content type and the CORS headers every answer carries.
pub(crate) fn base_response(
    status: StatusCode,
    content_type: &'static str,
    body: Bytes,
) -> Response<Bytes> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    *response.headers_mut() = match content_type {
        JSON => JSON_HEADERS.clone(),
        other => base_headers(HeaderValue::from_static(other)),
    };
    response
}

/// The headers every JSON answer starts with, built once: each answer clones them, which
/// costs less than inserting them one by one (see [`PreparedChallenge`] for the room and the
/// `x-request-id` placeholder).
static JSON_HEADERS: LazyLock<HeaderMap> = LazyLock::new(|| {
    let mut headers = HeaderMap::with_capacity(PREPARED_HEADER_ROOM);
    request_id::hold_slot(&mut headers);
    headers.extend(base_headers(const { HeaderValue::from_static(JSON) }));
    headers
});

/// A content type and the CORS headers every answer carries.
fn base_headers(content_type: HeaderValue) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, content_type);
    headers.insert(
        ACCESS_CONTROL_ALLOW_ORIGIN,
        const { HeaderValue::from_static("*") },
    );
    headers.insert(
        ACCESS_CONTROL_EXPOSE_HEADERS,
        const { HeaderValue::from_static(CORS_EXPOSE) },
    );
    headers
}

/// A 402 carrying `challenge` in its header and body.
pub(crate) fn payment_required(challenge: &Challenge) -> Response<Bytes> {
    let mut response = base_response(StatusCode::PAYMENT_REQUIRED, JSON, challenge.body.clone());
    let headers = response.headers_mut();
    headers.insert(
        const { HeaderName::from_static(challenge::PAYMENT_REQUIRED) },
        challenge.header.clone(),
    );
    // A challenge (and a refusal's fresh one) is per request: never cached.
    headers.insert(CACHE_CONTROL, NO_STORE);
    response
}

/// Headers a prepared 402's map holds before it would grow: its five and the request's own.
const PREPARED_HEADER_ROOM: usize = 12;

/// A paid route's unpaid 402, built once: each request clones its header map rather than
/// inserting five headers into an empty one (≈ 1.2k instructions of a 402's ≈ 30k).
///
/// A clone keeps the map's table but not its spare entries, so the map is made with room in
/// its table and holds an empty `x-request-id` that the request's id replaces in place:
/// adding that header to a clone grew both (≈ 0.6k of rehashing and copying).
pub(crate) struct PreparedChallenge {
    headers: HeaderMap,
    body: Bytes,
}

impl PreparedChallenge {
    /// The 402 of `challenge`, as [`payment_required`] builds it.
    pub(crate) fn new(challenge: &Challenge) -> PreparedChallenge {
        let (parts, body) = payment_required(challenge).into_parts();
        let mut headers = HeaderMap::with_capacity(PREPARED_HEADER_ROOM);
        request_id::hold_slot(&mut headers);
        headers.extend(parts.headers);
        PreparedChallenge { headers, body }
    }

    /// A fresh copy of the 402 (the body's bytes are shared), for a request whose id then
    /// replaces the placeholder.
    pub(crate) fn response(&self) -> Response<Bytes> {
        let mut response = Response::new(self.body.clone());
        *response.status_mut() = StatusCode::PAYMENT_REQUIRED;
        *response.headers_mut() = self.headers.clone();
        response
    }
}

/// The JSON error body of `error`, with `Retry-After` on a 503.
pub(crate) fn error_response(error: &ApiError) -> Response<Bytes> {
    let mut response = base_response(error.status, JSON, Bytes::from(error.body()));
    if error.status == StatusCode::SERVICE_UNAVAILABLE {
        response.headers_mut().insert(
            RETRY_AFTER,
            const { HeaderValue::from_static(RETRY_UNAVAILABLE) },
        );
    }
    response
}

/// 405 naming the methods the resource allows.
pub(crate) fn method_not_allowed(allow: &'static str) -> Response<Bytes> {
    let mut response = error_response(&ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("this resource allows {allow}"),
    ));
    response
        .headers_mut()
        .insert(ALLOW, HeaderValue::from_static(allow));
    response
}

/// The CORS preflight's 204 for a resource allowing `allow`.
pub(crate) fn preflight(allow: &'static str) -> Response<Bytes> {
    let mut response = base_response(StatusCode::NO_CONTENT, JSON, Bytes::new());
    let headers = response.headers_mut();
    headers.remove(CONTENT_TYPE);
    headers.insert(ALLOW, HeaderValue::from_static(allow));
    headers.insert(
        HeaderName::from_static("access-control-allow-methods"),
        HeaderValue::from_static(allow),
    );
    headers.insert(
        HeaderName::from_static("access-control-allow-headers"),
        HeaderValue::from_static(CORS_ALLOW_HEADERS),
    );
    headers.insert(
        HeaderName::from_static("access-control-max-age"),
        HeaderValue::from_static("600"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prepared_402_is_the_402_built_per_request() {
        let challenge = Challenge {
            header: HeaderValue::from_static("eyJ4NDAyVmVyc2lvbiI6Mn0"),
            body: Bytes::from_static(b"{\"x402Version\":2}"),
            offers_in_header: false,
        };
        let mut built = payment_required(&challenge);
        let mut prepared = PreparedChallenge::new(&challenge).response();
        let id = HeaderValue::from_static("req-1");
        for response in [&mut built, &mut prepared] {
            request_id::write(response.headers_mut(), id.clone());
        }
        assert_eq!(
            prepared
                .headers()
                .get_all(request_id::HEADER)
                .iter()
                .count(),
            1
        );
        assert_eq!(prepared.status(), built.status());
        assert_eq!(prepared.headers(), built.headers());
        assert!(prepared.headers().capacity() > prepared.headers().len());
        assert_eq!(prepared.body(), built.body());
    }
}
