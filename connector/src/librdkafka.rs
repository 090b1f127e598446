//! What cairn's own producers (restore, dead letters) share about
//! librdkafka: how its log lines reach `tracing`, and which `-X` keys set the
//! message timeout.

use std::collections::BTreeMap;

use rdkafka::config::RDKafkaLogLevel;

/// `message.timeout.ms` and its alias: the same setting.
pub(crate) const MESSAGE_TIMEOUT_KEYS: [&str; 2] = ["message.timeout.ms", "delivery.timeout.ms"];

/// The message timeout `-X` sets, if it sets one that parses.
pub(crate) fn message_timeout_ms(kafka: &BTreeMap<String, String>) -> Option<u64> {
    MESSAGE_TIMEOUT_KEYS
        .iter()
        .find_map(|k| kafka.get(*k))
        .and_then(|v| v.parse().ok())
}

/// librdkafka's log lines as rust-rdkafka's default context logs them.
pub(crate) fn log_to_tracing(level: RDKafkaLogLevel, fac: &str, message: &str) {
    match level {
        RDKafkaLogLevel::Emerg
        | RDKafkaLogLevel::Alert
        | RDKafkaLogLevel::Critical
        | RDKafkaLogLevel::Error => {
            tracing::error!(target: "librdkafka", "librdkafka: {fac} {message}")
        }
        RDKafkaLogLevel::Warning => {
            tracing::warn!(target: "librdkafka", "librdkafka: {fac} {message}")
        }
        RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
            tracing::info!(target: "librdkafka", "librdkafka: {fac} {message}")
        }
        RDKafkaLogLevel::Debug => {
            tracing::debug!(target: "librdkafka", "librdkafka: {fac} {message}")
        }
    }
}

/// [`log_to_tracing`], with librdkafka's configuration warnings at debug:
/// for a client given the run's whole `-X` map, where the properties meant
/// for another kind of client are expected to be ignored.
pub(crate) fn log_ignoring_confwarn(level: RDKafkaLogLevel, fac: &str, message: &str) {
    if fac == "CONFWARN" {
        tracing::debug!(target: "librdkafka", "librdkafka: {fac} {message}");
    } else {
        log_to_tracing(level, fac, message);
    }
}
