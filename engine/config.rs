//! Configuration: embedded defaults, then an optional `factomat.toml`, then `FACTOMAT_*`
//! environment variables. Every value is checked at start-up; a bad one stops the service
//! with a message naming the key and where it came from.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use crate::support::evm;

/// The default listen address: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8402";
/// The default ledger: a SQLite file in the working directory.
pub const DEFAULT_DATABASE_URL: &str = "sqlite:factomat.db";
/// The default file of the captured VM04 sample (`factomat sample capture`).
pub const DEFAULT_SAMPLE_PATH: &str = "factomat-sample.json";
/// The file read when no `--config` is given and it exists.
pub const DEFAULT_CONFIG_FILE: &str = "factomat.toml";

/// Every configuration key: (toml key, environment variable, secret?, description).
/// The README's configuration table is checked against this list by a test.
pub const KEYS: &[(&str, &str, bool, &str)] = &[
    (
        "listen",
        "FACTOMAT_LISTEN",
        false,
        "Socket address to listen on.",
    ),
    (
        "admin_listen",
        "FACTOMAT_ADMIN_LISTEN",
        false,
        "Socket address of the admin listener (/metrics, /livez, /readyz), e.g. 127.0.0.1:9402; unset = off.",
    ),
    (
        "base_url",
        "FACTOMAT_BASE_URL",
        false,
        "Public base URL written into every absolute URL we publish.",
    ),
    (
        "pay_to",
        "FACTOMAT_PAY_TO",
        false,
        "EVM address that receives payments; unset = paid calls answer 503 service_disabled.",
    ),
    ("log_format", "FACTOMAT_LOG_FORMAT", false, "text or json."),
    (
        "log_level",
        "FACTOMAT_LOG_LEVEL",
        false,
        "tracing filter, e.g. info or factomat=debug.",
    ),
    (
        "facilitator_url",
        "FACTOMAT_FACILITATOR_URL",
        false,
        "x402 facilitator base URL (/verify, /settle, /supported).",
    ),
    (
        "facilitator_auth",
        "FACTOMAT_FACILITATOR_AUTH",
        false,
        "none, static (facilitator_authorization) or cdp (a fresh JWT per call from an API key); default none, or static when facilitator_authorization is set.",
    ),
    (
        "facilitator_authorization",
        "FACTOMAT_FACILITATOR_AUTHORIZATION",
        true,
        "Static Authorization header value for the facilitator (facilitator_auth = static).",
    ),
    (
        "facilitator_api_key_id",
        "FACTOMAT_FACILITATOR_API_KEY_ID",
        false,
        "CDP API key id (facilitator_auth = cdp), e.g. organizations/<uuid>/apiKeys/<uuid>.",
    ),
    (
        "facilitator_api_key_secret",
        "FACTOMAT_FACILITATOR_API_KEY_SECRET",
        true,
        "CDP API key secret: PEM EC P-256 key (ES256) or base64 64-byte Ed25519 key (EdDSA).",
    ),
    (
        "facilitator_api_key_secret_file",
        "FACTOMAT_FACILITATOR_API_KEY_SECRET_FILE",
        false,
        "File holding the CDP API key secret (instead of facilitator_api_key_secret).",
    ),
    (
        "facilitator_verify_timeout_ms",
        "FACTOMAT_FACILITATOR_VERIFY_TIMEOUT_MS",
        false,
        "Response timeout of /verify and /supported in ms (default 10000).",
    ),
    (
        "facilitator_settle_timeout_ms",
        "FACTOMAT_FACILITATOR_SETTLE_TIMEOUT_MS",
        false,
        "Response timeout of /settle in ms; settle waits for the chain (default 60000).",
    ),
    (
        "settlement_wait_ms",
        "FACTOMAT_SETTLEMENT_WAIT_MS",
        false,
        "How long a settlement whose outcome is unknown is followed on chain before the buyer gets 503 settlement_pending, in ms (default 20000).",
    ),
    (
        "unpaid_strike_seconds",
        "FACTOMAT_UNPAID_STRIKE_SECONDS",
        false,
        "A payer whose verified payment ended unpaid (nonce burned or cancelled, balance gone) is refused before /verify for this long (default 3600; 0 = off).",
    ),
    (
        "reconcile_interval_seconds",
        "FACTOMAT_RECONCILE_INTERVAL_SECONDS",
        false,
        "How long after one reconcile pass the next starts, in seconds: the service asks the chain about payments whose outcome is unknown (settle_pending; reserved a day after validBefore, its buyer's resend deciding it first) and records what it proves, as `ledger reconcile` does (default 60; 0 = only by hand).",
    ),
    (
        "delivery_retention_seconds",
        "FACTOMAT_DELIVERY_RETENTION_SECONDS",
        false,
        "How long a paid answer bought with a payment-identifier id stays collectable again with the same payment, in seconds (default 600; 0 = no delivered answer is retained; one never delivered still is, for a day: docs/payment.md).",
    ),
    (
        "delivery_collect_without_id_seconds",
        "FACTOMAT_DELIVERY_COLLECT_WITHOUT_ID_SECONDS",
        false,
        "How long after its settlement a paid answer bought without a payment-identifier id stays collectable again, in seconds (default 60).",
    ),
    (
        "delivery_in_flight_wait_ms",
        "FACTOMAT_DELIVERY_IN_FLIGHT_WAIT_MS",
        false,
        "How long a resend of a payment still being processed (on any replica) waits for its answer before it gets 503 payment_in_progress, in ms (default 15000).",
    ),
    (
        "delivery_key_file",
        "FACTOMAT_DELIVERY_KEY_FILE",
        false,
        "File with the 32-byte secret (64 hex characters) that seals retained answers, shared by every replica; with SQLite and none set, <ledger file>.delivery-key is generated; with PostgreSQL it is required (a result held while its settlement is pending is sealed with it whatever the retention).",
    ),
    (
        "rpc_max_log_blocks",
        "FACTOMAT_RPC_MAX_LOG_BLOCKS",
        false,
        "Most blocks one eth_getLogs may span on the payment chain's RPC (default 1000; Alchemy free 10, QuickNode free 5).",
    ),
    (
        "header_read_timeout_ms",
        "FACTOMAT_HEADER_READ_TIMEOUT_MS",
        false,
        "Deadline for a request's whole head (line and headers) in ms; the first one counts from connect (default 10000).",
    ),
    (
        "body_read_timeout_ms",
        "FACTOMAT_BODY_READ_TIMEOUT_MS",
        false,
        "Deadline for a paid POST's whole body in ms; a late body gets 408 and nothing is charged (default 10000).",
    ),
    (
        "idle_timeout_ms",
        "FACTOMAT_IDLE_TIMEOUT_MS",
        false,
        "A keep-alive connection with no request for this long is closed, in ms (default 60000).",
    ),
    (
        "response_write_timeout_ms",
        "FACTOMAT_RESPONSE_WRITE_TIMEOUT_MS",
        false,
        "A response the client stops reading is cut after this long, in ms (default 30000).",
    ),
    (
        "max_connections",
        "FACTOMAT_MAX_CONNECTIONS",
        false,
        "Open client connections at most; new ones beyond it are shed (default: from the file-descriptor limit).",
    ),
    (
        "database_url",
        "FACTOMAT_DATABASE_URL",
        true,
        "Settlement ledger: sqlite:PATH (one process) or postgres://USER:PASSWORD@HOST/DB (any number of replicas); may hold a password.",
    ),
    (
        "database_pool_size",
        "FACTOMAT_DATABASE_POOL_SIZE",
        false,
        "PostgreSQL connections per replica at most (default 16).",
    ),
    (
        "database_connect_timeout_ms",
        "FACTOMAT_DATABASE_CONNECT_TIMEOUT_MS",
        false,
        "PostgreSQL connect (and pool wait) timeout in ms (default 5000); a statement gets twice this.",
    ),
    (
        "shutdown_drain_timeout_ms",
        "FACTOMAT_SHUTDOWN_DRAIN_TIMEOUT_MS",
        false,
        "On SIGTERM/SIGINT, how long in-flight paid calls may take to finish in ms (default 70000: the payment's maxTimeoutSeconds 60 plus a 10 s margin).",
    ),
    (
        "sample_path",
        "FACTOMAT_SAMPLE_PATH",
        false,
        "File where `factomat sample capture` stores the captured VM04 answer that /samples/productive-venue-snapshot serves (default factomat-sample.json); without it the sample is an illustrative example.",
    ),
    (
        "evidence_signing_key_file",
        "FACTOMAT_EVIDENCE_SIGNING_KEY_FILE",
        false,
        "Ed25519 PKCS#8 PEM key file(s), comma-separated: the first signs offers, receipts and seals, all are published in /.well-known/did.json; unset = signing off.",
    ),
    (
        "evidence_retired_public_keys",
        "FACTOMAT_EVIDENCE_RETIRED_PUBLIC_KEYS",
        false,
        "Public keys (JWK x, base64url), comma-separated, of retired signing keys still published so their old signatures verify.",
    ),
    (
        "rpc_url_eip155_8453",
        "FACTOMAT_RPC_URL_EIP155_8453",
        true,
        "JSON-RPC URL for Base (may hold a key).",
    ),
    (
        "rpc_url_eip155_1",
        "FACTOMAT_RPC_URL_EIP155_1",
        true,
        "JSON-RPC URL for Ethereum (may hold a key).",
    ),
    (
        "rpc_urls_eip155_8453",
        "FACTOMAT_RPC_URLS_EIP155_8453",
        true,
        "More JSON-RPC URLs for Base, tried in order after rpc_url_eip155_8453 (TOML array; comma-separated in the environment; may hold keys).",
    ),
    (
        "rpc_urls_eip155_1",
        "FACTOMAT_RPC_URLS_EIP155_1",
        true,
        "More JSON-RPC URLs for Ethereum, tried in order after rpc_url_eip155_1 (TOML array; comma-separated in the environment; may hold keys).",
    ),
    (
        "inventory_url_eip155_1",
        "FACTOMAT_INVENTORY_URL_EIP155_1",
        true,
        "Inventory provider (alchemy_getTokenBalances) for eip155:1; may hold a key.",
    ),
    (
        "inventory_url_eip155_8453",
        "FACTOMAT_INVENTORY_URL_EIP155_8453",
        true,
        "Inventory provider (alchemy_getTokenBalances) for eip155:8453; may hold a key.",
    ),
    (
        "dexscreener_url",
        "FACTOMAT_DEXSCREENER_URL",
        false,
        "DexScreener-compatible pricing API base URL.",
    ),
    (
        "lido_api_url",
        "FACTOMAT_LIDO_API_URL",
        false,
        "Lido API base URL (stETH APR).",
    ),
    (
        "unpaid_empty_body",
        "FACTOMAT_UNPAID_EMPTY_BODY",
        false,
        "reject (default): an unpaid POST with no body or {} gets 400, a GET of a paid path 405; challenge: they get the machine's 402, which the CDP Bazaar's crawler needs to list it.",
    ),
    (
        "ownership_proofs",
        "FACTOMAT_OWNERSHIP_PROOFS",
        false,
        "EIP-191 (personal_sign) signatures by pay_to of base_url's origin (`factomat discovery ownership-message`), published for x402scan; a TOML array or comma-separated; each is checked at start-up.",
    ),
    (
        "discovery_url",
        "FACTOMAT_DISCOVERY_URL",
        false,
        "x402 discovery provider base URL (/discovery/merchant, /discovery/search).",
    ),
    (
        "unsafe_test_connect_to",
        "FACTOMAT_UNSAFE_TEST_CONNECT_TO",
        false,
        "TESTS ONLY: host=127.0.0.1:PORT,... connects a page host to a loopback socket; turns system DNS off.",
    ),
    (
        "unsafe_test_ca",
        "FACTOMAT_UNSAFE_TEST_CA",
        false,
        "TESTS ONLY: PEM file of an extra CA the page fetcher trusts.",
    ),
    (
        "unsafe_test_dns",
        "FACTOMAT_UNSAFE_TEST_DNS",
        false,
        "TESTS ONLY: host=IP,... fixed DNS answers (still vetted as public); turns system DNS off.",
    ),
];

