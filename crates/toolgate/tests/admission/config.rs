//! Invalid configs: each produces exactly the error it should, all at once.

use toolgate::config::Config;

#[test]
fn every_invalid_value_is_reported_with_its_path() {
    let cases: &[(&str, &str)] = &[
        ("[tools.lookup_customer]\nrate = \"0/s\"", "tools.lookup_customer.rate: \"0/s\": the request count must be at least 1"),
        ("[tools.t]\nrate = \"-2/s\"", "tools.t.rate: \"-2/s\": the request count must be a whole number, got \"-2\""),
        ("[tools.t]\nrate = \"nan/s\"", "tools.t.rate: \"nan/s\": the request count must be a whole number, got \"nan\""),
        ("[tools.t]\nrate = \"2/0s\"", "tools.t.rate: \"2/0s\": the period must be longer than zero"),
        ("[tools.t]\nrate = \"1e30/s\"", "tools.t.rate: \"1e30/s\": the request count must be a whole number, got \"1e30\""),
        ("[tools.t]\nrate = \"100000000000000000000/s\"", "tools.t.rate: \"100000000000000000000/s\": the request count must be at most 9007199254740992"),
        ("[tools.t]\nrate = 5", "tools.t.rate: expected a string, got a whole number"),
        ("[tools.t]\nrate = \"2/s\"\nburst = 0", "tools.t.burst: 0: must be at least 1"),
        ("[tools.t]\nrate = \"2/s\"\nburst = -1.0", "tools.t.burst: -1.0: must be at least 1"),
        ("[tools.t]\nrate = \"2/s\"\nburst = -1", "tools.t.burst: -1: must be at least 1"),
        ("[tools.t]\nrate = \"2/s\"\nburst = 1.5", "tools.t.burst: 1.5: expected a whole number"),
        ("[tools.t]\nburst = 2", "tools.t.burst: burst needs a rate"),
        ("[tools.t]\ntokens = \"0/min\"", "tools.t.tokens: \"0/min\": the token count must be at least 1"),
        ("[tools.t]\ntokens_burst = 5", "tools.t.tokens_burst: tokens_burst needs tokens"),
        ("[tools.t]\nconcurrency = 0", "tools.t.concurrency: 0: must be at least 1"),
        ("[tools.t]\npools = [\"crm\"]", "tools.t.pools[0]: \"crm\": no such pool"),
        ("[tools.t]\non_limit = \"block\"", "tools.t.on_limit: \"block\": expected one of \"reject\", \"wait\""),
        ("[tools.t]\nmax_wait = \"forever\"", "tools.t.max_wait: \"forever\": not a duration (expected number at 0)"),
        ("[tools.t]\nmax_wait = \"2h\"", "tools.t.max_wait: \"2h\": must be at most 1h (waits must be bounded)"),
        ("[tools.t]\nqueue_limit = 0", "tools.t.queue_limit: 0: must be at least 1"),
        // Issue #13: an upstream's pause is bounded, and so is the bound.
        ("[tools.t]\nmax_pause = \"25h\"", "tools.t.max_pause: \"25h\": must be at most 24h (upstream pauses must be bounded)"),
        ("[defaults]\nmax_pause = \"30d\"\n[tools.t]", "defaults.max_pause: \"30d\": must be at most 24h (upstream pauses must be bounded)"),
        ("[tools.t]\nmax_pause = \"soon\"", "tools.t.max_pause: \"soon\": not a duration (expected number at 0)"),
        ("[tools.t]\nwindow = \"sliding\"", "tools.t.window: \"sliding\" needs a rate"),
        ("[tools.t]\nwindow = \"fixed\"\nrate = \"1/s\"", "tools.t.window: \"fixed\": expected one of \"bucket\", \"sliding\""),
        ("[tools.t]\npartition = \"user\"", "tools.t.partition: \"user\": expected one of \"tenant\""),
        ("[tools.t]\nmode = \"dry\"", "tools.t.mode: \"dry\": expected one of \"enforce\", \"shadow\""),
        ("unknown_tools = \"block\"", "unknown_tools: \"block\": expected one of \"allow\", \"deny\""),
        ("[tools.t]\nrate = \"1/s\"\nbrust = 2", "tools.t.brust: unknown key (expected one of: adaptive, burst, circuit, concurrency, fairness, idempotent, max_partitions, max_pause, max_wait, mode, on_limit, partition, pools, queue_limit, rate, reserve, retry, tokens, tokens_burst, upstream, window)"),
        ("[pools.p]\non_limit = \"wait\"", "pools.p.on_limit: unknown key (expected one of: burst, concurrency, fairness, max_partitions, mode, partition, rate, reserve, tokens, tokens_burst, window)"),
        ("[tool.t]\nrate = \"1/s\"", "tool: unknown key (expected one of: defaults, mode, pools, store, tenants, tools, unknown_tools)"),
        ("tools = 3", "tools: expected a table, got a whole number"),
        ("[tools.t]\nrate = \"10/s\"\nfairness = \"round_robin\"", "tools.t.fairness: \"round_robin\": expected one of \"tenant\""),
        ("[tools.t]\nrate = \"10/s\"\npartition = \"tenant\"\nfairness = \"tenant\"", "tools.t.fairness: fairness across tenants needs a shared quota, and partition = \"tenant\" gives each tenant its own"),
        ("[tools.t]\nrate = \"10/s\"\nreserve = { batch = \"10%\" }", "tools.t.reserve.batch: batch is the lowest class: there is no class below it to keep a share from"),
        ("[tools.t]\nrate = \"10/s\"\nreserve = { interactive = \"20\" }", "tools.t.reserve.interactive: \"20\": expected a percentage such as \"20%\""),
        ("[tools.t]\nrate = \"10/s\"\nreserve = { interactive = \"60%\", default = \"40%\" }", "tools.t.reserve: the shares add up to 100%: at most 90% (the lowest class keeps the rest)"),
        ("[tools.t]\nconcurrency = 1\nreserve = { interactive = \"10%\" }", "tools.t.reserve: keeps all of concurrency (capacity 1) from batch calls: a reserve must leave the lowest class at least 1"),
        ("[tenants.acme]\nweight = 0", "tenants.acme.weight: 0: must be at least 1"),
        ("[tenants.acme]\nweight = 1001", "tenants.acme.weight: 1001: must be at most 1000"),
        ("[tenants.acme]\nweigth = 2", "tenants.acme.weigth: unknown key (expected one of: weight)"),
        ("[tools.t.circuit]\nfailure_rate = 1.5", "tools.t.circuit.failure_rate: 1.5: must be greater than 0 and at most 1"),
        ("[tools.t.retry]\nbase = \"2s\"\ncap = \"1s\"", "tools.t.retry.cap: must not be shorter than base"),
        ("[tools.t.adaptive]\nalgorithm = \"vegas\"", "tools.t.adaptive.algorithm: \"vegas\": expected one of \"aimd\", \"gradient\""),
        ("[tools.t.upstream]\nmethod = \"GET\"", "tools.t.upstream.url: missing: an upstream needs a url"),
        ("[tools.t.upstream]\nurl = \"ftp://x\"", "tools.t.upstream.url: \"ftp://x\": must be an http:// or https:// URL"),
        ("[tools.t.upstream]\nurl = \"http://x\"\nmax_response_bytes = 0", "tools.t.upstream.max_response_bytes: 0: must be at least 1"),
        ("[tools.t.upstream]\nurl = \"http://x\"\nmax_response_bytes = 1073741825", "tools.t.upstream.max_response_bytes: 1073741825: must be at most 1073741824"),
        ("[store]\nurl = \"mongodb://x\"", "store.url: \"mongodb://x\": expected \"memory\" or a redis:// URL"),
        ("[tools.t]\nrate = \"2/s\"\nburst = 3\n[tools.t]", "invalid TOML: TOML parse error at line 4, column 8\n  |\n4 | [tools.t]\n  |        ^\nduplicate key\n"),
    ];
    for (toml, want) in cases {
        match Config::from_toml_str(toml) {
            Ok(_) => panic!("accepted:\n{toml}"),
            Err(e) => assert_eq!(e.to_string(), *want, "for:\n{toml}"),
        }
    }
}

