//! The Lido API's stETH APR: `GET {lido_api_url}/v1/protocol/steth/apr/sma`, answered as
//! `{data: {aprs: [{timeUnix, apr}], smaApr}, meta}`. Values are percent; `smaApr` is the
//! simple moving average over the last 7 days. Nothing here is read on chain.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::net::gateway::{Gateway, Upstream};

/// The metrics label of the Lido API's stETH APR endpoint.
const UPSTREAM: Upstream = Upstream::new("lido", "steth_apr_sma");
use crate::net::upstream::{self, Bounds, UpstreamError};

pub(crate) const SMA_PATH: [&str; 5] = ["v1", "protocol", "steth", "apr", "sma"];

/// One read of the SMA endpoint, as the API stated it (percent values as the `f64` the JSON
/// number parses to; the caller states them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SmaObservation {
    /// `data.smaApr`, percent.
    pub sma_apr_percent: f64,
    /// The newest entry of `data.aprs` (largest `timeUnix`), percent, if the API gave one.
    pub latest_apr_percent: Option<f64>,
    pub latest_time_unix: Option<u64>,
    pub retrieved_at: String,
}

pub(crate) async fn read_sma(
    gateway: &Gateway,
    base: &url::Url,
    bounds: Bounds,
) -> Result<SmaObservation, UpstreamError> {
    let url = upstream::join(base, &SMA_PATH).ok_or_else(|| {
        UpstreamError::Shape("the configured Lido API URL cannot take a path".into())
    })?;
    let document = upstream::get_json(gateway, UPSTREAM, url, bounds).await?;
    parse(&document)
}

fn number(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    }
    .filter(|v| v.is_finite())
}

fn parse(document: &Value) -> Result<SmaObservation, UpstreamError> {
    let data = document
        .get("data")
        .ok_or_else(|| UpstreamError::Shape("no data object".into()))?;
    let sma = data
        .get("smaApr")
        .and_then(number)
        .ok_or_else(|| UpstreamError::Shape("data.smaApr is not a number".into()))?;
    let latest = data
        .get("aprs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|entry| Some((entry.get("timeUnix")?.as_u64()?, number(entry.get("apr")?)?)))
        .max_by_key(|(time, _)| *time);
    Ok(SmaObservation {
        sma_apr_percent: sma,
        latest_apr_percent: latest.map(|(_, apr)| apr),
        latest_time_unix: latest.map(|(time, _)| time),
        retrieved_at: crate::support::timestamp::now_millis(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_documented_shape_is_read() {
        let document = json!({
            "data": {"aprs": [{"timeUnix": 1714000000, "apr": 3.1}, {"timeUnix": 1714086400, "apr": 2.95}],
                     "smaApr": 3.0125},
            "meta": {"symbol": "stETH", "address": "0xae7ab96520DE3A18E5e111B5EaAb095312D7fE84", "chainId": 1}
        });
        let observation = parse(&document).expect("parsed");
        assert_eq!(observation.sma_apr_percent, 3.0125);
        assert_eq!(observation.latest_apr_percent, Some(2.95));
        assert_eq!(observation.latest_time_unix, Some(1714086400));
        assert!(parse(&json!({"data": {"smaApr": "x"}})).is_err());
        assert!(parse(&json!({"aprs": []})).is_err());
    }
}
