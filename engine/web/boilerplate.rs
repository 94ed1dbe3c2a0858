//! The second pass over the main candidate the Readability method chose: boilerplate that sits
//! inside an article container (share bars, related-link lists, comment threads, newsletter
//! boxes, captions and photo credits) is pruned, then the text is read with block boundaries
//! kept. Every signal is language independent: markup roles, class/id vocabulary (which stays
//! English on pages in any language) and, for the whole-body reading, link density. Measured
//! effects: docs/extraction-comparison.md.

use std::collections::HashMap;

use kuchikiki::iter::NodeIterator;
use kuchikiki::traits::TendrilSink;
use kuchikiki::{ElementData, NodeRef};

use crate::web::text::Trigrams;

/// Class/id words (whole parts of a class or id, split at `-`, `_`, space and case) that mark a
/// block as page furniture rather than the text it sits in.
const BOILERPLATE_WORDS: &[&str] = &[
    "share",
    "sharing",
    "shariff",
    "social",
    "socials",
    "related",
    "recommended",
    "recommendations",
    "newsletter",
    "subscribe",
    "subscription",
    "signup",
    "comments",
    "commentlist",
    "respond",
    "breadcrumb",
    "breadcrumbs",
    "tags",
    "tagcloud",
    "taglist",
    "promo",
    "advert",
    "advertisement",
    "ad",
    "ads",
    "adsbygoogle",
    "sponsor",
    "sponsored",
    "banner",
    "cookie",
    "cookies",
    "consent",
    "popup",
    "modal",
    "sidebar",
    "footer",
    "pagination",
    "pager",
    "copyright",
    // Post metadata, author boxes, ratings, disclaimers, affiliate notes, update stamps,
    // signatures, info boxes and teaser rows.
    "postmetadata",
    "utility",
    "author",
    "bio",
    "rating",
    "disclaimer",
    "affiliate",
    "updated",
    "signature",
    "infobox",
    "teasers",
    "toolbar",
    "print",
    // Time stamps, reading times ("reading-time") and further-reading lists, image galleries.
    "time",
    "reading",
    "gallery",
];

/// Class/id words of captions and photo credits: trafilatura's reference leaves them out;
/// Readability's keeps them, which costs the mozilla corpus less than link-density pruning
/// inside the container did (docs/extraction-comparison.md, fourth session).
const CAPTION_WORDS: &[&str] = &[
    "caption",
    "figcaption",
    "credit",
    "credits",
    "photographer",
    "legend",
];

/// Class/id words of boxes laid over or beside a page, never its article.
const OVERLAY_WORDS: &[&str] = &[
    "cookie",
    "cookies",
    "consent",
    "modal",
    "popup",
    "newsletter",
    "subscribe",
    "subscription",
    "signup",
    "login",
];

/// Elements whose content is never running text.
const FURNITURE_TAGS: &[&str] = &[
    "nav", "aside", "footer", "form", "button", "select", "menu", "dialog",
];

/// A class or id of more words than this is a slug of a heading ("sharing-with-a-team"), not
/// a name for a kind of block.
const MAX_NAME_WORDS: usize = 3;

/// A block whose text is at least this share link text is a list of links, not prose.
const LINK_DENSE_BLOCK: f64 = 0.5;
/// A paragraph needs a higher share: prose cites with links, link lists do not argue.
const LINK_DENSE_PARAGRAPH: f64 = 0.8;
/// A node holding more than this share of the candidate's text is never pruned: the signal
/// that marked it is wrong about the page, not the node.
const MAX_PRUNED_SHARE: f64 = 0.3;
/// A line above the article's first prose that is shorter than this (and holds a digit) is a
/// date or time stamp.
const STAMP_CHARS: usize = 15;
/// A form with at least one field per this many characters of text is a form to fill in, not
/// a page wrapped in a form element.
const FORM_FIELD_CHARS: usize = 100;
/// A block of at least this many non-whitespace characters (and not link-dense) is prose.
const PROSE_CHARS: usize = 80;

