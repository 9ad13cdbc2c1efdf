//! The gateway against hostile agents: a real gateway in front of a counting
//! upstream (a real HTTP server that bills like an honest provider and records
//! every request it gets). Each test is one attack of the episode red-team
//! report, with what the harness must guarantee.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use axum::http::Method;
use common::{bearer, trajectory, CountingUpstream, Http, REAL_KEY};
use pdl_episode::{
    ApiKind, EpisodeHandle, EpisodeSpec, Gateway, GatewayConfig, GatewayLimits, RequestPolicy,
    UpstreamConfig, Usage,
};
use serde_json::{json, Value};

const MODEL: &str = "gpt-eval";

struct Setup {
    dir: tempfile::TempDir,
    upstream: CountingUpstream,
    gateway: Gateway,
    http: Http,
}

impl Setup {
    fn new(api: ApiKind, delay: Duration) -> Setup {
        Setup::with(api, delay, |_| {})
    }

    fn with(api: ApiKind, delay: Duration, adjust: impl FnOnce(&mut GatewayConfig)) -> Setup {
        let upstream = CountingUpstream::start(delay);
        let mut config = UpstreamConfig::new(api, upstream.base_url()).with_api_key(REAL_KEY);
        config.request_timeout = Duration::from_secs(20);
        config.max_retries = 0;
        let mut config = GatewayConfig::new(config);
        config.policy = RequestPolicy::for_model(MODEL);
        adjust(&mut config);
        Setup {
            dir: tempfile::tempdir().unwrap(),
            upstream,
            gateway: Gateway::start(config).unwrap(),
            http: Http::new(),
        }
    }

    fn episode(&self, id: &str, budget: u64) -> EpisodeHandle {
        self.gateway
            .open_episode(EpisodeSpec {
                id: id.into(),
                token_budget: budget,
                trajectory_path: self.path(id),
            })
            .unwrap()
    }

    fn path(&self, id: &str) -> PathBuf {
        self.dir.path().join(format!("{id}.jsonl"))
    }

    fn url(&self, api: ApiKind) -> String {
        format!("{}{}", self.gateway.base_url(), api.endpoint_path())
    }

    fn chat(&self, token: &str, extra: Value) -> common::Answer {
        let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        self.http.post(
            &self.url(ApiKind::OpenAi),
            &[("authorization", &bearer(token))],
            &body,
        )
    }
}

/// The invariant of every test: what was charged fits in the budget, and no
/// provider billed more than the gateway had reserved.
fn assert_within(usage: &Usage, budget: u64) {
    assert!(
        usage.total_tokens() <= budget,
        "charged {} of a {budget} budget: {usage:?}",
        usage.total_tokens()
    );
    assert_eq!(usage.overrun_tokens, 0, "{usage:?}");
}

/// The cap an upstream request allows, times its choices.
fn allowed_output(body: &Value) -> u64 {
    let cap = body
        .get("max_completion_tokens")
        .or_else(|| body.get("max_tokens"))
        .and_then(Value::as_u64)
        .expect("every forwarded request carries a cap");
    cap * body.get("n").and_then(Value::as_u64).unwrap_or(1)
}

#[test]
fn forty_concurrent_calls_with_a_slow_upstream_stay_within_the_budget() {
    // Report finding #2 (agents/race2.py): each call asks for 200 000 tokens.
    const BUDGET: u64 = 250_000;
    let setup = Setup::new(ApiKind::OpenAi, Duration::from_millis(1500));
    let episode = setup.episode("race", BUDGET);
    let client = setup.http.client();
    let url = setup.url(ApiKind::OpenAi);
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let (client, url, auth) = (client.clone(), url.clone(), bearer(episode.token()));
            setup.http.rt.spawn(async move {
                let body = json!({"model": "m", "max_tokens": 200_000,
                    "messages": [{"role": "user", "content": format!("SLOW race-{i}")}]});
                common::send(
                    &client,
                    Method::POST,
                    &url,
                    &[("authorization", &auth)],
                    Some(body.to_string()),
                )
                .await
                .status
            })
        })
        .collect();
    let statuses: Vec<u16> = tasks
        .into_iter()
        .map(|t| setup.http.rt.block_on(t).unwrap())
        .collect();
    let usage = episode.close();
    assert_within(&usage, BUDGET);
    let ok = statuses.iter().filter(|s| **s == 200).count();
    assert!((1..40).contains(&ok), "{statuses:?}");
    assert!(
        statuses.iter().all(|s| [200, 400, 401].contains(s)),
        "{statuses:?}"
    );
    // What the upstream was allowed to produce, plus the input it billed, fits
    // in the budget: the calls in flight never shared the same remainder.
    let received = setup.upstream.received();
    assert_eq!(received.len(), ok);
    let allowed: u64 = received
        .iter()
        .map(|r| allowed_output(&r.body) + (r.bytes / 4) as u64)
        .sum();
    assert!(allowed <= BUDGET, "{allowed}");
    assert!(
        setup
            .upstream
            .peak_concurrency
            .load(std::sync::atomic::Ordering::SeqCst)
            >= 1
    );
}

