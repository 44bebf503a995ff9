//! `RedisStoreConfig::from_url` (and `FromStr`), fed arbitrary text and near-valid URLs —
//! a valid URL with one parameter changed, huge numbers and durations, odd hosts and
//! ports — answers without a panic or an overflow (the tests run in debug builds, where
//! an overflow panics), and every problem names the setting it is about.

use fusebox_redis::RedisStoreConfig;
use proptest::prelude::*;
use proptest::test_runner::{FileFailurePersistence, TestCaseError};

fn config() -> ProptestConfig {
    ProptestConfig {
        // Run from the crate's directory, as the other crates keep theirs.
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/url_properties.txt",
        ))),
        ..ProptestConfig::with_cases(10_000)
    }
}

/// Whether `path` names a setting: the URL (`url`), one of its parameters (`url.mode`),
/// or a field of the configuration (`flush_interval`, `scope.dep`): dotted lowercase
/// words.
fn names_a_setting(path: &str) -> bool {
    path.starts_with("url.")
        || path.split('.').all(|word| {
            !word.is_empty() && word.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
        })
}

/// Reads `url` both ways; a configuration, or problems that each name their setting.
fn check(url: &str) -> Result<(), TestCaseError> {
    let parsed = RedisStoreConfig::from_url(url);
    let from_str = url.parse::<RedisStoreConfig>();
    prop_assert_eq!(
        parsed.as_ref().map_err(ToString::to_string),
        from_str.as_ref().map_err(ToString::to_string),
        "FromStr reads as from_url"
    );
    match parsed {
        Ok(config) => {
            // What a valid configuration holds is within its rules, and shows redacted.
            prop_assert!(config.timeout() < config.probe_lease());
            prop_assert!(config.max_in_flight() >= 1);
            let shown = format!("{config:?}");
            if let Some((_, pass)) = url.split_once("pass=") {
                let pass = pass.split('&').next().unwrap_or_default();
                if pass.len() > 3 {
                    prop_assert!(!shown.contains(&format!("pass={pass}")), "{}", shown);
                }
            }
        }
        Err(e) => {
            prop_assert!(!e.problems().is_empty());
            for p in e.problems() {
                prop_assert!(
                    names_a_setting(p.path()),
                    "{:?} is no setting: {}",
                    p.path(),
                    p
                );
                prop_assert!(!p.rule().is_empty(), "{}", p);
            }
        }
    }
    Ok(())
}

/// Choices that build a URL; 0 is the plainest (which is what a shrunk case tends to).
struct Choices<'c>(std::slice::Iter<'c, u8>);

impl Choices<'_> {
    fn pick(&mut self, n: usize) -> usize {
        self.0.next().map_or(0, |&c| usize::from(c) % n)
    }

    fn one_of<'o>(&mut self, options: &[&'o str]) -> &'o str {
        options[self.pick(options.len())]
    }
}

/// A value for a parameter: good ones, the limits, and wrong ones.
const VALUES: [&str; 36] = [
    "payments",
    "eu",
    "5ms",
    "1s",
    "0s",
    "1ns",
    "10s",
    "11s",
    "1000ms",
    "584542046090y",
    "18446744073709551615s",
    "18446744073709551616ns",
    "99999999999999999999999h",
    "1",
    "0",
    "18446744073709551615",
    "18446744073709551616",
    "-1",
    "strict",
    "batched",
    "fail_open",
    "fail-closed",
    "local",
    "a,b,,c",
    "a}b",
    "{x}",
    "a:b",
    "",
    " ",
    "%20",
    "\u{e9}",
    "a.b-c_d",
    "&",
    "=",
    "?",
    "#",
];

const PARAMS: [&str; 20] = [
    "dep",
    "region",
    "tenant",
    "prefix",
    "mode",
    "flush",
    "timeout",
    "poll",
    "retry",
    "lease",
    "idle_ttl",
    "max_in_flight",
    "fallback",
    "keys",
    "protocol",
    "db",
    "user",
    "pass",
    "colour",
    "",
];

/// A near-valid URL: a base (scheme, user, host, port, database) and parameters, some
/// changed.
fn near_valid(c: &mut Choices<'_>) -> String {
    let scheme = c.one_of(&[
        "redis://",
        "rediss://",
        "redis+unix://",
        "redis:",
        "http://",
        "",
    ]);
    let user = c.one_of(&["", "", "user@", "user:secret@", ":p@ss@", "\u{e9}@"]);
    let host = c.one_of(&[
        "127.0.0.1",
        "cache",
        "[::1]",
        "",
        "\u{e9}t\u{e9}.example",
        "a b",
        "/tmp/redis.sock",
        "[::1",
    ]);
    let port = c.one_of(&[
        "",
        ":6379",
        ":0",
        ":65535",
        ":65536",
        ":99999999999999999999",
        ":x",
    ]);
    let db = c.one_of(&["", "/0", "/15", "/-1", "/18446744073709551616", "/x", "//"]);
    let mut url = format!("{scheme}{user}{host}{port}{db}");
    let params = c.pick(6);
    for i in 0..params {
        url.push(if i == 0 { '?' } else { '&' });
        let key = c.one_of(&PARAMS);
        match c.pick(8) {
            0 => url.push_str(key),
            _ => {
                url.push_str(key);
                url.push('=');
                url.push_str(c.one_of(&VALUES));
            }
        }
    }
    url
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn urls_of_arbitrary_text(bytes in prop::collection::vec(any::<u8>(), 0..80)) {
        check(&String::from_utf8_lossy(&bytes))?;
        let mut url = String::from("redis://127.0.0.1:6379/0?");
        url.push_str(&String::from_utf8_lossy(&bytes));
        check(&url)?;
    }

    #[test]
    fn near_valid_urls(choices in prop::collection::vec(any::<u8>(), 0..64)) {
        check(&near_valid(&mut Choices(choices.iter())))?;
    }
}
