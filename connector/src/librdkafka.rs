//! What cairn's clients share about librdkafka: how its log lines reach
//! `tracing`, how a `-X` key is looked up (`topic.` prefix included),
//! which keys set the message timeout, and how a command waits for the
//! brokers to answer a read.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::client::Client;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, ConsumerContext};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::metadata::Metadata;
use rdkafka::producer::{BaseProducer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, ClientContext};

use crate::error::{ConnectorError, Result};

/// `message.timeout.ms` and its alias: the same setting.
pub(crate) const MESSAGE_TIMEOUT_KEYS: [&str; 2] = ["message.timeout.ms", "delivery.timeout.ms"];

/// The `-X` settings of `key`, as (name given, value): under its own name,
/// and under librdkafka's `topic.` prefix, which librdkafka strips from a
/// topic-level property (`topic.auto.offset.reset` sets
/// `auto.offset.reset`). A check of a key looks at both, or the prefix
/// would slip a refused setting past it.
pub fn settings_of<'a>(
    kafka: &'a BTreeMap<String, String>,
    key: &str,
) -> impl Iterator<Item = (&'a str, &'a str)> {
    [key.to_owned(), format!("topic.{key}")]
        .into_iter()
        .filter_map(move |k| kafka.get_key_value(&k))
        .map(|(k, v)| (k.as_str(), v.as_str()))
}

/// An error code librdkafka gives as the C `int` it is (`None` for no
/// error). Read as that, not as the bindings' enum: librdkafka passes a
/// broker's code it does not know through as it came, and an enum value
/// with no variant would be undefined behaviour; such a code is `Unknown`.
pub(crate) fn error_code(code: i32) -> Option<RDKafkaErrorCode> {
    use rdkafka::bindings::rd_kafka_resp_err_t as E;
    match E::try_from(code) {
        Ok(E::RD_KAFKA_RESP_ERR_NO_ERROR) => None,
        Ok(e) => Some(e.into()),
        Err(_) => Some(RDKafkaErrorCode::Unknown),
    }
}

/// Whether `-X` gives any of `names` (one property's names), under either
/// form [`settings_of`] looks at: a default of cairn's for it is then left
/// unset, since librdkafka takes settings in a hash map's order and cairn's
/// under another name would win in some runs.
pub(crate) fn given_any(kafka: &BTreeMap<String, String>, names: &[&str]) -> bool {
    names.iter().any(|k| settings_of(kafka, k).next().is_some())
}

/// The names of the settings that give librdkafka its TLS trust anchors
/// (`ssl.ca.certificate.stores` is Windows' only).
const CA_KEYS: [&str; 2] = ["ssl.ca.location", "ssl.ca.pem"];

/// Where the vendored OpenSSL looks for CA certificates by default (its
/// `--openssldir`), and the variables that move it: `probe` would pass
/// them over, so any of them there leaves OpenSSL's own lookup alone.
const OPENSSL_DEFAULT_CA: [&str; 2] = ["/usr/local/ssl/cert.pem", "/usr/local/ssl/certs"];
const OPENSSL_CA_ENV: [&str; 2] = ["SSL_CERT_FILE", "SSL_CERT_DIR"];

/// Set every `-X` setting of `kafka` on `c` but those named in `skip`,
/// and `ssl.ca.location=probe` unless the TLS trust anchors are given
/// some other way: cairn's librdkafka links a vendored OpenSSL, whose
/// default certificate paths (under `/usr/local/ssl`) no Linux
/// distribution fills, so a TLS connection to a broker with a public
/// CA's certificate failed its verification unless the user named the
/// system's bundle (until 2026-12-05; seen in review). `probe` has
/// librdkafka look in the distributions' usual places
/// (`/etc/ssl/certs/ca-certificates.crt` and the like) and use the first
/// it finds, in place of OpenSSL's own lookup: so not when `-X` names the
/// anchors, nor when `SSL_CERT_FILE` or `SSL_CERT_DIR` is set or
/// OpenSSL's own paths exist (where a private CA may have been put for
/// this build). Without TLS it is not read.
pub(crate) fn set_kafka(c: &mut ClientConfig, kafka: &BTreeMap<String, String>, skip: &[&str]) {
    for (k, v) in kafka.iter().filter(|(k, _)| !skip.contains(&k.as_str())) {
        c.set(k, v);
    }
    if !given_any(kafka, &CA_KEYS) && !openssl_finds_ca() {
        c.set("ssl.ca.location", "probe");
    }
}

/// Whether the vendored OpenSSL's own lookup has CA certificates to find:
/// a variable that moves it is set, or one of its default paths exists.
fn openssl_finds_ca() -> bool {
    OPENSSL_CA_ENV.iter().any(|v| std::env::var_os(v).is_some())
        || OPENSSL_DEFAULT_CA
            .iter()
            .any(|p| std::path::Path::new(p).exists())
}

/// Whether two `-X` values mean the same to librdkafka, as far as cairn
/// compares them: booleans as librdkafka reads them (`true`/`t`/`1`,
/// `false`/`f`/`0`, any case), numbers by value, anything else exactly.
pub(crate) fn same_value(given: &str, ours: &str) -> bool {
    let flag = |v: &str| match v.to_ascii_lowercase().as_str() {
        "true" | "t" | "1" => Some(true),
        "false" | "f" | "0" => Some(false),
        _ => None,
    };
    let number = |v: &str| v.parse::<f64>().ok();
    given == ours
        || matches!((flag(given), flag(ours)), (Some(a), Some(b)) if a == b)
        || matches!((number(given), number(ours)), (Some(a), Some(b)) if a == b)
}

/// The first `-X` setting of `key` (under its own name or the `topic.`
/// prefix, [`settings_of`]) whose value is not `ours` as librdkafka reads
/// it ([`same_value`], or the same in another case: every `ours` is a
/// boolean, a number or the name of an enum value such as
/// `read_committed`, which librdkafka reads in any case); with `ours`
/// `None`, the first setting of it at all. As (name given, value): what a
/// refusal names. (Until the night of 2026-12-04, `-X
/// isolation.level=READ_COMMITTED` was refused as if it asked for
/// aborted transactions' records.)
pub(crate) fn setting_other_than<'a>(
    kafka: &'a BTreeMap<String, String>,
    key: &str,
    ours: Option<&str>,
) -> Option<(&'a str, &'a str)> {
    settings_of(kafka, key)
        .find(|(_, v)| ours.is_none_or(|o| !same_value(v, o) && !v.eq_ignore_ascii_case(o)))
}

/// The `-X` settings of the message timeout, under any of its names.
pub(crate) fn message_timeout_settings(kafka: &BTreeMap<String, String>) -> Vec<(&str, &str)> {
    MESSAGE_TIMEOUT_KEYS
        .iter()
        .flat_map(|k| settings_of(kafka, k))
        .collect()
}

/// The message timeout a producer waits for each delivery report: one
/// `-X` setting at most (under any of its names), a positive number of ms.
/// `what` names the records it is for; the error is the message to show.
pub(crate) fn check_message_timeout(
    kafka: &BTreeMap<String, String>,
    what: &str,
) -> std::result::Result<(), String> {
    let timeouts = message_timeout_settings(kafka);
    if timeouts.len() > 1 {
        let names: Vec<String> = timeouts.iter().map(|(k, _)| format!("-X {k}")).collect();
        return Err(format!(
            "{}: the same setting (the message timeout of {what}), given more than once",
            names.join(" and ")
        ));
    }
    // As librdkafka reads it (`strtol` into an int: `09000` is 0 to it,
    // `4294967296` too), not as the text reads: until 2026-12-06 a value
    // Rust read as positive could leave librdkafka waiting forever (found
    // in review).
    for (k, v) in &timeouts {
        match read_as_librdkafka(k, v) {
            Ok(ms) if ms > 0 => {}
            Ok(ms) => {
                return Err(format!(
                    "-X {k}={v}: librdkafka reads it as {ms}: must be a positive number of ms, written plainly (the message timeout of {what}; 0 would wait forever)"
                ))
            }
            Err(e) => return Err(format!("-X {k}={v}: {e}")),
        }
    }
    Ok(())
}

