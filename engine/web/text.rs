//! Text normalization and word-trigram containment, shared by the extractor and its boilerplate
//! pass.

use std::collections::HashSet;

use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfc_quick};

/// Collapses every run of Unicode whitespace (NBSP included) to one space, trims, and puts the
/// result in Unicode Normalization Form C, so that the same words always read as the same code
/// points whichever way the page encoded them (precomposed or combining sequences).
pub(crate) fn normalize_whitespace(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for word in text.split(char::is_whitespace).filter(|w| !w.is_empty()) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    if is_nfc_quick(out.chars()) == IsNormalized::Yes {
        out
    } else {
        out.nfc().collect()
    }
}

/// Share of a text's word trigrams that must lie inside a container for the text to count as
/// taken from it.
const CONTAINMENT: f64 = 0.9;

/// The lowercased word trigrams of a text (words are runs of alphanumerics).
pub(crate) fn trigrams(text: &str) -> HashSet<(String, String, String)> {
    let words: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    words
        .windows(3)
        .map(|w| (w[0].clone(), w[1].clone(), w[2].clone()))
        .collect()
}

/// Whether at least `CONTAINMENT` of `wanted`'s trigrams occur in `container`'s.
pub(crate) fn contained(
    wanted: &HashSet<(String, String, String)>,
    container: &HashSet<(String, String, String)>,
) -> bool {
    if wanted.is_empty() {
        return false;
    }
    let hits = wanted.iter().filter(|t| container.contains(*t)).count();
    hits as f64 / wanted.len() as f64 >= CONTAINMENT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_composed_to_nfc() {
        assert_eq!(
            normalize_whitespace("Cafe\u{301}  au lait"),
            "Caf\u{e9} au lait"
        );
        // A composition exclusion: NFC keeps the Bengali yya decomposed.
        assert_eq!(normalize_whitespace("\u{9df}"), "\u{9af}\u{9bc}");
    }
}