#[test]
fn an_input_larger_than_what_is_left_is_refused_before_it_goes_upstream() {
    // Report finding #3 (agents/input.py): spend nearly all, then a huge prompt.
    let setup = Setup::new(ApiKind::OpenAi, Duration::ZERO);
    let episode = setup.episode("input", 250_000);
    assert_eq!(
        setup
            .chat(episode.token(), json!({"max_tokens": 249_700}))
            .status,
        200
    );
    let left = 250_000 - episode.usage().total_tokens();
    assert!(left > 0 && left < 400, "{left}");
    let huge = "X".repeat(4 << 20);
    let answer = setup.chat(
        episode.token(),
        json!({"max_tokens": 10, "messages": [{"role": "user", "content": huge}]}),
    );
    assert_eq!(answer.status, 400, "{}", answer.text());
    assert!(answer.error_message().starts_with("token budget exhausted"));
    let usage = episode.close();
    assert_within(&usage, 250_000);
    assert_eq!(
        setup.upstream.received().len(),
        1,
        "the huge prompt never went upstream"
    );
    // The refusal kept a digest and a head of the body, not the body.
    let size = std::fs::metadata(setup.path("input")).unwrap().len();
    assert!(size < 64 << 10, "{size} bytes of trajectory");
    let lines = trajectory(&setup.path("input"));
    assert_eq!(lines[1]["refused"], true);
    assert_eq!(lines[1]["request"]["complete"], false);
}

#[test]
fn caps_that_are_not_integers_are_refused_and_never_forwarded() {
    // Report finding #4 (agents/clamp.py).
    let setup = Setup::new(ApiKind::OpenAi, Duration::ZERO);
    let episode = setup.episode("clamp", 250_000);
    for extra in [
        json!({"max_tokens": 1000000.0}),
        json!({"max_tokens": "1000000"}),
        json!({"max_completion_tokens": 1e6}),
        json!({"max_tokens": 200000, "n": 8.0}),
        json!({"max_tokens": 200000, "n": "8"}),
        json!({"max_tokens": 1000, "stream": "true"}),
        json!({"max_tokens": -1}),
        json!({"n": 100000}),
    ] {
        let answer = setup.chat(episode.token(), extra.clone());
        assert_eq!(answer.status, 400, "{extra}: {}", answer.text());
        assert!(
            answer.error_message().starts_with("invalid request: "),
            "{extra}"
        );
    }
    // An integer n divides the cap.
    let answer = setup.chat(episode.token(), json!({"max_tokens": 200_000, "n": 8}));
    assert_eq!(answer.status, 200);
    let usage = episode.close();
    assert_within(&usage, 250_000);
    let received = setup.upstream.received();
    assert_eq!(received.len(), 1);
    assert!(allowed_output(&received[0].body) <= 250_000);
    assert_eq!(usage.refused_calls, 8);
}

#[test]
fn a_request_without_a_cap_gets_one() {
    // Report finding #5: no max_tokens while much of the budget remains.
    let setup = Setup::new(ApiKind::OpenAi, Duration::ZERO);
    let episode = setup.episode("uncapped", 1_000_000);
    assert_eq!(setup.chat(episode.token(), json!({})).status, 200);
    let usage = episode.close();
    assert_within(&usage, 1_000_000);
    let body = &setup.upstream.received()[0].body;
    assert!(allowed_output(body) < 1_000_000);
}