/// The whitespace-normalized text of the candidate's HTML after pruning. Link density alone is
/// not a signal here: inside the chosen container, link lists are as often part of the article
/// (by Readability's reference) as not (by trafilatura's); only cross-reference lines go.
pub(crate) fn pruned_text(content_html: &str) -> String {
    let document = parse(content_html);
    let total = text_chars(&document).max(1);
    prune(&document, usize::MAX / 4, is_control);
    prune(&document, total, is_furniture);
    prune_by_kind(&document, total, is_caption);
    prune(&document, total, is_cross_reference);
    block_text(&document)
}

/// A paragraph that is a short label and one link making up most of it ("Read also: <another
/// headline>"): a pointer to another page, not a sentence of this one. A paragraph that is a
/// link alone, or several links, is left alone.
fn is_cross_reference(node: &NodeRef, element: &ElementData) -> bool {
    if &element.name.local != "p" {
        return false;
    }
    let mut links = node
        .descendants()
        .filter(|n| n.as_element().is_some_and(|e| &e.name.local == "a"));
    let (Some(link), None) = (links.next(), links.next()) else {
        return false;
    };
    let text = text_chars(node);
    let link_text = text_chars(&link);
    link_text < text && link_text as f64 >= LINK_DENSE_PARAGRAPH * text as f64
}

/// The document tree of `html`.
pub(crate) fn parse(html: &str) -> NodeRef {
    kuchikiki::parse_html().one(html).document_node
}

/// A deep copy of the tree under `root`: the tree parsing the same page again would give, at a
/// fraction of the cost, for passes that cut up their own tree. Iterative, so a deeply nested
/// page cannot exhaust the stack.
pub(crate) fn copy_tree(root: &NodeRef) -> NodeRef {
    let copy = NodeRef::new(root.data().clone());
    let mut pending = vec![(root.clone(), copy.clone())];
    while let Some((original, copied)) = pending.pop() {
        for child in original.children() {
            let child_copy = NodeRef::new(child.data().clone());
            copied.append(child_copy.clone());
            pending.push((child, child_copy));
        }
    }
    copy
}

/// The document's HTML without page chrome and furniture (every block `is_furniture` marks that
/// holds at most `MAX_PRUNED_SHARE` of the body's text), when the text the Readability method
/// chose lies inside a form, dialog or overlay box (`is_overlay`): a login form or a cookie
/// notice it took for the article. None when the chosen text lies elsewhere.
/// `document` is cut up: pass a copy (`copy_tree`) of a tree that is read afterwards.
pub(crate) fn html_without_furniture_holding(document: NodeRef, chosen: &str) -> Option<String> {
    let body = document.select_first("body").ok()?.as_node().clone();
    prune(&body, usize::MAX / 4, is_page_chrome);
    let total = text_chars(&body).max(1);
    let limit = MAX_PRUNED_SHARE * total as f64;
    let chosen_chars = chosen.chars().filter(|c| !c.is_whitespace()).count();
    let wanted = Trigrams::of(chosen);
    let holds_chosen = |node: &NodeRef| {
        let chars = text_chars(node);
        chars * 10 >= chosen_chars * 9
            && chars as f64 <= limit
            && wanted.contained_in(&node.text_contents())
    };
    let in_overlay = body.descendants().any(|node| {
        node.as_element()
            .is_some_and(|element| is_overlay(&node, element))
            && holds_chosen(&node)
    });
    if !in_overlay {
        return None;
    }
    prune(&body, total, is_furniture);
    Some(document.to_string())
}

