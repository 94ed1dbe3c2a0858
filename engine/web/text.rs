//! Text normalization shared by the extractor and its boilerplate pass.

/// Collapses every run of Unicode whitespace (NBSP included) to one space and trims.
pub(crate) fn normalize_whitespace(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for word in text.split(char::is_whitespace).filter(|w| !w.is_empty()) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}