/// The number librdkafka stores for `key` given `value` (its own parse:
/// `strtol` with base 0, which takes hex and octal, stops at the first
/// character that is not a digit, and is cut to an int), or its refusal.
pub(crate) fn read_as_librdkafka(key: &str, value: &str) -> std::result::Result<i64, String> {
    let stored = stored_as_librdkafka(key, value).map_err(|e| e.to_string())?;
    stored
        .trim()
        .parse()
        .map_err(|_| format!("librdkafka stores {stored:?}, not a number"))
}

/// The text librdkafka gives back for `key` once set alone to `value`, or
/// its refusal.
fn stored_as_librdkafka(key: &str, value: &str) -> std::result::Result<String, KafkaError> {
    let mut c = ClientConfig::new();
    c.set(key, value);
    // librdkafka drops a `topic.` prefix when it sets a property, but
    // not when it reads one back.
    c.create_native_config().and_then(|n| {
        n.get(key)
            .or_else(|e| key.strip_prefix("topic.").map_or(Err(e), |k| n.get(k)))
    })
}

/// Refuse a number librdkafka would read as another: it parses an integer
/// property with `strtol` (base 0), which stops at the first character
/// that is not a digit and takes a leading 0 for octal and 0x for hex. So
/// `session.timeout.ms=1.5` is 1 ms to it (a run that never joined its
/// group), `fetch.min.bytes=1MB` is 1 byte and `010` is 8, all without
/// a word (until 2026-12-07; found by an audit of `--config`, whose
/// `[kafka]` table writes a TOML float as `1.5`). A value is checked when
/// it begins as a number does: set alone, it must read back as the same
/// number (hex read whole is the number meant). Text, enum names and
/// booleans read back as words and pass; a value librdkafka refuses is
/// left to the client's creation, which says why.
pub(crate) fn refuse_misread_numbers(
    kafka: &BTreeMap<String, String>,
) -> std::result::Result<(), String> {
    for (k, v) in kafka {
        let given = v.trim();
        let digits = given.trim_start_matches(['+', '-']);
        let numeric_start = digits
            .trim_start_matches('.')
            .starts_with(|c: char| c.is_ascii_digit());
        // strtod takes any word that starts so (`nanx`, `nan(1)`).
        let lower = digits.to_ascii_lowercase();
        let not_finite = lower.starts_with("nan") || lower.starts_with("inf");
        if !(numeric_start || not_finite) || names_a_credential(k) {
            continue;
        }
        let refused = |why: String| Err(format!("-X {}: {why}", shown(k, v)));
        let decimal = LINGER_KEYS.contains(&k.strip_prefix("topic.").unwrap_or(k));
        // A leading 0 is octal to librdkafka's integers: `010` is 8, `08`
        // is 0, and one it then refuses as out of range said only "value
        // 8" (until review, 2026-12-07). Not so to its one decimal
        // property (strtod), nor where octal and decimal agree (`05`);
        // asked of a numeric property only: a text one (`client.id=010`)
        // takes any text.
        let octal = digits.len() > 1
            && digits.starts_with('0')
            && digits.bytes().all(|b| b.is_ascii_digit())
            && !decimal
            && digits.parse::<i64>().ok() != Some(strtol_octal(digits));
        if octal && numeric_property(k) {
            let sign = if given.starts_with('-') { "-" } else { "" };
            return refused(format!(
                "librdkafka reads a number with a leading 0 as octal ({given} is {sign}{}): write it without the 0",
                strtol_octal(digits)
            ));
        }
        // `nan` passes librdkafka's range check (a comparison), and
        // becomes undefined in C once converted; to a text property it is
        // text.
        if not_finite {
            if numeric_property(k) {
                return refused("not a finite number: give one, in the property's unit".into());
            }
            continue;
        }
        let Ok(stored) = stored_as_librdkafka(k, v) else {
            continue;
        };
        let Ok(read) = stored.trim().parse::<f64>() else {
            continue;
        };
        // Hex, read whole, is the number meant.
        let hex = |g: &str| {
            let (sign, digits) = match g.strip_prefix('-') {
                Some(rest) => (-1.0, rest),
                None => (1.0, g.strip_prefix('+').unwrap_or(g)),
            };
            let digits = digits
                .strip_prefix("0x")
                .or_else(|| digits.strip_prefix("0X"))?;
            i64::from_str_radix(digits, 16)
                .ok()
                .map(|v| sign * v as f64)
        };
        // The one decimal property reads back with `%g`'s six digits: a
        // value within that of what was given is what was given. Any other
        // must read back exact (`100000.9` is 100000 to an integer one).
        let same = |g: f64| {
            if decimal {
                (g - read).abs() <= 1e-5 * g.abs().max(1.0)
            } else {
                g == read
            }
        };
        if given
            .parse::<f64>()
            .ok()
            .or_else(|| hex(given))
            .is_some_and(same)
        {
            continue;
        }
        // A whole number librdkafka reads as another lost its high bits.
        let whole = digits.bytes().all(|b| b.is_ascii_digit());
        return refused(if whole {
            format!(
                "librdkafka reads it as {stored}: an integer setting holds 32 bits (up to 2147483647), and librdkafka keeps the low ones without a word"
            )
        } else {
            format!(
                "librdkafka reads it as {stored} (it takes an integer setting's leading digits, a leading 0 as octal and 0x as hex, and drops the rest without a word): write the number meant, plainly, in the property's unit"
            )
        });
    }
    Ok(())
}

/// librdkafka's one decimal property, under both its names.
const LINGER_KEYS: [&str; 2] = ["linger.ms", "queue.buffering.max.ms"];

/// Whether librdkafka refuses text for `key` as an invalid value: a
/// numeric, boolean or enum property (a text one takes any; an unknown
/// name is refused as unknown, and said so by the client's creation).
/// `plugin.library.paths` is never asked: setting it loads libraries.
fn numeric_property(key: &str) -> bool {
    if key.ends_with("plugin.library.paths") {
        return false;
    }
    matches!(
        stored_as_librdkafka(key, "cairn-probe"),
        Err(KafkaError::ClientConfig(
            rdkafka::types::RDKafkaConfRes::RD_KAFKA_CONF_INVALID,
            ..
        ))
    )
}

/// What librdkafka's `strtol` (base 0) makes of `digits`, a run of ASCII
/// digits with a leading 0: the octal digits up to the first 8 or 9.
fn strtol_octal(digits: &str) -> i64 {
    digits
        .bytes()
        .take_while(|b| (b'0'..=b'7').contains(b))
        .fold(0i64, |n, b| {
            n.saturating_mul(8).saturating_add(i64::from(b - b'0'))
        })
}

