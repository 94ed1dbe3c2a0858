//! The `factomat` command: run the service, or refresh the committed renders.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use factomat::catalog::embedded::RENDERS;
use factomat::config::{Config, LogFormat};
use factomat::evidence;
use factomat::http::server;

#[derive(Parser)]
#[command(
    name = "factomat",
    version,
    about = "Pay-per-call factual observations for software agents (x402 v2)"
)]
struct Cli {
    /// Configuration file (default: ./factomat.toml when it exists). FACTOMAT_* variables override it.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP service (the default command).
    Serve,
    /// Write the renders embedded at build time to generated/ and docs/.
    Generate {
        /// Repository root to write into.
        #[arg(long, default_value = ".")]
        out_dir: PathBuf,
        /// Only report files that differ; exit 1 when any does.
        #[arg(long)]
        check: bool,
    },
    /// Read a local HTML file (or - for stdin) with VM01's extractor and print the VM01 JSON.
    /// Nothing is fetched. Several files print one compact JSON document per line.
    Extract {
        /// The HTML file(s), or - for standard input.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// The page's URL: canonical links are made absolute against it.
        #[arg(long)]
        url: Option<String>,
        /// Main-text character limit (default: VM01's max_text_chars; 0 = unlimited).
        #[arg(long)]
        max_text_chars: Option<usize>,
        /// The Content-Type to assume (its charset parameter is used for decoding).
        #[arg(long)]
        content_type: Option<String>,
    },
    /// Settlement ledger tools.
    Ledger {
        #[command(subcommand)]
        command: LedgerCommand,
    },
    /// The free VM04 sample.
    Sample {
        #[command(subcommand)]
        command: SampleCommand,
    },
    /// Getting listed by discovery indexes (the CDP Bazaar, x402scan).
    Discovery {
        #[command(subcommand)]
        command: DiscoveryCommand,
    },
    /// Evidence signing keys.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Signed evidence: offers, receipts and the evidence seal.
    Evidence {
        #[command(subcommand)]
        command: EvidenceCommand,
    },
}

