use super::*;
use bytes::Bytes;
use fusebox_classify::{Call, Classified, Classifier, Outcome, RouteId};
use fusebox_limit::Limit;
use http::{HeaderMap, Method, StatusCode};

#[cfg(feature = "toml")]
const EXAMPLE_TOML: &str = include_str!("../../../../examples/fusebox.toml");
#[cfg(feature = "yaml")]
const EXAMPLE_YAML: &str = include_str!("../../../../examples/fusebox.yaml");

fn problems(e: &ConfigError) -> Vec<String> {
    e.problems().iter().map(|p| p.to_string()).collect()
}

fn route_id(policy: &Policy, name: &str) -> RouteId {
    policy
        .routes()
        .iter()
        .find(|(_, n, _)| *n == name)
        .map(|(id, _, _)| id)
        .unwrap_or_else(|| panic!("no route {name}"))
}

fn outcome(policy: &Policy, route: &str, status: u16) -> Outcome {
    let id = route_id(policy, route);
    let call = Call::new(id, route, &Method::POST, false);
    match policy.routes().route(id).classifier().classify_response(
        &call,
        StatusCode::from_u16(status).unwrap(),
        &HeaderMap::new(),
    ) {
        Classified::Ready(v) => v.outcome(),
        Classified::AtEndOfStream => panic!("decided by the status"),
    }
}

fn fallback() -> Fallback {
    Fallback::new(|_| http::Response::new(Bytes::from_static(b"rules v0")))
}

fn check_example(file: &PolicyFile) {
    assert_eq!(
        file.policy_names().collect::<Vec<_>>(),
        ["fraud-eu", "inventory", "ledger"]
    );

    // fraud-eu: a route asks for a fallback, which only code can give.
    let err = file.build("fraud-eu").unwrap_err();
    assert_eq!(
        problems(&err),
        [
            "policies.fraud-eu.routes[\"GET /rules/{version}\"].fallback: asks for a fallback, but the policy has no fallback function (PolicyBuilder::fallback)"
        ]
    );
    let fraud = file
        .policy("fraud-eu")
        .unwrap()
        .fallback(fallback())
        .build()
        .unwrap();
    assert!(fraud.has_fallback() && fraud.has_recovery_ramp());
    assert_eq!(fraud.limit_config().unwrap().limit(), &Limit::Fixed(64));
    assert_eq!(fraud.limit_config().unwrap().name(), "fraud-eu");
    // Inherited from the defaults.
    assert_eq!(
        fraud.timeout_config().unwrap().default_timeout(),
        Duration::from_secs(2)
    );
    let retry = fraud.retry_config().unwrap();
    assert_eq!(
        (retry.max_attempts(), retry.retry_ratio_billionths()),
        (3, 100_000_000)
    );
    assert_eq!(retry.name(), "fraud-eu");
    let breaker = fraud.breaker_handle().unwrap();
    assert_eq!(breaker.name(), "fraud-eu");
    // Routes: the partner's 429s count on its score route only.
    let score = fraud.routes().route(route_id(&fraud, "POST /score"));
    assert_eq!(score.timeout_duration(), Some(Duration::from_millis(250)));
    assert!(!score.retry_enabled());
    assert_eq!(score.idempotent_override(), Some(true));
    assert_eq!(outcome(&fraud, "POST /score", 429), Outcome::Failure);
    assert_eq!(
        outcome(&fraud, "GET /rules/{version}", 429),
        Outcome::Ignored
    );
    assert_eq!(
        fraud.routes().route(RouteId::DEFAULT).slow_call_threshold(),
        Some(Duration::from_millis(300)),
        "the policy's default route overrides the defaults'"
    );

    // inventory: keyed breakers, an adaptive limit, one retry key overridden.
    assert!(!file.policy("inventory").unwrap().wants_fallback());
    let inventory = file.build("inventory").unwrap();
    assert!(inventory.keyed_breaker_handle().is_some());
    assert!(matches!(
        inventory.limit_config().unwrap().limit(),
        Limit::Aimd(_)
    ));
    let retry = inventory.retry_config().unwrap();
    assert_eq!(retry.max_attempts(), 2);
    assert_eq!(retry.base_delay(), Duration::from_millis(25));
    assert_eq!(
        outcome(&inventory, "GET /stock/{sku}", 409),
        Outcome::Failure
    );
    assert_eq!(
        inventory
            .routes()
            .route(RouteId::DEFAULT)
            .slow_call_threshold(),
        Some(Duration::from_secs(1)),
        "inherited"
    );

    // ledger: retries disabled though the defaults have them.
    let ledger = file.build("ledger").unwrap();
    assert!(ledger.retry_budget().is_none());
    assert!(ledger.breaker_handle().is_some());
    assert_eq!(
        ledger.timeout_config().unwrap().default_timeout(),
        Duration::from_millis(500)
    );
    assert!(
        !ledger
            .routes()
            .route(route_id(&ledger, "/ledger.Ledger/{*method}"))
            .retry_enabled()
    );
}