/// The default drain: a paid call ends by its authorization's deadline, at most the
/// payment's `maxTimeoutSeconds` (60, machines.yaml) after it arrives, so the drain is that
/// plus a 10 s margin for the ledger record. A start-up warning names a shorter drain; a
/// unit test of the server holds this figure to the manifest's.
pub const DEFAULT_SHUTDOWN_DRAIN_TIMEOUT_MS: u64 = 70_000;

/// The margin of the drain over `maxTimeoutSeconds`.
pub const DRAIN_MARGIN_MS: u64 = 10_000;

/// Keys whose value is a list: a TOML array, or comma-separated text.
const LIST_KEYS: [&str; 2] = ["rpc_urls_eip155_8453", "rpc_urls_eip155_1"];

/// A value that must never be printed: Debug and Display show only that it is set.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The secret itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// A secret of a test's own making.
    #[cfg(test)]
    pub(crate) fn for_tests(value: &str) -> Secret {
        Secret(value.to_string())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// How requests to the facilitator are authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FacilitatorAuth {
    /// No Authorization header (a self-hosted facilitator).
    None,
    /// The same Authorization header value on every request.
    Static(Secret),
    /// A fresh CDP JWT per request, minted from this API key.
    Cdp {
        /// The API key's id (`organizations/…/apiKeys/…` or a UUID).
        key_id: String,
        /// The API key's private key.
        key_secret: Secret,
    },
}

/// What an unpaid probe of a paid path gets: a POST with no body or `{}`, or a GET/HEAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnpaidEmptyBody {
    /// SPEC §7: an empty body is a 400 and a GET of a paid path a 405.
    #[default]
    Reject,
    /// The machine's 402 challenge, as the CDP Bazaar's crawler and validator expect.
    Challenge,
}