#[derive(Subcommand)]
enum DiscoveryCommand {
    /// Run the preflight of CDP's validator and x402scan against a deployment: each check
    /// with pass/fail and required/advisory. Exit 1 when a required check fails.
    Check {
        /// The deployment's base URL, e.g. https://api.example.com.
        base_url: String,
        /// Print JSON instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Print exactly the message an ownership proof signs (the base URL's origin): sign it
    /// offline with the pay_to key (EIP-191 personal_sign) and set ownership_proofs.
    OwnershipMessage {
        /// The base URL (default: the configured base_url).
        base_url: Option<String>,
    },
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Write a new Ed25519 evidence signing key (PKCS#8 PEM, owner-only 0600) to PATH and
    /// print its public key. An existing file is never overwritten.
    Generate {
        /// Where to write the key.
        path: PathBuf,
    },
    /// Print the public key (JWK x) of a key file, e.g. to retire it through
    /// evidence_retired_public_keys.
    Public {
        /// The key file.
        path: PathBuf,
    },
}

#[derive(Subcommand)]
enum EvidenceCommand {
    /// Verify a saved paid answer: its body and Evidence-Seal, and its receipt, against our
    /// DID document. Prints what was signed; exit 0 when everything given verifies, 1 when
    /// anything does not, 2 when the input is unusable. Reaches out only when --did is a URL.
    Verify {
        /// The DID document: a file, or an http(s) URL to fetch it from.
        #[arg(long)]
        did: String,
        /// A JSON bundle {"body": "<body text as received>", "seal": "<Evidence-Seal>",
        /// "receipt": "<receipt JWS or PAYMENT-RESPONSE>", "content_digest": "<Content-Digest>"}.
        #[arg(long, conflicts_with_all = ["body", "seal", "receipt", "content_digest"])]
        bundle: Option<PathBuf>,
        /// The body file, byte for byte as received.
        #[arg(long, requires = "seal")]
        body: Option<PathBuf>,
        /// The Evidence-Seal header value.
        #[arg(long, requires = "body")]
        seal: Option<String>,
        /// The receipt: a compact JWS, the signed receipt object, or the PAYMENT-RESPONSE
        /// header value carrying it.
        #[arg(long)]
        receipt: Option<String>,
        /// The Content-Digest header value, checked against the body.
        #[arg(long, requires = "body")]
        content_digest: Option<String>,
    },
}

#[derive(Subcommand)]
enum SampleCommand {
    /// Make one real VM04 call against the configured providers and store the answer (with
    /// its capture time and block) at sample_path; the sample endpoint then serves it.
    Capture {
        /// The VM04 request as JSON (default: the manifest's VM04 input example).
        #[arg(long)]
        request: Option<String>,
    },
}

#[derive(Subcommand)]
enum LedgerCommand {
    /// Unique paying wallets per family; paid calls and USDC per machine.
    Report {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Matches rows left `reserved`, `settle_pending` or `settle_failed` against the chain:
    /// a receipt with the payment's Transfer → settled; the nonce spent by another
    /// authorization or cancelled → nonce_burned; unused past validBefore → expired.
    /// Read only on chain; safe on any replica at any time, and twice.
    Reconcile {
        /// Print one JSON entry per examined row.
        #[arg(long)]
        json: bool,
        /// Examine only this row, whatever its state (repeatable); a settled row's
        /// transaction is re-checked against the Transfer rule.
        #[arg(long = "id")]
        ids: Vec<i64>,
    },
}

fn main() -> ExitCode {
    // Before any token is signed or verified: jsonwebtoken fixes its provider at first use.
    factomat::support::jws_keys::install();
    let cli = Cli::parse();
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => serve(cli.config.as_deref()),
        Command::Generate { out_dir, check } => generate(&out_dir, check),
        Command::Ledger {
            command: LedgerCommand::Report { json },
        } => ledger_command(cli.config.as_deref(), |config| ledger_report(config, json)),
        Command::Ledger {
            command: LedgerCommand::Reconcile { json, ids },
        } => ledger_command(cli.config.as_deref(), |config| {
            ledger_reconcile(config, json, ids)
        }),
        Command::Sample {
            command: SampleCommand::Capture { request },
        } => sample_capture(cli.config.as_deref(), request.as_deref()),
        Command::Discovery {
            command: DiscoveryCommand::Check { base_url, json },
        } => discovery_check(&base_url, json),
        Command::Discovery {
            command: DiscoveryCommand::OwnershipMessage { base_url },
        } => ownership_message(cli.config.as_deref(), base_url.as_deref()),
        Command::Keys {
            command: KeysCommand::Generate { path },
        } => keys_generate(&path),
        Command::Keys {
            command: KeysCommand::Public { path },
        } => keys_public(&path),
        Command::Evidence {
            command:
                EvidenceCommand::Verify {
                    did,
                    bundle,
                    body,
                    seal,
                    receipt,
                    content_digest,
                },
        } => {
            let inputs = match bundle {
                Some(path) => read_bundle(&path),
                None => read_evidence_files(body.as_deref(), seal, receipt, content_digest),
            };
            match inputs {
                Ok(inputs) => evidence_verify(&did, &inputs),
                Err(message) => {
                    eprintln!("factomat: evidence verify: {message}");
                    ExitCode::from(2)
                }
            }
        }
        Command::Extract {
            files,
            url,
            max_text_chars,
            content_type,
        } => {
            let options = ExtractArgs {
                url: url.as_deref(),
                max_text_chars,
                content_type: content_type.as_deref(),
                pretty: files.len() == 1,
            };
            files
                .iter()
                .map(|file| extract(file, &options))
                .find(|code| *code != ExitCode::SUCCESS)
                .unwrap_or(ExitCode::SUCCESS)
        }
    }
}

fn serve(config_path: Option<&Path>) -> ExitCode {
    let (config, runtime) = match configured_runtime(config_path) {
        Ok(started) => started,
        Err(code) => return code,
    };
    runtime.block_on(async move {
        // Listened for before the server starts: a SIGTERM between its "listening" line and
        // the wait would otherwise take the default action and end the process undrained.
        let shutdown = shutdown_signal();
        let running = match server::start(config).await {
            Ok(running) => running,
            Err(error) => {
                tracing::error!(%error, "start-up failed");
                eprintln!("factomat: {error}");
                return ExitCode::FAILURE;
            }
        };
        let drain =
            std::time::Duration::from_millis(running.state.config.shutdown_drain_timeout_ms);
        shutdown.await;
        tracing::info!(
            drain_timeout_ms = drain.as_millis() as u64,
            "shutting down: no new connections; draining paid calls"
        );
        if running.drain(drain).await {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    })
}

/// SIGTERM or SIGINT. The handlers are installed when this is called, not when it is first
/// awaited; call it inside the runtime.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let term = signal(SignalKind::terminate());
        let interrupt = signal(SignalKind::interrupt());
        async move {
            match (term, interrupt) {
                (Ok(mut term), Ok(mut interrupt)) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = interrupt.recv() => {}
                    }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn init_logging(config: &Config) {
    let filter = tracing_subscriber::EnvFilter::try_new(&config.log_level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour codes only on a terminal: a file, a pipe or journald gets plain text. A log
    // write that fails (the reader of the pipe went away) is dropped: reporting it on the
    // same stderr would panic and stop the server, paid calls in flight included.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .log_internal_errors(false)
        .with_writer(std::io::stderr);
    match config.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

/// Loads the configuration and runs a ledger command on a runtime of its own.
fn ledger_command<F>(config_path: Option<&Path>, command: impl FnOnce(Config) -> F) -> ExitCode
where
    F: std::future::Future<Output = ExitCode>,
{
    match configured_runtime(config_path) {
        Ok((config, runtime)) => runtime.block_on(command(config)),
        Err(code) => code,
    }
}

/// The configuration (exit 2 when it is unusable), logging started by it, and a runtime
/// (exit 1 when none can be built).
fn configured_runtime(
    config_path: Option<&Path>,
) -> Result<(Config, tokio::runtime::Runtime), ExitCode> {
    let config = Config::load(config_path, std::env::vars()).map_err(|error| {
        eprintln!("factomat: {error}");
        ExitCode::from(2)
    })?;
    init_logging(&config);
    let runtime = tokio::runtime::Runtime::new().map_err(|error| {
        eprintln!("factomat: cannot start the async runtime: {error}");
        ExitCode::FAILURE
    })?;
    Ok((config, runtime))
}

fn open_ledger(config: &Config) -> Result<factomat::pay::ledger::Ledger, ExitCode> {
    let url = config.database_url.expose();
    factomat::pay::ledger::open(url, factomat::pay::ledger::PoolOptions::from_config(config))
        .map_err(|error| {
            eprintln!(
                "factomat: ledger {}: {error}",
                factomat::pay::ledger::redacted(url)
            );
            ExitCode::FAILURE
        })
}

async fn ledger_report(config: Config, json: bool) -> ExitCode {
    let ledger = match open_ledger(&config) {
        Ok(ledger) => ledger,
        Err(code) => return code,
    };
    let rows = match ledger.rows().await {
        Ok(rows) => rows,
        Err(error) => {
            eprintln!("factomat: ledger: {error}");
            return ExitCode::FAILURE;
        }
    };
    let report = factomat::pay::report::build(&factomat::catalog::embedded::MANIFEST, &rows);
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    } else {
        print!("{}", factomat::pay::report::render_text(&report));
    }
    ExitCode::SUCCESS
}

async fn ledger_reconcile(config: Config, json: bool, ids: Vec<i64>) -> ExitCode {
    let ledger = match open_ledger(&config) {
        Ok(ledger) => ledger,
        Err(code) => return code,
    };
    let gateway = match factomat::net::gateway::Gateway::new() {
        Ok(gateway) => gateway,
        Err(error) => {
            eprintln!("factomat: {error}");
            return ExitCode::FAILURE;
        }
    };
    let timeout = std::time::Duration::from_secs(30);
    let Some(chain) =
        factomat::chain::AuthorizationReader::from_config(gateway.clone(), &config, timeout)
    else {
        eprintln!("factomat: ledger reconcile reads the chain: set rpc_url_eip155_8453");
        return ExitCode::from(2);
    };
    chain.verify_identity(&gateway, timeout).await;
    if !chain.trusted() {
        eprintln!(
            "factomat: no eip155:8453 RPC endpoint answered eth_chainId 8453: nothing is concluded from it"
        );
        return ExitCode::from(2);
    }
    let examined =
        match factomat::pay::reconcile::run(&ledger, &chain, &ids, config.unpaid_strike_seconds)
            .await
        {
            Ok(examined) => examined,
            Err(error) => {
                eprintln!("factomat: ledger: {error}");
                return ExitCode::FAILURE;
            }
        };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&examined).unwrap_or_default()
        );
    } else {
        print!("{}", factomat::pay::reconcile::render_text(&examined));
    }
    ExitCode::SUCCESS
}

struct ExtractArgs<'a> {
    url: Option<&'a str>,
    max_text_chars: Option<usize>,
    content_type: Option<&'a str>,
    pretty: bool,
}

fn extract(file: &Path, args: &ExtractArgs<'_>) -> ExitCode {
    let (url, max_text_chars, content_type) = (args.url, args.max_text_chars, args.content_type);
    let Some(machine) = factomat::catalog::embedded::MANIFEST
        .machines
        .iter()
        .find(|m| m.machine == "VM01")
    else {
        eprintln!("factomat: the manifest has no VM01");
        return ExitCode::FAILURE;
    };
    let bytes = if file.as_os_str() == "-" {
        let mut buffer = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut buffer).map(|_| buffer)
    } else {
        std::fs::read(file)
    };
    let bytes = match bytes {
        Ok(bytes) => bytes,
        Err(error) => {
            eprintln!("factomat: {}: {error}", file.display());
            return ExitCode::FAILURE;
        }
    };
    let page_url = match url.map(url::Url::parse).transpose() {
        Ok(page_url) => page_url,
        Err(error) => {
            eprintln!("factomat: --url: {error}");
            return ExitCode::from(2);
        }
    };
    let limit = match max_text_chars {
        Some(0) => None,
        Some(n) => Some(n),
        None => machine
            .limit("max_text_chars")
            .and_then(|n| usize::try_from(n).ok()),
    };
    let requested = url.map_or_else(|| file.display().to_string(), str::to_string);
    let reading = factomat::web::page::read_local(requested, page_url, &bytes, content_type, limit);
    let body =
        factomat::machines::vm01::response(machine, &reading, &factomat::machines::vm01::now());
    let text = if args.pretty {
        serde_json::to_string_pretty(&body)
    } else {
        serde_json::to_string(&body)
    };
    println!("{}", text.unwrap_or_default());
    ExitCode::SUCCESS
}

