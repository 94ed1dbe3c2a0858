//! Text normalization and word-trigram containment, shared by the extractor and its boilerplate
//! pass.

use std::collections::HashSet;
use std::hash::BuildHasher as _;

use foldhash::quality::FixedState;

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

/// Seed of the word hashes: fixed, so every set of the process hashes alike.
const WORD_SEED: u64 = 0x7472_6967_7261_6d73;

/// The distinct lowercased word trigrams of a text (words are runs of alphanumerics). Each word
/// is held as a 64-bit hash of its lowercased form rather than as a string: a trigram is then
/// three integers, so building and probing the set allocates nothing per word. Two different
/// words share a hash with odds of about 2^-64 a pair, far below anything containment can tell.
pub(crate) struct Trigrams(HashSet<[u64; 3], FixedState>);

impl Trigrams {
    /// The trigrams of `text`.
    pub(crate) fn of(text: &str) -> Self {
        let mut set = HashSet::with_hasher(FixedState::with_seed(WORD_SEED));
        for_each_trigram(text, |trigram| {
            set.insert(trigram);
            true
        });
        Trigrams(set)
    }

    /// Whether at least `CONTAINMENT` of these trigrams occur in `container`'s text. The
    /// container's trigrams are streamed, not collected: only the ones found here are kept,
    /// and reading stops once enough are found.
    pub(crate) fn contained_in(&self, container: &str) -> bool {
        if self.0.is_empty() {
            return false;
        }
        let enough = |found: usize| found as f64 / self.0.len() as f64 >= CONTAINMENT;
        let mut found = HashSet::with_hasher(FixedState::with_seed(WORD_SEED));
        for_each_trigram(container, |trigram| {
            if self.0.contains(&trigram) {
                found.insert(trigram);
            }
            !enough(found.len())
        });
        enough(found.len())
    }
}

/// Calls `visit` with each word trigram of `text` in order until it answers false.
fn for_each_trigram(text: &str, mut visit: impl FnMut([u64; 3]) -> bool) {
    let state = FixedState::with_seed(WORD_SEED);
    let mut lowered = String::new();
    let mut window = [0u64; 3];
    let mut words = 0usize;
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        lowered.clear();
        if word.is_ascii() {
            lowered.extend(word.chars().map(|c| c.to_ascii_lowercase()));
        } else {
            lowered.push_str(&word.to_lowercase());
        }
        window = [window[1], window[2], state.hash_one(lowered.as_str())];
        words += 1;
        if words >= 3 && !visit(window) {
            return;
        }
    }
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

    #[test]
    fn containment_counts_distinct_trigrams_case_blind() {
        let wanted = Trigrams::of("The quick brown fox jumps over the lazy dog");
        // All seven trigrams, in other case and punctuation, inside a longer text.
        assert!(wanted.contained_in("Intro. THE QUICK, brown fox jumps over the lazy dog! Outro"));
        // Six of seven (86%) is under the 90% line.
        assert!(!wanted.contained_in("the quick brown fox jumps over the lazy"));
        // Repeating one trigram does not count it twice.
        assert!(!Trigrams::of("a b c d").contained_in("a b c a b c a b c"));
        // Non-ASCII words lowercase as words: final sigma included.
        assert!(Trigrams::of("ΟΔΟΣ ΚΑΙ ΣΠΙΤΙ").contained_in("οδος και σπιτι"));
        assert!(
            !Trigrams::of("two words").contained_in("two words"),
            "no trigram at all"
        );
    }
}
