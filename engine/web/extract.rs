//! The one page extractor (VM01, VM07 and `factomat extract`). Rules: docs/extraction.md.
//!
//! * Bytes are decoded with the charset from the BOM, else the Content-Type header, else the
//!   `<meta>` declaration in the first 1024 bytes, else UTF-8.
//! * The document is parsed once with kuchikiki (html5ever) for metadata, outline, JSON-LD and
//!   dates; the main text comes from dom_smoothie (a Readability.js port), the method that
//!   scored best on the development corpus (docs/extraction-comparison.md).
//! * All text is whitespace-normalized (every Unicode whitespace run, NBSP included, becomes
//!   one space) and bounded.

use std::collections::{BTreeSet, HashSet};

use kuchikiki::{ElementData, NodeDataRef, NodeRef};
use serde_json::Value;
use url::Url;

use crate::web::boilerplate;
use crate::web::text::Trigrams;
pub(crate) use crate::web::text::normalize_whitespace;

/// How many leading bytes are searched for a `<meta>` charset (HTML's prescan window).
const META_PRESCAN_BYTES: usize = 1024;
/// How many leading bytes are searched for a later `<meta>` charset when the bytes are not
/// UTF-8: a browser's parser still changes the encoding when it meets one there.
const META_LATE_BYTES: usize = 64 * 1024;
/// Bounds of metadata strings, headings and lists, in characters / items.
const MAX_META_CHARS: usize = 1000;
const MAX_HEADING_CHARS: usize = 300;
const MAX_HEADINGS: usize = 200;
const MAX_TYPES: usize = 100;
const MAX_TYPE_CHARS: usize = 200;
const MAX_DATE_CHARS: usize = 100;
const MAX_JSON_LD_DEPTH: usize = 32;

/// A Readability result shorter than this (characters) is checked against the pruned body
/// text, which replaces it when more than twice as long: the method misses pages whose text is
/// not in one container (short posts, forum threads, text split over table cells).
const SECOND_OPINION_BELOW: usize = 1500;
/// A text still shorter than this (characters) is checked against the page's client-side
/// templates (`<script type="text/template">`), read as HTML the same way: some blog platforms
/// ship the whole post in one and render it with script.
const TEMPLATE_BELOW: usize = 200;
/// A block is the page's standfirst when its first characters occur in the declared
/// description, or the description's first characters occur in it (this many characters).
const STANDFIRST_MATCH_CHARS: usize = 40;
/// The shortest block (and description), in characters, that can be a standfirst.
const STANDFIRST_MIN_CHARS: usize = 60;

/// Where the main text came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    Main,
    Article,
    BodyHeuristic,
    None,
}

impl Basis {
    pub fn as_str(self) -> &'static str {
        match self {
            Basis::Main => "main",
            Basis::Article => "article",
            Basis::BodyHeuristic => "body-heuristic",
            Basis::None => "none",
        }
    }
}

/// Where the charset came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CharsetSource {
    Bom,
    Header,
    Meta,
    /// A `<meta>` after the prescan window, followed because the bytes are not UTF-8.
    LateMeta,
    Default,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heading {
    pub level: u8,
    pub text: String,
}

/// One observed date or date-like fact; never a judgement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    /// `http_header`, `html_meta` or `json_ld`.
    pub source: &'static str,
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct ExtractOptions {
    /// The page URL (canonical links are resolved against it); None offline.
    pub page_url: Option<Url>,
    /// Character limit of the main text; None = unlimited.
    pub max_text_chars: Option<usize>,
}

/// Everything read from one HTML document.
#[derive(Debug, Clone)]
pub struct Extracted {
    pub title: Option<String>,
    pub description: Option<String>,
    pub canonical: Option<String>,
    pub outline: Vec<Heading>,
    /// Normalized main text, cut at `max_text_chars`.
    pub text: String,
    pub basis: Basis,
    /// Characters in `text`.
    pub characters: usize,
    /// Characters of the normalized main text before the cut.
    pub normalized_characters: usize,
    pub truncated: bool,
    /// Sorted, unique `@type` values of every JSON-LD block.
    pub json_ld_types: Vec<String>,
    pub observations: Vec<Observation>,
    pub charset: &'static str,
    pub charset_source: CharsetSource,
    /// Facts about the extraction a reader may need (decoding, malformed JSON-LD, caps).
    pub notes: Vec<String>,
}

