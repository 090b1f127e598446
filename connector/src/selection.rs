//! Which archived records a reading command takes (`export`, `restore`).
//!
//! One place for the checks, so that the commands agree: a topic or
//! partition the archive does not hold, or an empty offset range, is an
//! error that says so, never an empty result that looks like success.
//! (A range that meets no record because it falls in a gap of offsets is
//! seen only once read: export refuses it when its reads find nothing,
//! restore before it produces anything. Restore reports a partition that
//! has nothing in the range, beside others that do, as "nothing in range",
//! as it does a partition a resumed restore finished.)

use cairn_engine::PartitionInfo;

use crate::error::{ConnectorError, Result};

/// A selection of archived records: topics (all when empty), one partition
/// number or all, and the archived offsets `from..to`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Selection {
    pub topics: Vec<String>,
    pub partition: Option<i32>,
    /// First archived offset (inclusive).
    pub from: i64,
    /// Stop before this archived offset (exclusive).
    pub to: Option<i64>,
}

impl Selection {
    /// The offset range on its own.
    pub fn check_range(&self) -> Result<()> {
        if self.from < 0 {
            return Err(ConnectorError::Config(format!(
                "--from {}: must be at least 0",
                self.from
            )));
        }
        match self.to {
            Some(to) if to <= self.from => Err(ConnectorError::Config(format!(
                "--to {to}: must be above --from {}",
                self.from
            ))),
            _ => Ok(()),
        }
    }

    /// The selected partitions of `archived`. Every named topic must be in
    /// the archive, and a named partition in one of the chosen topics;
    /// `also_named` are further topic names the caller requires (restore's
    /// `--rename` sources).
    pub fn choose(
        &self,
        archived: Vec<PartitionInfo>,
        also_named: &[&str],
    ) -> Result<Vec<PartitionInfo>> {
        self.check_range()?;
        // Sets, looked up per name and per partition: a list of tens of
        // thousands of names (`--topic`, a live request's) against as many
        // partitions was a comparison of every pair.
        let held_topics: std::collections::HashSet<&str> =
            archived.iter().map(|p| p.tp.topic.as_str()).collect();
        let mut named: Vec<&str> = self.topics.iter().map(String::as_str).collect();
        named.extend_from_slice(also_named);
        for t in named {
            if !held_topics.contains(t) {
                let mut held: Vec<String> = archived
                    .iter()
                    .map(|p| format!("{:?}", p.tp.topic))
                    .collect();
                held.dedup();
                // The first few, as other lists in errors are (until
                // 2026-12-05 every topic: one line of hundreds of KB for an
                // archive of tens of thousands).
                let held = if held.is_empty() {
                    "nothing".to_owned()
                } else {
                    first_few(held.into_iter())
                };
                return Err(ConnectorError::Config(format!(
                    "topic {t:?}: the archive holds no such topic (it holds {held})"
                )));
            }
        }
        let wanted: std::collections::HashSet<&str> =
            self.topics.iter().map(String::as_str).collect();
        let (chosen, others): (Vec<_>, Vec<_>) = archived.into_iter().partition(|p| {
            (wanted.is_empty() || wanted.contains(p.tp.topic.as_str()))
                && self.partition.is_none_or(|n| n == p.tp.partition)
        });
        if let (Some(n), true) = (self.partition, chosen.is_empty()) {
            // What the chosen topics hold instead (every topic, if none
            // was named).
            let topics: Vec<_> = others
                .into_iter()
                .filter(|p| wanted.is_empty() || wanted.contains(p.tp.topic.as_str()))
                .collect();
            return Err(ConnectorError::Config(format!(
                "--partition {n}: the archive holds no such partition of the chosen topics (they hold {})",
                held(&topics)
            )));
        }
        // A named topic without partition N would be left out without a
        // word while the others are read.
        if let Some(n) = self.partition {
            let chosen_topics: std::collections::HashSet<&str> =
                chosen.iter().map(|p| p.tp.topic.as_str()).collect();
            for t in &self.topics {
                if !chosen_topics.contains(t.as_str()) {
                    let of_t: Vec<_> = others
                        .iter()
                        .filter(|p| &p.tp.topic == t)
                        .cloned()
                        .collect();
                    return Err(ConnectorError::Config(format!(
                        "--partition {n}: the archive holds no partition {n} of topic {t:?} (it holds {})",
                        held(&of_t)
                    )));
                }
            }
        }
        self.check_held(&chosen)?;
        Ok(chosen)
    }