/// Properties librdkafka knows under two names (`_RK_C_ALIAS` in
/// `rdkafka_conf.c`), as (alias, name); but the message timeout's
/// ([`MESSAGE_TIMEOUT_KEYS`]), which [`check_message_timeout`] takes once
/// only, whatever the values.
const ALIASES: [(&str, &str); 11] = [
    ("bootstrap.servers", "metadata.broker.list"),
    ("max.in.flight", "max.in.flight.requests.per.connection"),
    ("sasl.mechanism", "sasl.mechanisms"),
    (
        "sasl.oauthbearer.client.credentials.client.id",
        "sasl.oauthbearer.client.id",
    ),
    (
        "sasl.oauthbearer.client.credentials.client.secret",
        "sasl.oauthbearer.client.secret",
    ),
    ("max.partition.fetch.bytes", "fetch.message.max.bytes"),
    ("linger.ms", "queue.buffering.max.ms"),
    ("retries", "message.send.max.retries"),
    ("compression.type", "compression.codec"),
    ("acks", "request.required.acks"),
    ("enable.auto.commit", "auto.commit.enable"),
];

/// Refuse `-X` settings librdkafka would take otherwise than given: one
/// property under two names with two values ([`refuse_two_names`]), or a
/// number it reads as another ([`refuse_misread_numbers`]). Every command
/// that takes `-X` asks this one (run, restore, status).
pub(crate) fn refuse_ambiguous_settings(
    kafka: &BTreeMap<String, String>,
) -> std::result::Result<(), String> {
    refuse_two_names(kafka)?;
    refuse_misread_numbers(kafka)
}

/// Refuse one property given twice under different names (librdkafka's
/// aliases, or the `topic.` prefix), with different values: rdkafka hands
/// librdkafka its settings in a hash map's order, so which one wins would
/// change from run to run. (A flag and the config file under the same
/// name are one setting: the flag wins.) Two values are two texts, as for
/// one name given twice (`cli::kafka_flags`): [`same_value`] would pass a
/// secret `0123` beside `123` (until the night of 2026-12-04 it did).
pub(crate) fn refuse_two_names(
    kafka: &BTreeMap<String, String>,
) -> std::result::Result<(), String> {
    let named = |key: &str| settings_of(kafka, key).collect::<Vec<_>>();
    let pairs = ALIASES.iter().map(|&(a, b)| [named(a), named(b)].concat());
    let singles = kafka
        .keys()
        .map(|k| k.strip_prefix("topic.").unwrap_or(k))
        .filter(|k| {
            !ALIASES.iter().any(|(a, b)| k == a || k == b) && !MESSAGE_TIMEOUT_KEYS.contains(k)
        })
        .map(named);
    for given in pairs.chain(singles) {
        if let [(k1, v1), rest @ ..] = given.as_slice() {
            if let Some((k2, v2)) = rest.iter().find(|(_, v)| v != v1) {
                return Err(format!(
                    "-X {} and -X {}: one property under two names with two values (librdkafka would keep either, at random); give it once",
                    shown(k1, v1),
                    shown(k2, v2)
                ));
            }
        }
    }
    Ok(())
}

/// Whether `text` names a property that holds a credential: a password,
/// passphrase or secret, a private key given inline, the OAUTHBEARER
/// config. (librdkafka marks more as sensitive, such as `sasl.username`
/// and key file locations; those are shown, since a user needs them to
/// tell two settings apart and they hold no secret themselves.)
pub(crate) fn names_a_credential(text: &str) -> bool {
    let text = text.to_ascii_lowercase();
    [
        "password",
        "passphrase",
        "secret",
        "key.pem",
        "ssl_key",
        "oauthbearer.config",
    ]
    .iter()
    // In any letter case: librdkafka takes `SASL.PASSWORD` as an unknown
    // property and says so, quoting it (until 2026-12-06 its value was
    // shown where the name was not in lower case; found in review).
    .any(|s| text.contains(s))
}

/// `key=value` as an error may show it: the value of a property that
/// holds a credential ([`names_a_credential`]) is left out, so that a
/// refusal does not write it to stderr and the journal.
pub(crate) fn shown(key: &str, value: &str) -> String {
    if names_a_credential(key) {
        format!("{key}=<{} characters, not shown>", value.chars().count())
    } else {
        format!("{key}={value}")
    }
}

/// A client's creation error with the credentials it quotes left out:
/// rdkafka shows a refused property's value (`ClientConfig`'s text ends
/// with it), and librdkafka's own description may quote it too. The value
/// of a property that names a credential ([`names_a_credential`]) is
/// hidden, and so is an unknown property's (a mistyped credential's name,
/// `sasl.pasword`, does not say it is one). Until the night of 2026-12-04
/// such a value went to stderr and the journal (an OAuth client secret,
/// which this build's librdkafka refuses: it has no OIDC support).
pub(crate) fn redacted(e: KafkaError) -> KafkaError {
    match e {
        KafkaError::ClientConfig(res, desc, key, value)
            if !value.is_empty()
                && (names_a_credential(&key)
                    || res == rdkafka::types::RDKafkaConfRes::RD_KAFKA_CONF_UNKNOWN) =>
        {
            let not_shown = format!("<{} characters, not shown>", value.chars().count());
            // librdkafka quotes a value it names; a short one is replaced
            // only so, for it may be part of other words (`1` in
            // `sasl1.x`).
            let desc = if value.chars().count() >= 4 {
                desc.replace(&value, &not_shown)
            } else {
                desc.replace(&format!("\"{value}\""), &format!("\"{not_shown}\""))
            };
            KafkaError::ClientConfig(res, desc, key, not_shown)
        }
        e => e,
    }
}

/// A refused client setting as one line: the property (its value hidden
/// where [`redacted`] hides it), then librdkafka's description. rdkafka's
/// own text runs the three together after its description ("Client config
/// error: No such configuration property: \"foo.bar\" foo.bar <1
/// characters, not shown>", until 2026-12-07; found by an audit). Any
/// other error as rdkafka says it.
pub(crate) fn settings_refused(e: KafkaError) -> String {
    match redacted(e) {
        // librdkafka ends some descriptions (a range refused) with a
        // newline, which put a following note on a line of its own.
        KafkaError::ClientConfig(_, desc, key, value) => {
            format!("{key}={value}: {}", desc.trim_end())
        }
        e => e.to_string().trim_end().to_owned(),
    }
}

/// What to change for a record the brokers refused for good (a resend
/// meets the same refusal), said after the broker's text, which names no
/// setting; the size is the caller's to say (a batch's, or one record's).
pub(crate) fn produce_refusal_advice(
    code: rdkafka::types::RDKafkaErrorCode,
) -> Option<&'static str> {
    use rdkafka::types::RDKafkaErrorCode as C;
    Some(match code {
        C::InvalidTimestamp => " (the target topic refuses the record's timestamp as too far from the brokers' clock: its message.timestamp.before.max.ms and message.timestamp.after.max.ms, or message.timestamp.difference.max.ms on brokers before 3.6, are narrower than the archive's timestamps; widen them on the topic, or set message.timestamp.type=LogAppendTime there, which stamps each record with the time it is written instead)",
        C::InvalidRecord => " (the brokers refused the record itself: a record with no key into a compacted topic (cleanup.policy=compact) is the usual cause; send to a topic that is not compacted, or that the records' keys suit)",
        C::PolicyViolation => " (a policy on the brokers refused the write: ask the cluster's administrator which, or use another topic)",
        C::TopicAuthorizationFailed => " (the principal may not write the topic: it needs WRITE on it, and DESCRIBE)",
        C::ClusterAuthorizationFailed => " (the principal may not write idempotently, as cairn's producers do: it needs IDEMPOTENT_WRITE on the cluster, on brokers before 2.8, or WRITE on the topic)",
        // Checked to exist at the start: deleted since (found in an audit,
        // 2026-12-06: a bare "Unknown topic or partition" said nothing).
        C::UnknownTopicOrPartition | C::UnknownTopic | C::UnknownPartition => " (the brokers no longer have the topic, or that partition of it: deleted since the start? cairn's producers never create a topic: create it again, with as many partitions as before, then run again)",
        _ => return None,
    })
}

