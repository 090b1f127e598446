//! What an offset reset error restarts: which assigned partitions fetch
//! again and from where, and which go on untouched.
//!
//! librdkafka stops a partition's fetch when its position falls out of
//! Kafka's log (retention deleted the records, or the log was cut back).
//! The consumer (consumer.rs) then judges the partitions the errors were
//! about, against the log's bounds (retention.rs), and restarts them. The
//! decision is kept here, apart from the broker reads, so that it can be
//! tested whole.
//!
//! # Invariants
//! - Every assigned partition is in exactly one of [`Plan::restart`] and
//!   [`Plan::going_on`].
//! - Only a judged partition (one the scope covers) is restarted or moved;
//!   every other one goes on where it is.
//! - A judged partition is moved only when it is out of the log, and only
//!   where the policy says ([`Standing::MoveTo`]).
//! - A judged partition in the log is restarted where it is (it must not
//!   stay stopped), unless no error named a partition and another judged
//!   one was out of the log: that explains the error, and the partition's
//!   fetch never stopped.

use std::collections::{BTreeMap, BTreeSet};

use cairn_engine::TopicPartition;
use rdkafka::Offset;

use crate::error::Result;
use crate::progress::Start;
use crate::retention::Standing;

/// The partitions a reset error (or several, before the restart) was
/// about: those named, or every assigned one when an error named none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ResetScope {
    All,
    These(BTreeSet<TopicPartition>),
}

impl ResetScope {
    /// Widen `wanted` by an error about `about` (`None`: it named none).
    pub(crate) fn add(wanted: &mut Option<ResetScope>, about: Option<TopicPartition>) {
        *wanted = Some(match (wanted.take(), about) {
            (Some(ResetScope::All), _) | (_, None) => ResetScope::All,
            (Some(ResetScope::These(mut tps)), Some(tp)) => {
                tps.insert(tp);
                ResetScope::These(tps)
            }
            (None, Some(tp)) => ResetScope::These(BTreeSet::from([tp])),
        });
    }

    pub(crate) fn covers(&self, tp: &TopicPartition) -> bool {
        match self {
            ResetScope::All => true,
            ResetScope::These(tps) => tps.contains(tp),
        }
    }
}

/// Where an assigned partition fetches from, as far as the consumer knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// At this offset: the next one it delivers, or where it started.
    At(i64),
    /// At Kafka's log start, and it has delivered nothing yet.
    Beginning,
    /// At Kafka's log end, and it has delivered nothing yet.
    End,
}

/// Where a partition fetches from: librdkafka's `position` while it has
/// one, or `consumed` where that is higher, else `consumed` (the offset
/// after the last record taken, or past the transaction markers the fetch
/// caught up past), unless an earlier reset moved the partition past it
/// since (its `start` is then higher), else its `start`. `None` for a
/// partition with no start recorded, which every assignment records
/// (rebalance.rs).
///
/// A fetch stop clears librdkafka's position, which is why the others are
/// needed. A position moves only with records taken, so past markers that
/// `SinkTask::caught_up` advanced the archive over it lags `consumed`:
/// judged there, a partition whose markers then aged out read as records
/// lost (stopping a run under `fail`) although its commit was past them
/// (seen in review, 2026-12-05). `consumed` is never past where the fetch
/// has been: it counts records taken and end-of-partition offsets reached.
pub(crate) fn place(
    position: Option<i64>,
    consumed: Option<i64>,
    start: Option<Start>,
) -> Option<Place> {
    let started_at = start.as_ref().and_then(Start::offset);
    let fetched = position.map(|p| consumed.map_or(p, |c| p.max(c)));
    if let Some(at) = fetched.or_else(|| consumed.max(started_at.filter(|_| consumed.is_some()))) {
        return Some(Place::At(at));
    }
    Some(match start? {
        Start::At(o) | Start::Refetch { from: o, .. } => Place::At(o),
        Start::Beginning => Place::Beginning,
        Start::End => Place::End,
    })
}