#[cfg(feature = "toml")]
#[test]
fn the_example_toml_file_builds_what_it_describes() {
    check_example(&PolicyFile::from_toml(EXAMPLE_TOML).unwrap());
    let loaded = PolicyFile::load(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/fusebox.toml"
    ))
    .unwrap();
    assert_eq!(loaded.policy_names().count(), 3);
}

#[cfg(feature = "yaml")]
#[test]
fn the_example_yaml_file_builds_the_same_policies() {
    check_example(&PolicyFile::from_yaml(EXAMPLE_YAML).unwrap());
    let loaded = PolicyFile::load(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/fusebox.yaml"
    ))
    .unwrap();
    assert_eq!(loaded.policy_names().count(), 3);
}

#[cfg(feature = "toml")]
#[test]
fn every_problem_is_reported_with_its_path() {
    let err = PolicyFile::from_toml(
        r#"
        colour = "blue"

        [defaults.breaker]
        failure_rate_threshold = 150        # inherited by both policies, reported once
        open_wait = 30                      # not a duration

        [defaults.timout]
        default_timeout = "1s"

        [policies.fraud-eu.breaker]
        minimum_calls = 0
        failur_rate_threshold = 10
        on_close = "never"

        [policies.fraud-eu.limit]
        max_concurrency = 0

        [policies.fraud-eu.limit.adaptive]
        algorithm = "aimd"
        alpha = 3.0

        [policies.fraud-eu.routes."score"]
        timeout = "0s"

        [policies.fraud-eu.recovery_ramp]
        initial_limit = 5
        duration = "10s"

        [policies.inventory.retry]
        max_attempts = 0
        retry_ratio = "lots"
        "#,
    )
    .unwrap_err();
    assert_eq!(
        problems(&err),
        [
            "colour: unknown key; expected one of: defaults, policies, metrics",
            "defaults.breaker.open_wait: must be a duration with a unit, such as \"250ms\" or \"30s\", got 30",
            "defaults.timout: unknown key; did you mean `timeout`?",
            "policies.fraud-eu.breaker.failur_rate_threshold: unknown key; did you mean `failure_rate_threshold`?",
            "policies.fraud-eu.breaker.on_close: must be one of \"clear\", \"keep\", got \"never\"",
            "policies.fraud-eu.limit.adaptive: set either max_concurrency or adaptive, not both",
            "policies.fraud-eu.limit.adaptive.alpha: only read by algorithm = \"vegas\", not \"aimd\"",
            "policies.inventory.retry.retry_ratio: must be a number, got \"lots\"",
            "policies.fraud-eu.routes[\"score\"].timeout: must be greater than zero",
            "policies.fraud-eu.routes[\"score\"]: path must start with `/`, got `score`",
            "policies.fraud-eu.limit.max_concurrency: must be at least 1, got 0",
            "policies.fraud-eu.breaker.minimum_calls: must be at least 1, got 0",
            "defaults.breaker.failure_rate_threshold: must be within 1..=100, got 150",
            "policies.inventory.retry.max_attempts: must be within 1..=100, got 0",
        ]
    );
}

#[cfg(feature = "toml")]
#[test]
fn inheritance_and_disabling() {
    let file = PolicyFile::from_toml(
        r#"
        [defaults.breaker]
        count_window = 50
        minimum_calls = 10
        [defaults.limit]
        max_concurrency = 10
        [defaults.routes."GET /health"]
        timeout = "100ms"

        [policies.a.breaker]
        time_window = "60s"                 # replaces the defaults' count window
        [policies.a.limit.adaptive]
        algorithm = "vegas"                 # replaces the defaults' fixed limit
        [policies.a.routes."GET /health"]
        retry = false                       # merged with the defaults' route

        [policies.b.breaker]
        enabled = false
        [policies.b.limit]
        enabled = false
        "#,
    )
    .unwrap();
    let a = file.build("a").unwrap();
    assert!(matches!(a.limit_config().unwrap().limit(), Limit::Vegas(_)));
    let health = a.routes().route(route_id(&a, "GET /health"));
    assert_eq!(health.timeout_duration(), Some(Duration::from_millis(100)));
    assert!(!health.retry_enabled());
    assert!(a.has_timeout(), "a route timeout turns the timeout on");
    let b = file.build("b").unwrap();
    assert!(b.breaker_handle().is_none() && b.limit_handle().is_none());

    let err = file.build("c").unwrap_err();
    assert_eq!(
        problems(&err),
        ["policies: has no policy named \"c\"; the file has: a, b"]
    );
}

