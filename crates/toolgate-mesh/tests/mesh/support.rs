//! A mesh on a real nats-server, with an executor that runs each call through the
//! engine's pipeline (`Engine::run` / `run_admitted`) against an in-process
//! "upstream" that records when each call reached it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures_util::StreamExt;
use parking_lot::Mutex;
use serde_json::{json, Value};
use toolgate::{AttemptResult, Call, Engine, ExecuteError, Policy, RunOptions};
use toolgate_mesh::client::{Caller, Outgoing};
use toolgate_mesh::envelope::{Attempt, MeshResult};
use toolgate_mesh::executor::{BoxFuture, Execution, Executor, Failure, Job};
use toolgate_mesh::testing::NatsServer;
use toolgate_mesh::{Mesh, MeshConfig};

/// What the upstream saw.
#[derive(Debug, Clone)]
pub struct Hit {
    pub tool: String,
    pub at: Instant,
    pub key: Option<String>,
}

/// How the upstream answers a tool.
#[derive(Debug, Clone, Copy)]
pub enum Answer {
    Ok,
    /// 503 (retryable for an idempotent tool).
    Unavailable,
}

/// The executor and its upstream.
pub struct Upstream {
    pub engine: Engine,
    pub hits: Mutex<Vec<Hit>>,
    pub answers: Mutex<HashMap<String, Answer>>,
    pub delay: Mutex<Duration>,
    pub tools: Vec<String>,
}

impl Upstream {
    pub fn new(engine: Engine, tools: &[&str]) -> Arc<Self> {
        Arc::new(Self {
            engine,
            hits: Mutex::new(Vec::new()),
            answers: Mutex::new(HashMap::new()),
            delay: Mutex::new(Duration::ZERO),
            tools: tools.iter().map(|t| t.to_string()).collect(),
        })
    }

    pub fn hits_of(&self, tool: &str) -> Vec<Hit> {
        self.hits
            .lock()
            .iter()
            .filter(|h| h.tool == tool)
            .cloned()
            .collect()
    }

    async fn attempt(
        &self,
        job_tool: &str,
        key: Option<String>,
        args: Value,
    ) -> AttemptResult<Value, String> {
        self.hits.lock().push(Hit {
            tool: job_tool.to_string(),
            at: Instant::now(),
            key,
        });
        let delay = *self.delay.lock();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        match self
            .answers
            .lock()
            .get(job_tool)
            .copied()
            .unwrap_or(Answer::Ok)
        {
            Answer::Ok => AttemptResult::success(json!({"echo": args})).status(200),
            Answer::Unavailable => AttemptResult::failure("unavailable".to_string()).status(503),
        }
    }
}

impl Executor for Upstream {
    fn tools(&self) -> Vec<String> {
        self.tools.clone()
    }

    fn check_arguments(&self, _tool: &str, arguments: &Value) -> Result<(), String> {
        match arguments.get("invalid") {
            Some(_) => Err("arguments: \"invalid\" is not allowed".into()),
            None => Ok(()),
        }
    }

    fn execute(&self, job: Job) -> BoxFuture<'_, Execution> {
        Box::pin(async move {
            let call = Call::new(&job.tool)
                .with_tenant(job.tenant.as_deref())
                .tokens(job.tokens.unwrap_or(0))
                .max_wait(job.max_wait);
            let mut opts = RunOptions::new().with_idempotency_key(job.idempotency_key.as_deref());
            if let Some(d) = job.deadline {
                opts = opts.deadline(d);
            }
            let admitted_at = SystemTime::now();
            let (tool, key, args) = (
                job.tool.clone(),
                job.idempotency_key.clone(),
                job.arguments.clone(),
            );
            let attempt = |_ctx| self.attempt(&tool, key.clone(), args.clone());
            let run = match job.permit {
                Some(p) => self.engine.run_admitted(p, &call, opts, attempt).await,
                None => self.engine.run(&call, opts, attempt).await,
            };
            match run {
                Ok(out) => Execution::Success {
                    result: out.value,
                    status: Some(200),
                    attempts: Vec::new(),
                    admitted_at,
                },
                Err(ExecuteError::Rejected(r)) => Execution::Rejected(r),
                Err(ExecuteError::Tool(f)) => {
                    let idempotent = job.idempotency_key.is_some();
                    let mut failure = Failure::new("error", "upstream_error", f.to_string());
                    failure.status = f.last_status;
                    failure.attempts = f
                        .attempts
                        .iter()
                        .map(|a| Attempt {
                            attempt: a.number,
                            outcome: a.end.as_str().to_string(),
                            status: a.status,
                            latency_ms: 0,
                        })
                        .collect();
                    failure.retry_in = (idempotent && f.last_status.is_some_and(|s| s >= 500))
                        .then_some(Duration::from_millis(200));
                    Execution::Failed(failure)
                }
            }
        })
    }
}