/// The first `max` characters of `text` (a char boundary) and whether it was cut.
pub(crate) fn truncate_chars(text: &str, max: usize) -> (&str, bool) {
    match text.char_indices().nth(max) {
        Some((index, _)) => (&text[..index], true),
        None => (text, false),
    }
}

fn bounded(text: &str, max: usize) -> String {
    truncate_chars(text, max).0.to_string()
}

/// Whether a Content-Type names HTML (or is missing and the body looks like markup).
pub(crate) fn is_html(content_type: Option<&str>, body: &[u8]) -> bool {
    match content_type.and_then(|c| c.parse::<mime::Mime>().ok()) {
        Some(m) => {
            (m.type_() == mime::TEXT && m.subtype() == mime::HTML)
                || m.essence_str() == "application/xhtml+xml"
        }
        None => {
            let head = String::from_utf8_lossy(&body[..body.len().min(512)]).to_ascii_lowercase();
            let head = head.trim_start_matches('\u{feff}').trim_start();
            starts_with_html_tag(head) || head.contains("<head")
        }
    }
}

/// The HTML patterns of the WHATWG MIME Sniffing Standard ("identifying a resource with an
/// unknown MIME type"): the body, after leading whitespace, opens with one of these tags,
/// followed by a space or `>`. Pages that open with a script, a style or a PHP warning
/// (`<br />`) are HTML too.
fn starts_with_html_tag(head: &str) -> bool {
    const TAGS: &[&str] = &[
        "<!doctype html",
        "<html",
        "<head",
        "<script",
        "<iframe",
        "<h1",
        "<div",
        "<font",
        "<table",
        "<a",
        "<style",
        "<title",
        "<b",
        "<body",
        "<br",
        "<p",
    ];
    head.starts_with("<!--")
        || TAGS.iter().any(|tag| {
            head.strip_prefix(tag)
                .and_then(|rest| rest.chars().next())
                .is_some_and(|next| next == ' ' || next == '>')
        })
}

/// Decodes HTML bytes; returns the text, the encoding name and where it came from.
pub(crate) fn decode(
    bytes: &[u8],
    content_type: Option<&str>,
) -> (String, &'static str, CharsetSource, Vec<String>) {
    let (encoding, source) = detect_charset(bytes, content_type);
    let (text, _, had_errors) = encoding.decode(bytes);
    let mut notes = Vec::new();
    if source != CharsetSource::Default || encoding != encoding_rs::UTF_8 {
        notes.push(format!(
            "Decoded as {} (charset from {}).",
            encoding.name(),
            match source {
                CharsetSource::Bom => "the byte-order mark",
                CharsetSource::Header => "the Content-Type header",
                CharsetSource::Meta => "the meta tag",
                CharsetSource::LateMeta => "a meta tag after the first 1024 bytes",
                CharsetSource::Default => "the default",
            }
        ));
    }
    if had_errors {
        notes.push(format!(
            "Some bytes are not valid {} and were replaced with U+FFFD.",
            encoding.name()
        ));
    }
    (text.into_owned(), encoding.name(), source, notes)
}

fn detect_charset(
    bytes: &[u8],
    content_type: Option<&str>,
) -> (&'static encoding_rs::Encoding, CharsetSource) {
    if let Some((encoding, _)) = encoding_rs::Encoding::for_bom(bytes) {
        return (encoding, CharsetSource::Bom);
    }
    let from_header = content_type
        .and_then(|c| c.parse::<mime::Mime>().ok())
        .and_then(|m| m.get_param(mime::CHARSET).map(|c| c.as_str().to_string()))
        .and_then(|label| encoding_rs::Encoding::for_label(label.as_bytes()));
    if let Some(encoding) = from_header {
        return (html_charset(encoding), CharsetSource::Header);
    }
    if let Some(encoding) = meta_charset(&bytes[..bytes.len().min(META_PRESCAN_BYTES)]) {
        return (html_charset(encoding), CharsetSource::Meta);
    }
    if let Some(encoding) = late_meta_charset(bytes) {
        return (html_charset(encoding), CharsetSource::LateMeta);
    }
    (encoding_rs::UTF_8, CharsetSource::Default)
}