/// librdkafka's names for the brokers to start from.
const BOOTSTRAP_KEYS: [&str; 2] = ["bootstrap.servers", "metadata.broker.list"];

/// A client created only for librdkafka to check its settings: it logs
/// nothing (the real client logs the same lines), and it is given no
/// brokers, so it connects nowhere.
struct SettingsCheck;

impl ClientContext for SettingsCheck {
    fn log(&self, _: RDKafkaLogLevel, _: &str, _: &str) {}
}

impl ConsumerContext for SettingsCheck {}

impl ProducerContext for SettingsCheck {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &rdkafka::message::DeliveryResult<'_>, _: ()) {}
}

/// librdkafka's checks of a consumer's settings: each property alone, and
/// the checks across properties that only creating a client runs
/// (`fetch.max.bytes` below `message.max.bytes`, say). Run before anything
/// is opened, so that a refused `-X` has not first created a data
/// directory or recovered (or upgraded) an archive. The client is made
/// without its brokers and its `group.id`, so it connects nowhere and never
/// joins, and is dropped at once.
pub(crate) fn check_consumer_settings(config: &ClientConfig) -> std::result::Result<(), String> {
    created_without::<BaseConsumer<SettingsCheck>>(config, &["group.id"])
}

/// [`check_consumer_settings`] for a producer (it has nothing to send).
pub(crate) fn check_producer_settings(config: &ClientConfig) -> std::result::Result<(), String> {
    created_without::<BaseProducer<SettingsCheck>>(config, &[])
}

/// A client of type `T` made from `config` without its brokers and the
/// keys in `also`, then dropped.
fn created_without<T>(config: &ClientConfig, also: &[&str]) -> std::result::Result<(), String>
where
    T: rdkafka::config::FromClientConfigAndContext<SettingsCheck>,
{
    let mut c = config.clone();
    for key in BOOTSTRAP_KEYS.iter().chain(also) {
        c.remove(key);
    }
    c.create_with_context::<_, T>(SettingsCheck)
        .map(drop)
        .map_err(|e| match e {
            KafkaError::ClientConfig(..) => format!("-X {}", settings_refused(e)),
            e => format!("-X: {}", redacted(e)),
        })
}

/// The message timeout `-X` sets, if it sets one that parses.
pub(crate) fn message_timeout_ms(kafka: &BTreeMap<String, String>) -> Option<u64> {
    message_timeout_settings(kafka)
        .first()
        .and_then(|(k, v)| read_as_librdkafka(k, v).ok())
        .and_then(|ms| u64::try_from(ms).ok())
}

/// Why a record librdkafka's producer refused as `QueueFull` with nothing
/// else queued is refused: `bytes` alone do not fit the queue. Restore's
/// sends and the dead letters say it alike.
pub(crate) fn too_big_for_queue(bytes: u64) -> String {
    format!("{bytes} bytes do not fit librdkafka's queue even when it is empty: raise -X queue.buffering.max.kbytes (or leave it at its default)")
}

/// Whether a librdkafka log line comes again as a client error, which the
/// client's context says (`error`): a broker's failure (`FAIL`) logged at
/// error or worse is always also sent to the application as an error of the
/// same text (`rd_kafka_broker_set_error`, rdkafka_broker.c). Said twice,
/// and a third time as the consumer's error, a broker gone mid-run filled
/// the log with three lines for each failed connection (until 2026-12-07).
/// The log line is the one said ([`log_client_failure`]): rust-rdkafka
/// queues log lines on the client's main queue (`log.queue`), as it does
/// errors, and the line is queued before its error, so that the error
/// finds its kind said already.
pub(crate) fn said_as_client_error(level: RDKafkaLogLevel, fac: &str) -> bool {
    use RDKafkaLogLevel as L;
    fac == "FAIL" && matches!(level, L::Emerg | L::Alert | L::Critical | L::Error)
}

/// A client error, for a context that keeps a [`LastCause`]: at WARN the
/// first of its kind, then at DEBUG until [`REPEAT_WARN_INTERVAL`] passes.
pub(crate) fn say_client_error(last: &LastCause, error: &KafkaError, reason: &str) {
    if last.note(error, reason) {
        tracing::warn!(target: "librdkafka", %error, "{reason}");
    } else {
        tracing::debug!(target: "librdkafka", %error, "{reason} (said already)");
    }
}

/// A log line [`said_as_client_error`]: said at WARN, without the thread
/// librdkafka names first (`[thrd:…]: `), if it is the first of its kind
/// in `last` (then its client error, of the same text, is a repeat: DEBUG),
/// else at DEBUG.
pub(crate) fn log_client_failure(last: &LastCause, fac: &str, message: &str) {
    let text = message
        .strip_prefix("[thrd:")
        .and_then(|m| m.split_once("]: "))
        .map_or(message, |(_, text)| text);
    if last.note_text(text, true) {
        tracing::warn!(target: "librdkafka", fac, "{text}");
    } else {
        tracing::debug!(target: "librdkafka", fac, "{text} (said already)");
    }
}

/// librdkafka's log lines as rust-rdkafka's default context logs them,
/// but those [`said_as_client_error`], which go through `last`
/// ([`log_client_failure`]).
pub(crate) fn log_to_tracing(last: &LastCause, level: RDKafkaLogLevel, fac: &str, message: &str) {
    if said_as_client_error(level, fac) {
        log_client_failure(last, fac, message);
        return;
    }
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
pub(crate) fn log_ignoring_confwarn(
    last: &LastCause,
    level: RDKafkaLogLevel,
    fac: &str,
    message: &str,
) {
    if fac == "CONFWARN" {
        tracing::debug!(target: "librdkafka", "librdkafka: {fac} {message}");
    } else {
        log_to_tracing(last, level, fac, message);
    }
}

/// How long the first slice of a [`sliced_wait`] lasts before `stop` is
/// asked again.
const WAIT_SLICE: Duration = Duration::from_millis(250);
/// The longest one wait lasts: a reply slower than this is asked for again
/// every slice, and a signal is heard within this.
const WAIT_SLICE_MAX: Duration = Duration::from_secs(8);

/// The cluster's metadata (every topic: asking for one by name could
/// create it on brokers that auto-create topics), waiting up to `timeout`
/// for the brokers at `brokers` to answer, in the slices of [`sliced_wait`].
pub(crate) fn cluster_metadata<X: ClientContext>(
    client: &Client<X>,
    brokers: &str,
    timeout: Duration,
    stop: &dyn Fn() -> bool,
) -> Result<Metadata> {
    let metadata = |wait| client.fetch_metadata(None, wait);
    sliced_wait(brokers, "the cluster's metadata", timeout, stop, metadata).map_err(|failed| {
        match failed {
            Waited::Stopped(e) => e,
            Waited::Failed { error, waited_ms } => ConnectorError::BrokerUnreachable {
                brokers: brokers.to_owned(),
                waited_ms,
                detail: error.to_string(),
            },
        }
    })
}

/// `wait()`, while another thread calls `serve` (a client's `poll` of a
/// few tens of ms) until it returns. rust-rdkafka queues librdkafka's log
/// lines and errors on the client's main queue (`log.queue`), and nothing
/// else serves that queue while a command waits for Kafka: a refused
/// connection was said only once the whole connect timeout had passed (10
/// s for `status`, 30 s for `restore`; `run`'s check since 2026-12-07, the
/// others since that afternoon). A client's `poll` may run beside its
/// other calls; the wait's client must have nothing else to deliver there
/// yet (no group joined, nothing produced).
pub(crate) fn serving_queue<T>(serve: impl Fn() + Sync, wait: impl FnOnce() -> T) -> T {
    use std::sync::atomic::{AtomicBool, Ordering};
    /// Ends the serving thread however `wait` ends (a panic too: the
    /// scope would otherwise wait for the thread forever).
    struct Done<'a>(&'a AtomicBool);
    impl Drop for Done<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                serve();
            }
        });
        let _done = Done(&done);
        wait()
    })
}