#[test]
fn all_errors_are_reported_at_once_sorted_by_path() {
    let toml = r#"
        unknown_tools = "maybe"
        [pools.crm]
        rate = "0/min"
        [tools.a]
        rate = "2/s"
        burst = 0
        pools = ["crm", "nope"]
        [tools.b]
        concurrency = 0
        color = "blue"
    "#;
    let errors = Config::from_toml_str(toml).unwrap_err();
    let paths: Vec<&str> = errors.errors().iter().map(|e| e.path()).collect();
    assert_eq!(
        paths,
        [
            "pools.crm.rate",
            "tools.a.burst",
            "tools.a.pools[1]",
            "tools.b.color",
            "tools.b.concurrency",
            "unknown_tools"
        ]
    );
}

#[test]
fn json_and_toml_give_the_same_config_and_defaults_apply_to_every_tool() {
    let toml = r#"
        [defaults]
        on_limit = "wait"
        max_wait = "2s"
        [tools.a]
        rate = "2/s"
        [tools.b]
        rate = "1/s"
        on_limit = "reject"
    "#;
    let json = r#"{"defaults": {"on_limit": "wait", "max_wait": "2s"},
                   "tools": {"a": {"rate": "2/s"}, "b": {"rate": "1/s", "on_limit": "reject"}}}"#;
    let a = Config::from_toml_str(toml).unwrap();
    let b = Config::from_json_str(json).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.tools["a"].on_limit, toolgate::config::OnLimit::Wait);
    assert_eq!(a.tools["a"].max_wait, std::time::Duration::from_secs(2));
    assert_eq!(a.tools["b"].on_limit, toolgate::config::OnLimit::Reject);
    assert_eq!(a.tools["b"].max_wait, std::time::Duration::from_secs(2));
}