/// A broker, an engine on `policy`, an upstream and a running mesh.
pub struct Rig {
    /// Held for the test's length: the tests of this binary run one at a time (each
    /// has its own broker and bounds on time, which two cores shared by many
    /// brokers would blur).
    pub _turn: tokio::sync::MutexGuard<'static, ()>,
    pub nats: NatsServer,
    pub upstream: Arc<Upstream>,
    pub mesh: Mesh,
    pub caller: Caller,
    pub config: MeshConfig,
}

pub fn config(url: &str) -> MeshConfig {
    let mut c = MeshConfig::new(url);
    c.ack_wait = Duration::from_secs(2);
    c.max_deliver = 3;
    c
}

/// One test at a time (see [`Rig`]).
pub async fn turn() -> tokio::sync::MutexGuard<'static, ()> {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    TURN.lock().await
}

pub async fn rig(policy: &str, tools: &[&str]) -> Rig {
    let turn = turn().await;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let nats = NatsServer::start();
    let config = config(&nats.url());
    let engine = Engine::new(Policy::from_toml_str(policy).expect("policy"));
    let upstream = Upstream::new(engine.clone(), tools);
    let mesh = Mesh::start(config.clone(), None, engine, upstream.clone())
        .await
        .expect("mesh");
    wait_ready(&mesh).await;
    let caller = Caller::connect(&config, None).await.expect("caller");
    Rig {
        _turn: turn,
        nats,
        upstream,
        mesh,
        caller,
        config,
    }
}

pub async fn wait_ready(mesh: &Mesh) {
    let until = Instant::now() + Duration::from_secs(10);
    while mesh.view().status != "ok" {
        assert!(Instant::now() < until, "mesh not ready: {:?}", mesh.view());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn call(id: &str, tool: &str, extra: Value) -> Outgoing {
    let mut envelope = json!({"call_id": id, "tool": tool, "arguments": {"n": id}});
    if let (Some(e), Value::Object(more)) = (envelope.as_object_mut(), extra) {
        e.extend(more);
    }
    Outgoing {
        call_id: id.to_string(),
        tool: tool.to_string(),
        envelope,
    }
}

impl Rig {
    pub async fn publish(&self, c: &Outgoing) {
        self.caller.publish(c).await.expect("published");
    }

    pub async fn result(&self, id: &str) -> MeshResult {
        self.caller
            .result(id, Duration::from_secs(10))
            .await
            .expect("a result")
    }

    /// Every dead letter so far: (reason header, body).
    pub async fn dead_letters(&self) -> Vec<(String, Value)> {
        read_all(&self.nats.url(), &self.config.dlq_stream).await
    }
}

/// Every message of `stream` so far, with its `Toolgate-Reason` header.
pub async fn read_all(url: &str, stream: &str) -> Vec<(String, Value)> {
    let client = async_nats::connect(url).await.expect("connect");
    let js = async_nats::jetstream::new(client);
    let s = js.get_stream(stream).await.expect("stream");
    let consumer: async_nats::jetstream::consumer::PullConsumer = s
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            ack_policy: async_nats::jetstream::consumer::AckPolicy::None,
            ..Default::default()
        })
        .await
        .expect("consumer");
    let mut out = Vec::new();
    let mut batch = consumer
        .fetch()
        .max_messages(10_000)
        .messages()
        .await
        .expect("fetch");
    while let Some(Ok(m)) = batch.next().await {
        let reason = m
            .headers
            .as_ref()
            .and_then(|h| h.get(toolgate_mesh::REASON_HEADER))
            .map(|v| v.to_string())
            .unwrap_or_default();
        out.push((
            reason,
            serde_json::from_slice(&m.payload).unwrap_or(Value::Null),
        ));
    }
    out
}