fn generate(out_dir: &Path, check: bool) -> ExitCode {
    let mut differing = 0;
    for (path, content) in RENDERS {
        let target = out_dir.join(path);
        if std::fs::read_to_string(&target).ok().as_deref() == Some(*content) {
            continue;
        }
        differing += 1;
        if check {
            println!("differs: {path}");
            continue;
        }
        if let Some(parent) = target.parent()
            && let Err(error) = std::fs::create_dir_all(parent)
        {
            eprintln!("factomat: {}: {error}", parent.display());
            return ExitCode::FAILURE;
        }
        if let Err(error) = std::fs::write(&target, content) {
            eprintln!("factomat: {}: {error}", target.display());
            return ExitCode::FAILURE;
        }
        println!("wrote {path}");
    }
    if check && differing > 0 {
        return ExitCode::FAILURE;
    }
    println!(
        "{} renders, {differing} {}",
        RENDERS.len(),
        if check { "differ" } else { "written" }
    );
    ExitCode::SUCCESS
}

/// `factomat sample capture`: one real VM04 observation, stored for the free sample endpoint.
/// Only a complete or partial observation is stored; a HOLD is not a useful sample.
fn sample_capture(config_path: Option<&Path>, request: Option<&str>) -> ExitCode {
    let (config, runtime) = match configured_runtime(config_path) {
        Ok(started) => started,
        Err(code) => return code,
    };
    match runtime.block_on(capture_vm04(&config, request)) {
        Ok(stored) => {
            println!(
                "stored a captured {} answer at {} (captured_at {}, block {}, status {})",
                stored["machine"].as_str().unwrap_or_default(),
                config.sample_path.display(),
                stored["captured_at"].as_str().unwrap_or_default(),
                stored["block_number"].as_str().unwrap_or("none"),
                stored["response"]["status"].as_str().unwrap_or_default(),
            );
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("factomat: sample capture: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn capture_vm04(config: &Config, request: Option<&str>) -> Result<serde_json::Value, String> {
    use factomat::catalog::{SAMPLE_MACHINE, embedded::MANIFEST, sample};
    use factomat::machines;
    let machine = MANIFEST
        .machine(SAMPLE_MACHINE)
        .ok_or("the manifest has no VM04")?;
    let request: serde_json::Value = match request {
        Some(text) => {
            serde_json::from_str(text).map_err(|e| format!("--request is not JSON: {e}"))?
        }
        None => machine.input_example.clone(),
    };
    let validator =
        factomat::catalog::compile_schema(&machine.input_schema).map_err(|e| e.to_string())?;
    if let Some(error) = validator.iter_errors(&request).next() {
        return Err(format!(
            "the request does not fit the VM04 input schema: {error}"
        ));
    }
    let entry = machines::find(&machine.machine).ok_or("VM04 is not registered")?;
    entry
        .readiness(machine, config)
        .map_err(|e| e.to_string())?;
    let work = entry
        .accept(
            machine,
            &factomat::support::json_doc::Doc::from_value(&request),
        )
        .map_err(|e| e.to_string())?;
    let context = machines::WorkContext {
        gateway: factomat::net::gateway::Gateway::new().map_err(|e| e.to_string())?,
        config: std::sync::Arc::new(config.clone()),
        cache: Default::default(),
    };
    let body = work.observe(&context).await.map_err(|e| e.to_string())?;
    let response: serde_json::Value =
        serde_json::from_slice(&body).map_err(|e| format!("the answer is not JSON: {e}"))?;
    if response["status"] == "HOLD" {
        return Err(format!(
            "the providers answered HOLD ({}), which is not stored as the sample; errors: {}",
            response["classification"], response["errors"]
        ));
    }
    let captured_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let stored = sample::stored_capture(machine, &request, &response, &captured_at);
    sample::check_capture(machine, &stored).map_err(|e| e.to_string())?;
    sample::store(&config.sample_path, &stored).map_err(|e| e.to_string())?;
    Ok(stored)
}

/// `factomat discovery check`: the report on stdout, exit 1 on a failed required check.
fn discovery_check(base_url: &str, json: bool) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("factomat: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let report = match runtime.block_on(factomat::web::discovery_check::run(base_url)) {
        Ok(report) => report,
        Err(error) => {
            eprintln!("factomat: discovery check: {error}");
            return ExitCode::from(2);
        }
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report.to_json()).unwrap_or_default()
        );
    } else {
        print!("{}", report.to_text());
    }
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `factomat discovery ownership-message`: the origin an ownership proof signs, alone on
/// stdout so it can be piped to a signer.
fn ownership_message(config_path: Option<&Path>, base_url: Option<&str>) -> ExitCode {
    let base_url = match base_url {
        Some(base_url) => base_url.to_string(),
        None => match Config::load(config_path, std::env::vars()) {
            Ok(Config {
                base_url: Some(base_url),
                ..
            }) => base_url,
            Ok(_) => {
                eprintln!("factomat: set base_url (or pass BASE_URL): the proof signs its origin");
                return ExitCode::from(2);
            }
            Err(error) => {
                eprintln!("factomat: {error}");
                return ExitCode::from(2);
            }
        },
    };
    match factomat::config::ownership_message(&base_url) {
        Some(message) => {
            print!("{message}");
            ExitCode::SUCCESS
        }
        None => {
            eprintln!("factomat: {base_url:?} has no origin to sign");
            ExitCode::from(2)
        }
    }
}

fn keys_generate(path: &Path) -> ExitCode {
    match evidence::generate_key_file(path) {
        Ok(public) => {
            println!(
                "wrote an Ed25519 evidence signing key to {} (mode 0600)",
                path.display()
            );
            println!("public key (JWK x): {}", public.x());
            println!("verification method fragment: #{}", public.thumbprint());
            println!(
                "use it: FACTOMAT_EVIDENCE_SIGNING_KEY_FILE={}",
                path.display()
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("factomat: keys generate: {error}");
            ExitCode::FAILURE
        }
    }
}

fn keys_public(path: &Path) -> ExitCode {
    match evidence::read_public_key(path) {
        Ok(public) => {
            println!("{}", public.x());
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("factomat: keys public: {error}");
            ExitCode::FAILURE
        }
    }
}

/// What `evidence verify` checks, read from files or a bundle.
struct EvidenceInputs {
    body: Option<Vec<u8>>,
    seal: Option<String>,
    receipt: Option<String>,
    content_digest: Option<String>,
}

fn read_evidence_files(
    body: Option<&Path>,
    seal: Option<String>,
    receipt: Option<String>,
    content_digest: Option<String>,
) -> Result<EvidenceInputs, String> {
    let body = body
        .map(|path| std::fs::read(path).map_err(|e| format!("{}: {e}", path.display())))
        .transpose()?;
    if seal.is_none() && receipt.is_none() {
        return Err("give --seal with --body, --receipt, or --bundle".into());
    }
    Ok(EvidenceInputs {
        body,
        seal,
        receipt,
        content_digest,
    })
}

/// A bundle: {"body": text, "seal": JWS, "receipt": …, "content_digest": …}; the body is
/// the response text exactly as received (JSON bodies are UTF-8 text).
fn read_bundle(path: &Path) -> Result<EvidenceInputs, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let bundle: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", path.display()))?;
    let field = |name: &str| {
        bundle
            .get(name)
            .and_then(|v| v.as_str())
            .map(str::to_string)
    };
    let inputs = EvidenceInputs {
        body: field("body").map(String::into_bytes),
        seal: field("seal"),
        receipt: field("receipt"),
        content_digest: field("content_digest"),
    };
    if inputs.seal.is_some() != inputs.body.is_some() {
        return Err("a bundle's seal needs its body and a body its seal".into());
    }
    if inputs.seal.is_none() && inputs.receipt.is_none() {
        return Err("the bundle has neither a seal nor a receipt".into());
    }
    Ok(inputs)
}

/// The DID document from a file, or fetched when `source` is an http(s) URL (the only case
/// in which `evidence verify` goes on the network). A fetched document must name the did:web
/// its URL resolves, or any host could serve a document claiming another's DID; a file is
/// the user's own choice of document.
fn read_did_document(source: &str) -> Result<evidence::DidDocument, String> {
    let fetched = source.starts_with("https://") || source.starts_with("http://");
    let text = if fetched {
        fetch_did_document(source)?
    } else {
        std::fs::read_to_string(source).map_err(|e| format!("{source}: {e}"))?
    };
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{source}: not JSON: {e}"))?;
    let document = evidence::DidDocument::parse(&value).map_err(|e| format!("{source}: {e}"))?;
    if fetched {
        let Some(expected) = evidence::did_of_document_url(source) else {
            return Err(format!(
                "{source}: no did:web resolves to this URL (…/.well-known/did.json or …/did.json)"
            ));
        };
        if document.id() != expected {
            return Err(format!(
                "{source}: the document names {}, not {expected}, the DID of its own URL",
                document.id()
            ));
        }
    }
    Ok(document)
}

/// A DID document is small; anything larger is not one.
const MAX_DID_DOCUMENT_BYTES: usize = 256 * 1024;

fn fetch_did_document(url: &str) -> Result<String, String> {
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let client = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::limited(3))
            .build()
            .map_err(|e| e.to_string())?;
        let response = client
            .get(url)
            .header("accept", "application/did+json, application/json")
            .send()
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        if !response.status().is_success() {
            return Err(format!("{url}: HTTP {}", response.status()));
        }
        let bytes = response.bytes().await.map_err(|e| format!("{url}: {e}"))?;
        if bytes.len() > MAX_DID_DOCUMENT_BYTES {
            return Err(format!("{url}: larger than a DID document"));
        }
        String::from_utf8(bytes.to_vec()).map_err(|_| format!("{url}: not UTF-8"))
    })
}