/// The description of a client's last error other than "all brokers are
/// down" (which follows every failed connection and names no cause): a
/// refused connection, a failed TLS handshake, credentials the brokers
/// refuse. Each client's context keeps one, for [`with_cause`].
///
/// It also decides which of the errors are said at WARN: the first of each
/// kind, and again once [`REPEAT_WARN_INTERVAL`] has passed. A client
/// waiting for brokers that do not answer reports an error every few
/// hundred ms, and the check's clients serve them only once the wait has
/// ended: a 10 s wait for an unreachable broker printed about 200 WARN
/// lines at once, 30 s of `cairn restore` over 1,100, the error that
/// explains them last (until 2026-12-07; found by an audit).
#[derive(Debug, Default)]
pub(crate) struct LastCause(std::sync::Mutex<Causes>);

#[derive(Debug, Default)]
pub(crate) struct Causes {
    last: Option<String>,
    /// When each kind of error (the broker it names, and the rest of its
    /// text without digits: librdkafka counts in its texts, "1/1 brokers
    /// are down", "5 identical error(s) suppressed") was last said at
    /// WARN. Not its code: a broker's failure is said first as a log line,
    /// which has none, and then comes as an error of the same text.
    said: std::collections::HashMap<String, Instant>,
}

/// How often an error of one kind is said at WARN again, at most.
pub(crate) const REPEAT_WARN_INTERVAL: Duration = Duration::from_secs(60);

impl LastCause {
    /// A client error reported to the context: kept, and whether to say it
    /// at WARN (false: at DEBUG, a repeat).
    pub(crate) fn note(&self, error: &KafkaError, reason: &str) -> bool {
        let cause = error
            .rdkafka_error_code()
            .is_some_and(|c| c != RDKafkaErrorCode::AllBrokersDown);
        self.note_text(reason, cause)
    }

    /// [`Self::note`] of a client error's text alone (a log line of it,
    /// [`log_client_failure`]); kept as the last cause if `cause`.
    pub(crate) fn note_text(&self, reason: &str, cause: bool) -> bool {
        let mut c = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if cause {
            c.last = Some(reason.to_owned());
        }
        // The broker it names (`kafka-1:9092/1: …`) kept whole: one
        // broker down after another is news.
        let (broker, text) = reason.split_once(": ").unwrap_or(("", reason));
        // Without the state a broker's failure came in, and the count of
        // repeats librdkafka itself held back (`(after 0ms in state
        // CONNECT, 1 identical error(s) suppressed)`), which made a repeat
        // a kind of its own.
        let text = text.split_once(" (after ").map_or(text, |(t, _)| t);
        let kind = format!(
            "{broker}: {}",
            text.replace(|ch: char| ch.is_ascii_digit(), "")
        );
        let now = Instant::now();
        let say = c
            .said
            .get(&kind)
            .is_none_or(|at| now.duration_since(*at) >= REPEAT_WARN_INTERVAL);
        if say {
            // Bounded: a client that reports ever new kinds forgets the old.
            if c.said.len() >= 256 {
                c.said.clear();
            }
            c.said.insert(kind, now);
        }
        say
    }
}

/// An unreachable broker's error with the client's last error, which
/// names the cause librdkafka's bare "transport failure" leaves out (a
/// refused connection, a failed TLS handshake, refused credentials).
pub(crate) fn with_cause(e: ConnectorError, last: &LastCause) -> ConnectorError {
    let last = last
        .0
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .last
        .clone();
    match (e, last) {
        (
            ConnectorError::BrokerUnreachable {
                brokers,
                waited_ms,
                detail,
            },
            Some(why),
        ) if !detail.contains(&why) => ConnectorError::BrokerUnreachable {
            brokers,
            waited_ms,
            detail: format!("{detail} (the client's last error: {why})"),
        },
        (e, _) => e,
    }
}

/// Whether a topic's own metadata error says it exists but cannot be used
/// yet (being created, partitions without a leader), rather than that it
/// is missing or refused to this client.
pub(crate) fn topic_not_ready(e: rdkafka::types::RDKafkaRespErr) -> bool {
    use rdkafka::types::RDKafkaRespErr as E;
    !matches!(
        e,
        E::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART
            | E::RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC
            | E::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED
    )
}

/// The most partitions one librdkafka call that lists partitions
/// (`offsets_for_times`, `committed_offsets`) asks about. librdkafka
/// matches each partition of the answer by a linear search of the list
/// asked, so a call's CPU time grows with the square of its partitions:
/// 10,000 in one `offsets_for_times` took 2.0 s of CPU, in calls of 1,000
/// 0.2 s (ten more round trips); a `committed_offsets` of 10,000, 0.85 s.
pub(crate) const PARTITIONS_PER_CALL_MAX: usize = 1_000;

/// How a [`sliced_wait`] ended without an answer.
pub(crate) enum Waited {
    /// `stop` said so between two slices: `ConnectorError::StoppedWaiting`.
    Stopped(ConnectorError),
    /// The request failed for good, or `timeout` ran out: its last error.
    Failed { error: KafkaError, waited_ms: u64 },
}

/// A signal during the checks of Kafka after [`sliced_wait`]'s answers
/// (a topic's metadata looked through) stops the command before the
/// archive is opened, as one during the wait does (until 2026-12-05 the
/// archive was opened, and the run exited 0). `t0`: when the checks began.
pub(crate) fn stopped_while_checking(
    stopped: bool,
    brokers: &str,
    t0: Instant,
) -> Result<(), ConnectorError> {
    if !stopped {
        return Ok(());
    }
    Err(ConnectorError::StoppedWaiting {
        brokers: brokers.to_owned(),
        asked_for: "the topics' metadata".into(),
        waited_ms: t0.elapsed().as_millis() as u64,
    })
}

