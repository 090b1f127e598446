//! Model test: random operations against the engine and an in-memory model.
//! Durable offsets and read results must match the model after every step,
//! with writes not yet synced neither read nor reported durable.
//!
//! Seeded: the seed is printed; `CAIRN_SEED=<n>` replays it.
//! `CAIRN_MODEL_CASES` sets the number of cases (default 48).

mod common;

use cairn_engine::fuzzing::model::{self, Durability, Op, Part};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..3usize, 0..3i64, 1..40usize, 1..3000usize)
            .prop_map(|(tp, gap, count, value_len)| Op::Append { tp, gap, count, value_len }),
        2 => (0..3usize, 1..30i64, 1..40usize).prop_map(|(tp, back, count)| Op::AppendDuplicate { tp, back, count }),
        2 => (0..3usize, 0..200i64).prop_map(|(tp, from)| Op::Read { tp, from }),
        1 => Just(Op::Reopen),
        1 => (0..3usize, 0..200i64).prop_map(|(tp, offset)| Op::Truncate { tp, offset }),
        1 => (0..3usize, 0..200i64).prop_map(|(tp, offset)| Op::Start { tp, offset }),
        1 => (0..3usize, 0..5i64).prop_map(|(tp, ahead)| Op::Advance { tp, ahead }),
        3 => (proptest::collection::vec(part(), 1..5), durability())
            .prop_map(|(parts, durability)| Op::Write { parts, durability }),
    ]
}

/// A batch of a multi-partition write: a partition may come twice.
fn part() -> impl Strategy<Value = Part> {
    (0..3usize, 0..3i64, 1..30usize, 1..3000usize).prop_map(|(tp, gap, count, value_len)| Part {
        tp,
        gap,
        count,
        value_len,
    })
}

fn durability() -> impl Strategy<Value = Durability> {
    prop_oneof![
        Just(Durability::None),
        Just(Durability::Synced),
        Just(Durability::Appended)
    ]
}

/// The check itself lives in the engine's fuzzing module, shared with the
/// `engine_model` cargo-fuzz target.
fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    model::check(&ops, dir.path()).map_err(TestCaseError::fail)
}

#[test]
fn engine_matches_model() {
    let seed = common::seed("engine_matches_model");
    let cases = std::env::var("CAIRN_MODEL_CASES")
        .ok()
        .map(|s| {
            s.parse()
                .unwrap_or_else(|_| panic!("CAIRN_MODEL_CASES must be a whole number"))
        })
        .unwrap_or(48);
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    let result = runner.run(&proptest::collection::vec(op(), 1..40), run);
    if let Err(e) = result {
        panic!("model test failed (replay with CAIRN_SEED={seed}): {e}");
    }
}