#[cfg(feature = "toml")]
#[test]
fn parse_errors_name_the_file() {
    let err = PolicyFile::from_toml("[defaults\n").unwrap_err();
    assert!(
        problems(&err)[0].starts_with("file: is not valid TOML"),
        "{err}"
    );
    let err = PolicyFile::load("/nonexistent/fusebox.toml").unwrap_err();
    assert!(problems(&err)[0].contains("cannot be read"), "{err}");
}

#[cfg(feature = "yaml")]
#[test]
fn yaml_problems_have_the_same_paths() {
    let err = PolicyFile::from_yaml(
        "policies:\n  fraud-eu:\n    breaker:\n      failure_rate_threshold: 150\n      minimum_cals: 3\n",
    )
    .unwrap_err();
    assert_eq!(
        problems(&err),
        [
            "policies.fraud-eu.breaker.minimum_cals: unknown key; did you mean `minimum_calls`?",
            "policies.fraud-eu.breaker.failure_rate_threshold: must be within 1..=100, got 150",
        ]
    );
}

#[cfg(all(feature = "toml", feature = "redis"))]
#[test]
fn a_breaker_store_on_redis_is_inherited_key_by_key() {
    use fusebox_redis::{Fallback as OnOutage, Mode, Scope};

    let file = PolicyFile::from_toml(
        r#"
        [defaults.breaker.store]
        kind = "redis"
        url = "redis://127.0.0.1:6379/0"
        mode = "strict"
        timeout = "20ms"

        [policies.payments.breaker]
        [policies.payments.breaker.store]
        scope = "dep:payments:region:eu"
        fallback = "fail_closed"

        [policies.fraud.breaker]
        name = "fraud-eu"                   # the scope's dependency, by default

        [policies.partners.breaker]
        key = "host"
        [policies.partners.breaker.store]
        mode = "batched"
        flush_interval = "2ms"
        shared_keys = ["api.partner.example"]

        [policies.local.breaker.store]
        kind = "memory"                     # opts out of the defaults' Redis
        "#,
    )
    .unwrap();

    let payments = file.build("payments").unwrap();
    let on = payments.breaker_store().redis().expect("on Redis");
    let config = on.config();
    assert_eq!(config.url(), "redis://127.0.0.1:6379/0");
    assert_eq!(config.mode(), Mode::Strict);
    assert_eq!(config.timeout(), Duration::from_millis(20));
    assert_eq!(config.fallback(), OnOutage::FailClosed);
    assert_eq!(config.scope(), &Scope::dep("payments").region("eu"));
    assert!(!on.is_connected(), "building connects to nothing");

    let fraud = file.build("fraud").unwrap();
    let config = fraud.breaker_store().redis().expect("on Redis").config();
    assert_eq!(config.scope(), &Scope::breaker_name());
    assert_eq!(config.fallback(), OnOutage::Local);

    let partners = file.build("partners").unwrap();
    let config = partners.breaker_store().redis().expect("on Redis").config();
    assert_eq!(config.mode(), Mode::Batched);
    assert_eq!(config.flush_interval(), Duration::from_millis(2));
    assert_eq!(
        config.shared_keys().collect::<Vec<_>>(),
        ["api.partner.example"]
    );
    assert!(partners.keyed_breaker_handle().is_some());

    let local = file.build("local").unwrap();
    assert!(local.breaker_store().is_in_memory());
    assert!(local.breaker_handle().is_some());
}

