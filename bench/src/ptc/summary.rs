//! Each round's ratios to the baselines measured in that round, and each
//! ratio's median over the rounds: what the targets are judged on.

use std::collections::BTreeMap;

use serde::Serialize;

use super::measure::CairnRun;
use super::peers::{KcatRun, PythonRun};
use super::{Peer, Round};

/// One policy's ratios in one round, each cairn's figure over a baseline
/// of the same round. `None` where the baseline was skipped, or a quantile
/// had too few samples.
#[derive(Debug, Clone, Serialize)]
pub struct Ratios {
    pub policy: String,
    pub p50_vs_floor: Option<f64>,
    pub p99_vs_floor: Option<f64>,
    pub pct_of_ceiling: f64,
    pub steady_pct_of_ceiling: Option<f64>,
    /// MB/s as a percentage of the disk's sequential bandwidth, measured in
    /// the same round (`Round::disk_bandwidth`).
    pub pct_of_disk_bandwidth: f64,
    /// records/s over kcat's.
    pub vs_kcat: Option<f64>,
    /// records/s over the Python loop's.
    pub vs_python: Option<f64>,
    /// Steady records/s ([`super::Steady`]) over kcat's, and over the
    /// Python loop's: since 2026-12-05, what the throughput targets are
    /// judged on, with `pct_of_ceiling`'s steady twin.
    pub steady_vs_kcat: Option<f64>,
    pub steady_vs_python: Option<f64>,
    /// put-to-commit p50 over the Python loop's write-to-commit p50.
    pub p50_vs_python: Option<f64>,
}

impl Ratios {
    pub fn of(run: &CairnRun, kcat: &Peer<KcatRun>, python: &Peer<PythonRun>) -> Ratios {
        let rps = run.throughput.records_per_s;
        let python = python.ran();
        let steady = |peer: Option<&super::Throughput>| {
            let (own, peer) = (run.throughput.steady?, peer?.steady?);
            Some(own.records_per_s / peer.records_per_s)
        };
        Ratios {
            policy: run.policy.clone(),
            p50_vs_floor: run.p50_vs_floor,
            p99_vs_floor: run.p99_vs_floor,
            pct_of_ceiling: run.pct_of_ceiling,
            steady_pct_of_ceiling: run.steady_pct_of_ceiling,
            pct_of_disk_bandwidth: run.pct_of_disk_bandwidth,
            vs_kcat: kcat.ran().map(|k| rps / k.throughput.records_per_s),
            vs_python: python.map(|p| rps / p.throughput.records_per_s),
            steady_vs_kcat: steady(kcat.ran().map(|k| &k.throughput)),
            steady_vs_python: steady(python.map(|p| &p.throughput)),
            p50_vs_python: python.and_then(|p| {
                let (own, loop_) = (run.put_to_commit.p50()?, p.write_to_commit.p50()?);
                Some(own as f64 / loop_.max(1) as f64)
            }),
        }
    }
}

/// A ratio the summary reports: its JSON name, how the table shows it,
/// and the target for it, which names the policy it is judged on
/// (the table prints it on that policy's row only).
pub struct Metric {
    pub name: &'static str,
    pub get: fn(&Ratios) -> Option<f64>,
    pub percent: bool,
    pub target: Option<(&'static str, &'static str)>,
}

/// The throughput targets are judged on the steady ratios since
/// 2026-12-05 (before, on the whole runs', whose windows end at different
/// points: [`super::Steady`]); the whole runs' are reported beside them.
pub const METRICS: [Metric; 10] = [
    Metric {
        name: "p50_vs_floor",
        get: |r| r.p50_vs_floor,
        percent: false,
        target: Some(("every-put", "<= 1.5x")),
    },
    Metric {
        name: "p99_vs_floor",
        get: |r| r.p99_vs_floor,
        percent: false,
        target: Some(("every-put", "<= 3x")),
    },
    Metric {
        name: "steady_pct_of_ceiling",
        get: |r| r.steady_pct_of_ceiling,
        percent: true,
        target: Some(("interval:100", ">= 80%")),
    },
    Metric {
        name: "pct_of_ceiling",
        get: |r| Some(r.pct_of_ceiling),
        percent: true,
        target: Some(("interval:100", "(whole runs)")),
    },
    Metric {
        name: "pct_of_disk_bandwidth",
        get: |r| Some(r.pct_of_disk_bandwidth),
        percent: true,
        target: Some(("interval:100", ">= 70% (at 1 KiB)")),
    },
    Metric {
        name: "steady_vs_kcat",
        get: |r| r.steady_vs_kcat,
        percent: false,
        target: Some(("interval:100", ">= 1x")),
    },
    Metric {
        name: "vs_kcat",
        get: |r| r.vs_kcat,
        percent: false,
        target: Some(("interval:100", "(whole runs)")),
    },
    Metric {
        name: "steady_vs_python",
        get: |r| r.steady_vs_python,
        percent: false,
        target: Some(("interval:100", ">= 5x")),
    },
    Metric {
        name: "vs_python",
        get: |r| r.vs_python,
        percent: false,
        target: Some(("interval:100", "(whole runs)")),
    },
    Metric {
        name: "p50_vs_python",
        get: |r| r.p50_vs_python,
        percent: false,
        target: Some(("every-put", "< 1x (the loop batches as cairn does)")),
    },
];

/// A ratio over the rounds that had it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub rounds: usize,
}

impl Spread {
    /// `None` when no round has the ratio. The median of an even count is
    /// the mean of the middle two.
    pub fn of(values: impl IntoIterator<Item = Option<f64>>) -> Option<Spread> {
        let mut v: Vec<f64> = values.into_iter().flatten().collect();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = match n {
            0 => return None,
            _ if n % 2 == 1 => v[n / 2],
            _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        };
        Some(Spread {
            median,
            min: v[0],
            max: v[n - 1],
            rounds: n,
        })
    }
}

/// One policy's ratios over the rounds, by [`Metric::name`]; a ratio no
/// round had is left out.
#[derive(Debug, Clone, Serialize)]
pub struct Medians {
    pub policy: String,
    #[serde(flatten)]
    pub ratios: BTreeMap<&'static str, Spread>,
}

pub fn medians(rounds: &[Round]) -> Vec<Medians> {
    let Some(first) = rounds.first() else {
        return Vec::new();
    };
    first
        .ratios
        .iter()
        .map(|r| &r.policy)
        .map(|policy| Medians {
            policy: policy.clone(),
            ratios: METRICS
                .iter()
                .filter_map(|m| {
                    let values = rounds
                        .iter()
                        .flat_map(|round| &round.ratios)
                        .filter(|r| &r.policy == policy)
                        .map(m.get);
                    Some((m.name, Spread::of(values)?))
                })
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_the_median_and_range_of_the_rounds_that_had_it() {
        let s = Spread::of([Some(3.0), None, Some(1.0), Some(2.0)]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.rounds), (2.0, 1.0, 3.0, 3));
        let s = Spread::of([Some(4.0), Some(1.0)]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.rounds), (2.5, 1.0, 4.0, 2));
        assert!(Spread::of([None, None]).is_none());
    }
}