fn print_signed(label: &str, verified: &evidence::Verified) {
    println!("{label}: signature verifies with {}", verified.kid);
    let pretty = serde_json::to_string_pretty(&verified.payload).unwrap_or_default();
    for line in pretty.lines() {
        println!("  {line}");
    }
}

/// Checks every artifact given; prints each outcome. Exit 0 only when all verify.
fn evidence_verify(did: &str, inputs: &EvidenceInputs) -> ExitCode {
    let document = match read_did_document(did) {
        Ok(document) => document,
        Err(message) => {
            eprintln!("factomat: evidence verify: {message}");
            return ExitCode::from(2);
        }
    };
    println!("DID document: {}", document.id());
    let mut failed = false;
    let mut seal_claims = None;
    if let (Some(body), Some(seal)) = (&inputs.body, &inputs.seal) {
        match evidence::verify_seal(seal, body, &document) {
            Ok(verified) => {
                print_signed("evidence seal", &verified);
                println!("  body: {} bytes, sha256 as sealed", body.len());
                seal_claims = Some(verified.payload);
            }
            Err(error) => {
                println!("evidence seal: FAILS: {error}");
                failed = true;
            }
        }
    }
    if let (Some(body), Some(digest)) = (&inputs.body, &inputs.content_digest) {
        if evidence::content_digest(body) == digest.trim() {
            println!("Content-Digest: matches the body");
        } else {
            println!(
                "Content-Digest: FAILS: the body's is {}",
                evidence::content_digest(body)
            );
            failed = true;
        }
    }
    if let Some(receipt) = &inputs.receipt {
        match evidence::verify_receipt(receipt, &document) {
            Ok(verified) => {
                print_signed("receipt", &verified);
                if let Some(claims) = &seal_claims {
                    match evidence::receipt_matches_seal(&verified.payload, claims) {
                        Ok(()) => println!(
                            "  agrees with the seal on resourceUrl, payer, network and transaction"
                        ),
                        Err(error) => {
                            println!("  FAILS: {error}");
                            failed = true;
                        }
                    }
                }
            }
            Err(error) => {
                println!("receipt: FAILS: {error}");
                failed = true;
            }
        }
    }
    if failed {
        println!("result: NOT VERIFIED");
        ExitCode::FAILURE
    } else {
        println!("result: VERIFIED");
        ExitCode::SUCCESS
    }
}
