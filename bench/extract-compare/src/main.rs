//! Runs each main-text candidate over the corpus: one JSON line per (extractor, page) with the
//! text, and per-extractor throughput on stderr. Scoring is done by scripts/extract_quality.py
//! so every candidate and the service itself are scored by the same code.
//!
//! Usage: extract-compare CORPUS_DIR OUT.jsonl [REPEATS]

mod heuristic;

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

type Extractor = fn(&str) -> String;

fn dom_smoothie_text(html: &str) -> String {
    let Ok(mut readability) = dom_smoothie::Readability::new(html, None, None) else {
        return String::new();
    };
    readability
        .parse()
        .map(|article| article.text_content.to_string())
        .unwrap_or_default()
}

fn dom_smoothie_formatted(html: &str) -> String {
    let config = dom_smoothie::Config {
        text_mode: dom_smoothie::TextMode::Formatted,
        ..Default::default()
    };
    let Ok(mut readability) = dom_smoothie::Readability::new(html, None, Some(config)) else {
        return String::new();
    };
    readability
        .parse()
        .map(|article| article.text_content.to_string())
        .unwrap_or_default()
}

fn rs_trafilatura_text(html: &str) -> String {
    rs_trafilatura::extract(html)
        .map(|r| r.content_text)
        .unwrap_or_default()
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: extract-compare CORPUS_DIR OUT.jsonl [REPEATS]");
        return std::process::ExitCode::from(2);
    }
    let corpus = PathBuf::from(&args[1]).join("test-pages");
    let repeats: usize = args.get(3).and_then(|r| r.parse().ok()).unwrap_or(3);
    let mut pages: Vec<(String, String)> = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(&corpus)
        .expect("corpus dir")
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for dir in entries {
        if let Ok(bytes) = std::fs::read(dir.join("source.html")) {
            let name = dir
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            pages.push((name, String::from_utf8_lossy(&bytes).into_owned()));
        }
    }
    let total_bytes: usize = pages.iter().map(|(_, h)| h.len()).sum();
    let candidates: [(&str, Extractor); 4] = [
        ("dom_smoothie", dom_smoothie_text),
        ("dom_smoothie_formatted", dom_smoothie_formatted),
        ("rs_trafilatura", rs_trafilatura_text),
        ("heuristic", heuristic::extract),
    ];
    let mut out = std::fs::File::create(&args[2]).expect("output file");
    for (name, extract) in candidates {
        let mut runs = Vec::new();
        let mut texts = Vec::new();
        for round in 0..repeats {
            let start = Instant::now();
            for (_, html) in &pages {
                let text = extract(html);
                if round == 0 {
                    texts.push(text);
                }
            }
            runs.push(start.elapsed().as_secs_f64());
        }
        runs.sort_by(f64::total_cmp);
        let median = runs[runs.len() / 2];
        eprintln!(
            "{name}: {} pages in {median:.3} s (median of {repeats}) = {:.1} pages/s, {:.2} MB/s",
            pages.len(),
            pages.len() as f64 / median,
            total_bytes as f64 / 1e6 / median
        );
        for ((page, _), text) in pages.iter().zip(texts) {
            let line = serde_json::json!({"extractor": name, "page": page, "text": text,
                "pages_per_second": pages.len() as f64 / median});
            writeln!(out, "{line}").expect("write");
        }
    }
    std::process::ExitCode::SUCCESS
}
