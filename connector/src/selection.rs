//! Which archived records a reading command takes (`export`, `restore`).
//!
//! One place for the checks, so that the commands agree: a topic or
//! partition the archive does not hold, or an empty offset range, is an
//! error that says so, never an empty result that looks like success.

use cairn_engine::PartitionInfo;

use crate::error::{ConnectorError, Result};

/// A selection of archived records: topics (all when empty), one partition
/// number or all, and the archived offsets `from..to`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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

    /// Whether the partition is selected.
    pub fn wants(&self, topic: &str, partition: i32) -> bool {
        (self.topics.is_empty() || self.topics.iter().any(|t| t == topic))
            && self.partition.is_none_or(|p| p == partition)
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
        let mut named: Vec<&str> = self.topics.iter().map(String::as_str).collect();
        named.extend_from_slice(also_named);
        for t in named {
            if !archived.iter().any(|p| p.tp.topic == t) {
                let mut held: Vec<String> = archived
                    .iter()
                    .map(|p| format!("{:?}", p.tp.topic))
                    .collect();
                held.dedup();
                let held = if held.is_empty() {
                    "nothing".to_owned()
                } else {
                    held.join(", ")
                };
                return Err(ConnectorError::Config(format!(
                    "topic {t:?}: the archive holds no such topic (it holds {held})"
                )));
            }
        }
        let chosen: Vec<_> = archived
            .into_iter()
            .filter(|p| self.wants(&p.tp.topic, p.tp.partition))
            .collect();
        if let (Some(n), true) = (self.partition, chosen.is_empty()) {
            return Err(ConnectorError::Config(format!(
                "--partition {n}: the archive holds no such partition of the chosen topics"
            )));
        }
        Ok(chosen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_engine::TopicPartition;

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
}