#[test]
fn a_decimal_number_with_no_fraction_counts_as_whole() {
    // JSON writers and Python dicts often spell a count as 2.0.
    let json = r#"{"tools": {"t": {"rate": "2/s", "burst": 2.0, "concurrency": 4.0}}}"#;
    let a = Config::from_json_str(json).unwrap();
    let b = Config::from_toml_str("[tools.t]\nrate = \"2/s\"\nburst = 2\nconcurrency = 4").unwrap();
    assert_eq!(a, b);
    let e =
        Config::from_json_str(r#"{"tools": {"t": {"rate": "2/s", "burst": 2.5}}}"#).unwrap_err();
    assert_eq!(e.to_string(), "tools.t.burst: 2.5: expected a whole number");
}

#[test]
fn the_contract_example_config_is_valid() {
    let toml = r#"
unknown_tools = "allow"

[defaults]
on_limit = "reject"

[pools.crm]
rate = "100/min"
burst = 20

[tools.lookup_customer]
rate = "2/s"
burst = 2
pools = ["crm"]
concurrency = 4

[tools.search_documents]
rate = "10/s"
tokens = "40000/min"
on_limit = "wait"
max_wait = "2s"

[tools.get_payment_status]
rate = "1/s"
window = "sliding"
idempotent = false

[tools.get_payment_status.circuit]
[tools.get_payment_status.retry]
[tools.get_payment_status.adaptive]
[tools.get_payment_status.upstream]
url = "http://127.0.0.1:9/payments"
"#;
    let c = Config::from_toml_str(toml).unwrap();
    assert_eq!(c.tools.len(), 3);
    assert!(c.tools["get_payment_status"].circuit.is_some());
}
