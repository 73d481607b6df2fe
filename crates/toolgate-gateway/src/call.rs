//! `toolgate call --mesh URL TOOL --args JSON [--tenant T] [--key K] [--deadline 5s]
//! [--wait]`: publish one call on the event mesh and, with `--wait`, print its result.
//!
//! Exit codes: 0 published (with `--wait`: the outcome was `success`); 1 the result
//! is a failure; 2 the call could not be published or no result came in time; 64 bad
//! arguments.

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use toolgate_mesh::client::{Caller, Outgoing};
use toolgate_mesh::MeshConfig;

/// Exit code: the result is a failure.
pub const EXIT_FAILED: u8 = 1;
/// Exit code: nothing could be published, or no result came in time.
pub const EXIT_UNREACHABLE: u8 = 2;
/// Exit code: the arguments are not usable.
pub const EXIT_USAGE: u8 = 64;

/// What `toolgate call` was asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    /// The NATS URL.
    pub mesh: String,
    /// The tool.
    pub tool: String,
    /// The arguments, a JSON object.
    pub args: String,
    /// The tenant.
    pub tenant: Option<String>,
    /// The idempotency key.
    pub key: Option<String>,
    /// The deadline, from now.
    pub deadline: Option<Duration>,
    /// Wait for the result and print it.
    pub wait: bool,
    /// How long to wait for the result.
    pub timeout: Duration,
    /// The call id (default: random).
    pub call_id: Option<String>,
    /// The results stream's name.
    pub results_stream: String,
}

/// Publishes the call (and waits for its result).
pub fn run(opts: Options) -> ExitCode {
    let call = match envelope(&opts) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("toolgate call: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("toolgate call: cannot start a runtime: {e}");
            return ExitCode::from(EXIT_UNREACHABLE);
        }
    };
    rt.block_on(publish(opts, call))
}

async fn publish(opts: Options, call: Outgoing) -> ExitCode {
    let mut config = MeshConfig::new(opts.mesh.clone());
    config.results_stream = opts.results_stream.clone();
    let caller = match Caller::connect(&config, None).await {
        Ok(c) => c,
        Err(e) => return unreachable(&e),
    };
    let seq = match caller.publish(&call).await {
        Ok(s) => s,
        Err(e) => return unreachable(&e),
    };
    if !opts.wait {
        println!(
            "{}",
            json!({"call_id": call.call_id, "tool": call.tool, "sequence": seq})
        );
        return ExitCode::SUCCESS;
    }
    match caller.result(&call.call_id, opts.timeout).await {
        Ok(r) => {
            println!("{}", serde_json::to_string(&r).unwrap_or_default());
            if r.outcome == "success" {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(EXIT_FAILED)
            }
        }
        Err(e) => unreachable(&e),
    }
}

fn unreachable(e: &str) -> ExitCode {
    eprintln!("toolgate call: {e}");
    ExitCode::from(EXIT_UNREACHABLE)
}

/// The call's envelope, checked as the gateway will check it.
fn envelope(opts: &Options) -> Result<Outgoing, String> {
    let args: Value =
        serde_json::from_str(&opts.args).map_err(|e| format!("--args: not JSON: {e}"))?;
    let call_id = opts.call_id.clone().unwrap_or_else(new_id);
    let mut envelope = json!({"call_id": call_id, "tool": opts.tool, "arguments": args});
    if let Some(t) = &opts.tenant {
        envelope["tenant"] = json!(t);
    }
    if let Some(k) = &opts.key {
        envelope["idempotency_key"] = json!(k);
    }
    if let Some(d) = opts.deadline {
        let at = SystemTime::now() + d;
        let ms = at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
        envelope["deadline"] = json!(u64::try_from(ms).unwrap_or(u64::MAX));
    }
    // The gateway refuses what this refuses; say so before publishing.
    toolgate_mesh::envelope::MeshCall::parse(envelope.to_string().as_bytes())
        .map_err(|u| u.message)?;
    Ok(Outgoing {
        call_id,
        tool: opts.tool.clone(),
        envelope,
    })
}

/// 32 random hex digits.
fn new_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(args: &str) -> Options {
        Options {
            mesh: "nats://127.0.0.1:1".into(),
            tool: "mcp:s/t".into(),
            args: args.into(),
            tenant: Some("acme".into()),
            key: Some("k".into()),
            deadline: Some(Duration::from_secs(5)),
            wait: false,
            timeout: Duration::from_secs(1),
            call_id: None,
            results_stream: "TOOLGATE_RESULTS".into(),
        }
    }

    #[test]
    fn the_envelope_carries_every_option_and_bad_args_are_refused_before_publishing() {
        let c = envelope(&opts("{\"id\": 1}")).expect("valid");
        assert_eq!(c.call_id.len(), 32);
        assert_eq!(c.envelope["tenant"], "acme");
        assert_eq!(c.envelope["idempotency_key"], "k");
        assert!(c.envelope["deadline"].as_u64().is_some());
        let e = envelope(&opts("[1]")).expect_err("not an object");
        assert!(e.contains("arguments: expected a JSON object"), "{e}");
        let e = envelope(&opts("{")).expect_err("not JSON");
        assert!(e.starts_with("--args: not JSON"), "{e}");
    }
}
