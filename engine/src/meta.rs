//! Store metadata: the format version, the recovery checkpoint and the
//! store's identity.
//!
//! ```text
//! Mformat      b"CRNM" | version u32 LE | crc u32 (of key ++ value)
//! Mcheckpoint  lsn u64 LE | crc u32 (of key ++ value)
//! Mstore       id 16 bytes | crc u32 (of key ++ value)      (format 3)
//! ```

use std::fmt;

use crate::error::{CorruptionKind, Location};
use crate::keys::{self, Fields, META_CHECKPOINT, META_FORMAT, META_STORE};

pub const STORE_MAGIC: [u8; 4] = *b"CRNM";
/// The store format version this build writes. Version 2 added reserved
/// slots (empty `W<lsn>` values, slots.rs), which a version-1 build would
/// take for damaged frames; version 3 the store's identity (`Mstore`), which
/// a version-2 build's verify would report as an unknown key; version 4
/// summaries whose next offset is their floor, above their newest index
/// entry (`Engine::advance_partitions`), which a version-3 build's open
/// would refuse as a damaged summary; version 5 topic ids (`T` keys,
/// topics.rs), which a version-4 build's verify would report as keys
/// outside its key spaces.
pub const FORMAT_VERSION: u32 = 5;
/// The oldest store format this build reads. An open of an older store
/// upgrades it to the current version once its recovery succeeds (in
/// recovery's last batch, before any slot is written), so that an older
/// build then refuses it with `UnsupportedFormat` instead of reporting
/// corruption. The steps of the open after recovery (the watermark, the
/// poison mark's removal) may still fail it: the store stays upgraded.
pub const FORMAT_VERSION_OLDEST: u32 = 1;
/// The first format whose stores carry `Mstore`: an older store gets one
/// from the open that upgrades it.
pub const FORMAT_STORE_ID: u32 = 3;
/// The first format with reserved slots (empty values under log keys,
/// slots.rs): in an older store an empty value is damage.
pub const FORMAT_SLOTS: u32 = 2;
/// The first format with recorded Kafka topic ids (`T` keys, topics.rs):
/// in an older store one is damage.
pub const FORMAT_TOPIC_IDS: u32 = 5;

/// True when this build reads stores of format `version`.
pub fn is_readable(version: u32) -> bool {
    (FORMAT_VERSION_OLDEST..=FORMAT_VERSION).contains(&version)
}

/// The damage a sealed format version below [`FORMAT_VERSION_OLDEST`] is.
pub(crate) fn format_below_oldest(found: u32) -> String {
    format!(
        "format version {found}, below the oldest ({FORMAT_VERSION_OLDEST}): no build writes it"
    )
}

pub fn encode_format(version: u32) -> Vec<u8> {
    let mut v = STORE_MAGIC.to_vec();
    v.extend_from_slice(&version.to_le_bytes());
    keys::seal(META_FORMAT, v)
}

/// Returns the stored format version.
pub fn decode_format(value: &[u8]) -> Result<u32, (Location, CorruptionKind)> {
    let loc = || Location::Meta { key: "format" };
    let v = match keys::unseal(META_FORMAT, value, 8) {
        Ok(v) => v,
        // A later format may grow this value, keeping its first 8 bytes
        // (FORMAT.md): a longer one that names a version past this build's
        // is that format's, refused by the caller as unsupported, not
        // reported as damage (which would send its owner to salvage a
        // healthy store). Its CRC is the later layout's to check.
        Err(CorruptionKind::TrailingBytes { .. })
            if value[0..4] == STORE_MAGIC && Fields(&value[4..8]).u32() > FORMAT_VERSION =>
        {
            return Ok(Fields(&value[4..8]).u32());
        }
        Err(k) => return Err((loc(), k)),
    };
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

/// The checkpoint LSN; refused past [`keys::LSN_MAX`] (no build writes
/// one, and recovery's arithmetic on it could overflow), for recovery and
/// verify alike.
pub fn decode_checkpoint(value: &[u8]) -> Result<u64, (Location, CorruptionKind)> {
    let loc = || Location::Meta { key: "checkpoint" };
    let v = keys::unseal(META_CHECKPOINT, value, 8).map_err(|k| (loc(), k))?;
    let checkpoint = Fields(v).u64();
    if checkpoint >= keys::LSN_MAX {
        return Err((
            loc(),
            CorruptionKind::BadMeta {
                detail: format!(
                    "checkpoint {checkpoint} is past the largest lsn {}",
                    keys::LSN_MAX
                ),
            },
        ));
    }
    Ok(checkpoint)
}

/// A store's identity: 128 random bits chosen when the store is created
/// (or first opened by a build that writes format 3), kept for its life
/// and copied by a backup.
///
/// The connector commits it to Kafka beside every offset, so that an
/// archive that finds Kafka's committed offset past its own can tell
/// whether another store committed it (another member of the group
/// archived those records) or this store did, before it lost them: it was
/// restored from an older backup, say. Only in the second case does the
/// archive fetch those records again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StoreId(pub u128);

impl StoreId {
    /// A new identity from the operating system's randomness.
    pub fn random() -> StoreId {
        StoreId(rand::random())
    }
}

/// 32 lowercase hex digits.
impl fmt::Display for StoreId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl std::str::FromStr for StoreId {
    type Err = String;

    fn from_str(s: &str) -> Result<StoreId, String> {
        if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("a store id is 32 hex digits, not {s:?}"));
        }
        u128::from_str_radix(s, 16)
            .map(StoreId)
            .map_err(|e| format!("store id {s:?}: {e}"))
    }
}

pub fn encode_store_id(id: StoreId) -> Vec<u8> {
    keys::seal(META_STORE, id.0.to_be_bytes().to_vec())
}

pub fn decode_store_id(value: &[u8]) -> Result<StoreId, (Location, CorruptionKind)> {
    let v =
        keys::unseal(META_STORE, value, 16).map_err(|k| (Location::Meta { key: "store" }, k))?;
    let mut b = [0u8; 16];
    b.copy_from_slice(v);
    Ok(StoreId(u128::from_be_bytes(b)))
}
