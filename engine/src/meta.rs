//! Store metadata: the format version and the recovery checkpoint.
//!
//! ```text
//! Mformat      b"CRNM" | version u32 LE | crc u32 (of key ++ value)
//! Mcheckpoint  lsn u64 LE | crc u32 (of key ++ value)
//! ```

use crate::error::{CorruptionKind, Location};
use crate::keys::{self, Fields, META_CHECKPOINT, META_FORMAT};

pub const STORE_MAGIC: [u8; 4] = *b"CRNM";
/// The store format version this build writes. Version 2 added reserved
/// slots (empty `W<lsn>` values, slots.rs), which a version-1 build would
/// take for damaged frames.
pub const FORMAT_VERSION: u32 = 2;
/// The oldest store format this build reads. An open of a version-1 store
/// that succeeds upgrades it to version 2 (in recovery's last batch, before
/// any slot is written), so that a version-1 build then refuses it with
/// `UnsupportedFormat` instead of reporting corruption.
pub const FORMAT_VERSION_OLDEST: u32 = 1;

/// True when this build reads stores of format `version`.
pub fn is_readable(version: u32) -> bool {
    (FORMAT_VERSION_OLDEST..=FORMAT_VERSION).contains(&version)
}

pub fn encode_format(version: u32) -> Vec<u8> {
    let mut v = STORE_MAGIC.to_vec();
    v.extend_from_slice(&version.to_le_bytes());
    keys::seal(META_FORMAT, v)
}

/// Returns the stored format version.
pub fn decode_format(value: &[u8]) -> Result<u32, (Location, CorruptionKind)> {
    let loc = || Location::Meta { key: "format" };
    let v = keys::unseal(META_FORMAT, value, 8).map_err(|k| (loc(), k))?;
    if v[0..4] != STORE_MAGIC {
        let mut found = [0u8; 4];
        found.copy_from_slice(&v[0..4]);
        return Err((loc(), CorruptionKind::BadMagic { found }));
    }
    Ok(Fields(&v[4..]).u32())
}

pub fn encode_checkpoint(lsn: u64) -> Vec<u8> {
    keys::seal(META_CHECKPOINT, lsn.to_le_bytes().to_vec())
}

pub fn decode_checkpoint(value: &[u8]) -> Result<u64, (Location, CorruptionKind)> {
    let v = keys::unseal(META_CHECKPOINT, value, 8)
        .map_err(|k| (Location::Meta { key: "checkpoint" }, k))?;
    Ok(Fields(v).u64())
}
