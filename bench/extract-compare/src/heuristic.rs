//! Our own scored boilerplate-removal heuristic, a candidate in the comparison.
//!
//! 1. Remove what is never main text: scripts, styles, templates, forms and controls, nav,
//!    header, footer, aside, hidden nodes, and elements whose class/id/role says boilerplate
//!    (unless it also says content).
//! 2. Score text blocks (p, pre, blockquote, li, headings, td, dd, figcaption, and text that
//!    sits directly in a div): long, comma-rich, link-poor blocks score high; link-dense and
//!    tiny blocks are dropped.
//! 3. Give each block's score to its parent and half to its grandparent; the best-scoring
//!    container wins, and its kept blocks, in document order, are the main text.

use std::collections::HashMap;

use kuchikiki::NodeRef;
use kuchikiki::traits::TendrilSink;

const DROP_TAGS: &[&str] = &[
    "script", "style", "noscript", "template", "svg", "iframe", "form", "nav", "header", "footer",
    "aside", "button", "select", "input", "textarea", "object", "embed", "canvas", "dialog",
    "menu",
];
const NEGATIVE: &[&str] = &[
    "comment",
    "sidebar",
    "footer",
    "footnote",
    "masthead",
    "menu",
    "nav",
    "share",
    "social",
    "related",
    "promo",
    "sponsor",
    "advert",
    "cookie",
    "newsletter",
    "subscribe",
    "breadcrumb",
    "popup",
    "modal",
    "banner",
    "widget",
    "outbrain",
    "taboola",
    "rss",
    "print",
    "tags",
];
const POSITIVE: &[&str] = &[
    "article", "content", "main", "post", "entry", "story", "body", "text", "blog",
];
const BLOCKS: &[&str] = &[
    "p",
    "pre",
    "blockquote",
    "li",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "td",
    "dd",
    "dt",
    "figcaption",
];

pub fn extract(html: &str) -> String {
    let document = kuchikiki::parse_html().one(html).document_node;
    remove_boilerplate(&document);
    let blocks = collect_blocks(&document);
    let Some(best) = best_container(&blocks) else {
        return String::new();
    };
    let mut out = Vec::new();
    for block in &blocks {
        if block.node.ancestors().any(|a| a == best) || block.node == best {
            out.push(block.text.clone());
        }
    }
    out.join(" ")
}

fn marker(node: &NodeRef) -> String {
    let Some(element) = node.as_element() else {
        return String::new();
    };
    let attributes = element.attributes.borrow();
    let mut marker = String::new();
    for name in ["class", "id", "role"] {
        if let Some(value) = attributes.get(name) {
            marker.push_str(&value.to_ascii_lowercase());
            marker.push(' ');
        }
    }
    marker
}

fn is_boilerplate(node: &NodeRef) -> bool {
    let Some(element) = node.as_element() else {
        return false;
    };
    let tag = element.name.local.as_ref();
    if DROP_TAGS.contains(&tag) {
        return true;
    }
    let attributes = element.attributes.borrow();
    if attributes.contains("hidden")
        || attributes.get("aria-hidden") == Some("true")
        || attributes.get("style").is_some_and(|s| {
            let s = s.replace(' ', "").to_ascii_lowercase();
            s.contains("display:none") || s.contains("visibility:hidden")
        })
    {
        return true;
    }
    drop(attributes);
    if matches!(tag, "body" | "html" | "main" | "article") {
        return false;
    }
    let marker = marker(node);
    if marker.contains("navigation")
        || marker.contains("complementary")
        || marker.contains("contentinfo")
    {
        return true;
    }
    NEGATIVE.iter().any(|n| marker.contains(n)) && !POSITIVE.iter().any(|p| marker.contains(p))
}

fn remove_boilerplate(document: &NodeRef) {
    let doomed: Vec<NodeRef> = document.descendants().filter(is_boilerplate).collect();
    for node in doomed {
        node.detach();
    }
}

struct Block {
    node: NodeRef,
    text: String,
    score: f64,
}

fn normalize(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn link_chars(node: &NodeRef) -> usize {
    node.descendants()
        .filter(|n| n.as_element().is_some_and(|e| e.name.local.as_ref() == "a"))
        .map(|a| normalize(&a.text_contents()).chars().count())
        .sum()
}

fn collect_blocks(document: &NodeRef) -> Vec<Block> {
    let mut blocks = Vec::new();
    for node in document.descendants() {
        let Some(element) = node.as_element() else {
            continue;
        };
        let tag = element.name.local.as_ref();
        let text = if BLOCKS.contains(&tag) {
            // Nested blocks (li inside li) are counted once, at the innermost level.
            if node.descendants().any(|d| {
                d.as_element()
                    .is_some_and(|e| BLOCKS.contains(&e.name.local.as_ref()))
            }) {
                continue;
            }
            normalize(&node.text_contents())
        } else if tag == "div" {
            let direct: String = node
                .children()
                .filter_map(|c| c.as_text().map(|t| t.borrow().clone()))
                .collect();
            normalize(&direct)
        } else {
            continue;
        };
        let chars = text.chars().count();
        let is_heading = tag.starts_with('h') && tag.len() == 2;
        if chars < 25 && !is_heading {
            continue;
        }
        let density = link_chars(&node) as f64 / chars.max(1) as f64;
        if density > 0.5 {
            continue;
        }
        let commas = text.matches([',', '，']).count() as f64;
        let score = (1.0 + commas + (chars as f64 / 100.0).min(3.0)) * (1.0 - density);
        blocks.push(Block {
            node: node.clone(),
            text,
            score,
        });
    }
    blocks
}

fn best_container(blocks: &[Block]) -> Option<NodeRef> {
    let mut scores: Vec<(NodeRef, f64)> = Vec::new();
    let mut index: HashMap<*const kuchikiki::Node, usize> = HashMap::new();
    for block in blocks {
        let mut weight = 1.0;
        for ancestor in block.node.ancestors().take(3) {
            let key = &*ancestor as *const kuchikiki::Node;
            let slot = *index.entry(key).or_insert_with(|| {
                scores.push((ancestor.clone(), class_weight(&ancestor)));
                scores.len() - 1
            });
            scores[slot].1 += block.score * weight;
            weight /= 2.0;
        }
    }
    scores
        .into_iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(node, _)| node)
}

fn class_weight(node: &NodeRef) -> f64 {
    let marker = marker(node);
    let mut weight = 0.0;
    if POSITIVE.iter().any(|p| marker.contains(p)) {
        weight += 5.0;
    }
    if node
        .as_element()
        .is_some_and(|e| matches!(e.name.local.as_ref(), "article" | "main"))
    {
        weight += 10.0;
    }
    weight
}