/// The text of the whole body with furniture, page headers and link lists pruned: the second
/// opinion when the Readability method finds no candidate or a very short one.
/// `document` is cut up: pass a copy (`copy_tree`) of a tree that is read afterwards.
pub(crate) fn body_text(document: NodeRef) -> String {
    let Ok(body) = document.select_first("body") else {
        return String::new();
    };
    let body = body.as_node().clone();
    // Chrome and hidden nodes go whatever their size (no share guard); the share guard of the
    // other rules counts what is left, not the scripts and styles that were there.
    prune(&body, usize::MAX / 4, is_page_chrome);
    let total = text_chars(&body).max(1);
    prune(&body, total, is_furniture);
    prune_by_kind(&body, total, is_caption);
    prune(&body, total, is_link_dense);
    block_text(&body)
}

/// Site headers, embedded frames and form controls, which the Readability method drops before
/// scoring.
fn is_page_chrome(node: &NodeRef, element: &ElementData) -> bool {
    if matches!(
        element.name.local.as_ref(),
        "header" | "iframe" | "object" | "embed" | "svg" | "noscript" | "script" | "style"
    ) || is_control(node, element)
    {
        return true;
    }
    let attributes = element.attributes.borrow();
    attributes.contains("hidden")
        || attributes.get("aria-hidden") == Some("true")
        || attributes.get("style").is_some_and(|style| {
            let style: String = style
                .chars()
                .filter(|c| !c.is_whitespace())
                .collect::<String>()
                .to_ascii_lowercase();
            style.contains("display:none") || style.contains("visibility:hidden")
        })
}

/// Form controls, whose text (option lists, button labels) is never running text, however
/// much of the page it is.
fn is_control(_node: &NodeRef, element: &ElementData) -> bool {
    matches!(
        element.name.local.as_ref(),
        "select" | "option" | "datalist" | "button" | "textarea"
    )
}

/// Detaches every element `rule` marks (outermost first), with the heading that introduces it.
fn prune(root: &NodeRef, total: usize, rule: fn(&NodeRef, &ElementData) -> bool) {
    let limit = MAX_PRUNED_SHARE * total as f64;
    let small = marked(root, rule).filter(|node| text_chars(node) as f64 <= limit);
    detach_with_headings(outermost(small));
}

/// As `prune`, but a kind of node (same tag, same class) that together holds more than the
/// share is kept: twenty slides' captions are the page's text, whatever their class says.
fn prune_by_kind(root: &NodeRef, total: usize, rule: fn(&NodeRef, &ElementData) -> bool) {
    let limit = MAX_PRUNED_SHARE * total as f64;
    detach_with_headings(without_large_kinds(outermost(marked(root, rule)), limit));
}

/// The elements under `root` that `rule` marks, in document order.
fn marked(
    root: &NodeRef,
    rule: fn(&NodeRef, &ElementData) -> bool,
) -> impl Iterator<Item = NodeRef> {
    root.descendants()
        .filter(move |node| node.as_element().is_some_and(|element| rule(node, element)))
}

/// The nodes (in document order) that no other of them contains.
fn outermost(nodes: impl Iterator<Item = NodeRef>) -> Vec<NodeRef> {
    let mut kept: Vec<NodeRef> = Vec::new();
    for node in nodes {
        let nested = kept
            .last()
            .is_some_and(|outer| node.ancestors().any(|a| &a == outer));
        if !nested {
            kept.push(node);
        }
    }
    kept
}

fn detach_with_headings(nodes: Vec<NodeRef>) {
    for node in nodes {
        if let Some(heading) = introducing_heading(&node) {
            heading.detach();
        }
        node.detach();
    }
}

/// `marked` without the kinds of node (same tag, same class) that together hold more than
/// `limit` characters: twenty slides' captions are the page's text, whatever their class says
/// about one of them.
fn without_large_kinds(marked: Vec<NodeRef>, limit: f64) -> Vec<NodeRef> {
    let kind = |node: &NodeRef| {
        node.as_element().map(|e| {
            let class = e
                .attributes
                .borrow()
                .get("class")
                .unwrap_or_default()
                .to_string();
            (e.name.local.to_string(), class)
        })
    };
    let mut chars_by_kind: HashMap<_, usize> = HashMap::new();
    for node in &marked {
        *chars_by_kind.entry(kind(node)).or_default() += text_chars(node);
    }
    marked
        .into_iter()
        .filter(|node| (chars_by_kind[&kind(node)] as f64) <= limit)
        .collect()
}