/// A `<meta>` charset beyond the prescan window, read only when the bytes are not valid UTF-8
/// (the default would garble them). HTML's tree builder does the same: a `<meta charset>` it
/// meets while the encoding is still tentative makes the browser re-decode the page.
fn late_meta_charset(bytes: &[u8]) -> Option<&'static encoding_rs::Encoding> {
    if bytes.len() <= META_PRESCAN_BYTES || std::str::from_utf8(bytes).is_ok() {
        return None;
    }
    meta_charset(&bytes[..bytes.len().min(META_LATE_BYTES)])
}

/// HTML's rule: a declared UTF-16 in a byte stream without BOM means UTF-8, and
/// x-user-defined means windows-1252.
fn html_charset(encoding: &'static encoding_rs::Encoding) -> &'static encoding_rs::Encoding {
    if encoding == encoding_rs::UTF_16LE || encoding == encoding_rs::UTF_16BE {
        encoding_rs::UTF_8
    } else if encoding == encoding_rs::X_USER_DEFINED {
        encoding_rs::WINDOWS_1252
    } else {
        encoding
    }
}

/// The charset a `<meta>` in the prefix declares. The prefix is decoded as windows-1252
/// (ASCII-compatible, never fails) and parsed with the real HTML parser.
fn meta_charset(prefix: &[u8]) -> Option<&'static encoding_rs::Encoding> {
    let (text, _, _) = encoding_rs::WINDOWS_1252.decode(prefix);
    let document = boilerplate::parse(text.as_ref());
    for meta in document.select("meta").ok()? {
        let attributes = meta.attributes.borrow();
        if let Some(label) = attributes.get("charset") {
            if let Some(encoding) = encoding_rs::Encoding::for_label(label.trim().as_bytes()) {
                return Some(encoding);
            }
            continue;
        }
        let is_content_type = attributes
            .get("http-equiv")
            .is_some_and(|h| h.trim().eq_ignore_ascii_case("content-type"));
        if is_content_type
            && let Some(content) = attributes.get("content")
            && let Ok(declared) = content.parse::<mime::Mime>()
            && let Some(label) = declared.get_param(mime::CHARSET)
            && let Some(encoding) = encoding_rs::Encoding::for_label(label.as_str().as_bytes())
        {
            return Some(encoding);
        }
    }
    None
}

/// Extracts everything from raw bytes (decoding first).
pub(crate) fn extract_bytes(
    bytes: &[u8],
    content_type: Option<&str>,
    options: &ExtractOptions,
) -> Extracted {
    let (html, charset, charset_source, notes) = decode(bytes, content_type);
    let mut extracted = extract_html(&html, options);
    extracted.charset = charset;
    extracted.charset_source = charset_source;
    let mut all_notes = notes;
    all_notes.append(&mut extracted.notes);
    extracted.notes = all_notes;
    extracted
}

/// Extracts everything from decoded HTML.
pub(crate) fn extract_html(html: &str, options: &ExtractOptions) -> Extracted {
    let document = boilerplate::parse(html);
    let mut notes = Vec::new();
    let base = document_base(&document, options.page_url.as_ref());
    let (json_ld_types, json_ld_dates) = json_ld(&document, &mut notes);
    let metas = metas_of(&document);
    let mut observations = meta_dates(&metas);
    observations.extend(json_ld_dates);
    let outline = outline(&document, &mut notes);
    let description = description(&metas);
    let (full_text, basis) = main_text(
        html,
        &document,
        options.page_url.as_ref(),
        description.as_deref(),
    );
    let normalized_characters = full_text.chars().count();
    let (text, truncated) = match options.max_text_chars {
        Some(max) => truncate_chars(&full_text, max),
        None => (full_text.as_str(), false),
    };
    let text = text.to_string();
    Extracted {
        title: title(&document, &metas),
        description,
        canonical: canonical(&document, base.as_ref(), &mut notes),
        outline,
        characters: text.chars().count(),
        text,
        basis,
        normalized_characters,
        truncated,
        json_ld_types,
        observations,
        charset: "UTF-8",
        charset_source: CharsetSource::Default,
        notes,
    }
}

