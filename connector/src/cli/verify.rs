//! `cairn verify`: check every frame, index entry and summary.

use std::process::ExitCode;

use cairn_engine::{verify_store, EngineConfig};

use super::outln;
use crate::error::Result;

#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub data: super::DataArg,
}

pub async fn run(args: VerifyArgs) -> Result<ExitCode> {
    let cfg = EngineConfig::new(&args.data.data);
    let r = verify_store(&cfg)?;
    outln!(
        "verified {}: {} frames ({} tombstones), {} entries, {} records, {} payload bytes, {} index entries, {} partitions",
        args.data.data.display(),
        r.frames,
        r.tombstones,
        r.entries,
        r.records,
        r.payload_bytes,
        r.index_entries,
        r.partitions
    )?;
    if r.is_clean() {
        outln!("clean")?;
        return Ok(ExitCode::SUCCESS);
    }
    for p in &r.problems {
        outln!("problem: {p}")?;
    }
    if r.problems_unlisted > 0 {
        outln!("... and {} more problems", r.problems_unlisted)?;
    }
    outln!("{} problems", r.problem_count())?;
    Ok(ExitCode::from(1))
}