#[cfg(all(feature = "toml", feature = "redis"))]
#[test]
fn invalid_store_sections_report_every_problem_at_its_path() {
    // The values of the store's keys.
    let err = PolicyFile::from_toml(
        r#"
        [defaults.breaker.store]
        kind = "redis"
        url = "redis://127.0.0.1:6379/0"
        flush_interval = "0ms"              # inherited by both policies, reported once

        [policies.payments.breaker.store]
        scope = "dep:pay ments"
        mode = "eventually"
        timout = "20ms"
        max_in_flight = -1

        [policies.partners.breaker.store]
        url = "http://nope"
        scope = "region"

        [policies.memory.breaker.store]
        kind = "memory"
        url = "redis://127.0.0.1/"
        "#,
    )
    .unwrap_err();
    assert_eq!(
        problems(&err),
        [
            "policies.memory.breaker.store.url: only read with kind = \"redis\"",
            "policies.payments.breaker.store.max_in_flight: must be a whole number within 0..=4294967295, got -1",
            "policies.payments.breaker.store.mode: must be one of \"strict\", \"batched\", got \"eventually\"",
            "policies.payments.breaker.store.timout: unknown key; did you mean `timeout`?",
            "policies.partners.breaker.store.scope: must be \"dep:<name>\", optionally followed by \":region:<region>\" and \":tenant:<tenant>\", got \"region\"",
            "policies.partners.breaker.store.url: must be a Redis URL (redis://host:port/db), got \"http://nope\": Redis URL did not parse- InvalidClientConfig",
            "defaults.breaker.store.flush_interval: must be within 1ms..=1s, got 0ns",
            "policies.payments.breaker.store.scope: must be 1 to 64 ASCII letters, digits, '.', '_' or '-', got \"pay ments\"",
        ]
    );

    // How the store fits the breaker.
    let err = PolicyFile::from_toml(
        r#"
        [policies.partners.breaker]
        key = "host"
        [policies.partners.breaker.store]
        kind = "redis"
        url = "redis://127.0.0.1/"

        [policies.routes.breaker]
        key = "route"
        [policies.routes.breaker.store]
        kind = "redis"
        url = "redis://127.0.0.1/"
        shared_keys = ["default"]

        [policies.unkeyed.breaker]
        name = "fraud eu"
        [policies.unkeyed.breaker.store]
        kind = "redis"
        url = "redis://127.0.0.1/"
        shared_keys = ["shard-1"]

        [policies.nokind.breaker.store]
        url = "redis://127.0.0.1/"
        "#,
    )
    .unwrap_err();
    assert_eq!(
        problems(&err),
        [
            "policies.nokind.breaker.store.kind: is required: \"memory\" or \"redis\"",
            "policies.partners.breaker.store.shared_keys: must list the keys the fleet shares: a keyed breaker keeps on Redis only the keys listed (keys computed from requests never reach Redis otherwise), and none is",
            "policies.routes.breaker.store: a breaker keyed by route cannot keep its keys on Redis: route names (\"GET /users/{id}\") are not valid Redis scope parts; key by host, or give each route a policy of its own",
            "policies.unkeyed.breaker.store.scope: must name the dependency: the breaker's name \"fraud eu\", which it defaults to, is not a valid Redis scope part (1 to 64 ASCII letters, digits, '.', '_' or '-')",
            "policies.unkeyed.breaker.store.shared_keys: only a keyed breaker has keys to share, and this one is unkeyed",
        ]
    );
}

#[cfg(all(feature = "toml", not(feature = "redis")))]
#[test]
fn a_redis_store_needs_the_redis_feature() {
    let err = PolicyFile::from_toml(
        r#"
        [policies.payments.breaker.store]
        kind = "redis"
        url = "redis://127.0.0.1:6379/0"
        scope = "dep:payments"
        "#,
    )
    .unwrap_err();
    assert_eq!(
        problems(&err),
        [
            "policies.payments.breaker.store.kind: is \"redis\", which needs fusebox's `redis` feature, and this build does not have it: enable the feature, or use kind = \"memory\""
        ]
    );
    let file = PolicyFile::from_toml(
        r#"
        [policies.payments.breaker.store]
        kind = "memory"
        "#,
    )
    .unwrap();
    assert!(
        file.build("payments")
            .unwrap()
            .breaker_store()
            .is_in_memory()
    );
}