fn text_of(node: &NodeRef) -> String {
    normalize_whitespace(&node.text_contents())
}

fn non_empty(text: String, max: usize) -> Option<String> {
    (!text.is_empty()).then(|| bounded(&text, max))
}

/// The page's `<meta>` elements in document order, gathered once for every lookup.
fn metas_of(document: &NodeRef) -> Vec<NodeDataRef<ElementData>> {
    document
        .select("meta")
        .map(|metas| metas.collect())
        .unwrap_or_default()
}

/// The content of the first `<meta>` whose `attribute` equals one of `names`, in that order.
fn meta_content(
    metas: &[NodeDataRef<ElementData>],
    attribute: &str,
    names: &[&str],
) -> Option<String> {
    for name in names {
        for meta in metas {
            let attributes = meta.attributes.borrow();
            let matches = attributes
                .get(attribute)
                .is_some_and(|v| v.trim().eq_ignore_ascii_case(name));
            if matches
                && let Some(content) = attributes.get("content")
                && let Some(text) = non_empty(normalize_whitespace(content), MAX_META_CHARS)
            {
                return Some(text);
            }
        }
    }
    None
}

/// `<title>`, else og:title / twitter:title, else the first `<h1>`.
fn title(document: &NodeRef, metas: &[NodeDataRef<ElementData>]) -> Option<String> {
    document
        .select_first("title")
        .ok()
        .and_then(|t| non_empty(text_of(t.as_node()), MAX_META_CHARS))
        .or_else(|| meta_content(metas, "property", &["og:title"]))
        .or_else(|| meta_content(metas, "name", &["twitter:title"]))
        .or_else(|| {
            document
                .select_first("h1")
                .ok()
                .and_then(|h| non_empty(text_of(h.as_node()), MAX_META_CHARS))
        })
}

/// meta description, else og:description, else twitter:description.
fn description(metas: &[NodeDataRef<ElementData>]) -> Option<String> {
    meta_content(metas, "name", &["description"])
        .or_else(|| meta_content(metas, "property", &["og:description"]))
        .or_else(|| meta_content(metas, "name", &["twitter:description"]))
}

/// The base URL links resolve against: `<base href>` (resolved against the page), else the page.
fn document_base(document: &NodeRef, page: Option<&Url>) -> Option<Url> {
    let href = document
        .select_first("base[href]")
        .ok()
        .and_then(|b| b.attributes.borrow().get("href").map(str::to_string));
    match (href, page) {
        (Some(href), Some(page)) => page.join(href.trim()).ok().or_else(|| Some(page.clone())),
        (Some(href), None) => Url::parse(href.trim()).ok(),
        (None, page) => page.cloned(),
    }
}

/// `<link rel=canonical>` made absolute; only http(s) results are kept.
fn canonical(document: &NodeRef, base: Option<&Url>, notes: &mut Vec<String>) -> Option<String> {
    let links = document.select("link[rel][href]").ok()?;
    for link in links {
        let attributes = link.attributes.borrow();
        let is_canonical = attributes.get("rel").is_some_and(|rel| {
            rel.split_ascii_whitespace()
                .any(|r| r.eq_ignore_ascii_case("canonical"))
        });
        if !is_canonical {
            continue;
        }
        let href = attributes.get("href").unwrap_or_default().trim();
        let absolute = match base {
            Some(base) => base.join(href).ok(),
            None => Url::parse(href).ok(),
        };
        match absolute {
            Some(url) if matches!(url.scheme(), "http" | "https") && url.as_str().len() <= 2048 => {
                return Some(url.to_string());
            }
            _ => {
                notes.push("The canonical link could not be made an absolute http(s) URL; canonical is null.".into());
                return None;
            }
        }
    }
    None
}