/// What a reset restarts.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The partitions whose fetch starts again, and from where.
    pub(crate) restart: BTreeMap<TopicPartition, Offset>,
    /// The partitions that go on where they are (only the eager protocol's
    /// restart assigns them again, there).
    pub(crate) going_on: BTreeMap<TopicPartition, Offset>,
    /// The restarted partitions the policy moved, and where to: each needs
    /// a new start.
    pub(crate) moved: Vec<(TopicPartition, i64)>,
    /// Judged partitions in the log restarted with no partition out of it
    /// to explain the error (stale, or from a fetch the check cannot see).
    pub(crate) unexplained: Vec<TopicPartition>,
}

/// Plan the restart for a reset error about `scope`: `place_of` says where
/// each assigned partition fetches from, and `standing` where a judged one
/// at an offset stands against Kafka's log (read only for judged
/// partitions at an offset).
pub(crate) fn plan(
    assigned: &[TopicPartition],
    scope: &ResetScope,
    mut place_of: impl FnMut(&TopicPartition) -> Result<Place>,
    mut standing: impl FnMut(&TopicPartition, i64) -> Result<Standing>,
) -> Result<Plan> {
    let mut plan = Plan::default();
    // Judged partitions in the log: restarted where they are unless an
    // error that named none is explained by another.
    let mut in_log: BTreeMap<TopicPartition, Offset> = BTreeMap::new();
    // Whether some judged partition is out of Kafka's log: what the error
    // was about.
    let mut explained = false;
    for tp in assigned {
        let judging = scope.covers(tp);
        let at = match place_of(tp)? {
            Place::At(at) => at,
            Place::Beginning if judging => {
                plan.restart.insert(tp.clone(), Offset::Beginning);
                continue;
            }
            Place::Beginning => {
                plan.going_on.insert(tp.clone(), Offset::Beginning);
                continue;
            }
            // Only a partition of an assignment that stopped the run: never
            // fetched, so no fetch of it stopped.
            Place::End => {
                plan.going_on.insert(tp.clone(), Offset::End);
                continue;
            }
        };
        if !judging {
            plan.going_on.insert(tp.clone(), Offset::Offset(at));
            continue;
        }
        match standing(tp, at)? {
            Standing::InLog => {
                in_log.insert(tp.clone(), Offset::Offset(at));
            }
            Standing::MoveTo(to) => {
                explained = true;
                plan.restart.insert(tp.clone(), Offset::Offset(to));
                plan.moved.push((tp.clone(), to));
            }
            Standing::Unknown => {
                plan.restart.insert(tp.clone(), Offset::Offset(at));
            }
        }
    }
    // A judged partition in the log that an error named starts again where
    // it is even when another was out of it: its own error may be one the
    // check cannot see, and it must not stay stopped.
    if explained && matches!(scope, ResetScope::All) {
        plan.going_on.append(&mut in_log);
    } else {
        if !explained {
            plan.unexplained = in_log.keys().cloned().collect();
        }
        plan.restart.append(&mut in_log);
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::{place, plan, Place, Plan, ResetScope};
    use crate::error::ConnectorError;
    use crate::progress::Start;
    use crate::retention::Standing;
    use cairn_engine::TopicPartition;
    use rdkafka::Offset;
    use std::collections::{BTreeMap, BTreeSet};

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("t", p)
    }

    /// Reset errors before a restart add up: the partitions they name, or
    /// every assigned one once an error names none.
    #[test]
    fn reset_errors_widen_their_scope() {
        let (a, b) = (tp(0), tp(1));
        let mut wanted = None;
        ResetScope::add(&mut wanted, Some(a.clone()));
        let scope = wanted.clone().unwrap();
        assert!(scope.covers(&a) && !scope.covers(&b));
        ResetScope::add(&mut wanted, Some(b.clone()));
        let scope = wanted.clone().unwrap();
        assert!(scope.covers(&a) && scope.covers(&b));
        assert!(!scope.covers(&TopicPartition::new("u", 0)));
        ResetScope::add(&mut wanted, None);
        assert_eq!(wanted, Some(ResetScope::All));
        ResetScope::add(&mut wanted, Some(a));
        assert_eq!(wanted, Some(ResetScope::All));
    }

    /// librdkafka's position wins, unless what was consumed is past it;
    /// without one (a stopped fetch clears it), the offset after the last
    /// record taken, unless a reset moved the partition past it; with
    /// nothing taken, where it started.
    #[test]
    fn a_partition_is_placed_where_its_fetch_goes_on() {
        // A position is where the fetch is, whatever else is known.
        assert_eq!(
            place(Some(7), Some(3), Some(Start::At(9))),
            Some(Place::At(7))
        );
        // Caught up past a transaction marker at 100 (the last record at
        // 99): the position stays at 100, the archive is at 101.
        assert_eq!(
            place(Some(100), Some(101), Some(Start::At(0))),
            Some(Place::At(101))
        );
        // Stopped after taking records below 5, started at 2.
        assert_eq!(place(None, Some(5), Some(Start::At(2))), Some(Place::At(5)));
        // Moved to 40 by an earlier reset after taking records below 5,
        // and nothing delivered since: 40, not 5 (which is out of the log).
        assert_eq!(
            place(None, Some(5), Some(Start::At(40))),
            Some(Place::At(40))
        );
        let refetch = Start::Refetch {
            from: 12,
            committed: 30,
        };
        assert_eq!(place(None, Some(20), Some(refetch)), Some(Place::At(20)));
        assert_eq!(place(None, None, Some(refetch)), Some(Place::At(12)));
        // Nothing taken: where it started.
        assert_eq!(place(None, None, Some(Start::At(2))), Some(Place::At(2)));
        assert_eq!(
            place(None, None, Some(Start::Beginning)),
            Some(Place::Beginning)
        );
        assert_eq!(place(None, None, Some(Start::End)), Some(Place::End));
        // Records taken from a log start: where they end.
        assert_eq!(
            place(None, Some(8), Some(Start::Beginning)),
            Some(Place::At(8))
        );
        // No start recorded: a bug the caller names.
        assert_eq!(place(None, None, None), None);
    }

    /// Plan over partitions 0..places.len(), each at `places[p]`, judged
    /// against `standings` (a judged partition at an offset with no
    /// standing given fails the test).
    fn plan_of(
        scope: &ResetScope,
        places: &[Place],
        standings: &BTreeMap<i32, Standing>,
    ) -> (Plan, BTreeSet<i32>) {
        let assigned: Vec<TopicPartition> = (0..places.len() as i32).map(tp).collect();
        let mut asked = BTreeSet::new();
        let plan = plan(
            &assigned,
            scope,
            |tp| Ok(places[tp.partition as usize]),
            |tp, at| {
                asked.insert(tp.partition);
                assert_eq!(Place::At(at), places[tp.partition as usize]);
                standings
                    .get(&tp.partition)
                    .cloned()
                    .ok_or_else(|| ConnectorError::Failed(format!("{tp} was not to be judged")))
            },
        )
        .unwrap();
        for p in 0..places.len() as i32 {
            assert!(
                plan.restart.contains_key(&tp(p)) != plan.going_on.contains_key(&tp(p)),
                "{p} must be in exactly one of restart and going on: {plan:?}"
            );
        }
        (plan, asked)
    }

    /// A named partition out of the log is moved where the policy says;
    /// one not named goes on untouched, and its bounds are never read.
    #[test]
    fn only_named_partitions_are_judged_and_moved() {
        let scope = ResetScope::These(BTreeSet::from([tp(1)]));
        let places = [Place::At(10), Place::At(3), Place::At(7)];
        let standings = BTreeMap::from([(1, Standing::MoveTo(50))]);
        let (plan, asked) = plan_of(&scope, &places, &standings);
        assert_eq!(asked, BTreeSet::from([1]));
        assert_eq!(plan.restart, BTreeMap::from([(tp(1), Offset::Offset(50))]));
        assert_eq!(plan.moved, vec![(tp(1), 50)]);
        assert_eq!(
            plan.going_on,
            BTreeMap::from([(tp(0), Offset::Offset(10)), (tp(2), Offset::Offset(7))])
        );
        assert!(plan.unexplained.is_empty());
    }

    /// An error that named no partition is explained by one out of the
    /// log: those in it never stopped, and go on.
    #[test]
    fn an_unnamed_error_is_explained_by_a_partition_out_of_the_log() {
        let places = [Place::At(10), Place::At(3)];
        let standings = BTreeMap::from([(0, Standing::InLog), (1, Standing::MoveTo(50))]);
        let (plan, asked) = plan_of(&ResetScope::All, &places, &standings);
        assert_eq!(asked, BTreeSet::from([0, 1]));
        assert_eq!(plan.restart, BTreeMap::from([(tp(1), Offset::Offset(50))]));
        assert_eq!(plan.going_on, BTreeMap::from([(tp(0), Offset::Offset(10))]));
        assert!(plan.unexplained.is_empty());
    }

    /// A named partition in the log starts again where it is even when
    /// another named one was out of it: its own error may be one the check
    /// cannot see, and it must not stay stopped.
    #[test]
    fn a_named_partition_in_the_log_is_restarted_where_it_is() {
        let scope = ResetScope::These(BTreeSet::from([tp(0), tp(1)]));
        let places = [Place::At(10), Place::At(3)];
        let standings = BTreeMap::from([(0, Standing::InLog), (1, Standing::MoveTo(50))]);
        let (plan, _) = plan_of(&scope, &places, &standings);
        assert_eq!(
            plan.restart,
            BTreeMap::from([(tp(0), Offset::Offset(10)), (tp(1), Offset::Offset(50))])
        );
        assert_eq!(plan.moved, vec![(tp(1), 50)]);
        assert!(plan.going_on.is_empty());
        assert!(plan.unexplained.is_empty());
    }

    /// With no partition out of the log, every judged one restarts where
    /// it is, and those in the log are named as unexplained; bounds that
    /// cannot be read restart it where it is too, unnamed.
    #[test]
    fn an_error_no_position_explains_restarts_where_they_are() {
        let places = [Place::At(10), Place::At(3), Place::At(4)];
        let standings = BTreeMap::from([
            (0, Standing::InLog),
            (1, Standing::Unknown),
            (2, Standing::InLog),
        ]);
        let (plan, _) = plan_of(&ResetScope::All, &places, &standings);
        assert_eq!(
            plan.restart,
            BTreeMap::from([
                (tp(0), Offset::Offset(10)),
                (tp(1), Offset::Offset(3)),
                (tp(2), Offset::Offset(4)),
            ])
        );
        assert!(plan.moved.is_empty());
        assert_eq!(plan.unexplained, vec![tp(0), tp(2)]);
    }

    /// A partition that delivered nothing from the log start is restarted
    /// there if judged, with no bounds read; one waiting for the log end
    /// never fetched, and goes on.
    #[test]
    fn partitions_with_no_offset_are_never_judged_against_bounds() {
        let places = [Place::Beginning, Place::End, Place::Beginning];
        let scope = ResetScope::These(BTreeSet::from([tp(0), tp(1)]));
        let (plan, asked) = plan_of(&scope, &places, &BTreeMap::new());
        assert!(asked.is_empty());
        assert_eq!(plan.restart, BTreeMap::from([(tp(0), Offset::Beginning)]));
        assert_eq!(
            plan.going_on,
            BTreeMap::from([(tp(1), Offset::End), (tp(2), Offset::Beginning)])
        );
        assert!(plan.unexplained.is_empty());
    }

    /// A failure to judge (a policy of `fail`) fails the plan.
    #[test]
    fn a_failed_judgement_fails_the_plan() {
        let result = plan(
            &[tp(0)],
            &ResetScope::All,
            |_| Ok(Place::At(1)),
            |tp, _| Err(ConnectorError::Failed(format!("{tp} out of the log"))),
        );
        assert!(matches!(result, Err(ConnectorError::Failed(m)) if m == "t/0 out of the log"));
    }
}