/// The policies of `file`, written out as a file and read back: each builds as before.
#[cfg(feature = "toml")]
fn written_and_read_back(file: &PolicyFile, names: &[&str]) {
    let build = |file: &PolicyFile, name: &str| match file.policy(name).unwrap().wants_fallback() {
        true => file
            .policy(name)
            .unwrap()
            .fallback(fallback())
            .build()
            .unwrap(),
        false => file.build(name).unwrap(),
    };
    let policies: Vec<Policy> = names.iter().map(|n| build(file, n)).collect();
    let refs: Vec<&Policy> = policies.iter().collect();
    let written = toml::to_string(&PolicyFileSection::of(&refs)).unwrap();
    let again = PolicyFile::from_toml(&written).unwrap_or_else(|e| panic!("{e}\n{written}"));
    for (name, before) in names.iter().zip(&policies) {
        let after = build(&again, name);
        assert_eq!(after.breaker_config(), before.breaker_config(), "{name}");
        assert_eq!(after.limit_config(), before.limit_config(), "{name}");
        assert_eq!(after.timeout_config(), before.timeout_config(), "{name}");
        assert_eq!(
            after
                .retry_config()
                .as_deref()
                .map(fusebox_retry::RetrySection::of),
            before
                .retry_config()
                .as_deref()
                .map(fusebox_retry::RetrySection::of),
            "{name}"
        );
        assert_eq!(after.recovery_ramp(), before.recovery_ramp(), "{name}");
        let table = |p: &Policy| -> Vec<(String, fusebox_classify::section::RouteSection)> {
            p.routes()
                .iter()
                .map(|(_, n, r)| {
                    (
                        n.to_owned(),
                        fusebox_classify::section::RouteSection::of(&r),
                    )
                })
                .collect()
        };
        assert_eq!(table(&after), table(before), "{name}");
        // Effective route settings, inherited ones included.
        for ((_, _, a), (_, _, b)) in after.routes().iter().zip(before.routes().iter()) {
            assert_eq!(a.slow_call_threshold(), b.slow_call_threshold());
            assert_eq!(a.timeout_duration(), b.timeout_duration());
            assert_eq!(a.retry_enabled(), b.retry_enabled());
            assert_eq!(a.idempotent_override(), b.idempotent_override());
        }
        // And written out again, the same file.
        let twice = toml::to_string(&PolicyFileSection::of(&[&after])).unwrap();
        let once = toml::to_string(&PolicyFileSection::of(&[before])).unwrap();
        assert_eq!(twice, once, "{name}");
    }
}

#[cfg(feature = "toml")]
#[test]
fn a_built_policy_written_out_reads_back_the_same() {
    let file = PolicyFile::from_toml(EXAMPLE_TOML).unwrap();
    written_and_read_back(&file, &["fraud-eu", "inventory", "ledger"]);
    // Every kind of setting, the ones the example does not use included.
    let file = PolicyFile::from_toml(
        r#"
        [policies.all.breaker]
        name = "all-deps"
        time_window = "30s"
        time_window_buckets = 15
        consecutive_failures = 5
        open_wait_multiplier = 2.0
        max_open_wait = "2m"
        max_half_open_wait = "none"
        on_close = "keep"
        count_overloaded = true
        seed = 9
        [policies.all.limit]
        adaptive = { algorithm = "vegas", min_limit = 2, max_limit = 50, initial_limit = 10, probe_interval = "30s" }
        queue = { max_waiters = 8, max_wait = "20ms" }
        release = "end_of_body"
        [policies.all.timeout]
        default_timeout = "700ms"
        body_timeout = "5s"
        deadline_header = "x-request-timeout-ms"
        [policies.all.retry]
        retry_ratio = 0.0015
        failure_rate_threshold = "none"
        hedge_delay = "40ms"
        [policies.all.default_route]
        slow_call_duration = "200ms"
        protocol = "http"
        failure_statuses = [404]
        [policies.all.routes."GET /a"]
        slow_call_duration = "none"
        ignored_statuses = [409]
        count_throttling = true
        "#,
    )
    .unwrap();
    written_and_read_back(&file, &["all"]);
}

/// A file with every route setting on the default route, a route that sets none of them,
/// and a route that turns the two that can be turned off off.
const INHERITING_TOML: &str = r#"
[policies.p.default_route]
slow_call_duration = "250ms"
timeout = "800ms"
count_throttling = true
retry = false
idempotent = true
protocol = "http"
failure_statuses = [404]

[policies.p.routes."GET /plain"]

[policies.p.routes."GET /none"]
slow_call_duration = "none"
timeout = "none"
"#;

const INHERITING_YAML: &str = r#"
policies:
  p:
    default_route:
      slow_call_duration: 250ms
      timeout: 800ms
      count_throttling: true
      retry: false
      idempotent: true
      protocol: http
      failure_statuses: [404]
    routes:
      "GET /plain": {}
      "GET /none":
        slow_call_duration: none
        timeout: none
"#;

