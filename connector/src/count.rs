//! Counts in words: "1 record", "2 records", "1 index entry".
//!
//! Report lines are read by people, and "1 records" reads as a slip; every
//! count a command prints in a sentence goes through [`counted`].

/// `n` and the noun, plural unless `n` is 1. The plural of a noun ending in
/// a consonant and `y` is `-ies` ("entry", "entries"); of any other, `-s`
/// (cairn's nouns need no other rule).
pub(crate) fn counted(n: impl Into<u64>, noun: &str) -> String {
    let n = n.into();
    if n == 1 {
        return format!("1 {noun}");
    }
    match noun.strip_suffix('y') {
        Some(stem) if !stem.ends_with(['a', 'e', 'i', 'o', 'u']) => format!("{n} {stem}ies"),
        _ => format!("{n} {noun}s"),
    }
}

/// [`counted`] as the subject of "was" or "were": "1 record was",
/// "2 records were".
pub(crate) fn counted_were(n: impl Into<u64>, noun: &str) -> String {
    let n = n.into();
    format!(
        "{} {}",
        counted(n, noun),
        if n == 1 { "was" } else { "were" }
    )
}

#[cfg(test)]
mod tests {
    use super::{counted, counted_were};

    #[test]
    fn the_verb_agrees_with_the_count() {
        assert_eq!(counted_were(1u64, "record"), "1 record was");
        assert_eq!(counted_were(0u64, "record"), "0 records were");
        assert_eq!(counted_were(3u64, "entry"), "3 entries were");
    }

    #[test]
    fn one_is_singular_and_the_rest_plural() {
        assert_eq!(counted(1u64, "record"), "1 record");
        assert_eq!(counted(0u64, "record"), "0 records");
        assert_eq!(counted(2u64, "record"), "2 records");
        assert_eq!(counted(1u64, "index entry"), "1 index entry");
        assert_eq!(counted(3u64, "index entry"), "3 index entries");
        assert_eq!(counted(2u64, "key"), "2 keys");
        assert_eq!(
            counted(u64::MAX, "payload byte"),
            format!("{} payload bytes", u64::MAX)
        );
    }
}