/// The heading right before `node` (whitespace between them ignored), if any.
fn introducing_heading(node: &NodeRef) -> Option<NodeRef> {
    let mut previous = node.previous_sibling();
    while let Some(sibling) = previous {
        if let Some(element) = sibling.as_element() {
            return matches!(
                element.name.local.as_ref(),
                "h1" | "h2" | "h3" | "h4" | "h5" | "h6"
            )
            .then_some(sibling);
        }
        if !sibling
            .as_text()
            .is_some_and(|t| t.borrow().trim().is_empty())
        {
            return None;
        }
        previous = sibling.previous_sibling();
    }
    None
}

/// A caption or photo credit by its class or id.
fn is_caption(_node: &NodeRef, element: &ElementData) -> bool {
    has_class_word(element, CAPTION_WORDS)
}

fn is_furniture(_node: &NodeRef, element: &ElementData) -> bool {
    is_furniture_by_markup(element) || has_class_word(element, BOILERPLATE_WORDS)
}

/// A form to fill in (at least one field per `FORM_FIELD_CHARS` characters of its text), a
/// dialog, or a box whose class names an overlay: what the Readability method can take for the
/// article on a page whose article is short.
fn is_overlay(node: &NodeRef, element: &ElementData) -> bool {
    match element.name.local.as_ref() {
        "dialog" => return true,
        "form" => {
            let fields = node
                .descendants()
                .filter(|n| {
                    n.as_element().is_some_and(|e| {
                        matches!(e.name.local.as_ref(), "input" | "select" | "textarea")
                    })
                })
                .count();
            return fields * FORM_FIELD_CHARS >= text_chars(node);
        }
        _ => {}
    }
    element
        .attributes
        .borrow()
        .get("role")
        .is_some_and(|role| role.trim() == "dialog")
        || has_class_word(element, OVERLAY_WORDS)
}

/// Furniture by its tag or ARIA role, which a page states outright (class words are guesses).
fn is_furniture_by_markup(element: &ElementData) -> bool {
    let tag = element.name.local.as_ref();
    FURNITURE_TAGS.contains(&tag)
        || element.attributes.borrow().get("role").is_some_and(|role| {
            matches!(
                role.trim(),
                "navigation" | "complementary" | "contentinfo" | "banner" | "dialog"
            )
        })
}

/// Whether a class or id token of at most `MAX_NAME_WORDS` words holds one of `vocabulary`
/// (lowercase words).
fn has_class_word(element: &ElementData, vocabulary: &[&str]) -> bool {
    let attributes = element.attributes.borrow();
    ["class", "id"].iter().any(|name| {
        attributes.get(*name).is_some_and(|value| {
            value
                .split_ascii_whitespace()
                .any(|token| token_holds_word(token, vocabulary))
        })
    })
}

fn token_holds_word(token: &str, vocabulary: &[&str]) -> bool {
    let mut holds = false;
    for (count, word) in value_words(token).enumerate() {
        if count == MAX_NAME_WORDS {
            return false;
        }
        holds = holds || vocabulary.iter().any(|v| v.eq_ignore_ascii_case(word));
    }
    holds
}

/// The words of a class or id value, as written: split at non-alphanumerics and at
/// lower-to-upper case changes ("shareButtons" → share, Buttons). Every word is ASCII, so
/// comparing it ASCII-case-blind is comparing it lowercased.
fn value_words(value: &str) -> impl Iterator<Item = &str> + '_ {
    value
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|part| !part.is_empty())
        .flat_map(split_camel)
}

