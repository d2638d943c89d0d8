//! Where the store's connections go: the Redis a URL names, or the primary that Redis Sentinel
//! names for a master set (`store.redis.sentinel`), asked again at every new connection, so a
//! failover is followed as soon as a call meets it (a broken connection, or a demoted
//! primary's `READONLY`). Every connection is checked to be to a primary before use (`ROLE`):
//! one kept from before a failover, to a primary demoted since (it still answers `PING`), is
//! dropped and replaced, never used until a restart.

use std::sync::Arc;

use redis::aio::MultiplexedConnection;
use redis::sentinel::{Sentinel, SentinelNodeConnectionInfo};

/// The sentinels of a master set.
pub struct SentinelSettings {
    /// The master set's name (`sentinel monitor NAME ...`).
    pub master: String,
    /// The sentinels, `host:port` each.
    pub nodes: Vec<String>,
    /// The sentinels' own password (`requirepass` on the sentinels), if they have one.
    pub password: Option<String>,
}

/// A way to the primary.
pub(super) enum Source {
    Url(redis::Client),
    Sentinel {
        sentinel: tokio::sync::Mutex<Sentinel>,
        master: String,
        /// How to talk to the primary: the URL's credentials, database and TLS.
        node: SentinelNodeConnectionInfo,
    },
}

impl Source {
    pub(super) fn url(info: redis::ConnectionInfo) -> redis::RedisResult<Source> {
        Ok(Source::Url(redis::Client::open(info)?))
    }

    /// The primary of `settings`' master set, reached with `info`'s credentials, database and
    /// TLS (its address is not used).
    pub(super) fn sentinel(
        info: &redis::ConnectionInfo,
        settings: &SentinelSettings,
    ) -> redis::RedisResult<Source> {
        let sentinels = settings
            .nodes
            .iter()
            .map(|node| {
                let mut url = format!("redis://{node}");
                if let Some(p) = &settings.password {
                    url = format!("redis://:{}@{node}", percent_encode(p));
                }
                redis::IntoConnectionInfo::into_connection_info(url.as_str())
                    .map(|i| i.set_tcp_settings(super::connection::tcp_settings()))
            })
            .collect::<redis::RedisResult<Vec<_>>>()?;
        let mut node = SentinelNodeConnectionInfo::default()
            .set_redis_connection_info(info.redis_settings().clone())
            .set_tcp_settings(super::connection::tcp_settings());
        if let redis::ConnectionAddr::TcpTls { insecure, .. } = info.addr() {
            node = node.set_tls_mode(if *insecure {
                redis::TlsMode::Insecure
            } else {
                redis::TlsMode::Secure
            });
        }
        Ok(Source::Sentinel {
            sentinel: tokio::sync::Mutex::new(Sentinel::build(sentinels)?),
            master: settings.master.clone(),
            node,
        })
    }

    /// A client for the primary as it is now.
    pub(super) async fn client(&self) -> redis::RedisResult<redis::Client> {
        match self {
            Source::Url(c) => Ok(c.clone()),
            Source::Sentinel {
                sentinel,
                master,
                node,
            } => {
                sentinel
                    .lock()
                    .await
                    .async_master_for(master, Some(node))
                    .await
            }
        }
    }
}

/// Percent-encode a password for a URL's user info.
fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The pool's connections, each to the primary as the source names it when it is opened.
pub(super) struct Manager(pub(super) Arc<Source>);

impl bb8::ManageConnection for Manager {
    type Connection = MultiplexedConnection;
    type Error = redis::RedisError;

    async fn connect(&self) -> Result<MultiplexedConnection, redis::RedisError> {
        self.0
            .client()
            .await?
            .get_multiplexed_async_connection()
            .await
    }

    /// A connection to a primary: `ROLE` answers `master` (a demoted one answers `slave`). A
    /// Redis that refuses `ROLE` (a managed service may) is taken as it answers `PING`.
    async fn is_valid(&self, conn: &mut MultiplexedConnection) -> Result<(), redis::RedisError> {
        let role: redis::Value = match redis::cmd("ROLE").query_async(conn).await {
            Ok(v) => v,
            Err(e) if e.code().is_some() && e.code() != Some("READONLY") => {
                return redis::cmd("PING").query_async::<()>(conn).await;
            }
            Err(e) => return Err(e),
        };
        let first = match &role {
            redis::Value::Array(v) => v.first(),
            _ => None,
        };
        match first {
            Some(redis::Value::BulkString(b)) if b == b"master" => Ok(()),
            _ => Err(redis::RedisError::from((
                redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly),
                "not a primary (ROLE)",
            ))),
        }
    }

    fn has_broken(&self, _: &mut MultiplexedConnection) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_passwords_are_encoded_for_their_urls() {
        assert_eq!(percent_encode("s3cret"), "s3cret");
        assert_eq!(percent_encode("a b@c:d/%"), "a%20b%40c%3Ad%2F%25");
    }
}