impl UnpaidEmptyBody {
    /// The configuration value that selects the mode.
    pub fn as_str(self) -> &'static str {
        match self {
            UnpaidEmptyBody::Reject => "reject",
            UnpaidEmptyBody::Challenge => "challenge",
        }
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The checked configuration the service runs with.
#[derive(Debug, Clone)]
pub struct Config {
    /// The address the server listens on.
    pub listen: SocketAddr,
    /// The admin listener (metrics and probes), off when None. Never the public port.
    pub admin_listen: Option<SocketAddr>,
    /// No trailing slash; paths are appended to it. None = `http://<bound address>`.
    pub base_url: Option<String>,
    /// Checksummed (EIP-55) payee, or None when payments are disabled.
    pub pay_to: Option<String>,
    /// Log line format.
    pub log_format: LogFormat,
    /// The tracing filter (e.g. `info`).
    pub log_level: String,
    /// The x402 facilitator; none disables paid calls.
    pub facilitator_url: Option<url::Url>,
    /// How requests to the facilitator are authenticated.
    pub facilitator_auth: FacilitatorAuth,
    /// Budget of one `/verify` call.
    pub facilitator_verify_timeout_ms: u64,
    /// Budget of one `/settle` call.
    pub facilitator_settle_timeout_ms: u64,
    /// How long an unknown settlement outcome is followed on chain, in ms.
    pub settlement_wait_ms: u64,
    /// How long a payer whose verified payment ended unpaid is refused, in seconds.
    pub unpaid_strike_seconds: u64,
    /// How often undecided payments are reconciled with the chain, in seconds (0 = off).
    pub reconcile_interval_seconds: u64,
    /// Most blocks one `eth_getLogs` may span on the payment chain's RPC.
    pub rpc_max_log_blocks: u64,
    /// How long an answer bought with a payment-identifier id is retained, in seconds (0 =
    /// retention off).
    pub delivery_retention_seconds: u64,
    /// How long an answer bought without an id may be collected again, in seconds.
    pub delivery_collect_without_id_seconds: u64,
    /// How long a resend of a payment still being processed waits for its answer, in ms.
    pub delivery_in_flight_wait_ms: u64,
    /// The file of the secret that seals retained answers.
    pub delivery_key_file: Option<PathBuf>,
    /// Connection deadlines and the connection cap (see `ConnectionLimits`).
    pub connections: ConnectionLimits,
    /// `sqlite:PATH` or `postgres://…`; may hold a password: log it only redacted (the
    /// ledger's `redacted`).
    pub database_url: Secret,
    /// PostgreSQL connections per replica at most.
    pub database_pool_size: usize,
    /// PostgreSQL connect and pool-wait timeout; a statement gets twice this.
    pub database_connect_timeout_ms: u64,
    /// How long in-flight paid calls may take to finish after SIGTERM/SIGINT.
    pub shutdown_drain_timeout_ms: u64,
    /// Where the captured VM04 sample is stored and read from.
    pub sample_path: PathBuf,
    /// The evidence signing key files; the first signs, all are published. Empty = off.
    pub evidence_signing_key_files: Vec<PathBuf>,
    /// Public keys (JWK `x`) of retired signing keys, still published in the DID document.
    pub evidence_retired_public_keys: Vec<String>,
    /// The Base JSON-RPC endpoint (may carry a key).
    pub rpc_url_eip155_8453: Option<Secret>,
    /// The Ethereum JSON-RPC endpoint (may carry a key).
    pub rpc_url_eip155_1: Option<Secret>,
    /// More Base JSON-RPC endpoints, after `rpc_url_eip155_8453` in failover order.
    pub rpc_urls_eip155_8453: Vec<Secret>,
    /// More Ethereum JSON-RPC endpoints, after `rpc_url_eip155_1` in failover order.
    pub rpc_urls_eip155_1: Vec<Secret>,
    /// The Ethereum token inventory provider (may carry a key).
    pub inventory_url_eip155_1: Option<Secret>,
    /// The Base token inventory provider (may carry a key).
    pub inventory_url_eip155_8453: Option<Secret>,
    /// The DEX pricing API.
    pub dexscreener_url: Option<url::Url>,
    /// The Lido API.
    pub lido_api_url: Option<url::Url>,
    /// The x402 discovery provider.
    pub discovery_url: Option<url::Url>,
    /// What an unpaid probe with no body, `{}`, or GET/HEAD gets (see [`UnpaidEmptyBody`]).
    pub unpaid_empty_body: UnpaidEmptyBody,
    /// Signatures by `pay_to` of the base URL's origin, checked at start-up, published in
    /// the OpenAPI document and `/.well-known/x402` for x402scan.
    pub ownership_proofs: Vec<String>,
    /// TESTS ONLY: page hosts connected to a loopback socket instead of resolving them.
    pub unsafe_test_connect_to: Vec<(String, SocketAddr)>,
    /// TESTS ONLY: an extra CA (DER certificates) the page fetcher trusts.
    pub unsafe_test_ca: Option<TestCa>,
    /// TESTS ONLY: fixed DNS answers that replace the system resolver (still vetted).
    pub unsafe_test_dns: Vec<(String, IpAddr)>,
}

/// Deadlines and the cap every client connection lives under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// How long a client may take to send its request head.
    pub header_read_timeout_ms: u64,
    /// How long a client may take to send its body.
    pub body_read_timeout_ms: u64,
    /// How long an idle connection is kept.
    pub idle_timeout_ms: u64,
    /// How long writing a response may take.
    pub response_write_timeout_ms: u64,
    /// Open connections at most.
    pub max_connections: usize,
}

/// File descriptors kept free of client connections: outbound clients (facilitator, RPC,
/// providers, page fetches), the ledger, the listener(s) and the admin port.
pub const FD_HEADROOM: u64 = 256;
/// The default cap never exceeds this, however high the descriptor limit: each idle
/// connection costs about 20 KB, and 16384 of them is already a flood.
pub const MAX_CONNECTIONS_CEILING: u64 = 16_384;

/// The default connection cap for a soft descriptor limit: the limit less a quarter (at
/// least `FD_HEADROOM`) for everything that is not a client, at least 16.
pub fn default_max_connections(fd_limit: u64) -> usize {
    let headroom = (fd_limit / 4).max(FD_HEADROOM);
    let cap = fd_limit
        .saturating_sub(headroom)
        .clamp(16, MAX_CONNECTIONS_CEILING);
    usize::try_from(cap).unwrap_or(16)
}

/// The process's soft open-file limit (Linux `/proc/self/limits`); 1024 when unknown.
pub fn open_file_limit() -> u64 {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|line| line.starts_with("Max open files"))
                .and_then(|line| line.split_whitespace().nth(3))
                .and_then(|soft| soft.parse::<u64>().ok())
        })
        .unwrap_or(1024)
}

/// A test CA read from a PEM file at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestCa {
    /// The PEM file.
    pub path: PathBuf,
    /// Its certificates, DER-encoded.
    pub certificates_der: Vec<Vec<u8>>,
}

impl Config {
    /// The first configured JSON-RPC URL of a CAIP-2 chain.
    pub fn rpc_url(&self, chain: &str) -> Option<&Secret> {
        self.rpc_endpoints(chain)
            .into_iter()
            .next()
            .map(|(_, url)| url)
    }

    /// Every configured JSON-RPC URL of a CAIP-2 chain in failover order, each with the
    /// setting it came from (`rpc_url_eip155_1`, `rpc_urls_eip155_1[1]`): the single-URL
    /// setting first, then the list.
    pub fn rpc_endpoints(&self, chain: &str) -> Vec<(String, &Secret)> {
        let (single, list, key) = match chain {
            "eip155:8453" => (
                &self.rpc_url_eip155_8453,
                &self.rpc_urls_eip155_8453,
                "eip155_8453",
            ),
            "eip155:1" => (&self.rpc_url_eip155_1, &self.rpc_urls_eip155_1, "eip155_1"),
            _ => return Vec::new(),
        };
        let first = single.iter().map(|url| (format!("rpc_url_{key}"), url));
        let more = list
            .iter()
            .enumerate()
            .map(|(i, url)| (format!("rpc_urls_{key}[{}]", i + 1), url));
        first.chain(more).collect()
    }

    /// The configured inventory provider (alchemy_getTokenBalances) of a CAIP-2 chain.
    pub fn inventory_url(&self, chain: &str) -> Option<&Secret> {
        match chain {
            "eip155:8453" => self.inventory_url_eip155_8453.as_ref(),
            "eip155:1" => self.inventory_url_eip155_1.as_ref(),
            _ => None,
        }
    }

    /// Whether any test-only network seam is switched on.
    pub fn unsafe_test_seams_active(&self) -> bool {
        !self.unsafe_test_connect_to.is_empty()
            || self.unsafe_test_ca.is_some()
            || !self.unsafe_test_dns.is_empty()
    }