/// `request` (a read: asking again is harmless) for `asked_for`, given up
/// to `timeout` for the brokers at `brokers` to answer. The wait is cut
/// into slices so that `stop` ends it within one, not at the timeout.
///
/// librdkafka ends a slice in one of two ways. With no broker connection
/// up yet (still connecting, or a TLS and SASL handshake under way) it
/// sends nothing and says "transport failure" (or "all brokers down"): the
/// next slice waits the first slice's time again. With a request sent and
/// no reply yet it says "timed out" (or, after its own retries, "timed out
/// in queue", "SSL"): the next slice is twice as long, up to
/// `WAIT_SLICE_MAX`, so that a slow reply (the metadata of a large
/// cluster) is not asked for again every quarter second. Any other error
/// ends the wait.
pub(crate) fn sliced_wait<T>(
    brokers: &str,
    asked_for: &str,
    timeout: Duration,
    stop: &dyn Fn() -> bool,
    mut request: impl FnMut(Duration) -> KafkaResult<T>,
) -> std::result::Result<T, Waited> {
    let t0 = Instant::now();
    let stopped = |waited_ms| {
        Waited::Stopped(ConnectorError::StoppedWaiting {
            brokers: brokers.to_owned(),
            asked_for: asked_for.to_owned(),
            waited_ms,
        })
    };
    let mut slice = WAIT_SLICE;
    loop {
        // Whole milliseconds, rounded up: librdkafka takes milliseconds,
        // and 0 would not wait at all (a burst of requests in the last
        // millisecond).
        let left_ms = (timeout.saturating_sub(t0.elapsed()).as_micros()).div_ceil(1000);
        let wait = Duration::from_millis(left_ms as u64).min(slice);
        let asked = Instant::now();
        let error = match request(wait) {
            // A signal during the request (or the pause before it) stops
            // the wait, answered or not: what the caller would do next
            // (open the archive) is not to be done. Until 2026-12-05 an
            // answer won, and a run stopped while waiting opened its
            // archive and exited 0.
            Ok(_) if stop() => return Err(stopped(t0.elapsed().as_millis() as u64)),
            Ok(answer) => return Ok(answer),
            Err(e) => e,
        };
        // One reading of the clock for the report and the deadline.
        let elapsed = t0.elapsed();
        let waited_ms = elapsed.as_millis() as u64;
        if stop() {
            return Err(stopped(waited_ms));
        }
        slice = next_slice(&error, slice);
        if slice.is_zero() || elapsed >= timeout {
            return Err(Waited::Failed { error, waited_ms });
        }
        // A request that failed at once (no broker up yet) is not asked
        // again at once: the rest of its slice, at most the first slice's
        // length, passes first.
        std::thread::sleep(wait.min(WAIT_SLICE).saturating_sub(asked.elapsed()));
    }
}

/// The slice a [`sliced_wait`] waits next after a request failed with
/// `error` in a slice of `slice`: zero to wait no more.
fn next_slice(error: &KafkaError, slice: Duration) -> Duration {
    use RDKafkaErrorCode as C;
    match error.rdkafka_error_code() {
        Some(C::BrokerTransportFailure | C::AllBrokersDown) => WAIT_SLICE,
        Some(C::OperationTimedOut | C::TimedOutQueue | C::SSL) => {
            slice.saturating_mul(2).min(WAIT_SLICE_MAX)
        }
        _ => Duration::ZERO,
    }
}

