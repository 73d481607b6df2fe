//! Connecting to NATS: credentials, time-outs, and reconnecting for ever with a
//! capped backoff (a gateway outlives its broker's restarts).

use std::time::Duration;

use async_nats::{Client, ConnectOptions};

use crate::config::{Credentials, MeshConfig};

/// The longest pause between two reconnection attempts.
pub(crate) const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(5);

/// A client for `url` (or the config's) that starts connecting now and keeps
/// trying in the background: it never fails for an unreachable server.
///
/// # Errors
///
/// When there is no URL, or the credentials file cannot be read.
pub(crate) async fn client(c: &MeshConfig, url: Option<&str>) -> Result<Client, String> {
    let url = url
        .or(c.url.as_deref())
        .ok_or("no NATS URL: pass --mesh nats://HOST:PORT or set [mesh] url")?;
    let mut opts = ConnectOptions::new()
        .name("toolgate")
        .connection_timeout(c.connect_timeout)
        .request_timeout(Some(c.connect_timeout))
        .retry_on_initial_connect()
        .max_reconnects(None)
        .reconnect_delay_callback(|attempt| {
            let ms = 100u64.saturating_mul(1 << attempt.min(6));
            Duration::from_millis(ms).min(MAX_RECONNECT_DELAY)
        });
    opts = match &c.credentials {
        Credentials::None => opts,
        Credentials::Token(t) => opts.token(t.clone()),
        Credentials::UserPassword(u, p) => opts.user_and_password(u.clone(), p.clone()),
        Credentials::File(path) => opts
            .credentials_file(path)
            .await
            .map_err(|e| format!("mesh.credentials: cannot read {}: {e}", path.display()))?,
    };
    let addrs: Vec<&str> = url.split(',').map(str::trim).collect();
    let servers: Vec<async_nats::ServerAddr> = addrs
        .iter()
        .map(|a| a.parse())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", crate::config::redact(url)))?;
    opts.connect(servers)
        .await
        .map_err(|e| format!("{}: {e}", crate::config::redact(url)))
}