    /// Logs every active test-only seam loudly; called once at start-up.
    pub fn warn_about_unsafe_test_seams(&self) {
        for (host, socket) in &self.unsafe_test_connect_to {
            tracing::warn!(%host, %socket, "UNSAFE TEST SEAM ACTIVE: FACTOMAT_UNSAFE_TEST_CONNECT_TO sends this page host to a loopback socket; system DNS is off; never use in production");
        }
        if let Some(ca) = &self.unsafe_test_ca {
            tracing::warn!(path = %ca.path.display(), "UNSAFE TEST SEAM ACTIVE: FACTOMAT_UNSAFE_TEST_CA makes the page fetcher trust an extra CA; never use in production");
        }
        for (host, ip) in &self.unsafe_test_dns {
            tracing::warn!(%host, %ip, "UNSAFE TEST SEAM ACTIVE: FACTOMAT_UNSAFE_TEST_DNS answers DNS for this host; system DNS is off; never use in production");
        }
    }
}

/// A configuration value that cannot be used, named with where it came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("configuration: {key} ({source_name}): {message}")]
pub struct ConfigError {
    /// The configuration key.
    pub key: String,
    /// Where the value came from (default, file, environment).
    pub source_name: String,
    /// What is wrong with it.
    pub message: String,
}

/// The raw key/value layer before checking, with where each value came from.
#[derive(Debug, Default, Clone)]
struct RawLayer {
    values: BTreeMap<&'static str, (String, String)>,
}

impl Config {
    /// Configuration from the environment alone (no file), for embedding and tests.
    pub fn from_env(
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let mut raw = RawLayer::default();
        raw.overlay_env(env);
        raw.check()
    }

    /// Loads the configuration. `file` is an explicit `--config` path (it must exist); without
    /// one, `factomat.toml` in the working directory is read when present. `env` is the
    /// process environment (passed in so tests can supply their own).
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let mut raw = RawLayer::default();
        let default_file = PathBuf::from(DEFAULT_CONFIG_FILE);
        let path = match file {
            Some(path) => Some(path.to_path_buf()),
            None if default_file.exists() => Some(default_file),
            None => None,
        };
        if let Some(path) = path {
            raw.read_file(&path)?;
        }
        raw.overlay_env(env);
        raw.check()
    }
}

impl RawLayer {
    fn overlay_env(&mut self, env: impl IntoIterator<Item = (String, String)>) {
        let env: BTreeMap<String, String> = env.into_iter().collect();
        for (key, var, _, _) in KEYS {
            if let Some(value) = env.get(*var) {
                self.values
                    .insert(key, (value.clone(), format!("env {var}")));
            }
        }
        for name in env.keys() {
            let known = KEYS.iter().any(|(_, var, _, _)| var == name);
            if name.starts_with("FACTOMAT_") && !name.starts_with("FACTOMAT_UNSAFE_TEST_") && !known
            {
                tracing::warn!(variable = %name, "unknown FACTOMAT_ environment variable ignored");
            }
        }
    }

    fn read_file(&mut self, path: &Path) -> Result<(), ConfigError> {
        let source_name = path.display().to_string();
        let error = |message: String| ConfigError {
            key: "file".into(),
            source_name: source_name.clone(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| error(e.to_string()))?;
        let table: toml::Table = toml::from_str(&text).map_err(|e| error(e.to_string()))?;
        for (name, value) in table {
            let Some((key, _, _, _)) = KEYS.iter().find(|(k, _, _, _)| *k == name) else {
                return Err(error(format!("unknown key {name:?}")));
            };
            let text = match value {
                toml::Value::String(s) => s,
                // A list key's array, joined as its environment variable would spell it.
                toml::Value::Array(items) if LIST_KEYS.contains(&name.as_str()) => items
                    .iter()
                    .map(|item| item.as_str().map(str::to_string))
                    .collect::<Option<Vec<String>>>()
                    .ok_or_else(|| error(format!("{name}: every item must be a string")))?
                    .join(","),
                toml::Value::Integer(n) => n.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                // A list (ownership_proofs) is read like its comma-separated environment form.
                toml::Value::Array(items) => items
                    .iter()
                    .map(|item| item.as_str().map(str::to_string))
                    .collect::<Option<Vec<String>>>()
                    .ok_or_else(|| error(format!("{name}: every entry must be a string")))?
                    .join(","),
                other => {
                    return Err(error(format!(
                        "{name}: {} is not a string or number",
                        other.type_str()
                    )));
                }
            };
            self.values.insert(key, (text, source_name.clone()));
        }
        Ok(())
    }

    /// The value of `key` and where it came from, ignoring empty strings (unset).
    fn get(&self, key: &'static str) -> Option<(&str, &str)> {
        self.values
            .get(key)
            .filter(|(v, _)| !v.trim().is_empty())
            .map(|(v, s)| (v.trim(), s.as_str()))
    }

    fn error(&self, key: &'static str, message: impl Into<String>) -> ConfigError {
        ConfigError {
            key: key.to_string(),
            source_name: self
                .values
                .get(key)
                .map(|(_, s)| s.clone())
                .unwrap_or_else(|| "default".into()),
            message: message.into(),
        }
    }

    /// A comma-separated list; empty items are dropped.
    fn list(&self, key: &'static str) -> Vec<String> {
        self.get(key)
            .map(|(value, _)| {
                value
                    .split(',')
                    .map(str::trim)
                    .filter(|item| !item.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    }

    fn service_url(&self, key: &'static str) -> Result<Option<url::Url>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some((value, _)) => check_service_url(value)
                .map(Some)
                .map_err(|m| self.error(key, m.to_string())),
        }
    }

    /// A comma-separated list of RPC URLs; values are never echoed (they may hold keys).
    fn secret_list(&self, key: &'static str) -> Result<Vec<Secret>, ConfigError> {
        let Some((value, _)) = self.get(key) else {
            return Ok(Vec::new());
        };
        value
            .split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .enumerate()
            .map(|(i, item)| {
                check_service_url(item).map_err(|_| {
                    self.error(
                        key,
                        format!(
                            "item {} is not an http(s) URL (value withheld: it may hold a key)",
                            i + 1
                        ),
                    )
                })?;
                Ok(Secret(item.to_string()))
            })
            .collect()
    }

    fn millis(&self, key: &'static str, default: u64) -> Result<u64, ConfigError> {
        match self.get(key) {
            None => Ok(default),
            Some((value, _)) => value
                .parse::<u64>()
                .ok()
                .filter(|ms| (1..=600_000).contains(ms))
                .ok_or_else(|| {
                    self.error(
                        key,
                        format!("{value:?} is not a number of milliseconds from 1 to 600000"),
                    )
                }),
        }
    }

    /// A duration in whole seconds, 0 (off) to a week.
    fn seconds(&self, key: &'static str, default: u64) -> Result<u64, ConfigError> {
        match self.get(key) {
            None => Ok(default),
            Some((value, _)) => value
                .parse::<u64>()
                .ok()
                .filter(|s| *s <= 604_800)
                .ok_or_else(|| {
                    self.error(
                        key,
                        format!("{value:?} is not a number of seconds from 0 to 604800"),
                    )
                }),
        }
    }

    fn count(&self, key: &'static str, default: usize) -> Result<usize, ConfigError> {
        match self.get(key) {
            None => Ok(default),
            Some((value, _)) => value
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=1_000_000).contains(n))
                .ok_or_else(|| {
                    self.error(key, format!("{value:?} is not a number from 1 to 1000000"))
                }),
        }
    }

    fn connection_limits(&self) -> Result<ConnectionLimits, ConfigError> {
        Ok(ConnectionLimits {
            header_read_timeout_ms: self.millis("header_read_timeout_ms", 10_000)?,
            body_read_timeout_ms: self.millis("body_read_timeout_ms", 10_000)?,
            idle_timeout_ms: self.millis("idle_timeout_ms", 60_000)?,
            response_write_timeout_ms: self.millis("response_write_timeout_ms", 30_000)?,
            max_connections: self.count(
                "max_connections",
                default_max_connections(open_file_limit()),
            )?,
        })
    }

    /// A `host=VALUE,host=VALUE` list of a test seam. Host names are lowercased.
    fn host_pairs<T>(
        &self,
        key: &'static str,
        parse: fn(&str) -> Result<T, BadValue>,
    ) -> Result<Vec<(String, T)>, ConfigError> {
        let Some((value, _)) = self.get(key) else {
            return Ok(Vec::new());
        };
        let mut pairs = Vec::new();
        for item in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (host, target) = item
                .split_once('=')
                .ok_or_else(|| self.error(key, format!("{item:?} is not host=VALUE")))?;
            let host = host.trim().to_ascii_lowercase();
            if host.is_empty() {
                return Err(self.error(key, format!("{item:?} has no host")));
            }
            let target = parse(target.trim()).map_err(|m| self.error(key, m.to_string()))?;
            pairs.push((host, target));
        }
        Ok(pairs)
    }

