//! Gateway benchmark: the latency the gateway adds over calling the replay model
//! directly (p50, p99), and many concurrent streamed sessions through it.
//!
//! ```sh
//! cargo run --release -p pdl-episode --example gateway_bench -- [REQUESTS] [SESSIONS]
//! ```
//!
//! Prints a JSON summary; see docs/PERFORMANCE.md for recorded results.

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use pdl_episode::{
    ApiKind, EpisodeSpec, Gateway, GatewayConfig, ReplayConfig, ReplayScript, ReplayServer,
    UpstreamConfig,
};
use serde_json::{json, Value};

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .map(str::to_string)
        })
        .and_then(|l| {
            l.split_whitespace()
                .nth(1)
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let requests: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let sessions: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(256);
    let turns = 4;
    let content = "All tests pass now; the fix keeps the attempt counter shared between timeouts and other errors. ".repeat(4);
    let replies: Vec<Value> = (0..turns)
        .map(|_| json!({"content": content, "usage": {"input_tokens": 100, "output_tokens": 50}}))
        .collect();
    let script = ReplayScript::parse(
        &json!({"conversations": [{"replies": replies}]}).to_string(),
        Path::new("bench.json"),
    )
    .unwrap();
    let model = ReplayServer::start(ReplayConfig::new(script)).unwrap();
    let gateway = Gateway::start(GatewayConfig::new(UpstreamConfig::new(
        ApiKind::OpenAi,
        model.base_url(),
    )))
    .unwrap();
    let scratch = std::env::temp_dir().join(format!("pdl-gateway-bench-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = runtime
        .block_on(async { Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>() });

    let body = |stream: bool, history: usize| {
        let mut messages = vec![json!({"role": "user", "content": "fix the retry helper"})];
        for _ in 0..history {
            messages.push(json!({"role": "assistant", "content": "working"}));
            messages.push(json!({"role": "user", "content": "go on"}));
        }
        json!({"model": "replay", "messages": messages, "stream": stream, "max_tokens": 512})
            .to_string()
    };
    let send = |url: String, token: Option<String>, payload: String| {
        let client = client.clone();
        async move {
            let mut req = Request::post(url).header("content-type", "application/json");
            if let Some(t) = token {
                req = req.header("authorization", format!("Bearer {t}"));
            }
            let response = client
                .request(req.body(Full::new(Bytes::from(payload))).unwrap())
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
            response.into_body().collect().await.unwrap().to_bytes()
        }
    };

    // 1. Latency added, sequential requests, interleaved direct / through the gateway.
    let direct_url = format!("{}/chat/completions", model.base_url());
    let gateway_url = format!("{}/v1/chat/completions", gateway.base_url());
    let episode = gateway
        .open_episode(EpisodeSpec {
            id: "latency".into(),
            token_budget: u64::MAX / 4,
            trajectory_path: scratch.join("latency.jsonl"),
        })
        .unwrap();
    let (mut direct, mut through) = (Vec::new(), Vec::new());
    runtime.block_on(async {
        for i in 0..requests + 50 {
            let t = Instant::now();
            send(direct_url.clone(), None, body(false, 0)).await;
            let d = t.elapsed().as_secs_f64() * 1000.0;
            let t = Instant::now();
            send(
                gateway_url.clone(),
                Some(episode.token().to_string()),
                body(false, 0),
            )
            .await;
            let g = t.elapsed().as_secs_f64() * 1000.0;
            if i >= 50 {
                direct.push(d);
                through.push(g);
            }
        }
    });
    direct.sort_by(f64::total_cmp);
    through.sort_by(f64::total_cmp);
    drop(episode);

    // 2. Concurrent streamed sessions, each with its own episode and `turns` turns.
    let handles: Vec<_> = (0..sessions)
        .map(|i| {
            gateway
                .open_episode(EpisodeSpec {
                    id: format!("s{i}"),
                    token_budget: 1_000_000,
                    trajectory_path: scratch.join(format!("s{i}.jsonl")),
                })
                .unwrap()
        })
        .collect();
    let started = Instant::now();
    let session_times: Vec<f64> = runtime.block_on(async {
        let tasks: Vec<_> = handles
            .iter()
            .map(|h| {
                let token = h.token().to_string();
                let url = gateway_url.clone();
                let send = &send;
                async move {
                    let t = Instant::now();
                    for turn in 0..turns {
                        let bytes = send(url.clone(), Some(token.clone()), body(true, turn)).await;
                        assert!(
                            bytes.ends_with(b"data: [DONE]\n\n"),
                            "stream did not finish"
                        );
                    }
                    t.elapsed().as_secs_f64() * 1000.0
                }
            })
            .collect();
        futures_util::future::join_all(tasks).await
    });
    let wall = started.elapsed();
    let mut sorted = session_times.clone();
    sorted.sort_by(f64::total_cmp);
    let metered_ok = handles.iter().all(|h| {
        let u = h.usage();
        u.input_tokens == 100 * turns as u64
            && u.output_tokens == 50 * turns as u64
            && u.calls == turns as u64
    });
    let result = json!({
        "requests": requests,
        "direct_ms": {"p50": percentile(&direct, 0.5), "p99": percentile(&direct, 0.99)},
        "gateway_ms": {"p50": percentile(&through, 0.5), "p99": percentile(&through, 0.99)},
        "added_ms": {"p50": percentile(&through, 0.5) - percentile(&direct, 0.5), "p99": percentile(&through, 0.99) - percentile(&direct, 0.99)},
        "sessions": sessions,
        "turns_per_session": turns,
        "sessions_wall_s": wall.as_secs_f64(),
        "streamed_requests_per_s": (sessions * turns) as f64 / wall.as_secs_f64(),
        "session_ms": {"p50": percentile(&sorted, 0.5), "p99": percentile(&sorted, 0.99)},
        "every_session_metered_exactly": metered_ok,
        "peak_rss_mib": peak_rss_mib(),
    });
    println!("{}", serde_json::to_string_pretty(&result).unwrap());
    drop(handles);
    gateway.shutdown();
    model.shutdown();
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(metered_ok, "a session was metered wrongly");
    std::thread::sleep(Duration::from_millis(10));
}