/// Whether a [`sliced_wait`] asks again after a request failed with
/// `error`: the brokers did not answer yet.
pub(crate) fn worth_waiting_for(error: &KafkaError) -> bool {
    !next_slice(error, WAIT_SLICE).is_zero()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::mocking::MockCluster;

    /// What [`said_as_client_error`] rests on, checked against the real
    /// librdkafka: a client whose broker refuses connections logs each
    /// failure at error with `FAIL`, and reports the same text as a client
    /// error, which its context says; so the log line is the repeat.
    #[test]
    fn a_broker_failure_logged_at_error_comes_again_as_a_client_error() {
        #[derive(Default)]
        struct Seen {
            failures_logged: std::sync::Mutex<Vec<String>>,
            errors: std::sync::Mutex<Vec<String>>,
        }
        impl ClientContext for Seen {
            fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
                if said_as_client_error(level, fac) {
                    self.failures_logged
                        .lock()
                        .unwrap()
                        .push(message.to_owned());
                }
            }
            fn error(&self, _: KafkaError, reason: &str) {
                self.errors.lock().unwrap().push(reason.to_owned());
            }
        }
        impl rdkafka::consumer::ConsumerContext for Seen {}
        // A port nothing listens on: bound, then closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let consumer: BaseConsumer<Seen> = ClientConfig::new()
            .set("bootstrap.servers", format!("127.0.0.1:{port}"))
            .set("group.id", "g")
            .create_with_context(Seen::default())
            .unwrap();
        consumer.subscribe(&["t"]).unwrap();
        // Polled until a failure has been logged and reported alike (a
        // deadline, not a sleep: the loop ends as soon as they are).
        let deadline = Instant::now() + Duration::from_secs(30);
        let matched = loop {
            let _ = consumer.poll(Duration::from_millis(100));
            let logged = consumer.context().failures_logged.lock().unwrap().clone();
            let errors = consumer.context().errors.lock().unwrap().clone();
            // The log line leads with its thread (`[thrd:…]: `).
            if let Some(line) = logged
                .iter()
                .find(|l| errors.iter().any(|e| l.ends_with(e)))
            {
                break Some(line.clone());
            }
            if Instant::now() > deadline {
                panic!("no FAIL log line came back as a client error: logged {logged:?}, errors {errors:?}");
            }
        };
        assert!(matched.unwrap().contains("Connection refused"));
        assert!(!said_as_client_error(RDKafkaLogLevel::Warning, "FAIL"));
        assert!(!said_as_client_error(RDKafkaLogLevel::Error, "SESSTMOUT"));
    }

    /// A topic deleted while it was produced to is said as such, for the
    /// dead letters and for a restore alike.
    #[test]
    fn a_topic_gone_while_produced_to_is_said() {
        use rdkafka::types::RDKafkaErrorCode as C;
        for code in [
            C::UnknownTopicOrPartition,
            C::UnknownTopic,
            C::UnknownPartition,
        ] {
            let advice = produce_refusal_advice(code).unwrap();
            assert!(advice.contains("deleted since the start?"), "{advice}");
        }
    }

    /// A message timeout is taken as librdkafka reads it: `09000` (octal
    /// that stops at the 9) and 2^32 are 0 to its `strtol` into an int,
    /// which would wait forever, and are refused; hex it reads is taken.
    #[test]
    fn a_message_timeout_is_read_as_librdkafka_reads_it() {
        let given = |v: &str| BTreeMap::from([("delivery.timeout.ms".to_owned(), v.to_owned())]);
        for v in ["0", "09000", "4294967296", "0.5"] {
            let e = check_message_timeout(&given(v), "these").unwrap_err();
            assert!(e.contains("librdkafka reads it as 0"), "{v}: {e}");
        }
        let e = check_message_timeout(&given("-5"), "these").unwrap_err();
        assert!(e.contains("-X delivery.timeout.ms=-5"), "{e}");
        assert!(check_message_timeout(&given("0x2328"), "these").is_ok());
        assert_eq!(message_timeout_ms(&given("0x2328")), Some(9000));
        assert_eq!(message_timeout_ms(&given("9000")), Some(9000));
        // Under its topic-level names too (librdkafka reads those back
        // without the prefix).
        for key in ["topic.message.timeout.ms", "topic.delivery.timeout.ms"] {
            let given = BTreeMap::from([(key.to_owned(), "0x2328".to_owned())]);
            assert!(check_message_timeout(&given, "these").is_ok(), "{key}");
            assert_eq!(message_timeout_ms(&given), Some(9000), "{key}");
            let zero = BTreeMap::from([(key.to_owned(), "0".to_owned())]);
            let e = check_message_timeout(&zero, "these").unwrap_err();
            assert!(e.contains("librdkafka reads it as 0"), "{key}: {e}");
        }
    }

    /// A signal during a request that is then answered stops the wait all
    /// the same: its caller does not go on to open the archive.
    #[test]
    fn a_stop_during_an_answered_request_stops_the_wait() {
        let stop = std::sync::atomic::AtomicBool::new(false);
        let answered = sliced_wait(
            "b:1",
            "x",
            Duration::from_secs(10),
            &|| stop.load(std::sync::atomic::Ordering::SeqCst),
            |_| {
                stop.store(true, std::sync::atomic::Ordering::SeqCst);
                Ok(7)
            },
        );
        match answered {
            Err(Waited::Stopped(ConnectorError::StoppedWaiting { asked_for, .. })) => {
                assert_eq!(asked_for, "x")
            }
            Err(Waited::Failed { error, .. }) => panic!("failed: {error}"),
            Err(Waited::Stopped(e)) => panic!("stopped as {e}"),
            Ok(n) => panic!("answered {n} after the stop"),
        }
        // Without a stop, the answer.
        let answered = sliced_wait("b:1", "x", Duration::from_secs(10), &|| false, |_| Ok(7));
        assert!(matches!(answered, Ok(7)));
    }

    /// Every client cairn makes from `-X` looks for the system's CA
    /// certificates (`probe`) unless `-X` names its trust anchors: the
    /// vendored OpenSSL's own default paths hold none. A TLS client so
    /// configured is made (its TLS context loads the bundle found).
    #[test]
    fn clients_probe_for_the_systems_ca_certificates_unless_told() {
        let cfg = crate::RunConfig::new("b:1", "g", vec!["t".into()], "d".into());
        let consumer = crate::consumer::client_config(&cfg);
        // (Unless OpenSSL's own lookup finds some: left to it then.)
        let probed = (!openssl_finds_ca()).then_some("probe");
        assert_eq!(consumer.get("ssl.ca.location"), probed);
        let mut c = ClientConfig::new();
        let mut given = BTreeMap::new();
        given.insert("ssl.ca.location".to_owned(), "/srv/ca.pem".to_owned());
        set_kafka(&mut c, &given, &[]);
        assert_eq!(c.get("ssl.ca.location"), Some("/srv/ca.pem"));
        let mut c = ClientConfig::new();
        let mut given = BTreeMap::new();
        given.insert("ssl.ca.pem".to_owned(), "-----BEGIN".to_owned());
        given.insert("group.id".to_owned(), "x".to_owned());
        set_kafka(&mut c, &given, &["group.id"]);
        assert_eq!((c.get("ssl.ca.location"), c.get("group.id")), (None, None));
        let mut tls = consumer.clone();
        tls.set("security.protocol", "ssl");
        tls.create::<BaseConsumer>()
            .expect("a TLS client that probes for the CA certificates");
    }

    /// One property under two names (an alias, or the `topic.` prefix)
    /// with two values is refused; with one value, or once, it is not.
    #[test]
    fn one_property_under_two_names_with_two_values_is_refused() {
        let kafka = |kv: &[(&str, &str)]| -> BTreeMap<String, String> {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        for refused in [
            &[
                ("sasl.mechanism", "PLAIN"),
                ("sasl.mechanisms", "SCRAM-SHA-256"),
            ][..],
            &[
                ("max.partition.fetch.bytes", "1048576"),
                ("fetch.message.max.bytes", "2097152"),
            ],
            &[("acks", "all"), ("topic.request.required.acks", "1")],
            &[
                ("auto.offset.reset", "earliest"),
                ("topic.auto.offset.reset", "latest"),
            ],
            // Two texts, though a number would read them as one.
            &[
                ("sasl.oauthbearer.client.secret", "0123"),
                ("sasl.oauthbearer.client.credentials.client.secret", "123"),
            ],
        ] {
            let e = refuse_two_names(&kafka(refused)).unwrap_err();
            assert!(
                e.contains("one property under two names"),
                "{refused:?}: {e}"
            );
        }
        for taken in [
            &[("sasl.mechanism", "PLAIN"), ("sasl.mechanisms", "PLAIN")][..],
            &[("linger.ms", "5"), ("session.timeout.ms", "10000")],
            &[("topic.auto.offset.reset", "earliest")],
        ] {
            assert_eq!(refuse_two_names(&kafka(taken)), Ok(()), "{taken:?}");
        }
        // A credential's values are not shown (until the night of
        // 2026-12-04 both were, on stderr).
        let e = refuse_two_names(&kafka(&[
            ("sasl.oauthbearer.client.secret", "s3cr3t-one"),
            ("topic.sasl.oauthbearer.client.secret", "s3cr3t-two"),
        ]))
        .unwrap_err();
        assert!(!e.contains("s3cr3t"), "{e}");
        assert!(
            e.contains("sasl.oauthbearer.client.secret=<10 characters, not shown>"),
            "{e}"
        );
    }

    #[test]
    fn credentials_are_not_shown() {
        for key in [
            "sasl.password",
            "ssl.key.password",
            "ssl.keystore.password",
            "ssl.key.pem",
            "sasl.oauthbearer.config",
            "sasl.oauthbearer.client.secret",
            "sasl.oauthbearer.assertion.private.key.passphrase",
            "topic.sasl.password",
        ] {
            assert_eq!(
                shown(key, "hunter2"),
                format!("{key}=<7 characters, not shown>")
            );
        }
        assert_eq!(shown("sasl.username", "alice"), "sasl.username=alice");
        assert_eq!(shown("linger.ms", "5"), "linger.ms=5");
    }

    /// A number librdkafka reads as another is refused, with what it reads;
    /// a number it reads as given, and text, enum names and booleans, pass.
    #[test]
    fn a_number_librdkafka_misreads_is_refused() {
        let one = |k: &str, v: &str| BTreeMap::from([(k.to_owned(), v.to_owned())]);
        for (k, v, read) in [
            ("session.timeout.ms", "1.5", "1"),
            ("fetch.min.bytes", "1MB", "1"),
            ("fetch.wait.max.ms", "0x10z", "16"),
            ("topic.message.timeout.ms", "6000ms", "6000"),
            ("statistics.interval.ms", "1e3", "1"),
        ] {
            let e = refuse_misread_numbers(&one(k, v))
                .map_or_else(|e| e, |()| panic!("{k}={v} passed"));
            assert!(
                e.starts_with(&format!("-X {k}={v}: librdkafka reads it as {read} (")),
                "{e}"
            );
        }
        for (k, v) in [
            ("session.timeout.ms", "6000"),
            ("session.timeout.ms", "+6000"),
            ("session.timeout.ms", "0x1770"),
            ("linger.ms", "0.5"),
            ("linger.ms", "5.0"),
            ("linger.ms", "0.1234567"),
            ("linger.ms", "12345.67"),
            ("acks", "all"),
            ("acks", "-1"),
            ("enable.idempotence", "1"),
            ("client.id", "010"),
            ("client.id", "1.5x"),
            ("bootstrap.servers", "127.0.0.1:9092"),
            ("sasl.password", "1.5"),
            ("no.such.property", "1.5"),
        ] {
            assert_eq!(refuse_misread_numbers(&one(k, v)), Ok(()), "{k}={v}");
        }
        // Each misreading in its own words.
        for (k, v, said) in [
            (
                "fetch.wait.max.ms",
                "010",
                "librdkafka reads a number with a leading 0 as octal (010 is 8): write it without the 0",
            ),
            // Refused by librdkafka's range as 8, which said nothing of octal.
            (
                "socket.timeout.ms",
                "010",
                "librdkafka reads a number with a leading 0 as octal (010 is 8)",
            ),
            ("fetch.wait.max.ms", "09", "octal (09 is 0)"),
            ("fetch.wait.max.ms", "-010", "octal (-010 is -8)"),
            ("linger.ms", "nanx", "not a finite number"),
            (
                "session.timeout.ms",
                "4294973296",
                "librdkafka reads it as 6000: an integer setting holds 32 bits",
            ),
            (
                "session.timeout.ms",
                "100000.9",
                "librdkafka reads it as 100000 (",
            ),
            ("linger.ms", "nan", "not a finite number"),
            ("linger.ms", "-NaN", "not a finite number"),
        ] {
            let e = refuse_misread_numbers(&one(k, v))
                .map_or_else(|e| e, |()| panic!("{k}={v} passed"));
            assert!(e.starts_with(&format!("-X {k}={v}: ")) && e.contains(said), "{e}");
        }
        // Text that reads as no number stays text; octal that reads as
        // meant, or in the decimal property (strtod), passes; an unknown
        // name is left to the client's creation, which names it.
        for (k, v) in [
            ("client.id", "nan"),
            ("fetch.wait.max.ms", "05"),
            ("fetch.wait.max.ms", "00"),
            ("linger.ms", "010"),
            ("sesion.timeout.ms", "010"),
        ] {
            assert_eq!(refuse_misread_numbers(&one(k, v)), Ok(()), "{k}={v}");
        }
    }

    #[test]
    fn values_compare_as_librdkafka_reads_them() {
        for (a, b) in [
            ("false", "0"),
            ("F", "false"),
            ("TRUE", "1"),
            ("0.0", "0"),
            ("x", "x"),
        ] {
            assert!(same_value(a, b), "{a} = {b}");
        }
        for (a, b) in [
            ("false", "true"),
            ("5", "0"),
            (" false", "false"),
            ("no", "false"),
        ] {
            assert!(!same_value(a, b), "{a} != {b}");
        }
    }

    /// An enum's value in another case is the value librdkafka reads
    /// (`rd_strcasecmp`): not refused; another value is.
    #[test]
    fn an_enum_value_in_another_case_is_not_refused() {
        let x = |k: &str, v: &str| BTreeMap::from([(k.to_owned(), v.to_owned())]);
        for (k, v, ours) in [
            ("isolation.level", "READ_COMMITTED", "read_committed"),
            ("group.protocol", "Classic", "classic"),
            ("auto.offset.reset", "ERROR", "error"),
        ] {
            assert_eq!(setting_other_than(&x(k, v), k, Some(ours)), None, "{k}={v}");
        }
        let other = x("isolation.level", "READ_UNCOMMITTED");
        assert_eq!(
            setting_other_than(&other, "isolation.level", Some("read_committed")),
            Some(("isolation.level", "READ_UNCOMMITTED"))
        );
    }

    /// A broker whose every reply takes 600 ms: the slices that end before
    /// it (250, 500 ms) double until one is long enough. With a fixed slice
    /// each would ask again and never hear a reply.
    #[test]
    fn a_slow_reply_is_awaited_and_a_stop_ends_the_wait() {
        let mock = MockCluster::new(1).unwrap();
        mock.create_topic("t", 1, 1).unwrap();
        let brokers = mock.bootstrap_servers();
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &brokers)
            .create()
            .unwrap();
        // Connected first: the round trip slows replies, not the connect.
        cluster_metadata(c.client(), &brokers, Duration::from_secs(10), &|| false).unwrap();
        mock.broker_round_trip_time(1, Duration::from_millis(600))
            .unwrap();
        let md =
            cluster_metadata(c.client(), &brokers, Duration::from_secs(30), &|| false).unwrap();
        assert!(md.topics().iter().any(|t| t.name() == "t"));
        let e =
            cluster_metadata(c.client(), &brokers, Duration::from_secs(30), &|| true).unwrap_err();
        // Not timed: without the stop the wait would end in a reply or a
        // timeout, never in `StoppedWaiting`.
        assert!(matches!(e, ConnectorError::StoppedWaiting { .. }), "{e}");
    }

    /// Each kind of client error is said at WARN once (a minute): kinds
    /// differ by the broker named, and by text other than counts; a log
    /// line of a broker's failure and its error are one kind.
    #[test]
    fn each_kind_of_client_error_is_warned_once() {
        use rdkafka::error::KafkaError::Global;
        use RDKafkaErrorCode::{AllBrokersDown, BrokerTransportFailure as Transport};
        let last = LastCause::default();
        let refused = |b: &str, n: u32| {
            format!("{b}/bootstrap: Connect to ipv4#{b} failed: Connection refused (after {n}ms in state CONNECT)")
        };
        assert!(last.note(&Global(Transport), &refused("k1:9092", 0)));
        assert!(!last.note(&Global(Transport), &refused("k1:9092", 3)));
        // Its log line said first, the error after it is a repeat.
        assert!(last.note_text(&refused("k3:9092", 0), true));
        assert!(!last.note(&Global(Transport), &refused("k3:9092", 0)));
        // librdkafka's own count of the repeats it held back is no news.
        let held_back = refused("k1:9092", 0).replace(")", ", 1 identical error(s) suppressed)");
        assert!(!last.note(&Global(Transport), &held_back));
        // Another broker failing is news.
        assert!(last.note(&Global(Transport), &refused("k2:9092", 0)));
        assert!(last.note(&Global(AllBrokersDown), "2/2 brokers are down"));
        assert!(!last.note(&Global(AllBrokersDown), "1/2 brokers are down"));
        // The cause kept is the last that names one.
        let cause = last.0.lock().unwrap().last.clone();
        assert_eq!(cause, Some(refused("k2:9092", 0)));
    }

    /// A refused or unknown property's value is not shown where it may be
    /// a credential: neither in rdkafka's text of the error (which ends
    /// with the value) nor in librdkafka's description quoting it.
    #[test]
    fn a_refused_credential_is_not_shown() {
        use rdkafka::types::RDKafkaConfRes as Res;
        let secret = "hunter2-secret";
        let shown = |e: KafkaError| redacted(e).to_string();
        let invalid = KafkaError::ClientConfig(
            Res::RD_KAFKA_CONF_INVALID,
            format!("Invalid value \"{secret}\" for configuration property"),
            "sasl.oauthbearer.client.secret".into(),
            secret.into(),
        );
        let text = shown(invalid);
        assert!(
            !text.contains("hunter2") && text.contains("<14 characters, not shown>"),
            "{text}"
        );
        // An unknown property: a mistyped credential's name.
        let mut c = ClientConfig::new();
        c.set("sasl.pasword", secret);
        let e = check_consumer_settings(&c).unwrap_err();
        assert!(e.contains("sasl.pasword") && !e.contains("hunter2"), "{e}");
        // Said as the property, then librdkafka's description; a short
        // value hidden without garbling the rest.
        let mut c = ClientConfig::new();
        c.set("foo1.bar", "1");
        assert_eq!(
            check_consumer_settings(&c).unwrap_err(),
            "-X foo1.bar=<1 characters, not shown>: No such configuration property: \"foo1.bar\""
        );
        let mut c = ClientConfig::new();
        c.set("session.timeout.ms", "abc");
        let e = check_consumer_settings(&c).unwrap_err();
        assert!(
            e.starts_with("-X session.timeout.ms=abc: Invalid value"),
            "{e}"
        );
        // Any other property's value is shown as it was.
        let mut c = ClientConfig::new();
        c.set("fetch.wait.max.ms", "not-a-number");
        let e = check_consumer_settings(&c).unwrap_err();
        assert!(e.contains("not-a-number"), "{e}");
        // This build's librdkafka has no OIDC: a client secret for it is
        // refused, its value not shown.
        let mut c = ClientConfig::new();
        c.set("sasl.oauthbearer.method", "oidc")
            .set("sasl.oauthbearer.client.secret", secret);
        if let Err(e) = check_consumer_settings(&c) {
            assert!(!e.contains("hunter2"), "{e}");
        }
    }
}