/// An ASCII-alphanumeric part cut before each uppercase letter that follows a lowercase letter
/// or a digit.
fn split_camel(part: &str) -> impl Iterator<Item = &str> + '_ {
    let bytes = part.as_bytes();
    let mut start = 0;
    std::iter::from_fn(move || {
        if start >= bytes.len() {
            return None;
        }
        let mut end = start + 1;
        while end < bytes.len()
            && !(bytes[end].is_ascii_uppercase()
                && (bytes[end - 1].is_ascii_lowercase() || bytes[end - 1].is_ascii_digit()))
        {
            end += 1;
        }
        let word = &part[start..end];
        start = end;
        Some(word)
    })
}

fn is_link_dense(node: &NodeRef, element: &ElementData) -> bool {
    let threshold = match element.name.local.as_ref() {
        "ul" | "ol" | "dl" | "div" | "section" | "table" => LINK_DENSE_BLOCK,
        "p" => LINK_DENSE_PARAGRAPH,
        _ => return false,
    };
    let text = text_chars(node);
    if text == 0 {
        return false;
    }
    let links: usize = node
        .descendants()
        .filter(|n| n.as_element().is_some_and(|e| &e.name.local == "a"))
        .map(|a| text_chars(&a))
        .sum();
    links as f64 / text as f64 >= threshold
}

/// Non-whitespace characters of a node's text.
fn text_chars(node: &NodeRef) -> usize {
    node.descendants()
        .text_nodes()
        .map(|t| t.borrow().chars().filter(|c| !c.is_whitespace()).count())
        .sum()
}

/// Elements that end a line of text; everything else is read inline.
fn is_block(name: &str) -> bool {
    matches!(
        name,
        "address"
            | "article"
            | "blockquote"
            | "br"
            | "dd"
            | "details"
            | "div"
            | "dl"
            | "dt"
            | "figure"
            | "h1"
            | "h2"
            | "h3"
            | "h4"
            | "h5"
            | "h6"
            | "header"
            | "hr"
            | "li"
            | "main"
            | "ol"
            | "p"
            | "pre"
            | "section"
            | "summary"
            | "table"
            | "td"
            | "th"
            | "tr"
            | "ul"
    )
}

/// One run of text between block boundaries, as read in document order.
#[derive(Debug, Default)]
struct Block {
    text: String,
    /// Non-whitespace characters of `text` that sit inside links.
    link_chars: usize,
    /// Whether the block is a heading (h1–h6).
    heading: bool,
}

impl Block {
    /// Non-whitespace characters, each ideograph or syllable of the wide East Asian scripts
    /// counted as three: one such character carries about as much as a short word.
    fn weight(&self) -> usize {
        self.text
            .chars()
            .filter(|c| !c.is_whitespace())
            .map(|c| if is_wide_script(c) { 3 } else { 1 })
            .sum()
    }

    fn is_link_dense(&self) -> bool {
        let chars = self.text.chars().filter(|c| !c.is_whitespace()).count();
        chars > 0 && (self.link_chars as f64) >= LINK_DENSE_BLOCK * chars as f64
    }

    /// Running prose: long enough to be a sentence or more, and not mostly link text.
    fn is_prose(&self) -> bool {
        self.weight() >= PROSE_CHARS && !self.is_link_dense()
    }
}

/// The blocks of `root` in document order (empty ones skipped).
fn blocks(root: &NodeRef) -> Vec<Block> {
    let mut reader = BlockReader::default();
    reader.read(root, false);
    reader.flush();
    reader.blocks
}

#[derive(Default)]
struct BlockReader {
    blocks: Vec<Block>,
    current: Block,
    /// Whether subtrees that `is_furniture` marks are left out.
    skip_furniture: bool,
}

impl BlockReader {
    fn flush(&mut self) {
        let block = std::mem::take(&mut self.current);
        if !block.text.trim().is_empty() {
            self.blocks.push(block);
        }
    }