/// h1–h6 in document order outside page chrome, text normalized, empty headings skipped,
/// bounded.
fn outline(document: &NodeRef, notes: &mut Vec<String>) -> Vec<Heading> {
    let Ok(headings) = document.select("h1, h2, h3, h4, h5, h6") else {
        return Vec::new();
    };
    let mut outline = Vec::new();
    let mut total = 0usize;
    for heading in headings {
        if in_page_chrome(heading.as_node()) {
            continue;
        }
        let text = text_of(heading.as_node());
        if text.is_empty() {
            continue;
        }
        total += 1;
        if outline.len() == MAX_HEADINGS {
            continue;
        }
        let level = heading.name.local.as_bytes()[1] - b'0';
        outline.push(Heading {
            level,
            text: bounded(&text, MAX_HEADING_CHARS),
        });
    }
    if total > MAX_HEADINGS {
        notes.push(format!(
            "The outline lists the first {MAX_HEADINGS} of {total} headings."
        ));
    }
    outline
}

/// Whether a node sits in navigation, sidebars, footers, dialogs or hidden subtrees, whose
/// headings are page chrome rather than the document's outline.
fn in_page_chrome(node: &NodeRef) -> bool {
    node.ancestors().any(|ancestor| {
        let Some(element) = ancestor.as_element() else {
            return false;
        };
        if matches!(
            element.name.local.as_ref(),
            "nav" | "aside" | "footer" | "menu" | "dialog" | "template"
        ) {
            return true;
        }
        let attributes = element.attributes.borrow();
        attributes.contains("hidden")
            || attributes.get("aria-hidden") == Some("true")
            || attributes.get("role").is_some_and(|r| {
                matches!(
                    r.trim(),
                    "navigation" | "complementary" | "contentinfo" | "dialog"
                )
            })
    })
}

/// article:published_time and article:modified_time as observed.
fn meta_dates(metas: &[NodeDataRef<ElementData>]) -> Vec<Observation> {
    let mut observations = Vec::new();
    for name in ["article:published_time", "article:modified_time"] {
        if let Some(value) = meta_content(metas, "property", &[name]) {
            observations.push(Observation {
                source: "html_meta",
                name: name.to_string(),
                value: bounded(&value, MAX_DATE_CHARS),
            });
        }
    }
    observations
}

/// `@type` values of every ld+json block (at any depth, `@graph` and arrays included) and the
/// datePublished / dateModified of top-level and `@graph` entities. Malformed blocks are
/// noted and skipped.
fn json_ld(document: &NodeRef, notes: &mut Vec<String>) -> (Vec<String>, Vec<Observation>) {
    let mut types = BTreeSet::new();
    let mut dates = Vec::new();
    let Ok(scripts) = document.select("script[type]") else {
        return (Vec::new(), dates);
    };
    let mut index = 0;
    for script in scripts {
        let is_ld = script
            .attributes
            .borrow()
            .get("type")
            .and_then(|t| t.split(';').next())
            .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/ld+json"));
        if !is_ld {
            continue;
        }
        index += 1;
        let raw = script.as_node().text_contents();
        let Some(values) = parse_json_ld(&raw) else {
            notes.push(format!(
                "JSON-LD block {index} is not valid JSON and was skipped."
            ));
            continue;
        };
        for value in &values {
            collect_types(value, &mut types, 0);
            for entity in top_entities(value) {
                for name in ["datePublished", "dateModified"] {
                    if let Some(date) = entity.get(name).and_then(Value::as_str) {
                        dates.push(Observation {
                            source: "json_ld",
                            name: name.to_string(),
                            value: bounded(date.trim(), MAX_DATE_CHARS),
                        });
                    }
                }
            }
        }
    }
    if types.len() > MAX_TYPES {
        notes.push(format!(
            "json_ld_types lists the first {MAX_TYPES} of {} types.",
            types.len()
        ));
    }
    dedupe(&mut dates);
    (types.into_iter().take(MAX_TYPES).collect(), dates)
}