    fn test_ca(&self) -> Result<Option<TestCa>, ConfigError> {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let Some((value, _)) = self.get("unsafe_test_ca") else {
            return Ok(None);
        };
        let path = PathBuf::from(value);
        let certificates: Result<Vec<CertificateDer<'static>>, _> =
            CertificateDer::pem_file_iter(&path)
                .map_err(|e| self.error("unsafe_test_ca", format!("{value}: {e}")))?
                .collect();
        let certificates =
            certificates.map_err(|e| self.error("unsafe_test_ca", format!("{value}: {e}")))?;
        if certificates.is_empty() {
            return Err(self.error("unsafe_test_ca", format!("{value}: no certificate")));
        }
        Ok(Some(TestCa {
            path,
            certificates_der: certificates.iter().map(|c| c.to_vec()).collect(),
        }))
    }

    /// The facilitator authentication mode and the values it needs. Secret values are never
    /// quoted in an error.
    fn facilitator_auth(&self) -> Result<FacilitatorAuth, ConfigError> {
        let authorization = self.get("facilitator_authorization");
        let mode = self
            .get("facilitator_auth")
            .map(|(v, _)| v.to_ascii_lowercase());
        let mode = mode.as_deref().unwrap_or(if authorization.is_some() {
            "static"
        } else {
            "none"
        });
        match mode {
            "none" if authorization.is_some() => Err(self.error(
                "facilitator_auth",
                "is none, but facilitator_authorization is set; choose static or unset it",
            )),
            "none" => Ok(FacilitatorAuth::None),
            "static" => authorization
                .map(|(value, _)| FacilitatorAuth::Static(Secret(value.to_string())))
                .ok_or_else(|| {
                    self.error(
                        "facilitator_authorization",
                        "is required when facilitator_auth is static",
                    )
                }),
            "cdp" => self.cdp_key(),
            other => Err(self.error(
                "facilitator_auth",
                format!("{other:?} is not none, static or cdp"),
            )),
        }
    }

    fn cdp_key(&self) -> Result<FacilitatorAuth, ConfigError> {
        let key_id = self
            .get("facilitator_api_key_id")
            .map(|(v, _)| v.to_string())
            .ok_or_else(|| {
                self.error(
                    "facilitator_api_key_id",
                    "is required when facilitator_auth is cdp",
                )
            })?;
        let inline = self.get("facilitator_api_key_secret");
        let file = self.get("facilitator_api_key_secret_file");
        let key_secret = match (inline, file) {
            (Some(_), Some(_)) => {
                return Err(self.error(
                    "facilitator_api_key_secret_file",
                    "set either facilitator_api_key_secret or its _file, not both",
                ));
            }
            (Some((value, _)), None) => value.to_string(),
            (None, Some((path, _))) => std::fs::read_to_string(path)
                .map_err(|e| {
                    self.error(
                        "facilitator_api_key_secret_file",
                        format!("{path}: {}", e.kind()),
                    )
                })?
                .trim()
                .to_string(),
            (None, None) => {
                return Err(self.error(
                    "facilitator_api_key_secret",
                    "(or facilitator_api_key_secret_file) is required when facilitator_auth is cdp",
                ));
            }
        };
        Ok(FacilitatorAuth::Cdp {
            key_id,
            key_secret: Secret(key_secret),
        })
    }

