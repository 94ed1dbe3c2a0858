//! The ceiling: a bare warp server that answers every request with the same fixed bytes
//! factomat sends for its 402 (captured from factomat by the script), with no routing,
//! validation or logging. What it reaches is what any Rust server can reach on this machine.

use std::net::SocketAddr;
use std::path::Path;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use warp::Filter;

use crate::BenchError;

fn read_headers(path: &Path) -> Result<HeaderMap, BenchError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| BenchError::Io(format!("read {}", path.display()), e))?;
    let mut headers = HeaderMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| BenchError::Setup(format!("header line without ':': {line}")))?;
        let name = HeaderName::from_bytes(name.trim().as_bytes())
            .map_err(|e| BenchError::Setup(format!("header name {name}: {e}")))?;
        let value = HeaderValue::from_str(value.trim())
            .map_err(|e| BenchError::Setup(format!("header value of {name}: {e}")))?;
        headers.insert(name, value);
    }
    Ok(headers)
}

pub async fn serve(
    listen: SocketAddr,
    status: u16,
    headers: &Path,
    body: &Path,
) -> Result<(), BenchError> {
    let headers = read_headers(headers)?;
    let body = Bytes::from(
        std::fs::read(body).map_err(|e| BenchError::Io(format!("read {}", body.display()), e))?,
    );
    let status = StatusCode::from_u16(status)
        .map_err(|e| BenchError::Setup(format!("status {status}: {e}")))?;
    let routes = warp::any().map(move || {
        let mut response = Response::new(body.clone());
        *response.status_mut() = status;
        *response.headers_mut() = headers.clone();
        response
    });
    crate::serve_forever(listen, routes).await
}