/// A block's JSON values, tolerating what publishers commonly wrap around it: HTML comment
/// markers, CDATA markers, a trailing semicolon, and several concatenated documents.
fn parse_json_ld(raw: &str) -> Option<Vec<Value>> {
    if let Ok(value) = serde_json::from_str::<Value>(raw) {
        return Some(vec![value]);
    }
    let mut cleaned = raw.trim();
    for wrapper in ["<!--", "//<![CDATA[", "<![CDATA["] {
        cleaned = cleaned.strip_prefix(wrapper).unwrap_or(cleaned).trim();
    }
    for wrapper in ["-->", "//]]>", "]]>", ";"] {
        cleaned = cleaned.strip_suffix(wrapper).unwrap_or(cleaned).trim();
    }
    let values: Result<Vec<Value>, _> = serde_json::Deserializer::from_str(cleaned)
        .into_iter::<Value>()
        .collect();
    values.ok().filter(|v| !v.is_empty())
}

fn collect_types(value: &Value, types: &mut BTreeSet<String>, depth: usize) {
    if depth > MAX_JSON_LD_DEPTH {
        return;
    }
    match value {
        Value::Array(items) => items
            .iter()
            .for_each(|i| collect_types(i, types, depth + 1)),
        Value::Object(map) => {
            match map.get("@type") {
                Some(Value::String(t)) => add_type(t, types),
                Some(Value::Array(list)) => list
                    .iter()
                    .filter_map(Value::as_str)
                    .for_each(|t| add_type(t, types)),
                _ => {}
            }
            map.values()
                .for_each(|v| collect_types(v, types, depth + 1));
        }
        _ => {}
    }
}

fn add_type(raw: &str, types: &mut BTreeSet<String>) {
    let text = normalize_whitespace(raw);
    if !text.is_empty() {
        types.insert(bounded(&text, MAX_TYPE_CHARS));
    }
}

/// The entities a block describes at its top: the value itself, array members, and `@graph`.
fn top_entities(value: &Value) -> Vec<&serde_json::Map<String, Value>> {
    let mut entities = Vec::new();
    let roots: Vec<&Value> = match value {
        Value::Array(items) => items.iter().collect(),
        other => vec![other],
    };
    for root in roots {
        if let Some(map) = root.as_object() {
            entities.push(map);
            if let Some(Value::Array(graph)) = map.get("@graph") {
                entities.extend(graph.iter().filter_map(Value::as_object));
            }
        }
    }
    entities
}

fn dedupe(observations: &mut Vec<Observation>) {
    let mut seen = HashSet::new();
    observations.retain(|o| seen.insert((o.name.clone(), o.value.clone())));
}

/// The main text (normalized, not yet cut) and its basis.
fn main_text(
    html: &str,
    document: &NodeRef,
    page: Option<&Url>,
    description: Option<&str>,
) -> (String, Basis) {
    let mut text = readability_text(html, page);
    if text.chars().count() < SECOND_OPINION_BELOW {
        text = second_opinion(document, page, text);
    }
    if text.chars().count() < TEMPLATE_BELOW {
        let templates = template_text(document);
        if templates.chars().count() > 2 * text.chars().count() {
            text = templates;
        }
    }
    if let Some(lead) = description.and_then(|d| standfirst(document, d, &text)) {
        text = format!("{lead} {text}").trim_end().to_string();
    }
    if text.is_empty() {
        return (String::new(), Basis::None);
    }
    (text.clone(), basis_of(&text, document))
}

/// A short Readability result checked against the pruned body text, which replaces it when more
/// than twice as long. When the result was a form, dialog or overlay box (a login form, a
/// cookie notice), it is not kept: the method is run again on the page without its furniture,
/// and the longer of that and the body text is the text.
fn second_opinion(document: &NodeRef, page: Option<&Url>, first: String) -> String {
    let body = boilerplate::body_text(boilerplate::copy_tree(document));
    let cleaned =
        boilerplate::html_without_furniture_holding(boilerplate::copy_tree(document), &first);
    if let Some(cleaned) = cleaned {
        let again = readability_text(&cleaned, page);
        return if again.chars().count() >= body.chars().count() {
            again
        } else {
            body
        };
    }
    if body.chars().count() > 2 * first.chars().count() {
        body
    } else {
        first
    }
}