fn check_inheritance(file: &PolicyFile) {
    let p = file.build("p").unwrap();
    let plain = p.routes().route(route_id(&p, "GET /plain"));
    assert_eq!(
        plain.slow_call_threshold(),
        Some(Duration::from_millis(250))
    );
    assert_eq!(plain.timeout_duration(), Some(Duration::from_millis(800)));
    assert!(!plain.retry_enabled());
    assert_eq!(plain.idempotent_override(), Some(true));
    assert_eq!(
        plain.classifier().protocol_setting(),
        Some(fusebox_classify::Protocol::Http)
    );
    assert_eq!(outcome(&p, "GET /plain", 429), Outcome::Failure);
    assert_eq!(outcome(&p, "GET /plain", 404), Outcome::Failure);
    let none = p.routes().route(route_id(&p, "GET /none"));
    assert_eq!(none.slow_call_threshold(), None);
    assert_eq!(none.timeout_duration(), None);
    assert!(
        !none.retry_enabled(),
        "what it does not turn off it inherits"
    );
}

#[cfg(feature = "toml")]
#[test]
fn named_routes_inherit_the_default_route_in_toml() {
    check_inheritance(&PolicyFile::from_toml(INHERITING_TOML).unwrap());
}

#[cfg(feature = "yaml")]
#[test]
fn named_routes_inherit_the_default_route_in_yaml() {
    check_inheritance(&PolicyFile::from_yaml(INHERITING_YAML).unwrap());
}

#[cfg(feature = "toml")]
#[test]
fn explain_says_where_every_route_setting_comes_from() {
    let ms = Duration::from_millis;
    let file = PolicyFile::from_toml(EXAMPLE_TOML).unwrap();
    let fraud = file.explain("fraud-eu").unwrap();
    let names: Vec<(&str, bool)> = fraud
        .iter()
        .map(|r| (r.route.as_str(), r.default))
        .collect();
    // In table order (a TOML file's tables are read in the order of their keys).
    assert_eq!(
        names,
        [
            ("default", true),
            ("GET /rules/{version}", false),
            ("POST /score", false)
        ]
    );
    let (default, rules, score) = (&fraud[0], &fraud[1], &fraud[2]);
    // The policy's default route over the defaults' one.
    assert_eq!(default.section.slow_call_duration, Some(Some(ms(300))));
    assert_eq!(default.origin("slow_call_duration"), Origin::DefaultRoute);
    assert_eq!(default.origin("timeout"), Origin::BuiltIn);
    assert_eq!(default.section.timeout, None);
    // Named routes: their own keys, and what they inherit from the default route.
    assert_eq!(score.section.slow_call_duration, Some(Some(ms(300))));
    assert_eq!(score.origin("slow_call_duration"), Origin::DefaultRoute);
    assert_eq!(
        (score.section.timeout, score.origin("timeout")),
        (Some(Some(ms(250))), Origin::Route)
    );
    assert_eq!(
        (
            score.section.count_throttling,
            score.origin("count_throttling")
        ),
        (Some(true), Origin::Route)
    );
    assert_eq!(score.section.retry, Some(false));
    assert_eq!(rules.section.slow_call_duration, Some(Some(ms(300))));
    assert_eq!(rules.origin("fallback"), Origin::Route);
    assert_eq!(
        Origin::Route
            .table("policies.fraud-eu", &rules.route)
            .as_deref(),
        Some("policies.fraud-eu.routes[\"GET /rules/{version}\"]")
    );

    let inventory = file.explain("inventory").unwrap();
    let stock = &inventory[1];
    assert_eq!(stock.route, "GET /stock/{sku}");
    assert_eq!(stock.section.slow_call_duration, Some(Some(ms(1000))));
    assert_eq!(
        stock.origin("slow_call_duration"),
        Origin::DefaultsDefaultRoute
    );
    assert_eq!(
        Origin::DefaultsDefaultRoute
            .table("policies.inventory", &stock.route)
            .as_deref(),
        Some("defaults.default_route")
    );
    assert_eq!(
        (
            stock.section.failure_statuses.clone(),
            stock.origin("failure_statuses")
        ),
        (Some(vec![409]), Origin::Route)
    );
    assert_eq!(stock.origin("retry"), Origin::BuiltIn);

    // A route of the defaults, merged key by key with the policy's route of the same key.
    let file = PolicyFile::from_toml(
        r#"
        [defaults.routes."GET /x"]
        count_throttling = true
        timeout = "1s"
        [policies.a.routes."GET /x"]
        timeout = "2s"
        [policies.a.default_route]
        retry = false
        "#,
    )
    .unwrap();
    let x = &file.explain("a").unwrap()[1];
    assert_eq!(
        x.origins,
        [
            ("timeout".to_owned(), Origin::Route),
            ("count_throttling".to_owned(), Origin::DefaultsRoute),
            ("retry".to_owned(), Origin::DefaultRoute),
        ]
    );
    assert_eq!(x.section.timeout, Some(Some(ms(2000))));
    assert_eq!(x.section.count_throttling, Some(true));
    assert_eq!(x.section.retry, Some(false));
    assert_eq!(
        Origin::DefaultsRoute
            .table("policies.a", &x.route)
            .as_deref(),
        Some("defaults.routes[\"GET /x\"]")
    );
    assert_eq!(Origin::BuiltIn.table("policies.a", &x.route), None);
    assert!(
        problems(&file.explain("b").unwrap_err())[0].contains("has no policy named \"b\""),
        "an unknown policy is the problem `policy` reports"
    );
}