    /// Whether a range of offsets was given (`--from` above 0, or `--to`).
    pub fn ranged(&self) -> bool {
        self.from > 0 || self.to.is_some()
    }

    /// The chosen partitions a given `--from` lies below, whose range
    /// still meets what they hold: their first records were pruned, or
    /// never archived (the archive started later), and the read begins at
    /// their first offset. Said, not refused: the rest of the range is
    /// there. `None` when there is none, or no `--from` was given. Until
    /// 2026-12-05 an export or restore of `--from 100` that began at 150
    /// said nothing (seen in review).
    pub fn starts_below_held(&self, chosen: &[PartitionInfo]) -> Option<String> {
        if self.from == 0 {
            return None;
        }
        let later: Vec<&PartitionInfo> = chosen
            .iter()
            .filter(|p| self.from < p.first_offset && self.meets(p))
            .collect();
        if later.is_empty() {
            return None;
        }
        Some(format!(
            "--from {}: below the first offset held of {}; read from there (the records below were pruned, or never archived)",
            self.from,
            first_few(later.iter().map(|p| format!("{} ({})", p.tp, p.first_offset)))
        ))
    }

    /// The error of a range that met no record, although it lies within
    /// what the chosen partitions hold: it fell into a gap of offsets.
    pub fn nothing_in_range(&self) -> ConnectorError {
        ConnectorError::Config(format!(
            "{} (a gap in their offsets: records compacted away before they were archived, offsets taken by transaction markers, records over --record-bytes-max set aside by --on-oversize skip or dead-letter, or records that aged out of Kafka before they were archived, passed by --on-offset-out-of-range earliest)",
            self.no_records_there()
        ))
    }

    /// The start of either error of a range that meets no record.
    fn no_records_there(&self) -> String {
        let to = self.to.map_or("the end".to_owned(), |to| to.to_string());
        format!(
            "offsets {}..{to}: the chosen partitions hold no records there",
            self.from
        )
    }

    /// Whether the range overlaps the offsets `p` holds (a partition that
    /// holds no record meets none).
    fn meets(&self, p: &PartitionInfo) -> bool {
        p.record_count > 0
            && self.from < p.next_offset
            && self.to.is_none_or(|to| to > p.first_offset)
    }

    /// A range given (`--from` above 0, or `--to`) must meet what one of
    /// the chosen partitions holds: after a prune, say, `--to` below the
    /// first offset left selects nothing, and an empty result would look
    /// like success.
    fn check_held(&self, chosen: &[PartitionInfo]) -> Result<()> {
        let ranged = self.ranged();
        if !ranged || chosen.iter().any(|p| self.meets(p)) {
            return Ok(());
        }
        // An archive that holds no partition at all meets no range either.
        let held = if chosen.is_empty() {
            "nothing: the archive holds no partition".to_owned()
        } else {
            held(chosen)
        };
        Err(ConnectorError::Config(format!(
            "{} (they hold {held})",
            self.no_records_there(),
        )))
    }
}

/// What `chosen` hold, for an error: each partition's offsets, or nothing
/// and its next offset ([`first_few`]).
pub(crate) fn held(chosen: &[PartitionInfo]) -> String {
    if chosen.is_empty() {
        return "no partition".to_owned();
    }
    first_few(chosen.iter().map(|p| {
        if p.record_count == 0 {
            format!("{} nothing (next offset {})", p.tp, p.next_offset)
        } else {
            format!("{} {}..{}", p.tp, p.first_offset, p.next_offset)
        }
    }))
}