/// The page's standfirst when the text lacks it: the first block of the body, outside page
/// furniture, that matches the declared description. The Readability method often starts below
/// the lead paragraph that sums the page up, and a page's description is usually that
/// paragraph.
fn standfirst(document: &NodeRef, description: &str, text: &str) -> Option<String> {
    if description.chars().count() < STANDFIRST_MIN_CHARS {
        return None;
    }
    let body = document.select_first("body").ok()?;
    let description_head = truncate_chars(description, STANDFIRST_MATCH_CHARS).0;
    let lead = boilerplate::block_texts_outside_furniture(body.as_node()).find(|block| {
        block.chars().count() >= STANDFIRST_MIN_CHARS
            && (block.contains(description_head)
                || description.contains(truncate_chars(block, STANDFIRST_MATCH_CHARS).0))
    })?;
    (!text.contains(&lead)).then_some(lead)
}

/// The text of every `<script type="text/template">` body, read as HTML like the whole body.
fn template_text(document: &NodeRef) -> String {
    let Ok(scripts) = document.select("script[type]") else {
        return String::new();
    };
    let markup: String = scripts
        .filter(|script| {
            script
                .attributes
                .borrow()
                .get("type")
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("text/template"))
        })
        .map(|script| script.as_node().text_contents())
        .collect::<Vec<_>>()
        .join("\n");
    if markup.trim().is_empty() {
        return String::new();
    }
    boilerplate::body_text(boilerplate::parse(&markup))
}

fn readability_text(html: &str, page: Option<&Url>) -> String {
    let config = dom_smoothie::Config {
        // We read JSON-LD ourselves; skipping it here saves a second pass.
        disable_json_ld: true,
        // The second pass (boilerplate.rs) reads class and id words.
        keep_classes: true,
        ..Default::default()
    };
    let url = page.map(Url::as_str);
    let Ok(mut readability) = dom_smoothie::Readability::new(html, url, Some(config)) else {
        return String::new();
    };
    match readability.parse() {
        Ok(article) => boilerplate::pruned_text(&article.content),
        Err(_) => String::new(),
    }
}