    fn read(&mut self, node: &NodeRef, in_link: bool) {
        if let Some(text) = node.as_text() {
            let text = text.borrow();
            if in_link {
                self.current.link_chars += text.chars().filter(|c| !c.is_whitespace()).count();
            }
            self.current.text.push_str(&text);
            return;
        }
        let (block, link, heading) = match node.as_element() {
            Some(element) => {
                let name = element.name.local.as_ref();
                if matches!(name, "script" | "style" | "template" | "noscript") {
                    return;
                }
                if self.skip_furniture && (is_furniture(node, element) || is_caption(node, element))
                {
                    return;
                }
                (is_block(name), name == "a", is_heading(name))
            }
            None => (false, false, false),
        };
        if block {
            self.flush();
        }
        if heading {
            self.current.heading = true;
        }
        for child in node.children() {
            self.read(&child, in_link || link);
        }
        if block {
            self.flush();
        }
    }
}

/// Drops the short blocks after the last prose block: an article ends with prose, and what
/// follows it in the same container (share prompts, "read more" teasers, dates, credits,
/// comment counts) is furniture that carries no class name.
fn trim_tail(blocks: &mut Vec<Block>) {
    let Some(last) = blocks.iter().rposition(Block::is_prose) else {
        return;
    };
    if let Some(cut) = blocks[last + 1..]
        .iter()
        .position(|b| b.heading || b.link_chars > 0)
    {
        blocks.truncate(last + 1 + cut);
    }
}

/// Drops the short lines with a digit before the first prose block (not headings): dates,
/// times and reading times ("03.04.2020", "4 Min Read") that stand above an article.
fn trim_head(blocks: &mut Vec<Block>) {
    let Some(first) = blocks.iter().position(Block::is_prose) else {
        return;
    };
    let mut index = 0;
    blocks.retain(|block| {
        index += 1;
        let stamp = !block.heading
            && block.weight() < STAMP_CHARS
            && block.text.chars().any(|c| c.is_ascii_digit());
        index > first || !stamp
    });
}

/// CJK ideographs, kana and Hangul (U+2E80 onwards, below the surrogates).
fn is_wide_script(c: char) -> bool {
    ('\u{2E80}'..='\u{D7FF}').contains(&c)
}

fn is_heading(name: &str) -> bool {
    matches!(name, "h1" | "h2" | "h3" | "h4" | "h5" | "h6")
}

/// The blocks joined with one space, whitespace normalized.
fn join(blocks: &[Block]) -> String {
    let mut out = String::new();
    for block in blocks {
        out.push_str(&block.text);
        out.push(' ');
    }
    super::text::normalize_whitespace(&out)
}

/// The whitespace-normalized text of every block of `root` outside page furniture, in document
/// order. Nothing is detached: the tree is read as it is.
pub(crate) fn block_texts_outside_furniture(root: &NodeRef) -> impl Iterator<Item = String> {
    let mut reader = BlockReader {
        skip_furniture: true,
        ..BlockReader::default()
    };
    reader.read(root, false);
    reader.flush();
    reader
        .blocks
        .into_iter()
        .map(|block| super::text::normalize_whitespace(&block.text))
}