    /// The configured ownership proofs, each a personal_sign signature by `pay_to` of the
    /// base URL's origin; any other stops start-up naming the key.
    fn ownership_proofs(
        &self,
        base_url: Option<&str>,
        pay_to: Option<&str>,
    ) -> Result<Vec<String>, ConfigError> {
        const KEY: &str = "ownership_proofs";
        let Some((value, _)) = self.get(KEY) else {
            return Ok(Vec::new());
        };
        let (Some(base_url), Some(pay_to)) = (base_url, pay_to) else {
            return Err(self.error(
                KEY,
                "needs base_url and pay_to: a proof is pay_to's signature of base_url's origin",
            ));
        };
        let message = ownership_message(base_url)
            .ok_or_else(|| self.error(KEY, "base_url has no origin to sign"))?;
        let payee = evm::parse_address(pay_to).map_err(|e| self.error("pay_to", e.to_string()))?;
        let mut proofs = Vec::new();
        for proof in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let signer = evm::personal_sign_signer(proof, &message)
                .map_err(|e| self.error(KEY, format!("{proof:?} {e}")))?;
            if signer != payee {
                return Err(self.error(
                    KEY,
                    format!("{proof:?} is not pay_to's signature of {message:?} (it recovers to {signer}); sign the output of `factomat discovery ownership-message` with the pay_to key"),
                ));
            }
            proofs.push(proof.to_string());
        }
        Ok(proofs)
    }

    fn listen(&self) -> Result<SocketAddr, ConfigError> {
        let listen_text = self.get("listen").map(|(v, _)| v).unwrap_or(DEFAULT_LISTEN);
        listen_text.parse().map_err(|_| {
            self.error(
                "listen",
                format!("{listen_text:?} is not a socket address such as 127.0.0.1:8402"),
            )
        })
    }

    /// The admin address, never the public one.
    fn admin_listen(&self, listen: SocketAddr) -> Result<Option<SocketAddr>, ConfigError> {
        let Some((value, _)) = self.get("admin_listen") else {
            return Ok(None);
        };
        let admin: SocketAddr = value.parse().map_err(|_| {
            self.error(
                "admin_listen",
                format!("{value:?} is not a socket address such as 127.0.0.1:9402"),
            )
        })?;
        if admin == listen && admin.port() != 0 {
            return Err(self.error(
                "admin_listen",
                "must differ from listen: the admin endpoints are never public",
            ));
        }
        Ok(Some(admin))
    }

    fn base_url(&self) -> Result<Option<String>, ConfigError> {
        self.get("base_url")
            .map(|(value, _)| {
                check_base_url(value).map_err(|m| self.error("base_url", m.to_string()))
            })
            .transpose()
    }

    /// The payee, checksummed; never the zero address.
    fn pay_to(&self) -> Result<Option<String>, ConfigError> {
        let Some((value, _)) = self.get("pay_to") else {
            return Ok(None);
        };
        let address = evm::parse_address(value)
            .map_err(|e| self.error("pay_to", format!("{value:?}: {e}")))?;
        if address.is_zero() {
            return Err(self.error("pay_to", "the zero address cannot receive payments"));
        }
        Ok(Some(address.to_checksum(None)))
    }

    fn log_format(&self) -> Result<LogFormat, ConfigError> {
        match self.get("log_format").map(|(v, _)| v) {
            None | Some("text") => Ok(LogFormat::Text),
            Some("json") => Ok(LogFormat::Json),
            Some(other) => Err(self.error("log_format", format!("{other:?} is not text or json"))),
        }
    }

    fn unpaid_empty_body(&self) -> Result<UnpaidEmptyBody, ConfigError> {
        match self.get("unpaid_empty_body").map(|(v, _)| v) {
            None | Some("reject") => Ok(UnpaidEmptyBody::Reject),
            Some("challenge") => Ok(UnpaidEmptyBody::Challenge),
            Some(other) => Err(self.error(
                "unpaid_empty_body",
                format!("{other:?} is not reject or challenge"),
            )),
        }
    }

    /// The ledger's URL; its value is never echoed (it may hold a password).
    fn database_url(&self) -> Result<Secret, ConfigError> {
        let database_url = self
            .get("database_url")
            .map(|(v, _)| v)
            .unwrap_or(DEFAULT_DATABASE_URL);
        if !database_url.starts_with("sqlite:")
            && !database_url.starts_with("postgres://")
            && !database_url.starts_with("postgresql://")
        {
            return Err(self.error(
                "database_url",
                "is neither sqlite:PATH nor postgres://… (value withheld: it may hold a password)",
            ));
        }
        Ok(Secret(database_url.to_string()))
    }

    fn database_pool_size(&self) -> Result<usize, ConfigError> {
        let Some((value, _)) = self.get("database_pool_size") else {
            return Ok(16);
        };
        value
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=1000).contains(n))
            .ok_or_else(|| {
                self.error(
                    "database_pool_size",
                    format!("{value:?} is not a number from 1 to 1000"),
                )
            })
    }

    /// A secret value; an RPC or inventory URL must be an http(s) URL, and is never echoed
    /// (it may carry a provider key).
    fn secret(&self, key: &'static str) -> Result<Option<Secret>, ConfigError> {
        let Some((value, _)) = self.get(key) else {
            return Ok(None);
        };
        if key.starts_with("rpc_url") || key.starts_with("inventory_url") {
            check_service_url(value).map_err(|_| {
                self.error(
                    key,
                    "is not an http(s) URL (value withheld: it may hold a key)",
                )
            })?;
        }
        Ok(Some(Secret(value.to_string())))
    }

    fn check(self) -> Result<Config, ConfigError> {
        let listen = self.listen()?;
        let base_url = self.base_url()?;
        let pay_to = self.pay_to()?;
        let ownership_proofs = self.ownership_proofs(base_url.as_deref(), pay_to.as_deref())?;
        Ok(Config {
            listen,
            admin_listen: self.admin_listen(listen)?,
            base_url,
            pay_to,
            log_format: self.log_format()?,
            log_level: self
                .get("log_level")
                .map(|(v, _)| v)
                .unwrap_or("info")
                .to_string(),
            facilitator_url: self.service_url("facilitator_url")?,
            facilitator_auth: self.facilitator_auth()?,
            facilitator_verify_timeout_ms: self.millis("facilitator_verify_timeout_ms", 10_000)?,
            facilitator_settle_timeout_ms: self.millis("facilitator_settle_timeout_ms", 60_000)?,
            settlement_wait_ms: self.millis("settlement_wait_ms", 20_000)?,
            unpaid_strike_seconds: self.seconds("unpaid_strike_seconds", 3_600)?,
            reconcile_interval_seconds: self.seconds("reconcile_interval_seconds", 60)?,
            rpc_max_log_blocks: self.count("rpc_max_log_blocks", 1_000)? as u64,
            connections: self.connection_limits()?,
            sample_path: PathBuf::from(
                self.get("sample_path")
                    .map(|(v, _)| v)
                    .unwrap_or(DEFAULT_SAMPLE_PATH),
            ),
            database_url: self.database_url()?,
            database_pool_size: self.database_pool_size()?,
            database_connect_timeout_ms: self.millis("database_connect_timeout_ms", 5_000)?,
            shutdown_drain_timeout_ms: self.millis(
                "shutdown_drain_timeout_ms",
                DEFAULT_SHUTDOWN_DRAIN_TIMEOUT_MS,
            )?,
            evidence_signing_key_files: self
                .list("evidence_signing_key_file")
                .into_iter()
                .map(PathBuf::from)
                .collect(),
            evidence_retired_public_keys: self.list("evidence_retired_public_keys"),
            delivery_retention_seconds: self.seconds("delivery_retention_seconds", 600)?,
            delivery_collect_without_id_seconds: self
                .seconds("delivery_collect_without_id_seconds", 60)?,
            delivery_in_flight_wait_ms: self.millis("delivery_in_flight_wait_ms", 15_000)?,
            delivery_key_file: self
                .get("delivery_key_file")
                .map(|(path, _)| PathBuf::from(path)),
            rpc_url_eip155_8453: self.secret("rpc_url_eip155_8453")?,
            rpc_url_eip155_1: self.secret("rpc_url_eip155_1")?,
            rpc_urls_eip155_8453: self.secret_list("rpc_urls_eip155_8453")?,
            rpc_urls_eip155_1: self.secret_list("rpc_urls_eip155_1")?,
            inventory_url_eip155_1: self.secret("inventory_url_eip155_1")?,
            inventory_url_eip155_8453: self.secret("inventory_url_eip155_8453")?,
            dexscreener_url: self.service_url("dexscreener_url")?,
            lido_api_url: self.service_url("lido_api_url")?,
            discovery_url: self.service_url("discovery_url")?,
            unpaid_empty_body: self.unpaid_empty_body()?,
            ownership_proofs,
            unsafe_test_connect_to: self
                .host_pairs("unsafe_test_connect_to", parse_loopback_socket)?,
            unsafe_test_ca: self.test_ca()?,
            unsafe_test_dns: self.host_pairs("unsafe_test_dns", parse_ip)?,
        })
    }
}

/// The message an ownership proof signs: the base URL's origin (scheme, host and a
/// non-default port), as x402scan checks it. None for a URL without one.
pub fn ownership_message(base_url: &str) -> Option<String> {
    let origin = url::Url::parse(base_url).ok()?.origin();
    origin.is_tuple().then(|| origin.ascii_serialization())
}

/// Why a configured value is unusable; the caller names the key.
#[derive(Debug, thiserror::Error)]
enum BadValue {
    #[error("{value:?}: {source}")]
    Unparsable {
        value: String,
        source: url::ParseError,
    },
    #[error("{0}")]
    NotAUrl(url::ParseError),
    #[error("{0:?} must be an http(s) URL with a host")]
    NotHttpWithHost(String),
    #[error("must be an http(s) URL with a host")]
    ServiceNotHttpWithHost,
    #[error("{0:?} must not carry credentials")]
    Credentials(String),
    #[error("{0:?} must not have a query or fragment")]
    QueryOrFragment(String),
    #[error("{0:?} is not a socket address such as 127.0.0.1:8443")]
    NotASocket(String),
    #[error("{0:?} is not a loopback address")]
    NotLoopback(String),
    #[error("{0:?} is not an IP address")]
    NotAnIp(String),
}

/// A base URL: http(s), a host, no userinfo, query or fragment; trailing slash removed.
fn check_base_url(value: &str) -> Result<String, BadValue> {
    let url = url::Url::parse(value).map_err(|source| BadValue::Unparsable {
        value: value.to_string(),
        source,
    })?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(BadValue::NotHttpWithHost(value.to_string()));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(BadValue::Credentials(value.to_string()));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(BadValue::QueryOrFragment(value.to_string()));
    }
    Ok(url.as_str().trim_end_matches('/').to_string())
}