/// `article` when one `<article>` holds the text, else `main` when the `<main>` (or
/// `[role=main]`) element holds it, else `body-heuristic`. "Holds" = at least 90% of the
/// text's word trigrams occur in the container's text.
fn basis_of(text: &str, document: &NodeRef) -> Basis {
    let wanted = Trigrams::of(text);
    let inside = |selector: &str| {
        document
            .select(selector)
            .is_ok_and(|mut nodes| nodes.any(|node| wanted.contained_in(&text_of(node.as_node()))))
    };
    if inside("article") {
        Basis::Article
    } else if inside("main, [role=main]") {
        Basis::Main
    } else {
        Basis::BodyHeuristic
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitespace_and_nbsp_collapse() {
        assert_eq!(normalize_whitespace("  a\u{a0}\u{a0}b\n\tc  "), "a b c");
        assert_eq!(normalize_whitespace("\u{2003}"), "");
    }

    #[test]
    fn truncation_respects_character_boundaries() {
        assert_eq!(truncate_chars("héllo", 2), ("hé", true));
        assert_eq!(truncate_chars("héllo", 5), ("héllo", false));
        assert_eq!(truncate_chars("日本語", 1), ("日", true));
    }

    #[test]
    fn json_ld_tolerates_wrappers_and_concatenation() {
        assert!(parse_json_ld("<!-- {\"@type\":\"Thing\"} -->").is_some());
        assert_eq!(
            parse_json_ld("{\"a\":1} {\"b\":2}").map(|v| v.len()),
            Some(2)
        );
        assert!(parse_json_ld("{\"a\": }").is_none());
    }

    #[test]
    fn charset_prefers_bom_then_header_then_meta() {
        let meta = b"<html><head><meta charset=\"iso-8859-1\"></head>";
        assert_eq!(detect_charset(meta, None).1, CharsetSource::Meta);
        assert_eq!(detect_charset(meta, None).0, encoding_rs::WINDOWS_1252);
        assert_eq!(
            detect_charset(meta, Some("text/html; charset=shift_jis")).0,
            encoding_rs::SHIFT_JIS
        );
        let mut bom = vec![0xEF, 0xBB, 0xBF];
        bom.extend_from_slice(meta);
        assert_eq!(
            detect_charset(&bom, Some("text/html; charset=shift_jis")).1,
            CharsetSource::Bom
        );
        let equiv = b"<meta http-equiv=Content-Type content=\"text/html; charset=koi8-r\">";
        assert_eq!(detect_charset(equiv, None).0, encoding_rs::KOI8_R);
    }

    #[test]
    fn a_late_meta_charset_is_followed_only_when_the_bytes_are_not_utf8() {
        let padding = format!("<!-- {} -->", "x".repeat(META_PRESCAN_BYTES));
        let late = format!("<html><head>{padding}<meta charset=iso-8859-1></head><body>caf");
        let mut latin1 = late.clone().into_bytes();
        latin1.extend_from_slice(b"\xe9</body>");
        assert_eq!(
            detect_charset(&latin1, None),
            (encoding_rs::WINDOWS_1252, CharsetSource::LateMeta)
        );
        let utf8 = format!("{late}\u{e9}</body>").into_bytes();
        assert_eq!(
            detect_charset(&utf8, None),
            (encoding_rs::UTF_8, CharsetSource::Default)
        );
    }

    #[test]
    fn a_post_shipped_in_a_client_side_template_is_read_when_the_page_has_no_text() {
        let post = "The whole post is inside a template that a script renders in the browser. ";
        let html = format!(
            "<html><body><div id=app>Loading</div>\
             <script type='text/template'><div class=post><p>{post}{post}</p>\
             <div class=share-bar>Share</div></div></script></body></html>"
        );
        let extracted = extract_html(&html, &ExtractOptions::default());
        assert_eq!(extracted.text, format!("{post}{post}").trim_end());
        let long = format!(
            "<html><body><p>{post}{post}{post}</p>{}</body></html>",
            &html[12..]
        );
        let extracted = extract_html(&long, &ExtractOptions::default());
        // A page with text of its own is read as before: the template is not added.
        assert_eq!(extracted.text.matches("The whole post").count(), 3);
    }

    #[test]
    fn the_standfirst_above_the_article_joins_the_text_once() {
        let lead = "A short summary of the whole story, as the publisher declared it in the head.";
        let prose = "<p>The article body goes on for a while, with sentences that carry the story itself and nothing else.</p>".repeat(6);
        let page = |description: &str| {
            format!(
                "<html><head><meta name=description content='{description}'></head><body>\
                 <header><h1>Title</h1><p class=lead>{lead}</p></header>\
                 <article><div>{prose}</div></article></body></html>"
            )
        };
        let text = extract_html(&page(lead), &ExtractOptions::default()).text;
        assert!(text.starts_with(lead), "{text}");
        assert_eq!(text.matches(lead).count(), 1);
        let unrelated = "A description that no block of the page repeats, long enough to be one.";
        let text = extract_html(&page(unrelated), &ExtractOptions::default()).text;
        assert!(text.starts_with("The article body"), "{text}");
        let shared = page(lead).replace("<p class=lead>", "<p class=share-preview>");
        let text = extract_html(&shared, &ExtractOptions::default()).text;
        assert!(
            text.starts_with("The article body"),
            "furniture is no standfirst: {text}"
        );
    }

    #[test]
    fn untyped_bodies_are_sniffed_as_the_mime_sniffing_standard_says() {
        for html in [
            "<br />\n<b>Warning</b>: something in PHP",
            "  <script type=\"text/javascript\">var a;</script><p>Text</p>",
            "<!-- generated --><div>Text</div>",
            "<!DOCTYPE html><title>T</title>",
        ] {
            assert!(is_html(None, html.as_bytes()), "{html}");
        }
        for other in [
            "{\"a\": 1}",
            "<bold>not a tag we know</bold>",
            "plain text <html",
        ] {
            assert!(!is_html(None, other.as_bytes()), "{other}");
        }
    }
}