#[test]
fn the_campaigns_model_is_sent_and_unlisted_fields_headers_and_tools_are_not() {
    // Report finding #6 (agents/recon.py "model_swap").
    let setup = Setup::new(ApiKind::OpenAi, Duration::ZERO);
    let episode = setup.episode("swap", 250_000);
    let body = json!({"model": "o3-pro-EXPENSIVE", "max_tokens": 1, "store": true,
        "service_tier": "priority", "metadata": {"x": "y"}, "user": "u-1",
        "messages": [{"role": "user", "content": "hi"}]});
    let answer = setup.http.post(
        &setup.url(ApiKind::OpenAi),
        &[
            ("authorization", &bearer(episode.token())),
            (
                "anthropic-beta",
                "mcp-client-2025-04-04,context-1m-2025-08-07",
            ),
            ("accept", "text/html"),
            ("x-forwarded-for", "1.2.3.4"),
            ("openai-organization", "org-evil"),
        ],
        &body,
    );
    assert_eq!(answer.status, 200, "{}", answer.text());
    // Provider-side tools are refused.
    for extra in [
        json!({"web_search_options": {}}),
        json!({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
        json!({"mcp_servers": [{"type": "url", "url": "https://attacker.example/mcp", "name": "x"}]}),
        json!({"tools": [{"type": "code_interpreter"}]}),
    ] {
        let refused = setup.chat(episode.token(), extra.clone());
        assert_eq!(refused.status, 400, "{extra}");
        assert!(
            refused
                .error_message()
                .starts_with("refused by the campaign: "),
            "{extra}"
        );
    }
    let usage = episode.close();
    assert_within(&usage, 250_000);
    let received = setup.upstream.received();
    assert_eq!(received.len(), 1);
    let sent = &received[0];
    assert_eq!(sent.body["model"], MODEL);
    let fields: Vec<&str> = sent
        .body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(fields, ["max_tokens", "messages", "model"]);
    for name in [
        "anthropic-beta",
        "accept",
        "x-forwarded-for",
        "openai-organization",
    ] {
        assert!(sent.headers.get(name).is_none(), "{name} was forwarded");
    }
    assert_eq!(
        sent.headers["authorization"],
        format!("Bearer {REAL_KEY}").as_str()
    );
    let line = &trajectory(&setup.path("swap"))[0];
    assert_eq!(line["requested_model"], "o3-pro-EXPENSIVE");
    assert_eq!(line["request"]["model"], MODEL);
    assert_eq!(
        line["dropped"]["fields"],
        json!(["metadata", "service_tier", "store", "user"])
    );
    let headers = line["dropped"]["headers"].to_string();
    for name in [
        "accept",
        "anthropic-beta",
        "openai-organization",
        "x-forwarded-for",
    ] {
        assert!(headers.contains(name), "{headers}");
    }
    // The answer says which model it came from: the campaign's.
    assert_eq!(answer.json()["model"], MODEL);
}

#[test]
fn anthropic_betas_and_server_tools_are_filtered_unless_enabled() {
    let setup = Setup::with(ApiKind::Anthropic, Duration::ZERO, |config| {
        config.policy.allowed_tools.insert("web_fetch".into());
    });
    let episode = setup.episode("betas", 250_000);
    let url = setup.url(ApiKind::Anthropic);
    let headers = [
        ("x-api-key", episode.token()),
        ("anthropic-version", "2023-06-01"),
        (
            "anthropic-beta",
            "mcp-client-2025-04-04,web-fetch-2025-09-10,prompt-caching-2024-07-31",
        ),
    ];
    let enabled = json!({"model": "claude-x", "max_tokens": 5,
        "tools": [{"type": "web_fetch_20250910", "name": "web_fetch"}],
        "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(setup.http.post(&url, &headers, &enabled).status, 200);
    let refused = json!({"model": "claude-x", "max_tokens": 5,
        "tools": [{"type": "web_search_20250305", "name": "web_search"}],
        "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(setup.http.post(&url, &headers, &refused).status, 400);
    episode.close();
    let received = setup.upstream.received();
    assert_eq!(received.len(), 1);
    assert_eq!(
        received[0].headers["anthropic-beta"],
        "web-fetch-2025-09-10,prompt-caching-2024-07-31"
    );
    assert_eq!(received[0].body["model"], MODEL);
}

#[test]
fn a_call_the_client_abandons_is_charged_its_whole_reservation() {
    // Report finding #7 (agents/budget.py §i): disconnect while the upstream works.
    let setup = Setup::new(ApiKind::OpenAi, Duration::from_millis(1500));
    let episode = setup.episode("abandon", 100_000);
    let body = json!({"model": "m", "max_tokens": 4000,
        "messages": [{"role": "user", "content": "SLOW cancelled-call-marker"}]})
    .to_string();
    let mut stream = TcpStream::connect(setup.gateway.tcp_addr()).unwrap();
    write!(
        stream,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        episode.token(),
        body.len()
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    drop(stream);
    assert!(episode.wait_idle(Duration::from_secs(5)));
    let usage = episode.close();
    assert_within(&usage, 100_000);
    assert_eq!((usage.calls, usage.abandoned_calls), (1, 1));
    let line = &trajectory(&setup.path("abandon"))[0];
    assert_eq!(line["abandoned"], true);
    assert_eq!(line["usage"]["output_tokens"], 4000);
    assert_eq!(
        usage.total_tokens(),
        line["usage"]["reserved"].as_u64().unwrap()
    );
    assert!(
        usage.output_tokens >= 4000,
        "charged the whole cap: {usage:?}"
    );
}

#[test]
fn refused_bodies_are_kept_as_digests_and_refusals_are_rate_limited() {
    // Report finding #8 (budget.py §h, memgw.py): big bodies after the budget.
    let setup = Setup::new(ApiKind::OpenAi, Duration::ZERO);
    let episode = setup.episode("bloat", 1_000);
    assert_eq!(
        setup
            .chat(episode.token(), json!({"max_tokens": 900}))
            .status,
        200
    );
    let pad = "A".repeat(2 << 20);
    let started = Instant::now();
    for _ in 0..5 {
        let answer = setup.chat(
            episode.token(),
            json!({"messages": [{"role": "user", "content": pad}]}),
        );
        assert!([400, 401].contains(&answer.status), "{}", answer.status);
    }
    // Not JSON, and to the other API's endpoint.
    let raw = setup.http.rt.block_on(common::send(
        &setup.http.client(),
        Method::POST,
        &setup.url(ApiKind::OpenAi),
        &[("authorization", &bearer(episode.token()))],
        Some(format!("not json {}", "B".repeat(2 << 20))),
    ));
    assert!([400, 401].contains(&raw.status));
    let other = setup.http.post(
        &setup.url(ApiKind::Anthropic),
        &[("x-api-key", episode.token())],
        &json!({"x": "0,".repeat(1 << 20)}),
    );
    assert_eq!(other.status, 400);
    // A burst of refusals: only the first ones are written, the rest counted.
    for _ in 0..30 {
        setup.chat(episode.token(), json!({}));
    }
    let usage = episode.close();
    assert_within(&usage, 1_000);
    assert_eq!(usage.refused_calls, 37);
    assert!(usage.unrecorded_refusals >= 1, "{usage:?}");
    let size = std::fs::metadata(setup.path("bloat")).unwrap().len();
    assert!(size < 200 << 10, "{size} bytes of trajectory for refusals");
    let lines = trajectory(&setup.path("bloat"));
    assert_eq!(lines.len() as u64, 1 + 37 - usage.unrecorded_refusals);
    for line in &lines[1..] {
        assert_eq!(line["refused"], true);
        let request = &line["request"];
        assert!(request["head"].as_str().unwrap().len() <= 4096);
        assert_eq!(request["sha256"].as_str().unwrap().len(), 64);
    }
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "refusals beyond the burst are held"
    );
}

#[test]
fn bodies_larger_than_the_limit_are_refused_before_they_are_parsed() {
    // Report finding #10: the gateway never holds an oversized body.
    let setup = Setup::with(ApiKind::OpenAi, Duration::ZERO, |config| {
        config.limits.max_request_bytes = 1 << 20;
    });
    let episode = setup.episode("limit", 100_000_000);
    let big = json!({"model": "m", "messages": [{"role": "user", "content": "0".repeat(3 << 20)}]});
    let answer = setup.http.post(
        &setup.url(ApiKind::OpenAi),
        &[("authorization", &bearer(episode.token()))],
        &big,
    );
    assert_eq!(answer.status, 413, "{}", answer.text());
    assert!(answer
        .error_message()
        .contains("larger than the gateway accepts"));
    episode.close();
    assert!(setup.upstream.received().is_empty());
    let line = &trajectory(&setup.path("limit"))[0];
    assert_eq!(line["request"]["bytes"], (1 << 20) + 1);
}

#[test]
fn slow_headers_are_cut_off_and_connections_are_limited() {
    let setup = Setup::with(ApiKind::OpenAi, Duration::ZERO, |config| {
        config.limits = GatewayLimits {
            header_read_timeout: Duration::from_millis(300),
            max_connections: 2,
            ..GatewayLimits::default()
        };
    });
    // A client that never finishes its headers is disconnected.
    let mut slow = TcpStream::connect(setup.gateway.tcp_addr()).unwrap();
    slow.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\n")
        .unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let started = Instant::now();
    let mut buf = Vec::new();
    let _ = slow.read_to_end(&mut buf);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the connection stayed open"
    );
    // Two idle connections fill the listener; a third waits until one closes.
    let a = TcpStream::connect(setup.gateway.tcp_addr()).unwrap();
    let _b = TcpStream::connect(setup.gateway.tcp_addr()).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let third = std::thread::spawn({
        let url = format!("{}/v1/models", setup.gateway.base_url());
        move || {
            let started = Instant::now();
            let answer = Http::new().get(&url, &[]);
            (answer.status, started.elapsed())
        }
    });
    std::thread::sleep(Duration::from_millis(100));
    drop(a);
    let (status, waited) = third.join().unwrap();
    assert_eq!(status, 401);
    assert!(
        waited >= Duration::from_millis(80),
        "served at once: {waited:?}"
    );
}

#[test]
fn a_symlinked_trajectory_path_is_refused() {
    let setup = Setup::new(ApiKind::OpenAi, Duration::ZERO);
    let victim = setup.dir.path().join("victim.txt");
    std::fs::write(&victim, "keep").unwrap();
    let link = setup.dir.path().join("t.jsonl");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let err = setup
        .gateway
        .open_episode(EpisodeSpec {
            id: "linked".into(),
            token_budget: 10,
            trajectory_path: link.clone(),
        })
        .unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    assert!(Path::new(&link).is_symlink());
}

/// A chat request with `images` copies of one image and a one-token cap.
fn image_request(url: &str, detail: &str, images: usize, text: &str) -> Value {
    let mut content =
        vec![json!({"type": "image_url", "image_url": {"url": url, "detail": detail}}); images];
    content.push(json!({"type": "text", "text": text}));
    json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": content}]})
}

#[test]
fn images_are_reserved_at_the_most_the_model_can_bill_under_concurrency() {
    // Red-team attempt 03: tiny PNGs that gpt-4o-mini bills 48 169 tokens each
    // (eight 512-pixel tiles), 30 calls at once. The gateway must reserve what
    // the images can cost, not what their bytes say.
    const BUDGET: u64 = 250_000;
    let setup = Setup::with(ApiKind::OpenAi, Duration::from_millis(1500), |config| {
        config.policy = RequestPolicy::for_model("gpt-4o-mini");
    });
    let episode = setup.episode("images", BUDGET);
    let url = common::png_data_url(768, 2048);
    let body = image_request(&url, "high", 2, "SLOW two tall images").to_string();
    let client = setup.http.client();
    let endpoint = setup.url(ApiKind::OpenAi);
    let tasks: Vec<_> = (0..30)
        .map(|_| {
            let (client, endpoint, auth, body) = (
                client.clone(),
                endpoint.clone(),
                bearer(episode.token()),
                body.clone(),
            );
            setup.http.rt.spawn(async move {
                common::send(
                    &client,
                    Method::POST,
                    &endpoint,
                    &[("authorization", &auth)],
                    Some(body),
                )
                .await
            })
        })
        .collect();
    let answers: Vec<common::Answer> = tasks
        .into_iter()
        .map(|t| setup.http.rt.block_on(t).unwrap())
        .collect();
    let usage = episode.close();
    assert_within(&usage, BUDGET);
    // Each call may cost 2 × 48 169 tokens: two fit, the rest are refused.
    let ok = answers.iter().filter(|a| a.status == 200).count();
    assert_eq!(ok, 2, "{usage:?}");
    let refused = answers.iter().find(|a| a.status == 400).unwrap();
    let message = refused.error_message();
    assert!(
        message.starts_with("token budget exhausted") && message.contains("2 image(s)"),
        "{message}"
    );
    // What the provider billed, by its own formula, fits in the budget.
    let billed: u64 = setup
        .upstream
        .received()
        .iter()
        .map(|r| (r.bytes / 4) as u64 + common::image_tokens(&r.body) + allowed_output(&r.body))
        .sum();
    assert!(
        (2 * 96_338..=BUDGET).contains(&billed),
        "billed {billed} on a {BUDGET} budget"
    );

    // Low detail costs gpt-4o-mini its base; the reservation holds it.
    let episode = setup.episode("low", 10_000);
    let low = image_request(&url, "low", 1, "one small image");
    let answer = setup.http.post(
        &setup.url(ApiKind::OpenAi),
        &[("authorization", &bearer(episode.token()))],
        &low,
    );
    assert_eq!(answer.status, 200, "{}", answer.text());
    let usage = episode.close();
    assert_within(&usage, 10_000);
    assert!(usage.input_tokens >= 2_833, "{usage:?}");
    // And a high-detail image does not fit in what is left of a small budget.
    let episode = setup.episode("small", 40_000);
    let answer = setup.http.post(
        &setup.url(ApiKind::OpenAi),
        &[("authorization", &bearer(episode.token()))],
        &image_request(&url, "high", 1, "one tall image"),
    );
    assert_eq!(answer.status, 400, "{}", answer.text());
    assert_within(&episode.close(), 40_000);
}

fn ledger_at(path: &Path) -> pdl_episode::Ledger {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)
        .unwrap();
    pdl_episode::Ledger::resume(file, path.to_path_buf()).unwrap()
}

#[test]
fn an_attempt_starts_from_what_the_earlier_attempts_of_its_slot_spent_and_held() {
    // Red-team attempt 18: spend, drop out through a harness error, start
    // again with a fresh budget. The budget is the slot's.
    const BUDGET: u64 = 20_000;
    let setup = Setup::new(ApiKind::OpenAi, Duration::from_millis(1500));
    let ledger = setup.dir.path().join("ledger.jsonl");
    let open = |id: &str| {
        let spec = EpisodeSpec {
            id: id.into(),
            token_budget: BUDGET,
            trajectory_path: setup.path(id),
        };
        let trajectory = std::fs::File::create(setup.path(id)).unwrap();
        setup
            .gateway
            .open_episode_with(spec, trajectory, ledger_at(&ledger))
            .unwrap()
    };
    let first = open("first");
    assert_eq!(
        setup
            .chat(first.token(), json!({"max_tokens": 3000}))
            .status,
        200
    );
    let settled = first.usage().total_tokens();
    // A slow call in flight: its reservation is on disk before it goes upstream.
    let slow = {
        let (client, url, auth) = (
            setup.http.client(),
            setup.url(ApiKind::OpenAi),
            bearer(first.token()),
        );
        setup.http.rt.spawn(async move {
            let body = json!({"model": "m", "max_tokens": 4000,
                "messages": [{"role": "user", "content": "SLOW in flight"}]});
            common::send(
                &client,
                Method::POST,
                &url,
                &[("authorization", &auth)],
                Some(body.to_string()),
            )
            .await
            .status
        })
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while setup.upstream.received().len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    // What a harness killed now would leave on record: the settled call and
    // the one in flight, counted whole, as an attempt cut short (reported,
    // not charged: no agent can kill the harness).
    let crashed = ledger_at(&ledger);
    assert!(
        crashed.interrupted().total() >= settled + 4000,
        "{:?} after {settled}",
        crashed.interrupted()
    );
    assert_eq!(crashed.carried().total(), 0);
    drop(crashed);
    assert_eq!(setup.http.rt.block_on(slow).unwrap(), 200);
    let first_usage = first.close();
    assert_within(&first_usage, BUDGET);
    // The campaign closes the attempt when it records its outcome.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .open(&ledger)
        .unwrap();
    pdl_episode::Ledger::close(file, &ledger).unwrap();

    // The next attempt starts from all of it, and cannot go past the budget.
    let second = open("second");
    let carried = second.usage();
    assert_eq!(carried.total_tokens(), first_usage.total_tokens());
    assert_eq!(carried.carried_tokens(), first_usage.total_tokens());
    let answer = setup.chat(second.token(), json!({"max_tokens": 20_000}));
    assert_eq!(answer.status, 200, "{}", answer.text());
    let answer = setup.chat(second.token(), json!({"max_tokens": 20_000}));
    assert!([400, 401].contains(&answer.status), "{}", answer.text());
    assert!(
        answer.error_message().contains("earlier attempts"),
        "{}",
        answer.text()
    );
    let second_usage = second.close();
    assert_within(&second_usage, BUDGET);
    let billed: u64 = setup
        .upstream
        .received()
        .iter()
        .map(|r| (r.bytes / 4) as u64 + allowed_output(&r.body))
        .sum();
    assert!(
        billed <= BUDGET,
        "the slot was billed {billed} on a {BUDGET} budget"
    );
}

#[test]
fn calls_the_provider_rejects_cost_the_disk_no_more_than_refusals() {
    // Second episode red team: 240 KB bodies the provider rejected (unbilled)
    // were written whole to the trajectory, 106 MB in 20 s for no tokens.
    let setup = Setup::new(ApiKind::OpenAi, Duration::from_millis(10));
    let spec = EpisodeSpec {
        id: "reject".into(),
        token_budget: 10_000_000,
        trajectory_path: setup.path("reject"),
    };
    let trajectory = std::fs::File::create(setup.path("reject")).unwrap();
    let handle = setup.gateway.open_episode_in(spec, trajectory).unwrap();
    let filler = "x".repeat(240_000);
    for _ in 0..60 {
        let answer = setup.chat(
            handle.token(),
            json!({"max_tokens": 10, "messages": [{"role": "user", "content": format!("REJECT {filler}")}]}),
        );
        assert_eq!(answer.status, 400, "{}", answer.text());
    }
    let usage = handle.close();
    assert_eq!(usage.total_tokens(), 0);
    assert!(usage.unrecorded_refusals > 0, "{usage:?}");
    let written = std::fs::metadata(setup.path("reject")).unwrap().len();
    assert!(written < 256 << 10, "the trajectory took {written} bytes");
}

#[test]
fn concurrent_large_bodies_of_one_episode_are_bounded_in_the_harness() {
    // Second episode red team: 150 concurrent large bodies of one episode took
    // the harness (where the gateway runs) to 1.1 GB. The bodies an episode's
    // calls hold at once are bounded (64 MiB); the calls past it are refused.
    let setup = Setup::new(ApiKind::OpenAi, Duration::from_millis(2000));
    let episode = setup.episode("bodies", 1_000_000_000);
    let client = setup.http.client();
    let url = setup.url(ApiKind::OpenAi);
    let filler = "y".repeat(8 << 20);
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let (client, url, auth) = (client.clone(), url.clone(), bearer(episode.token()));
            let body = json!({"model": "m", "max_tokens": 10,
                "messages": [{"role": "user", "content": format!("SLOW big-{i} {filler}")}]})
            .to_string();
            setup.http.rt.spawn(async move {
                let answer = common::send(
                    &client,
                    Method::POST,
                    &url,
                    &[("authorization", &auth)],
                    Some(body),
                )
                .await;
                (answer.status, answer.text())
            })
        })
        .collect();
    let answers: Vec<(u16, String)> = tasks
        .into_iter()
        .map(|t| setup.http.rt.block_on(t).unwrap())
        .collect();
    episode.close();
    let ok = answers.iter().filter(|(s, _)| *s == 200).count();
    let held = answers
        .iter()
        .filter(|(s, text)| *s == 400 && text.contains("hold more than 64 MiB"))
        .count();
    assert!((1..=8).contains(&ok), "{ok} forwarded");
    assert_eq!(ok + held, 16, "{answers:?}");
    // The upstream never had more than the bound in flight at once.
    assert!(
        setup
            .upstream
            .peak_concurrency
            .load(std::sync::atomic::Ordering::SeqCst)
            <= 8
    );
}
