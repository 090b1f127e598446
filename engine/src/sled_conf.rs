//! sled's settings file (`sled/conf`), checked before sled opens.
//!
//! sled 0.34.7 writes its settings as text (`segment_size: N`,
//! `use_compression: …`, `version: 0.34`, each on a line) followed by a
//! little-endian CRC-32 of that text, and refuses an open whose settings
//! differ from the file's, saying to change them "back" to the file's. It
//! checks the CRC only to log a warning. cairn opens every store with the same settings
//! ([`crate::config::EngineConfig::sled_config`]), so the one file a
//! cairn store can hold is known byte for byte: any other is damage to
//! that file (until 2026-12-07 a flipped digit read as a store of other
//! settings, "could not verify", with the advice to change cairn's to the
//! damaged value; found by an audit).
//!
//! # Invariants
//! - Reads the file only; never writes or removes it. A missing file is
//!   not damage (sled writes it as it creates a store), nor is one of at
//!   most 8 bytes, which sled takes for missing and writes again (a crash
//!   as a store was created can leave one empty); one that cannot be read
//!   is left for sled's open to report, as before.

use std::path::Path;

use crate::config::SLED_SEGMENT_BYTES;
use crate::error::{CorruptionKind, Error, Location};

/// The settings file's name in sled's folder.
pub const SLED_CONF_FILE: &str = "conf";

/// sled takes a settings file of at most this many bytes for a missing one,
/// and writes it again (its `Config::read_config`).
const SLED_REWRITES_BYTES_MAX: usize = 8;

/// The bytes sled 0.34.7 writes as `conf` for cairn's settings.
pub fn expected() -> Vec<u8> {
    let mut bytes =
        format!("segment_size: {SLED_SEGMENT_BYTES}\nuse_compression: false\nversion: 0.34\n")
            .into_bytes();
    let crc = crc32fast::hash(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    bytes
}

/// `Ok` unless the settings file in `sled_dir` is there, readable, and not
/// the one cairn's settings make: then `Corruption` at the file.
pub fn check(sled_dir: &Path) -> Result<(), Error> {
    let path = sled_dir.join(SLED_CONF_FILE);
    let Ok(found) = std::fs::read(&path) else {
        return Ok(());
    };
    if found.len() <= SLED_REWRITES_BYTES_MAX || found == expected() {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&found[..found.len().saturating_sub(4)]);
    Err(Error::corruption(
        Location::SledFiles {
            path: path.clone(),
            log_offset: None,
        },
        CorruptionKind::SledUnreadable {
            detail: format!(
                "sled's settings file is not the one cairn's settings make ({} bytes, reading {:?}; cairn writes {:?} and its CRC): the file is damaged, not the records. cairn opens every store with those settings, so sled rebuilds the file from them: move it aside (`mv {} {}`) and verify the archive (docs/OPERATIONS.md, \"When the archive is damaged\")",
                found.len(),
                text.chars().take(120).collect::<String>(),
                String::from_utf8_lossy(&expected()[..expected().len() - 4]),
                crate::error::shell_word(&path),
                crate::error::shell_word(&{
                    let mut aside = path.clone().into_os_string();
                    aside.push(".damaged");
                    std::path::PathBuf::from(aside)
                }),
            ),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file a store of this build holds is the one `expected` makes:
    /// written by sled itself, read back byte for byte.
    #[test]
    fn sled_writes_the_expected_file() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = crate::EngineConfig::new(dir.path());
        drop(cfg.open_sled().unwrap());
        let written = std::fs::read(cfg.sled_path().join(SLED_CONF_FILE)).unwrap();
        assert_eq!(written, expected());
        check(&cfg.sled_path()).unwrap();
    }

    /// The bytes themselves, pinned: `expected` and the test above are
    /// made from the same constant, and a change to it would pass them
    /// while every store written before is refused as damaged
    /// (docs/FORMAT.md gives these bytes).
    #[test]
    fn the_expected_bytes_are_pinned() {
        let mut pinned = b"segment_size: 8388608\nuse_compression: false\nversion: 0.34\n".to_vec();
        pinned.extend_from_slice(&[0x5e, 0xeb, 0xc1, 0xd7]);
        assert_eq!(expected(), pinned);
        assert_eq!(pinned.len(), 63);
    }

    /// Any change to the file is damage naming it; a missing file is not.
    #[test]
    fn a_changed_file_is_damage_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        check(dir.path()).unwrap();
        let good = expected();
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x01;
            std::fs::write(dir.path().join(SLED_CONF_FILE), &bad).unwrap();
            match check(dir.path()) {
                Err(Error::Corruption {
                    location:
                        Location::SledFiles {
                            path,
                            log_offset: None,
                        },
                    kind: CorruptionKind::SledUnreadable { detail },
                }) => {
                    assert_eq!(path, dir.path().join(SLED_CONF_FILE));
                    assert!(detail.contains("move it aside"), "{detail}");
                }
                other => panic!("byte {i}: {other:?}"),
            }
        }
        // Cut short: at most 8 bytes sled writes again; more is damage.
        for cut in [0, 1, 8] {
            std::fs::write(dir.path().join(SLED_CONF_FILE), &good[..cut]).unwrap();
            check(dir.path()).unwrap();
        }
        for cut in [9, good.len() - 1] {
            std::fs::write(dir.path().join(SLED_CONF_FILE), &good[..cut]).unwrap();
            assert!(check(dir.path()).is_err(), "cut at {cut}");
        }
    }

    /// The `mv` the error gives runs as written when pasted into a shell,
    /// in a folder whose name holds a space and a quote.
    #[test]
    fn the_advice_is_a_command_that_runs() {
        let dir = tempfile::tempdir().unwrap();
        let sled = dir.path().join("my arch'ive");
        std::fs::create_dir(&sled).unwrap();
        std::fs::write(
            sled.join(SLED_CONF_FILE),
            b"segment_size: 1\nuse_compression: false\n",
        )
        .unwrap();
        let detail = match check(&sled) {
            Err(Error::Corruption {
                kind: CorruptionKind::SledUnreadable { detail },
                ..
            }) => detail,
            other => panic!("{other:?}"),
        };
        let command = detail
            .split("(`")
            .nth(1)
            .and_then(|rest| rest.split("`)").next())
            .unwrap_or_else(|| panic!("no command in {detail}"));
        assert!(command.starts_with("mv "), "{command}");
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(command)
            .status()
            .unwrap();
        assert!(status.success(), "{command}");
        assert!(!sled.join(SLED_CONF_FILE).exists());
        assert!(
            sled.join(format!("{SLED_CONF_FILE}.damaged")).exists(),
            "{command}: {:?}",
            std::fs::read_dir(&sled).unwrap().collect::<Vec<_>>()
        );
    }
}