/// The text of `root` with a space at every block boundary, whitespace normalized.
fn block_text(root: &NodeRef) -> String {
    let mut blocks = blocks(root);
    trim_tail(&mut blocks);
    trim_head(&mut blocks);
    join(&blocks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_words_split_at_separators_and_case() {
        let words: Vec<&str> = value_words("post shareButtons related_posts x9Y").collect();
        assert_eq!(
            words,
            ["post", "share", "Buttons", "related", "posts", "x9", "Y"]
        );
        assert!(token_holds_word("shareButtons", &["buttons"]));
        assert!(token_holds_word("COMMENTS", &["comments"]));
        assert!(
            !token_holds_word("share-this-post-footer", &["share"]),
            "over three words"
        );
    }

    #[test]
    fn furniture_and_credits_go_prose_and_link_lists_stay() {
        let prose = "A long paragraph of running text that carries the article itself. ".repeat(8);
        let html = format!(
            "<div><p>{prose}</p><div class='share-bar'>Share on Facebook</div>\
             <h3>Related</h3><ul class='related-posts'><li><a href=/a>Another story</a></li></ul>\
             <h3>Sources</h3><ul><li><a href=/s>The survey</a></li><li><a href=/t>The census</a></li></ul>\
             <figure><img src=x><figcaption>The bridge at dawn <span class='credit'>AFP</span></figcaption></figure>\
             <p>Closing words of the article with <a href=/c>one link</a> in them, a sentence or two long, as prose usually is in an article.</p></div>"
        );
        let text = pruned_text(&html);
        assert!(text.starts_with("A long paragraph"), "{text}");
        assert!(
            text.ends_with("in them, a sentence or two long, as prose usually is in an article."),
            "{text}"
        );
        assert!(text.contains("The bridge at dawn"), "{text}");
        assert!(text.contains("Sources The survey"), "{text}");
        for gone in ["Share on", "Related", "Another story", "AFP"] {
            assert!(!text.contains(gone), "{gone} in {text}");
        }
    }

    #[test]
    fn a_label_and_one_link_is_a_cross_reference() {
        let prose = "Running text of the article, long enough to matter here. ".repeat(10);
        let html = format!(
            "<div><p>{prose}</p><p>Read also: <a href=/x>Another headline about something else, told at length</a></p>\
             <p><a href=/y>A link standing alone</a></p><p>{prose}</p></div>"
        );
        let text = pruned_text(&html);
        assert!(!text.contains("Another headline"), "{text}");
        assert!(text.contains("A link standing alone"), "{text}");
    }

    #[test]
    fn a_gallery_of_captions_is_the_text_a_lone_caption_is_not() {
        let intro =
            "The introduction of a gallery page, which sets the scene for the slides. ".repeat(2);
        let slide = |n: usize| {
            format!(
                "<figure><img src=/{n}.jpg><figcaption class=slide-caption>Slide {n}: what this \
                 costume needs, told in two sentences. A dress, a bow and a little patience.\
                 </figcaption></figure>"
            )
        };
        let slides: String = (1..=12).map(slide).collect();
        let text = pruned_text(&format!("<div><p>{intro}</p>{slides}</div>"));
        assert!(text.contains("Slide 12: what this costume needs"), "{text}");
        let prose = "Running text of the article, long enough to matter here. ".repeat(10);
        let text = pruned_text(&format!(
            "<div><p>{prose}</p>{}<p>{prose}</p></div>",
            slide(1)
        ));
        assert!(!text.contains("Slide 1"), "{text}");
    }

    #[test]
    fn the_body_share_guard_counts_text_not_scripts() {
        let prose = "A paragraph of the only article on this page, plain and readable. ".repeat(4);
        let script = format!("<script>var state = \"{}\";</script>", "x ".repeat(5000));
        let html = format!(
            "<html><body>{script}<div class=post-sidebar-layout><p>{prose}</p></div>\
             <div class=sidebar><p>Links elsewhere</p></div></body></html>"
        );
        let text = body_text(parse(&html));
        assert!(
            text.starts_with("A paragraph of the only article"),
            "{text}"
        );
        assert!(!text.contains("Links elsewhere"), "{text}");
    }

    #[test]
    fn a_chosen_text_inside_a_login_form_or_cookie_box_is_furniture() {
        let article = format!(
            "<div class=story>{}</div>",
            "<p>The article the page is about, a paragraph at a time.</p>".repeat(6)
        );
        let form = "<form><label>E-mail <input type=email></label><label>Password \
                    <input type=password></label><p>Forgotten your password? Ask for a new one.</p></form>";
        let html = format!("<html><body>{article}<div class=account>{form}</div></body></html>");
        let cleaned = html_without_furniture_holding(
            parse(&html),
            "E-mail Password Forgotten your password? Ask for a new one.",
        )
        .expect("the chosen text is the login form's");
        assert!(!cleaned.contains("Forgotten"), "{cleaned}");
        assert!(
            cleaned.contains("The article the page is about"),
            "{cleaned}"
        );
        assert!(
            html_without_furniture_holding(
                parse(&html),
                "The article the page is about, a paragraph at a time."
            )
            .is_none()
        );
        let cookie = "<div class=cookie-notice><p>This site uses cookies to count visits and keep you signed in.</p></div>";
        let html = format!("<html><body>{article}{cookie}</body></html>");
        assert!(
            html_without_furniture_holding(
                parse(&html),
                "This site uses cookies to count visits and keep you signed in."
            )
            .is_some()
        );
        let wrapped = format!(
            "<html><body><form><input type=search>{}</form></body></html>",
            "<p>A page that a framework wraps in one form element, with a search field.</p>"
                .repeat(5)
        );
        assert!(
            html_without_furniture_holding(
                parse(&wrapped),
                "A page that a framework wraps in one form element"
            )
            .is_none()
        );
    }

    #[test]
    fn date_stamps_above_the_first_prose_go_headings_and_labels_stay() {
        let prose = "The first paragraph of the article, long enough to count as running prose: a sentence or two, and then some more words.";
        let html = format!(
            "<div><h1>Title</h1><p>4 Min Read</p><p>Analysis</p><time>03.04.2020</time>\
             <p>{prose}</p><p>On 3 May</p></div>"
        );
        assert_eq!(
            pruned_text(&html),
            format!("Title Analysis {prose} On 3 May")
        );
    }

    #[test]
    fn heading_slugs_are_not_class_names() {
        let prose = "Running text of the article, long enough to matter here. ".repeat(10);
        let html = format!(
            "<div><p>{prose}</p><section id='sharing-with-a-small-team'><p>Kept section.</p></section></div>"
        );
        assert!(pruned_text(&html).ends_with("Kept section."));
    }

    #[test]
    fn a_marked_node_holding_most_of_the_text_stays() {
        let prose = "Running text of the article, long enough to matter. ".repeat(10);
        let html = format!("<div class='comments-enabled'><p>{prose}</p></div>");
        assert!(pruned_text(&html).starts_with("Running text"));
    }

    #[test]
    fn short_blocks_after_the_last_prose_go_from_the_first_heading_or_link() {
        let prose = "The closing paragraph of the article, which is long enough to count as prose: a sentence or two at least.";
        let html = format!(
            "<div><p>{prose}</p><p>Short last words.</p><p>Share this: <a href=/s>Twitter</a></p>\
             <p>12.03.2020</p></div>"
        );
        assert_eq!(pruned_text(&html), format!("{prose} Short last words."));
        let html = format!("<div><p>{prose}</p><h3>More stories</h3><p>A teaser line</p></div>");
        assert_eq!(pruned_text(&html), prose);
    }

    #[test]
    fn wide_script_characters_weigh_as_words() {
        let chinese = Block {
            text:
                "这款产品具有极其重要的意义，因为这意味着未来的人工智能技术可能不需要人类来教它。"
                    .into(),
            ..Block::default()
        };
        assert!(chinese.is_prose());
        let latin = Block {
            text: "A line of forty characters, not prose.".into(),
            ..Block::default()
        };
        assert!(!latin.is_prose());
    }

    #[test]
    fn form_controls_go_however_large() {
        let options = "<option>Afghanistan</option><option>Albania</option>".repeat(40);
        let html = format!(
            "<body><p>A short paragraph of the page, the only running text it has.</p>\
             <form><select>{options}</select><button>Send</button></form></body>"
        );
        assert_eq!(
            body_text(parse(&html)),
            "A short paragraph of the page, the only running text it has."
        );
    }
}