/// A list for an error: the first 8 items, and how many more, so that an
/// archive of thousands of partitions does not make one line of them.
pub(crate) fn first_few(items: impl ExactSizeIterator<Item = String>) -> String {
    const SHOWN: usize = 8;
    let more = items.len().saturating_sub(SHOWN);
    let mut shown: Vec<String> = items.take(SHOWN).collect();
    if more > 0 {
        shown.push(format!("and {more} more"));
    }
    shown.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_engine::TopicPartition;

    /// A topic the archive lacks is refused with the first few topics it
    /// holds, not all of them.
    #[test]
    fn an_unknown_topic_lists_the_first_few_held() {
        let archived: Vec<_> = (0..10_000)
            .flat_map(|i| {
                [
                    info(&format!("topic-{i:05}"), 0),
                    info(&format!("topic-{i:05}"), 1),
                ]
            })
            .collect();
        let s = Selection {
            topics: vec!["typo".into()],
            partition: None,
            from: 0,
            to: None,
        };
        let e = s.choose(archived, &[]).unwrap_err().to_string();
        assert!(
            e.contains("(it holds \"topic-00000\", \"topic-00001\",")
                && e.contains("and 9992 more)"),
            "{e}"
        );
        assert!(e.len() < 400, "{} bytes: {e}", e.len());
    }

    fn info(topic: &str, partition: i32) -> PartitionInfo {
        PartitionInfo {
            tp: TopicPartition::new(topic, partition),
            first_offset: 0,
            next_offset: 10,
            record_count: 10,
            payload_bytes: 100,
        }
    }

    fn archive() -> Vec<PartitionInfo> {
        vec![info("a", 0), info("a", 1), info("b", 0)]
    }

    fn err(r: Result<Vec<PartitionInfo>>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn chooses_by_topic_and_partition() {
        let all = Selection::default().choose(archive(), &[]).unwrap();
        assert_eq!(all.len(), 3);
        let s = Selection {
            topics: vec!["a".into()],
            partition: Some(1),
            ..Default::default()
        };
        let got = s.choose(archive(), &[]).unwrap();
        assert_eq!(
            got.iter().map(|p| &p.tp).collect::<Vec<_>>(),
            [&TopicPartition::new("a", 1)]
        );
    }

    #[test]
    fn refuses_what_the_archive_does_not_hold() {
        let s = Selection {
            topics: vec!["typo".into()],
            ..Default::default()
        };
        let e = err(s.choose(archive(), &[]));
        assert!(
            e.contains("\"typo\"") && e.contains("holds \"a\", \"b\""),
            "{e}"
        );
        let e = err(Selection::default().choose(archive(), &["c"]));
        assert!(e.contains("\"c\""), "{e}");
        let e = err(s.choose(Vec::new(), &[]));
        assert!(e.contains("holds nothing"), "{e}");
        let s = Selection {
            topics: vec!["b".into()],
            partition: Some(1),
            ..Default::default()
        };
        let e = err(s.choose(archive(), &[]));
        assert!(e.contains("--partition 1"), "{e}");
    }

    #[test]
    fn says_which_partitions_start_past_from() {
        let mut later = info("a", 1);
        later.first_offset = 6;
        let mut emptied = info("b", 0);
        (emptied.first_offset, emptied.record_count) = (10, 0);
        let chosen = [info("a", 0), later, emptied];
        let said = |from, to| {
            Selection {
                from,
                to,
                ..Default::default()
            }
            .starts_below_held(&chosen)
        };
        assert_eq!(
            said(4, None).as_deref(),
            Some("--from 4: below the first offset held of a/1 (6); read from there (the records below were pruned, or never archived)")
        );
        // No --from, one at or past the first offset, or a range that
        // ends before it (nothing of a/1 read): nothing to say.
        for (from, to) in [(0, None), (6, None), (7, Some(9)), (4, Some(6))] {
            assert_eq!(said(from, to), None, "{from}..{to:?}");
        }
    }

    #[test]
    fn refuses_an_empty_or_negative_range() {
        for (from, to) in [(-1, None), (5, Some(5)), (5, Some(4))] {
            let s = Selection {
                from,
                to,
                ..Default::default()
            };
            assert!(s.choose(archive(), &[]).is_err(), "{from} {to:?}");
        }
        let s = Selection {
            from: 5,
            to: Some(6),
            ..Default::default()
        };
        assert!(s.check_range().is_ok());
    }

    #[test]
    fn refuses_a_range_that_meets_nothing_held() {
        // Every partition holds 0..10.
        for (from, to, ok) in [
            (0, None, true),
            (9, None, true),
            (10, None, false),
            (5000, None, false),
            (0, Some(1), true),
            (3, Some(4), true),
        ] {
            let s = Selection {
                from,
                to,
                ..Default::default()
            };
            let got = s.choose(archive(), &[]);
            assert_eq!(got.is_ok(), ok, "{from} {to:?}: {got:?}");
        }
        let e = err(Selection {
            from: 10,
            ..Default::default()
        }
        .choose(archive(), &[]));
        assert!(
            e.contains("offsets 10..the end") && e.contains("a/0 0..10, a/1 0..10, b/0 0..10"),
            "{e}"
        );
        // Pruned down to its next offset, a partition holds nothing.
        let mut pruned = info("a", 0);
        pruned.first_offset = 10;
        pruned.record_count = 0;
        let s = Selection {
            to: Some(5),
            ..Default::default()
        };
        let e = err(s.choose(vec![pruned.clone()], &[]));
        assert!(e.contains("a/0 nothing (next offset 10)"), "{e}");
        // A range below what a prune left.
        pruned.record_count = 5;
        pruned.first_offset = 5;
        assert!(s.choose(vec![pruned], &[]).is_err());
        // No range: an archive of empty partitions exports nothing, fine;
        // and so does one of no partition at all, but not for a range.
        let mut empty = info("a", 0);
        empty.record_count = 0;
        empty.first_offset = 10;
        assert!(Selection::default().choose(vec![empty], &[]).is_ok());
        assert!(Selection::default().choose(vec![], &[]).is_ok());
        let e = err(Selection {
            from: 100,
            ..Default::default()
        }
        .choose(vec![], &[]));
        assert!(
            e.contains("offsets 100..the end: the chosen partitions hold no records there (they hold nothing: the archive holds no partition)"),
            "{e}"
        );
    }

    #[test]
    fn a_partition_not_held_is_refused_naming_what_the_topic_holds() {
        let s = Selection {
            topics: vec!["a".into()],
            partition: Some(7),
            ..Default::default()
        };
        let e = err(s.choose(archive(), &[]));
        assert!(
            e.contains("--partition 7: the archive holds no such partition of the chosen topics (they hold a/0 0..10, a/1 0..10)"),
            "{e}"
        );
        // Without a topic: every topic's.
        let s = Selection {
            partition: Some(7),
            ..Default::default()
        };
        let e = err(s.choose(archive(), &[]));
        assert!(
            e.contains("(they hold a/0 0..10, a/1 0..10, b/0 0..10)"),
            "{e}"
        );
        // Two topics named, one without the partition: refused, not read
        // without it (`b` has only partition 0).
        let s = Selection {
            topics: vec!["a".into(), "b".into()],
            partition: Some(1),
            ..Default::default()
        };
        let e = err(s.choose(archive(), &[]));
        assert!(
            e.contains("--partition 1: the archive holds no partition 1 of topic \"b\" (it holds b/0 0..10)"),
            "{e}"
        );
        // Every topic (none named): each topic's partition 1 that exists.
        let s = Selection {
            partition: Some(1),
            ..Default::default()
        };
        let chosen = s.choose(archive(), &[]).unwrap();
        assert_eq!(chosen.len(), 1);
        assert_eq!(chosen[0].tp, TopicPartition::new("a", 1));
    }
}