#[cfg(feature = "yaml")]
#[test]
fn a_json_file_is_read_as_yaml() {
    let path = std::env::temp_dir().join(format!("fusebox-config-{}.json", std::process::id()));
    std::fs::write(
        &path,
        r#"{"policies": {"a": {"breaker": {"minimum_calls": 5}}}}"#,
    )
    .unwrap();
    let loaded = PolicyFile::load(&path);
    let _ = std::fs::remove_file(&path);
    let policy = loaded.unwrap().build("a").unwrap();
    assert_eq!(policy.breaker_config().map(|b| b.minimum_calls()), Some(5));
}

#[cfg(all(feature = "toml", feature = "yaml"))]
#[test]
fn the_syntax_is_the_extensions_in_any_case() {
    let dir = std::env::temp_dir().join(format!("fusebox-syntax-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        PolicyFile::load(&path)
    };
    let toml = file("a.TOML", "[policies.a.breaker]\nminimum_calls = 5\n");
    let json = file("a.Json", r#"{"policies": {"a": {}}}"#);
    let ini = file("a.ini", "[policies.a]\n");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(toml.is_ok(), "{toml:?}");
    assert!(json.is_ok(), "{json:?}");
    assert_eq!(
        problems(&ini.unwrap_err()),
        [format!(
            "{}: has extension \"ini\": expected one of toml, yaml, yml, json",
            dir.join("a.ini").display()
        )]
    );
    assert_eq!(Syntax::of_path("x.yml"), Some(Syntax::Yaml));
    assert_eq!(Syntax::of_path("x"), None);
}

#[cfg(feature = "toml")]
#[test]
fn a_breaker_keyed_by_a_header_and_named_by_answers() {
    let file = PolicyFile::from_toml(
        r#"
        [defaults.breaker]
        answer_key_header = "X-Shard"       # inherited; any case

        [policies.store.breaker]
        key = "header"
        key_header = "x-shard"

        [policies.tenants.breaker]
        key = "header"
        key_header = "x-tenant"
        answer_key_header = "x-partition"
        "#,
    )
    .unwrap();
    let store = file.build("store").unwrap();
    let shard = http::HeaderName::from_static("x-shard");
    match store.breaker_key() {
        Some(KeyBy::Answered(inner, header)) => {
            assert_eq!(header, &shard);
            assert!(matches!(&**inner, KeyBy::Header(h) if *h == shard));
        }
        other => panic!("not named by answers: {other:?}"),
    }
    let tenants = file.build("tenants").unwrap();
    assert!(matches!(
        tenants.breaker_key(),
        Some(KeyBy::Answered(_, h)) if h.as_str() == "x-partition"
    ));
    // Written back, the file says the same.
    let written = toml::to_string(&PolicyFileSection::of(&[&store])).unwrap();
    assert!(
        written.contains("answer_key_header = \"x-shard\""),
        "{written}"
    );
    assert!(written.contains("key_header = \"x-shard\""), "{written}");
    let again = PolicyFile::from_toml(&written)
        .unwrap()
        .build("store")
        .unwrap();
    assert_eq!(
        format!("{:?}", again.breaker_key()),
        format!("{:?}", store.breaker_key())
    );
}

#[cfg(feature = "toml")]
#[test]
fn answer_keys_that_cannot_work_are_refused_at_their_path() {
    let err = PolicyFile::from_toml(
        r#"
        [policies.unkeyed.breaker]
        answer_key_header = "x-shard"

        [policies.routes.breaker]
        key = "route"
        answer_key_header = "x-shard"

        [policies.bad.breaker]
        key = "header"
        key_header = "x shard"
        answer_key_header = "x:shard"

        [policies.headerless.breaker]
        key = "header"

        [policies.stray.breaker]
        key = "host"
        key_header = "x-shard"
        "#,
    )
    .unwrap_err();
    let found = problems(&err);
    for want in [
        "policies.unkeyed.breaker.answer_key_header: needs a keyed breaker (`key`): an answer names one of its keys",
        "policies.routes.breaker.key: a breaker keyed by route cannot take its keys from answers",
        "policies.bad.breaker.answer_key_header: must be a header name",
        "policies.bad.breaker.key_header: must be a header name",
        "policies.headerless.breaker.key: \"header\" needs `key_header`",
        "policies.stray.breaker.key_header: only read with key = \"header\"",
    ] {
        assert!(
            found.iter().any(|p| p.starts_with(want)),
            "no {want:?} in {found:#?}"
        );
    }
}

#[cfg(feature = "toml")]
#[test]
fn a_spread_gated_dependency_breaker_round_trips_through_a_file() {
    let file = PolicyFile::from_toml(
        r#"
        [defaults.breaker.spread]
        min_keys = 4                        # inherited key by key

        [policies.store.breaker]
        key = "header"
        key_header = "x-shard"

        [policies.store.breaker.spread]
        min_failing_key_share = 0.75

        [policies.plain.breaker]
        key = "host"

        [policies.plain.breaker.spread]
        "#,
    )
    .unwrap();
    let store = file.build("store").unwrap();
    assert_eq!(store.key_spread(), Some(&KeySpread::new(0.75, 4).unwrap()));
    assert!(store.breaker_handle().is_some());
    assert!(store.keyed_breaker_handle().is_some());
    // An empty table takes the defaults (and `min_keys` from `defaults`).
    let plain = file.build("plain").unwrap();
    assert_eq!(
        plain.key_spread(),
        Some(&KeySpread::new(KeySpread::default().min_failing_key_share(), 4).unwrap())
    );

    // Written back, the file says the same, and reads back into the same rule.
    let written = toml::to_string(&PolicyFileSection::of(&[&store, &plain])).unwrap();
    assert!(
        written.contains("[policies.store.breaker.spread]"),
        "{written}"
    );
    assert!(
        written.contains("min_failing_key_share = 0.75"),
        "{written}"
    );
    let again = PolicyFile::from_toml(&written).unwrap();
    for (name, policy) in [("store", &store), ("plain", &plain)] {
        assert_eq!(again.build(name).unwrap().key_spread(), policy.key_spread());
    }
    // A policy without a spread writes none.
    let unkeyed = PolicyFile::from_toml("[policies.one.breaker]\n")
        .unwrap()
        .build("one")
        .unwrap();
    assert_eq!(unkeyed.key_spread(), None);
    let written = toml::to_string(&PolicyFileSection::of(&[&unkeyed])).unwrap();
    assert!(!written.contains("spread"), "{written}");
}

#[cfg(feature = "toml")]
#[test]
fn spreads_that_cannot_work_are_refused_at_their_path() {
    let err = PolicyFile::from_toml(
        r#"
        [policies.unkeyed.breaker.spread]
        min_keys = 3

        [policies.share.breaker]
        key = "host"
        [policies.share.breaker.spread]
        min_failing_key_share = 1.5

        [policies.none.breaker]
        key = "host"
        [policies.none.breaker.spread]
        min_failing_key_share = 0.0
        min_keys = 0

        [policies.typo.breaker]
        key = "host"
        [policies.typo.breaker.spread]
        min_key = 3

        [policies.scalar.breaker]
        key = "host"
        spread = 0.5
        "#,
    )
    .unwrap_err();
    let found = problems(&err);
    for want in [
        "policies.unkeyed.breaker.spread: needs a keyed breaker (`breaker_key`)",
        "policies.share.breaker.spread.min_failing_key_share: must be within (0, 1], got 1.5",
        "policies.none.breaker.spread.min_failing_key_share: must be within (0, 1], got 0",
        "policies.none.breaker.spread.min_keys: must be at least 1, got 0",
        "policies.typo.breaker.spread.min_key: unknown key; did you mean `min_keys`?",
        "policies.scalar.breaker.spread: must be a table",
    ] {
        assert!(
            found.iter().any(|p| p.starts_with(want)),
            "no {want:?} in {found:#?}"
        );
    }
    // The builder refuses a spread without a keyed breaker at the same path.
    let err = Policy::builder("p")
        .circuit_breaker(crate::CircuitBreakerConfig::builder())
        .key_spread(KeySpread::default())
        .build()
        .unwrap_err();
    assert_eq!(err.problems()[0].path(), "breaker.spread");
    assert!(err.problems()[0].rule().contains("keyed breaker"));
}