/// The connect-to seam may only point at loopback: it exists for tests on this machine.
fn parse_loopback_socket(value: &str) -> Result<SocketAddr, BadValue> {
    let socket: SocketAddr = value
        .parse()
        .map_err(|_| BadValue::NotASocket(value.to_string()))?;
    if !socket.ip().is_loopback() {
        return Err(BadValue::NotLoopback(value.to_string()));
    }
    Ok(socket)
}

fn parse_ip(value: &str) -> Result<IpAddr, BadValue> {
    value
        .parse()
        .map_err(|_| BadValue::NotAnIp(value.to_string()))
}

fn check_service_url(value: &str) -> Result<url::Url, BadValue> {
    let url = url::Url::parse(value).map_err(BadValue::NotAUrl)?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(BadValue::ServiceNotHttpWithHost);
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// anvil key #2 (pay_to below) signed "https://factomat.test.example" with personal_sign.
    const OWNERSHIP_PROOF: &str = "0x031bb39fee54ccb995245009faea93dbeee3d4ef15a2a6c017eee5c1e031dcb902135927f17f5065247badd89c6b2b708e03cf9052ec3d530ffde8fdc5da88931b";

    #[test]
    fn ownership_proofs_must_be_pay_tos_signature_of_the_origin() {
        let pay_to = (
            "FACTOMAT_PAY_TO",
            "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
        );
        let proofs = ("FACTOMAT_OWNERSHIP_PROOFS", OWNERSHIP_PROOF);
        let base = ("FACTOMAT_BASE_URL", "https://factomat.test.example/");
        let config = Config::from_env(env(&[pay_to, proofs, base])).expect("a good proof");
        assert_eq!(config.ownership_proofs, vec![OWNERSHIP_PROOF.to_string()]);
        let other_origin = ("FACTOMAT_BASE_URL", "https://other.example");
        let err = Config::from_env(env(&[pay_to, proofs, other_origin])).unwrap_err();
        assert_eq!(err.key, "ownership_proofs");
        let other_key = (
            "FACTOMAT_PAY_TO",
            "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
        );
        let err = Config::from_env(env(&[other_key, proofs, base])).unwrap_err();
        assert!(err.message.contains("ownership-message"), "{err}");
        let err = Config::from_env(env(&[proofs, base])).unwrap_err();
        assert_eq!(err.key, "ownership_proofs");
        assert_eq!(
            ownership_message("https://api.example.com:443/v1/"),
            Some("https://api.example.com".into())
        );
    }

    #[test]
    fn defaults_listen_on_loopback() {
        let config = Config::load(None, env(&[])).expect("defaults are valid");
        assert_eq!(config.listen.to_string(), DEFAULT_LISTEN);
        assert_eq!(config.base_url, None);
        assert_eq!(config.pay_to, None);
        assert_eq!(config.unpaid_empty_body, UnpaidEmptyBody::Reject);
        assert_eq!(config.database_url.expose(), DEFAULT_DATABASE_URL);
    }

    #[test]
    fn environment_overrides_and_checksums_pay_to() {
        let config = Config::load(
            None,
            env(&[
                ("FACTOMAT_BASE_URL", "https://api.example.com/"),
                (
                    "FACTOMAT_PAY_TO",
                    "0x833589fcd6edb6e08f4c7c32d4f71b54bda02913",
                ),
                ("FACTOMAT_LOG_FORMAT", "json"),
            ]),
        )
        .expect("valid");
        assert_eq!(config.base_url.as_deref(), Some("https://api.example.com"));
        assert_eq!(
            config.pay_to.as_deref(),
            Some("0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913")
        );
        assert_eq!(config.log_format, LogFormat::Json);
    }

    #[test]
    fn bad_values_name_their_key_and_source() {
        let err = Config::load(None, env(&[("FACTOMAT_LISTEN", "nowhere")])).unwrap_err();
        assert_eq!(
            (err.key.as_str(), err.source_name.as_str()),
            ("listen", "env FACTOMAT_LISTEN")
        );
        let err = Config::load(None, env(&[("FACTOMAT_PAY_TO", "0x12")])).unwrap_err();
        assert_eq!(err.key, "pay_to");
        let err = Config::load(None, env(&[("FACTOMAT_LOG_FORMAT", "xml")])).unwrap_err();
        assert_eq!(err.key, "log_format");
        let err = Config::load(None, env(&[("FACTOMAT_UNPAID_EMPTY_BODY", "allow")])).unwrap_err();
        assert_eq!(err.key, "unpaid_empty_body");
        let err =
            Config::load(None, env(&[("FACTOMAT_BASE_URL", "https://u:p@x.example")])).unwrap_err();
        assert_eq!(err.key, "base_url");
    }

    #[test]
    fn evidence_keys_are_comma_separated_lists() {
        let config = Config::load(
            None,
            env(&[
                ("FACTOMAT_EVIDENCE_SIGNING_KEY_FILE", " new.pem, old.pem ,"),
                ("FACTOMAT_EVIDENCE_RETIRED_PUBLIC_KEYS", "abc"),
            ]),
        )
        .expect("valid");
        assert_eq!(
            config.evidence_signing_key_files,
            [PathBuf::from("new.pem"), PathBuf::from("old.pem")]
        );
        assert_eq!(config.evidence_retired_public_keys, ["abc"]);
        let off = Config::load(None, env(&[])).expect("valid");
        assert!(off.evidence_signing_key_files.is_empty());
    }

    #[test]
    fn rpc_url_errors_never_echo_the_value() {
        let err = Config::load(
            None,
            env(&[("FACTOMAT_RPC_URL_EIP155_8453", "not-a-url-secretkey123")]),
        )
        .unwrap_err();
        assert!(!err.to_string().contains("secretkey123"), "{err}");
        let config = Config::load(
            None,
            env(&[(
                "FACTOMAT_RPC_URL_EIP155_8453",
                "https://rpc.example/v2/secretkey123",
            )]),
        )
        .expect("valid");
        assert!(!format!("{config:?}").contains("secretkey123"));
    }

    #[test]
    fn several_rpc_urls_come_after_the_single_one_in_order() {
        let config = Config::from_env(env(&[
            ("FACTOMAT_RPC_URL_EIP155_8453", "https://a.example/k1"),
            (
                "FACTOMAT_RPC_URLS_EIP155_8453",
                "https://b.example/k2, https://c.example/k3",
            ),
        ]))
        .expect("valid");
        let settings: Vec<(String, &str)> = config
            .rpc_endpoints("eip155:8453")
            .into_iter()
            .map(|(setting, url)| (setting, url.expose()))
            .collect();
        assert_eq!(
            settings,
            [
                ("rpc_url_eip155_8453".to_string(), "https://a.example/k1"),
                (
                    "rpc_urls_eip155_8453[1]".to_string(),
                    "https://b.example/k2"
                ),
                (
                    "rpc_urls_eip155_8453[2]".to_string(),
                    "https://c.example/k3"
                ),
            ]
        );
        let dir = std::env::temp_dir().join(format!("factomat-config-list-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("list.toml");
        std::fs::write(
            &file,
            "rpc_urls_eip155_1 = [\"https://d.example/k4\", \"https://e.example/k5\"]\n",
        )
        .expect("write");
        let config = Config::load(Some(&file), env(&[])).expect("a TOML array");
        assert_eq!(config.rpc_endpoints("eip155:1").len(), 2);
        assert_eq!(
            config.rpc_url("eip155:1").map(Secret::expose),
            Some("https://d.example/k4")
        );
        let err = Config::from_env(env(&[(
            "FACTOMAT_RPC_URLS_EIP155_1",
            "https://ok.example,not-a-url-secretkey9",
        )]))
        .unwrap_err();
        assert!(err.to_string().contains("item 2"), "{err}");
        assert!(!err.to_string().contains("secretkey9"), "{err}");
    }

    #[test]
    fn every_key_is_read_from_the_file_and_from_the_environment() {
        let dir = std::env::temp_dir().join(format!("factomat-config-all-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let ca = dir.join("ca.pem");
        let ca_pem = rcgen::generate_simple_self_signed(vec!["ca.example.com".to_string()])
            .expect("certificate")
            .cert
            .pem();
        std::fs::write(&ca, ca_pem).expect("write");
        let ca_path = ca.display().to_string();
        let values = |key: &str| match key {
            "unsafe_test_connect_to" => "news.example.com=127.0.0.1:8443",
            "unsafe_test_ca" => ca_path.as_str(),
            "unsafe_test_dns" => "rebind.example.com=127.0.0.1",
            "listen" => "127.0.0.1:9001",
            "admin_listen" => "127.0.0.1:9002",
            "facilitator_auth" => "static",
            "base_url" => "https://factomat.test.example",
            "pay_to" => "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
            "log_format" => "json",
            "log_level" => "debug",
            "database_url" => "postgres://factomat:pw@127.0.0.1:5432/ledger",
            "database_pool_size" => "7",
            "max_connections" => "77",
            "unpaid_strike_seconds" => "600",
            "reconcile_interval_seconds" => "45",
            "delivery_retention_seconds" => "900",
            "delivery_collect_without_id_seconds" => "30",
            "rpc_max_log_blocks" => "10",
            "unpaid_empty_body" => "challenge",
            "ownership_proofs" => OWNERSHIP_PROOF,
            k if k.ends_with("_ms") => "1234",
            k if k.contains("_url") => "https://x.example/",
            _ => "token",
        };
        let toml: String = KEYS
            .iter()
            .map(|(k, _, _, _)| format!("{k} = \"{}\"\n", values(k)))
            .collect();
        let file = dir.join("all.toml");
        std::fs::write(&file, toml).expect("write");
        let from_file =
            Config::load(Some(&file), env(&[])).expect("every key is accepted in the file");
        let env_pairs: Vec<(&str, &str)> = KEYS
            .iter()
            .map(|(k, var, _, _)| (*var, values(k)))
            .collect();
        let from_env =
            Config::from_env(env(&env_pairs)).expect("every key is accepted from the environment");
        for config in [from_file, from_env] {
            assert_eq!(config.listen.port(), 9001);
            assert_eq!(config.admin_listen.map(|a| a.port()), Some(9002));
            assert_eq!(config.facilitator_verify_timeout_ms, 1234);
            assert_eq!(config.facilitator_settle_timeout_ms, 1234);
            let limits = config.connections;
            assert_eq!(
                (
                    limits.header_read_timeout_ms,
                    limits.body_read_timeout_ms,
                    limits.idle_timeout_ms,
                    limits.response_write_timeout_ms,
                    limits.max_connections
                ),
                (1234, 1234, 1234, 1234, 77)
            );
            assert!(
                matches!(config.facilitator_auth, FacilitatorAuth::Static(_))
                    && config.rpc_url_eip155_1.is_some()
            );
            assert_eq!(config.log_level, "debug");
            assert_eq!(config.database_pool_size, 7);
            assert_eq!(config.database_connect_timeout_ms, 1234);
            assert_eq!(config.shutdown_drain_timeout_ms, 1234);
            assert_eq!(
                (
                    config.settlement_wait_ms,
                    config.unpaid_strike_seconds,
                    config.reconcile_interval_seconds,
                    config.rpc_max_log_blocks
                ),
                (1234, 600, 45, 10)
            );
            assert!(
                !format!("{config:?}").contains(":pw@"),
                "the database password never shows in Debug"
            );
            assert_eq!(config.unpaid_empty_body, UnpaidEmptyBody::Challenge);
            assert_eq!(
                (
                    config.delivery_retention_seconds,
                    config.delivery_collect_without_id_seconds,
                    config.delivery_key_file.as_deref()
                ),
                (900, 30, Some(std::path::Path::new("token")))
            );
            assert_eq!(config.ownership_proofs, vec![OWNERSHIP_PROOF.to_string()]);
            assert_eq!(config.unsafe_test_connect_to.len(), 1);
            assert_eq!(config.unsafe_test_dns.len(), 1);
            assert!(config.unsafe_test_ca.is_some() && config.unsafe_test_seams_active());
        }
    }

    #[test]
    fn connection_limits_default_safely_and_leave_descriptors_free() {
        let limits = Config::from_env(env(&[])).expect("defaults").connections;
        assert_eq!(limits.header_read_timeout_ms, 10_000);
        assert_eq!(limits.body_read_timeout_ms, 10_000);
        assert_eq!(limits.idle_timeout_ms, 60_000);
        assert_eq!(limits.response_write_timeout_ms, 30_000);
        assert_eq!(
            limits.max_connections,
            default_max_connections(open_file_limit())
        );
        assert!((limits.max_connections as u64) < open_file_limit());
        assert_eq!(default_max_connections(1024), 768);
        assert_eq!(default_max_connections(20_000), 15_000);
        assert_eq!(default_max_connections(1 << 20), 16_384);
        assert_eq!(default_max_connections(100), 16);
        let err = Config::from_env(env(&[("FACTOMAT_MAX_CONNECTIONS", "0")])).unwrap_err();
        assert_eq!(err.key, "max_connections");
        let err = Config::from_env(env(&[("FACTOMAT_IDLE_TIMEOUT_MS", "soon")])).unwrap_err();
        assert_eq!(err.key, "idle_timeout_ms");
    }

    #[test]
    fn test_seams_are_off_by_default_and_connect_to_only_reaches_loopback() {
        let config = Config::load(None, env(&[])).expect("defaults");
        assert!(!config.unsafe_test_seams_active());
        let err = Config::from_env(env(&[(
            "FACTOMAT_UNSAFE_TEST_CONNECT_TO",
            "news.example.com=10.0.0.1:443",
        )]))
        .unwrap_err();
        assert_eq!(err.key, "unsafe_test_connect_to");
        let err =
            Config::from_env(env(&[("FACTOMAT_UNSAFE_TEST_DNS", "a.example.com")])).unwrap_err();
        assert_eq!(err.key, "unsafe_test_dns");
        let err = Config::from_env(env(&[("FACTOMAT_UNSAFE_TEST_CA", "/nonexistent/ca.pem")]))
            .unwrap_err();
        assert_eq!(err.key, "unsafe_test_ca");
        let config = Config::from_env(env(&[(
            "FACTOMAT_UNSAFE_TEST_CONNECT_TO",
            "News.Example.com=127.0.0.1:8443, docs.example.com=[::1]:9443",
        )]))
        .expect("valid");
        assert_eq!(config.unsafe_test_connect_to[0].0, "news.example.com");
        assert_eq!(config.unsafe_test_connect_to[1].1.port(), 9443);
    }

    #[test]
    fn file_values_are_read_and_unknown_keys_fail() {
        let dir = std::env::temp_dir().join(format!("factomat-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let good = dir.join("good.toml");
        std::fs::write(
            &good,
            "listen = \"127.0.0.1:9999\"\nlog_format = \"json\"\n",
        )
        .expect("write");
        let config =
            Config::load(Some(&good), env(&[("FACTOMAT_LOG_FORMAT", "text")])).expect("valid");
        assert_eq!(config.listen.port(), 9999);
        assert_eq!(
            config.log_format,
            LogFormat::Text,
            "environment wins over the file"
        );
        let bad = dir.join("bad.toml");
        std::fs::write(&bad, "lissten = \"x\"\n").expect("write");
        let err = Config::load(Some(&bad), env(&[])).unwrap_err();
        assert!(err.message.contains("lissten"), "{err}");
    }
}
